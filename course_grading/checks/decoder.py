"""Hidden checks for 07_decoder: DecoderLayer, Decoder, Transformer, make_padding_mask.

They add, to the visible checks of ``course_utils.checks.decoder``: no masks, combined causal +
padding target masks, more layers and max_len positions, the default sizes, dropout in training,
float64 (at the tolerance of ``F64``: a positional table built once in float32 and cast with
``.double()`` is correct), other pad ids, devices.
"""

from __future__ import annotations

import numpy as np
import torch

from course_grading.reference import decoder as ref
from course_utils.checks import decoder as visible
from course_utils.checks.encoder import EVERYWHERE, EVERYWHERE_OPS, FF, POSITIONS_HINT, D, H
from course_utils.checks.kit import Check, generator, torch_equal
from course_utils.checks.torch_parts import F64, compare, known, load, near

from ._common import both_norms, forbidding, gradients_reach, leaves_input, runs_on, trains_on_every_device
from ._device import second_devices
from .positional import exact as exact_table

ASSIGNMENT = "07_decoder"
_REF = "course_grading.reference.decoder"


def expected_outputs() -> dict[str, np.ndarray]:
    """What the visible checks compare with and no built-in computes."""
    ids = torch.tensor([[5, 3, 9, 0, 0], [7, 0, 0, 0, 0]])
    return {"table": exact_table(16, D).numpy(), "padding_mask": ref.make_padding_mask(ids, 0).numpy()}


# -- DecoderLayer --------------------------------------------------------------------------------
def check_decoder_layer(DecoderLayer) -> None:
    c = Check("DecoderLayer", EVERYWHERE + forbidding(_REF, "DecoderLayer"), hidden=True, ops=EVERYWHERE_OPS)
    g = generator(41)
    x = torch.randn(2, 5, D, generator=g)
    memory = torch.randn(2, 7, D, generator=g)
    src = torch.tensor([[4, 5, 6, 7, 8, 0, 0], [4, 5, 6, 7, 8, 9, 3]])
    mm = (src != 0)[:, None, None, :]
    tgt_ids = torch.tensor([[1, 5, 6, 0, 0], [1, 7, 8, 9, 2]])
    both = (tgt_ids != 0)[:, None, None, :] & visible.causal(5)  # (2, 1, 5, 5)
    parts = known(lambda: visible.decoder_layer_parts(D, FF), seed=14)
    both_norms(
        c,
        lambda norm_first: c.build(DecoderLayer, D, H, FF, norm_first=norm_first),
        lambda layer: load(c, layer, parts, visible.DECODER_LAYER_NAMES),
        lambda layer, *rest, **kw: visible.decoder_layer_case(c, layer, parts, *rest, **kw),
        ((x, memory, None, None), "wrong output with no masks.", "norm_first={norm_first}: no masks"),
        lambda: (
            (x.double(), memory.double(), both, mm),
            "wrong with a combined causal + padding tgt_mask of shape (b, 1, t, t), float64.",
            "norm_first={norm_first}: float64, combined masks",
        ),
    )
    c.that(
        not getattr(c.build(DecoderLayer, D, H, FF), "norm_first", False),
        "norm_first should default to False (post-norm).",
        "post-norm by default",
    )
    parts = known(lambda: visible.decoder_layer_parts(D, FF), seed=15)
    drop = c.build(DecoderLayer, D, H, FF, dropout=0.5)
    load(c, drop, parts, visible.DECODER_LAYER_NAMES)
    drop.train()
    want = visible.run_decoder_layers(
        [visible.torch_decoder_layer(parts, H)], x, memory, visible.causal(5), mm
    )
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        c.that(
            not near(c.call(drop, x, memory, visible.causal(5), mm), want, 1e-6, 1e-6),
            "DecoderLayer(..., dropout=0.5) in training mode behaves as if there were no "
            "dropout: pass dropout on.",
            "uses its dropout argument",
        )

    def build():
        layer = c.build(DecoderLayer, D, H, FF)
        load(c, layer, parts, visible.DECODER_LAYER_NAMES)
        return layer

    trains_on_every_device(c, build, (x, memory, visible.causal(5), mm), want)
    c.done()


# -- Decoder -------------------------------------------------------------------------------------
def check_decoder(Decoder) -> None:
    c = Check("Decoder", EVERYWHERE + forbidding(_REF, "Decoder"), hidden=True, ops=EVERYWHERE_OPS)
    g = generator(51)
    tgt = torch.tensor([[1, 7, 3, 9, 4], [1, 2, 5, 0, 0]])
    memory = torch.randn(2, 6, D, generator=g)
    tm = visible.causal(5)
    mm = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)[:, None, None, :]
    parts = known(lambda: visible.decoder_parts(20, D, FF, 2), seed=16)
    dec = c.build(Decoder, 20, D, H, FF, 2)
    load(c, dec, parts, visible.DECODER_NAMES, POSITIONS_HINT)
    want, mistakes = visible.decoder_outputs(parts, tgt, memory, None, None, exact_table(5, D))
    compare(c, c.call(dec, tgt, memory), want, "wrong output with no masks.", mistakes, passed="no masks")
    dec3 = c.build(Decoder, 12, D, H, FF, 3, max_len=30)
    parts3 = known(lambda: visible.decoder_parts(12, D, FF, 3), seed=17)
    load(c, dec3, parts3, visible.DECODER_NAMES, POSITIONS_HINT)
    long = torch.randint(0, 12, (2, 30), generator=g)
    want, mistakes = visible.decoder_outputs(
        parts3, long, memory, visible.causal(30), None, exact_table(30, D)
    )
    compare(
        c,
        visible.call(c, dec3, long, memory, visible.causal(30)),
        want,
        "wrong for 3 layers and max_len target tokens: use num_layers and max_len.",
        mistakes,
        passed="3 layers, max_len tokens",
    )
    dec64 = c.build(Decoder, 20, D, H, FF, 2).double()
    load(c, dec64, parts, visible.DECODER_NAMES, POSITIONS_HINT)
    got = visible.call(c, dec64, tgt, memory.double(), tm, mm)
    c.that(
        isinstance(got, torch.Tensor) and got.dtype == torch.float64,
        "a float64 decoder should give float64 outputs: add the positions in the embeddings' dtype.",
    )
    want, mistakes = visible.decoder_outputs(parts, tgt, memory, tm, mm, exact_table(5, D), torch.float64)
    compare(c, got, want, "wrong values in float64.", mistakes, passed="float64", **F64)
    want, _ = visible.decoder_outputs(parts, tgt, memory, tm, mm, exact_table(5, D))

    def build():
        dec = c.build(Decoder, 20, D, H, FF, 2)
        load(c, dec, parts, visible.DECODER_NAMES, POSITIONS_HINT)
        return dec

    trains_on_every_device(c, build, (tgt, memory, tm, mm), want)
    c.done()


