"""The reference encoder and decoder equal PyTorch's own layers once the weights are copied in."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from course_grading.reference.attention import causal_mask
from course_grading.reference.decoder import Decoder, DecoderLayer, Transformer, make_padding_mask
from course_grading.reference.encoder import Encoder, EncoderLayer, FeedForward, LayerNorm
from course_grading.reference.positional import sinusoidal_positional_encoding

D, H, FF = 16, 4, 40
TOL = {torch.float32: dict(atol=2e-5, rtol=1e-5), torch.float64: dict(atol=1e-10, rtol=1e-10)}


def _copy_attention(ours, theirs: nn.MultiheadAttention):
    """torch packs W_q, W_k, W_v into one (3d, d) in_proj_weight, in that order."""
    w_q, w_k, w_v = theirs.in_proj_weight.detach().chunk(3)
    b_q, b_k, b_v = theirs.in_proj_bias.detach().chunk(3)
    with torch.no_grad():
        for proj, w, b in ((ours.q_proj, w_q, b_q), (ours.k_proj, w_k, b_k), (ours.v_proj, w_v, b_v)):
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        ours.out_proj.weight.copy_(theirs.out_proj.weight)
        ours.out_proj.bias.copy_(theirs.out_proj.bias)


def _copy_common(ours, theirs, norms):
    with torch.no_grad():
        ours.ffn.linear1.load_state_dict(theirs.linear1.state_dict())
        ours.ffn.linear2.load_state_dict(theirs.linear2.state_dict())
        for name in norms:
            getattr(ours, name).load_state_dict(getattr(theirs, name).state_dict())


def _randomise(module, gen):
    """Non-trivial norms and biases, so that a swapped γ/β or a skipped bias would show."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_layer_norm_equals_torch(dtype):
    g = torch.Generator().manual_seed(0)
    ours, theirs = LayerNorm(D).to(dtype), nn.LayerNorm(D).to(dtype)
    _randomise(theirs, g)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 5, D, generator=g, dtype=dtype) * 3 + 2
    torch.testing.assert_close(ours(x), theirs(x), **TOL[dtype])
    tiny = torch.randn(2, D, generator=g, dtype=dtype) * 1e-3  # eps matters here
    torch.testing.assert_close(ours(tiny), theirs(tiny), **TOL[dtype])
    assert {n for n, _ in ours.named_parameters()} == {"weight", "bias"}


