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
from course_utils.checks.decoder import (
    DECODER_LAYER_NAMES,
    DECODER_NAMES,
    TRANSFORMER_NAMES,
    call,
    causal,
    decoder_layer_case,
    decoder_layer_parts,
    decoder_outputs,
    decoder_parts,
    run_decoder_layers,
    torch_decoder_layer,
    transformer_outputs,
    transformer_parts,
)
from course_utils.checks.encoder import EVERYWHERE, EVERYWHERE_OPS, FF, POSITIONS_HINT, D, H
from course_utils.checks.kit import Check, generator, torch_equal
from course_utils.checks.torch_parts import F64, compare, known, load, near

from ._common import forbidding, gradients_reach
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
    both = (tgt_ids != 0)[:, None, None, :] & causal(5)  # (2, 1, 5, 5)
    for norm_first in (False, True):
        parts = known(lambda: decoder_layer_parts(D, FF), seed=14)
        layer = c.build(DecoderLayer, D, H, FF, norm_first=norm_first)
        load(c, layer, parts, DECODER_LAYER_NAMES)
        decoder_layer_case(
            c,
            layer,
            parts,
            x,
            memory,
            None,
            None,
            norm_first,
            "wrong output with no masks.",
            passed=f"norm_first={norm_first}: no masks",
        )
        lay64 = c.build(DecoderLayer, D, H, FF, norm_first=norm_first).double()
        load(c, lay64, parts, DECODER_LAYER_NAMES)
        got = decoder_layer_case(
            c,
            lay64,
            parts,
            x.double(),
            memory.double(),
            both,
            mm,
            norm_first,
            "wrong with a combined causal + padding tgt_mask of shape (b, 1, t, t), float64.",
            passed=f"norm_first={norm_first}: float64, combined masks",
            **F64,
        )
        c.that(got.dtype == torch.float64, "float64 in should give float64 out.")
    c.that(
        not getattr(c.build(DecoderLayer, D, H, FF), "norm_first", False),
        "norm_first should default to False (post-norm).",
        "post-norm by default",
    )
    parts = known(lambda: decoder_layer_parts(D, FF), seed=15)
    drop = c.build(DecoderLayer, D, H, FF, dropout=0.5)
    load(c, drop, parts, DECODER_LAYER_NAMES)
    drop.train()
    want = run_decoder_layers([torch_decoder_layer(parts, H)], x, memory, causal(5), mm)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        c.that(
            not near(c.call(drop, x, memory, causal(5), mm), want, 1e-6, 1e-6),
            "DecoderLayer(..., dropout=0.5) in training mode behaves as if there were no "
            "dropout: pass dropout on.",
            "uses its dropout argument",
        )
    layer = c.build(DecoderLayer, D, H, FF)
    load(c, layer, parts, DECODER_LAYER_NAMES)
    gradients_reach(c, layer, x, memory, causal(5), mm)
    for dev in second_devices():
        layer = c.build(DecoderLayer, D, H, FF)
        load(c, layer, parts, DECODER_LAYER_NAMES)
        got = dev.call(c, dev.module(layer), *dev.tensor((x, memory, causal(5), mm)))
        compare(c, got, want, f"wrong values on {dev}.", atol=1e-4, rtol=1e-3, passed=f"runs on {dev}")
    c.done()


