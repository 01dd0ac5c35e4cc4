"""Attention heatmaps, and the numbers behind the 03_attention widget.

- ``plot_attention(weights, query_tokens, key_tokens)``: a heatmap of any (q, k) weight matrix,
  rows = queries, columns = keys. Later notebooks use it for heads and cross-attention.
  ``update_attention(plot, weights)`` redraws such a picture with other weights (and tokens);
  ``attention_artists(plot)`` names what changes with the weights.
- ``sentence_attention(sentence, attention_fn, scale, causal, causal_mask_fn)``: GloVe vectors
  of a typed sentence attend to each other through your attention; scores are divided by
  ``scale`` (√d_k by default).
- ``plot_sentence_attention(result)``: that heatmap next to the entropy of each row;
  ``update_sentence_attention(plot, result)`` redraws it for another scale.

matplotlib and torch are imported inside the functions: importing this module is cheap.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np

from .similarity import labelled_heatmap

_TOKEN = re.compile(r"[a-z0-9]+(?:['.-][a-z0-9]+)*|[^\sa-z0-9]")


def tokenize(sentence: str) -> list[str]:
    """Lower-case words and punctuation marks, the way GloVe's vocabulary spells them."""
    return _TOKEN.findall(sentence.lower())


def _as_numpy(x) -> np.ndarray:
    if hasattr(x, "detach"):
        x = x.detach().cpu().double()
    return np.asarray(x, dtype=np.float64)


def row_entropy(weights) -> np.ndarray:
    """Entropy of each row of ``weights`` in nats, -Σ_j w_ij log w_ij, with 0 log 0 = 0.

    0 means all the weight sits on one key; log(n) means it is spread evenly over n keys.
    """
    w = _as_numpy(weights)
    logs = np.log(np.where(w > 0, w, 1.0))
    return -(w * logs).sum(axis=-1)


KEY_LABEL = "key (attended to)"
KEY_LABEL_UNKNOWN = KEY_LABEL + "\nword? = not among the 20k GloVe words: zero vector"


class AttentionPlot(NamedTuple):
    fig: object  # matplotlib Figure
    ax: object  # the heatmap's Axes
    weights: np.ndarray  # (q, k) the numbers drawn


def plot_attention(
    weights,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    annotate: bool | None = None,
    cmap: str = "viridis",
    colorbar: bool = True,
    mask=None,
) -> AttentionPlot:
    """Heatmap of attention weights: row i = query i, column j = key j, colour = w_ij in [0, 1].

    ``weights`` is (q, k), a NumPy array or a tensor on any device. ``annotate`` writes each
    weight in its cell (default: when the matrix is at most 12 × 12). ``mask`` (bool, True = may
    attend, broadcastable to (q, k)) greys out the forbidden cells.
    Returns ``AttentionPlot(fig, ax, weights)`` with the weights as a float64 array.
    """

    w = _as_numpy(weights)
    if w.ndim != 2:
        raise ValueError(
            f"weights should be (queries, keys), got shape {w.shape}; "
            "pick one batch element / head first, e.g. weights[0, 0]"
        )
    key_tokens = list(query_tokens) if key_tokens is None else list(key_tokens)
    query_tokens = list(query_tokens)
    if w.shape != (len(query_tokens), len(key_tokens)):
        raise ValueError(
            f"weights have shape {w.shape} but there are {len(query_tokens)} query "
            f"and {len(key_tokens)} key tokens"
        )
    fig, ax, image = labelled_heatmap(
        ax, w, query_tokens, key_tokens, colorbar, 3.0, 0.55, cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto"
    )
    ax.set_xlabel(KEY_LABEL)
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    allowed = (
        np.ones(w.shape, bool) if mask is None else np.broadcast_to(_as_numpy(mask).astype(bool), w.shape)
    )
    if not allowed.all():
        ax.imshow(np.where(allowed, np.nan, 1.0), cmap="Greys", vmin=0.0, vmax=4.0, aspect="auto")
    if annotate is None:
        annotate = max(w.shape) <= 12
    if annotate:
        _write_cells(ax, w, allowed)
    if colorbar:
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="weight")
    return AttentionPlot(fig, ax, w)


