"""Pictures of the sinusoidal positional encoding, and the numbers behind the 05 widget.

- ``plot_encoding(pe)``: the (positions × features) table as a heatmap.
- ``position_similarity(pe, pos)``: PE[pos] · PE[j] for every position j.
- ``plot_position_similarity(pe, pos)``: that curve.
- ``wavelengths(d_model, base)``: 2π · base^(2i/d_model), the period of each sin/cos pair.
- ``plot_explorer(encoding_fn, d_model, pos, max_len)``: the heatmap and the similarity curve
  together, for the table your function builds; ``update_explorer(plot, pos)`` moves a drawn
  one to another position, and ``explorer_artists(plot)`` names what that changes.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from .attention import _as_numpy


def wavelengths(d_model: int, base: float = 10000.0) -> np.ndarray:
    """(ceil(d_model/2),) the period, in positions, of pair i: 2π · base^(2i/d_model)."""
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    return 2 * np.pi * base ** (two_i / d_model)


def position_similarity(pe, pos: int) -> np.ndarray:
    """(max_len,) dot products PE[pos] · PE[j]. For the sinusoidal table this is
    Σ_i cos((pos - j) ω_i) (+ a leftover sine for odd d_model): a function of pos - j alone."""
    table = _as_numpy(pe)
    if not 0 <= pos < len(table):
        raise ValueError(f"pos must be in 0 … {len(table) - 1}, got {pos}")
    return table @ table[pos]


class EncodingPlot(NamedTuple):
    fig: object
    ax: object
    values: np.ndarray  # what was drawn


def plot_encoding(
    pe, ax=None, title: str | None = None, colorbar: bool = True, mark: int | None = None
) -> EncodingPlot:
    """Heatmap of the table: row = position, column = feature, colour = value in [-1, 1]."""
    import matplotlib.pyplot as plt

    table = _as_numpy(pe)
    if table.ndim != 2:
        raise ValueError(f"pe should be (max_len, d_model), got shape {table.shape}")
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.2, 5.0))
    fig = ax.figure
    image = ax.imshow(
        table, cmap="RdBu", vmin=-1.0, vmax=1.0, aspect="auto", interpolation="antialiased"
    )  # long tables: no moiré
    ax.set_xlabel("feature (column 2i = sin, 2i+1 = cos)")
    ax.set_ylabel("position")
    ax.set_title(title or f"sinusoidal positional encoding, {table.shape[0]} × {table.shape[1]}")
    if mark is not None:
        ax.axhline(mark, color="black", lw=1.2, ls="--")
    if colorbar:
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return EncodingPlot(fig, ax, table)


def plot_position_similarity(pe, pos: int, ax=None, label: str | None = None) -> EncodingPlot:
    """PE[pos] · PE[j] against j: the peak sits at j = pos, the curve depends on j - pos only."""
    import matplotlib.pyplot as plt

    sims = position_similarity(pe, pos)
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.2, 3.2))
    fig = ax.figure
    ax.plot(np.arange(len(sims)), sims, lw=1.6, label=label)
    ax.axvline(pos, color="black", lw=1.0, ls="--")
    ax.set_xlabel("position j")
    ax.set_ylabel(f"PE[{pos}] · PE[j]")
    ax.set_title(f"how alike position {pos} is to every position", fontsize=10)
    ax.grid(alpha=0.3)
    return EncodingPlot(fig, ax, sims)


class ExplorerPlot(NamedTuple):
    fig: object
    axes: tuple  # (heatmap, similarity curve)
    table: np.ndarray  # (max_len, d_model)
    similarity: np.ndarray  # (max_len,)


def plot_explorer(
    encoding_fn: Callable, d_model: int = 100, pos: int = 20, max_len: int = 100, fig=None
) -> ExplorerPlot:
    """The widget's picture: the table with row ``pos`` marked, and PE[pos] · PE[j] for all j.

    ``encoding_fn(max_len, d_model)`` builds the table: 05's ``sinusoidal_positional_encoding``
    (the learner's). The dotted line is ‖PE[pos]‖² = d_model/2, the height of the peak.
    """
    import matplotlib.pyplot as plt

    table = _as_numpy(encoding_fn(max_len, d_model))
    if table.shape != (max_len, d_model):
        raise ValueError(f"the table has shape {table.shape}, expected ({max_len}, {d_model})")
    if fig is None:
        fig = plt.figure(figsize=(9.6, 4.2))
    else:
        fig.clear()
    grid = fig.add_gridspec(1, 2, width_ratios=[1, 1.15], wspace=0.32)
    ax_t, ax_s = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
    plot_encoding(table, ax=ax_t, mark=pos, title=f"PE table: {max_len} positions × d_model = {d_model}")
    sims = plot_position_similarity(table, pos, ax=ax_s).values
    ax_s.set_ylim(min(0.0, float(sims.min())) - 0.05 * d_model, d_model / 2 * 1.15)
    ax_s.axhline(d_model / 2, color="gray", lw=0.8, ls=":")
    # drawn after the colour bar, whose tick labels its own may touch (large d_model): a widget
    # that redraws only this plot over the rest draws the same pixels as a full draw
    ax_s.set_zorder(0.1)
    ax_s.annotate(
        f"‖PE‖² = d_model/2 = {d_model / 2:g}",
        xy=(1.0, d_model / 2),
        xycoords=("axes fraction", "data"),
        xytext=(0, 4),
        textcoords="offset points",
        ha="right",
        va="bottom",
        fontsize=9,
        color="0.3",
        bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.9),
    )
    return ExplorerPlot(fig, (ax_t, ax_s), table, sims)


def update_explorer(plot: ExplorerPlot, pos: int) -> ExplorerPlot:
    """The picture of ``plot_explorer`` for the same table at position ``pos``, made by
    changing the artists of ``plot``: the marked row, the similarity curve, its marker, labels
    and limits. The table and its heatmap stay as they are."""
    table = plot.table
    max_len, d_model = table.shape
    if not 0 <= pos < max_len:
        raise ValueError(f"pos must be in 0 … {max_len - 1}, got {pos}")
    ax_t, ax_s = plot.axes
    sims = position_similarity(table, pos)
    ax_t.lines[0].set_ydata([pos, pos])  # the dashed row of plot_encoding
    curve, marker = ax_s.lines[0], ax_s.lines[1]  # plot_position_similarity's line and axvline
    curve.set_ydata(sims)
    marker.set_xdata([pos, pos])
    ax_s.set_ylabel(f"PE[{pos}] · PE[j]")
    ax_s.set_title(f"how alike position {pos} is to every position", fontsize=10)
    ax_s.set_ylim(min(0.0, float(sims.min())) - 0.05 * d_model, d_model / 2 * 1.15)
    return ExplorerPlot(plot.fig, plot.axes, table, sims)


def explorer_artists(plot: ExplorerPlot) -> list:
    """What ``update_explorer`` changes: the marked row (and the heatmap's frame, drawn over
    its ends) and the whole similarity plot. A widget draws the rest once."""
    ax_t, ax_s = plot.axes
    return [ax_t.lines[0], *ax_t.spines.values(), ax_s]
