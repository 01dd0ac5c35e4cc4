"""Per-head attention on a real sentence, and the numbers behind the 04 widget.

- ``demo_module(num_heads, seed)``: a MultiHeadAttention over the 50-d GloVe vectors whose heads
  each compare words in their own random 50/num_heads-dimensional view of the space (W_Q = W_K =
  one block of a fixed random rotation; W_V = W_O = identity). Untrained, but every head differs.
- ``head_attention(sentence, num_heads, mha_class)``: build the learner's class with those
  weights and run it on a sentence's GloVe vectors; returns the (h, n, n) weights.
- ``plot_heads(weights, tokens, head, query)``: the heads side by side as small heatmaps with
  one colour bar, the picked head framed, the picked query's row boxed, and that row as bars
  underneath; ``update_heads(plot, head, query)`` moves the frame, the boxes and the bars of
  a drawn picture to another head and query without drawing it anew; ``changing_artists(plot)``
  names what it changes (for a widget that draws only those).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np

from .attention import _as_numpy, tokenize

DEMO_SENTENCE = "the animal did not cross the street because it was too tired"


def demo_module(mha_class, num_heads: int = 5, seed: int = 0, sharpness: float = 4.0):
    """``mha_class(50, num_heads)`` (04's ``MultiHeadAttention``, the learner's) with fixed
    weights (see the module docstring), loaded by name: the learner's code runs on exactly
    these weights."""
    import torch

    d_model = 50
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        rotation, _ = torch.linalg.qr(torch.randn(d_model, d_model))  # (50, 50) orthogonal
        module = mha_class(d_model, num_heads)
    eye = torch.eye(d_model)
    weights = {
        "q_proj.weight": math.sqrt(sharpness) * rotation.T,
        "k_proj.weight": math.sqrt(sharpness) * rotation.T,
        "v_proj.weight": eye,
        "out_proj.weight": eye,
    }
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(weights.get(name, torch.zeros_like(p)))  # biases 0
    return module.eval()


@dataclass(frozen=True)
class HeadAttention:
    tokens: list[str]
    known: np.ndarray  # (n,) bool: has a GloVe vector (unknown words get zeros)
    weights: np.ndarray  # (h, n, n), rows sum to 1

    @property
    def num_heads(self) -> int:
        return self.weights.shape[0]

    @property
    def labels(self) -> list[str]:
        return [t if k else f"{t}?" for t, k in zip(self.tokens, self.known)]


def head_attention(sentence: str, num_heads: int, mha_class, seed: int = 0, vectors=None) -> HeadAttention:
    """Self-attention of the sentence's GloVe vectors through ``demo_module(mha_class)``;
    weights per head."""
    import torch

    from ..glove import load_glove

    tokens = tokenize(sentence)
    if not tokens:
        raise ValueError("type at least one word")
    glove = vectors if vectors is not None else load_glove()
    known = np.array([t in glove for t in tokens])
    X = np.stack([glove[t] if k else np.zeros(glove.dim, np.float32) for t, k in zip(tokens, known)])
    x = torch.tensor(X, dtype=torch.float32)[None]  # (1, n, 50)
    module = demo_module(mha_class, num_heads, seed)
    with torch.no_grad():
        _, w = module(x, x, x)  # (1, h, n, n)
    w = _as_numpy(w)
    if w.shape != (1, num_heads, len(tokens), len(tokens)):
        raise ValueError(
            f"the module returned weights of shape {w.shape}, expected "
            f"(1, {num_heads}, {len(tokens)}, {len(tokens)})"
        )
    return HeadAttention(tokens, known, w[0])


class HeadsPlot(NamedTuple):
    fig: object
    axes: list  # one heatmap Axes per head, then the bar chart's Axes (if any)
    weights: np.ndarray  # (h, n, n) the numbers drawn
    row: np.ndarray | None  # (n,) the bars: weights[head, query], when a query is picked


def plot_heads(
    weights,
    tokens: Sequence[str],
    head: int | None = None,
    query: int | None = None,
    fig=None,
    cmap: str = "viridis",
) -> HeadsPlot:
    """All heads' (n, n) weights side by side; ``head`` framed in red; ``query``'s row boxed in
    every head and drawn as bars (for ``head``, default 0) underneath. The colour scale runs
    from 0 to the largest weight drawn (shared by all heads)."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    w = _as_numpy(weights)
    if w.ndim != 3 or w.shape[1] != w.shape[2]:
        raise ValueError(
            f"weights should be (heads, seq, seq) self-attention, got shape "
            f"{w.shape}; pick one batch element first, e.g. weights[0]"
        )
    h, n, k = w.shape
    tokens = list(tokens)
    if len(tokens) != k:
        raise ValueError(f"{len(tokens)} tokens for weights over {k} positions")
    for name, value, top in (("head", head, h), ("query", query, n)):
        if value is not None and not 0 <= value < top:
            raise ValueError(f"{name} must be in 0 … {top - 1}, got {value}")
    if fig is None:
        fig = plt.figure(figsize=(9.4, 5.8 if query is not None else 3.4))
    else:
        fig.clear()
    rows = 2 if query is not None else 1
    grid = fig.add_gridspec(rows, h, height_ratios=[1.3, 1] if rows == 2 else [1], hspace=0.55, wspace=0.12)
    axes = []
    top = max(float(w.max()), 1e-6)  # one colour scale for all heads, up to the largest weight
    for i in range(h):
        ax = fig.add_subplot(grid[0, i])
        image = ax.imshow(w[i], cmap=cmap, vmin=0.0, vmax=top, aspect="auto")
        ax.set_xticks(range(k), tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(n), tokens if i == 0 else [""] * n, fontsize=7)
        # where a title and a label go, fixed: matplotlib would otherwise measure every tick
        # label at every draw to place a title above ticks drawn below and labels never set
        ax.set_title(f"head {i}", fontsize=9, color="tab:red" if i == head else "black", y=1.0)
        ax.xaxis.set_label_coords(0.5, 0.0)
        ax.yaxis.set_label_coords(0.0, 0.5)
        if i == head:
            for side in ax.spines.values():
                side.set_edgecolor("tab:red")
                side.set_linewidth(2.5)
        if query is not None:
            # above the tick marks it touches (zorder 1.5), below the frame (2.5)
            ax.add_patch(Rectangle((-0.5, query - 0.5), k, 1, fill=False, ec="tab:red", lw=1.5, zorder=2))
        axes.append(ax)
    colorbar = fig.colorbar(image, ax=axes, fraction=0.025, pad=0.015, aspect=15)
    colorbar.set_label("weight", fontsize=8)
    colorbar.ax.tick_params(labelsize=7)
    row = None
    if query is not None:
        pick = 0 if head is None else head
        row = w[pick, query]
        ax = fig.add_subplot(grid[1, :])
        bars = ax.bar(range(k), row, color="tab:blue")
        bars[int(np.argmax(row))].set_facecolor("tab:red")
        ax.set_xticks(range(k), tokens, rotation=30, ha="right", fontsize=8)
        ax.set_ylim(0, max(1e-3, float(row.max())) * 1.15)
        ax.set_ylabel("weight")
        ax.set_title(f"head {pick}: where “{tokens[query]}” (query {query}) looks", fontsize=10)
        axes.append(ax)
    return HeadsPlot(fig, axes, w, row)


