"""Checks for 06_encoder: LayerNorm, FeedForward, EncoderLayer, Encoder.

Each check builds the reference module with a fixed seed, copies its parameters into the
student's module by name (the names the exercise gives), runs both on the same input and
compares at a stated tolerance. When the output is wrong, the student's output is compared with
the outputs of the common mistakes (computed from the same weights) to name the likely bug.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..device import get_device
from course_grading.reference import encoder as ref
from course_grading.reference.positional import sinusoidal_positional_encoding
from ._core import Check, to_numpy, _allclose

D, H, FF = 16, 4, 32  # the small sizes every check uses
ATOL, RTOL = 2e-5, 1e-4  # float32; float64 uses 1e-10

EVERYWHERE = [
    "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.TransformerEncoderLayer.forward", "torch.nn.TransformerDecoderLayer.forward",
    "torch.nn.TransformerEncoder.forward", "torch.nn.TransformerDecoder.forward",
    "torch.nn.Transformer.forward",
]
LAYER_NORM_BUILTINS = EVERYWHERE + [
    "torch.nn.LayerNorm.forward", "torch.nn.functional.layer_norm", "torch.layer_norm",
    "torch.native_layer_norm", "course_grading.reference.encoder.LayerNorm.forward",
]


# -- shared helpers (the decoder checks use them too) ------------------------------------------
def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _devices() -> list[torch.device]:
    extra = get_device()
    return [torch.device("cpu")] + ([extra] if extra.type != "cpu" else [])


def static_forbidden(c: Check, cls) -> None:
    """Fail if any method of the student's class names a forbidden built-in (aliases too)."""
    for klass in getattr(cls, "__mro__", ()):
        if klass.__module__.startswith(("torch", "builtins", "course_utils")):
            continue
        for attr in vars(klass).values():
            fn = getattr(attr, "__func__", attr)
            if callable(fn):
                hits = c.forbidden.held_by(fn)
                if hits:
                    c._forbidden_failure(hits[0])


def build(c: Check, cls, *args, **kwargs) -> nn.Module:
    """Instantiate the student's class quietly and check that it is an nn.Module."""
    static_forbidden(c, cls)
    module = c.call(cls, *args, **kwargs)
    c.that(isinstance(module, nn.Module), f"{c.exercise}(...) should create an nn.Module "
           f"(class {c.exercise}(nn.Module) with super().__init__() first), got "
           f"{type(module).__name__}.")
    return module


def reference(cls, *args, seed: int = 0, randomise_norms: bool = True, **kwargs) -> nn.Module:
    """The reference module with fixed weights; LayerNorms get non-trivial γ and β."""
    with torch.random.fork_rng(devices=[]):  # leave the notebook's random state alone
        torch.manual_seed(seed)
        module = cls(*args, **kwargs)
    g = _gen(seed + 100)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if randomise_norms and ("norm" in name or name in ("weight", "bias")) and p.dim() == 1:
                p.copy_(torch.randn(p.shape, generator=g) * 0.3 + (1.0 if name.endswith("weight") else 0.0))
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)  # non-zero biases show up
    return module.eval()


def load_known_weights(c: Check, student: nn.Module, ref_module: nn.Module, names: str) -> None:
    """Copy the reference's parameters into the student's module, matched by name."""
    mine = dict(student.named_parameters())
    theirs = dict(ref_module.named_parameters())
    missing = sorted(set(theirs) - set(mine))
    extra = sorted(set(mine) - set(theirs))
    if missing or extra:
        hint = ""
        if any("pos" in n for n in extra):
            hint = " The positions are the fixed sinusoidal table (a buffer), not a learned parameter."
        c.fail("could not load the known test weights into your module: "
               + (f"missing parameters {missing[:5]}" if missing else "")
               + (" and " if missing and extra else "")
               + (f"unexpected parameters {extra[:5]}" if extra else "")
               + f". Name the parts as the exercise says ({names}) and create only those "
               "parameters." + hint)
    for name, p in theirs.items():
        if tuple(mine[name].shape) != tuple(p.shape):
            c.fail(f"parameter {name} has shape {tuple(mine[name].shape)}, expected "
                   f"{tuple(p.shape)}: check the sizes passed to its constructor.")
    with torch.no_grad():
        for name, p in theirs.items():
            mine[name].copy_(p)
    student.eval()


