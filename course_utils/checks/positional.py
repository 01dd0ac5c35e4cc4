"""Visible checks for 05_positional_encoding: sinusoidal_positional_encoding, PositionalEncoding.

No built-in computes the sinusoidal table, so the expected tables come stored
(``course_utils/data/expected``, computed in float64), together with the tables that the usual
mistakes give, to name the one that matches. Tables are compared at a tolerance that grows with
the largest position: a float32 angle pos / 10000^(2i/d) near 1000 carries ~1e-4 of rounding,
and a table built in float32 is correct.
"""

from __future__ import annotations

import torch
from torch import nn

from ._core import Check, CheckFailed, generator, stored, torch_equal
from .torch_parts import near

ASSIGNMENT = "05_positional_encoding"


def tolerance(max_len: int) -> float:
    return 1e-5 + 3e-7 * max_len


# the usual mistakes: the key names the table stored as "<size>/<key>"
TABLE_MISTAKES = {
    "swapped": "sin and cos are swapped: the even columns (0, 2, 4, …) hold the sines and the "
    "odd columns the cosines.",
    "start_at_1": "the rows are shifted by one: row 0 must be position 0 (sin 0 = 0, cos 0 = 1), "
    "so positions start at 0, not 1.",
    "exponent_i": "the frequencies fall off too slowly: in the exponent 2i/d_model, i counts the "
    "sin/cos PAIRS, so the exponent grows by 2/d_model from one pair to the next.",
    "exponent_j": "columns 2i and 2i+1 must share one frequency: the cosine in column 2i+1 uses "
    "the same angle as the sine in column 2i. Yours gives each column its own "
    "exponent.",
    "exponent_2j": "the exponent uses the column index where it should use the pair index: for "
    "columns 2i and 2i+1 the exponent is 2i/d_model.",
    "base_1000": "the wavelengths are 10 times too short at the slow end: check the base of the "
    "power (the paper's value, not 1000).",
    "multiplied": "the angles grow with i instead of shrinking: pos is DIVIDED by base^(2i/d_model).",
    "blocks": "that is the [all sines | all cosines] layout some libraries use; here (and in the "
    "paper) they are interleaved: sin in column 2i, cos in column 2i+1.",
    "sin_only": "the odd columns should be cosines.",
}


