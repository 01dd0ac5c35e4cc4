"""2-D pictures of word vectors, and the numbers behind the embedding projector widget.

- ``pca_2d(X)``: project the rows of ``X`` onto their two main directions (PCA via the SVD).
- ``plot_projection(coords, labels, arrows=...)``: a labelled scatter of 2-D points, with arrows.
- ``word_projection(words, glove)``: GloVe words projected with ``pca_2d``.
- ``analogy_projection(a, b, c, words, ...)``: "a is to b as c is to ?" answered by an
  ``analogy`` function (yours or the reference), projected with the words and drawn by
  ``plot_analogy`` as two arrows, a → b and c → answer.

matplotlib is imported inside the functions: importing this module is cheap.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np


class PCA2D(NamedTuple):
    coords: np.ndarray      # (n, 2) the projected points
    components: np.ndarray  # (2, d) the two directions, unit length, orthogonal
    mean: np.ndarray        # (d,) subtracted before projecting
    explained: np.ndarray   # (2,) share of the total variance along each direction


def pca_2d(X) -> PCA2D:
    """The rows of ``X`` (n, d) seen along their two directions of largest variance.

    Centre the rows, ``Xc = X - mean``, take the SVD ``Xc = U S Vᵀ``; the first two rows of
    ``Vᵀ`` are the directions, and ``coords = Xc @ Vᵀ[:2].T`` (equal to ``U[:, :2] * S[:2]``).
    The sign of each direction is fixed so that its largest entry is positive, which makes the
    picture the same on every machine.
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"pca_2d needs at least two row vectors, got shape {X.shape}")
    mean = X.mean(axis=0)
    Xc = X - mean                                       # (n, d)
    _, S, Vt = np.linalg.svd(Xc, full_matrices=False)  # Vt: (min(n, d), d)
    comps = np.zeros((2, X.shape[1]))
    m = min(2, Vt.shape[0])
    comps[:m] = Vt[:m]
    for i in range(m):  # deterministic signs
        if comps[i, np.argmax(np.abs(comps[i]))] < 0:
            comps[i] = -comps[i]
    var = S**2
    explained = np.zeros(2)
    if var.sum() > 0:
        explained[:m] = var[:m] / var.sum()
    return PCA2D(Xc @ comps.T, comps, mean, explained)


class ProjectionPlot(NamedTuple):
    fig: object          # matplotlib Figure
    ax: object           # matplotlib Axes
    coords: np.ndarray   # (n, 2) the points drawn, in the order of the labels