def _write_cells(ax, w: np.ndarray, allowed: np.ndarray) -> None:
    """Each allowed weight written in its cell, dark on light and light on dark."""
    for i in range(w.shape[0]):
        for j in range(w.shape[1]):
            if not allowed[i, j]:
                continue
            cell = ax.text(
                j,
                i,
                f"{w[i, j]:.2f}",
                ha="center",
                va="center",
                fontsize=8,
                color="black" if w[i, j] > 0.6 else "white",
            )
            cell._course_cell = (i, j)  # for update_attention


def update_attention(
    plot: AttentionPlot,
    weights,
    title: str | None = None,
    query_tokens: Sequence[str] | None = None,
    key_tokens: Sequence[str] | None = None,
) -> AttentionPlot:
    """The picture of ``plot_attention(weights, ...)``, made by changing the artists of
    ``plot`` instead of building the figure again: the heatmap's colours, the numbers written
    in its cells and their colours, the title, and the tokens when given (as many as before).
    ``weights`` must have the shape of ``plot.weights``; the mask stays that of ``plot``."""
    w = _as_numpy(weights)
    if w.shape != plot.weights.shape:
        raise ValueError(f"weights of shape {w.shape} for a picture of {plot.weights.shape}")
    ax = plot.ax
    for tokens, axis, n in ((query_tokens, ax.yaxis, w.shape[0]), (key_tokens, ax.xaxis, w.shape[1])):
        if tokens is None:
            continue
        tokens = [str(t) for t in tokens]
        if len(tokens) != n:
            raise ValueError(f"{len(tokens)} tokens for {n} rows or columns")
        axis.set_ticklabels(tokens)  # the same ticks keep their rotation and alignment
    ax.images[0].set_data(w)
    cells = [t for t in ax.texts if getattr(t, "_course_cell", None) is not None]
    for t in cells:
        i, j = t._course_cell
        t.set_text(f"{w[i, j]:.2f}")
        t.set_color("black" if w[i, j] > 0.6 else "white")
    if title is not None:
        ax.title.set_text(title)  # in the title's own font (set_title would reset its size)
    return AttentionPlot(plot.fig, ax, w)


def attention_artists(plot: AttentionPlot) -> list:
    """What ``update_attention`` changes without changing the tokens: the heatmap (and the
    mask's grey drawn over it), the numbers in the cells, the title, and the frame drawn over
    the heatmap's edges. A widget draws the rest once (``Picture.show(..., dynamic=...)``)."""
    ax = plot.ax
    cells = [t for t in ax.texts if getattr(t, "_course_cell", None) is not None]
    return [*ax.images, *cells, *ax.spines.values(), ax.title]


@dataclass(frozen=True)
class SentenceAttention:
    """What the widget draws for one sentence, one scale and one mask setting."""

    tokens: list[str]
    known: np.ndarray  # (n,) bool: the word has a GloVe vector (unknown words get zeros)
    scale: float  # the scores X Xᵀ are divided by this
    causal: bool
    allowed: np.ndarray  # (n, n) bool: True where query i may attend to key j
    weights: np.ndarray  # (n, n) what attention_fn returned, rows sum to 1
    entropy: np.ndarray  # (n,) entropy of each row, nats
    max_entropy: np.ndarray  # (n,) log(number of keys each row may attend to)

    @property
    def labels(self) -> list[str]:
        """Tokens, with unknown words marked by a trailing '?'."""
        return [t if k else f"{t}?" for t, k in zip(self.tokens, self.known)]


