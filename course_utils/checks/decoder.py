"""Visible checks for 07_decoder: DecoderLayer, Decoder, Transformer, make_padding_mask.

Same method as the encoder checks: known weights loaded by name into the learner's module and
copied into PyTorch's equivalent (``nn.TransformerDecoderLayer``, batch first, ReLU, dropout 0),
which computes what is expected; the sinusoidal table and the padding mask come stored. A wrong
output is compared with the common mistakes, built from the same PyTorch parts, to name the bug.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from ._core import Check, CheckFailed, generator, stored, torch_equal
from .encoder import (
    ENCODER_NAMES,
    EVERYWHERE,
    EVERYWHERE_OPS,
    FF,
    POSITIONS_HINT,
    D,
    H,
    embedded,
    known_stack,
)
from .torch_parts import (
    Parts,
    _torch_layer,
    attend,
    attention_parts,
    compare,
    computing,
    encoder_parts,
    feed_forward,
    ffn_parts,
    known,
    load,
    run_encoder_layers,
    torch_encoder_layer,
    torch_mask,
)

ASSIGNMENT = "07_decoder"

_SIZES = (
    " Here the target and the source (memory) have different lengths: queries come from the "
    "decoder, keys and values from memory; tgt_mask goes with self-attention and "
    "memory_mask with cross-attention."
)


def call(c: Check, fn, *args):
    """c.call, with a hint about which tensor goes where when the sizes clash."""
    try:
        return c.call(fn, *args)
    except CheckFailed as exc:
        if "must match the size" in str(exc) or "shape" in str(exc):
            raise CheckFailed(str(exc) + _SIZES) from None
        raise


# -- PyTorch's equivalents -----------------------------------------------------------------------
def decoder_layer_parts(d: int, d_ff: int) -> Parts:
    return Parts(
        self_attn=attention_parts(d),
        cross_attn=attention_parts(d),
        ffn=ffn_parts(d, d_ff),
        norm1=nn.LayerNorm(d),
        norm2=nn.LayerNorm(d),
        norm3=nn.LayerNorm(d),
    )


def decoder_parts(vocab: int, d: int, d_ff: int, num_layers: int) -> Parts:
    return Parts(
        embedding=nn.Embedding(vocab, d),
        layers=nn.ModuleList([decoder_layer_parts(d, d_ff) for _ in range(num_layers)]),
    )


def transformer_parts(
    src_vocab: int, tgt_vocab: int, d: int = D, d_ff: int = FF, num_layers: int = 2
) -> Parts:
    return Parts(
        encoder=encoder_parts(src_vocab, d, d_ff, num_layers),
        decoder=decoder_parts(tgt_vocab, d, d_ff, num_layers),
        generator=nn.Linear(d, tgt_vocab),
    )


# PyTorch's decoder layer holding ``parts``' weights: (parts, num_heads, norm_first, dtype)
torch_decoder_layer = functools.partial(
    _torch_layer,
    nn.TransformerDecoderLayer,
    {"self_attn": "self_attn", "multihead_attn": "cross_attn"},
    ("norm1", "norm2", "norm3"),
)


def run_decoder_layers(layers, x, memory, tgt_mask=None, memory_mask=None):
    b, t, s = x.size(0), x.size(1), memory.size(1)
    with computing():
        for layer in layers:
            h = layer.self_attn.num_heads
            x = layer(
                x,
                memory,
                tgt_mask=torch_mask(tgt_mask, b, h, t, t),
                memory_mask=torch_mask(memory_mask, b, h, t, s),
            )
    return x


# -- DecoderLayer --------------------------------------------------------------------------------
def decoder_layer_outputs(parts: Parts, x, memory, tm, mm, norm_first: bool) -> dict:
    """What the layer should give, what the other norm placement gives, and the common mistakes
    (all from PyTorch's decoder layer with the same weights, and its parts)."""
    dtype = x.dtype
    mine = torch_decoder_layer(parts, H, norm_first, dtype)
    other = torch_decoder_layer(parts, H, not norm_first, dtype)
    t = torch_decoder_layer(parts, H, False, dtype)
    N1, N2, N3 = t.norm1, t.norm2, t.norm3

    def S(h, m):
        return attend(t.self_attn, h, h, m)

    def C(h, kv, m):
        return attend(t.multihead_attn, h, kv, m)

    def ffn(h):
        return feed_forward(t, h)

    def post(first, second, keep=(1, 1, 1)):
        """Post-norm with the given first two sub-layers; ``keep`` 0 drops a residual."""
        h = N1(keep[0] * x + first(x))
        h = N2(keep[1] * h + second(h))
        return N3(keep[2] * h + ffn(h))

    def pre_without_tgt_mask():
        h = x + S(N1(x), None)
        h = h + C(N2(h), memory, mm)
        return h + ffn(N3(h))

    def pre_with_memory_normalised():
        h = x + S(N1(x), tm)
        h = h + C(N2(h), N2(memory), mm)
        return h + ffn(N3(h))

    def masked_self(h):
        return S(h, tm)

    def cross(h):
        return C(h, memory, mm)

    with computing():
        mistakes = [
            (
                post(masked_self, lambda h: C(h, h, None)),
                "cross-attention takes its keys and "
                "values from the decoder's own state. Only the queries come from the decoder; keys "
                "and values come from memory (the encoder's output).",
            ),
            (
                post(masked_self, lambda h: C(h, x, None)),
                "cross-attention takes its keys and "
                "values from the layer's input x; they come from memory (the encoder's output).",
            ),
            (
                post(lambda h: S(h, None), cross),
                "tgt_mask is ignored: the decoder's "
                "self-attention would see future tokens. Pass tgt_mask to self_attn.",
            ),
            (pre_without_tgt_mask(), "tgt_mask is ignored (and this is pre-norm)."),
            (
                pre_with_memory_normalised(),
                "norm2 normalises the memory too. In pre-norm it "
                "normalises the cross-attention's queries only (the decoder's state); the keys and "
                "values take the memory as the encoder gave it.",
            ),
            (
                post(masked_self, lambda h: C(h, memory, None)),
                "memory_mask is ignored: pass it "
                "to cross_attn so that padded source positions get no attention.",
            ),
            (post(lambda h: S(h, None), lambda h: C(h, memory, None)), "both masks are ignored."),
            (
                post(masked_self, cross, (0, 1, 1)),
                "the residual connection around self-attention is missing.",
            ),
            (
                post(masked_self, cross, (1, 0, 1)),
                "the residual connection around cross-attention is missing.",
            ),
            (
                post(masked_self, cross, (1, 1, 0)),
                "the residual connection around the feed-forward network is missing.",
            ),
            (
                post(cross, masked_self),
                "cross-attention runs before the masked self-attention; "
                "the order is self-attention, cross-attention, feed-forward.",
            ),
        ]
    return {
        "want": run_decoder_layers([mine], x, memory, tm, mm),
        "other": run_decoder_layers([other], x, memory, tm, mm),
        "mistakes": mistakes,
    }


def decoder_layer_case(
    c: Check, layer, parts: Parts, x, memory, tm, mm, norm_first: bool, generic: str, passed=None, **tol
):
    outs = decoder_layer_outputs(parts, x, memory, tm, mm, norm_first)
    kind, other = ("post", "pre") if not norm_first else ("pre", "post")
    wrong_norm = (
        outs["other"],
        f"norm_first={norm_first} asks for {kind}-norm, but this output is {other}-norm.",
    )
    args = (x, memory) + ((tm, mm) if tm is not None or mm is not None else ())
    got = call(c, layer, *args)
    compare(c, got, outs["want"], generic, [wrong_norm] + outs["mistakes"], passed=passed, **tol)
    return got


def parts_alone(c: Check, layer, parts: Parts, x) -> None:
    """The learner's own norm1 and ffn on their own, so that a bug there is named as such."""
    t = torch_decoder_layer(parts, H)
    with computing():
        c.close(
            c.call(layer.norm1, x),
            t.norm1(x),
            "your layer's norm1 gives wrong values on its own: fix LayerNorm first.",
        )
        c.close(
            c.call(layer.ffn, x),
            feed_forward(t, x),
            "your layer's ffn gives wrong values on its own: fix FeedForward first.",
        )


DECODER_LAYER_NAMES = "self_attn, cross_attn, ffn, norm1, norm2, norm3"


def causal(size: int) -> torch.Tensor:
    """True on and below the diagonal: position i may attend to 0 … i."""
    return torch.ones(size, size, dtype=torch.bool).tril()


def check_decoder_layer(DecoderLayer) -> None:
    c = Check("DecoderLayer", EVERYWHERE, ops=EVERYWHERE_OPS)
    g = generator(40)
    x = torch.randn(2, 5, D, generator=g)
    memory = torch.randn(2, 7, D, generator=g)
    src = torch.tensor([[4, 5, 6, 7, 8, 0, 0], [4, 5, 6, 7, 8, 9, 3]])
    mm = (src != 0)[:, None, None, :]
    for norm_first in (False, True):
        kind = "pre" if norm_first else "post"
        layer = c.build(DecoderLayer, D, H, FF, norm_first=norm_first)
        parts = known(lambda: decoder_layer_parts(D, FF), seed=4)
        load(c, layer, parts, DECODER_LAYER_NAMES)
        parts_alone(c, layer, parts, x)
        decoder_layer_case(
            c,
            layer,
            parts,
            x,
            memory,
            causal(5),
            mm,
            norm_first,
            f"wrong {kind}-norm output for x (2, 5, 16), memory (2, 7, 16), a "
            "causal tgt_mask and a padding memory_mask.",
            passed=f"norm_first={norm_first}: {kind}-norm, masked self-attention, "
            "cross-attention over memory, residuals",
        )
    c.done()


# -- Decoder -------------------------------------------------------------------------------------
def decoder_outputs(parts: Parts, tgt, memory, tm, mm, table, dtype=torch.float32):
    """(expected output, [(mistaken output, message)]) of a Decoder with ``parts``' weights."""
    layers = [torch_decoder_layer(p, H, dtype=dtype) for p in parts.layers]
    x, wrong = embedded(parts.embedding.weight.to(dtype), tgt, table)
    memory = memory.to(dtype)

    def run(h, tm=tm, mm=mm, layers=layers):
        return run_decoder_layers(layers, h, memory, tm, mm)

    mistakes = [(run(w), msg) for w, msg in wrong] + [
        (run(x, layers=layers[:1]), "only the first layer runs."),
        (
            run(x, layers=layers[-1:]),
            "only the last layer runs on the embeddings: feed each layer's output to the next.",
        ),
    ]
    if tm is not None:
        mistakes.insert(0, (run(x, tm=None), "tgt_mask is ignored: pass it to every layer."))
    if mm is not None:
        mistakes.insert(0, (run(x, mm=None), "memory_mask is ignored: pass it to every layer."))
    if tm is not None and mm is not None:
        mistakes.insert(
            0,
            (run(x, tm=mm, mm=tm) if tm.shape == mm.shape else None, "tgt_mask and memory_mask are swapped."),
        )
    return run(x), mistakes


DECODER_NAMES = ENCODER_NAMES


def check_decoder(Decoder) -> None:
    c = Check("Decoder", EVERYWHERE, ops=EVERYWHERE_OPS)
    dec, parts, table = known_stack(c, Decoder, decoder_parts, 5, ASSIGNMENT)
    tgt = torch.tensor([[1, 7, 3, 9, 4], [1, 2, 5, 0, 0]])
    memory = torch.randn(2, 6, D, generator=generator(50))
    tm = causal(5)
    mm = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)[:, None, None, :]
    want, mistakes = decoder_outputs(parts, tgt, memory, tm, mm, table)
    compare(
        c,
        call(c, dec, tgt, memory, tm, mm),
        want,
        "wrong output: embedding × √d_model + "
        "positions, then every layer with (memory, tgt_mask, memory_mask).",
        mistakes,
        passed="embedding × √d_model + positions, 2 layers, both masks passed on",
    )
    c.done()