def changing_artists(plot: HeadsPlot) -> list:
    """What ``update_heads`` changes: each head's title, frame and boxed row, and the whole bar
    chart. The rest (heatmaps, tokens, colour bar) stays: a widget draws it once
    (``Picture.show(..., dynamic=changing_artists(plot))``)."""
    h = plot.weights.shape[0]
    out = []
    for ax in plot.axes[:h]:
        out += [ax.title, *ax.spines.values(), *ax.patches]
    return out + list(plot.axes[h:])


def update_heads(
    plot: HeadsPlot, head: int, query: int, weights=None, tokens: Sequence[str] | None = None
) -> HeadsPlot:
    """The picture of ``plot_heads(weights, tokens, head, query)``, made by changing the
    artists of ``plot`` (drawn with a head and a query) instead of building the figure again:
    the red frame, the boxed rows, the bars, their colours, limits and title; with ``weights``
    and ``tokens`` (another sentence, as many heads), also the heatmaps, the colour scale and
    the tokens. A widget that only changes the head or the query redraws in a fraction of the
    time, and one that changes the sentence reuses every tick it can."""
    import matplotlib as mpl

    h = plot.weights.shape[0]
    heads, bars_ax = plot.axes[:h], plot.axes[h]
    if weights is not None:
        w = _as_numpy(weights)
        tokens = list(tokens) if tokens is not None else None
        if (
            w.ndim != 3
            or w.shape[0] != h
            or w.shape[1] != w.shape[2]
            or tokens is None
            or len(tokens) != w.shape[2]
        ):
            raise ValueError(
                f"update_heads needs ({h}, n, n) weights and n tokens, got "
                f"{w.shape} and {None if tokens is None else len(tokens)} tokens"
            )
        _relabel_heads(plot, w, tokens)
    else:
        w = plot.weights
    h, n, k = w.shape
    edge, width = mpl.rcParams["axes.edgecolor"], mpl.rcParams["axes.linewidth"]
    for name, value, top in (("head", head, h), ("query", query, n)):
        if not 0 <= value < top:
            raise ValueError(f"{name} must be in 0 … {top - 1}, got {value}")
    for i, ax in enumerate(heads):
        picked = i == head
        ax.title.set_color("tab:red" if picked else "black")
        for side in ax.spines.values():
            side.set_edgecolor("tab:red" if picked else edge)
            side.set_linewidth(2.5 if picked else width)
        ax.patches[0].set_y(query - 0.5)  # the boxed row
    row = w[head, query]
    best = int(np.argmax(row))
    for j, bar in enumerate(bars_ax.patches):
        bar.set_height(row[j])
        bar.set_facecolor("tab:red" if j == best else "tab:blue")
    bars_ax.set_ylim(0, max(1e-3, float(row.max())) * 1.15)
    tokens = [t.get_text() for t in bars_ax.get_xticklabels()]
    bars_ax.set_title(f"head {head}: where “{tokens[query]}” (query {query}) looks", fontsize=10)
    return HeadsPlot(plot.fig, plot.axes, w, row)


def _relabel_heads(plot: HeadsPlot, w: np.ndarray, tokens: list[str]) -> None:
    """``plot``'s heatmaps, colour scale, boxes, bars and tokens for other (h, n, n) weights:
    what ``plot_heads`` sets from them, set on the artists it made."""
    h, n, k = w.shape
    heads, bars_ax = plot.axes[:h], plot.axes[h]
    top = max(float(w.max()), 1e-6)
    for i, ax in enumerate(heads):
        image = ax.images[0]
        image.set_data(w[i])
        image.set_extent((-0.5, k - 0.5, n - 0.5, -0.5))  # imshow's, for the new shape
        image.set_clim(0.0, top)
        ax.set_xlim(-0.5, k - 0.5)
        ax.set_ylim(n - 0.5, -0.5)
        ax.set_xticks(range(k), tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(n), tokens if i == 0 else [""] * n, fontsize=7)
        ax.patches[0].set_width(k)
    for container in list(bars_ax.containers):
        container.remove()
    bars_ax.relim()
    bars_ax.bar(range(k), np.zeros(k), color="tab:blue")  # heights: update_heads
    bars_ax.set_xticks(range(k), tokens, rotation=30, ha="right", fontsize=8)
