"""Checks for 04_multi_head_attention: split_heads, merge_heads, MultiHeadAttention.

The module check copies known weights into the learner's module by name (q_proj, k_proj,
v_proj, out_proj) and compares with the reference, which equals ``torch.nn.MultiheadAttention``
(tests/test_reference_04_05.py), at a stated tolerance. When the numbers are off it tries the
usual mistakes on the same weights and names the one that reproduces them.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..device import get_device
from course_grading.reference import attention as ref_attention
from course_grading.reference import multi_head as ref
from ._core import Check, CheckFailed, _allclose, to_numpy

# Reusing scaled_dot_product_attention from notebook 03 (yours or the course's) is the point;
# the ready-made multi-head pieces are not.
_MHA_BUILTINS = [
    "torch.nn.MultiheadAttention.forward",
    "torch.nn.functional.multi_head_attention_forward",
    "torch.nn.functional.scaled_dot_product_attention",
    "course_grading.reference.multi_head.MultiHeadAttention.forward",
    "course_grading.reference.multi_head.split_heads",
    "course_grading.reference.multi_head.merge_heads",
]
ATOL32, RTOL32 = 1e-5, 1e-5  # float32: orders of summation differ (einsum, fused projections)
ATOL64, RTOL64 = 1e-10, 1e-10
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _devices() -> list[torch.device]:
    extra = get_device()
    return [extra] if extra.type != "cpu" else []


def _near(a, b, atol=1e-4, rtol=1e-3) -> bool:
    a, b = to_numpy(a), to_numpy(b)
    return a.shape == b.shape and bool(_allclose(a, b, atol=atol, rtol=rtol))


# -- split_heads / merge_heads ------------------------------------------------------------------

def _split_candidates(x, h):
    b, s, d = x.shape
    return [
        (x.reshape(b, h, s, d // h),
         "the shape is right but the values are in the wrong places: reshaping (b, s, d_model) "
         "directly into (b, h, s, d_head) cuts the flattened tokens-and-features into h pieces, "
         "so a 'head' mixes several positions. Cut the feature axis into heads first, then move "
         "the head axis in front of the sequence axis."),
        (x.reshape(b, s, d // h, h).permute(0, 3, 1, 2),
         "head 0 should get features 0 … d_head-1 of every token (a contiguous block); yours "
         "gets every h-th feature. Split the feature axis as (num_heads, d_head), in that order."),
    ]


def check_split_heads(split_heads, hidden: bool = False) -> None:
    c = Check("split_heads", _MHA_BUILTINS, hidden)
    x = torch.arange(2 * 5 * 12, dtype=torch.float32).view(2, 5, 12)  # entry = its flat index
    out = c.call(split_heads, x, 3)
    c.that(isinstance(out, torch.Tensor), f"should return a tensor, got {type(out).__name__}.")
    hint = {(2, 5, 3, 4): "You split the features into (h, d_head) but the head axis must come "
                          "before the sequence axis: (b, h, s, d_head).",
            (6, 5, 4): "Keep batch and heads as two separate axes: (b, h, s, d_head).",
            (2, 3, 4, 5): "The last two axes are swapped: (b, h, s, d_head), not "
                          "(b, h, d_head, s)."}
    c.shape(out, (2, 3, 5, 4), "split_heads(x, 3) for x of shape (2, 5, 12)",
            hint.get(tuple(out.shape), "Expected (batch, num_heads, seq, d_model // num_heads)."))
    want = ref.split_heads(x, 3)
    if not _near(out, want, 0, 0):
        for cand, message in _split_candidates(x, 3):
            if _near(out, cand, 0, 0):
                c.fail(message)
        c.fail("the values are in the wrong places: out[b, h, t] should be token t's features "
               "h*d_head … (h+1)*d_head - 1. Try it on torch.arange(24.).view(1, 2, 12).")
    c.ok("(2, 5, 12) → (2, 3, 5, 4), head h holds features h*d_head … (h+1)*d_head - 1")
    if hidden:
        g = _gen(10)
        for b, s, d, h in ((1, 7, 15, 5), (3, 2, 8, 1), (2, 4, 6, 6), (2, 6, 16, 4)):
            x = torch.randn(b, s, d, generator=g)
            got = c.call(split_heads, x, h)
            c.shape(got, (b, h, s, d // h), f"split_heads for x {(b, s, d)} and num_heads={h}",
                    "Read the sizes from x.shape and num_heads; don't hard-code them.")
            if not _near(got, ref.split_heads(x, h), 0, 0):
                for cand, message in _split_candidates(x, h):
                    if _near(got, cand, 0, 0):
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
        c.that(xg.grad is not None and bool((xg.grad == 1).all()),
               "gradients don't flow back through split_heads: use tensor operations "
               "(view/reshape/transpose), no .numpy() or .detach().", "gradients flow through")
    c.done()


def _merge_candidates(x):
    b, h, s, dh = x.shape
    return [
        (x.reshape(b, s, h * dh),
         "the shape is right but the values are in the wrong places: flattening (b, h, s, d_head) "
         "as it is puts heads where positions belong. Bring the sequence axis back next to the "
         "batch axis first (the inverse of the transpose in split_heads), then flatten."),
        (x.permute(0, 2, 3, 1).reshape(b, s, h * dh),
         "the heads come out interleaved feature by feature: token t's output should be head 0's "
         "d_head numbers, then head 1's, and so on (the inverse of split_heads)."),
    ]


def check_merge_heads(merge_heads, hidden: bool = False) -> None:
    c = Check("merge_heads", _MHA_BUILTINS, hidden)
    x = torch.arange(2 * 3 * 5 * 4, dtype=torch.float32).view(2, 3, 5, 4)  # (b, h, s, d_head)
    out = c.call(merge_heads, x)
    c.that(isinstance(out, torch.Tensor), f"should return a tensor, got {type(out).__name__}.")
    hint = {(2, 5, 3, 4): "Flatten the (h, d_head) axes into one d_model axis.",
            (10, 12): "Keep the batch axis: (b, s, h * d_head)."}
    c.shape(out, (2, 5, 12), "merge_heads(x) for x of shape (2, 3, 5, 4)",
            hint.get(tuple(out.shape), "Expected (batch, seq, num_heads * d_head)."))
    if not _near(out, ref.merge_heads(x), 0, 0):
        for cand, message in _merge_candidates(x):
            if _near(out, cand, 0, 0):
                c.fail(message)
        c.fail("the values are in the wrong places: merge_heads should undo split_heads exactly.")
    c.ok("(2, 3, 5, 4) → (2, 5, 12), heads side by side")
    y = torch.randn(2, 6, 12, generator=_gen(11))
    c.close(c.call(merge_heads, ref.split_heads(y, 4)), y,
            "merge_heads(split_heads(y, 4)) should give y back.", atol=0, rtol=0,
            passed="merge_heads(split_heads(y, h)) == y")
    if hidden:
        g = _gen(12)
        for b, h, s, dh in ((1, 5, 7, 3), (3, 1, 2, 8), (2, 6, 4, 1), (2, 4, 6, 4)):
            x = torch.randn(b, h, s, dh, generator=g)
            got = c.call(merge_heads, x)
            c.shape(got, (b, s, h * dh), f"merge_heads for x {(b, h, s, dh)}",
                    "Read every size from x.shape; don't hard-code them.")
            if not _near(got, ref.merge_heads(x), 0, 0):
                for cand, message in _merge_candidates(x):
                    if _near(got, cand, 0, 0):
                        c.fail(message + f" (x {(b, h, s, dh)})")
                c.fail(f"wrong values for x of shape {(b, h, s, dh)}.")
        c.ok("batch 1, one head, d_head = 1, and other sizes")
        # what attention returns: made by a matmul, then transposed views come in too
        t = torch.randn(2, 5, 3, 4, generator=g).transpose(1, 2)  # (2, 3, 5, 4), not contiguous
        c.close(c.call(merge_heads, t), ref.merge_heads(t), "wrong values for a non-contiguous "
                "input (a transposed view).", atol=0, rtol=0, passed="non-contiguous input")
        x64 = torch.randn(2, 2, 3, 4, generator=g, dtype=torch.float64)
        c.that(c.call(merge_heads, x64).dtype == torch.float64, "float64 input should stay "
               "float64.", "keeps float64")
        xg = torch.randn(2, 2, 3, 4, generator=g, requires_grad=True)
        out = c.call(merge_heads, xg)
        if out.requires_grad:
            out.sum().backward()
        c.that(xg.grad is not None and bool((xg.grad == 1).all()),
               "gradients don't flow back through merge_heads.", "gradients flow through")
    c.done()


# -- MultiHeadAttention -------------------------------------------------------------------------

def static_forbidden(c: Check, cls) -> None:
    """Fail if a method of the learner's class names a forbidden built-in (aliases included)."""
    for klass in getattr(cls, "__mro__", ()):
        if klass.__module__.startswith(("torch", "builtins")):
            continue
        if klass.__module__.startswith("course_utils"):
            if klass is ref.MultiHeadAttention:
                c._forbidden_failure("course_grading.reference.multi_head.MultiHeadAttention")
            continue
        for attr in vars(klass).values():
            fn = getattr(attr, "__func__", attr)
            if callable(fn):
                hits = c.forbidden.held_by(fn)
                if hits:
                    c._forbidden_failure(hits[0])


