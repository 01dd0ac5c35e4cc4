"""Hidden checks for 06_encoder: LayerNorm, FeedForward, EncoderLayer, Encoder.

They add, to the visible checks of ``course_utils.checks.encoder``, the cases that catch the
common mistakes: other sizes and eps, any number of leading dims, no mask and (seq, seq) masks,
dropout only in training, float64 (at the tolerance of ``F64``: a positional table built once in
float32 and cast with ``.double()`` is correct), gradients, devices. Expected values come from
PyTorch's equivalents with the same weights, the sinusoidal table from the reference computed in
float64.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from course_utils.checks.encoder import (
    ENCODER_LAYER_NAMES,
    ENCODER_NAMES,
    EVERYWHERE,
    EVERYWHERE_OPS,
    FF,
    LAYER_NORM_BUILTINS,
    LAYER_NORM_OPS,
    POSITIONS_HINT,
    D,
    H,
    encoder_layer_case,
    encoder_outputs,
    feed_forward_case,
    layer_norm_case,
)
from course_utils.checks.kit import Check, generator, torch_isfinite
from course_utils.checks.torch_parts import (
    F64,
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

from ._common import both_norms, forbidding, leaves_input, runs_on, trains_on_every_device
from ._device import second_devices
from .positional import exact as exact_table

ASSIGNMENT = "06_encoder"
_REF = "course_grading.reference.encoder"


def expected_outputs() -> dict[str, np.ndarray]:
    """What the visible checks compare with and no built-in computes: the positional table."""
    return {"table": exact_table(16, D).numpy()}


# -- LayerNorm -----------------------------------------------------------------------------------
def check_layer_norm(LayerNorm) -> None:
    c = Check(
        "LayerNorm", LAYER_NORM_BUILTINS + forbidding(_REF, "LayerNorm"), hidden=True, ops=LAYER_NORM_OPS
    )
    g = generator(11)
    ln2 = c.build(LayerNorm, 6, eps=0.1)
    r2 = known(lambda: nn.LayerNorm(6, eps=0.1), seed=3)
    load(c, ln2, r2, "weight, bias")
    layer_norm_case(
        c,
        ln2,
        r2,
        torch.randn(4, 6, generator=g) * 0.2,
        "LayerNorm(6, eps=0.1) gives wrong values: use the eps argument, not a fixed 1e-5.",
        passed="honours eps",
    )
    ln = c.build(LayerNorm, 8)
    r = known(lambda: nn.LayerNorm(8), seed=0)
    load(c, ln, r, "weight, bias")
    layer_norm_case(
        c,
        ln,
        r,
        torch.randn(2, 3, 4, 8, generator=g),
        "wrong for a 4-D input: normalise over dim=-1 only, whatever the number of leading dims.",
        passed="any number of leading dims",
    )
    out = c.call(ln, torch.full((2, 8), 3.0))
    c.that(
        bool(torch_isfinite(out).all()),
        "a constant vector (variance 0) gives NaN or inf: "
        "eps inside the square root prevents the division by zero.",
    )
    c.close(
        out,
        r.bias.detach().expand(2, 8),
        "a constant vector should normalise to 0, leaving only the bias.",
        passed="constant input -> bias, no NaN",
    )
    x = torch.randn(2, 5, 8, generator=g) * 3 + 1
    wrong = "LayerNorm modified its input in place; compute into new tensors."
    leaves_input(c, ln, x, wrong=wrong, passed="input left unchanged")
    with torch.enable_grad():
        c.call(ln, x).sum().backward()
    c.that(
        ln.weight.grad is not None and ln.bias.grad is not None,
        "no gradient reached weight or bias: they must be nn.Parameter used in forward.",
        "gradients reach weight and bias",
    )
    ln64 = c.build(LayerNorm, 8).double()
    load(c, ln64, r, "weight, bias")
    got = c.call(ln64, x.double())
    c.that(got.dtype == torch.float64, "float64 in should give float64 out.")
    layer_norm_case(c, ln64, r.double(), x.double(), "wrong values in float64.", passed="float64", **F64)
    r.float()
    with computing():
        want = F.layer_norm(x, r.normalized_shape, r.weight, r.bias, r.eps)
    for dev in second_devices():
        lnd = c.build(LayerNorm, 8)
        load(c, lnd, r, "weight, bias")
        runs_on(c, dev, dev.module(lnd), (x,), want, rtol=1e-4)
    c.done()


# -- FeedForward ---------------------------------------------------------------------------------
def check_feed_forward(FeedForward) -> None:
    c = Check("FeedForward", EVERYWHERE + forbidding(_REF, "FeedForward"), hidden=True, ops=EVERYWHERE_OPS)
    g = generator(21)
    f = c.build(FeedForward, D, FF)
    parts = known(lambda: ffn_parts(D, FF), seed=4)
    load(c, f, parts, "linear1, linear2")
    feed_forward_case(
        c,
        f,
        parts,
        torch.randn(7, D, generator=g) * 2,
        "wrong for a 2-D input: the same network applies to each position, whatever the leading dims.",
        passed="works position by position on any leading shape",
    )
    x = torch.randn(2, 5, D, generator=g)
    x3 = x.clone()
    x3[:, 3] = x3[:, 0]
    out = c.call(f, x3)
    c.close(
        out[:, 3],
        out[:, 0],
        "the same vector at two positions gave different outputs: "
        "the feed-forward network must not mix positions.",
        passed="position-wise",
    )
    with computing():
        want = feed_forward(parts, x)
    fd = c.build(FeedForward, D, FF, dropout=0.5)
    load(c, fd, parts, "linear1, linear2")
    fd.train()
    with torch.random.fork_rng(devices=[]):
        noisy = c.call(fd, x)
    fd.eval()
    c.that(
        not near(noisy, want, 1e-6, 1e-6),
        "FeedForward(..., dropout=0.5) in training mode "
        "gave the same output as without dropout: use the dropout argument (nn.Dropout).",
    )
    c.close(
        c.call(fd, x), want, "in eval mode dropout must do nothing.", passed="dropout active in training only"
    )
    f.train()
    c.close(
        c.call(f, x),
        want,
        "with dropout=0.0 (the default) training mode should give "
        "the eval output: is there a Dropout with a fixed probability?",
        passed="dropout=0.0 by default",
    )
    f64 = c.build(FeedForward, D, FF).double()
    load(c, f64, parts, "linear1, linear2")
    got = c.call(f64, x.double())
    c.that(got.dtype == torch.float64, "float64 in should give float64 out.")
    feed_forward_case(c, f64, parts.double(), x.double(), "wrong values in float64.", passed="float64", **F64)
    fg = c.build(FeedForward, D, FF)
    load(c, fg, parts, "linear1, linear2")
    with torch.enable_grad():
        c.call(fg, x).sum().backward()
    for name, p in fg.named_parameters():
        c.that(
            p.grad is not None and bool(p.grad.abs().sum() > 0),
            f"no gradient reaches {name}: use the layers in forward, with tensor operations only.",
        )
    c.ok("gradients reach linear1 and linear2")
    for dev in second_devices():  # in training mode: dropout's mask must be made there too
        fdd = c.build(FeedForward, D, FF, dropout=0.5)
        load(c, fdd, parts, "linear1, linear2")
        dev.module(fdd).train()
        with torch.random.fork_rng(devices=[]):
            got = dev.call(c, fdd, dev.tensor(x))
        c.shape(got, tuple(x.shape), f"the output on {dev}")
        c.ok(f"runs on {dev} in training mode")
    c.done()


# -- EncoderLayer --------------------------------------------------------------------------------
def check_encoder_layer(EncoderLayer) -> None:
    c = Check("EncoderLayer", EVERYWHERE + forbidding(_REF, "EncoderLayer"), hidden=True, ops=EVERYWHERE_OPS)
    g = generator(31)
    x = torch.randn(2, 6, D, generator=g)
    parts = known(lambda: encoder_layer_parts(D, FF), seed=5)
    both_norms(
        c,
        lambda norm_first: c.build(EncoderLayer, D, H, FF, norm_first=norm_first),
        lambda layer: load(c, layer, parts, ENCODER_LAYER_NAMES),
        lambda layer, *rest, **kw: encoder_layer_case(c, layer, parts, *rest, **kw),
        ((x, None), "wrong {kind}-norm output with mask=None.", "norm_first={norm_first}: mask=None"),
        lambda: (
            (
                torch.randn(3, 4, D, generator=g, dtype=torch.float64),
                torch.ones(4, 4, dtype=torch.bool).tril(),
            ),
            "wrong with a (seq, seq) mask in float64.",
            "norm_first={norm_first}: float64, (seq, seq) mask",
        ),
    )
    default = c.build(EncoderLayer, D, H, FF)
    c.that(
        not getattr(default, "norm_first", False),
        "norm_first should default to False (post-norm, as in the paper).",
        "post-norm by default",
    )
    parts = known(lambda: encoder_layer_parts(D, FF), seed=6)
    drop = c.build(EncoderLayer, D, H, FF, dropout=0.5)
    load(c, drop, parts, ENCODER_LAYER_NAMES)
    drop.train()
    want = run_encoder_layers([torch_encoder_layer(parts, H)], x)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        c.that(
            not near(c.call(drop, x), want, 1e-6, 1e-6),
            "EncoderLayer(..., dropout=0.5) "
            "in training mode behaves as if there were no dropout: pass dropout on.",
            "uses its dropout argument",
        )
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)[:, None, None, :]
    want = run_encoder_layers([torch_encoder_layer(parts, H)], x, mask)

    def build():
        layer = c.build(EncoderLayer, D, H, FF)
        load(c, layer, parts, ENCODER_LAYER_NAMES)
        return layer

    trains_on_every_device(c, build, (x, mask), want)
    c.done()


# -- Encoder -------------------------------------------------------------------------------------
def check_encoder(Encoder) -> None:
    c = Check("Encoder", EVERYWHERE + forbidding(_REF, "Encoder"), hidden=True, ops=EVERYWHERE_OPS)
    enc3 = c.build(Encoder, 12, D, H, FF, 3, max_len=40)
    parts3 = known(lambda: encoder_parts(12, D, FF, 3), seed=7)
    load(c, enc3, parts3, ENCODER_NAMES, POSITIONS_HINT)
    long = torch.randint(0, 12, (2, 40), generator=generator(32))
    want, mistakes = encoder_outputs(parts3, long, None, exact_table(40, D))
    compare(
        c,
        c.call(enc3, long),
        want,
        "wrong for 3 layers and a sequence of max_len tokens: use num_layers and max_len.",
        mistakes,
        passed="3 layers, max_len tokens",
    )
    src = torch.tensor([[3, 7, 1, 9, 4, 0], [2, 2, 5, 8, 0, 0]])
    mask = (src != 0)[:, None, None, :]
    parts = known(lambda: encoder_parts(20, D, FF, 2), seed=8)
    enc64 = c.build(Encoder, 20, D, H, FF, 2).double()
    load(c, enc64, parts, ENCODER_NAMES, POSITIONS_HINT)
    got = c.call(enc64, src, mask)
    c.that(
        isinstance(got, torch.Tensor) and got.dtype == torch.float64,
        "a float64 encoder should give float64 outputs: add the positions in the embeddings' dtype.",
    )
    want, mistakes = encoder_outputs(parts, src, mask, exact_table(6, D), torch.float64)
    compare(c, got, want, "wrong values in float64.", mistakes, passed="float64", **F64)
    want, _ = encoder_outputs(parts, src, mask, exact_table(6, D))

    def build():
        enc = c.build(Encoder, 20, D, H, FF, 2)
        load(c, enc, parts, ENCODER_NAMES, POSITIONS_HINT)
        return enc

    trains_on_every_device(c, build, (src, mask), want)
    c.done()