def output_tensor(c: Check, out, what: str):
    if isinstance(out, tuple):
        c.fail(f"{what} returned a tuple; return only the output tensor (the attention weights "
               "stay inside the layer).")
    c.that(isinstance(out, torch.Tensor), f"{what} should return a tensor, got {type(out).__name__}.")
    return out


def _near(a, b, atol, rtol) -> bool:
    a, b = to_numpy(a), to_numpy(b)
    return a.shape == b.shape and bool(_allclose(a, b, atol=atol, rtol=rtol))


def compare(c: Check, got, want, generic: str, mistakes=(), atol: float = ATOL, rtol: float = RTOL,
            passed: str | None = None) -> None:
    """Pass if got ≈ want; otherwise name the first known mistake it matches, else `generic`."""
    got = output_tensor(c, got, c.exercise)
    c.shape(got, tuple(want.shape), "the output", "It should have the same shape as the input.")
    if not _near(got, want, atol, rtol):
        for candidate, message in mistakes:
            if candidate is not None and _near(got, candidate, 1e-4, 1e-3):
                c.fail(message)
    c.close(got, want, generic, atol=atol, rtol=rtol, passed=passed)


# -- LayerNorm ---------------------------------------------------------------------------------
def _ln_mistakes(ln: nn.Module, x: torch.Tensor):
    w, b, eps = ln.weight, ln.bias, ln.eps
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    with torch.no_grad():
        return [
            (w * (x - mean) / torch.sqrt(x.var(-1, keepdim=True, unbiased=True) + eps) + b,
             "you divide by the unbiased variance (Σ(x-μ)² / (d-1), the default of torch.var "
             "and torch.std). Layer norm uses the plain average Σ(x-μ)² / d."),
            (w * (x - mean) / (torch.sqrt(var) + eps) + b,
             "eps is added outside the square root. It belongs inside: sqrt(var + eps)."),
            (w * (x - mean) / (x.std(-1, keepdim=True) + eps) + b,
             "you use torch.std (unbiased, d-1) and add eps outside the square root: use the "
             "biased variance and sqrt(var + eps)."),
            (w * (x - x.mean(-2, keepdim=True))
             / torch.sqrt(x.var(-2, keepdim=True, unbiased=False) + eps) + b,
             "you normalise over the wrong axis: each token's vector is normalised on its own, "
             "so take the mean and variance over the LAST dim (the features), keepdim=True."),
            ((x - mean) / torch.sqrt(var + eps),
             "the learned scale and shift are missing: multiply by self.weight and add self.bias."),
            (w * (x - mean) / torch.sqrt(var + eps),
             "the shift β is missing: add self.bias at the end."),
            ((x - mean) / torch.sqrt(var + eps) + b,
             "the scale γ is missing: multiply by self.weight."),
            (b * (x - mean) / torch.sqrt(var + eps) + w,
             "weight and bias are swapped: weight (γ) multiplies, bias (β) is added."),
        ]


