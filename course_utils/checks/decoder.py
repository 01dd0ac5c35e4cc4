"""Checks for 07_decoder: DecoderLayer, Decoder, Transformer, make_padding_mask.

Same method as the encoder checks: known weights copied in by name, outputs compared at a
stated tolerance, and a wrong output compared with the common mistakes to name the likely bug.
"""
from __future__ import annotations

import torch
from torch import nn

from course_grading.reference import decoder as ref
from course_grading.reference.attention import causal_mask
from ._core import Check, CheckFailed
from .encoder import (D, EVERYWHERE, FF, H, _devices, _gen, _near, _run_layers, build, compare,
                      embed_inputs, load_known_weights, reference)


_SIZES = (" Here the target and the source (memory) have different lengths: queries come from the "
          "decoder, keys and values from memory; tgt_mask goes with self-attention and "
          "memory_mask with cross-attention.")


def _call(c: Check, fn, *args):
    """c.call, with a hint about which tensor goes where when the sizes clash."""
    try:
        return c.call(fn, *args)
    except CheckFailed as exc:
        if "must match the size" in str(exc) or "shape" in str(exc):
            raise CheckFailed(str(exc) + _SIZES) from None
        raise


# -- DecoderLayer ------------------------------------------------------------------------------
def _dec_layer_outputs(r, x, memory, tm, mm):
    N1, N2, N3, F = r.norm1, r.norm2, r.norm3, r.ffn

    def S(h, m):
        return r.self_attn(h, h, h, m)[0]

    def C(h, kv, m):
        return r.cross_attn(h, kv, kv, m)[0]

    def post(tm=tm, mm=mm, kv=None, res=(1, 1, 1), cross_first=False):
        h = x
        steps = [lambda h: S(h, tm), lambda h: C(h, memory if kv is None else kv(h), mm), F]
        if cross_first:
            steps[:2] = steps[1::-1]
        for step, norm, keep in zip(steps, (N1, N2, N3), res):
            h = norm(keep * h + step(h))
        return h

    def pre(tm=tm, mm=mm):
        h = x + S(N1(x), tm)
        h = h + C(N2(h), memory, mm)
        return h + F(N3(h))

    with torch.no_grad():
        return {
            "post": post(), "pre": pre(),
            "mistakes": [
                (post(mm=None, kv=lambda h: h), "cross-attention takes its keys and values from "
                 "the decoder's own state. Only the queries come from the decoder; keys and "
                 "values come from memory (the encoder's output)."),
                (post(mm=None, kv=lambda h: x), "cross-attention takes its keys and values from "
                 "the layer's input x; they come from memory (the encoder's output)."),
                (post(tm=None), "tgt_mask is ignored: the decoder's self-attention would see future "
                 "tokens. Pass tgt_mask to self_attn."),
                (pre(tm=None), "tgt_mask is ignored (and this is pre-norm)."),
                (post(mm=None), "memory_mask is ignored: pass it to cross_attn so that padded "
                 "source positions get no attention."),
                (post(tm=None, mm=None), "both masks are ignored."),
                (post(res=(0, 1, 1)), "the residual connection around self-attention is missing."),
                (post(res=(1, 0, 1)), "the residual connection around cross-attention is missing."),
                (post(res=(1, 1, 0)), "the residual connection around the feed-forward network is "
                 "missing."),
                (post(cross_first=True), "cross-attention runs before the masked self-attention; "
                 "the order is self-attention, cross-attention, feed-forward."),
            ],
        }


