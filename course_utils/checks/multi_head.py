"""Visible checks for 04_multi_head_attention: split_heads, merge_heads, MultiHeadAttention.

These run in the learner's own kernel, so they hold no solution. ``split_heads`` and
``merge_heads`` are compared with their outputs on small known inputs, stored with the package
(``course_utils/data/expected/04_multi_head_attention.npz``, computed by the instructor's
tools). ``MultiHeadAttention`` is compared with
``torch.nn.MultiheadAttention`` holding the same known weights (per-head weights, batch first)
at a stated tolerance; when the numbers are off, the check compares them with what the usual
mistakes give on the same weights (stored too) and names the one that reproduces them. With
``dropout=0.5`` in training mode the check needs no expected output: v_proj is the identity and
out_proj and each head's values are orthogonal, so the coefficients that mixed the values can be
read back from the output, and each must be 0 (dropped) or the eval-mode weight / (1 - p); any
other pattern names where the dropout went instead. The grader adds its hidden cases in the
hidden part of each test cell; they live with the instructor, not here.
"""

from __future__ import annotations

import torch
from torch import nn

from ._core import Check, CheckFailed, generator, torch_isclose
from .heads import (
    MHA_BUILTINS,
    MHA_OPS,
    _stored_tensor,
    check_merge_heads,
    check_split_heads,
    near,
)

ATOL32, RTOL32 = 1e-5, 1e-5  # float32: orders of summation differ (einsum, fused projections)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")
NAMES = "q_proj, k_proj, v_proj, out_proj, each nn.Linear(d_model, d_model)"

# The usual mistakes, by name: the grader computes what each gives and names the one that
# reproduces the learner's numbers.
WEIGHT_MISTAKES = {
    "scale_d_model": "the scores are divided by √d_model. Each head's queries and keys have "
    "only d_head = d_model / num_heads features, and that is the size the scaling is for (the "
    "single-head attention from notebook 03 reads it off the split tensors).",
    "split_no_transpose": "the shapes are right but the weights are not: a reshape of "
    "(b, s, d_model) straight to (b, h, s, d_head) mixes positions inside each head. Split the "
    "features into heads, then move the head axis in front of the sequence axis "
    "(your split_heads).",
    "split_interleaved": "each head should use a contiguous block of d_head features from each "
    "projection (as split_heads does); yours seems to take every h-th feature.",
    "k_from_query": "with a separate `key` input (cross-attention) the keys must be "
    "k_proj(key); yours seem to be computed from `query`.",
    "ignore_mask": "the mask is ignored: pass it on to the attention, where positions whose "
    "mask is False get a score of -inf.",
}
OUTPUT_MISTAKES = {
    "merge_no_transpose": "the weights are right but the output is not: flattening "
    "(b, h, q, d_head) as it is puts heads where positions belong. Undo the split exactly "
    "(your merge_heads) before the output projection.",
    "no_out_proj": "the output equals the concatenated heads without the final projection "
    "W_O: pass it through out_proj.",
    "v_from_key": "the values must be v_proj(value); yours seem to come from `key` (the two "
    "differ in this test).",
    "v_from_query": "the values must be v_proj(value); yours seem to come from `query`.",
}


# -- MultiHeadAttention -------------------------------------------------------------------------


def expect_value_error(c: Check, cls, d_model: int, num_heads: int) -> None:
    what = f"MultiHeadAttention({d_model}, {num_heads})"
    c.raises_value_error(
        what,
        cls,
        d_model,
        num_heads,
        wrong="d_model is not divisible by num_heads",
        instead="check that d_model is divisible by num_heads first and raise a ValueError "
        "with a clear message (an assert raises AssertionError and vanishes under "
        "python -O).",
        accepted=f"{d_model} is not divisible by {num_heads}, so the heads can't share the "
        "features equally. Raise a ValueError in __init__.",
        passed=f"{what} raises ValueError",
    )