# -- Decoder -------------------------------------------------------------------------------------
def check_decoder(Decoder) -> None:
    c = Check("Decoder", EVERYWHERE + forbidding(_REF, "Decoder"), hidden=True, ops=EVERYWHERE_OPS)
    g = generator(51)
    tgt = torch.tensor([[1, 7, 3, 9, 4], [1, 2, 5, 0, 0]])
    memory = torch.randn(2, 6, D, generator=g)
    tm = causal(5)
    mm = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)[:, None, None, :]
    parts = known(lambda: decoder_parts(20, D, FF, 2), seed=16)
    dec = c.build(Decoder, 20, D, H, FF, 2)
    load(c, dec, parts, DECODER_NAMES, POSITIONS_HINT)
    want, mistakes = decoder_outputs(parts, tgt, memory, None, None, exact_table(5, D))
    compare(c, c.call(dec, tgt, memory), want, "wrong output with no masks.", mistakes, passed="no masks")
    dec3 = c.build(Decoder, 12, D, H, FF, 3, max_len=30)
    parts3 = known(lambda: decoder_parts(12, D, FF, 3), seed=17)
    load(c, dec3, parts3, DECODER_NAMES, POSITIONS_HINT)
    long = torch.randint(0, 12, (2, 30), generator=g)
    want, mistakes = decoder_outputs(parts3, long, memory, causal(30), None, exact_table(30, D))
    compare(
        c,
        call(c, dec3, long, memory, causal(30)),
        want,
        "wrong for 3 layers and max_len target tokens: use num_layers and max_len.",
        mistakes,
        passed="3 layers, max_len tokens",
    )
    dec64 = c.build(Decoder, 20, D, H, FF, 2).double()
    load(c, dec64, parts, DECODER_NAMES, POSITIONS_HINT)
    got = call(c, dec64, tgt, memory.double(), tm, mm)
    c.that(
        isinstance(got, torch.Tensor) and got.dtype == torch.float64,
        "a float64 decoder should give float64 outputs: add the positions in the embeddings' dtype.",
    )
    want, mistakes = decoder_outputs(parts, tgt, memory, tm, mm, exact_table(5, D), torch.float64)
    compare(c, got, want, "wrong values in float64.", mistakes, passed="float64", **F64)
    dec = c.build(Decoder, 20, D, H, FF, 2)
    load(c, dec, parts, DECODER_NAMES, POSITIONS_HINT)
    gradients_reach(c, dec, tgt, memory, tm, mm)
    want, _ = decoder_outputs(parts, tgt, memory, tm, mm, exact_table(5, D))
    for dev in second_devices():
        dec = c.build(Decoder, 20, D, H, FF, 2)
        load(c, dec, parts, DECODER_NAMES, POSITIONS_HINT)
        got = dev.call(c, dev.module(dec), *dev.tensor((tgt, memory, tm, mm)))
        compare(c, got, want, f"wrong values on {dev}.", atol=1e-4, rtol=1e-3, passed=f"runs on {dev}")
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
    parts = known(lambda: transformer_parts(11, 13), seed=18)
    model = c.build(Transformer, 11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2)
    load(c, model, parts, TRANSFORMER_NAMES, POSITIONS_HINT)
    outs = transformer_outputs(parts, src, tgt, None, None, exact_table(6, D))
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
        known(lambda: transformer_parts(11, 13, d=128, d_ff=512), seed=19),
        TRANSFORMER_NAMES + " (check the default sizes: d_model=128, num_heads=4, d_ff=512, num_layers=2)",
    )
    c.ok("default sizes d_model=128, d_ff=512, 2 layers")
    both = (tgt != 0)[:, None, None, :] & causal(5)
    m64 = c.build(Transformer, 11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2).double()
    load(c, m64, parts, TRANSFORMER_NAMES, POSITIONS_HINT)
    got = c.call(m64, src, tgt, sm, both)
    c.that(
        isinstance(got, torch.Tensor) and got.dtype == torch.float64,
        "a float64 model should give float64 logits.",
    )
    outs = transformer_outputs(parts, src, tgt, sm, both, exact_table(6, D), torch.float64)
    compare(
        c,
        got,
        outs["logits"],
        "wrong with a combined causal + padding tgt_mask, float64.",
        outs["mistakes"],
        passed="float64, combined masks",
        **F64,
    )
    outs = transformer_outputs(parts, src, tgt, sm, both, exact_table(6, D))
    no_masks = transformer_outputs(parts, src, tgt, None, None, exact_table(6, D))["logits"]
    mg = c.build(Transformer, 11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2)
    load(c, mg, parts, TRANSFORMER_NAMES, POSITIONS_HINT)
    gradients_reach(c, mg, src, tgt, sm, both)
    for dev in second_devices():
        md = c.build(Transformer, 11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2)
        load(c, md, parts, TRANSFORMER_NAMES, POSITIONS_HINT)
        dev.module(md)
        compare(
            c,
            dev.call(c, md, *dev.tensor((src, tgt, sm, both))),
            outs["logits"],
            f"wrong logits on {dev}.",
            atol=1e-4,
            rtol=1e-3,
        )
        compare(
            c,
            dev.call(c, md, *dev.tensor((src, tgt))),
            no_masks,
            f"wrong logits on {dev} with no masks.",
            atol=1e-4,
            rtol=1e-3,
            passed=f"runs on {dev}, with masks and without",
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
    before = ids2.clone()
    c.call(make_padding_mask, ids2, 2)
    c.that(torch_equal(ids2, before), "make_padding_mask modified ids in place.")
    meta = c.call(make_padding_mask, ids2.to("meta"), 2)
    c.that(meta.device.type == "meta", "the mask should live on the ids' device.", "stays on the ids' device")
    for dev in second_devices():
        got = dev.call(c, make_padding_mask, dev.tensor(ids2), 2)
        c.that(torch_equal(got, ref.make_padding_mask(ids2, 2)), f"wrong mask on {dev}.", f"runs on {dev}")
    c.done()
