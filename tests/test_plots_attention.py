"""The 03_attention plots and widget, headless: the numbers they draw, and that controls respond."""
from __future__ import annotations

import math
import os

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course_utils.plots import attention as pa  # noqa: E402
from course_grading.reference import attention as ref  # noqa: E402

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


def test_sentence_attention_rows_sum_to_one_and_unknown_words_are_flagged():
    r = pa.sentence_attention(SENTENCE + " qwertyuiop")
    n = len(r.tokens)
    assert r.tokens[-1] == "qwertyuiop" and not r.known[-1] and r.known[:-1].all()
    assert r.labels[-1] == "qwertyuiop?"
    assert r.weights.shape == (n, n)
    assert np.allclose(r.weights.sum(1), 1.0, atol=1e-5)
    assert math.isclose(r.scale, math.sqrt(50))
    # an unknown word (zero vector) scores 0 with everything: its row is uniform
    assert np.allclose(r.weights[-1], 1.0 / n, atol=1e-6)
    assert math.isclose(r.entropy[-1], math.log(n), rel_tol=1e-5)


def test_sentence_attention_matches_softmax_of_scaled_scores():
    r = pa.sentence_attention(SENTENCE, scale=3.0)
    expected = ref.softmax(torch.tensor(r.scores), dim=-1).numpy()
    assert np.allclose(r.weights, expected, atol=1e-5)


def test_causal_toggle_zeroes_the_upper_triangle():
    r = pa.sentence_attention(SENTENCE, causal=True)
    upper = np.triu(np.ones_like(r.weights, dtype=bool), 1)
    assert (r.weights[upper] == 0).all() and np.isneginf(r.scores[upper]).all()
    assert np.allclose(r.weights.sum(1), 1.0, atol=1e-5)
    assert r.entropy[0] == 0.0  # the first word can only see itself
    assert np.allclose(r.max_entropy, np.log(np.arange(1, len(r.tokens) + 1)))


def test_larger_divisor_flattens_rows():
    entropies = [pa.sentence_attention(SENTENCE, scale=s).entropy for s in (1.0, 7.07, 100.0, 1e4)]
    for sharper, flatter in zip(entropies, entropies[1:]):
        assert (flatter >= sharper - 1e-6).all() and flatter.mean() > sharper.mean()
    n = len(pa.tokenize(SENTENCE))
    assert np.allclose(entropies[-1], math.log(n), atol=1e-3)  # near uniform
    # dividing by 1: half the words put (nearly) all their weight on themselves; the function
    # words (two identical "the"s, "on", "of") spread over a couple of others at most
    assert (entropies[0] < 0.01).sum() >= 4 and entropies[0].max() < math.log(n) / 2


def test_sentence_attention_uses_the_given_function():
    calls = []

    def mine(Q, K, V, mask=None):
        calls.append((Q.shape, mask is not None))
        return ref.scaled_dot_product_attention(Q, K, V, mask)

    r = pa.sentence_attention("the river", causal=True, attention_fn=mine)
    assert calls == [((2, 50), True)] and r.causal


def test_sentence_attention_rejects_bad_input():
    with pytest.raises(ValueError, match="word"):
        pa.sentence_attention("  ")
    with pytest.raises(ValueError, match="positive"):
        pa.sentence_attention("the river", scale=0)


def test_plot_sentence_attention_draws_both_panels():
    r = pa.sentence_attention(SENTENCE, causal=True)
    fig, (ax_w, ax_h), result = pa.plot_sentence_attention(r)
    assert result is r
    assert np.allclose(ax_w.images[0].get_array(), r.weights)
    heights = [p.get_width() for p in ax_h.patches]
    assert np.allclose(heights, r.entropy)
    png = pa.figure_png(fig)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_widget_builds_and_responds(monkeypatch):
    from course_utils.widgets.attention import attention_explorer

    calls = []

    def mine(Q, K, V, mask=None):
        calls.append(mask is not None)
        return ref.scaled_dot_product_attention(Q, K, V, mask)

    ui = attention_explorer(mine, sentence=SENTENCE)
    text, (slider, box), status, image = ui.children[0], ui.children[1].children, *ui.children[2:]
    first_png, first = image.value, ui.result
    assert first_png and math.isclose(first.scale, math.sqrt(50)) and "your function" in status.value

    slider.value = 100.0
    assert image.value != first_png and ui.result.scale == 100.0
    assert ui.result.entropy.mean() > first.entropy.mean()

    png = image.value
    box.value = True
    assert image.value != png and ui.result.causal and (np.triu(ui.result.weights, 1) == 0).all()
    assert calls[-1] is True

    text.value = "the river flows"
    assert ui.result.tokens == ["the", "river", "flows"]

    text.value = "   "  # nothing to draw: a message, and the last picture stays
    assert "ValueError" in status.value and ui.result.tokens == ["the", "river", "flows"]


def test_widget_falls_back_to_the_reference_when_not_implemented():
    from course_utils.widgets.attention import attention_explorer

    def unwritten(Q, K, V, mask=None):
        raise NotImplementedError()

    ui = attention_explorer(unwritten)
    assert ui.children[3].value and "reference" in ui.children[2].value


def test_widget_is_none_while_grading(monkeypatch):
    from course_utils.widgets.attention import attention_explorer

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert attention_explorer() is None
