"""2-D pictures of word vectors, and the numbers behind the embedding projector widget.

- ``pca_2d(X, orient=None)``: project the rows of ``X`` onto their two main directions (PCA via
  the SVD), each direction's sign fixed so the picture never flips.
- ``plot_projection(coords, labels, arrows=...)``: a labelled scatter of 2-D points, with arrows;
  each label is put beside its point where it hides no other label, point or arrow.
- ``word_projection(words, glove)``: GloVe words projected with ``pca_2d``.
- ``analogy_projection(a, b, c, words, analogy_fn)``: "a is to b as c is to ?", with the point
  b − a + c, answered by the ``analogy`` you pass (02_cosine_similarity's exercise; without one
  the picture shows where the answer should be), projected with the words and drawn by
  ``plot_analogy`` as two arrows, a → b and c → answer.

matplotlib is imported inside the functions: importing this module is cheap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np


class PCA2D(NamedTuple):
    coords: np.ndarray  # (n, 2) the projected points
    components: np.ndarray  # (2, d) the two directions, unit length, orthogonal
    mean: np.ndarray  # (d,) subtracted before projecting
    explained: np.ndarray  # (2,) share of the total variance along each direction


def pca_2d(X, orient=None) -> PCA2D:
    """The rows of ``X`` (n, d) seen along their two directions of largest variance.

    Centre the rows, ``Xc = X - mean``, take the SVD ``Xc = U S Vᵀ``; the first two rows of
    ``Vᵀ`` are the directions, and ``coords = Xc @ Vᵀ[:2].T`` (equal to ``U[:, :2] * S[:2]``).
    A direction and its opposite are equally good, so the sign is fixed: direction i points
    the way of ``orient[i]`` (a (2, d) pair of vectors, e.g. b − a and c − a of an analogy,
    which keeps a picture upright while words come and go), or, without ``orient``, the way
    that makes its largest entry positive.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"pca_2d needs at least two row vectors, got shape {X.shape}")
    mean = X.mean(axis=0)
    Xc = X - mean  # (n, d)
    _, S, Vt = np.linalg.svd(Xc, full_matrices=False)  # Vt: (min(n, d), d)
    comps = np.zeros((2, X.shape[1]))
    m = min(2, Vt.shape[0])
    comps[:m] = Vt[:m]
    guide = None if orient is None else np.asarray(orient, dtype=np.float64).reshape(2, -1)
    for i in range(m):  # deterministic signs
        along = comps[i] @ guide[i] if guide is not None else 0.0
        if along == 0.0:
            along = comps[i, np.argmax(np.abs(comps[i]))]
        if along < 0:
            comps[i] = -comps[i]
    var = S**2
    explained = np.zeros(2)
    if var.sum() > 0:
        explained[:m] = var[:m] / var.sum()
    return PCA2D(Xc @ comps.T, comps, mean, explained)


class ProjectionPlot(NamedTuple):
    fig: object  # matplotlib Figure
    ax: object  # matplotlib Axes
    coords: np.ndarray  # (n, 2) the points drawn, in the order of the labels


def plot_projection(
    coords,
    labels: Sequence[str],
    arrows: Sequence[tuple[int, int]] = (),
    ax=None,
    title: str | None = None,
    colors=None,
    explained=None,
    also_fit=None,
    also_avoid=(),
    figsize=(7.5, 5.6),
) -> ProjectionPlot:
    """Scatter of 2-D points with a text label each, and arrows from point i to point j.

    ``arrows`` is a list of index pairs ``(i, j)`` into ``coords``; ``colors`` one colour per
    point (default: all blue); ``explained`` (2,) adds the variance shares to the axis labels;
    ``also_fit`` (m, 2) are points drawn later that the axis limits must include, and
    ``also_avoid`` segments ``((x0, y0), (x1, y1))`` drawn later. Each label goes beside its
    point, in the nearest place where it overlaps no other label, point or arrow and sits
    nearer its own point than any other (a thin line joins a label put further away to its
    point): see ``_place_labels``.
    Returns ``ProjectionPlot(fig, ax, coords)``; the labels are ``ax.texts``.
    """
    import matplotlib.pyplot as plt

    P = np.asarray(coords, dtype=np.float64)
    labels = list(labels)
    if P.ndim != 2 or P.shape[1] != 2 or len(P) != len(labels):
        raise ValueError(f"need (n, 2) coordinates and n labels, got {P.shape} and {len(labels)}")
    if ax is None:
        _, ax = plt.subplots(figsize=figsize)
    fig = ax.figure
    colors = ["tab:blue"] * len(P) if colors is None else list(colors)
    ax.scatter(P[:, 0], P[:, 1], c=colors, s=36, zorder=3)
    B = P if also_fit is None else np.vstack([P, np.asarray(also_fit, float).reshape(-1, 2)])
    span = float(np.ptp(B, axis=0).max()) or 1.0
    for i, j in arrows:
        ax.annotate(
            "",
            xy=P[j],
            xytext=P[i],
            zorder=2,
            arrowprops=dict(arrowstyle="-|>", color="tab:red", lw=1.6, shrinkA=4, shrinkB=4),
        )
    pad = 0.12 * span
    ax.set_xlim(B[:, 0].min() - pad, B[:, 0].max() + pad)
    ax.set_ylim(B[:, 1].min() - pad, B[:, 1].max() + pad)
    ax.axhline(0, color="0.85", lw=0.8, zorder=1)
    ax.axvline(0, color="0.85", lw=0.8, zorder=1)
    if explained is not None:
        ax.set_xlabel(f"PC 1 ({100 * explained[0]:.0f} % of the variance)")
        ax.set_ylabel(f"PC 2 ({100 * explained[1]:.0f} % of the variance)")
    else:
        ax.set_xlabel("PC 1")
        ax.set_ylabel("PC 2")
    if title:
        ax.set_title(title)
    segments = [(P[i], P[j]) for i, j in arrows] + [tuple(map(np.asarray, s)) for s in also_avoid]
    _place_labels(ax, P, labels, B, segments)
    return ProjectionPlot(fig, ax, P)


