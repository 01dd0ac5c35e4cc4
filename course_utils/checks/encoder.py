"""Visible checks for 06_encoder: LayerNorm, FeedForward, EncoderLayer, Encoder.

Known weights are drawn from a seeded generator into PyTorch modules that carry the names the
exercise gives its parts (``Parts``), loaded into the learner's module by name, and copied into
PyTorch's own equivalent: ``F.layer_norm``, ``nn.TransformerEncoderLayer`` (batch first, ReLU,
dropout 0). That equivalent computes what is expected; the sinusoidal table, which no built-in
computes, comes stored (``course_utils/data/expected``). When an output is wrong it is compared
with the outputs of the common mistakes, built from the same PyTorch parts, to name the likely bug.
The parts, their known weights and PyTorch's equivalents are ``torch_parts``, which the checks of
07_decoder and 09_gpt share.

Tolerances: float32 outputs at ``ATOL``/``RTOL``; float64 outputs at ``F64``, loose enough for a
positional table built once in float32 and cast with ``.double()`` (it moves these outputs by
about 1e-8) and some six orders of magnitude below what a real mistake moves them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..forbidden import EVERYWHERE, EVERYWHERE_OPS, LAYER_NORM_BUILTINS, LAYER_NORM_OPS
from ._core import Check, generator, stored, to_numpy
from .torch_parts import (
    ATOL,
    F64,
    RTOL,
    Parts,
    attend,
    compare,
    computing,
    encoder_layer_parts,
    encoder_parts,
    feed_forward,
    ffn_parts,
    known,
    load,
    near,
    run_encoder_layers,
    torch_encoder_layer,
)

ASSIGNMENT = "06_encoder"
D, H, FF = 16, 4, 32  # the small sizes every check uses


# -- LayerNorm -----------------------------------------------------------------------------------
def layer_norm_mistakes(ln: nn.LayerNorm, x: torch.Tensor):
    """(output, message) of the common mistakes, for PyTorch's LayerNorm ``ln`` on ``x``."""
    w, b, eps, d = ln.weight, ln.bias, ln.eps, x.size(-1)
    centred = x - x.mean(-1, keepdim=True)
    with computing():
        plain = F.layer_norm(x, (d,), eps=eps)  # no scale, no shift
        unbiased = math.sqrt((d - 1) / d) * F.layer_norm(x, (d,), eps=eps * (d - 1) / d)
        across = F.layer_norm(x.transpose(-1, -2), (x.size(-2),), eps=eps).transpose(-1, -2)
        return [
            (
                w * unbiased + b,
                "you divide by the unbiased variance (Σ(x-μ)² / (d-1), the default "
                "of torch.var and torch.std). Layer norm uses the plain average Σ(x-μ)² / d.",
            ),
            (
                w * centred / (x.var(-1, keepdim=True, unbiased=False).sqrt() + eps) + b,
                "eps is added outside the square root. It belongs inside: sqrt(var + eps).",
            ),
            (
                w * centred / (x.std(-1, keepdim=True) + eps) + b,
                "you use torch.std (unbiased, d-1) and add eps outside the square root: use the "
                "biased variance and sqrt(var + eps).",
            ),
            (
                w * across + b,
                "you normalise over the wrong axis: each token's vector is normalised on its own, "
                "so take the mean and variance over the LAST dim (the features), keepdim=True.",
            ),
            (
                w * F.layer_norm(x, tuple(x.shape), eps=eps) + b,
                "you normalise the whole tensor "
                "with one mean and one variance: each token's vector has its own, taken over the "
                "LAST dim (the features).",
            ),
            (plain, "the learned scale and shift are missing: multiply by self.weight and add self.bias."),
            (w * plain, "the shift β is missing: add self.bias at the end."),
            (plain + b, "the scale γ is missing: multiply by self.weight."),
            (b * plain + w, "weight and bias are swapped: weight (γ) multiplies, bias (β) is added."),
        ] + [
            (
                F.layer_norm(x, (d,), w, b, other),
                f"these are the values for eps = {other:g}, not "
                f"{eps:g}: the default eps is 1e-5, as in the signature (and nn.LayerNorm); keep "
                "the eps argument as self.eps and use it.",
            )
            for other in (1e-6, 1e-8, 1e-12, 0.0)
            if other != eps
        ]