def check_layer_norm(LayerNorm, hidden: bool = False) -> None:
    c = Check("LayerNorm", LAYER_NORM_BUILTINS, hidden)
    ln = build(c, LayerNorm, 8)
    params = dict(ln.named_parameters())
    c.that(set(params) == {"weight", "bias"}, "LayerNorm(8) should have exactly two parameters, "
           f"named weight and bias (nn.Parameter); found {sorted(params) or 'none'}.")
    c.shape(params["weight"], (8,), "weight", "One scale per feature: shape (d_model,).")
    c.shape(params["bias"], (8,), "bias", "One shift per feature: shape (d_model,).")
    c.that(bool((ln.weight == 1).all()) and bool((ln.bias == 0).all()),
           "a fresh LayerNorm should start as 'no scale, no shift': weight all ones, bias all zeros.",
           "parameters weight (ones) and bias (zeros) of shape (d_model,)")
    r = reference(ref.LayerNorm, 8)
    load_known_weights(c, ln, r, "weight, bias")
    g = _gen(10)
    x = torch.randn(2, 5, 8, generator=g) * 3 + 1
    with torch.no_grad():
        want = r(x)
    compare(c, c.call(ln, x), want, "y = weight · (x - mean) / sqrt(var + eps) + bias, with mean "
            "and (biased) variance over the last dim.", _ln_mistakes(r, x),
            passed="matches the formula on a (2, 5, 8) input")
    tiny = torch.randn(3, 8, generator=g) * 1e-3  # here eps matters
    with torch.no_grad():
        want = r(tiny)
    compare(c, c.call(ln, tiny), want, "wrong when the variance is tiny: is eps (self.eps) inside "
            "the square root?", _ln_mistakes(r, tiny), passed="eps inside the square root")
    if hidden:
        ln2 = build(c, LayerNorm, 6, eps=0.1)
        r2 = reference(ref.LayerNorm, 6, eps=0.1)
        load_known_weights(c, ln2, r2, "weight, bias")
        x2 = torch.randn(4, 6, generator=g) * 0.2
        with torch.no_grad():
            want = r2(x2)
        compare(c, c.call(ln2, x2), want, "LayerNorm(6, eps=0.1) gives wrong values: use the eps "
                "argument, not a fixed 1e-5.", _ln_mistakes(r2, x2), passed="honours eps")
        x4 = torch.randn(2, 3, 4, 8, generator=g)
        with torch.no_grad():
            want = r(x4)
        compare(c, c.call(ln, x4), want, "wrong for a 4-D input: normalise over dim=-1 only, "
                "whatever the number of leading dims.", _ln_mistakes(r, x4),
                passed="any number of leading dims")
        const = torch.full((2, 8), 3.0)
        out = c.call(ln, const)
        c.that(bool(torch.isfinite(out).all()), "a constant vector (variance 0) gives NaN or inf: "
               "eps inside the square root prevents the division by zero.")
        c.close(out, r.bias.detach().expand(2, 8), "a constant vector should normalise to 0, "
                "leaving only the bias.", passed="constant input -> bias, no NaN")
        before = x.clone()
        c.call(ln, x)
        c.that(torch.equal(x, before), "LayerNorm modified its input in place; compute into new "
               "tensors.", "input left unchanged")
        out = c.call(ln, x)
        out.sum().backward()
        c.that(ln.weight.grad is not None and ln.bias.grad is not None,
               "no gradient reached weight or bias: they must be nn.Parameter used in forward.",
               "gradients reach weight and bias")
        ln64 = build(c, LayerNorm, 8).double()
        load_known_weights(c, ln64, r.double(), "weight, bias")
        x64 = x.double()
        with torch.no_grad():
            want = r(x64)
        got = c.call(ln64, x64)
        c.that(got.dtype == torch.float64, "float64 in should give float64 out.")
        compare(c, got, want, "wrong values in float64.", atol=1e-10, rtol=1e-9, passed="float64")
        r.float()
        for dev in _devices()[1:]:
            got = c.call(ln.to(dev), x.to(dev))
            c.that(got.device.type == dev.type, f"output moved off {dev.type}.")
            compare(c, got.cpu(), r(x), f"wrong values on {dev.type}.", atol=1e-4, rtol=1e-4,
                    passed=f"runs on {dev.type}")
    c.done()


# -- FeedForward -------------------------------------------------------------------------------
def _ff_mistakes(f, x):
    l1, l2 = f.linear1, f.linear2
    with torch.no_grad():
        return [
            (torch.relu(l2(l1(x))), "the ReLU comes after the second linear layer; it belongs "
             "between them, on the wide (d_ff) hidden vector. As it is, the output can never "
             "be negative."),
            (l2(l1(x)), "there is no non-linearity: two linear layers in a row collapse into one "
             "linear map. Apply ReLU to the hidden vector."),
            (l2(l1(torch.relu(x))), "the ReLU is applied to the input; it belongs after linear1."),
            (torch.relu(l2(torch.relu(l1(x)))), "there is an extra ReLU at the end: only the hidden "
             "layer gets one."),
            (l2(nn.functional.gelu(l1(x))), "that is GELU; this exercise (and the 2017 paper) uses "
             "ReLU."),
        ]


