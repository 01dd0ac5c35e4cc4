"""Visible checks for 03_attention: softmax, simple_self_attention, scaled_dot_product_attention,
causal_mask.

These run in the learner's own kernel, so they hold no solution: the expected values come from
PyTorch's own ``torch.softmax`` and ``F.scaled_dot_product_attention`` (whose output for V = the
identity is the attention weights themselves). The grader adds its hidden cases in the hidden
part of each test cell; they live with the instructor, not here.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..forbidden import ATTENTION_BUILTINS, ATTENTION_OPS, SOFTMAX_BUILTINS, SOFTMAX_OPS
from ._core import Check, CheckFailed, generator, torch_allclose, torch_equal, torch_isfinite

# Taken at import (the notebook's first cell), before any learner code can replace them.
_softmax = torch.softmax
_sdpa = F.scaled_dot_product_attention
_eye = torch.eye


def builtin_attention(Q, K, V, mask=None, scale=None):
    """(output, weights) as PyTorch computes them: softmax(Q Kᵀ · scale) V, scale 1/√d_k by
    default, mask True = may attend. The weights are the output for V = the identity."""
    k = K.shape[-2]
    identity = _eye(k, dtype=K.dtype, device=K.device).expand(*K.shape[:-2], k, k)
    return (_sdpa(Q, K, V, attn_mask=mask, scale=scale), _sdpa(Q, K, identity, attn_mask=mask, scale=scale))


def check_softmax(softmax) -> None:
    c = Check("softmax", SOFTMAX_BUILTINS, ops=SOFTMAX_OPS)
    x = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]])
    before = x.clone()
    try:
        out = c.call(softmax, x)
    except CheckFailed as exc:
        if "must match the size" in str(exc):
            raise CheckFailed(
                f"{exc}. A max or sum over `dim` drops that dimension unless you "
                "keep it (keepdim=True), and then it can't broadcast back against x."
            ) from exc.__cause__
        raise
    c.that(
        torch_equal(x, before),
        "softmax modified its input in place (e.g. x -= ... or "
        "x.exp_()): compute into a new tensor and leave x as it was.",
    )
    c.that(isinstance(out, torch.Tensor), f"should return a tensor, got {type(out).__name__}.")
    c.shape(out, (2, 3), "softmax(x) for x of shape (2, 3)", "softmax keeps the input's shape.")
    c.that(bool((out >= 0).all()), "probabilities can't be negative.")
    c.close(
        out.sum(-1),
        torch.ones(2),
        "each row should sum to 1 along dim=-1: divide exp(x) by its sum over that dim "
        "(keepdim=True so it broadcasts).",
        passed="rows sum to 1",
    )
    c.close(
        out,
        _softmax(x, dim=-1),
        "softmax(x)_i = exp(x_i) / sum_j exp(x_j).",
        passed="matches the formula on a small example",
    )
    big = torch.tensor([[1e4, 1e4 - 1.0, 0.0]])
    got = c.call(softmax, big)
    # atol 1e-3: float32 near 1e4 has steps of ~1e-3, so exact log-domain forms (exp(x - logsumexp))
    # differ by ~1e-4; an overflow gives NaN, far outside any tolerance.
    c.close(
        got,
        _softmax(big, dim=-1),
        "logits of 1e4 overflow exp() to inf and the result becomes NaN: subtract the "
        "maximum along `dim` first (it does not change the result).",
        atol=1e-3,
        passed="numerically stable for logits of 1e4",
    )
    cols = torch.tensor([[1.0, 5.0], [2.0, 0.0], [3.0, -1.0]])
    c.close(
        c.call_on("a (3, 2) tensor with dim=0", softmax, cols, dim=0),
        _softmax(cols, dim=0),
        "with dim=0 each COLUMN should sum to 1: take the max and the sum along `dim`, the "
        "argument, not always the last axis.",
        passed="respects dim (dim=0)",
    )
    masked = torch.tensor([[0.5, float("-inf"), 2.0]])
    got = c.call_on("a row holding -inf", softmax, masked)
    c.that(
        bool(torch_isfinite(got).all()) and float(got[0, 1]) == 0.0,
        "a score of -inf (a masked position) should get weight exactly 0, and nothing "
        f"should become NaN; got {[round(float(v), 4) for v in got.flatten()]}.",
        "a score of -inf gets weight exactly 0",
    )
    far = torch.tensor([[900.0, 899.5, 898.0], [0.5, 1.5, 3.0]])  # rows on very different scales
    c.close(
        c.call_on("two rows 900 apart", softmax, far),
        _softmax(far, dim=-1),
        "two rows whose scores are 900 apart: subtracting ONE maximum for the whole tensor "
        "sends the lower row's exponentials to 0 and gives 0/0 = NaN there. Each row needs "
        "its own maximum (amax along `dim`, keepdim=True).",
        atol=2e-4,
        passed="each row gets its own maximum",
    )  # float32 steps near 900: ~6e-5
    x64 = x.double()
    got = c.call_on("a float64 tensor", softmax, x64)
    c.that(
        isinstance(got, torch.Tensor) and got.dtype == torch.float64,
        f"a float64 input should give a float64 output, got {getattr(got, 'dtype', None)}: "
        "don't convert (.float()) inside, and make any new tensor like x.",
        "keeps float64",
    )
    c.done()


def simple_mistakes(c: Check, out, X) -> None:
    """Fail naming the mistake when ``out`` is a known wrong form of softmax(X Xᵀ) X."""
    if not isinstance(out, torch.Tensor) or out.shape != X.shape:
        return
    scores = X @ X.transpose(-2, -1)
    for candidate, message in (
        (
            scores @ X,
            "there is no softmax: the raw scores weigh the tokens. The weights are "
            "the softmax of the scores, so that each token's weights are positive and sum to 1.",
        ),
        (
            _sdpa(X, X, X, scale=1 / math.sqrt(X.shape[-1])),
            "the scores are divided by √d: "
            "this parameter-free form has no scaling (it comes with Q, K and V in section 6).",
        ),
        (
            F.softmax(scores, dim=-2) @ X,
            "the weights are transposed: each token's weights "
            "(one row of the scores' softmax over the LAST dim) should mix the rows of X. A "
            "softmax over dim -2, or the weights applied from the other side, give this.",
        ),
    ):
        if torch_allclose(out.detach().cpu(), candidate, atol=1e-5, rtol=1e-4):
            c.fail(message)


def check_simple_self_attention(simple_self_attention) -> None:
    c = Check("simple_self_attention", ATTENTION_BUILTINS, ops=ATTENTION_OPS)
    X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]) * 0.5
    Xb = torch.randn(2, 4, 3, generator=generator(1))
    batch_call = "a batch of shape (2, 4, 3): transpose only the last two dims"
    for x, called, what, shape_hint, wrong, passed in (
        (
            X,
            None,
            "simple_self_attention(X) for X of shape (3, 2)",
            "Each token gets a new vector of the same size: softmax(X Xᵀ) X.",
            "expected softmax(X Xᵀ) X with the softmax over the LAST dim (each row of scores "
            "is one token's weights over all tokens). No scaling in this parameter-free form.",
            "softmax(X Xᵀ) X on a (3, 2) example",
        ),
        (
            Xb,
            batch_call,
            "a batch (2, 4, 3)",
            "Transpose the last two dims only: X.T reverses every dim, the batch's too.",
            "wrong values for a batch: each sequence attends within itself "
            "(transpose(-2, -1), softmax over dim=-1).",
            "batched input",
        ),
    ):
        out = c.call_on(called, simple_self_attention, x) if called else c.call(simple_self_attention, x)
        c.shape(out, tuple(x.shape), what, shape_hint)
        if called is None:
            simple_mistakes(c, out, x)  # the usual mistakes, told apart on the plain example
        c.close(out, _sdpa(x, x, x, scale=1.0), wrong, passed=passed)
    c.done()


def qkv(g, *lead, q=3, k=4, d_k=8, d_v=5, dtype=torch.float32):
    """Random queries, keys and values of the given sizes, from generator ``g``."""
    Q = torch.randn(*lead, q, d_k, generator=g, dtype=dtype)
    K = torch.randn(*lead, k, d_k, generator=g, dtype=dtype)
    V = torch.randn(*lead, k, d_v, generator=g, dtype=dtype)
    return Q, K, V


def unpack(c: Check, result):
    c.that(isinstance(result, tuple) and len(result) == 2, "should return a pair (output, weights).")
    return result


def mask_weights(c: Check, w, mask, d_k: int, d_v: int, want_w, scaled_by_d_v) -> None:
    """The weights under a mask: zero where it is False, rows summing to 1, softmax of the
    scaled scores; a failure names the mistake that explains it."""
    c.that(
        bool((w.detach().masked_select(~mask) == 0).all()),
        "weights where mask is False must be exactly 0: set those scores to -inf before the "
        "softmax (a score of 0 still gets weight; and True means 'may attend').",
        "masked positions get weight 0",
    )
    sums = w.detach().sum(-1)
    if not torch_allclose(sums, torch.ones_like(sums), atol=1e-5):
        c.fail(
            f"the masked positions get weight 0, but the rows of weights no longer sum to 1 "
            f"(they sum to {sums.min().item():.3f} … {sums.max().item():.3f}): the mask is "
            "applied after the softmax, to the weights. Apply it to the scores instead, "
            "setting the masked ones to -inf before the softmax, so that the keys a query "
            "may attend to share all of its weight."
        )
    if d_k != d_v and torch_allclose(w.detach(), scaled_by_d_v, atol=1e-5, rtol=1e-4):
        c.fail(
            f"with a mask, d_k = {d_k} and d_v = {d_v}, the scores are divided by √d_v: "
            "d_k is the size of the queries and keys (Q.shape[-1]), not of the values."
        )
    c.close(
        w,
        want_w,
        f"with a mask (here d_k = {d_k}, d_v = {d_v}), the weights should be "
        "softmax(Q Kᵀ / √d_k) over the keys the mask allows.",
        passed="mask applied to the scores, before the softmax",
    )


def check_scaled_dot_product_attention(scaled_dot_product_attention) -> None:
    c = Check("scaled_dot_product_attention", ATTENTION_BUILTINS, ops=ATTENTION_OPS)
    g = generator(2)
    Q, K, V = qkv(g, q=3, k=4, d_k=16, d_v=16)
    out, w = unpack(c, c.call(scaled_dot_product_attention, Q, K, V))
    c.shape(out, (3, 16), "output for Q (3, 16), K (4, 16), V (4, 16)", "Output is (q, d_v).")
    c.shape(w, (3, 4), "weights for Q (3, 16), K (4, 16)", "Weights are (q, k).")
    c.close(
        w.sum(-1),
        torch.ones(3),
        "each row of weights should sum to 1: softmax over the keys (the last dim).",
        passed="weights: shape (q, k), rows sum to 1",
    )
    want_out, want_w = builtin_attention(Q, K, V)
    unscaled = builtin_attention(Q, K, V, scale=1.0)[1]
    if torch_allclose(w, unscaled, atol=1e-5):
        c.fail("the weights are softmax(Q Kᵀ) without the 1/√d_k scaling.")
    if torch_allclose(w, builtin_attention(Q, K, V, scale=1 / Q.shape[-1])[1], atol=1e-5):
        c.fail("the scores are divided by d_k: the scaling is by its square root, √d_k.")
    c.close(
        w,
        want_w,
        "weights should be softmax(Q Kᵀ / √d_k) with d_k = Q.shape[-1].",
        passed="weights = softmax(Q Kᵀ / √d_k)",
    )
    c.close(out, want_out, "output should be weights @ V.", passed="output = weights @ V")
    m = torch.tril(torch.ones(4, 4, dtype=torch.bool))[:3]
    Qm, Km, Vm = qkv(g, q=3, k=4, d_k=4, d_v=2)
    Km = -Km.abs() - 1.0  # all scores negative: a 0 fill would outrank them
    Qm = Qm.abs()
    out, w = unpack(c, c.call(scaled_dot_product_attention, Qm, Km, Vm, mask=m))
    mask_weights(
        c,
        w,
        m,
        4,
        2,
        builtin_attention(Qm, Km, Vm, m)[1],
        builtin_attention(Qm, Km, Vm, m, scale=1 / math.sqrt(2))[1],
    )
    Qb, Kb, Vb = qkv(g, 2, 3, q=3, k=4, d_k=8, d_v=5)
    out, w = unpack(c, c.call_on("a batch of shape (2, 3, q, d_k)", scaled_dot_product_attention, Qb, Kb, Vb))
    c.shape(
        out,
        (2, 3, 3, 5),
        "output for Q (2, 3, 3, 8), K (2, 3, 4, 8), V (2, 3, 4, 5)",
        "The leading (batch, head) dims pass through: swap only K's last two dims "
        "(counted from the end, they are the same whatever comes before), not all of them "
        "as K.T does.",
    )
    for dim, size in enumerate(Qb.shape[:-1]):
        if (
            size != Qb.shape[-1]
            and isinstance(out, torch.Tensor)
            and torch_allclose(
                out.detach().cpu(),
                builtin_attention(Qb, Kb, Vb, scale=1 / math.sqrt(size))[0],
                atol=1e-5,
                rtol=1e-4,
            )
        ):
            c.fail(
                f"on a batch the scores are divided by √{size}, the size of Q's dim {dim}: "
                "d_k is the size of Q's LAST dim, whatever dims come before it."
            )
    c.close(
        out,
        builtin_attention(Qb, Kb, Vb)[0],
        "on a batch, each (q, d_k) slice should "
        "attend over its own keys: swap only K's last two dims, not all of them as K.T "
        "does.",
        passed="works on batches (2, 3, q, d_k)",
    )
    Ql, Kl, Vl = qkv(g, q=2, k=3, d_k=4, d_v=3)
    Ql, Kl = Ql.abs() * 100.0, Kl.abs()  # positive scores in the hundreds: exp() overflows
    out, w = unpack(c, c.call_on("scores in the hundreds", scaled_dot_product_attention, Ql, Kl, Vl))
    c.close(
        w,
        builtin_attention(Ql, Kl, Vl)[1],
        "with scores in the hundreds the weights "
        "should still be finite and sum to 1: exp() of a score above ~88 is inf in "
        "float32. Use a stable softmax (yours from Exercise 1, or F.softmax).",
        passed="stable for large scores",
    )
    Q64, K64, V64 = qkv(g, q=3, k=4, d_k=6, d_v=2, dtype=torch.float64)
    out, w = unpack(c, c.call_on("float64 inputs", scaled_dot_product_attention, Q64, K64, V64))
    c.that(
        out.dtype == torch.float64 and w.dtype == torch.float64,
        "float64 inputs should "
        f"give float64 outputs and weights, got {out.dtype} and {w.dtype}: compute in the "
        "inputs' dtype (no .float() inside).",
    )
    c.close(
        out,
        builtin_attention(Q64, K64, V64)[0],
        "wrong output for float64 inputs.",
        atol=1e-6,
        rtol=1e-6,
        passed="keeps float64",
    )
    c.done()


def check_causal_mask(causal_mask) -> None:
    c = Check("causal_mask")
    m = c.call(causal_mask, 4)
    c.that(isinstance(m, torch.Tensor), f"should return a tensor, got {type(m).__name__}.")
    c.shape(m, (4, 4), "causal_mask(4)")
    c.that(
        m.dtype == torch.bool,
        f"should be a bool tensor (True = may attend), got {m.dtype}.",
        "bool tensor of shape (4, 4)",
    )
    want = torch.tensor(
        [
            [True, False, False, False],
            [True, True, False, False],
            [True, True, True, False],
            [True, True, True, True],
        ]
    )
    c.that(
        not torch_equal(m, want.T),
        "that is the upper triangle: position i may attend to "
        "positions j ≤ i (the past), so True belongs on and BELOW the diagonal.",
    )
    c.that(bool(m.diagonal().all()), "each position may attend to itself: the diagonal is True.")
    c.that(torch_equal(m, want), "wrong pattern: True exactly where j ≤ i.", "True on and below the diagonal")
    for size in (1, 7):
        m = c.call_on(f"size={size}", causal_mask, size)
        c.shape(m, (size, size), f"causal_mask({size})", "Use the size argument; don't hard-code 4.")
        c.that(
            m.dtype == torch.bool
            and bool(m.diagonal().all())
            and not bool(m.triu(1).any())
            and int(m.sum()) == size * (size + 1) // 2,
            f"causal_mask({size}): True exactly where j ≤ i, for any size.",
        )
    c.ok("any size (1 and 7)")
    c.done()