# -- Transformer ---------------------------------------------------------------------------------
def transformer_outputs(parts: Parts, src, tgt, sm, tm, table, dtype=torch.float32) -> dict:
    """The memory and logits a Transformer with ``parts``' weights should give, and the common
    mistakes."""
    enc = [torch_encoder_layer(p, H, dtype=dtype) for p in parts.encoder.layers]
    dec = [torch_decoder_layer(p, H, dtype=dtype) for p in parts.decoder.layers]
    gen_w = parts.generator.weight.to(dtype)
    gen_b = parts.generator.bias.to(dtype)

    def encode(src_mask):
        x, _ = embedded(parts.encoder.embedding.weight.to(dtype), src, table)
        return run_encoder_layers(enc, x, src_mask)

    def decode(memory, tgt_mask, memory_mask):
        y, _ = embedded(parts.decoder.embedding.weight.to(dtype), tgt, table)
        with computing():
            return nn.functional.linear(
                run_decoder_layers(dec, y, memory, tgt_mask, memory_mask), gen_w, gen_b
            )

    memory = encode(sm)
    logits = decode(memory, tm, sm)
    with computing():
        mistakes = [
            (
                decode(memory, tm, None),
                "src_mask is not passed to the decoder: it must also mask "
                "the cross-attention (memory_mask), so the decoder ignores source padding.",
            ),
            (decode(encode(None), tm, sm), "src_mask is not passed to the encoder."),
            (decode(encode(None), tm, None), "src_mask is ignored."),
            (decode(memory, None, sm), "tgt_mask is ignored: pass it to the decoder."),
            (
                torch.softmax(logits, -1),
                "these are probabilities; return the logits (the generator's output, before any softmax).",
            ),
            (torch.log_softmax(logits, -1), "these are log-probabilities; return the raw logits."),
        ]
    return {"memory": memory, "memory_unmasked": encode(None), "logits": logits, "mistakes": mistakes}