# -- Transformer ---------------------------------------------------------------------------------
def check_transformer(Transformer) -> None:
    c = Check(
        "Transformer",
        EVERYWHERE
        + forbidding(_REF, "Transformer")
        + [f"{_REF}.Transformer.encode", f"{_REF}.Transformer.decode"],
        hidden=True,
        ops=EVERYWHERE_OPS,
    )
    src = torch.tensor([[3, 4, 5, 6, 0, 0], [3, 9, 8, 7, 6, 5]])
    tgt = torch.tensor([[1, 4, 4, 2, 0], [1, 8, 12, 11, 10]])
    sm = (src != 0)[:, None, None, :]
    parts = known(lambda: visible.transformer_parts(11, 13), seed=18)
    model = c.build(Transformer, 11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2)
    load(c, model, parts, visible.TRANSFORMER_NAMES, POSITIONS_HINT)
    outs = visible.transformer_outputs(parts, src, tgt, None, None, exact_table(6, D))
    compare(
        c,
        c.call(model, src, tgt),
        outs["logits"],
        "with no masks given, nothing is masked.",
        passed="masks default to None",
    )
    default = c.build(Transformer, 11, 13)
    load(
        c,
        default,
        known(lambda: visible.transformer_parts(11, 13, d=128, d_ff=512), seed=19),
        visible.TRANSFORMER_NAMES
        + " (check the default sizes: d_model=128, num_heads=4, d_ff=512, num_layers=2)",
    )
    c.ok("default sizes d_model=128, d_ff=512, 2 layers")
    both = (tgt != 0)[:, None, None, :] & visible.causal(5)
    m64 = c.build(Transformer, 11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2).double()
    load(c, m64, parts, visible.TRANSFORMER_NAMES, POSITIONS_HINT)
    got = c.call(m64, src, tgt, sm, both)
    c.that(
        isinstance(got, torch.Tensor) and got.dtype == torch.float64,
        "a float64 model should give float64 logits.",
    )
    outs = visible.transformer_outputs(parts, src, tgt, sm, both, exact_table(6, D), torch.float64)
    compare(
        c,
        got,
        outs["logits"],
        "wrong with a combined causal + padding tgt_mask, float64.",
        outs["mistakes"],
        passed="float64, combined masks",
        **F64,
    )
    outs = visible.transformer_outputs(parts, src, tgt, sm, both, exact_table(6, D))
    no_masks = visible.transformer_outputs(parts, src, tgt, None, None, exact_table(6, D))["logits"]
    mg = c.build(Transformer, 11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2)
    load(c, mg, parts, visible.TRANSFORMER_NAMES, POSITIONS_HINT)
    gradients_reach(c, mg, src, tgt, sm, both)
    for dev in second_devices():
        md = c.build(Transformer, 11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2)
        load(c, md, parts, visible.TRANSFORMER_NAMES, POSITIONS_HINT)
        dev.module(md)
        runs_on(c, dev, md, (src, tgt, sm, both), outs["logits"], "wrong logits on {dev}.", passed=None)
        with_and_without = "runs on {dev}, with masks and without"
        runs_on(
            c, dev, md, (src, tgt), no_masks, "wrong logits on {dev} with no masks.", passed=with_and_without
        )
    c.done()


# -- make_padding_mask ---------------------------------------------------------------------------
def check_make_padding_mask(make_padding_mask) -> None:
    c = Check("make_padding_mask", [f"{_REF}.make_padding_mask"], hidden=True)
    ids2 = torch.tensor([[0, 4, 2, 2], [1, 2, 2, 2], [3, 3, 3, 3]])
    got = c.call(make_padding_mask, ids2, 2)
    c.that(
        isinstance(got, torch.Tensor) and torch_equal(got, ref.make_padding_mask(ids2, 2)),
        "wrong with pad_id=2: compare with the pad_id argument, not a fixed 0 (here 0 is a real token).",
        "uses pad_id",
    )
    leaves_input(c, make_padding_mask, ids2, 2, wrong="make_padding_mask modified ids in place.")
    meta = c.call(make_padding_mask, ids2.to("meta"), 2)
    c.that(meta.device.type == "meta", "the mask should live on the ids' device.", "stays on the ids' device")
    for dev in second_devices():
        got = dev.call(c, make_padding_mask, dev.tensor(ids2), 2)
        c.that(torch_equal(got, ref.make_padding_mask(ids2, 2)), f"wrong mask on {dev}.", f"runs on {dev}")
    c.done()