def sentence_attention(
    sentence: str,
    attention_fn: Callable,
    scale: float | None = None,
    causal: bool = False,
    causal_mask_fn: Callable | None = None,
    vectors=None,
) -> SentenceAttention:
    """Self-attention of a sentence's GloVe vectors with the scores divided by ``scale``.

    Q = K = V = X, the (n, 50) word vectors (a word outside the vocabulary gets a zero vector:
    its score with every word is 0). ``attention_fn`` is 03_attention's
    ``scaled_dot_product_attention(Q, K, V, mask=None) -> (output, weights)`` (yours); it
    divides by √d_k itself, so the queries are rescaled by √d_k / scale to make its scores
    exactly X Xᵀ / scale. ``scale`` defaults to √d_k = √50. ``causal=True`` passes the mask
    ``causal_mask_fn(n)`` (03_attention's ``causal_mask``, yours).
    """
    import torch

    from ..glove import load_glove

    tokens = tokenize(sentence)
    if not tokens:
        raise ValueError("type at least one word")
    if scale is None:
        scale = math.sqrt(50)
    scale = float(scale)
    if not scale > 0:
        raise ValueError(f"scale must be positive, got {scale}")
    if causal and causal_mask_fn is None:
        raise ValueError("the causal mask needs a causal_mask function")
    glove = vectors if vectors is not None else load_glove()
    d = glove.dim
    known = np.array([t in glove for t in tokens])
    X = np.stack([glove[t] if k else np.zeros(d, np.float32) for t, k in zip(tokens, known)])
    X = torch.tensor(X, dtype=torch.float32)  # (n, d)
    n = len(tokens)
    mask = causal_mask_fn(n) if causal else None
    Q = X * (math.sqrt(d) / scale)  # the function divides by √d: Q Kᵀ / √d = X Xᵀ / scale
    _, weights = attention_fn(Q, X, X, mask=mask)  # (n, n)
    w = _as_numpy(weights)
    if w.shape != (n, n):
        raise ValueError(f"the attention weights have shape {w.shape}, expected ({n}, {n})")
    allowed = (
        np.ones((n, n), bool)
        if mask is None
        else np.broadcast_to(_as_numpy(mask).astype(bool), (n, n)).copy()
    )
    return SentenceAttention(
        tokens=tokens,
        known=known,
        scale=scale,
        causal=bool(causal),
        allowed=allowed,
        weights=w,
        entropy=row_entropy(w),
        max_entropy=np.log(np.maximum(allowed.sum(axis=1), 1)),
    )


class SentencePlot(NamedTuple):
    fig: object
    axes: tuple  # (heatmap Axes, entropy Axes)
    result: SentenceAttention


def sentence_figsize(n: int) -> tuple[float, float]:
    """The size of ``plot_sentence_attention``'s figure for ``n`` tokens, in inches."""
    return min(9.4, max(7.5, 0.55 * n + 5.0)), max(3.8, 0.42 * n + 2.2)


def plot_sentence_attention(result: SentenceAttention, fig=None) -> SentencePlot:
    """The weights as a heatmap, and each row's entropy next to its maximum log(n)."""
    import matplotlib.pyplot as plt

    n = len(result.tokens)
    if fig is None:
        fig = plt.figure(figsize=sentence_figsize(n))
    else:
        fig.clear()
    # an inch below the axes: the rotated key tokens and a two-line label fit inside the figure
    grid = fig.add_gridspec(
        1, 2, width_ratios=[max(n, 3), 3], wspace=0.08, bottom=min(0.3, 1.1 / fig.get_figheight())
    )
    ax_w = fig.add_subplot(grid[0])
    ax_h = fig.add_subplot(grid[1], sharey=ax_w)
    labels = result.labels
    plot_attention(
        result.weights, labels, labels, ax=ax_w, annotate=n <= 12, colorbar=False, mask=result.allowed
    )
    if not result.known.all():  # below the rotated tick labels, where nothing else is
        ax_w.set_xlabel(KEY_LABEL_UNKNOWN)
    ax_w.set_title(_sentence_title(result), fontsize=10)
    _entropy_bars(ax_h, result)
    ax_h.set_xlabel("row entropy (nats)\n0 = all on one key")
    ax_h.tick_params(axis="y", labelleft=False)
    ax_h.set_title("entropy;  | = spread evenly", fontsize=10)
    return SentencePlot(fig, (ax_w, ax_h), result)


def _entropy_bars(ax, result: SentenceAttention) -> None:
    """Each row's entropy as a bar, and its maximum log(n) as a tick."""
    n = len(result.tokens)
    y = np.arange(n)
    ax.barh(y, result.entropy, color="tab:orange", height=0.6)
    ax.scatter(result.max_entropy, y, marker="|", s=200, color="black")
    ax.set_xlim(0, max(float(np.log(n)), 0.1) * 1.08)