def plot_projection(coords, labels: Sequence[str], arrows: Sequence[tuple[int, int]] = (),
                    ax=None, title: str | None = None, colors=None,
                    explained=None, also_fit=None) -> ProjectionPlot:
    """Scatter of 2-D points with a text label each, and arrows from point i to point j.

    ``arrows`` is a list of index pairs ``(i, j)`` into ``coords``; ``colors`` one colour per
    point (default: all blue); ``explained`` (2,) adds the variance shares to the axis labels;
    ``also_fit`` (m, 2) are points drawn later that the axis limits must include.
    Returns ``ProjectionPlot(fig, ax, coords)``.
    """
    import matplotlib.pyplot as plt

    P = np.asarray(coords, dtype=np.float64)
    labels = list(labels)
    if P.ndim != 2 or P.shape[1] != 2 or len(P) != len(labels):
        raise ValueError(f"need (n, 2) coordinates and n labels, got {P.shape} and {len(labels)}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 5.0))
    fig = ax.figure
    colors = ["tab:blue"] * len(P) if colors is None else list(colors)
    ax.scatter(P[:, 0], P[:, 1], c=colors, s=36, zorder=3)
    B = P if also_fit is None else np.vstack([P, np.asarray(also_fit, float).reshape(-1, 2)])
    span = float(np.ptp(B, axis=0).max()) or 1.0
    for (x, y), label in zip(P, labels):
        ax.annotate(label, (x, y), xytext=(4, 4), textcoords="offset points", fontsize=10,
                    zorder=4)
    for i, j in arrows:
        ax.annotate("", xy=P[j], xytext=P[i], zorder=2,
                    arrowprops=dict(arrowstyle="-|>", color="tab:red", lw=1.6,
                                    shrinkA=4, shrinkB=4))
    pad = 0.12 * span
    ax.set_xlim(B[:, 0].min() - pad, B[:, 0].max() + 2 * pad)  # room for labels on the right
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
    return ProjectionPlot(fig, ax, P)


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
    words: list[str]         # the words drawn (known to GloVe), in order
    unknown: list[str]       # the words asked for that GloVe doesn't have
    pca: PCA2D               # coordinates, directions, variance shares

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
        raise ValueError(f"need at least two words GloVe knows, got {known} "
                         f"(unknown: {unknown})")
    return WordProjection(known, unknown, pca_2d(glove.vectors[glove.ids(known)]))


def plot_word_projection(proj: WordProjection, arrows: Sequence[tuple[str, str]] = (),
                         ax=None, title: str | None = None) -> ProjectionPlot:
    """Draw a ``WordProjection``; ``arrows`` are pairs of words, e.g. ``[("man", "king")]``."""
    pos = {w: i for i, w in enumerate(proj.words)}
    pairs = [(pos[a], pos[b]) for a, b in arrows if a in pos and b in pos]
    return plot_projection(proj.coords, proj.words, pairs, ax=ax, title=title,
                           explained=proj.pca.explained)


@dataclass(frozen=True)
class AnalogyProjection:
    """One analogy "a : b :: c : answer", answered by ``analogy_fn``, in 2-D with its context."""

    a: str
    b: str
    c: str
    answer: str               # the top answer of analogy_fn
    answer_cosine: float      # its cosine with the target E[b] - E[a] + E[c]
    neighbours: list[str]     # runners-up: the next nearest words to the target (excl. a, b, c)
    words: list[str]          # every word drawn, in the order of ``pca.coords``
    pca: PCA2D
    target: np.ndarray        # (2,) where E[b] - E[a] + E[c] itself lands in the picture
    by: str                   # whose functions answered ("your analogy", "the reference", ...)

    def index(self, word: str) -> int:
        return self.words.index(word)


def analogy_projection(a: str, b: str, c: str, words: Sequence[str] | str = (),
                       analogy_fn: Callable | None = None,
                       most_similar_fn: Callable | None = None, neighbours: int = 0,
                       glove=None) -> AnalogyProjection:
    """Answer "a is to b as c is to ?" over all GloVe words and project it with ``words``.

    ``analogy_fn(a_id, b_id, c_id, E, k=1)`` and ``most_similar_fn(query, E, k, exclude)`` follow
    the 02_cosine_similarity contract; the reference is used for whichever is None. The
    ``neighbours`` runners-up are the words ranked 2, 3, … nearest to the target.
    """
    from course_grading.reference.similarity import analogy as ref_analogy
    from course_grading.reference.similarity import cosine_similarity, most_similar as ref_most_similar

    glove = _glove(glove)
    E = glove.vectors
    for w in (a, b, c):
        glove.id(w)  # a clear KeyError for unknown words
    ia, ib, ic = glove.id(a), glove.id(b), glove.id(c)
    by = []
    if analogy_fn is None:
        analogy_fn = ref_analogy
        by.append("reference analogy")
    else:
        by.append("your analogy")
    got = np.atleast_1d(np.asarray(analogy_fn(ia, ib, ic, E, k=1)))
    answer = glove.words[int(got[0])]
    target_vec = E[ib].astype(np.float64) - E[ia] + E[ic]
    runners: list[str] = []
    if neighbours > 0:
        if most_similar_fn is None:
            most_similar_fn = ref_most_similar
            by.append("reference most_similar")
        else:
            by.append("your most_similar")
        ids = np.asarray(most_similar_fn(target_vec, E, k=neighbours + 1,
                                         exclude=(ia, ib, ic))).tolist()
        runners = [glove.words[int(i)] for i in ids if glove.words[int(i)] != answer][:neighbours]
    extra = parse_words(words) if isinstance(words, str) else list(words)
    drawn = list(dict.fromkeys([a, b, c, answer] + runners + [w for w in extra if w in glove]))
    X = E[glove.ids(drawn)].astype(np.float64)
    pca = pca_2d(X)
    target = (target_vec - pca.mean) @ pca.components.T
    return AnalogyProjection(a, b, c, answer, cosine_similarity(target_vec, E[int(got[0])]),
                             runners, drawn, pca, target, ", ".join(by))


def plot_analogy(result: AnalogyProjection, ax=None) -> ProjectionPlot:
    """The words of an ``AnalogyProjection``: arrows a → b and c → answer (parallel when the
    analogy works), the target b − a + c as a star, the runners-up in grey."""
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
    arrows = [(i(result.a), i(result.b)), (i(result.c), i(result.answer))]
    title = f"{result.a} : {result.b} :: {result.c} : {result.answer}"
    out = plot_projection(result.pca.coords, result.words, arrows, ax=ax, title=title,
                          colors=colors, explained=result.pca.explained,
                          also_fit=result.target[None])
    out.ax.scatter([result.target[0]], [result.target[1]], marker="*", s=160, c="tab:red",
                   edgecolors="k", linewidths=0.5, zorder=5,
                   label=f"{result.b} − {result.a} + {result.c}")
    out.ax.legend(loc="best", fontsize=9)
    return out
