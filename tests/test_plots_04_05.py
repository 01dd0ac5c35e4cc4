"""The 04/05 plots and widgets, headless: the numbers they draw, and that controls respond."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest
import torch
from torch import nn

from course_grading.reference.multi_head import MultiHeadAttention
from course_grading.reference.positional import sinusoidal_positional_encoding
from course_utils.plots import multi_head as pm
from course_utils.plots import positional as pp

# -- 04 ---------------------------------------------------------------------------------------


def test_demo_module_has_fixed_weights_by_name():
    a, b = pm.demo_module(MultiHeadAttention, 5), pm.demo_module(MultiHeadAttention, 5)
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(p, q), name
    assert torch.equal(a.v_proj.weight, torch.eye(50)) and torch.equal(a.q_proj.weight, a.k_proj.weight)
    assert not a.training and type(a) is MultiHeadAttention


def test_head_attention_weights_per_head():
    r = pm.head_attention(pm.DEMO_SENTENCE, 5, MultiHeadAttention)
    n = len(r.tokens)
    assert r.weights.shape == (5, n, n) and r.num_heads == 5
    assert np.allclose(r.weights.sum(-1), 1.0, atol=1e-6)
    # the heads really differ
    assert not np.allclose(r.weights[0], r.weights[1], atol=1e-3)

    class Subclass(MultiHeadAttention):  # another class, loaded with the same weights by name
        pass

    again = pm.head_attention(pm.DEMO_SENTENCE, 5, Subclass)
    assert np.allclose(r.weights, again.weights)
    odd = pm.head_attention("the qwzxv sat", 2, MultiHeadAttention)
    assert odd.labels == ["the", "qwzxv?", "sat"] and not odd.known[1]
    with pytest.raises(ValueError):
        pm.head_attention("   ", 5, MultiHeadAttention)


def test_head_attention_rejects_a_module_with_wrong_weights_shape():
    class Averaged(MultiHeadAttention):
        def forward(self, q, k, v, mask=None):
            out, w = super().forward(q, k, v, mask)
            return out, w.mean(1)

    with pytest.raises(ValueError, match="weights of shape"):
        pm.head_attention("a b c", 5, Averaged)


def test_plot_heads_returns_the_numbers_drawn():
    r = pm.head_attention("the cat sat on the mat", 5, MultiHeadAttention)
    fig, axes, drawn, row = pm.plot_heads(r.weights, r.labels, head=2, query=1)
    colorbars = [ax for ax in fig.axes if ax not in axes]
    assert len(colorbars) == 1 and colorbars[0].get_ylabel() == "weight"  # one shared scale
    assert colorbars[0].get_ylim()[1] == pytest.approx(r.weights.max())
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


def test_head_viewer_responds_and_keeps_the_query_word(monkeypatch):
    from course_utils.widgets.multi_head import head_viewer

    ui = head_viewer(MultiHeadAttention)
    c = ui.controls
    first = c["image"].value
    assert first and ui.result.num_heads == 5
    assert c["query"].value == ui.result.tokens.index("it")
    c["head"].value = 3
    assert c["image"].value != first
    c["sentence"].value = "a dog ran because it was late"
    assert ui.result.tokens == ["a", "dog", "ran", "because", "it", "was", "late"]
    assert [label for label, _ in c["query"].options][:3] == ["0: a", "1: dog", "2: ran"]
    assert c["query"].value == 4  # still "it", at its new place
    c["query"].value = 1  # "dog"
    c["sentence"].value = "the dog slept"
    assert c["query"].value == 1 and ui.result.tokens[1] == "dog"
    c["sentence"].value = "cats nap"  # no "dog": the same place, or the last token
    assert c["query"].value == 1
    c["sentence"].value = "   "  # an error: a message, and no stale picture under it
    assert "ValueError" in c["message"].value and c["image"].layout.display == "none"

    class NotYet(nn.Module):
        def __init__(self, *args, **kwargs):
            super().__init__()
            raise NotImplementedError()

    ui = head_viewer(NotYet)
    assert "not written yet" in ui.controls["message"].value and not hasattr(ui, "result")
    monkeypatch.setenv("COURSE_GRADING", "1")
    assert head_viewer(MultiHeadAttention) is None


def test_head_viewer_sends_the_new_menu_in_one_message():
    """A new sentence's options and chosen query reach the browser together: options alone
    would show the first token chosen until the value followed (seen in a real browser)."""
    from course_utils.widgets.multi_head import head_viewer

    ui = head_viewer(MultiHeadAttention)
    menu = ui.controls["query"]
    sent = []
    menu.comm.kernel = object()  # a comm that sends, as in a kernel
    menu.comm.send = lambda data=None, metadata=None, buffers=None: sent.append(set(data["state"]))
    ui.controls["sentence"].value = "my dog did not eat because it was full"
    assert sent == [{"_options_labels", "index"}], sent


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


def test_plot_explorer_draws_the_table_of_the_given_function():
    calls = []

    def mine(max_len, d_model):
        calls.append((max_len, d_model))
        return sinusoidal_positional_encoding(max_len, d_model)

    r = pp.plot_explorer(mine, d_model=16, pos=5, max_len=30)
    assert calls == [(30, 16)] and r.table.shape == (30, 16) and r.similarity.argmax() == 5
    ax_t, ax_s = r.axes
    assert np.allclose(ax_t.images[0].get_array(), r.table)
    # the ‖PE‖² note stands above the dotted line, clear of the curve's peak
    note = [t for t in ax_s.texts if "d_model/2" in t.get_text()]
    assert len(note) == 1 and note[0].get_fontsize() >= 9
    r.fig.canvas.draw()
    box = note[0].get_window_extent(r.fig.canvas.get_renderer())
    peak = ax_s.transData.transform((5, r.similarity[5]))
    assert not box.contains(*peak)
    with pytest.raises(ValueError, match="shape"):
        pp.plot_explorer(lambda n, d: sinusoidal_positional_encoding(n, d)[:, :-1], 16, 5, 30)


def test_positional_explorer_responds_and_says_what_is_missing(monkeypatch):
    from course_utils.widgets.positional import positional_explorer

    ui = positional_explorer(sinusoidal_positional_encoding)
    c = ui.controls
    first = c["image"].value
    assert first and ui.result.table.shape == (100, 100)
    c["position"].value = 50
    assert c["image"].value != first and ui.result.similarity.argmax() == 50
    c["d_model"].value = 32
    assert ui.result.table.shape == (100, 32)
    c["positions"].value = 1000
    assert ui.result.table.shape == (1000, 32) and c["position"].max == 999
    c["position"].value = 900
    c["positions"].value = 100  # the position follows the shorter table
    assert c["position"].value == 99 and ui.result.similarity.argmax() == 99

    def not_yet(max_len, d_model):
        raise NotImplementedError()

    ui = positional_explorer(not_yet)
    assert "not written yet" in ui.controls["message"].value
    assert ui.controls["image"].layout.display == "none"
    monkeypatch.setenv("COURSE_GRADING", "1")
    assert positional_explorer(sinusoidal_positional_encoding) is None