# where a label may go around its point: directions in the order they are tried (right of
# the point first, then above, left, below, and the angles between), at growing distances
_ANGLES = (0, 90, 180, 270, 45, 135, 225, 315, 30, 150, 210, 330, 60, 120, 240, 300)
_RINGS = (1.0, 2.0, 3.2, 4.6, 6.4, 8.6)  # distances tried, in multiples of the first gap
_GAP = 4.0  # px between a point's edge and its label, and around every label


def _segment_points(segments, n: int = 24) -> np.ndarray:
    """(k, 2) points along each segment ((x0, y0), (x1, y1)), ends excluded."""
    if not segments:
        return np.zeros((0, 2))
    t = np.linspace(0.0, 1.0, n + 2)[1:-1, None]
    return np.vstack([(1 - t) * np.asarray(p0, float) + t * np.asarray(p1, float) for p0, p1 in segments])


def _place_labels(
    ax, P: np.ndarray, labels: list[str], obstacles: np.ndarray, segments=(), fontsize: float = 10
) -> None:
    """One label per point, each put where it overlaps nothing (deterministic, a few ms).

    Every label is measured in pixels, then tried in 16 directions around its point at growing
    distances; it takes the first place (nearest first) that keeps a gap of ``_GAP`` pixels to
    every label placed before it and to every point, arrow and the star, and stays inside the
    axes; where no place is free, the one with the least overlap. A label put beyond the first
    ring gets a thin line to its point. The labels are offsets in points from their points, so
    they stay beside them if the axes are resized later.
    """
    from matplotlib.font_manager import FontProperties

    if not len(P):
        return
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    px_per_pt = fig.dpi / 72.0
    to_px = ax.transData.transform
    pts = to_px(P)  # (n, 2) the points, in pixels
    avoid = to_px(
        np.vstack([obstacles, _segment_points(segments)]) if len(segments) else obstacles
    )  # points, star, arrows: (m, 2)
    bounds = ax.get_window_extent(renderer)
    radius = 0.5 * np.sqrt(36) * px_per_pt  # a scatter dot of s=36
    font = FontProperties(size=fontsize)
    placed: list[tuple[float, float, float, float]] = []  # boxes (x0, y0, x1, y1) in pixels

    # every candidate place, as the offset of a box's centre direction and distance: (c, ...)
    rings = np.repeat(np.arange(len(_RINGS)), len(_ANGLES))
    orders = np.tile(np.arange(len(_ANGLES)), len(_RINGS))
    steps = radius + _GAP * np.asarray(_RINGS)[rings]
    rad = np.radians(np.asarray(_ANGLES, dtype=float))[orders]
    ux, uy = np.round(np.cos(rad), 12), np.round(np.sin(rad), 12)

    for i, ((x, y), label) in enumerate(zip(pts, labels)):
        a = np.delete(avoid, i, axis=0) if i < len(obstacles) else avoid  # all but its point
        w, h, _ = renderer.get_text_width_height_descent(label, font, ismath=False)
        # the box's centre: ``step`` from the point, plus half the box, that way
        x0 = x + ux * (steps + w / 2) - w / 2
        y0 = y + uy * (steps + h / 2) - h / 2
        x1, y1 = x0 + w, y0 + h
        px0, py0, px1, py1 = x0 - _GAP, y0 - _GAP, x1 + _GAP, y1 + _GAP  # with its gap
        cost = np.zeros(len(x0))
        if placed:  # overlap with the labels placed before
            o = np.asarray(placed)
            ow = np.clip(np.minimum(px1[:, None], o[:, 2]) - np.maximum(px0[:, None], o[:, 0]), 0, None)
            oh = np.clip(np.minimum(py1[:, None], o[:, 3]) - np.maximum(py0[:, None], o[:, 1]), 0, None)
            cost += (ow * oh).sum(axis=1)
        # every other point, the star, the arrows under it
        hits = (
            (a[:, 0] > px0[:, None] - radius)
            & (a[:, 0] < px1[:, None] + radius)
            & (a[:, 1] > py0[:, None] - radius)
            & (a[:, 1] < py1[:, None] + radius)
        )
        cost += hits.sum(axis=1) * (2 * radius) ** 2
        if len(pts) > 1:  # a label must read as its own point's: no other point nearer to it
            gx = np.maximum(np.maximum(x0[:, None] - pts[:, 0], pts[:, 0] - x1[:, None]), 0)
            gy = np.maximum(np.maximum(y0[:, None] - pts[:, 1], pts[:, 1] - y1[:, None]), 0)
            dist = np.hypot(gx, gy)
            own = dist[:, i].copy()
            dist[:, i] = np.inf
            nearest = dist.min(axis=1)
            cost += np.where(nearest < own + 2 * _GAP, (own + 2 * _GAP - nearest) * 20.0, 0.0)
        outside = (
            np.maximum(0.0, bounds.x0 - x0)
            + np.maximum(0.0, x1 - bounds.x1)
            + np.maximum(0.0, bounds.y0 - y0)
            + np.maximum(0.0, y1 - bounds.y1)
        )
        cost += 50.0 * outside * (w + h)
        # the nearest free place (rings outward, directions in order); else the least overlap
        free = np.flatnonzero(cost <= 0)
        pick = int(free[0]) if len(free) else int(np.lexsort((orders, rings, cost))[0])
        box, ring_no = (x0[pick], y0[pick], x1[pick], y1[pick]), int(rings[pick])
        placed.append(box)
        lx, ly = box[0] - x, box[1] - y
        ax.annotate(
            label,
            xy=ax.transData.inverted().transform((x, y)),
            xytext=(lx / px_per_pt, ly / px_per_pt),
            textcoords="offset points",
            fontsize=fontsize,
            zorder=4,
            ha="left",
            va="bottom",
            annotation_clip=False,
        )
        if ring_no > 0:  # far from its point: a thin line to it, from the box's nearest edge
            ex, ey = np.clip(x, box[0], box[2]), np.clip(y, box[1], box[3])
            inv = ax.transData.inverted()
            (ax0, ay0), (ax1, ay1) = inv.transform([(x, y), (ex, ey)])
            ax.plot([ax0, ax1], [ay0, ay1], color="0.55", lw=0.6, zorder=2, scalex=False, scaley=False)