def expect_projections(c: Check, m: nn.Module, d_model: int, bias: bool) -> None:
    for name in PROJECTIONS:
        layer = getattr(m, name, None)
        c.that(
            isinstance(layer, nn.Linear),
            f"the module has no nn.Linear called `{name}`. The "
            f"four projections are named {', '.join(PROJECTIONS)} (the names PyTorch and "
            "Llama-style checkpoints use), each nn.Linear(d_model, d_model).",
        )
        c.that(
            (layer.in_features, layer.out_features) == (d_model, d_model),
            f"{name} maps {layer.in_features} → {layer.out_features} features; with "
            f"d_model={d_model} every projection is d_model → d_model (all heads at once).",
        )
        c.that(
            (layer.bias is not None) == bias,
            f"{name} should {'have' if bias else 'not have'} "
            f"a bias with bias={bias}: pass the bias argument on to nn.Linear.",
        )


def projections(d_model: int, bias: bool = True, dtype=torch.float32) -> nn.Module:
    """A module with just the four projections, named as the exercise names them (their
    initial values are drawn without touching the notebook's random state)."""
    with torch.random.fork_rng(devices=[]):
        return nn.ModuleDict(
            {name: nn.Linear(d_model, d_model, bias=bias, dtype=dtype) for name in PROJECTIONS}
        )


def builtin_mha(source: nn.Module, num_heads: int) -> nn.MultiheadAttention:
    """torch.nn.MultiheadAttention holding ``source``'s four projections."""
    q, k, v, o = (getattr(source, name) for name in PROJECTIONS)
    bias = q.bias is not None
    with torch.random.fork_rng(devices=[]):  # its own initialisation draws numbers
        mha = nn.MultiheadAttention(
            q.in_features, num_heads, bias=bias, batch_first=True, dtype=q.weight.dtype
        )
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([q.weight, k.weight, v.weight]))
        mha.out_proj.weight.copy_(o.weight)
        if bias:
            mha.in_proj_bias.copy_(torch.cat([q.bias, k.bias, v.bias]))
            mha.out_proj.bias.copy_(o.bias)
    return mha.eval()


@torch.no_grad()
def builtin_forward(mha: nn.MultiheadAttention, query, key, value, mask=None):
    """(output, per-head weights) of torch's module; ``mask`` True = may attend, broadcastable
    to (b, h, q, k)."""
    b, q, k, h = query.shape[0], query.shape[1], key.shape[1], mha.num_heads
    # torch's convention: True = may NOT attend, shaped (q, k) or (b * h, q, k)
    attn_mask = None if mask is None else ~mask.expand(b, h, q, k).reshape(b * h, q, k)
    return mha(query, key, value, attn_mask=attn_mask, need_weights=True, average_attn_weights=False)


def forward(c: Check, m, what: str, *args, mask=None):
    """The learner's forward, with a message that says which input it failed on."""
    try:
        result = c.call(m, *args, mask=mask)
    except CheckFailed as exc:
        text = str(exc)
        if "very thing" in text or "not implemented" in text:
            raise
        text = text.removeprefix(c.exercise + " ").rstrip(".")
        if "dtype" in text and args[0].dtype != torch.float32:
            c.fail(
                f"{what}: with {args[0].dtype} inputs forward {text}. A tensor made inside "
                "forward has a fixed dtype (torch.zeros(...) and torch.tensor(...) are "
                "float32): create it like the inputs (dtype=query.dtype, device=query.device, "
                "or torch.zeros_like)."
            )
        if mask is not None and "size" in text:
            c.fail(
                f"{what}: with a mask of shape {tuple(mask.shape)} forward {text}. The mask "
                "must broadcast against the (b, h, q, k) scores of the split heads: a (q, k), "
                "(b, 1, q, k) or (b, 1, 1, k) mask does so as it is."
            )
        q, k = args[0].shape[1], args[1].shape[1]
        if q != k:
            c.fail(
                f"{what}: with {q} queries and {k} keys/values forward {text}. Do the keys "
                "come from `key` and the values from `value` (not from `query`), and is "
                "every size read from the right tensor?"
            )
        raise
    c.that(isinstance(result, tuple) and len(result) == 2, "forward should return a pair (output, weights).")
    return result


