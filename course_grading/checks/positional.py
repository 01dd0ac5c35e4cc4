"""Hidden checks for 05_positional_encoding: sinusoidal_positional_encoding, PositionalEncoding.

They add, to the visible checks of ``course_utils.checks.positional``: sizes from 1 × 8 to
1000 × 128 and d_model = 512, a table that needs no gradient and stays in [-1, 1]; for the
module, a sequence of exactly max_len and of one position, the default max_len, dropout in
training only and on the sum, float64 (a table built in float32 and cast with ``.double()`` is
correct), gradients, devices.
"""

from __future__ import annotations

import numpy as np
import torch

from course_grading.reference import positional as ref
from course_utils.checks.kit import Check, generator, torch_isfinite
from course_utils.checks.positional import TABLE_MISTAKES, add, compare_added, diagnose_table, table_buffer
from course_utils.checks.torch_parts import near

from ._device import second_devices

ASSIGNMENT = "05_positional_encoding"
_FORBIDDEN = [
    "course_grading.reference.positional.sinusoidal_positional_encoding",
    "course_grading.reference.positional.PositionalEncoding",
    "course_grading.reference.positional.PositionalEncoding.forward",
]


def table(
    max_len, d, *, base=10000.0, start=0, exponent="2i", layout="interleaved", multiply=False
) -> torch.Tensor:
    """The sinusoidal table in float64, with one known mistake switched on."""
    pos = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    cols = torch.arange(d, dtype=torch.float64)  # column index j
    pair = torch.div(cols, 2, rounding_mode="floor")  # i, with j = 2i or 2i + 1
    power = {"2i": 2 * pair / d, "i": pair / d, "j": cols / d, "2j": 2 * cols / d}[exponent]
    freq = base**power if multiply else 1.0 / base**power
    angle = pos * freq  # (max_len, d)
    even = cols % 2 == 0
    if layout == "swapped":
        return torch.where(even, torch.cos(angle), torch.sin(angle))
    if layout == "blocks":  # [sin of every pair | cos of every pair]
        half = torch.arange(0, d, 2, dtype=torch.float64)
        a = pos / base ** (half / d)
        return torch.cat([torch.sin(a), torch.cos(a)], dim=-1)[:, :d]
    if layout == "sin_only":
        return torch.sin(angle)
    return torch.where(even, torch.sin(angle), torch.cos(angle))


_MISTAKE_ARGS = {
    "swapped": dict(layout="swapped"),
    "start_at_1": dict(start=1),
    "exponent_i": dict(exponent="i"),
    "exponent_j": dict(exponent="j"),
    "exponent_2j": dict(exponent="2j"),
    "base_1000": dict(base=1000.0),
    "multiplied": dict(multiply=True),
    "blocks": dict(layout="blocks"),
    "sin_only": dict(layout="sin_only"),
}
assert set(_MISTAKE_ARGS) == set(TABLE_MISTAKES)