def check_feed_forward(FeedForward, hidden: bool = False) -> None:
    c = Check("FeedForward", EVERYWHERE + ["course_grading.reference.encoder.FeedForward.forward"],
              hidden)
    f = build(c, FeedForward, D, FF)
    for name, shape in (("linear1", (FF, D)), ("linear2", (D, FF))):
        layer = getattr(f, name, None)
        c.that(isinstance(layer, nn.Linear), f"FeedForward(d_model, d_ff) needs an nn.Linear "
               f"attribute named {name}.")
        c.shape(layer.weight, shape, f"{name}.weight for d_model={D}, d_ff={FF}",
                "linear1 widens d_model -> d_ff, linear2 narrows d_ff -> d_model.")
    c.ok("linear1: d_model -> d_ff, linear2: d_ff -> d_model")
    r = reference(ref.FeedForward, D, FF)
    load_known_weights(c, f, r, "linear1, linear2")
    g = _gen(20)
    x = torch.randn(2, 5, D, generator=g)
    with torch.no_grad():
        want = r(x)
    compare(c, c.call(f, x), want, "expected linear2(relu(linear1(x))).", _ff_mistakes(r, x),
            passed="linear2(relu(linear1(x))) on a (2, 5, 16) input")
    if hidden:
        x2 = torch.randn(7, D, generator=g) * 2
        with torch.no_grad():
            want = r(x2)
        compare(c, c.call(f, x2), want, "wrong for a 2-D input: the same network applies to each "
                "position, whatever the leading dims.", _ff_mistakes(r, x2),
                passed="works position by position on any leading shape")
        # the same vector at two positions gives the same output: position-wise
        x3 = x.clone()
        x3[:, 3] = x3[:, 0]
        out = c.call(f, x3)
        c.close(out[:, 3], out[:, 0], "the same vector at two positions gave different outputs: "
                "the feed-forward network must not mix positions.", passed="position-wise")
        with torch.no_grad():
            want = r(x)
        fd = build(c, FeedForward, D, FF, dropout=0.5)
        load_known_weights(c, fd, r, "linear1, linear2")
        fd.train()
        with torch.random.fork_rng(devices=[]):
            noisy = c.call(fd, x)
        fd.eval()
        c.that(not _near(noisy, want, 1e-6, 1e-6), "FeedForward(..., dropout=0.5) in training mode "
               "gave the same output as without dropout: use the dropout argument (nn.Dropout).")
        c.close(c.call(fd, x), want, "in eval mode dropout must do nothing.",
                passed="dropout active in training only")
        f.train()
        c.close(c.call(f, x), want, "with dropout=0.0 (the default) training mode should give "
                "the eval output: is there a Dropout with a fixed probability?",
                passed="dropout=0.0 by default")
        f64 = build(c, FeedForward, D, FF).double()
        load_known_weights(c, f64, r.double(), "linear1, linear2")
        got = c.call(f64, x.double())
        c.that(got.dtype == torch.float64, "float64 in should give float64 out.")
        compare(c, got, r(x.double()).detach(), "wrong values in float64.", atol=1e-10, rtol=1e-9,
                passed="float64")
    c.done()


# -- EncoderLayer ------------------------------------------------------------------------------
def _enc_layer_outputs(r, x, mask):
    """The right output and the common mistakes, all from the reference layer's own parts."""
    def A(h, m=mask):
        return r.self_attn(h, h, h, m)[0]
    N1, N2, F = r.norm1, r.norm2, r.ffn
    with torch.no_grad():
        def post(h, m=mask):
            h = N1(h + A(h, m))
            return N2(h + F(h))

        def pre(h, m=mask):
            h = h + A(N1(h), m)
            return h + F(N2(h))
        h = N1(A(x))
        no_res_attn = N2(h + F(h))
        h = N1(x + A(x))
        no_res_ffn = N2(F(h))
        h = x + N1(A(x))
        norm_inside = h + N2(F(h))
        h = A(N1(x))
        pre_no_res_attn = h + F(N2(h))
        h = x + A(N1(x))
        pre_no_res_ffn = F(N2(h))
        h = N1(x + F(x))
        ffn_first = N2(h + A(h))
        return {
            "post": post(x), "pre": pre(x), "post_nomask": post(x, None), "pre_nomask": pre(x, None),
            "mistakes": [
                (no_res_attn, "the residual connection around self-attention is missing: "
                 "add the layer's input to the attention output before the norm."),
                (no_res_ffn, "the residual connection around the feed-forward network is missing."),
                (norm_inside, "the norm is applied to the sub-layer's output before the residual "
                 "add; post-norm normalises the SUM: norm(x + sublayer(x))."),
                (pre_no_res_attn, "pre-norm without the residual around attention: "
                 "x + attn(norm(x)), not attn(norm(x))."),
                (pre_no_res_ffn, "pre-norm without the residual around the feed-forward network."),
                (ffn_first, "the feed-forward network runs before self-attention; attention "
                 "comes first."),
            ],
        }