def compare(
    c: Check,
    m,
    what: str,
    query,
    key,
    value,
    expected,
    mistakes,
    mask=None,
    atol=ATOL32,
    rtol=RTOL32,
    passed: str | None = None,
):
    """Run the learner's module and compare (output, weights) with ``expected``; when they
    differ, ``mistakes(kind)`` ("weights" or "output") gives (what a mistake produces, its
    message) to name the mistake that reproduces the learner's numbers."""
    out, w = forward(c, m, what, query, key, value, mask=mask)
    want, want_w = expected
    b, q, k, h, d = query.shape[0], query.shape[1], key.shape[1], want_w.shape[1], want.shape[-1]
    c.that(
        isinstance(out, torch.Tensor) and isinstance(w, torch.Tensor),
        "forward should return two tensors, (output, weights).",
    )
    c.shape(
        out,
        (b, q, d),
        f"the output ({what})",
        "The output has one d_model vector per query: (b, q_len, d_model).",
    )
    shape_hint = (
        "Return the weights of every head, (b, h, q, k), not their average."
        if tuple(w.shape) == (b, q, k)
        else "The weights are (b, num_heads, q_len, k_len)."
    )
    c.shape(w, (b, h, q, k), f"the weights ({what})", shape_hint)
    c.that(out.dtype == query.dtype, f"the output is {out.dtype} for {query.dtype} inputs.")
    if not near(w, want_w, atol, rtol):
        for cand, message in mistakes("weights"):
            if near(w, cand):
                c.fail(f"{what}: {message}")
        per_sequence = mask is not None and mask.dim() == 4 and mask.shape[0] > 1
        c.fail(
            f"{what}: the attention weights differ from the expected ones (tolerance "
            f"{atol:g}). "
            + (
                "This mask differs from one sequence to the next: make sure "
                "sequence i's mask reaches all the heads of sequence i, and "
                "only those."
                if per_sequence
                else "Each head: softmax(Q_h K_hᵀ / √d_head) with "
                "Q = q_proj(query), K = k_proj(key), split into heads."
            )
        )
    if not near(out, want, atol, rtol):
        for cand, message in mistakes("output"):
            if near(out, cand):
                c.fail(f"{what}: {message}")
        c.fail(
            f"{what}: the weights are right but the output differs (tolerance {atol:g}). "
            "Output = out_proj(merge_heads(weights @ V)) with V = v_proj(value) split into "
            "heads."
        )
    if passed:
        c.ok(passed)
    return out, w


def _stored_mistakes(case: str):
    """mistakes(kind) for a visible case: what each usual mistake gives there, as stored."""

    def mistakes(kind: str):
        table = WEIGHT_MISTAKES if kind == "weights" else OUTPUT_MISTAKES
        for name, message in table.items():
            try:
                yield _stored_tensor(f"mha_{case}_{kind}_{name}"), message
            except KeyError:  # that mistake changes nothing here, or can't run here
                continue

    return mistakes


def known_weights() -> nn.Module:
    """The visible checks' projections (d_model 12), as stored."""
    source = projections(12)
    with torch.no_grad():
        for name, p in source.named_parameters():
            p.copy_(_stored_tensor("mha_" + name.replace(".", "_")))
    return source