def stored_tables(size: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The right table of ``size`` ("50x16") and the mistaken ones, float64."""
    right = torch.from_numpy(stored(ASSIGNMENT, size))
    return right, {key: torch.from_numpy(stored(ASSIGNMENT, f"{size}/{key}")) for key in TABLE_MISTAKES}


def diagnose_table(c: Check, got, want, mistakes: dict, max_len: int, what: str) -> None:
    """Pass if ``got`` is the table ``want``; else name the mistake whose table it is."""
    if near(got, want, tolerance(max_len), 1e-5):
        return
    for key, wrong in mistakes.items():
        if near(got, wrong, 1e-4 + 3e-7 * max_len, 1e-4):
            c.fail(f"{what}: {TABLE_MISTAKES[key]}")
    sines, cosines = got[:, 0::2], got[:, 1::2]  # (max_len, d_model / 2) each, one per pair
    if (
        sines.shape[1] > 1
        and near(sines, sines[:, :1].expand_as(sines), 1e-6, 1e-6)
        and near(cosines, cosines[:, :1].expand_as(cosines), 1e-6, 1e-6)
    ):
        c.fail(
            f"{what}: every sin/cos pair turns at the same rate, as if the exponent 2i/d_model "
            "were 0 for every pair: integer division (//) or integer arithmetic drops its "
            "fraction. Keep it in floating point."
        )
    c.fail(
        f"{what}: wrong values (tolerance {tolerance(max_len):.1g}). PE[pos, 2i] = "
        "sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model)), "
        "positions 0 … max_len-1."
    )


def check_sinusoidal_positional_encoding(sinusoidal_positional_encoding) -> None:
    c = Check("sinusoidal_positional_encoding")
    pe = c.call(sinusoidal_positional_encoding, 4, 4)
    c.that(
        isinstance(pe, torch.Tensor),
        f"should return a torch tensor, got {type(pe).__name__} "
        "(build it with torch, or convert with torch.tensor).",
    )
    c.shape(
        pe,
        (4, 4),
        "sinusoidal_positional_encoding(4, 4)",
        "One row per position, one column per feature: (max_len, d_model).",
    )
    c.that(
        pe.dtype == torch.get_default_dtype(),
        f"the table is {pe.dtype}; return "
        f"{torch.get_default_dtype()} (torch's default dtype) so that adding it to float32 "
        "embeddings keeps them float32. A table built with NumPy or math is float64: convert "
        "it with .float() or build it with torch.",
        f"a (4, 4) {pe.dtype} tensor",
    )
    pe50 = c.call(sinusoidal_positional_encoding, 50, 16)
    c.shape(
        pe50,
        (50, 16),
        "sinusoidal_positional_encoding(50, 16)",
        "The first argument is the number of positions, the second d_model.",
    )
    diagnose_table(c, pe.double(), *stored_tables("4x4"), 4, "d_model = 4")
    c.ok("d_model = 4: row 1 is the worked example's [0.8415, 0.5403, 0.0100, 0.9999]")
    diagnose_table(c, pe50.double(), *stored_tables("50x16"), 50, "50 positions, d_model = 16")
    c.ok(f"50 positions, d_model = 16 (tolerance {tolerance(50):.1g})")
    c.done()


# -- PositionalEncoding -------------------------------------------------------------------------
def table_buffer(c: Check, m: nn.Module, max_len: int, d: int, built: str = ""):
    """The module's (max_len, d) table, which must be a buffer."""
    params = [(n, p) for n, p in m.named_parameters()]
    if params:
        name = params[0][0]
        c.fail(
            f"the module has a trainable parameter `{name}` {tuple(params[0][1].shape)}: the "
            "sinusoidal table is fixed, so register it as a buffer (it then follows "
            ".to(device) but gets no gradient and no optimiser updates)."
        )
    found = [(n, b) for n, b in m.named_buffers() if b.numel() == max_len * d]
    if not found:
        plain = [n for n, v in vars(m).items() if isinstance(v, torch.Tensor)]
        extra = (
            f" `{plain[0]}` is a plain tensor attribute: it would stay on the CPU when the "
            "model moves to a GPU."
            if plain
            else ""
        )
        built = built or f"PositionalEncoding({d}, max_len={max_len})"
        c.fail(
            f"no buffer of {max_len} × {d} numbers found for {built}: compute the whole "
            "table in __init__ and register it with self.register_buffer." + extra
        )
    name, buf = found[0]
    c.that(not buf.requires_grad, f"the buffer `{name}` requires gradients; it is fixed.")
    return name, buf


def add(c: Check, m, x, what: str):
    """The module's output for ``x``, which must keep its shape."""
    try:
        out = c.call(m, x)
    except CheckFailed as exc:
        text = str(exc)
        if "very thing" in text or "not implemented" in text:
            raise
        c.fail(
            f"{what}: {text.split(': ', 1)[-1]} With x of shape {tuple(x.shape)}, add the "
            f"rows for positions 0 … {x.shape[1] - 1} only: the table has max_len rows, the "
            "sequence fewer (and the batch axis is not the sequence axis)."
        )
    c.that(isinstance(out, torch.Tensor), f"forward should return a tensor, got {type(out).__name__}.")
    c.shape(
        out,
        tuple(x.shape),
        f"the output for x of shape {tuple(x.shape)} ({what})",
        "Adding positions keeps the shape (b, seq, d_model): slice the table to the "
        "sequence length and let it broadcast over the batch.",
    )
    c.that(
        out.dtype == x.dtype,
        f"the output is {out.dtype} for a {x.dtype} input ({what}): a "
        "table built with NumPy or math is float64 and turns float32 embeddings into float64 "
        "ones. Build it in torch's default dtype (sinusoidal_positional_encoding does) and "
        "register it as a buffer, so that .double() converts it with the module.",
    )
    return out


def compare_added(
    c: Check, m, x, table, what: str, mistakes: dict | None = None, passed: str | None = None, atol=None
):
    """The module's output for ``x`` against x + table[:seq] (``table``: float64, at least
    seq + 1 rows); ``mistakes``: mistaken tables of the same size, to name a wrong table."""
    b, s, d = x.shape
    want = x.double() + table[:s]
    out = add(c, m, x, what)
    tol = atol or tolerance(s)
    if not near(out, want, tol, 1e-5):
        candidates = [
            (x.double(), "the output equals the input: the positions are never added."),
            (table[:s].expand(b, s, d), "the output is the table alone: add it to x."),
            (x.double() + table[1 : s + 1], "the rows are off by one: position 0 is row 0."),
            (x.double() * table[:s], "the table should be added to x, not multiplied."),
        ]
        for cand, message in candidates:
            if cand.shape == want.shape and near(out, cand, 1e-4, 1e-4):
                c.fail(f"{what}: {message}")
        added = out.double() - x.double()
        if any(near(added, wrong[:s], 1e-4, 1e-4) for wrong in (mistakes or {}).values()):
            c.fail(
                f"{what}: the added table is wrong: make sure your sinusoidal_positional_"
                "encoding passes its own tests, and that the module uses it."
            )
        c.fail(f"{what}: wrong values (tolerance {tol:.1g}); expected x + PE[:seq].")
    if passed:
        c.ok(passed)
    return out


def check_positional_encoding(PositionalEncoding) -> None:
    c = Check("PositionalEncoding")
    m = c.build(PositionalEncoding, 16, max_len=50)
    name, _ = table_buffer(c, m, 50, 16)
    c.ok(f"the table is a buffer (`{name}`), not a parameter")
    m.eval()
    table, mistakes = stored_tables("50x16")
    x = torch.randn(2, 7, 16, generator=generator(30))
    before = x.clone()
    compare_added(
        c, m, x, table, "x of shape (2, 7, 16), max_len=50", mistakes, passed="x + PE[:7] for a batch of 2"
    )
    c.that(
        torch_equal(x, before),
        "forward changed its input in place (x += …): return a new "
        "tensor, x + …, so the caller's embeddings stay as they were.",
        "leaves x unchanged",
    )
    m4 = c.build(PositionalEncoding, 4)
    table_buffer(
        c,
        m4,
        5000,
        4,
        "PositionalEncoding(4): the signature is __init__(self, "
        "d_model, max_len=5000, dropout=0.0), so max_len defaults to 5000",
    )
    c.ok("max_len defaults to 5000")
    # dropout acts on the sum x + PE, in training mode only
    md = c.build(PositionalEncoding, 16, max_len=50, dropout=0.5)
    xd = torch.randn(4, 6, 16, generator=generator(32))
    full = xd.double() + table[:6]
    md.eval()
    compare_added(c, md, xd, table, "dropout=0.5 in eval mode", mistakes)
    md.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        out = add(c, md, xd, "dropout=0.5 in training mode").double()
    dropped = out.abs() < 1e-12
    if not bool(dropped.any()):
        c.that(
            near(out, full, 1e-6, 1e-6),
            "with dropout=0.5 in training mode the output changes but no entry is 0: dropout "
            "seems to act on one part of the sum only. Apply it to x + PE.",
        )
        c.fail(
            "with dropout=0.5 in training mode nothing was dropped: keep an "
            "nn.Dropout(dropout) and apply it in forward (the module's train/eval mode "
            "switches it on and off)."
        )
    c.that(
        near(out[~dropped], 2 * full[~dropped], 1e-4, 1e-4),
        "with dropout p = 0.5 in training mode, every entry of the output should be 0 or "
        "2 × (x + PE): apply dropout to the sum x + PE, not to the table or to x alone.",
        "dropout on x + PE in training mode, none in eval mode",
    )
    c.done()