def check_encoder_layer(EncoderLayer, hidden: bool = False) -> None:
    c = Check("EncoderLayer", EVERYWHERE + ["course_grading.reference.encoder.EncoderLayer.forward"],
              hidden)
    names = "self_attn, ffn, norm1, norm2"
    g = _gen(30)
    x = torch.randn(2, 6, D, generator=g)
    ids = torch.tensor([[5, 6, 7, 8, 0, 0], [5, 6, 7, 8, 9, 10]])
    mask = (ids != 0)[:, None, None, :]
    for norm_first in (False, True):
        layer = build(c, EncoderLayer, D, H, FF, norm_first=norm_first)
        r = reference(ref.EncoderLayer, D, H, FF, norm_first=norm_first, seed=1)
        load_known_weights(c, layer, r, names)
        # the parts first, so that a bug in LayerNorm or FeedForward is named as such
        with torch.no_grad():
            for part in ("norm1", "ffn"):
                c.close(c.call(getattr(layer, part), x), getattr(r, part)(x),
                        f"your layer's {part} gives wrong values on its own: fix "
                        f"{'LayerNorm' if part == 'norm1' else 'FeedForward'} first.")
        outs = _enc_layer_outputs(r, x, mask)
        kind, other = ("post", "pre") if not norm_first else ("pre", "post")
        wrong_norm = (outs[other], f"norm_first={norm_first} asks for {kind}-norm, but this "
                      f"output is {other}-norm. "
                      + ("Post-norm: x = norm1(x + attn(x)); x = norm2(x + ffn(x))."
                         if not norm_first else
                         "Pre-norm normalises the sub-layer's INPUT: x = x + attn(norm1(x))."))
        ignored = (outs[f"{kind}_nomask"], "the output ignores the mask: pass it to self_attn.")
        got = c.call(layer, x, mask)
        compare(c, got, outs[kind], f"wrong {kind}-norm output with a padding mask.",
                [wrong_norm, ignored] + outs["mistakes"],
                passed=f"norm_first={norm_first}: {kind}-norm, residuals, mask")
        if not hidden:
            continue
        plain = _enc_layer_outputs(r, x, None)
        compare(c, c.call(layer, x), plain[kind], f"wrong {kind}-norm output with mask=None.",
                [(plain[other], wrong_norm[1])] + plain["mistakes"],
                passed=f"norm_first={norm_first}: mask=None")
        x2 = torch.randn(3, 4, D, generator=g, dtype=torch.float64)
        lay64 = build(c, EncoderLayer, D, H, FF, norm_first=norm_first).double()
        load_known_weights(c, lay64, r.double(), names)
        m2 = torch.ones(4, 4, dtype=torch.bool).tril()
        got = c.call(lay64, x2, m2)
        c.that(got.dtype == torch.float64, "float64 in should give float64 out.")
        compare(c, got, _enc_layer_outputs(r, x2, m2)[kind], "wrong with a (seq, seq) mask in "
                "float64.", atol=1e-10, rtol=1e-9, passed=f"norm_first={norm_first}: float64")
    if hidden:
        default = build(c, EncoderLayer, D, H, FF)
        c.that(not getattr(default, "norm_first", False), "norm_first should default to False "
               "(post-norm, as in the paper).", "post-norm by default")
        drop = build(c, EncoderLayer, D, H, FF, dropout=0.5)
        r = reference(ref.EncoderLayer, D, H, FF, seed=1)
        load_known_weights(c, drop, r, names)
        drop.train()
        with torch.no_grad(), torch.random.fork_rng(devices=[]):
            c.that(not _near(c.call(drop, x), r(x), 1e-6, 1e-6), "EncoderLayer(..., dropout=0.5) "
                   "in training mode behaves as if there were no dropout: pass dropout on.",
                   "uses its dropout argument")
        for dev in _devices()[1:]:
            layer = build(c, EncoderLayer, D, H, FF)
            load_known_weights(c, layer, r.float(), names)
            got = c.call(layer.to(dev), x.to(dev), mask.to(dev))
            c.that(got.device.type == dev.type, f"output moved off {dev.type}.")
            compare(c, got.cpu(), _enc_layer_outputs(r, x, mask)["post"],
                    f"wrong values on {dev.type}.", atol=1e-4, rtol=1e-3, passed=f"runs on {dev.type}")
    c.done()