def exact(max_len: int, d: int) -> torch.Tensor:
    """The reference's table, computed and returned in float64."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return ref.sinusoidal_positional_encoding(max_len, d)
    finally:
        torch.set_default_dtype(previous)


def mistakes(max_len: int, d: int) -> dict[str, torch.Tensor]:
    return {key: table(max_len, d, **kwargs) for key, kwargs in _MISTAKE_ARGS.items()}


def expected_outputs() -> dict[str, np.ndarray]:
    """The tables the visible checks compare with: right and mistaken, float64."""
    out = {}
    for max_len, d in ((4, 4), (50, 16)):
        size = f"{max_len}x{d}"
        out[size] = exact(max_len, d).numpy()
        for key, wrong in mistakes(max_len, d).items():
            out[f"{size}/{key}"] = wrong.numpy()
    return out


def check_sinusoidal_positional_encoding(sinusoidal_positional_encoding) -> None:
    c = Check("sinusoidal_positional_encoding", _FORBIDDEN, hidden=True)
    for max_len, d in ((1, 8), (7, 2), (100, 64), (1000, 128), (3, 512)):
        pe = c.call(sinusoidal_positional_encoding, max_len, d)
        c.that(isinstance(pe, torch.Tensor), f"should return a torch tensor, got {type(pe).__name__}.")
        c.shape(
            pe,
            (max_len, d),
            f"sinusoidal_positional_encoding({max_len}, {d})",
            "Read the sizes from the arguments.",
        )
        c.that(
            pe.dtype == torch.get_default_dtype(),
            f"the table is {pe.dtype} for ({max_len}, {d}); return torch's default dtype.",
        )
        diagnose_table(
            c,
            pe.double(),
            exact(max_len, d),
            mistakes(max_len, d),
            max_len,
            f"{max_len} positions, d_model = {d}",
        )
    c.ok("sizes from 1 × 8 to 1000 × 128, and d_model = 512")
    pe = c.call(sinusoidal_positional_encoding, 200, 32)
    c.that(not pe.requires_grad, "the table should not require gradients: it is fixed.")
    c.that(
        bool(torch_isfinite(pe).all()) and bool((pe.abs() <= 1 + 1e-6).all()),
        "every entry is a sine or a cosine, so it lies in [-1, 1].",
        "entries in [-1, 1]",
    )
    c.done()


def check_positional_encoding(PositionalEncoding) -> None:
    c = Check("PositionalEncoding", _FORBIDDEN, hidden=True)
    g = generator(31)
    m = c.build(PositionalEncoding, 16, max_len=50)
    table_buffer(c, m, 50, 16)
    t50, wrong50 = exact(51, 16), mistakes(51, 16)
    for training, shape, what, passed in (
        (False, (3, 50, 16), "a sequence of exactly max_len", None),
        (False, (1, 1, 16), "a single position", "seq = max_len and seq = 1"),
        (
            True,
            (4, 9, 16),
            "training mode, default dropout=0.0",
            "no dropout by default, even in training mode",
        ),
    ):
        m.train(training)
        compare_added(c, m, torch.randn(*shape, generator=g), t50, what, wrong50, passed=passed)
    m6 = c.build(PositionalEncoding, 6)
    m6.eval()
    table_buffer(c, m6, 5000, 6, "PositionalEncoding(6), whose max_len should default to 5000")
    compare_added(
        c,
        m6,
        torch.randn(2, 600, 6, generator=g),
        exact(601, 6),
        "default max_len, 600 positions",
        mistakes(601, 6),
        passed="max_len defaults to 5000",
    )
    # .double() converts buffers (not plain attributes): float64 in, float64 out
    m64 = c.build(PositionalEncoding, 16, max_len=50).double().eval()
    x64 = torch.randn(2, 5, 16, generator=g, dtype=torch.float64)
    out = compare_added(c, m64, x64, t50, "float64 module and input", wrong50)
    c.that(out.dtype == torch.float64, "float64 in should give float64 out.", "float64")
    # dropout after the addition, only in training
    md = c.build(PositionalEncoding, 16, max_len=50, dropout=0.5)
    md.eval()
    xd = torch.randn(3, 8, 16, generator=g)
    compare_added(
        c, md, xd, t50, "dropout=0.5 in eval mode", wrong50, passed="dropout does nothing in eval mode"
    )
    md.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        out = add(c, md, xd, "dropout=0.5 in training mode").double()
    full = xd.double() + t50[:8]
    dropped = out.abs() < 1e-12
    if not dropped.any() and not near(out, full, 1e-6, 1e-6):
        c.fail(
            "with dropout=0.5 in training mode the output changes but no entry is 0: "
            "dropout seems to act on only one part of the sum. Apply it to x + PE."
        )
    c.that(
        bool(dropped.any()),
        "with dropout=0.5 in training mode nothing was dropped: keep "
        "an nn.Dropout(dropout) and apply it in forward.",
    )
    kept_ok = near(out[~dropped], 2 * full[~dropped], 1e-4, 1e-4)
    c.that(
        kept_ok,
        "with dropout, every entry of the output should be either 0 or "
        "2 × (x + PE) for p = 0.5: apply dropout to the sum x + PE, not to the table "
        "or to x alone.",
        "dropout applies to x + PE in training mode",
    )
    # gradients flow to x, not to the table
    xg = torch.randn(2, 4, 16, generator=g, requires_grad=True)
    add(c, m.eval(), xg, "backward").sum().backward()
    c.that(
        xg.grad is not None and bool((xg.grad == 1).all()),
        "the gradient with respect to x should be 1 everywhere (the output is x plus a constant).",
        "gradients flow to x, none to the table",
    )
    x = torch.randn(2, 7, 16, generator=g)
    # on a second device: the table must move with the module (a buffer) and be the one used
    for dev in second_devices():
        mc = dev.module(c.build(PositionalEncoding, 16, max_len=50).eval())
        c.close(
            dev.call(c, mc, dev.tensor(x)),
            x.double() + t50[:7],
            f"wrong values on {dev}.",
            atol=1e-4,
            passed=f"runs on {dev}",
        )
    c.done()