def check_decoder_layer(DecoderLayer, hidden: bool = False) -> None:
    c = Check("DecoderLayer", EVERYWHERE + ["course_grading.reference.decoder.DecoderLayer.forward"],
              hidden)
    names = "self_attn, cross_attn, ffn, norm1, norm2, norm3"
    g = _gen(40)
    x = torch.randn(2, 5, D, generator=g)
    memory = torch.randn(2, 7, D, generator=g)
    tm = causal_mask(5)
    src = torch.tensor([[4, 5, 6, 7, 8, 0, 0], [4, 5, 6, 7, 8, 9, 3]])
    mm = (src != 0)[:, None, None, :]
    for norm_first in (False, True):
        layer = build(c, DecoderLayer, D, H, FF, norm_first=norm_first)
        r = reference(ref.DecoderLayer, D, H, FF, norm_first=norm_first, seed=4)
        load_known_weights(c, layer, r, names)
        with torch.no_grad():
            for part in ("norm1", "ffn"):
                c.close(c.call(getattr(layer, part), x), getattr(r, part)(x),
                        f"your layer's {part} gives wrong values on its own: fix "
                        f"{'LayerNorm' if part == 'norm1' else 'FeedForward'} first.")
        outs = _dec_layer_outputs(r, x, memory, tm, mm)
        kind, other = ("post", "pre") if not norm_first else ("pre", "post")
        wrong_norm = (outs[other], f"norm_first={norm_first} asks for {kind}-norm, but this "
                      f"output is {other}-norm.")
        got = _call(c, layer, x, memory, tm, mm)
        compare(c, got, outs[kind], f"wrong {kind}-norm output for x (2, 5, 16), memory "
                "(2, 7, 16), a causal tgt_mask and a padding memory_mask.",
                [wrong_norm] + outs["mistakes"], passed=f"norm_first={norm_first}: {kind}-norm, "
                "masked self-attention, cross-attention over memory, residuals")
        if not hidden:
            continue
        plain = _dec_layer_outputs(r, x, memory, None, None)
        compare(c, c.call(layer, x, memory), plain[kind], "wrong output with no masks.",
                [(plain[other], wrong_norm[1])] + plain["mistakes"],
                passed=f"norm_first={norm_first}: no masks")
        lay64 = build(c, DecoderLayer, D, H, FF, norm_first=norm_first).double()
        load_known_weights(c, lay64, r.double(), names)
        tgt_ids = torch.tensor([[1, 5, 6, 0, 0], [1, 7, 8, 9, 2]])
        both = (tgt_ids != 0)[:, None, None, :] & tm  # (2, 1, 5, 5)
        x64, m64 = x.double(), memory.double()
        got = c.call(lay64, x64, m64, both, mm)
        c.that(got.dtype == torch.float64, "float64 in should give float64 out.")
        compare(c, got, _dec_layer_outputs(r, x64, m64, both, mm)[kind], "wrong with a combined "
                "causal + padding tgt_mask of shape (b, 1, t, t), float64.", atol=1e-10, rtol=1e-9,
                passed=f"norm_first={norm_first}: float64, combined masks")
    if hidden:
        c.that(not getattr(build(c, DecoderLayer, D, H, FF), "norm_first", False),
               "norm_first should default to False (post-norm).", "post-norm by default")
        r = reference(ref.DecoderLayer, D, H, FF, seed=4)
        drop = build(c, DecoderLayer, D, H, FF, dropout=0.5)
        load_known_weights(c, drop, r, names)
        drop.train()
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            c.that(not _near(c.call(drop, x, memory, tm, mm), r(x, memory, tm, mm), 1e-6, 1e-6),
                   "DecoderLayer(..., dropout=0.5) in training mode behaves as if there were no "
                   "dropout: pass dropout on.", "uses its dropout argument")
        for dev in _devices()[1:]:
            layer = build(c, DecoderLayer, D, H, FF)
            load_known_weights(c, layer, r, names)
            got = c.call(layer.to(dev), x.to(dev), memory.to(dev), tm.to(dev), mm.to(dev))
            c.that(got.device.type == dev.type, f"output moved off {dev.type}.")
            compare(c, got.cpu(), _dec_layer_outputs(r, x, memory, tm, mm)["post"],
                    f"wrong values on {dev.type}.", atol=1e-4, rtol=1e-3, passed=f"runs on {dev.type}")
    c.done()


