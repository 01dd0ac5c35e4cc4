"""The 02_cosine_similarity plots and the angle explorer, headless."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")
import numpy as np
import pytest

from course_grading.reference import similarity as ref
from course_utils.plots import similarity as ps


@pytest.mark.parametrize(
    "angle,len_u,len_v", [(0, 1, 1), (40, 1, 2.5), (90, 2, 3), (150, 0.5, 1), (180, 3, 0.25)]
)
def test_two_vectors_numbers_follow_the_formulas(angle, len_u, len_v):
    p = ps.two_vectors(angle, len_u, len_v)
    assert np.isclose(p.len_u, len_u) and np.isclose(p.len_v, len_v)
    assert np.isclose(p.cosine, ref.cosine_similarity(p.u, p.v))
    assert np.isclose(p.cosine, math.cos(math.radians(angle)))
    assert np.isclose(p.dot, p.u @ p.v) and np.isclose(p.dot, len_u * len_v * p.cosine)
    law_of_cosines = len_u**2 + len_v**2 - 2 * len_u * len_v * p.cosine
    assert np.isclose(p.euclidean, math.sqrt(max(law_of_cosines, 0.0)))


def test_cosine_ignores_length_but_dot_and_distance_do_not():
    a, b = ps.two_vectors(60, 1, 1), ps.two_vectors(60, 3, 0.5)
    assert np.isclose(a.cosine, b.cosine)
    assert not np.isclose(a.dot, b.dot) and not np.isclose(a.euclidean, b.euclidean)
    with pytest.raises(ValueError):
        ps.two_vectors(30, 0, 1)


def test_plot_two_vectors_shows_the_numbers_it_returns():
    pair = ps.two_vectors(40, 1, 2.5)
    fig, ax, drawn = ps.plot_two_vectors(pair, limit=3)
    assert drawn is pair
    assert f"{pair.cosine:+.3f}" in ax.get_title() and f"{pair.dot:+.2f}" in ax.get_title()
    assert ax.get_xlim() == (-3, 3)
    arrows = [t for t in ax.texts if getattr(t, "arrow_patch", None) is not None]
    assert len(arrows) == 2
    assert np.allclose(arrows[1].xy, pair.v)


def test_plot_similarity_matrix_draws_the_values():
    rng = np.random.default_rng(0)
    A = rng.normal(size=(3, 4))
    S = ref.cosine_similarity_matrix(A, A)
    fig, ax, drawn = ps.plot_similarity_matrix(S, ["a", "b", "c"])
    assert np.allclose(drawn, S) and np.allclose(ax.images[0].get_array(), S)
    assert ax.images[0].get_clim() == (-1.0, 1.0)
    assert len(ax.texts) == 9
    with pytest.raises(ValueError):
        ps.plot_similarity_matrix(S, ["a", "b"])


def test_angle_explorer_builds_and_responds():
    from course_utils.widgets.similarity import angle_explorer

    ui = angle_explorer(angle=40, len_u=1.0, len_v=2.5)
    ctl = ui.controls
    assert np.isclose(ui.pair.cosine, math.cos(math.radians(40)))
    image, table = ctl["image"].value, ctl["table"].value
    assert len(image) > 1000 and f"{ui.pair.cosine:+.3f}" in table
    ctl["angle"].value = 90
    assert abs(ui.pair.cosine) < 1e-12 and ctl["image"].value != image
    assert "+0.000" in ctl["table"].value
    ctl["angle"].value = 60
    cos, dot, dist = ui.pair.cosine, ui.pair.dot, ui.pair.euclidean
    ctl["len_v"].value = 0.5  # a length changes the dot and the distance only
    assert np.isclose(ui.pair.cosine, cos)
    assert not np.isclose(ui.pair.dot, dot) and not np.isclose(ui.pair.euclidean, dist)
    ctl["len_u"].value = 3.0
    assert np.isclose(ui.pair.len_u, 3.0) and np.isclose(ui.pair.cosine, cos)


def test_angle_explorer_is_none_while_grading(monkeypatch):
    from course_utils.widgets.similarity import angle_explorer

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert angle_explorer() is None