def reference_module(d_model: int, num_heads: int, seed: int, bias: bool = True,
                     dtype=torch.float32) -> ref.MultiHeadAttention:
    """The reference with fixed, clearly non-zero weights and biases."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        r = ref.MultiHeadAttention(d_model, num_heads, bias=bias)
    g = _gen(seed + 1000)
    with torch.no_grad():
        for name, p in r.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * (0.1 if name.endswith("bias") else
                                                          1.2 / math.sqrt(d_model)))
    return r.to(dtype).eval()


def _build(c: Check, cls, *args, **kwargs) -> nn.Module:
    static_forbidden(c, cls)
    module = c.call(cls, *args, **kwargs)
    c.that(isinstance(module, nn.Module), "MultiHeadAttention(...) should create an nn.Module "
           "(class MultiHeadAttention(nn.Module), with super().__init__() first), got "
           f"{type(module).__name__}.")
    return module


def _check_layers(c: Check, m: nn.Module, d_model: int, bias: bool) -> None:
    for name in PROJECTIONS:
        layer = getattr(m, name, None)
        c.that(isinstance(layer, nn.Linear), f"the module has no nn.Linear called `{name}`. The "
               f"four projections are named {', '.join(PROJECTIONS)} (the names PyTorch and "
               "Llama-style checkpoints use), each nn.Linear(d_model, d_model).")
        c.that((layer.in_features, layer.out_features) == (d_model, d_model),
               f"{name} maps {layer.in_features} → {layer.out_features} features; with "
               f"d_model={d_model} every projection is d_model → d_model (all heads at once).")
        c.that((layer.bias is not None) == bias, f"{name} should {'have' if bias else 'not have'} "
               f"a bias with bias={bias}: pass the bias argument on to nn.Linear.")


def _load(c: Check, student: nn.Module, r: nn.Module) -> None:
    mine, theirs = dict(student.named_parameters()), dict(r.named_parameters())
    missing, extra = sorted(set(theirs) - set(mine)), sorted(set(mine) - set(theirs))
    if missing or extra:
        c.fail("could not load the known test weights into your module: "
               + (f"missing {missing[:4]}" if missing else "")
               + (" and " if missing and extra else "")
               + (f"unexpected parameters {extra[:4]}" if extra else "")
               + f". Create exactly the four projections {', '.join(PROJECTIONS)} and no "
               "other parameters.")
    with torch.no_grad():
        for name, p in theirs.items():
            mine[name].copy_(p)
    student.eval()


@torch.no_grad()
def _variant(r, query, key, value, mask=None, **mistake):
    """The reference's forward with one known mistake switched on; None where it can't run
    (e.g. keys from the queries in cross-attention)."""
    try:
        return _variant_forward(r, query, key, value, mask, **mistake)
    except RuntimeError:
        return None, None


def _variant_forward(r, query, key, value, mask=None, *, split="ok", merge="ok", scale="d_head",
                     out_proj=True, ignore_mask=False, k_from="key", v_from="value"):
    h, d = r.num_heads, r.d_model
    src = {"query": query, "key": key, "value": value}

    def sp(t):
        b, s, _ = t.shape
        if split == "no_transpose":
            return t.reshape(b, h, s, d // h)
        if split == "interleaved":
            return t.reshape(b, s, d // h, h).permute(0, 3, 1, 2)
        return t.reshape(b, s, h, d // h).transpose(1, 2)

    Q, K, V = sp(r.q_proj(query)), sp(r.k_proj(src[k_from])), sp(r.v_proj(src[v_from]))
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d if scale == "d_model" else d // h)
    if mask is not None and not ignore_mask:
        scores = scores.masked_fill(~mask, float("-inf"))
    w = ref_attention.softmax(scores)
    o = w @ V  # (b, h, q, d_head)
    b, _, q, _ = o.shape
    o = o.reshape(b, q, d) if merge == "no_transpose" else o.transpose(1, 2).reshape(b, q, d)
    return (r.out_proj(o) if out_proj else o), w


_WEIGHT_MISTAKES = [
    (dict(scale="d_model"), "the scores are divided by √d_model. Each head's queries and keys "
     "have only d_head = d_model / num_heads features, and that is the size the scaling is "
     "for (the single-head attention from notebook 03 reads it off the split tensors)."),
    (dict(split="no_transpose"), "the shapes are right but the weights are not: a reshape of "
     "(b, s, d_model) straight to (b, h, s, d_head) mixes positions inside each head. Split "
     "the features into heads, then move the head axis in front of the sequence axis "
     "(your split_heads)."),
    (dict(split="interleaved"), "each head should use a contiguous block of d_head features "
     "from each projection (as split_heads does); yours seems to take every h-th feature."),
    (dict(k_from="query"), "with a separate `key` input (cross-attention) the keys must be "
     "k_proj(key); yours seem to be computed from `query`."),
    (dict(ignore_mask=True), "the mask is ignored: pass it on to the attention, where positions "
     "whose mask is False get a score of -inf."),
]
_OUTPUT_MISTAKES = [
    (dict(merge="no_transpose"), "the weights are right but the output is not: flattening "
     "(b, h, q, d_head) as it is puts heads where positions belong. Undo the split exactly "
     "(your merge_heads) before the output projection."),
    (dict(out_proj=False), "the output equals the concatenated heads without the final "
     "projection W_O: pass it through out_proj."),
    (dict(v_from="key"), "the values must be v_proj(value); yours seem to come from `key` "
     "(the two differ in this test)."),
    (dict(v_from="query"), "the values must be v_proj(value); yours seem to come from `query`."),
]


def _forward(c: Check, m, what: str, *args, mask=None):
    try:
        result = c.call(m, *args, mask=mask)
    except CheckFailed as exc:
        text = str(exc)
        if "very thing" in text or "not implemented" in text:
            raise
        text = text.removeprefix(c.exercise + " ").removesuffix(
            " (see the traceback above for the line in your code)").rstrip(".")
        if mask is not None:
            c.fail(f"{what}: with a mask of shape {tuple(mask.shape)} forward {text}. The mask "
                   "must broadcast against the (b, h, q, k) scores of the split heads: a (q, k), "
                   "(b, 1, q, k) or (b, 1, 1, k) mask does so as it is (see the traceback above).")
        q, k = args[0].shape[1], args[1].shape[1]
        if q != k:
            c.fail(f"{what}: with {q} queries and {k} keys/values forward {text}. Do the keys "
                   "come from `key` and the values from `value` (not from `query`), and is "
                   "every size read from the right tensor? (See the traceback above.)")
        raise
    c.that(isinstance(result, tuple) and len(result) == 2, "forward should return a pair "
           "(output, weights).")
    return result


def _compare(c: Check, m, r, what: str, query, key, value, mask=None, atol=ATOL32, rtol=RTOL32,
             passed: str | None = None, hint: str = ""):
    out, w = _forward(c, m, what, query, key, value, mask=mask)
    want, want_w = r(query, key, value, mask)
    b, q, k, h = query.shape[0], query.shape[1], key.shape[1], r.num_heads
    c.that(isinstance(out, torch.Tensor) and isinstance(w, torch.Tensor),
           "forward should return two tensors, (output, weights).")
    c.shape(out, (b, q, r.d_model), f"the output ({what})",
            "The output has one d_model vector per query: (b, q_len, d_model).")
    shape_hint = ("Return the weights of every head, (b, h, q, k), not their average." if tuple(
        w.shape) == (b, q, k) else "The weights are (b, num_heads, q_len, k_len).")
    c.shape(w, (b, h, q, k), f"the weights ({what})", shape_hint)
    c.that(out.dtype == query.dtype, f"the output is {out.dtype} for {query.dtype} inputs.")
    if not _near(w, want_w, atol, rtol):
        for kwargs, message in _WEIGHT_MISTAKES:
            cand = _variant(r, query, key, value, mask, **kwargs)[1]
            if cand is not None and _near(w, cand):
                c.fail(f"{what}: {message}")
        per_sequence = mask is not None and mask.dim() == 4 and mask.shape[0] > 1
        c.fail(f"{what}: the attention weights differ from the expected ones (tolerance "
               f"{atol:g}). " + ("This mask differs from one sequence to the next: make sure "
                                 "sequence i's mask reaches all the heads of sequence i, and "
                                 "only those." if per_sequence else
                                 "Each head: softmax(Q_h K_hᵀ / √d_head) with "
                                 "Q = q_proj(query), K = k_proj(key), split into heads."))
    if not _near(out, want, atol, rtol):
        for kwargs, message in _OUTPUT_MISTAKES:
            cand = _variant(r, query, key, value, mask, **kwargs)[0]
            if cand is not None and _near(out, cand):
                c.fail(f"{what}: {message}")
        c.fail(f"{what}: the weights are right but the output differs (tolerance {atol:g}). "
               "Output = out_proj(merge_heads(weights @ V)) with V = v_proj(value) split into "
               "heads." + (f" {hint}" if hint else ""))
    if passed:
        c.ok(passed)
    return out, w


def _expect_value_error(c: Check, cls, d_model: int, num_heads: int) -> None:
    try:
        c.call(cls, d_model, num_heads)
    except CheckFailed as exc:
        cause = exc.__cause__
        if isinstance(cause, ValueError):
            c.that(len(str(cause)) > 10, "raise the ValueError with a message that says what is "
                   "wrong (d_model is not divisible by num_heads).")
            c.ok(f"MultiHeadAttention({d_model}, {num_heads}) raises ValueError")
            return
        if cause is None:
            raise
        c.fail(f"MultiHeadAttention({d_model}, {num_heads}) raised {type(cause).__name__}: "
               f"check that d_model is divisible by num_heads first and raise a ValueError "
               "with a clear message (an assert raises AssertionError and vanishes under "
               "python -O).")
    c.fail(f"MultiHeadAttention({d_model}, {num_heads}) was accepted: {d_model} is not "
           f"divisible by {num_heads}, so the heads can't share the features equally. Raise a "
           "ValueError in __init__.")

P_DROP = 0.5


def _eval_without_dropout(c: Check, m, r, x, what: str) -> None:
    out, w = _forward(c, m, what, x, x, x)
    want, want_w = r(x, x, x)
    tol = (ATOL64, RTOL64) if x.dtype == torch.float64 else (ATOL32, RTOL32)
    c.that(_near(w, want_w, *tol) and _near(out, want, *tol), f"{what}: with dropout={P_DROP} "
           "the results differ from the ones without dropout, although the module is in eval "
           "mode. After model.eval() dropout must do nothing: use dropout that follows the "
           "module's training flag (as the module's own dropout layer does), not dropout that "
           "is always on.")


def _check_dropout(c: Check, md, D: int, H: int) -> None:
    """Dropout=0.5: off in eval mode; in training mode it drops attention weights (not the
    output), and forward returns the weights from before dropout.

    The training-mode checks are properties, so any way of drawing the mask passes: with
    out_proj undone and one query's V_h square and invertible, the output gives back the
    coefficients each value was mixed with; each must be 0 (dropped) or weight / (1 - p)."""
    r = reference_module(D, H, seed=20, dtype=torch.float64)
    _load(c, md, r)
    md.double()
    g = _gen(23)
    x = torch.randn(2, D // H, D, generator=g, dtype=torch.float64)  # k = d_head: V_h square
    _eval_without_dropout(c, md, r, x, "dropout=0.5 in eval mode")
    want, want_w = r(x, x, x)
    md.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        out, w = _forward(c, md, "dropout=0.5 in training mode", x, x, x)
    c.shape(out, tuple(want.shape), "the output (dropout=0.5 in training mode)")
    c.shape(w, tuple(want_w.shape), "the weights (dropout=0.5 in training mode)")
    w, out = w.detach(), out.detach()
    # (a) the weights returned are the ones before dropout
    if not _near(w, want_w, 1e-8, 1e-8):
        dropped = (w == 0) & (want_w > 0)
        scaled = torch.isclose(w, want_w / (1 - P_DROP), atol=1e-8, rtol=1e-8)
        if bool(dropped.any()) or bool((dropped | scaled).all()):
            c.fail(f"with dropout={P_DROP} in training mode the weights you return have dropout "
                   "applied (some are 0, the others scaled up, so the rows no longer sum to 1). "
                   "Return the attention weights from before dropout; only the product with V "
                   "uses the dropped-out copy.")
        c.fail(f"with dropout={P_DROP} in training mode the weights you return differ from the "
               "ones in eval mode. Return the attention weights from before dropout (each row "
               "sums to 1): dropout changes only what is multiplied with V.")
    c.ok("training mode returns the weights before dropout (rows still sum to 1)")
    c.that(not _near(out, want, 1e-9, 1e-9), f"MultiHeadAttention(..., dropout={P_DROP}) in "
           "training mode gives the same output as without dropout: keep an nn.Dropout and "
           "apply it to the attention weights.", "dropout is active in training mode")
    # (b) the output is out_proj(merge(dropout(weights) @ V)): recover the coefficients
    W, b = r.out_proj.weight, r.out_proj.bias
    Y = ref.split_heads(torch.linalg.solve(W, (out - b).mT).mT, H)  # (b, h, q, d_head)
    V = ref.split_heads(r.v_proj(x), H).detach()  # (b, h, k, d_head), k = d_head
    coef = torch.linalg.solve(V.mT, Y.mT).mT  # Y = coef @ V
    zero = torch.isclose(coef, torch.zeros_like(coef), atol=1e-7, rtol=0)
    kept = torch.isclose(coef, want_w / (1 - P_DROP), atol=1e-7, rtol=1e-6)
    if bool((zero | kept).all()):
        c.ok("training mode drops attention weights and rescales the rest by 1 / (1 - p)")
        md.eval()
        _eval_without_dropout(c, md, r, x, "back in eval mode after training")
        return
    unscaled = torch.isclose(coef, want_w, atol=1e-7, rtol=1e-6)
    if bool((zero | unscaled).all()):
        c.fail(f"with dropout={P_DROP} in training mode the weights are dropped but the ones "
               "kept are not scaled up by 1 / (1 - p), so the expected output changes between "
               "training and eval. Use inverted dropout (as nn.Dropout does).")
    zeros_out = float((out == 0).double().mean())
    zeros_heads = float((Y.abs() < 1e-9).double().mean())
    if max(zeros_out, zeros_heads) > 0.2:
        c.fail(f"with dropout={P_DROP} in training mode whole entries of the output (or of the "
               "heads' outputs before out_proj) are zeroed: dropout seems to be applied to the "
               "output. It belongs on the attention weights, between the softmax and the "
               "product with V.")
    c.fail(f"with dropout={P_DROP} in training mode the output is not the values mixed by the "
           "dropped-out attention weights: each weight should either be dropped (0) or scaled "
           "by 1 / (1 - p), and the output built from those exactly as in eval mode. Apply "
           "dropout to the attention weights only, not to the output, the values or the "
           "scores.")


def check_multi_head_attention(MultiHeadAttention, hidden: bool = False) -> None:
    c = Check("MultiHeadAttention", _MHA_BUILTINS, hidden)
    D, H = 12, 3
    _expect_value_error(c, MultiHeadAttention, 10, 3)
    m = _build(c, MultiHeadAttention, D, H)
    _check_layers(c, m, D, bias=True)
    c.ok("q_proj, k_proj, v_proj, out_proj: nn.Linear(12, 12)")
    r = reference_module(D, H, seed=20)
    _load(c, m, r)
    g = _gen(21)
    x = torch.randn(2, 5, D, generator=g)
    out, w = _compare(c, m, r, "self-attention", x, x, x,
                      passed="self-attention (batch 2, 5 tokens, 3 heads) matches, tolerance 1e-5")
    c.close(w.sum(-1), torch.ones(2, H, 5), "each head's weights should sum to 1 over the keys.",
            passed="every head's weights sum to 1")
    q = torch.randn(2, 4, D, generator=g)
    k, v = torch.randn(2, 6, D, generator=g), torch.randn(2, 6, D, generator=g)
    _compare(c, m, r, "cross-attention", q, k, v,
             passed="cross-attention (4 queries, 6 keys, key ≠ value) matches")
    causal = ref_attention.causal_mask(5)
    out, w = _compare(c, m, r, "causal (q, k) mask", x, x, x, mask=causal,
                      passed="a causal (q, k) mask broadcasts over batch and heads")
    c.that(bool((w[..., ~causal] == 0).all()), "masked positions should get weight exactly 0.")
    if hidden:
        # masks per sequence: (b, 1, q, k) and padding (b, 1, 1, k), in cross-attention
        per = torch.rand(2, 1, 4, 6, generator=g) > 0.5
        per[..., 0] = True
        _compare(c, m, r, "(b, 1, q, k) mask", q, k, v, mask=per,
                 passed="a (b, 1, q, k) mask, a different one per sequence")
        keep = torch.tensor([[True] * 6, [True, True, True, False, False, False]])
        _, w = _compare(c, m, r, "(b, 1, 1, k) padding mask", q, k, v, mask=keep[:, None, None],
                        passed="a (b, 1, 1, k) padding mask")
        c.that(bool((w[1, :, :, 3:] == 0).all()), "padded keys should get weight 0 in every head.")
        x1 = torch.randn(1, 3, D, generator=g)
        _compare(c, m, r, "batch of 1", x1, x1, x1, passed="batch of 1")
        # other shapes: one head, d_head = 1, no bias
        for d, h, bias in ((8, 1, True), (6, 6, True), (16, 4, False)):
            mm = _build(c, MultiHeadAttention, d, h, bias=bias)
            _check_layers(c, mm, d, bias)
            rr = reference_module(d, h, seed=22 + d, bias=bias)
            _load(c, mm, rr)
            xx = torch.randn(3, 5, d, generator=g)
            _compare(c, mm, rr, f"d_model={d}, num_heads={h}, bias={bias}", xx, xx, xx,
                     mask=keep.new_ones(3, 1, 1, 5))
        c.ok("one head, d_head = 1, and bias=False")
        _expect_value_error(c, MultiHeadAttention, 16, 5)
        # float64, tight tolerance
        m64, r64 = m.double(), reference_module(D, H, seed=20, dtype=torch.float64)
        q64, k64, v64 = (t.double() for t in (q, k, v))
        _compare(c, m64, r64, "float64", q64, k64, v64, mask=per, atol=ATOL64, rtol=RTOL64,
                 passed="float64 matches to 1e-10")
        m.float()
        # dropout: only in training, off by default
        before = x.clone()
        m.train()
        _compare(c, m, r, "training mode with the default dropout=0.0", x, x, x)
        c.that(torch.equal(x, before), "forward changed its input in place.")
        md = _build(c, MultiHeadAttention, D, H, dropout=0.5)
        _check_dropout(c, md, D, H)
        # gradients reach every projection
        mg = _build(c, MultiHeadAttention, D, H)
        _load(c, mg, r)
        mg.train()
        out, _ = _forward(c, mg, "backward", q, k, v)
        out.sum().backward()
        for name, p in mg.named_parameters():
            c.that(p.grad is not None and bool(p.grad.abs().sum() > 0), f"no gradient reaches "
                   f"{name}: every projection must be used, with tensor operations only.")
        c.ok("gradients reach all four projections")
        for dev in _devices():
            md = m.to(dev)
            out, w = _forward(c, md, dev.type, q.to(dev), k.to(dev), v.to(dev),
                              mask=keep[:, None, None].to(dev))
            c.that(out.device.type == dev.type, f"the output moved off {dev.type}.")
            c.close(out, r(q, k, v, keep[:, None, None])[0], f"wrong values on {dev.type}.",
                    atol=1e-4, rtol=1e-4, passed=f"runs on {dev.type}")
            m.cpu()
    c.done()