def check_multi_head_attention(MultiHeadAttention) -> None:
    c = Check("MultiHeadAttention", MHA_BUILTINS, ops=MHA_OPS)
    D, H = 12, 3
    expect_value_error(c, MultiHeadAttention, 10, 3)
    m = c.build(MultiHeadAttention, D, H)
    expect_projections(c, m, D, bias=True)
    c.ok("q_proj, k_proj, v_proj, out_proj: nn.Linear(12, 12)")
    source = known_weights()
    c.load_by_name(m, source, NAMES)
    theirs = builtin_mha(source, H)
    x, q, k, v = (_stored_tensor(f"mha_{name}") for name in ("x", "query", "key", "value"))
    out, w = compare(
        c,
        m,
        "self-attention",
        x,
        x,
        x,
        builtin_forward(theirs, x, x, x),
        _stored_mistakes("self"),
        passed="self-attention (batch 2, 5 tokens, 3 heads) equals "
        "torch.nn.MultiheadAttention, tolerance 1e-5",
    )
    c.close(
        w.sum(-1),
        torch.ones(2, H, 5),
        "each head's weights should sum to 1 over the keys.",
        passed="every head's weights sum to 1",
    )
    compare(
        c,
        m,
        "cross-attention",
        q,
        k,
        v,
        builtin_forward(theirs, q, k, v),
        _stored_mistakes("cross"),
        passed="cross-attention (4 queries, 6 keys, key ≠ value) matches",
    )
    causal = torch.tril(torch.ones(5, 5, dtype=torch.bool))
    out, w = compare(
        c,
        m,
        "causal (q, k) mask",
        x,
        x,
        x,
        builtin_forward(theirs, x, x, x, causal),
        _stored_mistakes("causal"),
        mask=causal,
        passed="a causal (q, k) mask broadcasts over batch and heads",
    )
    c.that(bool((w[..., ~causal] == 0).all()), "masked positions should get weight exactly 0.")
    m64 = c.build(MultiHeadAttention, D, H)
    m64.double()
    source64 = known_weights().double()
    c.load_by_name(m64, source64, NAMES)
    x64 = x.double()
    compare(
        c,
        m64,
        "float64",
        x64,
        x64,
        x64,
        builtin_forward(builtin_mha(source64, H), x64, x64, x64),
        lambda kind: iter(()),
        atol=1e-6,
        rtol=1e-6,
        passed="float64 module and inputs give float64 results",
    )
    expect_projections(c, c.build(MultiHeadAttention, D, H, bias=False), D, bias=False)
    c.ok("bias=False: four projections without bias")
    expect_dropout_on_weights(c, MultiHeadAttention, D, H)
    c.done()


# -- dropout, in training mode ------------------------------------------------------------------

P_DROP = 0.5


def dropout_case(D: int, H: int, seed: int, dtype=torch.float32):
    """Projections and inputs from which the coefficients that mixed the values can be read
    back from the output, whatever dropout did: v_proj is the identity, out_proj orthogonal,
    and each head's values (k = d_head of them) orthogonal. Returns (source, (query, key,
    value), O) with O the heads' values, (b, h, k, d_head)."""
    g = generator(seed)
    d_head = D // H
    source = projections(D, dtype=dtype)
    with torch.no_grad():
        for name, p in source.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=dtype) / D**0.5)
        source["v_proj"].weight.copy_(torch.eye(D, dtype=dtype))
        source["v_proj"].bias.zero_()
        source["out_proj"].weight.copy_(
            torch.linalg.qr(torch.randn(D, D, generator=g, dtype=torch.float64))[0].to(dtype)
        )
    query = torch.randn(2, 5, D, generator=g, dtype=dtype)
    key = torch.randn(2, d_head, D, generator=g, dtype=dtype)
    O = torch.linalg.qr(torch.randn(2, H, d_head, d_head, generator=g, dtype=torch.float64))[0].to(
        dtype
    )  # (b, h, k, d_head)
    value = O.transpose(1, 2).reshape(2, d_head, D)  # head h's values in its own features
    return source, (query, key, value), O