def parse_words(text: str) -> list[str]:
    """'King, queen  man' -> ['king', 'queen', 'man']: lower case, split on commas and spaces,
    duplicates dropped (first one kept)."""
    seen: list[str] = []
    for w in text.replace(",", " ").lower().split():
        if w not in seen:
            seen.append(w)
    return seen


@dataclass(frozen=True)
class WordProjection:
    words: list[str]  # the words drawn (known to GloVe), in order
    unknown: list[str]  # the words asked for that GloVe doesn't have
    pca: PCA2D  # coordinates, directions, variance shares

    @property
    def coords(self) -> np.ndarray:
        return self.pca.coords


def _glove(glove):
    if glove is None:
        from ..glove import load_glove

        glove = load_glove()
    return glove


def word_projection(words: Sequence[str] | str, glove=None) -> WordProjection:
    """The GloVe vectors of ``words`` (a list, or one string of words) projected by ``pca_2d``.

    Words GloVe doesn't know are listed in ``unknown`` and left out of the picture.
    """
    glove = _glove(glove)
    words = parse_words(words) if isinstance(words, str) else list(dict.fromkeys(words))
    known = [w for w in words if w in glove]
    unknown = [w for w in words if w not in glove]
    if len(known) < 2:
        raise ValueError(f"need at least two words GloVe knows, got {known} (unknown: {unknown})")
    return WordProjection(known, unknown, pca_2d(glove.vectors[glove.ids(known)]))


def plot_word_projection(
    proj: WordProjection, arrows: Sequence[tuple[str, str]] = (), ax=None, title: str | None = None
) -> ProjectionPlot:
    """Draw a ``WordProjection``; ``arrows`` are pairs of words, e.g. ``[("man", "king")]``."""
    pos = {w: i for i, w in enumerate(proj.words)}
    pairs = [(pos[a], pos[b]) for a, b in arrows if a in pos and b in pos]
    return plot_projection(proj.coords, proj.words, pairs, ax=ax, title=title, explained=proj.pca.explained)