def layer_norm_case(c: Check, ln, ln_torch: nn.LayerNorm, x, generic: str, passed=None, **tol):
    with computing():
        want = F.layer_norm(x, ln_torch.normalized_shape, ln_torch.weight, ln_torch.bias, ln_torch.eps)
    compare(c, c.call(ln, x), want, generic, layer_norm_mistakes(ln_torch, x), passed=passed, **tol)


def check_layer_norm(LayerNorm) -> None:
    c = Check("LayerNorm", LAYER_NORM_BUILTINS, ops=LAYER_NORM_OPS)
    ln = c.build(LayerNorm, 8)
    params = dict(ln.named_parameters())
    c.that(
        set(params) == {"weight", "bias"},
        "LayerNorm(8) should have exactly two parameters, "
        f"named weight and bias (nn.Parameter); found {sorted(params) or 'none'}.",
    )
    c.shape(params["weight"], (8,), "weight", "One scale per feature: shape (d_model,).")
    c.shape(params["bias"], (8,), "bias", "One shift per feature: shape (d_model,).")
    c.that(
        bool((ln.weight == 1).all()) and bool((ln.bias == 0).all()),
        "a fresh LayerNorm should start as 'no scale, no shift': weight all ones, bias all zeros.",
        "parameters weight (ones) and bias (zeros) of shape (d_model,)",
    )
    r = known(lambda: nn.LayerNorm(8), seed=0)
    load(c, ln, r, "weight, bias")
    g = generator(10)
    x = torch.randn(2, 5, 8, generator=g) * 3 + 1
    layer_norm_case(
        c,
        ln,
        r,
        x,
        "y = weight · (x - mean) / sqrt(var + eps) + bias, with mean "
        "and (biased) variance over the last dim.",
        passed="matches the formula on a (2, 5, 8) input",
    )
    tiny = torch.randn(3, 8, generator=g) * 1e-3  # here eps matters
    layer_norm_case(
        c,
        ln,
        r,
        tiny,
        "wrong when the variance is tiny: is eps (self.eps) inside the square root?",
        passed="eps inside the square root",
    )
    ln_eps = c.build(LayerNorm, 8, eps=0.5)
    r_eps = known(lambda: nn.LayerNorm(8, eps=0.5), seed=0)
    load(c, ln_eps, r_eps, "weight, bias")
    layer_norm_case(
        c,
        ln_eps,
        r_eps,
        tiny * 300,
        "LayerNorm(8, eps=0.5) gives wrong values: "
        "keep the eps argument as self.eps and use it (not a fixed 1e-5).",
        passed="uses its eps argument",
    )
    c.done()


# -- FeedForward ---------------------------------------------------------------------------------
def feed_forward_mistakes(f: Parts, x):
    l1, l2 = f.linear1, f.linear2
    with computing():
        return [
            (
                F.relu(l2(l1(x))),
                "the ReLU comes after the second linear layer; it belongs "
                "between them, on the wide (d_ff) hidden vector. As it is, the output can never "
                "be negative.",
            ),
            (
                l2(l1(x)),
                "there is no non-linearity: two linear layers in a row collapse into one "
                "linear map. Apply ReLU to the hidden vector.",
            ),
            (l2(l1(F.relu(x))), "the ReLU is applied to the input; it belongs after linear1."),
            (F.relu(l2(F.relu(l1(x)))), "there is an extra ReLU at the end: only the hidden layer gets one."),
            (l2(F.gelu(l1(x))), "that is GELU; this exercise (and the 2017 paper) uses ReLU."),
        ]


def feed_forward_case(c: Check, f, parts: Parts, x, generic: str, passed=None, **tol):
    with computing():
        want = feed_forward(parts, x)
    compare(c, c.call(f, x), want, generic, feed_forward_mistakes(parts, x), passed=passed, **tol)


