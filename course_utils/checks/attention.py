"""Checks for 03_attention: softmax, simple_self_attention, scaled_dot_product_attention,
causal_mask."""
from __future__ import annotations

import math

import torch

from ..device import get_device
from course_grading.reference import attention as ref
from ._core import Check, CheckFailed, to_numpy

_SOFTMAX_BUILTINS = [
    "torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax",
    "torch.special.softmax", "torch.log_softmax", "torch.nn.functional.log_softmax",
    "torch.Tensor.log_softmax", "torch.nn.Softmax.forward",
    "course_grading.reference.attention.softmax",
]
_ATTENTION_BUILTINS = [
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.MultiheadAttention.forward",
    "course_grading.reference.attention.scaled_dot_product_attention",
]


def _devices() -> list[torch.device]:
    """The CPU, plus the accelerator when there is one: the same code must run on both."""
    extra = get_device()
    return [torch.device("cpu")] + ([extra] if extra.type != "cpu" else [])


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def check_softmax(softmax, hidden: bool = False) -> None:
    c = Check("softmax", _SOFTMAX_BUILTINS, hidden, ops=("_softmax", "_log_softmax", "_safe_softmax"))
    x = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    before = x.clone()
    try:
        out = c.call(softmax, x)
    except CheckFailed as exc:
        if "must match the size" in str(exc):
            raise CheckFailed(f"{exc}. A max or sum over `dim` drops that dimension unless you "
                              "keep it (keepdim=True), and then it can't broadcast back against x."
                              ) from exc.__cause__
        raise
    c.that(torch.equal(x, before), "softmax modified its input in place (e.g. x -= ... or "
           "x.exp_()): compute into a new tensor and leave x as it was.")
    c.that(isinstance(out, torch.Tensor), f"should return a tensor, got {type(out).__name__}.")
    c.shape(out, (2, 3), "softmax(x) for x of shape (2, 3)", "softmax keeps the input's shape.")
    c.that(bool((out >= 0).all()), "probabilities can't be negative.")
    c.close(out.sum(-1), torch.ones(2),
            "each row should sum to 1 along dim=-1: divide exp(x) by its sum over that dim "
            "(keepdim=True so it broadcasts).", passed="rows sum to 1")
    c.close(out, ref.softmax(x), "softmax(x)_i = exp(x_i) / sum_j exp(x_j).",
            passed="matches the formula on a small example")
    big = torch.tensor([[1e4, 1e4 - 1.0, 0.0]])
    got = c.call(softmax, big)
    # atol 1e-3: float32 near 1e4 has steps of ~1e-3, so exact log-domain forms (exp(x - logsumexp))
    # differ by ~1e-4; an overflow gives NaN, far outside any tolerance.
    c.close(got, ref.softmax(big),
            "logits of 1e4 overflow exp() to inf and the result becomes NaN: subtract the "
            "maximum along `dim` first (it does not change the result).",
            atol=1e-3, passed="numerically stable for logits of 1e4")
    if hidden:
        g = _gen(0)
        x3 = torch.randn(2, 3, 4, generator=g) * 3
        for dim in (0, 1, -1):
            c.close(c.call(softmax, x3, dim=dim), ref.softmax(x3, dim=dim),
                    f"wrong values with dim={dim}: sum and take the max over `dim`, the "
                    "argument, not a fixed axis.")
        c.ok("respects the dim argument on a 3-D tensor")
        masked = torch.tensor([[0.5, float("-inf"), 2.0, float("-inf")]])
        c.close(c.call(softmax, masked), ref.softmax(masked),
                "a logit of -inf (a masked position) should get probability exactly 0.",
                passed="-inf logits get probability 0")
        small = torch.tensor([[-1e4, -1e4 + 2.0, -1e4 + 1.0]])
        c.close(c.call(softmax, small), ref.softmax(small),
                "logits of -1e4 underflow to 0/0 = NaN without the max trick.",
                atol=1e-3, passed="stable for very negative logits")
        apart = torch.tensor([[1e4, 1e4 - 1.0, 1e4 - 2.0], [-1e4, -1e4 + 1.0, -1e4 + 2.0]])
        for dim, x_ in ((-1, apart), (0, apart.T.contiguous())):
            c.close(c.call(softmax, x_, dim=dim), ref.softmax(x_, dim=dim),
                    "rows whose scores sit far apart (one near 1e4, one near -1e4) come out as "
                    "NaN or zeros: each slice along `dim` needs its own maximum, not one "
                    "maximum for the whole tensor.", atol=1e-3)
        c.ok("each row shifted by its own maximum")
        x64 = torch.randn(3, 5, generator=g, dtype=torch.float64)
        out64 = c.call(softmax, x64)
        c.that(out64.dtype == torch.float64, "float64 input should give float64 output: don't "
               "create tensors with a fixed dtype.", "keeps float64")
        c.close(out64, ref.softmax(x64), "wrong values in float64.", atol=1e-12, rtol=1e-10)
        fresh = torch.randn(3, 4, generator=g) + 5.0  # a tensor no earlier call has touched
        before = fresh.clone()
        c.call(softmax, fresh)
        c.that(torch.equal(fresh, before), "softmax modified its input in place (e.g. x -= ...): "
               "compute into a new tensor.", "leaves the input unchanged")
        for dev in _devices()[1:]:
            out = c.call(softmax, x3.to(dev))
            c.that(out.device.type == dev.type, f"output moved off {dev.type}.")
            c.close(out, ref.softmax(x3), f"wrong values on {dev.type}.", atol=1e-5)
            c.ok(f"runs on {dev.type}")
    c.done()


