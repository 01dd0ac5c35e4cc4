"""Checks for 05_positional_encoding: sinusoidal_positional_encoding and PositionalEncoding.

Tables are compared with the reference (computed in float64) at a tolerance that grows with the
largest position: a float32 angle of pos / 10000^(2i/d) near 1000 carries ~1e-4 of rounding.
When the numbers are off the check tries the usual mistakes and names the one that matches.
"""
from __future__ import annotations

import torch
from torch import nn

from ..device import get_device
from course_grading.reference import positional as ref
from ._core import Check, CheckFailed
from .multi_head import _near

_PE_BUILTINS = [
    "course_grading.reference.positional.sinusoidal_positional_encoding",
    "course_grading.reference.positional.PositionalEncoding.forward",
]


def _tol(max_len: int) -> float:
    return 1e-5 + 3e-7 * max_len


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _table(max_len, d, *, base=10000.0, start=0, exponent="2i", layout="interleaved",
           multiply=False) -> torch.Tensor:
    """The sinusoidal table with one known mistake switched on (float64)."""
    pos = torch.arange(start, start + max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    cols = torch.arange(d, dtype=torch.float64)  # column index j
    pair = torch.div(cols, 2, rounding_mode="floor")  # i, with j = 2i or 2i + 1
    power = {"2i": 2 * pair / d, "i": pair / d, "j": cols / d, "2j": 2 * cols / d}[exponent]
    freq = base ** power if multiply else 1.0 / base ** power
    angle = pos * freq  # (max_len, d)
    even = (cols % 2 == 0)
    if layout == "swapped":
        return torch.where(even, torch.cos(angle), torch.sin(angle))
    if layout == "blocks":  # [sin of every pair | cos of every pair]
        half = torch.arange(0, d, 2, dtype=torch.float64)
        a = pos / base ** (half / d)
        return torch.cat([torch.sin(a), torch.cos(a)], dim=-1)[:, :d]
    if layout == "sin_only":
        return torch.sin(angle)
    return torch.where(even, torch.sin(angle), torch.cos(angle))


_TABLE_MISTAKES = [
    (dict(layout="swapped"), "sin and cos are swapped: the even columns (0, 2, 4, …) hold the "
     "sines and the odd columns the cosines."),
    (dict(start=1), "the rows are shifted by one: row 0 must be position 0 (sin 0 = 0, cos 0 = 1), "
     "so positions start at 0, not 1."),
    (dict(exponent="i"), "the frequencies fall off too slowly: in the exponent 2i/d_model, i "
     "counts the sin/cos PAIRS, so the exponent grows by 2/d_model from one pair to the next."),
    (dict(exponent="j"), "columns 2i and 2i+1 must share one frequency: the cosine in column 2i+1 "
     "uses the same angle as the sine in column 2i. Yours gives each column its own exponent."),
    (dict(exponent="2j"), "the exponent uses the column index where it should use the pair "
     "index: for columns 2i and 2i+1 the exponent is 2i/d_model."),
    (dict(base=1000.0), "the wavelengths are 10 times too short at the slow end: check the base "
     "of the power (the paper's value, not 1000)."),
    (dict(multiply=True), "the angles grow with i instead of shrinking: pos is DIVIDED by "
     "base^(2i/d_model)."),
    (dict(layout="blocks"), "that is the [all sines | all cosines] layout some libraries use; "
     "here (and in the paper) they are interleaved: sin in column 2i, cos in column 2i+1."),
    (dict(layout="sin_only"), "the odd columns should be cosines."),
]


def _diagnose_table(c: Check, got, max_len: int, d: int, what: str) -> None:
    want = ref.sinusoidal_positional_encoding(max_len, d).double()
    if _near(got, want, _tol(max_len), 1e-5):
        return
    for kwargs, message in _TABLE_MISTAKES:
        if _near(got, _table(max_len, d, **kwargs), 1e-4 + 3e-7 * max_len, 1e-4):
            c.fail(f"{what}: {message}")
    c.fail(f"{what}: wrong values (tolerance {_tol(max_len):.1g}). PE[pos, 2i] = "
           "sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d_model)), "
           "positions 0 … max_len-1.")


def check_sinusoidal_positional_encoding(sinusoidal_positional_encoding,
                                         hidden: bool = False) -> None:
    c = Check("sinusoidal_positional_encoding", _PE_BUILTINS, hidden)
    pe = c.call(sinusoidal_positional_encoding, 4, 4)
    c.that(isinstance(pe, torch.Tensor), f"should return a torch tensor, got {type(pe).__name__} "
           "(build it with torch, or convert with torch.tensor).")
    c.shape(pe, (4, 4), "sinusoidal_positional_encoding(4, 4)",
            "One row per position, one column per feature: (max_len, d_model).")
    c.that(pe.dtype == torch.get_default_dtype(), f"the table is {pe.dtype}; return "
           f"{torch.get_default_dtype()} (torch's default dtype) so that adding it to float32 "
           "embeddings keeps them float32. A table built with NumPy or math is float64: convert "
           "it with .float() or build it with torch.", f"a (4, 4) {pe.dtype} tensor")
    pe50 = c.call(sinusoidal_positional_encoding, 50, 16)
    c.shape(pe50, (50, 16), "sinusoidal_positional_encoding(50, 16)",
            "The first argument is the number of positions, the second d_model.")
    _diagnose_table(c, pe.double(), 4, 4, "d_model = 4")
    c.ok("d_model = 4: row 1 is the worked example's [0.8415, 0.5403, 0.0100, 0.9999]")
    _diagnose_table(c, pe50.double(), 50, 16, "50 positions, d_model = 16")
    c.ok(f"50 positions, d_model = 16 (tolerance {_tol(50):.1g})")
    if hidden:
        for max_len, d in ((1, 8), (7, 2), (100, 64), (1000, 128), (3, 512)):
            pe = c.call(sinusoidal_positional_encoding, max_len, d)
            c.shape(pe, (max_len, d), f"sinusoidal_positional_encoding({max_len}, {d})",
                    "Read the sizes from the arguments.")
            c.that(pe.dtype == torch.get_default_dtype(), f"the table is {pe.dtype} for "
                   f"({max_len}, {d}); return torch's default dtype.")
            _diagnose_table(c, pe.double(), max_len, d, f"{max_len} positions, d_model = {d}")
        c.ok("sizes from 1 × 8 to 1000 × 128, and d_model = 512")
        pe = c.call(sinusoidal_positional_encoding, 200, 32)
        c.that(not pe.requires_grad, "the table should not require gradients: it is fixed.")
        c.that(bool(torch.isfinite(pe).all()) and bool((pe.abs() <= 1 + 1e-6).all()),
               "every entry is a sine or a cosine, so it lies in [-1, 1].", "entries in [-1, 1]")
    c.done()


# -- PositionalEncoding -------------------------------------------------------------------------

def _build(c: Check, cls, *args, **kwargs) -> nn.Module:
    for klass in getattr(cls, "__mro__", ()):
        if klass is ref.PositionalEncoding:
            c._forbidden_failure("course_grading.reference.positional.PositionalEncoding")
    m = c.call(cls, *args, **kwargs)
    c.that(isinstance(m, nn.Module), "PositionalEncoding(...) should create an nn.Module "
           "(class PositionalEncoding(nn.Module), with super().__init__() first), got "
           f"{type(m).__name__}.")
    return m


def _table_buffer(c: Check, m: nn.Module, max_len: int, d: int, built: str = ""):
    params = [(n, p) for n, p in m.named_parameters()]
    if params:
        name = params[0][0]
        c.fail(f"the module has a trainable parameter `{name}` {tuple(params[0][1].shape)}: the "
               "sinusoidal table is fixed, so register it as a buffer (it then follows "
               ".to(device) but gets no gradient and no optimiser updates).")
    found = [(n, b) for n, b in m.named_buffers() if b.numel() == max_len * d]
    if not found:
        plain = [n for n, v in vars(m).items() if isinstance(v, torch.Tensor)]
        extra = (f" `{plain[0]}` is a plain tensor attribute: it would stay on the CPU when the "
                 "model moves to a GPU." if plain else "")
        built = built or f"PositionalEncoding({d}, max_len={max_len})"
        c.fail(f"no buffer of {max_len} × {d} numbers found for {built}: compute the whole "
               "table in __init__ and register it with self.register_buffer." + extra)
    name, buf = found[0]
    c.that(not buf.requires_grad, f"the buffer `{name}` requires gradients; it is fixed.")
    return name, buf


def _add(c: Check, m, x, what: str):
    try:
        out = c.call(m, x)
    except CheckFailed as exc:
        text = str(exc)
        if "very thing" in text or "not implemented" in text:
            raise
        c.fail(f"{what}: {text.split(': ', 1)[-1]} With x of shape {tuple(x.shape)}, add the "
               f"rows for positions 0 … {x.shape[1] - 1} only: the table has max_len rows, the "
               "sequence fewer (and the batch axis is not the sequence axis).")
    c.that(isinstance(out, torch.Tensor),
           f"forward should return a tensor, got {type(out).__name__}.")
    c.shape(out, tuple(x.shape), f"the output for x of shape {tuple(x.shape)} ({what})",
            "Adding positions keeps the shape (b, seq, d_model): slice the table to the "
            "sequence length and let it broadcast over the batch.")
    return out


def _compare(c: Check, m, x, what: str, passed: str | None = None, atol=None):
    b, s, d = x.shape
    table = ref.sinusoidal_positional_encoding(s + 1, d).double()
    want = x.double() + table[:s]
    out = _add(c, m, x, what)
    tol = atol or _tol(s)
    if not _near(out, want, tol, 1e-5):
        mistakes = [
            (x.double(), "the output equals the input: the positions are never added."),
            (table[:s].expand(b, s, d), "the output is the table alone: add it to x."),
            (x.double() + table[1:s + 1], "the rows are off by one: position 0 is row 0."),
            (x.double() * table[:s], "the table should be added to x, not multiplied."),
        ]
        for cand, message in mistakes:
            if _near(out, cand, 1e-4, 1e-4):
                c.fail(f"{what}: {message}")
        added = out - x.double()
        if any(_near(added, _table(s, d, **kw), 1e-4, 1e-4) for kw, _ in _TABLE_MISTAKES):
            c.fail(f"{what}: the added table is wrong: make sure your sinusoidal_positional_"
                   "encoding passes its own tests, and that the module uses it.")
        c.fail(f"{what}: wrong values (tolerance {tol:.1g}); expected x + PE[:seq].")
    if passed:
        c.ok(passed)
    return out


def check_positional_encoding(PositionalEncoding, hidden: bool = False) -> None:
    c = Check("PositionalEncoding", _PE_BUILTINS, hidden)
    m = _build(c, PositionalEncoding, 16, max_len=50)
    name, _ = _table_buffer(c, m, 50, 16)
    c.ok(f"the table is a buffer (`{name}`), not a parameter")
    m.eval()
    g = _gen(30)
    x = torch.randn(2, 7, 16, generator=g)
    before = x.clone()
    _compare(c, m, x, "x of shape (2, 7, 16), max_len=50", passed="x + PE[:7] for a batch of 2")
    c.that(torch.equal(x, before), "forward changed its input in place (x += …): return a new "
           "tensor, x + …, so the caller's embeddings stay as they were.", "leaves x unchanged")
    if hidden:
        _compare(c, m, torch.randn(3, 50, 16, generator=g), "a sequence of exactly max_len")
        _compare(c, m, torch.randn(1, 1, 16, generator=g), "a single position",
                 passed="seq = max_len and seq = 1")
        m.train()
        _compare(c, m, torch.randn(4, 9, 16, generator=g), "training mode, default dropout=0.0",
                 passed="no dropout by default, even in training mode")
        m6 = _build(c, PositionalEncoding, 6)
        m6.eval()
        _table_buffer(c, m6, 5000, 6, "PositionalEncoding(6), whose max_len should default "
                      "to 5000")
        _compare(c, m6, torch.randn(2, 600, 6, generator=g), "default max_len, 600 positions",
                 passed="max_len defaults to 5000")
        # .double() converts buffers (not plain attributes): float64 in, float64 out
        m64 = _build(c, PositionalEncoding, 16, max_len=50).double().eval()
        x64 = torch.randn(2, 5, 16, generator=g, dtype=torch.float64)
        out = _compare(c, m64, x64, "float64 module and input")
        c.that(out.dtype == torch.float64, "float64 in should give float64 out.", "float64")
        # dropout after the addition, only in training
        md = _build(c, PositionalEncoding, 16, max_len=50, dropout=0.5)
        md.eval()
        xd = torch.randn(3, 8, 16, generator=g)
        _compare(c, md, xd, "dropout=0.5 in eval mode", passed="dropout does nothing in eval mode")
        md.train()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            out = _add(c, md, xd, "dropout=0.5 in training mode").double()
        full = xd.double() + ref.sinusoidal_positional_encoding(8, 16).double()
        dropped = out.abs() < 1e-12
        if not dropped.any() and not _near(out, full, 1e-6, 1e-6):
            c.fail("with dropout=0.5 in training mode the output changes but no entry is 0: "
                   "dropout seems to act on only one part of the sum. Apply it to x + PE.")
        c.that(bool(dropped.any()), "with dropout=0.5 in training mode nothing was dropped: keep "
               "an nn.Dropout(dropout) and apply it in forward.")
        kept_ok = _near(out[~dropped], 2 * full[~dropped], 1e-4, 1e-4)
        c.that(kept_ok, "with dropout, every entry of the output should be either 0 or "
               "2 × (x + PE) for p = 0.5: apply dropout to the sum x + PE, not to the table "
               "or to x alone.", "dropout applies to x + PE in training mode")
        # gradients flow to x, not to the table
        xg = torch.randn(2, 4, 16, generator=g, requires_grad=True)
        _add(c, m.eval(), xg, "backward").sum().backward()
        c.that(xg.grad is not None and bool((xg.grad == 1).all()), "the gradient with respect "
               "to x should be 1 everywhere (the output is x plus a constant).",
               "gradients flow to x, none to the table")
        dev = get_device()
        if dev.type != "cpu":
            mc = _build(c, PositionalEncoding, 16, max_len=50).to(dev).eval()
            out = _add(c, mc, x.to(dev), dev.type)
            c.that(out.device.type == dev.type, f"the output moved off {dev.type}.")
            c.close(out, x + ref.sinusoidal_positional_encoding(7, 16), f"wrong values on "
                    f"{dev.type}.", atol=1e-4, passed=f"runs on {dev.type}")
    c.done()