def check_feed_forward(FeedForward) -> None:
    c = Check("FeedForward", EVERYWHERE, ops=EVERYWHERE_OPS)
    f = c.build(FeedForward, D, FF)
    for name, shape in (("linear1", (FF, D)), ("linear2", (D, FF))):
        layer = getattr(f, name, None)
        c.that(
            isinstance(layer, nn.Linear),
            f"FeedForward(d_model, d_ff) needs an nn.Linear attribute named {name}.",
        )
        c.shape(
            layer.weight,
            shape,
            f"{name}.weight for d_model={D}, d_ff={FF}",
            "linear1 widens d_model -> d_ff, linear2 narrows d_ff -> d_model.",
        )
    c.ok("linear1: d_model -> d_ff, linear2: d_ff -> d_model")
    parts = known(lambda: ffn_parts(D, FF), seed=1)
    load(c, f, parts, "linear1, linear2")
    x = torch.randn(2, 5, D, generator=generator(20))
    feed_forward_case(
        c,
        f,
        parts,
        x,
        "expected linear2(relu(linear1(x))).",
        passed="linear2(relu(linear1(x))) on a (2, 5, 16) input",
    )
    fd = c.build(FeedForward, D, FF, dropout=0.5)
    load(c, fd, parts, "linear1, linear2")  # eval mode
    with computing():
        want = feed_forward(parts, x)
    compare(
        c,
        c.call(fd, x),
        want,
        "FeedForward(..., dropout=0.5) in eval mode should give "
        "the output without dropout: nn.Dropout does nothing after .eval().",
        passed="dropout=0.5 does nothing in eval mode",
    )
    fd.train()
    with torch.random.fork_rng(devices=[]):
        noisy = c.call_on("dropout=0.5 in training mode", fd, x)
    fd.eval()
    c.that(
        not near(noisy, want, ATOL, RTOL),
        "FeedForward(..., dropout=0.5) in training mode "
        "gives the same output as without dropout: keep an nn.Dropout(dropout) and apply it "
        "to the wide (d_ff) vector, between the ReLU and linear2.",
        "dropout=0.5 acts in training mode",
    )
    c.that(
        (to_numpy(noisy) == 0).mean() < 0.2,
        "FeedForward(..., dropout=0.5) in training "
        "mode zeroes whole entries of the output: the dropout comes after linear2. It belongs "
        "on the wide (d_ff) vector, between the ReLU and linear2.",
    )
    c.done()


# -- EncoderLayer --------------------------------------------------------------------------------
def encoder_layer_outputs(parts: Parts, x, mask, norm_first: bool) -> dict:
    """What the layer should give (PyTorch's encoder layer with the same weights), what the other
    norm placement and an ignored mask give, and the common mistakes."""
    dtype = x.dtype
    mine = torch_encoder_layer(parts, H, norm_first, dtype)
    other = torch_encoder_layer(parts, H, not norm_first, dtype)
    t = mine  # its parts, for the mistakes

    def A(h):
        return attend(t.self_attn, h, h, mask)

    N1, N2 = t.norm1, t.norm2

    def ffn(h):
        return feed_forward(t, h)

    with computing():
        h = N1(A(x))
        no_res_attn = N2(h + ffn(h))
        h = N1(x + A(x))
        no_res_ffn = N2(ffn(h))
        h = x + N1(A(x))
        norm_inside = h + N2(ffn(h))
        h = A(N1(x))
        pre_no_res_attn = h + ffn(N2(h))
        h = x + A(N1(x))
        pre_no_res_ffn = ffn(N2(h))
        h = N1(x) + A(N1(x))
        pre_res_on_h = N2(h) + ffn(N2(h))
        h = N1(x + ffn(x))
        ffn_first = N2(h + A(h))
        mistakes = [
            (
                no_res_attn,
                "the residual connection around self-attention is missing: add the "
                "layer's input to the attention output before the norm.",
            ),
            (no_res_ffn, "the residual connection around the feed-forward network is missing."),
            (
                norm_inside,
                "the norm is applied to the sub-layer's output before the residual "
                "add; post-norm normalises the SUM: norm(x + sublayer(x)).",
            ),
            (
                pre_no_res_attn,
                "pre-norm without the residual around attention: x + attn(norm(x)), not attn(norm(x)).",
            ),
            (pre_no_res_ffn, "pre-norm without the residual around the feed-forward network."),
            (
                pre_res_on_h,
                "pre-norm adds each sub-layer's output to the normalised h; the "
                "residual adds it to x itself, x + attn(norm1(x)), so that x passes unnormalised.",
            ),
            (ffn_first, "the feed-forward network runs before self-attention; attention comes first."),
        ]
    return {
        "want": run_encoder_layers([mine], x, mask),
        "other": run_encoder_layers([other], x, mask),
        "no_mask": run_encoder_layers([mine], x) if mask is not None else None,
        "mistakes": mistakes,
        "torch": mine,
    }