# -- Decoder -----------------------------------------------------------------------------------
def check_decoder(Decoder, hidden: bool = False) -> None:
    c = Check("Decoder", EVERYWHERE + ["course_grading.reference.decoder.Decoder.forward"], hidden)
    names = "embedding, pos_encoding, layers"
    dec = build(c, Decoder, 20, D, H, FF, 2)
    r = reference(ref.Decoder, 20, D, H, FF, 2, seed=5)
    load_known_weights(c, dec, r, names)
    g = _gen(50)
    tgt = torch.tensor([[1, 7, 3, 9, 4], [1, 2, 5, 0, 0]])
    memory = torch.randn(2, 6, D, generator=g)
    tm = causal_mask(5)
    mm = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)[:, None, None, :]

    def expected(ids, mem, t, m):
        x, wrong = embed_inputs(r, ids)
        run = lambda h, t=t, m=m, layers=r.layers: _run_layers(layers, h, mem, t, m)  # noqa: E731
        return run(x), [(run(w), msg) for w, msg in wrong] + [
            (run(x, t=None), "tgt_mask is ignored: pass it to every layer."),
            (run(x, m=None), "memory_mask is ignored: pass it to every layer."),
            (run(x, layers=r.layers[:1]), "only the first layer runs."),
            (run(x, layers=r.layers[-1:]), "only the last layer runs on the embeddings: feed "
             "each layer's output to the next."),
        ]

    want, mistakes = expected(tgt, memory, tm, mm)
    got = _call(c, dec, tgt, memory, tm, mm)
    compare(c, got, want, "wrong output: embedding × √d_model + positions, then every layer "
            "with (memory, tgt_mask, memory_mask).", mistakes,
            passed="embedding × √d_model + positions, 2 layers, both masks passed on")
    if hidden:
        want, mistakes = expected(tgt, memory, None, None)
        compare(c, c.call(dec, tgt, memory), want, "wrong output with no masks.", mistakes,
                passed="no masks")
        dec3 = build(c, Decoder, 12, D, H, FF, 3, max_len=30)
        r3 = reference(ref.Decoder, 12, D, H, FF, 3, max_len=30, seed=6)
        load_known_weights(c, dec3, r3, names)
        long = torch.randint(0, 12, (2, 30), generator=g)
        x, _ = embed_inputs(r3, long)
        compare(c, c.call(dec3, long, memory, causal_mask(30)),
                _run_layers(r3.layers, x, memory, causal_mask(30), None),
                "wrong for 3 layers and max_len target tokens: use num_layers and max_len.",
                passed="3 layers, max_len tokens")
        dec64 = build(c, Decoder, 20, D, H, FF, 2).double()
        load_known_weights(c, dec64, r.double(), names)
        got = c.call(dec64, tgt, memory.double(), tm, mm)
        c.that(got.dtype == torch.float64, "a float64 decoder should give float64 outputs.")
        compare(c, got, expected(tgt, memory.double(), tm, mm)[0], "wrong values in float64.",
                atol=1e-10, rtol=1e-9, passed="float64")
    c.done()


# -- Transformer -------------------------------------------------------------------------------
def check_transformer(Transformer, hidden: bool = False) -> None:
    c = Check("Transformer", EVERYWHERE + [
        "course_grading.reference.decoder.Transformer.forward",
        "course_grading.reference.decoder.Transformer.encode",
        "course_grading.reference.decoder.Transformer.decode"], hidden)
    names = "encoder, decoder, generator"
    model = build(c, Transformer, 11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2)
    gen = getattr(model, "generator", None)
    c.that(isinstance(gen, nn.Linear), "the model needs generator = nn.Linear(d_model, "
           "tgt_vocab_size), the layer that turns decoder states into logits.")
    c.shape(gen.weight, (13, D), "generator.weight", "It maps d_model to the TARGET vocabulary.")
    for method in ("encode", "decode"):
        c.that(callable(getattr(model, method, None)), f"the model needs a {method} method.")
    r = reference(ref.Transformer, 11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2, seed=7)
    load_known_weights(c, model, r, names)
    src = torch.tensor([[3, 4, 5, 6, 0, 0], [3, 9, 8, 7, 6, 5]])
    tgt = torch.tensor([[1, 4, 4, 2, 0], [1, 8, 12, 11, 10]])
    sm, tm = (src != 0)[:, None, None, :], causal_mask(5)
    with torch.no_grad():
        memory = r.encode(src, sm)
        want = r(src, tgt, sm, tm)
        mistakes = [
            (r.decode(tgt, memory, tm, None), "src_mask is not passed to the decoder: it must "
             "also mask the cross-attention (memory_mask), so the decoder ignores source padding."),
            (r.decode(tgt, r.encode(src), tm, sm), "src_mask is not passed to the encoder."),
            (r(src, tgt, None, tm), "src_mask is ignored."),
            (r(src, tgt, sm, None), "tgt_mask is ignored: pass it to the decoder."),
            (torch.softmax(want, -1), "these are probabilities; return the logits (the "
             "generator's output, before any softmax)."),
            (torch.log_softmax(want, -1), "these are log-probabilities; return the raw logits."),
        ]
    got_memory = c.call(model.encode, src, sm)
    compare(c, got_memory, memory, "encode(src, src_mask) should return the encoder's output.",
            [(r.encode(src).detach(), "encode ignores src_mask.")], passed="encode")
    got = c.call(model.decode, tgt, memory, tm, sm)
    c.shape(got, (2, 5, 13), "decode(tgt, memory, ...) for tgt of shape (2, 5)",
            "decode returns logits over the target vocabulary: apply self.generator.")
    compare(c, got, want, "decode should be generator(decoder(tgt, memory, tgt_mask, memory_mask)).",
            mistakes[4:], passed="decode returns logits")
    got = c.call(model, src, tgt, sm, tm)
    c.shape(got, (2, 5, 13), "model(src, tgt, ...) for tgt of shape (2, 5)",
            "forward returns logits (b, t, tgt_vocab_size).")
    compare(c, got, want, "forward should encode the source and decode the target with it.",
            mistakes, passed="forward: src_mask for encoder and cross-attention, tgt_mask for "
            "the decoder")
    if hidden:
        with torch.no_grad():
            want0 = r(src, tgt)
        compare(c, c.call(model, src, tgt), want0, "with no masks given, nothing is masked.",
                passed="masks default to None")
        default = build(c, Transformer, 11, 13)
        load_known_weights(c, default, reference(ref.Transformer, 11, 13, seed=8),
                           names + " (check the default sizes: d_model=128, num_heads=4, "
                           "d_ff=512, num_layers=2)")
        c.ok("default sizes d_model=128, d_ff=512, 2 layers")
        both = (tgt != 0)[:, None, None, :] & tm
        m64 = build(c, Transformer, 11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2).double()
        load_known_weights(c, m64, r.double(), names)
        got = c.call(m64, src, tgt, sm, both)
        c.that(got.dtype == torch.float64, "a float64 model should give float64 logits.")
        with torch.no_grad():
            compare(c, got, r(src, tgt, sm, both), "wrong with a combined causal + padding "
                    "tgt_mask, float64.", atol=1e-10, rtol=1e-9, passed="float64, combined masks")
    c.done()