# -- Encoder -----------------------------------------------------------------------------------
def embed_inputs(r, ids):
    """The right embedded input and the common mistakes: (correct, [(wrong, message)])."""
    with torch.no_grad():
        e = r.embedding(ids)  # (b, s, d_model)
        d = e.size(-1)
        pe = sinusoidal_positional_encoding(ids.size(1), d).to(e)
        return e * math.sqrt(d) + pe, [
            (e + pe, "the token embeddings are not multiplied by √d_model before the positions "
             "are added."),
            (e * math.sqrt(d), "the positional encodings are missing: add them to the scaled "
             "embeddings."),
            (e * d + pe, "the embeddings are multiplied by d_model; the factor is its square root."),
            (e / math.sqrt(d) + pe, "the embeddings are divided by √d_model; multiply instead."),
            ((e + pe) * math.sqrt(d), "the positions are scaled too: scale the embeddings first, "
             "then add the positions."),
            (e, "the embeddings get neither the √d_model scale nor the positions."),
        ]


def _run_layers(layers, x, *args):
    with torch.no_grad():
        for layer in layers:
            x = layer(x, *args)
    return x


def check_encoder(Encoder, hidden: bool = False) -> None:
    c = Check("Encoder", EVERYWHERE + ["course_grading.reference.encoder.Encoder.forward"], hidden)
    names = "embedding, pos_encoding, layers"
    enc = build(c, Encoder, 20, D, H, FF, 2)
    r = reference(ref.Encoder, 20, D, H, FF, 2, seed=2)
    load_known_weights(c, enc, r, names)
    c.that(len(list(enc.modules())) >= 3, "the encoder has no sub-modules.")
    src = torch.tensor([[3, 7, 1, 9, 4, 0], [2, 2, 5, 8, 0, 0]])
    mask = (src != 0)[:, None, None, :]

    def expected(ids, m):
        x, wrong = embed_inputs(r, ids)
        return _run_layers(r.layers, x, m), [(_run_layers(r.layers, w, m), msg) for w, msg in wrong]

    want, mistakes = expected(src, None)
    got = c.call(enc, src)
    compare(c, got, want, "wrong output: embedding × √d_model + positions, then every layer in "
            "order (each layer's output feeds the next).", mistakes + [
                (_run_layers(r.layers[:1], embed_inputs(r, src)[0]), "only the first layer runs."),
                (_run_layers(r.layers[-1:], embed_inputs(r, src)[0]), "only the last layer runs "
                 "on the embeddings: feed each layer's output to the next."),
            ], passed="embedding × √d_model + positions, then 2 layers")
    want_m, mistakes_m = expected(src, mask)
    got = c.call(enc, src, mask)
    compare(c, got, want_m, "wrong output with a src_mask.",
            [(want, "src_mask is ignored: pass it to every layer.")] + mistakes_m,
            passed="passes src_mask to every layer")
    if hidden:
        enc3 = build(c, Encoder, 12, D, H, FF, 3, max_len=40)
        r3 = reference(ref.Encoder, 12, D, H, FF, 3, max_len=40, seed=3)
        load_known_weights(c, enc3, r3, names)
        long = torch.randint(0, 12, (2, 40), generator=_gen(31))
        got = c.call(enc3, long)
        x, _ = embed_inputs(r3, long)
        compare(c, got, _run_layers(r3.layers, x), "wrong for 3 layers and a sequence of "
                "max_len tokens: use num_layers and max_len.", passed="3 layers, max_len tokens")
        enc64 = build(c, Encoder, 20, D, H, FF, 2).double()
        load_known_weights(c, enc64, r.double(), names)
        got = c.call(enc64, src, mask)
        c.that(got.dtype == torch.float64, "a float64 encoder should give float64 outputs: build "
               "the scale and positions in the embeddings' dtype.")
        compare(c, got, expected(src, mask)[0], "wrong values in float64.", atol=1e-10, rtol=1e-9,
                passed="float64")
    c.done()