def encoder_layer_case(
    c: Check, layer, parts: Parts, x, mask, norm_first: bool, generic: str, passed=None, **tol
):
    outs = encoder_layer_outputs(parts, x, mask, norm_first)
    kind, other = ("post", "pre") if not norm_first else ("pre", "post")
    wrong_norm = (
        outs["other"],
        f"norm_first={norm_first} asks for {kind}-norm, but this "
        f"output is {other}-norm. "
        + (
            "Post-norm: x = norm1(x + attn(x)); x = norm2(x + ffn(x))."
            if not norm_first
            else "Pre-norm normalises the sub-layer's INPUT: x = x + attn(norm1(x))."
        ),
    )
    ignored = (outs["no_mask"], "the output ignores the mask: pass it to self_attn.")
    got = c.call(layer, x) if mask is None else c.call(layer, x, mask)
    compare(c, got, outs["want"], generic, [wrong_norm, ignored] + outs["mistakes"], passed=passed, **tol)
    return got


def parts_alone(c: Check, layer, torch_layer, x, parts=("norm1", "ffn")) -> None:
    """The learner's own norm1 and ffn on their own, so that a bug there is named as such."""
    with computing():
        for part in parts:
            want = feed_forward(torch_layer, x) if part == "ffn" else getattr(torch_layer, part)(x)
            c.close(
                c.call(getattr(layer, part), x),
                want,
                f"your layer's {part} gives wrong values on its own: fix "
                f"{'FeedForward' if part == 'ffn' else 'LayerNorm'} first.",
            )


ENCODER_LAYER_NAMES = "self_attn, ffn, norm1, norm2"


def check_encoder_layer(EncoderLayer) -> None:
    c = Check("EncoderLayer", EVERYWHERE, ops=EVERYWHERE_OPS)
    g = generator(30)
    x = torch.randn(2, 6, D, generator=g)
    ids = torch.tensor([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 10]])
    mask = (ids != 0)[:, None, None, :]
    for norm_first in (False, True):
        layer = c.build(EncoderLayer, D, H, FF, norm_first=norm_first)
        parts = known(lambda: encoder_layer_parts(D, FF), seed=1)
        load(c, layer, parts, ENCODER_LAYER_NAMES)
        parts_alone(c, layer, torch_encoder_layer(parts, H), x)
        kind = "pre" if norm_first else "post"
        encoder_layer_case(
            c,
            layer,
            parts,
            x,
            mask,
            norm_first,
            f"wrong {kind}-norm output with a padding mask.",
            passed=f"norm_first={norm_first}: {kind}-norm, residuals, mask",
        )
    c.done()