TRANSFORMER_NAMES = "encoder, decoder, generator"


def check_transformer(Transformer) -> None:
    c = Check("Transformer", EVERYWHERE, ops=EVERYWHERE_OPS)
    model = c.build(Transformer, 11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2)
    gen = getattr(model, "generator", None)
    c.that(
        isinstance(gen, nn.Linear),
        "the model needs generator = nn.Linear(d_model, "
        "tgt_vocab_size), the layer that turns decoder states into logits.",
    )
    c.shape(gen.weight, (13, D), "generator.weight", "It maps d_model to the TARGET vocabulary.")
    for method in ("encode", "decode"):
        c.that(callable(getattr(model, method, None)), f"the model needs a {method} method.")
    parts = known(lambda: transformer_parts(11, 13), seed=7)
    load(c, model, parts, TRANSFORMER_NAMES, POSITIONS_HINT)
    table = torch.from_numpy(stored(ASSIGNMENT, "table"))
    src = torch.tensor([[3, 4, 5, 6, 0, 0], [3, 9, 8, 7, 6, 5]])
    tgt = torch.tensor([[1, 4, 4, 2, 0], [1, 8, 12, 11, 10]])
    sm, tm = (src != 0)[:, None, None, :], causal(5)
    outs = transformer_outputs(parts, src, tgt, sm, tm, table)
    compare(
        c,
        c.call(model.encode, src, sm),
        outs["memory"],
        "encode(src, src_mask) should return the encoder's output.",
        [(outs["memory_unmasked"], "encode ignores src_mask.")],
        passed="encode",
    )
    got = c.call(model.decode, tgt, outs["memory"], tm, sm)
    c.shape(
        got,
        (2, 5, 13),
        "decode(tgt, memory, ...) for tgt of shape (2, 5)",
        "decode returns logits over the target vocabulary: apply self.generator.",
    )
    compare(
        c,
        got,
        outs["logits"],
        "decode should run the decoder on tgt, memory and both "
        "masks, then the generator on the decoder's output.",
        outs["mistakes"][4:],
        passed="decode returns logits",
    )
    got = c.call(model, src, tgt, sm, tm)
    c.shape(
        got,
        (2, 5, 13),
        "model(src, tgt, ...) for tgt of shape (2, 5)",
        "forward returns logits (b, t, tgt_vocab_size).",
    )
    compare(
        c,
        got,
        outs["logits"],
        "forward should encode the source and decode the target with it.",
        outs["mistakes"],
        passed="forward: src_mask for encoder and cross-attention, tgt_mask for the decoder",
    )
    unmasked = transformer_outputs(parts, src, tgt, sm, None, table)["logits"]
    compare(
        c,
        c.call(model, src, tgt, sm),
        unmasked,
        "with tgt_mask=None (no mask at all) the decoder should see every target position.",
        [
            (
                outs["logits"],
                "with tgt_mask=None "
                "forward still hides the future: it should pass on the masks it is given and make "
                "none of its own (the caller makes the causal mask).",
            )
        ],
        passed="tgt_mask=None: no target mask",
    )
    c.done()


