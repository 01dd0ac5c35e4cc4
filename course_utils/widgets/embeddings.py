"""The embedding projector: type words and an analogy, see them in 2-D.

Thin on purpose: ``course_utils.plots.embeddings`` answers the analogy with your ``analogy``,
projects and draws; this only wires text boxes and a slider to it.
"""

from __future__ import annotations

import html
from typing import Callable

from ..device import grading

DEFAULT_WORDS = "prince princess boy girl uncle aunt brother sister"


def embedding_projector(
    analogy_fn: Callable | None = None,
    words: str = DEFAULT_WORDS,
    a: str = "man",
    b: str = "king",
    c: str = "woman",
    neighbours: int = 0,
):
    """PCA picture of GloVe words with the analogy "a : b :: c : ?" drawn as two arrows.

    ``analogy_fn`` is your ``analogy`` from 02_cosine_similarity. Without it (or while it is not
    written yet) the picture shows the point b − a + c where the answer should be, and says
    so. The slider adds the runners-up, your analogy's next answers. Returns the ipywidgets
    container, or None while grading.
    """
    if grading():
        return None
    import ipywidgets as W

    from ..plots.embeddings import analogy_projection, plot_analogy
    from .picture import widget_box

    fns = {"analogy": analogy_fn}
    box = dict(continuous_update=False)
    words_box = W.Text(value=words, description="words", layout=W.Layout(width="560px"), **box)
    a_box = W.Text(value=a, description="a", layout=W.Layout(width="180px"), **box)
    b_box = W.Text(value=b, description="is to b", layout=W.Layout(width="180px"), **box)
    c_box = W.Text(
        value=c,
        description="as c is to ?",
        layout=W.Layout(width="200px"),
        style={"description_width": "initial"},
        **box,
    )
    k_slider = W.IntSlider(value=neighbours, min=0, max=8, description="runners-up", **box)
    ui, status, picture = widget_box(
        W,
        [words_box, W.HBox([a_box, b_box, c_box]), k_slider],
        {
            "words": words_box,
            "a": a_box,
            "b": b_box,
            "c": c_box,
            "neighbours": k_slider,
        },
    )

    def redraw(*_):
        args = (
            a_box.value.strip().lower(),
            b_box.value.strip().lower(),
            c_box.value.strip().lower(),
            words_box.value,
        )
        missing = ""
        try:
            try:
                result = analogy_projection(*args, fns["analogy"], k_slider.value)
            except NotImplementedError:
                fns["analogy"] = None
                missing = "not written yet"
                result = analogy_projection(*args, None, 0)
        except Exception as exc:  # an unknown word, or a bug in the learner's function
            status.value = ""
            picture.fail(exc)
            return
        picture.show(plot_analogy(result).fig)
        k_slider.disabled = result.answer is None
        share = f"PCA keeps {100 * result.pca.explained.sum():.0f} % of these words' variance."
        if result.answer is None:
            why = (
                "your <code>analogy</code> is " + missing
                if missing
                else "the answer needs <code>analogy</code>, which you write in notebook 02"
            )
            status.value = (
                f"<small><b>{html.escape(result.c)} → ?</b> The star is b − a + c; "
                f"the word nearest to it (by cosine, in all 50 dimensions) answers. "
                f"Here {why}, so no word is picked. {share}</small>"
            )
        else:
            runners = ", ".join(result.neighbours) or "none (move the slider)"
            status.value = (
                f"<small><b>{html.escape(result.a)} : {html.escape(result.b)} :: "
                f"{html.escape(result.c)} : {html.escape(result.answer)}</b> "
                f"(answered by {result.by}); runners-up: {html.escape(runners)}. "
                f"{share}</small>"
            )
        ui.result = result  # the numbers drawn, for whoever wants them

    for control in (words_box, a_box, b_box, c_box, k_slider):
        control.observe(redraw, names="value")
    redraw()
    return ui