# -- Encoder -------------------------------------------------------------------------------------
def embedded(weight, ids, table):
    """The right embedded input and the common mistakes: (correct, [(wrong, message)]).
    ``table``: the sinusoidal table (at least ids.size(1) rows) in float64."""
    with computing():
        e = F.embedding(ids, weight)  # (b, s, d_model)
        d = e.size(-1)
        pe = table[: ids.size(1)].to(e)
        return e * math.sqrt(d) + pe, [
            (e + pe, "the token embeddings are not multiplied by √d_model before the positions are added."),
            (e * math.sqrt(d), "the positional encodings are missing: add them to the scaled embeddings."),
            (e * d + pe, "the embeddings are multiplied by d_model; the factor is its square root."),
            (e / math.sqrt(d) + pe, "the embeddings are divided by √d_model; multiply instead."),
            (
                (e + pe) * math.sqrt(d),
                "the positions are scaled too: scale the embeddings first, then add the positions.",
            ),
            (e, "the embeddings get neither the √d_model scale nor the positions."),
        ]


def encoder_outputs(parts: Parts, src, mask, table, dtype=torch.float32):
    """(expected output, [(mistaken output, message)]) of an Encoder with ``parts``' weights."""
    layers = [torch_encoder_layer(p, H, dtype=dtype) for p in parts.layers]
    x, wrong = embedded(parts.embedding.weight.to(dtype), src, table)
    want = run_encoder_layers(layers, x, mask)
    unmasked = (
        []
        if mask is None
        else [(run_encoder_layers(layers, x), "src_mask is ignored: pass it to every layer.")]
    )
    return want, unmasked + [(run_encoder_layers(layers, w, mask), msg) for w, msg in wrong] + [
        (run_encoder_layers(layers[:1], x, mask), "only the first layer runs."),
        (
            run_encoder_layers(layers[-1:], x, mask),
            "only the last layer runs on the embeddings: feed each layer's output to the next.",
        ),
    ]


ENCODER_NAMES = "embedding, pos_encoding, layers"  # a Decoder's too
POSITIONS_HINT = "The positions are the fixed sinusoidal table (a buffer), not a learned parameter."


def known_stack(c: Check, cls, make_parts, seed: int, assignment: str):
    """The learner's stack ``cls`` (an Encoder or a Decoder: vocabulary 20, 2 layers) holding
    the weights of ``make_parts``'s, those parts, and the assignment's stored positional
    table (max_len, D), float64."""
    model = c.build(cls, 20, D, H, FF, 2)
    parts = known(lambda: make_parts(20, D, FF, 2), seed=seed)
    load(c, model, parts, ENCODER_NAMES, POSITIONS_HINT)
    return model, parts, torch.from_numpy(stored(assignment, "table"))


def check_encoder(Encoder) -> None:
    c = Check("Encoder", EVERYWHERE, ops=EVERYWHERE_OPS)
    enc, parts, table = known_stack(c, Encoder, encoder_parts, 2, ASSIGNMENT)
    src = torch.tensor([[3, 7, 1, 9, 4, 0], [2, 2, 5, 8, 0, 0]])
    mask = (src != 0)[:, None, None, :]
    want, mistakes = encoder_outputs(parts, src, None, table)
    compare(
        c,
        c.call(enc, src),
        want,
        "wrong output: embedding × √d_model + positions, then "
        "every layer in order (each layer's output feeds the next).",
        mistakes,
        passed="embedding × √d_model + positions, then 2 layers",
    )
    want, mistakes = encoder_outputs(parts, src, mask, table)
    compare(
        c,
        c.call(enc, src, mask),
        want,
        "wrong output with a src_mask.",
        mistakes,
        passed="passes src_mask to every layer",
    )
    enc64 = c.build(Encoder, 20, D, H, FF, 2).double()
    load(c, enc64, parts, ENCODER_NAMES, POSITIONS_HINT)
    got = c.call_on("a float64 encoder", enc64, src, mask)
    c.that(
        isinstance(got, torch.Tensor) and got.dtype == torch.float64,
        "an encoder turned "
        f"into float64 (.double()) should give float64 outputs, got {getattr(got, 'dtype', None)}:"
        " don't convert inside forward; add the positions in the embeddings' dtype.",
    )
    want, mistakes = encoder_outputs(parts, src, mask, table, torch.float64)
    compare(c, got, want, "wrong values in float64.", mistakes, passed="float64", **F64)
    c.done()


__all__ = ["check_layer_norm", "check_feed_forward", "check_encoder_layer", "check_encoder"]