# -- make_padding_mask ---------------------------------------------------------------------------
def check_make_padding_mask(make_padding_mask) -> None:
    c = Check("make_padding_mask")
    ids = torch.tensor([[5, 3, 9, 0, 0], [7, 0, 0, 0, 0]])
    m = c.call(make_padding_mask, ids, 0)
    c.that(isinstance(m, torch.Tensor), f"should return a tensor, got {type(m).__name__}.")
    c.that(
        m.dtype == torch.bool,
        f"should be a bool tensor, got {m.dtype}: the comparison "
        "ids != pad_id already gives bools; don't convert them.",
        "bool tensor",
    )
    want = torch.from_numpy(stored(ASSIGNMENT, "padding_mask"))
    if m.numel() == want.numel() and torch_equal(m.reshape(-1), ~want.reshape(-1)):
        c.fail(
            "True and False are swapped. In this course True means 'may attend': real tokens "
            "are True, padding is False."
        )
    if tuple(m.shape) != (2, 1, 1, 5):
        c.fail(
            f"shape {tuple(m.shape)} for ids of shape (2, 5); expected (2, 1, 1, 5) "
            "— one row per sequence, with singleton dims for the heads and the query "
            "positions (in that order), so it broadcasts against scores (b, heads, q, k)."
        )
    c.that(
        torch_equal(m, want),
        "wrong values: True exactly where ids != pad_id.",
        "shape (b, 1, 1, s), True on real tokens",
    )
    c.done()
