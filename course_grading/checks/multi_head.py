"""Hidden checks for 04_multi_head_attention, and the expected outputs its visible checks store.

The module check loads known weights into the learner's module by name (q_proj, k_proj, v_proj,
out_proj) and compares with the reference, which equals ``torch.nn.MultiheadAttention``
(tests/test_reference_04_05.py), at a stated tolerance. When the numbers are off it runs the
usual mistakes on the same weights and names the one that reproduces them.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from course_grading.reference import attention as ref_attention
from course_grading.reference import multi_head as ref
from course_utils.checks import heads
from course_utils.checks import multi_head as visible
from course_utils.checks.heads import near
from course_utils.checks.kit import Check, generator, torch_equal
from course_utils.checks.multi_head import (
    ATOL32,
    NAMES,
    RTOL32,
    compare,
    expect_projections,
    expect_value_error,
    forward,
)

from ._common import visible_first
from ._device import second_devices

ASSIGNMENT = heads.ASSIGNMENT
_FORBIDDEN = heads.MHA_BUILTINS + [
    "course_grading.reference.multi_head.MultiHeadAttention.forward",
    "course_grading.reference.multi_head.split_heads",
    "course_grading.reference.multi_head.merge_heads",
]
# float64: what these checks catch is a float32 result (the dtype) and a wrong formula (off by
# 1e-2 and more). Correct code may round to float32 on the way and still return float64: a scale
# 1/√d_head kept as a float32 tensor (d_head = 6 below, so that it is not exact), a softmax
# upcast to float32 and cast back; that moves the values by ~1e-7 (measured on the variants in
# tests/variants/04_multi_head_attention.py), so the tolerance sits well above that. The dropout
# check reads the dropout coefficients back from the output with the same allowance.
ATOL64, RTOL64 = 1e-6, 1e-6
P_DROP = 0.5

# how the reference's forward makes each of the usual mistakes (their messages are visible's)
MISTAKES = {
    "scale_d_model": dict(scale="d_model"),
    "split_no_transpose": dict(split="no_transpose"),
    "split_interleaved": dict(split="interleaved"),
    "k_from_query": dict(k_from="query"),
    "ignore_mask": dict(ignore_mask=True),
    "merge_no_transpose": dict(merge="no_transpose"),
    "no_out_proj": dict(out_proj=False),
    "v_from_key": dict(v_from="key"),
    "v_from_query": dict(v_from="query"),
}


def reference_module(
    d_model: int, num_heads: int, seed: int, bias: bool = True, dtype=torch.float32
) -> ref.MultiHeadAttention:
    """The reference with fixed, clearly non-zero weights and biases."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        r = ref.MultiHeadAttention(d_model, num_heads, bias=bias)
    g = generator(seed + 1000)
    with torch.no_grad():
        for name, p in r.named_parameters():
            p.copy_(
                torch.randn(p.shape, generator=g)
                * (0.1 if name.endswith("bias") else 1.2 / math.sqrt(d_model))
            )
    return r.to(dtype).eval()


@torch.no_grad()
def _variant(r, query, key, value, mask=None, **mistake):
    """The reference's forward with one known mistake switched on; (None, None) where it can't
    run (e.g. keys from the queries in cross-attention)."""
    try:
        return _variant_forward(r, query, key, value, mask, **mistake)
    except RuntimeError:
        return None, None