@dataclass(frozen=True)
class AnalogyProjection:
    """One analogy "a : b :: c : answer" in 2-D with its context. ``answer`` is None when no
    ``analogy`` function was given: the picture then shows where the answer should be."""

    a: str
    b: str
    c: str
    answer: str | None  # the top answer of analogy_fn
    neighbours: list[str]  # runners-up: analogy_fn's answers ranked 2, 3, …
    words: list[str]  # every word drawn, in the order of ``pca.coords``
    pca: PCA2D
    target: np.ndarray  # (2,) where E[b] - E[a] + E[c] itself lands in the picture
    by: str  # whose function answered ("your analogy", or "" for none)

    def index(self, word: str) -> int:
        return self.words.index(word)


def analogy_projection(
    a: str,
    b: str,
    c: str,
    words: Sequence[str] | str = (),
    analogy_fn: Callable | None = None,
    neighbours: int = 0,
    glove=None,
) -> AnalogyProjection:
    """ "a is to b as c is to ?" over all GloVe words, projected with ``words``.

    ``analogy_fn(a_id, b_id, c_id, E, k)`` follows the 02_cosine_similarity contract: it returns
    the ids of the ``k`` best answers, best first. The top one is the answer, the next
    ``neighbours`` are the runners-up. Without ``analogy_fn`` there is no answer, and the
    picture shows the words and the point b − a + c where the answer should lie.
    The picture is oriented so that a → b points right and c lies above a.
    """
    glove = _glove(glove)
    E = glove.vectors
    ia, ib, ic = glove.id(a), glove.id(b), glove.id(c)  # a clear KeyError for unknown words
    answer, runners = None, []
    if analogy_fn is not None:
        got = np.atleast_1d(np.asarray(analogy_fn(ia, ib, ic, E, k=neighbours + 1))).tolist()
        if not got:
            raise ValueError("your analogy returned no id")
        answer = glove.words[int(got[0])]
        runners = [glove.words[int(i)] for i in got[1 : neighbours + 1]]
    extra = parse_words(words) if isinstance(words, str) else list(words)
    drawn = list(
        dict.fromkeys([a, b, c] + ([answer] if answer else []) + runners + [w for w in extra if w in glove])
    )
    X = E[glove.ids(drawn)].astype(np.float64)
    Ea, Eb, Ec = (E[i].astype(np.float64) for i in (ia, ib, ic))
    pca = pca_2d(X, orient=np.stack([Eb - Ea, Ec - Ea]))
    target = (Eb - Ea + Ec - pca.mean) @ pca.components.T  # the star: b − a + c, projected
    return AnalogyProjection(
        a, b, c, answer, runners, drawn, pca, target, "your analogy" if analogy_fn is not None else ""
    )


def plot_analogy(result: AnalogyProjection, ax=None) -> ProjectionPlot:
    """The words of an ``AnalogyProjection``: arrows a → b and c → answer (parallel when the
    analogy works), the target b − a + c as a star, the runners-up in grey. Without an answer,
    a dashed arrow runs from c to the star."""
    colors = []
    for w in result.words:
        if w == result.answer:
            colors.append("tab:red")
        elif w in (result.a, result.b, result.c):
            colors.append("tab:orange")
        elif w in result.neighbours:
            colors.append("0.6")
        else:
            colors.append("tab:blue")
    i = result.index
    arrows = [(i(result.a), i(result.b))]
    if result.answer is not None:
        arrows.append((i(result.c), i(result.answer)))
    title = f"{result.a} : {result.b} :: {result.c} : {result.answer or '?'}"
    dashed = (result.pca.coords[i(result.c)], result.target)
    out = plot_projection(
        result.pca.coords,
        result.words,
        arrows,
        ax=ax,
        title=title,
        colors=colors,
        explained=result.pca.explained,
        also_fit=result.target[None],
        also_avoid=[dashed] if result.answer is None else [],
    )
    if result.answer is None:
        out.ax.annotate(
            "",
            xy=dashed[1],
            xytext=dashed[0],
            zorder=2,
            arrowprops=dict(arrowstyle="-|>", color="tab:red", lw=1.4, ls="--", shrinkA=4, shrinkB=6),
        )
    out.ax.scatter(
        [result.target[0]],
        [result.target[1]],
        marker="*",
        s=160,
        c="tab:red",
        edgecolors="k",
        linewidths=0.5,
        zorder=5,
        label=f"{result.b} − {result.a} + {result.c}",
    )
    out.ax.legend(loc="best", fontsize=9)
    return out