def test_feed_forward_is_linear_relu_linear():
    g = torch.Generator().manual_seed(1)
    ff = FeedForward(D, FF)
    x = torch.randn(2, 3, D, generator=g)
    want = ff.linear2(torch.relu(ff.linear1(x)))
    torch.testing.assert_close(ff(x), want)
    assert ff.linear1.weight.shape == (FF, D) and ff.linear2.weight.shape == (D, FF)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_equals_torch(norm_first, dtype):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(2)
    theirs = (
        nn.TransformerEncoderLayer(
            D, H, FF, dropout=0.0, activation="relu", batch_first=True, norm_first=norm_first
        )
        .to(dtype)
        .eval()
    )
    _randomise(theirs, g)
    ours = EncoderLayer(D, H, FF, norm_first=norm_first).to(dtype).eval()
    _copy_attention(ours.self_attn, theirs.self_attn)
    _copy_common(ours, theirs, ["norm1", "norm2"])
    x = torch.randn(3, 6, D, generator=g, dtype=dtype)
    torch.testing.assert_close(ours(x), theirs(x), **TOL[dtype])
    # A padding mask: ours says True = may attend, torch's key_padding_mask True = ignore.
    ids = torch.tensor([[4, 5, 6, 0, 0, 0], [4, 5, 6, 7, 8, 9], [3, 0, 0, 0, 0, 0]])
    mask = make_padding_mask(ids, 0)
    want = theirs(x, src_key_padding_mask=ids == 0)
    got = ours(x, mask)
    keep = ids != 0  # torch's fast path may zero padded rows; compare the real tokens
    torch.testing.assert_close(got[keep], want[keep], **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_equals_torch(norm_first, dtype):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(3)
    theirs = (
        nn.TransformerDecoderLayer(
            D, H, FF, dropout=0.0, activation="relu", batch_first=True, norm_first=norm_first
        )
        .to(dtype)
        .eval()
    )
    _randomise(theirs, g)
    ours = DecoderLayer(D, H, FF, norm_first=norm_first).to(dtype).eval()
    _copy_attention(ours.self_attn, theirs.self_attn)
    _copy_attention(ours.cross_attn, theirs.multihead_attn)
    _copy_common(ours, theirs, ["norm1", "norm2", "norm3"])
    x = torch.randn(2, 5, D, generator=g, dtype=dtype)
    memory = torch.randn(2, 7, D, generator=g, dtype=dtype)
    src = torch.tensor([[1, 2, 3, 4, 5, 0, 0], [1, 2, 3, 4, 5, 6, 7]])
    causal = causal_mask(5)
    # torch's bool attn_mask says True = NOT allowed: the opposite of ours.
    want = theirs(x, memory, tgt_mask=~causal, memory_key_padding_mask=src == 0)
    got = ours(x, memory, tgt_mask=causal, memory_mask=make_padding_mask(src, 0))
    torch.testing.assert_close(got, want, **TOL[dtype])
    torch.testing.assert_close(ours(x, memory), theirs(x, memory), **TOL[dtype])


def test_encoder_scales_embeddings_and_adds_positions():
    torch.manual_seed(0)
    enc = Encoder(11, D, H, FF, num_layers=0).eval()
    src = torch.tensor([[3, 1, 4, 1, 5]])
    want = enc.embedding(src) * D**0.5 + sinusoidal_positional_encoding(5, D)
    torch.testing.assert_close(enc(src), want)


def test_transformer_shapes_masks_and_state_dict_names():
    torch.manual_seed(0)
    model = Transformer(11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2).eval()
    keys = set(model.state_dict())
    for k in (
        "encoder.embedding.weight",
        "encoder.layers.1.self_attn.q_proj.weight",
        "decoder.layers.0.cross_attn.v_proj.bias",
        "decoder.layers.1.norm3.weight",
        "decoder.layers.0.ffn.linear2.weight",
        "generator.weight",
    ):
        assert k in keys
    src = torch.tensor([[1, 2, 3, 0], [4, 5, 6, 7]])
    tgt = torch.tensor([[1, 8, 9], [1, 10, 11]])
    src_mask, tgt_mask = make_padding_mask(src, 0), causal_mask(3)
    logits = model(src, tgt, src_mask, tgt_mask)
    assert logits.shape == (2, 3, 13)
    memory = model.encode(src, src_mask)
    torch.testing.assert_close(model.decode(tgt, memory, tgt_mask, src_mask), logits)
    # the padded source position changes nothing once masked
    src2 = src.clone()
    src2[0, 3] = 9
    torch.testing.assert_close(model(src2, tgt, src_mask, tgt_mask)[0], logits[0])
    # causal: changing the last target token leaves earlier positions unchanged
    tgt2 = tgt.clone()
    tgt2[:, -1] = 12
    torch.testing.assert_close(model(src, tgt2, src_mask, tgt_mask)[:, :-1], logits[:, :-1])
    # Decoder alone equals the model's decoder
    assert isinstance(model.decoder, Decoder)


def test_make_padding_mask():
    ids = torch.tensor([[5, 3, 0, 0], [7, 0, 0, 0]])
    m = make_padding_mask(ids, 0)
    assert m.dtype == torch.bool and m.shape == (2, 1, 1, 4)
    assert m[0, 0, 0].tolist() == [True, True, False, False]


def test_attention_maps_plot_and_viewer(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from course_utils.plots.transformer import attention_maps, plot_transformer_attention
    from course_utils.widgets.transformer import attention_viewer

    torch.manual_seed(0)
    model = Transformer(11, 13, d_model=D, num_heads=H, d_ff=FF, num_layers=2)
    src = torch.tensor([[1, 2, 3, 0], [4, 5, 6, 7]])
    tgt = torch.tensor([[1, 8, 9], [1, 10, 11]])
    maps = attention_maps(model, src, tgt, make_padding_mask(src, 0), causal_mask(3))
    assert [len(maps[k]) for k in ("encoder self", "decoder self", "cross")] == [2, 2, 2]
    assert maps["encoder self"][0].shape == (2, H, 4, 4)
    assert maps["cross"][1].shape == (2, H, 3, 4)
    assert torch.all(maps["cross"][0][0, :, :, 3] == 0)  # the padded source position
    assert torch.all(maps["decoder self"][1][:, :, 0, 1:] == 0)  # causal
    enc_maps = attention_maps(model.encoder, src)
    assert list(enc_maps) == ["encoder self"] and len(enc_maps["encoder self"]) == 2
    p = plot_transformer_attention(
        maps, "cross", layer=1, head=2, example=1, src_tokens=list("abcd"), tgt_tokens=list("xyz")
    )
    assert p.weights.shape == (3, 4)
    assert p.weights == pytest.approx(maps["cross"][1][1, 2].double().numpy())
    plt.close(p.fig)
    with pytest.raises(ValueError, match="no 'cross'"):
        plot_transformer_attention(enc_maps, "cross")
    monkeypatch.setenv("COURSE_GRADING", "1")
    assert attention_viewer(model, src, tgt) is None
    monkeypatch.delenv("COURSE_GRADING")
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = attention_viewer(model, src, tgt, kind="cross")
    assert box.children[0].children[0].value == "cross"
    plt.close("all")
