"""Known weights in PyTorch's own modules, and the comparisons the checks of 06_encoder,
07_decoder and 09_gpt share.

``Parts`` holds PyTorch modules under the names an exercise gives its parts; ``known`` fills them
from a seeded generator. They are loaded into the learner's module by name (``load``) and copied
into PyTorch's own equivalent (``torch_encoder_layer``, batch first, ReLU, dropout 0), which
computes what is expected. ``compare`` fails an output naming the likely mistake.

Tolerances: float32 outputs at ``ATOL``/``RTOL``; float64 outputs at ``F64`` (see
``course_utils.checks.encoder``).
"""

from __future__ import annotations

import contextlib
import functools
import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from ._core import Check, _allclose, generator, to_numpy

ATOL, RTOL = 2e-5, 1e-4  # float32
F64 = dict(atol=1e-6, rtol=1e-6)  # float64


# -- known weights in PyTorch's own modules ------------------------------------------------------
class Parts(nn.Module):
    """PyTorch modules under the names an exercise gives its parts: the weights to load."""

    def __init__(self, **parts: nn.Module):
        super().__init__()
        for name, part in parts.items():
            self.add_module(name, part)


def _fresh(make):
    with torch.random.fork_rng(devices=[]):  # building modules draws from the global RNG
        return make()


def attention_parts(d: int) -> Parts:
    return Parts(**{name: nn.Linear(d, d) for name in ("q_proj", "k_proj", "v_proj", "out_proj")})


def ffn_parts(d: int, d_ff: int) -> Parts:
    return Parts(linear1=nn.Linear(d, d_ff), linear2=nn.Linear(d_ff, d))


def encoder_layer_parts(d: int, d_ff: int) -> Parts:
    return Parts(
        self_attn=attention_parts(d), ffn=ffn_parts(d, d_ff), norm1=nn.LayerNorm(d), norm2=nn.LayerNorm(d)
    )


def encoder_parts(vocab: int, d: int, d_ff: int, num_layers: int) -> Parts:
    return Parts(
        embedding=nn.Embedding(vocab, d),
        layers=nn.ModuleList([encoder_layer_parts(d, d_ff) for _ in range(num_layers)]),
    )


def known(make, seed: int) -> nn.Module:
    """``make()`` (a Parts or a PyTorch module) with weights drawn from ``seed``: norms get a
    scale near 1 and a shift, every bias is non-zero, so that a part left out shows up."""
    module = _fresh(make)
    g = generator(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if p.dim() == 1 and leaf == "weight":  # a norm's scale
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
            elif leaf == "bias":
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "embedding" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:  # a weight matrix (out, in)
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
    return module.eval()


def _copy(dst: nn.Module, src: nn.Module) -> None:
    with torch.no_grad():
        dst.weight.copy_(src.weight)
        dst.bias.copy_(src.bias)


def _copy_attention(dst: nn.MultiheadAttention, src: Parts) -> None:
    with torch.no_grad():
        dst.in_proj_weight.copy_(torch.cat([src.q_proj.weight, src.k_proj.weight, src.v_proj.weight]))
        dst.in_proj_bias.copy_(torch.cat([src.q_proj.bias, src.k_proj.bias, src.v_proj.bias]))
    _copy(dst.out_proj, src.out_proj)


def _torch_layer(
    make,
    attentions: dict[str, str],
    norms: tuple[str, ...],
    parts: Parts,
    num_heads: int,
    norm_first: bool = False,
    dtype=torch.float32,
) -> nn.Module:
    """PyTorch's layer ``make`` (encoder or decoder layer class) holding ``parts``' weights:
    ``attentions`` maps its attention attributes to the parts', ``norms`` names the norms.
    ``torch_encoder_layer`` and ``decoder.torch_decoder_layer`` fix the first three."""
    d, d_ff = parts.norm1.weight.numel(), parts.ffn.linear1.out_features
    layer = _fresh(lambda: make(d, num_heads, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first))
    for theirs, mine in attentions.items():
        _copy_attention(getattr(layer, theirs), getattr(parts, mine))
    _copy(layer.linear1, parts.ffn.linear1)
    _copy(layer.linear2, parts.ffn.linear2)
    for name in norms:
        _copy(getattr(layer, name), getattr(parts, name))
    # training mode with dropout 0: the same numbers, without PyTorch's fused inference path
    return layer.to(dtype).train()


# PyTorch's encoder layer holding ``parts``' weights: (parts, num_heads, norm_first, dtype)
torch_encoder_layer = functools.partial(
    _torch_layer, nn.TransformerEncoderLayer, {"self_attn": "self_attn"}, ("norm1", "norm2")
)


@contextlib.contextmanager
def computing():
    """Around the check's own computations: no gradients, no warnings (stderr costs marks)."""
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def torch_mask(mask, batch: int, heads: int, q: int, k: int):
    """A course mask (bool, True = may attend, broadcastable to (b, heads, q, k)) as PyTorch's
    attention modules take it: (b * heads, q, k), True = masked."""
    if mask is None:
        return None
    return ~torch.broadcast_to(mask.bool(), (batch, heads, q, k)).reshape(batch * heads, q, k)


def attend(attn: nn.MultiheadAttention, query, memory, mask):
    """PyTorch's multi-head attention of ``query`` over ``memory`` with a course mask."""
    b, q, k = query.size(0), query.size(1), memory.size(1)
    return attn(
        query, memory, memory, attn_mask=torch_mask(mask, b, attn.num_heads, q, k), need_weights=False
    )[0]


def feed_forward(layer, x):
    """PyTorch's layer's feed-forward network (linear1, ReLU, linear2)."""
    return layer.linear2(F.relu(layer.linear1(x)))


def run_encoder_layers(layers, x, mask=None):
    with computing():
        for layer in layers:
            x = layer(
                x, src_mask=torch_mask(mask, x.size(0), layer.self_attn.num_heads, x.size(1), x.size(1))
            )
    return x


# -- comparing -----------------------------------------------------------------------------------
def output_tensor(c: Check, out, what: str):
    if isinstance(out, tuple):
        c.fail(
            f"{what} returned a tuple; return only the output tensor (the attention weights "
            "stay inside the layer)."
        )
    c.that(isinstance(out, torch.Tensor), f"{what} should return a tensor, got {type(out).__name__}.")
    return out


def near(a, b, atol, rtol) -> bool:
    a, b = to_numpy(a), to_numpy(b)
    return a.shape == b.shape and bool(_allclose(a, b, atol=atol, rtol=rtol))


def compare(
    c: Check,
    got,
    want,
    generic: str,
    mistakes=(),
    atol: float = ATOL,
    rtol: float = RTOL,
    passed: str | None = None,
) -> None:
    """Pass if got ≈ want; otherwise name the first known mistake it matches, else ``generic``."""
    got = output_tensor(c, got, c.exercise)
    c.shape(got, tuple(want.shape), "the output", "It should have the same shape as the input.")
    if not near(got, want, atol, rtol):
        for candidate, message in mistakes:
            if candidate is not None and near(got, candidate, 1e-4, 1e-3):
                c.fail(message)
    c.close(got, want, generic, atol=atol, rtol=rtol, passed=passed)


def load(c: Check, student: nn.Module, parts: nn.Module, names: str, hint: str = "") -> None:
    """The known weights into the learner's module, matched by name (then eval mode)."""
    c.load_by_name(student, parts, names, hint)