def read_coefficients(source, out, O, H: int):
    """The weights each value was mixed with, (b, h, q, k), read back from the output of
    out_proj(concat_h(coef_h @ O_h)): undo out_proj (orthogonal), then each O_h."""
    o = source["out_proj"]
    b, q, D = out.shape
    Y = ((out - o.bias) @ o.weight).view(b, q, H, D // H).transpose(1, 2)  # (b, h, q, d_head)
    return Y @ O.transpose(-2, -1), Y


def dropout_verdict(c: Check, out, w, want, want_w, coef, Y, atol: float, rtol: float) -> None:
    """Decide, from the coefficients ``coef`` read back from a training-mode output, whether
    dropout acted on the attention weights that multiply V (each coefficient 0 or
    weight / (1 - p)) and nothing else; name the mistake when not. ``w``: the weights
    returned; ``want``/``want_w``: output and weights without dropout."""
    c.that(
        not near(out, want, atol, rtol),
        f"MultiHeadAttention(..., dropout={P_DROP}) in "
        "training mode gives the same output as without dropout: keep an nn.Dropout and "
        "apply it to the attention weights, before they multiply V.",
        "dropout is active in training mode",
    )
    dropped = coef.abs() <= atol
    kept = torch_isclose(coef, want_w / (1 - P_DROP), atol=atol, rtol=rtol)
    if bool((dropped | kept).all()):
        c.ok("training mode drops attention weights and rescales the rest by 1 / (1 - p)")
        if near(w, want_w, atol, rtol):
            c.ok("training mode returns the weights from before dropout (rows sum to 1)")
        elif near(w, coef, atol, rtol):
            c.ok(
                "training mode returns the dropped-out weights that multiply V "
                "(as torch.nn.MultiheadAttention does)"
            )
        elif bool(((w.abs() <= atol) | torch_isclose(w, want_w / (1 - P_DROP), atol=atol, rtol=rtol)).all()):
            c.fail(
                f"with dropout={P_DROP} in training mode the weights you return have dropout "
                "applied, but not the dropout that the weights multiplying V got: two calls "
                "to dropout draw two different masks. Return the weights from before "
                "dropout, or the very dropped-out tensor you multiply with V."
            )
        else:
            c.fail(
                f"with dropout={P_DROP} in training mode the weights you return are neither "
                "the attention weights from before dropout (each row sums to 1) nor the "
                "dropped-out weights that multiply V."
            )
        return
    if bool((dropped | torch_isclose(coef, want_w, atol=atol, rtol=rtol)).all()):
        c.fail(
            f"with dropout={P_DROP} in training mode the weights are dropped but the ones "
            "kept are not scaled up by 1 / (1 - p), so the expected output changes between "
            "training and eval. Use inverted dropout (as nn.Dropout does)."
        )
    if bool((dropped | torch_isclose(coef, want_w / (1 - P_DROP) ** 2, atol=atol, rtol=rtol)).all()):
        c.fail(
            f"with dropout={P_DROP} in training mode the weights that multiply V went through "
            "dropout twice (the ones kept are scaled by 1 / (1 - p)², and more are dropped "
            "than p says). Apply dropout once, to the weights after the softmax."
        )
    zeros_out = float((out == 0).double().mean())
    zeros_heads = float((Y.abs() <= atol).double().mean())
    if max(zeros_out, zeros_heads) > 0.2:
        c.fail(
            f"with dropout={P_DROP} in training mode whole entries of the output (or of the "
            "heads' outputs, what attention returns) are zeroed: dropout seems to be applied "
            "to the output of attention. It belongs on the attention weights, between the "
            "softmax and the product with V: drop out the weights, then multiply them with V."
        )
    c.fail(
        f"with dropout={P_DROP} in training mode the output is not the values mixed by the "
        "dropped-out attention weights: each weight should either be dropped (0) or scaled "
        "by 1 / (1 - p), and the output built from those exactly as in eval mode. Apply "
        "dropout to the attention weights only, not to the output, the values or the "
        "scores."
    )


def expect_dropout_on_weights(c: Check, MultiHeadAttention, D: int, H: int) -> None:
    """dropout=0.5: nothing in eval mode; in training mode, on the weights that multiply V."""
    source, args, O = dropout_case(D, H, seed=60)
    md = c.build(MultiHeadAttention, D, H, dropout=P_DROP)
    c.load_by_name(md, source, NAMES)  # eval mode
    want, want_w = builtin_forward(builtin_mha(source, H), *args)
    compare(
        c,
        md,
        f"dropout={P_DROP} in eval mode",
        *args,
        (want, want_w),
        lambda kind: iter(()),
        passed=f"dropout={P_DROP} does nothing in eval mode",
    )
    md.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(61)  # any mask will do: the verdict checks properties
        out, w = forward(c, md, f"dropout={P_DROP} in training mode", *args)
    md.eval()
    c.shape(out, tuple(want.shape), f"the output (dropout={P_DROP} in training mode)")
    c.shape(w, tuple(want_w.shape), f"the weights (dropout={P_DROP} in training mode)")
    out, w = out.detach(), w.detach()
    coef, Y = read_coefficients(source, out, O, H)
    dropout_verdict(c, out, w, want, want_w, coef, Y, atol=2e-5, rtol=1e-4)


__all__ = ["check_split_heads", "check_merge_heads", "check_multi_head_attention"]
