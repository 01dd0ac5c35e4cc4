"""The 04/05 plots and widgets, headless: the numbers they draw, and that controls respond."""
from __future__ import annotations

import math
import os

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402

from course_utils.plots import multi_head as pm  # noqa: E402
from course_utils.plots import positional as pp  # noqa: E402
from course_grading.reference.multi_head import MultiHeadAttention  # noqa: E402
from course_grading.reference.positional import sinusoidal_positional_encoding  # noqa: E402




# -- 04 ---------------------------------------------------------------------------------------

def test_demo_module_has_fixed_weights_by_name():
    a, b = pm.demo_module(5), pm.demo_module(5)
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), name
    assert torch.equal(a.v_proj.weight, torch.eye(50)) and torch.equal(a.q_proj.weight, a.k_proj.weight)
    assert not a.training


def test_head_attention_weights_per_head():
    r = pm.head_attention(pm.DEMO_SENTENCE, num_heads=5)
    n = len(r.tokens)
    assert r.weights.shape == (5, n, n) and r.num_heads == 5
    assert np.allclose(r.weights.sum(-1), 1.0, atol=1e-6)
    # the heads really differ
    assert not np.allclose(r.weights[0], r.weights[1], atol=1e-3)
    # the learner's class loaded with the same weights gives the same numbers
    again = pm.head_attention(pm.DEMO_SENTENCE, num_heads=5, mha_class=MultiHeadAttention)
    assert np.allclose(r.weights, again.weights)
    odd = pm.head_attention("the qwzxv sat", num_heads=2)
    assert odd.labels == ["the", "qwzxv?", "sat"] and not odd.known[1]
    with pytest.raises(ValueError):
        pm.head_attention("   ")


def test_head_attention_rejects_a_module_with_wrong_weights_shape():
    class Averaged(MultiHeadAttention):
        def forward(self, q, k, v, mask=None):
            out, w = super().forward(q, k, v, mask)
            return out, w.mean(1)

    with pytest.raises(ValueError, match="weights of shape"):
        pm.head_attention("a b c", num_heads=5, mha_class=Averaged)


def test_plot_heads_returns_the_numbers_drawn():
    r = pm.head_attention("the cat sat on the mat", num_heads=5)
    fig, axes, drawn, row = pm.plot_heads(r.weights, r.labels, head=2, query=1)
    assert len(axes) == 6  # five heatmaps and the bars
    assert np.allclose(drawn, r.weights)
    for i in range(5):
        assert np.allclose(axes[i].images[0].get_array(), r.weights[i])
    assert np.allclose(row, r.weights[2, 1])
    heights = [bar.get_height() for bar in axes[-1].patches]
    assert np.allclose(heights, r.weights[2, 1])
    assert axes[2].spines["left"].get_linewidth() == pytest.approx(2.5)  # the picked head is framed
    _, axes, _, row = pm.plot_heads(r.weights, r.labels)
    assert len(axes) == 5 and row is None
    with pytest.raises(ValueError, match="head"):
        pm.plot_heads(r.weights, r.labels, head=5)
    with pytest.raises(ValueError, match="tokens"):
        pm.plot_heads(r.weights, r.labels[:-1])
    with pytest.raises(ValueError, match="batch element"):
        pm.plot_heads(r.weights[None], r.labels)


def test_head_viewer_responds_and_falls_back(monkeypatch):
    from course_utils.widgets.multi_head import head_viewer

    ui = head_viewer()
    head_slider, query_box = ui.children[0].children
    image = ui.children[3]
    first = image.value
    assert first and ui.result.num_heads == 5
    head_slider.value = 3
    assert image.value != first
    text = ui.children[1]
    text.value = "a dog ran"
    assert ui.result.tokens == ["a", "dog", "ran"]
    assert [label for label, _ in query_box.options] == ["0: a", "1: dog", "2: ran"]

    class NotYet(nn.Module):
        def __init__(self, *args, **kwargs):
            super().__init__()
            raise NotImplementedError()

    ui = head_viewer(NotYet)
    assert "reference" in ui.children[2].value and ui.result.num_heads == 5
    monkeypatch.setenv("COURSE_GRADING", "1")
    assert head_viewer() is None


# -- 05 ---------------------------------------------------------------------------------------

def test_wavelengths():
    lam = pp.wavelengths(100)
    assert lam.shape == (50,)
    assert lam[0] == pytest.approx(2 * math.pi)
    assert lam[-1] == pytest.approx(2 * math.pi * 10000 ** (98 / 100))
    assert pp.wavelengths(512, base=1000)[-1] == pytest.approx(6115.91, rel=1e-4)
    assert np.all(np.diff(lam) > 0)


def test_position_similarity_depends_on_the_offset_only():
    pe = sinusoidal_positional_encoding(80, 32)
    a, b = pp.position_similarity(pe, 10), pp.position_similarity(pe, 30)
    assert a.shape == (80,) and a.argmax() == 10 and a[10] == pytest.approx(16.0, abs=1e-4)
    assert np.allclose(a[0:40], b[20:60], atol=1e-4)
    with pytest.raises(ValueError):
        pp.position_similarity(pe, 80)


def test_plot_encoding_and_similarity_return_what_they_draw():
    pe = sinusoidal_positional_encoding(100, 100)
    fig, ax, values = pp.plot_encoding(pe, mark=20)
    assert np.allclose(values, pe.numpy()) and np.allclose(ax.images[0].get_array(), pe.numpy())
    fig, ax, sims = pp.plot_position_similarity(pe, 20)
    assert np.allclose(ax.lines[0].get_ydata(), sims)
    with pytest.raises(ValueError):
        pp.plot_encoding(pe[None])


def test_plot_explorer_uses_the_given_function_for_base_10000_only():
    calls = []

    def mine(max_len, d_model):
        calls.append((max_len, d_model))
        return sinusoidal_positional_encoding(max_len, d_model)

    r = pp.plot_explorer(d_model=16, pos=5, max_len=30, encoding_fn=mine)
    assert calls == [(30, 16)] and r.table.shape == (30, 16) and r.similarity.argmax() == 5
    r = pp.plot_explorer(d_model=16, pos=5, max_len=30, base=1000.0, encoding_fn=mine)
    assert len(calls) == 1
    assert np.allclose(r.table, sinusoidal_positional_encoding(30, 16, base=1000.0).numpy())


def test_positional_explorer_responds_and_falls_back(monkeypatch):
    from course_utils.widgets.positional import positional_explorer

    ui = positional_explorer()
    pos_slider, base_box = ui.children[0].children
    d_slider, image = ui.children[1], ui.children[3]
    first = image.value
    assert first and ui.result.table.shape == (100, 100)
    pos_slider.value = 50
    assert image.value != first and ui.result.similarity.argmax() == 50
    d_slider.value = 32
    assert ui.result.table.shape == (100, 32)
    base_box.value = 1000.0
    assert np.allclose(ui.result.table, sinusoidal_positional_encoding(100, 32, base=1000.0).numpy())

    def not_yet(max_len, d_model):
        raise NotImplementedError()

    ui = positional_explorer(not_yet)
    assert "reference" in ui.children[2].value
    monkeypatch.setenv("COURSE_GRADING", "1")
    assert positional_explorer() is None
