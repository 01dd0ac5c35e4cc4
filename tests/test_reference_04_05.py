"""The 04/05 reference implementations equal PyTorch's built-ins and the worked examples."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from course_grading.reference.attention import causal_mask
from course_grading.reference.multi_head import MultiHeadAttention, merge_heads, split_heads
from course_grading.reference.positional import PositionalEncoding, sinusoidal_positional_encoding

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-10, rtol=1e-10)}
D, H = 12, 3


def _gen(seed=0):
    return torch.Generator().manual_seed(seed)


def _pair(dtype, bias=True, seed=0):
    """Our module and torch's, with the same (random, non-zero bias) weights."""
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(D, H, bias=bias, batch_first=True).to(dtype).eval()
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn(p.shape, generator=_gen(seed + 1), dtype=dtype) * 0.4)
    ours = MultiHeadAttention(D, H, bias=bias).to(dtype).eval()
    with torch.no_grad():
        Wq, Wk, Wv = theirs.in_proj_weight.chunk(3)
        ours.q_proj.weight.copy_(Wq), ours.k_proj.weight.copy_(Wk), ours.v_proj.weight.copy_(Wv)
        ours.out_proj.weight.copy_(theirs.out_proj.weight)
        if bias:
            bq, bk, bv = theirs.in_proj_bias.chunk(3)
            ours.q_proj.bias.copy_(bq), ours.k_proj.bias.copy_(bk), ours.v_proj.bias.copy_(bv)
            ours.out_proj.bias.copy_(theirs.out_proj.bias)
    return ours, theirs


def test_split_heads_shape_and_layout():
    x = torch.arange(2 * 5 * D, dtype=torch.float32).view(2, 5, D)
    s = split_heads(x, H)
    assert s.shape == (2, H, 5, D // H)
    # head h, position t = features h*d_head ... (h+1)*d_head - 1 of token t
    for h in range(H):
        torch.testing.assert_close(s[:, h], x[..., h * 4 : (h + 1) * 4])
    torch.testing.assert_close(merge_heads(s), x)
    assert merge_heads(split_heads(x, 1)).shape == x.shape and split_heads(x, D).shape == (2, D, 5, 1)


def test_value_error_for_indivisible_d_model():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)


