"""The embedding projector: type words and an analogy, see them in 2-D.

Thin on purpose: ``course_utils.plots.embeddings`` answers the analogy (with your functions when
you pass them), projects and draws; this only wires text boxes and a slider to it.
"""
from __future__ import annotations

from typing import Callable

from ..device import grading

DEFAULT_WORDS = "prince princess boy girl uncle aunt brother sister"


def embedding_projector(analogy_fn: Callable | None = None,
                        most_similar_fn: Callable | None = None,
                        words: str = DEFAULT_WORDS, a: str = "man", b: str = "king",
                        c: str = "woman", neighbours: int = 0):
    """PCA picture of GloVe words with the analogy "a : b :: c : ?" drawn as two arrows.

    ``analogy_fn`` / ``most_similar_fn`` are yours from 02_cosine_similarity (the reference is
    used for a missing one, or while yours raises NotImplementedError). The slider adds the
    runners-up: the next words nearest to b − a + c. Returns the ipywidgets container, or None
    while grading.
    """
    if grading():
        return None
    import ipywidgets as W
    import matplotlib.pyplot as plt

    from ..plots.attention import figure_png
    from ..plots.embeddings import analogy_projection, plot_analogy

    fns = {"analogy": analogy_fn, "most_similar": most_similar_fn}
    box = dict(continuous_update=False)
    words_box = W.Text(value=words, description="words", layout=W.Layout(width="560px"), **box)
    a_box = W.Text(value=a, description="a", layout=W.Layout(width="180px"), **box)
    b_box = W.Text(value=b, description="is to b", layout=W.Layout(width="180px"), **box)
    c_box = W.Text(value=c, description="as c is to ?", layout=W.Layout(width="200px"),
                   style={"description_width": "initial"}, **box)
    k_slider = W.IntSlider(value=neighbours, min=0, max=8, description="runners-up", **box)
    status = W.HTML()
    image = W.Image(format="png")
    ui = W.VBox([words_box, W.HBox([a_box, b_box, c_box]), k_slider, status, image])
    ui.controls = {"words": words_box, "a": a_box, "b": b_box, "c": c_box,
                   "neighbours": k_slider, "status": status, "image": image}

    def redraw(*_):
        try:
            result = analogy_projection(a_box.value.strip().lower(), b_box.value.strip().lower(),
                                        c_box.value.strip().lower(), words_box.value,
                                        fns["analogy"], fns["most_similar"], k_slider.value)
        except NotImplementedError:
            fns["analogy"] = fns["most_similar"] = None  # yours is not written yet
            return redraw()
        except Exception as exc:  # an unknown word, or a bug in the learner's function
            status.value = f"<span style='color:#b00'>{type(exc).__name__}: {exc}</span>"
            return
        fig = plot_analogy(result).fig
        image.value = figure_png(fig)
        plt.close(fig)
        runners = ", ".join(result.neighbours) or "none (move the slider)"
        status.value = (f"<small><b>{result.a} : {result.b} :: {result.c} : {result.answer}</b> "
                        f"(cosine {result.answer_cosine:.3f} with b − a + c; answered by "
                        f"{result.by}); runners-up: {runners}. PCA keeps "
                        f"{100 * result.pca.explained.sum():.0f} % of these words' variance."
                        "</small>")
        ui.result = result  # the numbers drawn, for whoever wants them

    for control in (words_box, a_box, b_box, c_box, k_slider):
        control.observe(redraw, names="value")
    redraw()
    return ui