def check_simple_self_attention(simple_self_attention, hidden: bool = False) -> None:
    c = Check("simple_self_attention", _ATTENTION_BUILTINS, hidden)
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]) * 0.5
    out = c.call(simple_self_attention, X)
    c.shape(out, (3, 2), "simple_self_attention(X) for X of shape (3, 2)",
            "Each token gets a new vector of the same size: softmax(X Xᵀ) X.")
    c.close(out, ref.simple_self_attention(X),
            "expected softmax(X Xᵀ) X with the softmax over the LAST dim (each row of scores "
            "is one token's weights over all tokens). No scaling in this parameter-free form.",
            passed="softmax(X Xᵀ) X on a (3, 2) example")
    g = _gen(1)
    Xb = torch.randn(2, 4, 3, generator=g)
    got = c.call_on("a batch of shape (2, 4, 3): transpose only the last two dims",
                    simple_self_attention, Xb)
    c.shape(got, (2, 4, 3), "a batch (2, 4, 3)",
            "Transpose the last two dims only (X.transpose(-2, -1)), not X.T.")
    c.close(got, ref.simple_self_attention(Xb),
            "wrong values for a batch: each sequence attends within itself "
            "(transpose(-2, -1), softmax over dim=-1).", passed="batched input")
    if hidden:
        Xw = torch.randn(5, 3, generator=g) * 2
        c.close(c.call(simple_self_attention, Xw), ref.simple_self_attention(Xw),
                "wrong values: don't scale the scores here, and return the weighted values, "
                "not the weights.", passed="a second example")
    c.done()


def _qkv(g, *lead, q=3, k=4, d_k=8, d_v=5, dtype=torch.float32):
    Q = torch.randn(*lead, q, d_k, generator=g, dtype=dtype)
    K = torch.randn(*lead, k, d_k, generator=g, dtype=dtype)
    V = torch.randn(*lead, k, d_v, generator=g, dtype=dtype)
    return Q, K, V


def _unpack(c: Check, result):
    c.that(isinstance(result, tuple) and len(result) == 2,
           "should return a pair (output, weights).")
    return result