def update_sentence_attention(plot: SentencePlot, result: SentenceAttention) -> SentencePlot:
    """The picture of ``plot_sentence_attention(result)``, made by changing the artists of
    ``plot`` (drawn for the same tokens and mask, e.g. another scale): the heatmap, its numbers,
    the title and the entropy bars."""
    old = plot.result
    if result.tokens != old.tokens or not np.array_equal(result.allowed, old.allowed):
        raise ValueError("update_sentence_attention needs the tokens and the mask of the picture")
    ax_w, ax_h = plot.axes
    update_attention(AttentionPlot(plot.fig, ax_w, old.weights), result.weights, _sentence_title(result))
    for bar, width in zip(ax_h.patches, result.entropy):
        bar.set_width(width)
    return SentencePlot(plot.fig, plot.axes, result)


def renew_sentence_attention(plot: SentencePlot, result: SentenceAttention) -> SentencePlot:
    """The picture of ``plot_sentence_attention(result)`` for another sentence (any number of
    tokens), made in ``plot``'s figure: its two Axes and their ticks are kept (building them
    is most of a new figure's cost), and the size, the layout, the heatmap, its numbers, the
    tokens, the labels and the entropy bars are set anew. A figure drawn with a causal mask
    and a result without one (or the other way round) is built again."""
    fig = plot.fig
    ax_w, ax_h = plot.axes
    masked = not result.allowed.all()
    n = len(result.tokens)
    fig.set_size_inches(sentence_figsize(n), forward=False)
    if masked != (len(ax_w.images) == 2):
        return plot_sentence_attention(result, fig=fig)
    grid = ax_w.get_subplotspec().get_gridspec()
    grid.set_width_ratios([max(n, 3), 3])
    grid.update(bottom=min(0.3, 1.1 / fig.get_figheight()))
    for ax in (ax_w, ax_h):
        # placed as a fresh figure places them (gridspec.update moves only pyplot's figures'
        # Axes; what the picture grew by for the last sentence is undone), and in the layout
        ax._set_position(ax.get_subplotspec().get_position(fig))
        ax.set_in_layout(True)
    extent = (-0.5, n - 0.5, n - 0.5, -0.5)
    ax_w.images[0].set_data(result.weights)
    if masked:
        ax_w.images[1].set_data(np.where(result.allowed, np.nan, 1.0))
    ax_w.ignore_existing_data_limits = True  # the data limits of this sentence, not the last's
    for image in ax_w.images:
        image.set_extent(extent)
    for text in [t for t in ax_w.texts if getattr(t, "_course_cell", None) is not None]:
        text.remove()
    if n <= 12:
        _write_cells(ax_w, result.weights, result.allowed)
    labels = result.labels
    ax_w.set_xticks(range(n), labels, rotation=45, ha="right")
    ax_w.set_yticks(range(n), labels)
    ax_w.set_xlabel(KEY_LABEL if result.known.all() else KEY_LABEL_UNKNOWN)
    ax_w.title.set_text(_sentence_title(result))
    for container in list(ax_h.containers):
        container.remove()
    for collection in list(ax_h.collections):
        collection.remove()
    ax_h.ignore_existing_data_limits = True
    _entropy_bars(ax_h, result)
    return SentencePlot(fig, (ax_w, ax_h), result)


def sentence_artists(plot: SentencePlot) -> list:
    """What ``update_sentence_attention`` changes: the heatmap (see ``attention_artists``) and
    the whole entropy plot. A widget draws the rest once."""
    ax_w, ax_h = plot.axes
    return attention_artists(AttentionPlot(plot.fig, ax_w, plot.result.weights)) + [ax_h]


def _sentence_title(result: SentenceAttention) -> str:
    note = " (= √d_k)" if math.isclose(result.scale, math.sqrt(50), rel_tol=1e-3) else ""
    return f"weights = softmax(X Xᵀ / {result.scale:.3g}{note})" + ("  · causal" if result.causal else "")