def _variant_forward(
    r,
    query,
    key,
    value,
    mask=None,
    *,
    split="ok",
    merge="ok",
    scale="d_head",
    out_proj=True,
    ignore_mask=False,
    k_from="key",
    v_from="value",
):
    h, d = r.num_heads, r.d_model
    src = {"query": query, "key": key, "value": value}

    def sp(t):
        b, s, _ = t.shape
        if split == "no_transpose":
            return t.reshape(b, h, s, d // h)
        if split == "interleaved":
            return t.reshape(b, s, d // h, h).permute(0, 3, 1, 2)
        return ref.split_heads(t, h)

    Q, K, V = sp(r.q_proj(query)), sp(r.k_proj(src[k_from])), sp(r.v_proj(src[v_from]))
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d if scale == "d_model" else d // h)
    if mask is not None and not ignore_mask:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = ref_attention.softmax(scores)
    o = w @ V  # (b, h, q, d_head)
    b, _, q, _ = o.shape
    o = o.reshape(b, q, d) if merge == "no_transpose" else ref.merge_heads(o)
    return (r.out_proj(o) if out_proj else o), w


def _mistakes(r, query, key, value, mask=None):
    """mistakes(kind) for visible.compare: what each usual mistake gives on these inputs."""

    def mistakes(kind: str):
        table = visible.WEIGHT_MISTAKES if kind == "weights" else visible.OUTPUT_MISTAKES
        for name, message in table.items():
            out, w = _variant(r, query, key, value, mask, **MISTAKES[name])
            cand = w if kind == "weights" else out
            if cand is not None:
                yield cand, message

    return mistakes


def _compare(
    c: Check,
    m,
    r,
    what: str,
    query,
    key,
    value,
    mask=None,
    atol=ATOL32,
    rtol=RTOL32,
    passed: str | None = None,
):
    with torch.no_grad():
        expected = r(query, key, value, mask)
    return compare(
        c,
        m,
        what,
        query,
        key,
        value,
        expected,
        _mistakes(r, query, key, value, mask),
        mask=mask,
        atol=atol,
        rtol=rtol,
        passed=passed,
    )


def _visible_cases(g):
    """The visible check's inputs: x (self-attention), query/key/value (cross-attention)."""
    x = torch.randn(2, 5, 12, generator=g)
    q = torch.randn(2, 4, 12, generator=g)
    k, v = torch.randn(2, 6, 12, generator=g), torch.randn(2, 6, 12, generator=g)
    return x, q, k, v


def expected_outputs() -> dict[str, np.ndarray]:
    """What course_utils.checks.multi_head compares with: split_heads and merge_heads on small
    known inputs; the known weights and inputs of the module check, and what each usual mistake
    gives on them (where it changes something)."""
    arrays = {
        "split_x_3": ref.split_heads(torch.arange(120, dtype=torch.float32).view(2, 5, 12), 3),
        "merge_x": ref.merge_heads(torch.arange(120, dtype=torch.float32).view(2, 3, 5, 4)),
        "split_y_4": ref.split_heads(torch.arange(144, dtype=torch.float32).view(2, 6, 12), 4),
    }
    r = reference_module(12, 3, seed=20)
    for name, p in r.named_parameters():
        arrays["mha_" + name.replace(".", "_")] = p
    x, q, k, v = _visible_cases(generator(21))
    arrays.update(mha_x=x, mha_query=q, mha_key=k, mha_value=v)
    causal = ref_attention.causal_mask(5)
    for case, (query, key, value, mask) in {
        "self": (x, x, x, None),
        "cross": (q, k, v, None),
        "causal": (x, x, x, causal),
    }.items():
        with torch.no_grad():
            want, want_w = r(query, key, value, mask)
        for name, kwargs in MISTAKES.items():
            kind = "weights" if name in visible.WEIGHT_MISTAKES else "output"
            out_c, w_c = _variant(r, query, key, value, mask, **kwargs)
            cand = w_c if kind == "weights" else out_c
            if cand is not None and not near(cand, want_w if kind == "weights" else want, 1e-6, 1e-6):
                arrays[f"mha_{case}_{kind}_{name}"] = cand
    return {name: t.detach().numpy().astype(np.float32) for name, t in arrays.items()}


# -- split_heads / merge_heads ------------------------------------------------------------------


def check_split_heads(split_heads) -> None:
    visible_first(heads.check_split_heads, split_heads)
    c = Check("split_heads", _FORBIDDEN, hidden=True, ops=heads.MHA_OPS)
    g = generator(10)
    for b, s, d, h in ((1, 7, 15, 5), (3, 2, 8, 1), (2, 4, 6, 6), (2, 6, 16, 4)):
        x = torch.randn(b, s, d, generator=g)
        got = c.call(split_heads, x, h)
        c.shape(
            got,
            (b, h, s, d // h),
            f"split_heads for x {(b, s, d)} and num_heads={h}",
            "Read the sizes from x.shape and num_heads; don't hard-code them.",
        )
        if not near(got, ref.split_heads(x, h), 0, 0):
            for cand, message in heads.split_candidates(x, h):
                if near(got, cand, 0, 0):
                    c.fail(message + f" (x {(b, s, d)}, num_heads={h})")
            c.fail(f"wrong values for x of shape {(b, s, d)} and num_heads={h}.")
    c.ok("batch 1, one head, d_head = 1, and other sizes")
    x64 = torch.randn(2, 3, 8, generator=g, dtype=torch.float64)
    got = c.call(split_heads, x64, 2)
    c.that(got.dtype == torch.float64, "float64 input should stay float64.", "keeps float64")
    xg = torch.randn(2, 3, 8, generator=g, requires_grad=True)
    out = c.call(split_heads, xg, 4)
    if out.requires_grad:
        out.sum().backward()
    c.that(
        xg.grad is not None and bool((xg.grad == 1).all()),
        "gradients don't flow back through split_heads: use tensor operations "
        "(view/reshape/transpose), no .numpy() or .detach().",
        "gradients flow through",
    )
    x = torch.randn(2, 5, 12, generator=g)
    for dev in second_devices():
        c.close(
            dev.call(c, split_heads, dev.tensor(x), 3),
            ref.split_heads(x, 3),
            f"wrong values on {dev}.",
            atol=0,
            rtol=0,
            passed=f"runs on {dev}",
        )
    c.done()


def check_merge_heads(merge_heads) -> None:
    visible_first(heads.check_merge_heads, merge_heads)
    c = Check("merge_heads", _FORBIDDEN, hidden=True, ops=heads.MHA_OPS)
    g = generator(12)
    for b, h, s, dh in ((1, 5, 7, 3), (3, 1, 2, 8), (2, 6, 4, 1), (2, 4, 6, 4)):
        x = torch.randn(b, h, s, dh, generator=g)
        got = c.call(merge_heads, x)
        c.shape(
            got,
            (b, s, h * dh),
            f"merge_heads for x {(b, h, s, dh)}",
            "Read every size from x.shape; don't hard-code them.",
        )
        if not near(got, ref.merge_heads(x), 0, 0):
            for cand, message in heads.merge_candidates(x):
                if near(got, cand, 0, 0):
                    c.fail(message + f" (x {(b, h, s, dh)})")
            c.fail(f"wrong values for x of shape {(b, h, s, dh)}.")
    c.ok("batch 1, one head, d_head = 1, and other sizes")
    # what attention returns: made by a matmul, then transposed views come in too
    t = torch.randn(2, 5, 3, 4, generator=g).transpose(1, 2)  # (2, 3, 5, 4), not contiguous
    c.close(
        c.call(merge_heads, t),
        ref.merge_heads(t),
        "wrong values for a non-contiguous input (a transposed view).",
        atol=0,
        rtol=0,
        passed="non-contiguous input",
    )
    y = torch.randn(2, 6, 12, generator=g)
    c.close(
        c.call(merge_heads, ref.split_heads(y, 3)),
        y,
        "merge_heads(split_heads(y, 3)) should give y back.",
        atol=0,
        rtol=0,
        passed="undoes split_heads on random numbers",
    )
    x64 = torch.randn(2, 2, 3, 4, generator=g, dtype=torch.float64)
    c.that(
        c.call(merge_heads, x64).dtype == torch.float64, "float64 input should stay float64.", "keeps float64"
    )
    xg = torch.randn(2, 2, 3, 4, generator=g, requires_grad=True)
    out = c.call(merge_heads, xg)
    if out.requires_grad:
        out.sum().backward()
    c.that(
        xg.grad is not None and bool((xg.grad == 1).all()),
        "gradients don't flow back through merge_heads.",
        "gradients flow through",
    )
    for dev in second_devices():
        c.close(
            dev.call(c, merge_heads, dev.tensor(t)),
            ref.merge_heads(t),
            f"wrong values on {dev}.",
            atol=0,
            rtol=0,
            passed=f"runs on {dev}",
        )
    c.done()


# -- MultiHeadAttention -------------------------------------------------------------------------


def _built(c: Check, cls, d_model: int, num_heads: int, **kwargs):
    m = c.build(cls, d_model, num_heads, **kwargs)
    expect_projections(c, m, d_model, kwargs.get("bias", True))
    return m


def _eval_without_dropout(c: Check, m, r, args, what: str) -> None:
    out, w = forward(c, m, what, *args)
    with torch.no_grad():
        want, want_w = r(*args)
    c.that(
        near(w, want_w, ATOL64, RTOL64) and near(out, want, ATOL64, RTOL64),
        f"{what}: with dropout={P_DROP} the results differ from the ones without dropout, "
        "although the module is in eval mode. After model.eval() dropout must do nothing: "
        "use dropout that follows the module's training flag (as the module's own dropout "
        "layer does), not dropout that is always on.",
    )


def _dropout_case(d_model: int, num_heads: int):
    """The reference (float64) with v_proj = identity and an orthogonal out_proj, and inputs
    whose values give every head an orthogonal V_h (k = d_head): the coefficients each value
    was mixed with can then be read back from the output exactly, whatever the dropout mask."""
    r = reference_module(d_model, num_heads, seed=50, dtype=torch.float64)
    g = generator(51)
    d_head = d_model // num_heads
    with torch.no_grad():
        r.v_proj.weight.copy_(torch.eye(d_model, dtype=torch.float64))
        r.v_proj.bias.zero_()
        r.out_proj.weight.copy_(
            torch.linalg.qr(torch.randn(d_model, d_model, generator=g, dtype=torch.float64))[0]
        )
    query = torch.randn(2, 5, d_model, generator=g, dtype=torch.float64)
    key = torch.randn(2, d_head, d_model, generator=g, dtype=torch.float64)
    O = torch.linalg.qr(torch.randn(2, num_heads, d_head, d_head, generator=g, dtype=torch.float64))[
        0
    ]  # (b, h, k, d_head), orthogonal
    return r, (query, key, ref.merge_heads(O)), O


def _check_dropout(c: Check, MultiHeadAttention, D: int, H: int) -> None:
    """Dropout=0.5: off in eval mode; in training mode it drops attention weights (not the
    output, the heads or the values), rescaling the rest by 1 / (1 - p); forward returns the
    weights from before dropout (the notebook's recommendation) or the dropped-out weights
    that multiply V (what torch.nn.MultiheadAttention returns).

    The training-mode checks are properties, so any way of drawing the mask passes: with
    out_proj undone and every V_h orthogonal, the output gives back the coefficients each
    value was mixed with; each must be 0 (dropped) or weight / (1 - p)."""
    r, args, O = _dropout_case(D, H)
    md = _built(c, MultiHeadAttention, D, H, dropout=P_DROP)
    md.double()
    c.load_by_name(md, r, NAMES)
    _eval_without_dropout(c, md, r, args, f"dropout={P_DROP} in eval mode")
    with torch.no_grad():
        want, want_w = r(*args)
    md.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        out, w = forward(c, md, f"dropout={P_DROP} in training mode", *args)
    c.shape(out, tuple(want.shape), f"the output (dropout={P_DROP} in training mode)")
    c.shape(w, tuple(want_w.shape), f"the weights (dropout={P_DROP} in training mode)")
    w, out = w.detach(), out.detach()
    # the output is out_proj(merge(coef @ V)): undo out_proj (orthogonal), then V (orthogonal)
    Y = ref.split_heads((out - r.out_proj.bias) @ r.out_proj.weight, H)  # (b, h, q, d_head)
    coef = Y @ O.mT  # (b, h, q, k)
    visible.dropout_verdict(c, out, w, want, want_w, coef, Y, ATOL64, RTOL64)  # the learner's verdict
    md.eval()
    _eval_without_dropout(c, md, r, args, "back in eval mode after training")


def check_multi_head_attention(MultiHeadAttention) -> None:
    visible_first(visible.check_multi_head_attention, MultiHeadAttention)
    c = Check("MultiHeadAttention", _FORBIDDEN, hidden=True, ops=heads.MHA_OPS)
    D, H = 12, 3
    m = _built(c, MultiHeadAttention, D, H)
    r = reference_module(D, H, seed=30)
    c.load_by_name(m, r, NAMES)
    g = generator(31)
    x = torch.randn(2, 5, D, generator=g)
    q = torch.randn(2, 4, D, generator=g)
    k, v = torch.randn(2, 6, D, generator=g), torch.randn(2, 6, D, generator=g)
    # masks per sequence: (b, 1, q, k) and padding (b, 1, 1, k), in cross-attention
    per = torch.rand(2, 1, 4, 6, generator=g) > 0.5
    per[..., 0] = True
    _compare(
        c,
        m,
        r,
        "(b, 1, q, k) mask",
        q,
        k,
        v,
        mask=per,
        passed="a (b, 1, q, k) mask, a different one per sequence",
    )
    keep = torch.tensor([[True] * 6, [True, True, True, False, False, False]])
    _, w = _compare(
        c,
        m,
        r,
        "(b, 1, 1, k) padding mask",
        q,
        k,
        v,
        mask=keep[:, None, None],
        passed="a (b, 1, 1, k) padding mask",
    )
    c.that(bool((w[1, :, :, 3:] == 0).all()), "padded keys should get weight 0 in every head.")
    x1 = torch.randn(1, 3, D, generator=g)
    _compare(c, m, r, "batch of 1", x1, x1, x1, passed="batch of 1")
    # other shapes: one head, d_head = 1, no bias
    for d, h, bias in ((8, 1, True), (6, 6, True), (16, 4, False)):
        mm = _built(c, MultiHeadAttention, d, h, bias=bias)
        rr = reference_module(d, h, seed=32 + d, bias=bias)
        c.load_by_name(mm, rr, NAMES)
        xx = torch.randn(3, 5, d, generator=g)
        _compare(
            c, mm, rr, f"d_model={d}, num_heads={h}, bias={bias}", xx, xx, xx, mask=keep.new_ones(3, 1, 1, 5)
        )
    c.ok("one head, d_head = 1, and bias=False")
    expect_value_error(c, MultiHeadAttention, 16, 5)
    # float64, d_head = 6
    m64 = _built(c, MultiHeadAttention, 18, 3)
    m64.double()
    r64 = reference_module(18, 3, seed=40, dtype=torch.float64)
    c.load_by_name(m64, r64, NAMES)
    q64 = torch.randn(2, 4, 18, generator=g, dtype=torch.float64)
    k64, v64 = (torch.randn(2, 6, 18, generator=g, dtype=torch.float64) for _ in range(2))
    _compare(
        c,
        m64,
        r64,
        "float64",
        q64,
        k64,
        v64,
        mask=per,
        atol=ATOL64,
        rtol=RTOL64,
        passed=f"float64 matches to {ATOL64:g}",
    )
    # dropout: only in training, off by default
    before = x.clone()
    m.train()
    _compare(c, m, r, "training mode with the default dropout=0.0", x, x, x)
    c.that(torch_equal(x, before), "forward changed its input in place.")
    _check_dropout(c, MultiHeadAttention, D, H)
    # gradients reach every projection
    mg = _built(c, MultiHeadAttention, D, H)
    c.load_by_name(mg, r, NAMES)
    mg.train()
    out, _ = forward(c, mg, "backward", q, k, v)
    out.sum().backward()
    for name, p in mg.named_parameters():
        c.that(
            p.grad is not None and bool(p.grad.abs().sum() > 0),
            f"no gradient reaches {name}: every projection must be used, with tensor operations only.",
        )
    c.ok("gradients reach all four projections")
    # on a second device: a tensor made inside forward without device= (the scale, a mask)
    # stays on the CPU and fails there, as on a GPU (float64, d_head = 6, a mask per sequence)
    for dev in second_devices():
        md = _built(c, MultiHeadAttention, 18, 3)
        md.double()
        c.load_by_name(md, r64, NAMES)
        out, w = dev.call(c, dev.module(md), *dev.tensor((q64, k64, v64)), mask=dev.tensor(per))
        with torch.no_grad():
            want, want_w = r64(q64, k64, v64, per)
        c.close(out, want, f"wrong output on {dev}.", atol=ATOL64, rtol=RTOL64)
        c.close(w, want_w, f"wrong weights on {dev}.", atol=ATOL64, rtol=RTOL64, passed=f"runs on {dev}")
    c.done()
