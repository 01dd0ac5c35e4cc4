"""Which torch operators the audit records, and which of them each audited exercise may not run.

The child records every operator of ``recorded_names``: those ``derive`` finds the checks'
built-ins reaching on the CPU, and ``ROUTES``, the routes the CPU probes cannot take (sparse and
masked softmax, attention kernels of other devices). Each records through a kernel at the
dispatcher on any thread (``hooks``), computing it by plain arithmetic or torch's own
decomposition where honest code may call it, and refusing the rest. The grader's side then
fails an exercise when one of the operators it may not run (``forbidden_ops``: the checks' own
lists, the operators derived from their built-ins, and ``EXTRA``) ran while its calls ran, or
after, on a thread the submission left.
"""

from __future__ import annotations

import fnmatch
from functools import lru_cache

from . import derive

# routes to a native softmax or attention besides the checks' own lists
SOFTMAX_ROUTES = ["_masked_softmax*", "_sparse_softmax*", "_sparse_log_softmax*"]
EXTRA = {
    "softmax": SOFTMAX_ROUTES
    + ["_scaled_dot_product*", "_native_multi_head_attention", "_transformer_encoder_layer_fwd"],
    "one_hot": ["one_hot"],
}
# recorded beyond what the probes reach on the CPU (patterns as in the checks: "name*" a prefix)
ROUTES = (
    "_safe_softmax",
    "_masked_softmax*",
    "_sparse_softmax*",
    "_sparse_log_softmax*",
    "_scaled_dot_product*",
    "_native_multi_head_attention*",
    "_transformer_encoder_layer_fwd*",
    "_embedding_bag*",
)


def _checks() -> dict[str, tuple[list[str], list[str]]]:
    """{function or class: (the built-ins its check forbids, the check's operator patterns)}
    (the checks' own lists, read without importing the checks)."""
    from course_utils import forbidden as f

    found = {
        "softmax": (f.SOFTMAX_BUILTINS, f.SOFTMAX_OPS),
        "embed": (f.EMBED_BUILTINS, f.EMBED_OPS),
        "one_hot": (f.ONE_HOT_BUILTINS, []),
        "LayerNorm": (f.LAYER_NORM_BUILTINS, f.LAYER_NORM_OPS),
    }
    for name in ("simple_self_attention", "scaled_dot_product_attention"):
        found[name] = (f.ATTENTION_BUILTINS, f.ATTENTION_OPS)
    for name in ("cosine_similarity", "cosine_similarity_matrix", "most_similar", "analogy"):
        found[name] = (f.COSINE_BUILTINS, f.COSINE_OPS)
    for name in ("split_heads", "merge_heads", "MultiHeadAttention"):
        found[name] = (f.MHA_BUILTINS, f.MHA_OPS)
    for name in (
        "FeedForward",
        "EncoderLayer",
        "Encoder",
        "DecoderLayer",
        "Decoder",
        "Transformer",
        "GPTBlock",
        "GPT",
    ):
        found[name] = (f.EVERYWHERE, f.EVERYWHERE_OPS)
    return found


@lru_cache(maxsize=None)
def forbidden_ops(function: str) -> tuple[str, ...]:
    """The operator patterns ("_softmax", "_scaled_dot_product*") that ``function`` may not run."""
    builtins, ops = _checks().get(function, ([], []))
    derived = sorted(derive.specific(builtins, derive.allowed_for(builtins))) if builtins else []
    return tuple(ops) + tuple(EXTRA.get(function, [])) + tuple(derived)


def matches(op: str, patterns) -> bool:
    """Whether a recorded operator ("aten::_softmax.out") is one of ``patterns`` (its name
    without namespace and overload, as the checks write them; "name*" a prefix)."""
    return any(fnmatch.fnmatchcase(derive.base(op), p) for p in patterns)


def recorded_names() -> tuple[str, ...]:
    """The operator names and patterns the child records."""
    return ROUTES + tuple(sorted(derive.recorded()))


def recorded_ops(names=None) -> dict:
    """``ops_for(names)``, by default for ``recorded_names()``."""
    return ops_for(tuple(names) if names is not None else recorded_names())


@lru_cache(maxsize=2)
def ops_for(patterns: tuple[str, ...]) -> dict:
    """{"aten::op.overload": how the child computes it} for every overload of every operator
    ``patterns`` names: ``COMPUTED``'s plain arithmetic for what honest code calls (softmax,
    layer norm, an embedding: nothing imported, nothing slow), the CompositeImplicitAutograd
    kernel of an operator that has one, else None (refused: no honest exercise calls it). Looked
    up once (the warm sandbox does it before it forks any audit)."""
    import torch

    found = {}
    for name in sorted(set(dir(torch.ops.aten)) | {p.rstrip("*") for p in patterns}):
        if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
            continue
        try:
            packet = getattr(torch.ops.aten, name)
        except (AttributeError, RuntimeError):
            continue
        for overload in packet.overloads():
            op = getattr(packet, overload)
            found[op.name()] = _compute(name, op)
    return found


def _compute(name: str, op):
    import torch

    if name in COMPUTED:
        return COMPUTED[name]
    if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd"):
        return op.decompose
    return None


def _out(compute):
    """The ``.out`` overload of ``compute``: the result written into ``out``."""

    def with_out(*args, out=None, **kwargs):
        result = compute(*args, **kwargs)
        if out is None:
            return result
        out.resize_(result.shape).copy_(result)
        return out

    return with_out


@_out
def _softmax(x, dim, half_to_float=False):
    x = x.float() if half_to_float else x
    if x.numel() == 0:
        return x.clone()
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)


@_out
def _log_softmax(x, dim, half_to_float=False):
    x = x.float() if half_to_float else x
    if x.numel() == 0:
        return x.clone()
    shifted = x - x.amax(dim, keepdim=True)
    return shifted - shifted.exp().sum(dim, keepdim=True).log()


def _safe_softmax(x, dim, dtype=None):
    x = x if dtype is None else x.to(dtype)
    return _softmax(x, dim).masked_fill((x == float("-inf")).all(dim, keepdim=True), 0)


@_out
def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    dims = tuple(range(x.dim() - len(normalized_shape), x.dim()))
    mean = x.mean(dims, keepdim=True)
    rstd = (x.var(dims, unbiased=False, keepdim=True) + eps).rsqrt()
    out = (x - mean) * rstd
    out = out if weight is None else out * weight
    return (out if bias is None else out + bias), mean, rstd


@_out
def _embedding(weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return weight.index_select(0, indices.reshape(-1)).reshape(*indices.shape, *weight.shape[1:])


COMPUTED = {
    "_softmax": _softmax,
    "_log_softmax": _log_softmax,
    "_safe_softmax": _safe_softmax,
    "native_layer_norm": _layer_norm,
    "embedding": _embedding,
}
