"""The 01/02 embedding plots and the projector widget, headless: the numbers they draw, and
that the controls respond."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from course_grading.reference import similarity as ref
from course_utils import load_glove
from course_utils.plots import embeddings as pe

TOY = np.array(
    [
        [0.9, 0.8, 0.7, 0.1, 0.2],
        [0.9, 0.8, 0.7, 0.1, 0.7],
        [0.8, 0.6, 0.6, 0.2, 0.1],
        [0.8, 0.6, 0.6, 0.2, 0.6],
    ]
)


# -- pca_2d ----------------------------------------------------------------------------------
def test_pca_2d_matches_the_svd_and_keeps_all_variance_of_the_toy_words():
    p = pe.pca_2d(TOY)
    Xc = TOY - TOY.mean(0)
    U, S, _ = np.linalg.svd(Xc, full_matrices=False)
    assert p.coords.shape == (4, 2) and p.components.shape == (2, 5)
    assert np.allclose(np.abs(p.coords), np.abs(U[:, :2] * S[:2]))
    assert np.allclose(p.components @ p.components.T, np.eye(2))  # orthonormal
    assert np.allclose(p.coords.mean(0), 0.0)  # centred
    assert np.isclose(p.explained.sum(), 1.0)  # the toy world is 2-D
    assert np.allclose(p.coords @ p.components + p.mean, TOY)  # so nothing is lost
    # king - man + woman = queen survives the projection exactly
    assert np.allclose(p.coords[0] - p.coords[2] + p.coords[3], p.coords[1])


def test_pca_2d_is_deterministic_and_validates():
    X = np.random.default_rng(0).normal(size=(10, 6))
    a, b = pe.pca_2d(X), pe.pca_2d(X.copy())
    assert np.array_equal(a.coords, b.coords)
    for comp in a.components:
        assert comp[np.argmax(np.abs(comp))] > 0
    assert 0 < a.explained.sum() < 1 and a.explained[0] >= a.explained[1]
    with pytest.raises(ValueError):
        pe.pca_2d(np.ones((1, 3)))


# -- plot_projection / word_projection -----------------------------------------------------
def test_plot_projection_draws_the_points_labels_and_arrows():
    coords = np.array([[0.0, 0.0], [1.0, 2.0], [3.0, -1.0]])
    fig, ax, drawn = pe.plot_projection(coords, ["a", "b", "c"], arrows=[(0, 1), (2, 1)])
    assert np.allclose(drawn, coords)
    assert np.allclose(ax.collections[0].get_offsets(), coords)
    texts = [t.get_text() for t in ax.texts]
    assert {"a", "b", "c"} <= set(texts)
    assert sum(getattr(t, "arrow_patch", None) is not None for t in ax.texts) == 2
    with pytest.raises(ValueError):
        pe.plot_projection(coords, ["a", "b"])


def test_parse_words():
    assert pe.parse_words("King, queen  man king") == ["king", "queen", "man"]
    assert pe.parse_words("  ") == []


def test_word_projection_uses_glove_rows_and_lists_unknown_words():
    g = load_glove()
    p = pe.word_projection("paris france xyzzyq rome", g)
    assert p.words == ["paris", "france", "rome"] and p.unknown == ["xyzzyq"]
    expected = pe.pca_2d(g.vectors[g.ids(p.words)])
    assert np.allclose(p.coords, expected.coords)
    out = pe.plot_word_projection(p, arrows=[("france", "paris"), ("nope", "rome")])
    assert sum(getattr(t, "arrow_patch", None) is not None for t in out.ax.texts) == 1
    assert "variance" in out.ax.get_xlabel()
    with pytest.raises(ValueError, match="at least two"):
        pe.word_projection("paris xyzzyq", g)


def test_pca_2d_orient_fixes_the_signs():
    X = np.random.default_rng(1).normal(size=(8, 5))
    for guide in (np.eye(5)[:2], -np.eye(5)[:2], X[[3, 5]] - X[0]):
        p = pe.pca_2d(X, orient=guide)
        assert (np.sum(p.components * guide, axis=1) > 0).all()
        plain = pe.pca_2d(X)
        assert np.allclose(np.abs(p.coords), np.abs(plain.coords))


def test_labels_are_moved_apart_until_none_overlaps():
    # the words of notebook 01's picture whose labels used to sit on top of each other
    g = load_glove()
    words = [
        "france",
        "paris",
        "italy",
        "rome",
        "germany",
        "berlin",
        "japan",
        "tokyo",
        "spain",
        "madrid",
        "russia",
        "moscow",
        "aunt",
        "sister",
        "woman",
        "girl",
    ]
    proj = pe.word_projection(words, g)
    fig, ax, _ = pe.plot_word_projection(proj)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labels = [t for t in ax.texts if t.get_text() in words]
    assert sorted(t.get_text() for t in labels) == sorted(words)
    boxes = [t.get_window_extent(renderer) for t in labels]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), "two labels overlap"
    plt.close(fig)


def _box_distance(box, point) -> float:
    dx = max(box.x0 - point[0], 0.0, point[0] - box.x1)
    dy = max(box.y0 - point[1], 0.0, point[1] - box.y1)
    return float(np.hypot(dx, dy))


@pytest.mark.parametrize("scene", ["02 widget", "01 countries"])
def test_each_label_reads_as_its_own_points(scene):
    """No label overlaps another or leaves the axes, and each is nearer its own point than any
    other point (02's widget once showed "japanese" on japan's dot and "france spain" as one
    label)."""
    g = load_glove()
    if scene == "02 widget":
        r = pe.analogy_projection(
            "france", "paris", "japan", "germany berlin italy rome spain madrid", ref.analogy, 5, g
        )
        fig, ax, coords = pe.plot_analogy(r)
        words = r.words
    else:
        words = [
            "france",
            "paris",
            "italy",
            "rome",
            "germany",
            "berlin",
            "japan",
            "tokyo",
            "spain",
            "madrid",
            "russia",
            "moscow",
            "aunt",
            "sister",
            "woman",
            "girl",
        ]
        proj = pe.word_projection(words, g)
        fig, ax, coords = pe.plot_word_projection(proj)
        words = proj.words
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labels = {t.get_text(): t.get_window_extent(renderer) for t in ax.texts if t.get_text() in words}
    assert sorted(labels) == sorted(words)
    points = ax.transData.transform(coords)
    inside = ax.get_window_extent(renderer)
    for i, word in enumerate(words):
        box = labels[word]
        assert inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
        own = _box_distance(box, points[i])
        others = [(_box_distance(box, p), w) for j, (p, w) in enumerate(zip(points, words)) if j != i]
        nearest = min(others)
        assert own < nearest[0], f"{word!r} reads as {nearest[1]!r}'s label"
        for other, b in labels.items():
            if other != word:
                assert not box.padded(1).overlaps(b), f"{word!r} touches {other!r}"
    plt.close(fig)


# -- analogy_projection ----------------------------------------------------------------------
def test_analogy_projection_with_an_analogy_finds_queen_and_its_runners_up():
    g = load_glove()
    r = pe.analogy_projection("man", "king", "woman", "prince princess", ref.analogy, neighbours=3)
    assert r.answer == "queen" and r.by == "your analogy"
    assert r.words[:4] == ["man", "king", "woman", "queen"]
    assert {"prince", "princess"} <= set(r.words)
    top = [g.words[i] for i in ref.analogy(g.id("man"), g.id("king"), g.id("woman"), g.vectors, k=4)]
    assert r.neighbours == top[1:]
    t = g["king"].astype(float) - g["man"] + g["woman"]
    assert np.allclose(r.target, (t - r.pca.mean) @ r.pca.components.T)
    assert np.allclose(np.abs(r.pca.coords), np.abs(pe.pca_2d(g.vectors[g.ids(r.words)]).coords))


def test_analogy_projection_stays_upright_as_words_come_and_go():
    """a -> b points right and c lies above a, whatever else is drawn: no flip on redraw."""
    for extra in ("", "prince princess", "prince princess boy girl uncle aunt brother sister"):
        for k in (0, 3, 8):
            r = pe.analogy_projection("man", "king", "woman", extra, ref.analogy, neighbours=k)
            P = r.pca.coords
            a, b, c = P[r.index("man")], P[r.index("king")], P[r.index("woman")]
            assert b[0] > a[0] and c[1] > a[1]


def test_analogy_projection_calls_the_function_it_is_given():
    g = load_glove()
    calls = {}

    def my_analogy(a, b, c, E, k=1):
        calls["analogy"] = (a, b, c, k)
        return np.array([g.id("prince"), g.id("throne"), g.id("crown")][:k])

    r = pe.analogy_projection("man", "king", "woman", analogy_fn=my_analogy, neighbours=2)
    assert r.answer == "prince" and r.by == "your analogy"
    assert calls["analogy"] == (g.id("man"), g.id("king"), g.id("woman"), 3)
    assert r.neighbours == ["throne", "crown"]


def test_analogy_projection_without_an_analogy_shows_where_the_answer_should_be():
    r = pe.analogy_projection("man", "king", "woman", "queen")
    assert r.answer is None and r.neighbours == [] and r.by == ""
    assert r.words == ["man", "king", "woman", "queen"]
    fig, ax, _ = pe.plot_analogy(r)
    assert ax.get_title() == "man : king :: woman : ?"
    assert (
        sum(getattr(t, "arrow_patch", None) is not None and t.get_text() == "" for t in ax.texts) == 2
    )  # a -> b, and c -> the star (dashed)
    plt.close(fig)


def test_analogy_projection_rejects_unknown_words():
    with pytest.raises(KeyError, match="xyzzyq"):
        pe.analogy_projection("man", "xyzzyq", "woman")


def test_plot_analogy_draws_two_arrows_and_the_target_star():
    r = pe.analogy_projection("france", "paris", "italy", "germany berlin", ref.analogy)
    fig, ax, drawn = pe.plot_analogy(r)
    assert np.allclose(drawn, r.pca.coords)
    assert sum(getattr(t, "arrow_patch", None) is not None and t.get_text() == "" for t in ax.texts) == 2
    assert np.allclose(ax.collections[-1].get_offsets(), r.target[None])
    assert ax.get_title() == "france : paris :: italy : rome"
    lo, hi = ax.get_xlim()
    assert lo <= r.target[0] <= hi


# -- the widget --------------------------------------------------------------------------------
def test_projector_builds_and_responds():
    from course_utils.widgets.embeddings import embedding_projector

    ui = embedding_projector(ref.analogy, neighbours=2)
    ctl = ui.controls
    assert ui.result.answer == "queen" and len(ui.result.neighbours) == 2
    assert "queen" in ctl["status"].value and len(ctl["image"].value) > 1000
    before = ctl["image"].value
    ctl["b"].value = "queen"  # man : queen :: woman : ?
    assert ui.result.b == "queen" and ui.result.answer != "queen"
    assert ctl["image"].value != before
    ctl["neighbours"].value = 5
    assert len(ui.result.neighbours) == 5
    ctl["words"].value = "paris rome"
    assert {"paris", "rome"} <= set(ui.result.words)
    ctl["c"].value = "xyzzyq"  # an unknown word: a message, not a crash, no stale picture
    assert "KeyError" in ctl["message"].value and "xyzzyq" in ctl["message"].value
    assert ctl["image"].layout.display == "none" and not ctl["status"].value
    ctl["c"].value = "woman"  # and the picture is back
    assert ctl["image"].layout.display != "none" and not ctl["message"].value


def test_projector_without_analogy_says_it_needs_one():
    from course_utils.widgets.embeddings import embedding_projector

    g = load_glove()
    ui = embedding_projector(lambda a, b, c, E, k=1: np.array([g.id("throne")] * k))
    assert ui.result.answer == "throne" and "your analogy" in ui.result.by

    def todo(*args, **kwargs):
        raise NotImplementedError()

    for fn, why in ((todo, "not written yet"), (None, "notebook 02")):
        ui = embedding_projector(fn, neighbours=1)
        assert ui.result.answer is None and why in ui.controls["status"].value
        assert ui.controls["neighbours"].disabled and ui.controls["image"].value


def test_projector_is_none_while_grading(monkeypatch):
    from course_utils.widgets.embeddings import embedding_projector

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert embedding_projector() is None