def test_state_dict_names():
    keys = set(MultiHeadAttention(D, H).state_dict())
    assert keys == {
        f"{p}.{w}" for p in ("q_proj", "k_proj", "v_proj", "out_proj") for w in ("weight", "bias")
    }
    assert set(MultiHeadAttention(D, H, bias=False).state_dict()) == {
        f"{p}.weight" for p in ("q_proj", "k_proj", "v_proj", "out_proj")
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("bias", [True, False])
def test_self_attention_equals_torch(dtype, batch, bias):
    ours, theirs = _pair(dtype, bias)
    x = torch.randn(batch, 6, D, generator=_gen(2), dtype=dtype)
    out, w = ours(x, x, x)
    want, want_w = theirs(x, x, x, average_attn_weights=False)
    assert out.shape == (batch, 6, D) and w.shape == (batch, H, 6, 6)
    torch.testing.assert_close(out, want, **TOL[dtype])
    torch.testing.assert_close(w, want_w, **TOL[dtype])
    # torch's default averages the heads
    torch.testing.assert_close(w.mean(1), theirs(x, x, x)[1], **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [1, 2])
def test_cross_attention_equals_torch(dtype, batch):
    ours, theirs = _pair(dtype, seed=3)
    g = _gen(4)
    q = torch.randn(batch, 4, D, generator=g, dtype=dtype)
    k = torch.randn(batch, 7, D, generator=g, dtype=dtype)
    v = torch.randn(batch, 7, D, generator=g, dtype=dtype)
    out, w = ours(q, k, v)
    want, want_w = theirs(q, k, v, average_attn_weights=False)
    assert out.shape == (batch, 4, D) and w.shape == (batch, H, 4, 7)
    torch.testing.assert_close(out, want, **TOL[dtype])
    torch.testing.assert_close(w, want_w, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masks_equal_torch(dtype):
    """Ours: True = may attend. torch's bool attn_mask / key_padding_mask: True = NOT allowed."""
    ours, theirs = _pair(dtype, seed=5)
    g = _gen(6)
    x = torch.randn(2, 5, D, generator=g, dtype=dtype)
    # causal (q, k)
    m = causal_mask(5)
    out, w = ours(x, x, x, mask=m)
    want, want_w = theirs(x, x, x, attn_mask=~m, average_attn_weights=False)
    torch.testing.assert_close(out, want, **TOL[dtype])
    torch.testing.assert_close(w, want_w, **TOL[dtype])
    assert (w[..., ~m] == 0).all()
    # padding (b, 1, 1, k): a different number of real tokens per sequence
    keep = torch.tensor([[True] * 5, [True, True, True, False, False]])
    out, w = ours(x, x, x, mask=keep[:, None, None, :])
    want, want_w = theirs(x, x, x, key_padding_mask=~keep, average_attn_weights=False)
    torch.testing.assert_close(out, want, **TOL[dtype])
    torch.testing.assert_close(w, want_w, **TOL[dtype])
    # one (q, k) mask per sequence, (b, 1, q, k); torch wants it repeated per head, (b*h, q, k)
    per = torch.rand(2, 1, 5, 5, generator=g) > 0.5
    per[..., 0] = True
    out, w = ours(x, x, x, mask=per)
    want, want_w = theirs(
        x, x, x, attn_mask=~per.expand(2, H, 5, 5).reshape(2 * H, 5, 5), average_attn_weights=False
    )
    torch.testing.assert_close(out, want, **TOL[dtype])
    torch.testing.assert_close(w, want_w, **TOL[dtype])
    # cross-attention with a padding mask on the keys
    mem = torch.randn(2, 7, D, generator=g, dtype=dtype)
    keep = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    out, _ = ours(x, mem, mem, mask=keep[:, None, None, :])
    want, _ = theirs(x, mem, mem, key_padding_mask=~keep)
    torch.testing.assert_close(out, want, **TOL[dtype])


def test_dropout_only_in_training():
    torch.manual_seed(0)
    m = MultiHeadAttention(D, H, dropout=0.5)
    x = torch.randn(2, 5, D, generator=_gen(7))
    m.eval()
    a, wa = m(x, x, x)
    torch.testing.assert_close(m(x, x, x)[0], a)
    m.train()
    b, wb = m(x, x, x)
    assert not torch.allclose(a, b)
    torch.testing.assert_close(wa, wb)  # returned weights are before dropout
    m0 = MultiHeadAttention(D, H).train()
    m0.load_state_dict(m.state_dict())
    torch.testing.assert_close(m0(x, x, x)[0], a)


def test_gradients_flow_to_all_projections():
    m = MultiHeadAttention(D, H)
    x = torch.randn(2, 4, D, generator=_gen(8))
    m(x, x, x)[0].sum().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_sinusoidal_worked_example():
    pe = sinusoidal_positional_encoding(4, 4)
    assert pe.shape == (4, 4) and pe.dtype == torch.float32
    expected = torch.tensor(
        [
            [0.0, 1.0, 0.0, 1.0],
            [0.8415, 0.5403, 0.0100, 0.9999],
            [0.9093, -0.4161, 0.0200, 0.9998],
            [0.1411, -0.9900, 0.0300, 0.9996],
        ]
    )
    torch.testing.assert_close(pe, expected, atol=1e-4, rtol=0)  # 4 decimals


def test_sinusoidal_formula_and_odd_d_model():
    pe = sinusoidal_positional_encoding(50, 10)
    for pos in (0, 7, 49):
        for i in range(5):
            angle = pos / 10000 ** (2 * i / 10)
            assert pe[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    odd = sinusoidal_positional_encoding(6, 5)
    torch.testing.assert_close(odd[:, :4], sinusoidal_positional_encoding(6, 5)[:, :4])
    assert odd.shape == (6, 5)
    assert odd[3, 4].item() == pytest.approx(math.sin(3 / 10000 ** (4 / 5)), abs=1e-7)
    assert sinusoidal_positional_encoding(3, 4, base=1000.0)[1, 2].item() == pytest.approx(
        math.sin(1 / 1000**0.5), abs=1e-7
    )


def test_relative_positions_are_rotations():
    d, k = 16, 5
    pe = sinusoidal_positional_encoding(40, d).double()
    M = torch.zeros(d, d, dtype=torch.float64)
    for i in range(d // 2):
        w = 1 / 10000 ** (2 * i / d)
        c, s = math.cos(k * w), math.sin(k * w)
        M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = torch.tensor([[c, -s], [s, c]])
    torch.testing.assert_close(pe[:-k] @ M, pe[k:], atol=1e-6, rtol=0)


def test_positional_encoding_module():
    torch.manual_seed(0)
    m = PositionalEncoding(8, max_len=20)
    assert list(m.parameters()) == [] and m.pe.shape == (20, 8) and not m.pe.requires_grad
    assert "pe" not in m.state_dict()  # non-persistent: recomputed, not saved
    x = torch.randn(3, 6, 8, generator=_gen(9))
    torch.testing.assert_close(m(x), x + sinusoidal_positional_encoding(6, 8))
    m64 = PositionalEncoding(8, max_len=20).double()
    assert m64.pe.dtype == torch.float64 and m64(x.double()).dtype == torch.float64
    assert PositionalEncoding(8).pe.shape == (5000, 8)
    d = PositionalEncoding(8, 20, dropout=0.5).train()
    y, want = d(x), x + sinusoidal_positional_encoding(6, 8)
    assert ((y == 0) | torch.isclose(y, 2 * want)).all() and (y == 0).any()
    torch.testing.assert_close(d.eval()(x), want)