def check_scaled_dot_product_attention(scaled_dot_product_attention, hidden: bool = False) -> None:
    c = Check("scaled_dot_product_attention", _ATTENTION_BUILTINS, hidden)
    g = _gen(2)
    Q, K, V = _qkv(g, q=3, k=4, d_k=16, d_v=16)
    out, w = _unpack(c, c.call(scaled_dot_product_attention, Q, K, V))
    c.shape(out, (3, 16), "output for Q (3, 16), K (4, 16), V (4, 16)", "Output is (q, d_v).")
    c.shape(w, (3, 4), "weights for Q (3, 16), K (4, 16)", "Weights are (q, k).")
    c.close(w.sum(-1), torch.ones(3), "each row of weights should sum to 1: softmax over the "
            "keys (the last dim).", passed="weights: shape (q, k), rows sum to 1")
    ref_out, ref_w = ref.scaled_dot_product_attention(Q, K, V)
    unscaled = ref.softmax(Q @ K.transpose(-2, -1), dim=-1)
    if torch.allclose(w, unscaled, atol=1e-5):
        c.fail("the weights are softmax(Q Kᵀ) without the 1/√d_k scaling.")
    c.close(w, ref_w, "weights should be softmax(Q Kᵀ / √d_k) with d_k = Q.shape[-1].",
            passed="weights = softmax(Q Kᵀ / √d_k)")
    c.close(out, ref_out, "output should be weights @ V.", passed="output = weights @ V")
    m = ref.causal_mask(4)[:3]
    Qm, Km, Vm = _qkv(g, q=3, k=4, d_k=4, d_v=2)
    Km = -Km.abs() - 1.0  # all scores negative: a 0 fill would outrank them
    Qm = Qm.abs()
    out, w = _unpack(c, c.call(scaled_dot_product_attention, Qm, Km, Vm, mask=m))
    c.that(bool((w[~m] == 0).all()), "weights where mask is False must be exactly 0: set those "
           "scores to -inf before the softmax (a score of 0 still gets weight; and True means "
           "'may attend').", "masked positions get weight 0")
    c.close(w, ref.scaled_dot_product_attention(Qm, Km, Vm, m)[1],
            "with a mask (here d_k = 4, d_v = 2), the allowed keys should share all the weight "
            "of softmax(Q Kᵀ / √d_k): is the mask applied to the scores, before the softmax, "
            "and is d_k the queries' size rather than the values'?",
            passed="mask applied before the softmax")
    if hidden:
        Q, K, V = _qkv(g, 2, q=5, k=7, d_k=4, d_v=9)
        out, w = _unpack(c, c.call(scaled_dot_product_attention, Q, K, V))
        ro, rw = ref.scaled_dot_product_attention(Q, K, V)
        c.close(w, rw, "with d_k = 4 and d_v = 9, scale by √d_k (from Q or K), not √d_v; and "
                "q ≠ k lengths must work.", passed="d_k ≠ d_v and q ≠ k, batched")
        c.close(out, ro, "output wrong when d_k ≠ d_v.")
        Q, K, V = _qkv(g, 2, 3, q=4, k=4, d_k=6, d_v=6)
        mask = torch.rand(1, 1, 4, 4, generator=g) > 0.4
        mask[..., 0] = True  # every row may attend somewhere
        out, w = _unpack(c, c.call(scaled_dot_product_attention, Q, K, V, mask))
        ro, rw = ref.scaled_dot_product_attention(Q, K, V, mask)
        c.close(w, rw, "a (1, 1, q, k) mask should broadcast over the leading dims; True means "
                "'may attend'.", passed="mask broadcasts over batch and heads")
        c.close(out, ro, "output wrong with a broadcast mask.")
        keep = torch.tensor([True, False, True, True])
        Q, K, V = _qkv(g, q=2, k=4, d_k=3, d_v=3)
        out, w = _unpack(c, c.call(scaled_dot_product_attention, Q, K, V, keep))
        c.close(w, ref.scaled_dot_product_attention(Q, K, V, keep)[1],
                "a (k,) key mask should broadcast over queries.", passed="key-only mask")
        Q, K, V = _qkv(g, q=3, k=3, d_k=5, d_v=2)
        big = (Q * 3e3, K * 3e3, V)
        out, w = _unpack(c, c.call(scaled_dot_product_attention, *big))
        c.close(w, ref.scaled_dot_product_attention(*big)[1],
                "huge scores overflow: the softmax must subtract the max (is yours stable?).",
                passed="stable with huge scores")
        Q, K, V = _qkv(g, 2, q=3, k=5, d_k=4, d_v=4, dtype=torch.float64)
        out, w = _unpack(c, c.call(scaled_dot_product_attention, Q, K, V))
        c.that(out.dtype == torch.float64, "float64 inputs should give float64 outputs.")
        c.close(out, ref.scaled_dot_product_attention(Q, K, V)[0], "wrong values in float64.",
                atol=1e-12, rtol=1e-10, passed="float64")
        for dev in _devices()[1:]:
            Q, K, V = _qkv(g, q=3, k=4)
            out, w = _unpack(c, c.call(scaled_dot_product_attention, Q.to(dev), K.to(dev),
                                       V.to(dev), ref.causal_mask(4, dev)[:3]))
            c.that(out.device.type == dev.type, f"output moved off {dev.type}.")
            c.close(out, ref.scaled_dot_product_attention(Q, K, V, ref.causal_mask(4)[:3])[0],
                    f"wrong values on {dev.type}.", atol=1e-4, rtol=1e-4, passed=f"runs on {dev.type}")
    c.done()


def check_causal_mask(causal_mask, hidden: bool = False) -> None:
    c = Check("causal_mask", [], hidden)
    m = c.call(causal_mask, 4)
    c.that(isinstance(m, torch.Tensor), f"should return a tensor, got {type(m).__name__}.")
    c.shape(m, (4, 4), "causal_mask(4)")
    c.that(m.dtype == torch.bool, f"should be a bool tensor (True = may attend), got {m.dtype}.",
           "bool tensor of shape (4, 4)")
    want = ref.causal_mask(4)
    c.that(not torch.equal(m, want.T), "that is the upper triangle: position i may attend to "
           "positions j ≤ i (the past), so True belongs on and BELOW the diagonal.")
    c.that(bool(m.diagonal().all()), "each position may attend to itself: the diagonal is True.")
    c.that(torch.equal(m, want), "wrong pattern: True exactly where j ≤ i.",
           "True on and below the diagonal")
    if hidden:
        for n in (1, 2, 7):
            c.that(torch.equal(c.call(causal_mask, n), ref.causal_mask(n)), f"wrong for size {n}.")
        c.ok("sizes 1, 2 and 7")
        meta = c.call(causal_mask, 3, device=torch.device("meta"))
        c.that(meta.device.type == "meta", "the mask should be created on the `device` given "
               "(pass device= when you create the tensor).", "honours the device argument")
        c.that(c.call(causal_mask, 3, device="cpu").device.type == "cpu",
               "device='cpu' should give a CPU mask.")
    c.done()