# -- make_padding_mask -------------------------------------------------------------------------
def check_make_padding_mask(make_padding_mask, hidden: bool = False) -> None:
    c = Check("make_padding_mask", ["course_grading.reference.decoder.make_padding_mask"], hidden)
    ids = torch.tensor([[5, 3, 9, 0, 0], [7, 0, 0, 0, 0]])
    m = c.call(make_padding_mask, ids, 0)
    c.that(isinstance(m, torch.Tensor), f"should return a tensor, got {type(m).__name__}.")
    c.that(m.dtype == torch.bool, f"should be a bool tensor, got {m.dtype}: the comparison "
           "ids != pad_id already gives bools; don't convert them.", "bool tensor")
    want = ref.make_padding_mask(ids, 0)
    if m.numel() == want.numel() and torch.equal(m.reshape(-1), ~want.reshape(-1)):
        c.fail("True and False are swapped. In this course True means 'may attend': real tokens "
               "are True, padding is False.")
    if tuple(m.shape) != (2, 1, 1, 5):
        c.fail(f"shape {tuple(m.shape)} for ids of shape (2, 5); expected (2, 1, 1, 5) "
               "— one row per sequence, with singleton dims for the heads and the query "
               "positions (in that order), so it broadcasts against scores (b, heads, q, k).")
    c.that(torch.equal(m, want), "wrong values: True exactly where ids != pad_id.",
           "shape (b, 1, 1, s), True on real tokens")
    if hidden:
        ids2 = torch.tensor([[0, 4, 2, 2], [1, 2, 2, 2], [3, 3, 3, 3]])
        got = c.call(make_padding_mask, ids2, 2)
        c.that(isinstance(got, torch.Tensor) and torch.equal(got, ref.make_padding_mask(ids2, 2)),
               "wrong with pad_id=2: compare with the pad_id argument, not a fixed 0 (here 0 is "
               "a real token).", "uses pad_id")
        before = ids2.clone()
        c.call(make_padding_mask, ids2, 2)
        c.that(torch.equal(ids2, before), "make_padding_mask modified ids in place.")
        meta = c.call(make_padding_mask, ids2.to("meta"), 2)
        c.that(meta.device.type == "meta", "the mask should live on the ids' device.",
               "stays on the ids' device")
    c.done()
