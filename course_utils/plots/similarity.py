"""Pictures for 02_cosine_similarity: the angle between two vectors, and similarity matrices.

- ``two_vectors(angle_deg, len_u, len_v)``: two 2-D vectors and their cosine, dot product and
  Euclidean distance (the numbers the angle explorer shows).
- ``plot_two_vectors(pair)``: both arrows, the angle between them, and those numbers.
- ``plot_similarity_matrix(S, row_labels, col_labels)``: a heatmap of cosines in [-1, 1].

matplotlib is imported inside the functions: importing this module is cheap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np


@dataclass(frozen=True)
class VectorPair:
    """u along the x-axis with length ``len_u``; v at ``angle_deg`` from it with length ``len_v``."""

    angle_deg: float
    u: np.ndarray  # (2,)
    v: np.ndarray  # (2,)
    cosine: float  # u·v / (|u| |v|)  -- depends on the angle only
    dot: float  # u·v = |u| |v| cos θ
    euclidean: float  # |u - v|

    @property
    def len_u(self) -> float:
        return float(np.linalg.norm(self.u))

    @property
    def len_v(self) -> float:
        return float(np.linalg.norm(self.v))


def two_vectors(angle_deg: float, len_u: float = 1.0, len_v: float = 1.0) -> VectorPair:
    """The pair of 2-D vectors the angle explorer draws, with the three ways to compare them."""
    if len_u <= 0 or len_v <= 0:
        raise ValueError("both lengths must be positive (a zero vector has no direction)")
    t = math.radians(angle_deg)
    u = np.array([len_u, 0.0])
    v = len_v * np.array([math.cos(t), math.sin(t)])
    cosine = math.cos(t)  # the angle is known here: no need to measure it
    return VectorPair(float(angle_deg), u, v, cosine, len_u * len_v * cosine, float(np.linalg.norm(u - v)))


class VectorPlot(NamedTuple):
    fig: object  # matplotlib Figure
    ax: object  # matplotlib Axes
    pair: VectorPair  # the numbers drawn


def plot_two_vectors(pair: VectorPair, ax=None, limit: float | None = None) -> VectorPlot:
    """Both vectors as arrows from the origin, the arc of the angle, the gap u − v dashed, and
    the cosine, dot product and distance written in the title. ``limit`` fixes the axes'
    half-width (so a slider doesn't rescale the picture); default: fit the vectors."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5.2, 5.2))
    fig = ax.figure
    lim = limit or 1.15 * max(pair.len_u, pair.len_v)
    for vec, name, color in ((pair.u, "u", "tab:blue"), (pair.v, "v", "tab:orange")):
        ax.annotate("", xy=vec, xytext=(0, 0), arrowprops=dict(arrowstyle="-|>", color=color, lw=2.2))
        ax.text(
            *(vec * 1.06 + np.array([0.0, 0.02 * lim])),
            name,
            color=color,
            fontsize=13,
            fontweight="bold",
            ha="center",
        )
    ax.plot(
        [pair.u[0], pair.v[0]],
        [pair.u[1], pair.v[1]],
        ls="--",
        color="0.5",
        lw=1,
        label=f"|u − v| = {pair.euclidean:.2f}",
    )
    r = 0.25 * min(pair.len_u, pair.len_v)
    ts = np.linspace(0.0, math.radians(pair.angle_deg), 50)
    ax.plot(r * np.cos(ts), r * np.sin(ts), color="k", lw=1)
    ax.axhline(0, color="0.85", lw=0.8, zorder=0)
    ax.axvline(0, color="0.85", lw=0.8, zorder=0)
    ax.set_xlim(-lim, lim)
    ax.set_ylim(-lim, lim)
    ax.set_aspect("equal")
    ax.set_title(
        f"θ = {pair.angle_deg:.0f}°   cos θ = {pair.cosine:+.3f}\n"
        f"u·v = {pair.dot:+.2f}   |u − v| = {pair.euclidean:.2f}",
        fontsize=11,
    )
    ax.legend(loc="lower left", fontsize=9)
    return VectorPlot(fig, ax, pair)


class MatrixPlot(NamedTuple):
    fig: object
    ax: object
    values: np.ndarray  # (n, m) the numbers drawn


def labelled_heatmap(
    ax,
    values: np.ndarray,
    row_labels: list,
    col_labels: list,
    colorbar: bool,
    min_side: float,
    per_cell: float,
    **imshow,
):
    """``values`` drawn with ``imshow`` on ``ax`` (None: a new figure, square, ``per_cell``
    inches a cell and at least ``min_side``, an inch wider for a colour bar), the columns
    labelled slanted, the rows level. Returns (figure, axes, image)."""
    import matplotlib.pyplot as plt

    if ax is None:
        side = max(min_side, per_cell * max(values.shape) + 1.5)
        _, ax = plt.subplots(figsize=(side + (1.0 if colorbar else 0.0), side))
    image = ax.imshow(values, **imshow)
    ax.set_xticks(range(len(col_labels)), col_labels, rotation=45, ha="right")
    ax.set_yticks(range(len(row_labels)), row_labels)
    return ax.figure, ax, image


def plot_similarity_matrix(
    S,
    row_labels: Sequence[str],
    col_labels: Sequence[str] | None = None,
    ax=None,
    title: str | None = None,
    annotate: bool | None = None,
    colorbar: bool = True,
) -> MatrixPlot:
    """Heatmap of a (n, m) matrix of cosines, colours fixed to [-1, 1] (red = same direction,
    blue = opposite), each value written in its cell when the matrix is at most 12 × 12."""

    S = np.asarray(S, dtype=np.float64)
    col_labels = list(row_labels) if col_labels is None else list(col_labels)
    if S.shape != (len(row_labels), len(col_labels)):
        raise ValueError(
            f"matrix of shape {S.shape} but {len(row_labels)} row and {len(col_labels)} column labels"
        )
    fig, ax, image = labelled_heatmap(
        ax, S, list(row_labels), col_labels, colorbar, 3.5, 0.6, cmap="RdBu_r", vmin=-1.0, vmax=1.0
    )
    if annotate is None:
        annotate = max(S.shape) <= 12
    if annotate:
        for i in range(S.shape[0]):
            for j in range(S.shape[1]):
                ax.text(
                    j,
                    i,
                    f"{S[i, j]:.2f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if abs(S[i, j]) > 0.6 else "black",
                )
    if title:
        ax.set_title(title)
    if colorbar:
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="cosine")
    return MatrixPlot(fig, ax, S)
