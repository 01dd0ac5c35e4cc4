"""The 03_attention plots and widget, headless: the numbers they draw, and that controls respond."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

from course_grading.reference import attention as ref
from course_utils.plots import attention as pa

SENTENCE = "we sat on the bank of the river"


def test_tokenize_lowercases_and_splits_punctuation():
    assert pa.tokenize("The Bank, of the river!") == ["the", "bank", ",", "of", "the", "river", "!"]
    assert pa.tokenize("   ") == []


def test_row_entropy_extremes():
    w = np.array([[1.0, 0.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])
    assert np.allclose(pa.row_entropy(w), [0.0, math.log(4)])
    assert np.allclose(pa.row_entropy(torch.tensor(w)), [0.0, math.log(4)])


def test_plot_attention_returns_the_numbers_drawn():
    w = ref.softmax(torch.randn(3, 5, generator=torch.Generator().manual_seed(0)))
    fig, ax, drawn = pa.plot_attention(w, ["a", "b", "c"], list("vwxyz"), title="t")
    assert drawn.shape == (3, 5) and np.allclose(drawn, w.numpy())
    assert np.allclose(ax.images[0].get_array(), w.numpy())
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert len(ax.texts) == 15  # annotated cells
    with pytest.raises(ValueError, match="query"):
        pa.plot_attention(w, ["a", "b"], list("vwxyz"))
    with pytest.raises(ValueError, match="one batch element"):
        pa.plot_attention(w[None], ["a", "b", "c"], list("vwxyz"))


def test_plot_attention_greys_out_masked_cells_and_skips_their_labels():
    m = ref.causal_mask(4)
    _, w = ref.scaled_dot_product_attention(*(torch.randn(4, 3),) * 3, mask=m)
    fig, ax = plt.subplots()
    pa.plot_attention(w, list("abcd"), ax=ax, mask=m, colorbar=False)
    assert len(ax.images) == 2  # the weights and the grey overlay
    assert len(ax.texts) == int(m.sum())


SDPA, MASK = ref.scaled_dot_product_attention, ref.causal_mask  # stand-ins for the learner's


def test_sentence_attention_rows_sum_to_one_and_unknown_words_are_flagged():
    r = pa.sentence_attention(SENTENCE + " qwertyuiop", SDPA)
    n = len(r.tokens)
    assert r.tokens[-1] == "qwertyuiop" and not r.known[-1] and r.known[:-1].all()
    assert r.labels[-1] == "qwertyuiop?"
    assert r.weights.shape == (n, n) and r.allowed.all()
    assert np.allclose(r.weights.sum(1), 1.0, atol=1e-5)
    assert math.isclose(r.scale, math.sqrt(50))
    # an unknown word (zero vector) scores 0 with everything: its row is uniform
    assert np.allclose(r.weights[-1], 1.0 / n, atol=1e-6)
    assert math.isclose(r.entropy[-1], math.log(n), rel_tol=1e-5)


def test_sentence_attention_matches_softmax_of_scaled_scores():
    from course_utils.glove import load_glove

    r = pa.sentence_attention(SENTENCE, SDPA, scale=3.0)
    g = load_glove()
    X = torch.tensor(np.stack([g[t] for t in r.tokens]), dtype=torch.float64)
    expected = ref.softmax(X @ X.T / 3.0, dim=-1).numpy()
    assert np.allclose(r.weights, expected, atol=1e-5)


def test_causal_toggle_zeroes_the_upper_triangle():
    r = pa.sentence_attention(SENTENCE, SDPA, causal=True, causal_mask_fn=MASK)
    upper = np.triu(np.ones_like(r.weights, dtype=bool), 1)
    assert (r.weights[upper] == 0).all() and not r.allowed[upper].any()
    assert r.allowed[~upper].all()
    assert np.allclose(r.weights.sum(1), 1.0, atol=1e-5)
    assert r.entropy[0] == 0.0  # the first word can only see itself
    assert np.allclose(r.max_entropy, np.log(np.arange(1, len(r.tokens) + 1)))
    with pytest.raises(ValueError, match="causal_mask"):
        pa.sentence_attention(SENTENCE, SDPA, causal=True)


def test_larger_divisor_flattens_rows():
    entropies = [pa.sentence_attention(SENTENCE, SDPA, scale=s).entropy for s in (1.0, 7.07, 100.0, 1e4)]
    for sharper, flatter in zip(entropies, entropies[1:]):
        assert (flatter >= sharper - 1e-6).all() and flatter.mean() > sharper.mean()
    n = len(pa.tokenize(SENTENCE))
    assert np.allclose(entropies[-1], math.log(n), atol=1e-3)  # near uniform
    # dividing by 1: half the words put (nearly) all their weight on themselves; the function
    # words (two identical "the"s, "on", "of") spread over a couple of others at most
    assert (entropies[0] < 0.01).sum() >= 4 and entropies[0].max() < math.log(n) / 2


def test_sentence_attention_uses_the_given_functions():
    calls = []

    def mine(Q, K, V, mask=None):
        calls.append((Q.shape, mask is not None))
        return ref.scaled_dot_product_attention(Q, K, V, mask)

    def my_mask(size, device=None):
        calls.append(("mask", size))
        return ref.causal_mask(size, device)

    r = pa.sentence_attention("the river", mine, causal=True, causal_mask_fn=my_mask)
    assert calls == [("mask", 2), ((2, 50), True)] and r.causal


def test_sentence_attention_rejects_bad_input():
    with pytest.raises(ValueError, match="word"):
        pa.sentence_attention("  ", SDPA)
    with pytest.raises(ValueError, match="positive"):
        pa.sentence_attention("the river", SDPA, scale=0)
    with pytest.raises(ValueError, match="shape"):
        pa.sentence_attention("the river", lambda Q, K, V, mask=None: (V, V[:1]))


def test_plot_sentence_attention_draws_both_panels_and_keeps_the_footnote_clear():
    r = pa.sentence_attention(SENTENCE + " qwertyuiop", SDPA, causal=True, causal_mask_fn=MASK)
    fig, (ax_w, ax_h), result = pa.plot_sentence_attention(r)
    assert result is r
    assert np.allclose(ax_w.images[0].get_array(), r.weights)
    heights = [p.get_width() for p in ax_h.patches]
    assert np.allclose(heights, r.entropy)
    # the note on unknown words sits below the rotated tick labels, not on top of them
    assert "not among the 20k GloVe words" in ax_w.get_xlabel()
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ticks = [t.get_window_extent(renderer) for t in ax_w.get_xticklabels()]
    label = ax_w.xaxis.label.get_window_extent(renderer)
    assert label.y1 <= min(t.y0 for t in ticks) + 1
    assert not fig.texts  # no free-floating figure text left to collide with anything


def _widget_parts(ui):
    c = ui.controls
    return c["sentence"], c["scale"], c["causal"], c["status"], c["image"], c["message"]


def test_widget_builds_and_responds(monkeypatch):
    from course_utils.widgets.attention import attention_explorer

    calls = []

    def mine(Q, K, V, mask=None):
        calls.append(mask is not None)
        return ref.scaled_dot_product_attention(Q, K, V, mask)

    ui = attention_explorer(mine, ref.causal_mask, sentence=SENTENCE)
    text, slider, box, status, image, message = _widget_parts(ui)
    first_png, first = image.value, ui.result
    assert first_png and math.isclose(first.scale, math.sqrt(50))
    assert "your <code>scaled_dot_product_attention" in status.value and not message.value

    slider.value = 100.0
    assert image.value != first_png and ui.result.scale == 100.0
    assert ui.result.entropy.mean() > first.entropy.mean()

    png = image.value
    box.value = True
    assert image.value != png and ui.result.causal and (np.triu(ui.result.weights, 1) == 0).all()
    assert calls[-1] is True and "causal_mask" in status.value

    text.value = "the river flows"
    assert ui.result.tokens == ["the", "river", "flows"]
    assert image.layout.display != "none"

    text.value = "   "  # nothing to draw: a message, and no stale picture under it
    assert "ValueError" in message.value and image.layout.display == "none"
    text.value = "the sea"  # and back
    assert ui.result.tokens == ["the", "sea"] and image.layout.display != "none"
    assert not message.value


def test_widget_says_what_is_not_written_yet():
    from course_utils.widgets.attention import attention_explorer

    def unwritten(*args, **kwargs):
        raise NotImplementedError()

    ui = attention_explorer(unwritten, ref.causal_mask)
    assert "scaled_dot_product_attention is not written yet" in ui.controls["message"].value
    assert ui.controls["image"].layout.display == "none" and not hasattr(ui, "result")

    ui = attention_explorer(ref.scaled_dot_product_attention, unwritten)
    assert hasattr(ui, "result")  # no mask asked for yet
    ui.controls["causal"].value = True
    assert "causal_mask is not written yet" in ui.controls["message"].value

    ui = attention_explorer(ref.scaled_dot_product_attention)  # no causal_mask at all
    assert ui.controls["causal"].disabled


def test_widget_pictures_are_drawn_at_twice_their_displayed_size():
    from course_utils.widgets.attention import attention_explorer
    from course_utils.widgets.picture import PIXEL_RATIO, png_size

    ui = attention_explorer(ref.scaled_dot_product_attention, ref.causal_mask)
    image = ui.controls["image"]
    width, _ = png_size(image.value)
    shown = int(image.layout.width.removesuffix("px"))
    assert PIXEL_RATIO >= 2 and abs(width - PIXEL_RATIO * shown) <= PIXEL_RATIO
    assert image.layout.max_width == "100%" and image.layout.height == "auto"
    assert shown <= 960  # fits a JupyterLab output area at 1280 px without being squeezed


def test_widget_is_none_while_grading(monkeypatch):
    from course_utils.widgets.attention import attention_explorer

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert attention_explorer(ref.scaled_dot_product_attention) is None
