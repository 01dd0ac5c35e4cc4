"""The 05_positional_encoding widget: the sinusoidal table and how alike two positions are.

Thin on purpose: ``course_utils.plots.positional.plot_explorer`` computes and draws; this wires
a position slider, a d_model slider and a base dropdown to it.
"""
from __future__ import annotations

from typing import Callable

from ..device import grading


def positional_explorer(encoding_fn: Callable | None = None, d_model: int = 100,
                        max_len: int = 100, pos: int = 20):
    """Heatmap of the (max_len, d_model) table and PE[pos] · PE[j] for every j.

    ``encoding_fn`` is your ``sinusoidal_positional_encoding`` (the reference when None, when
    yours is not written yet, and for the base-1000 comparison). Returns the ipywidgets
    container, or None while grading.
    """
    if grading():
        return None
    import ipywidgets as W
    import matplotlib.pyplot as plt

    from ..plots.attention import figure_png
    from ..plots.positional import plot_explorer

    state = {"fn": encoding_fn, "who": "your function" if encoding_fn else "the reference"}
    pos_slider = W.IntSlider(value=pos, min=0, max=max_len - 1, description="position",
                             continuous_update=False, layout=W.Layout(width="420px"))
    d_slider = W.IntSlider(value=d_model, min=4, max=256, step=2, description="d_model",
                           continuous_update=False, layout=W.Layout(width="420px"))
    base_box = W.Dropdown(options=[("10000 (paper)", 10000.0), ("1000", 1000.0),
                                   ("100", 100.0)], value=10000.0, description="base")
    status = W.HTML()
    image = W.Image(format="png")
    ui = W.VBox([W.HBox([pos_slider, base_box]), d_slider, status, image])

    def redraw(*_):
        try:
            result = plot_explorer(d_slider.value, pos_slider.value, max_len, base_box.value,
                                   state["fn"])
        except NotImplementedError:
            state["fn"], state["who"] = None, "the reference (yours is not written yet)"
            return redraw()
        except Exception as exc:  # a bug in the learner's function
            status.value = f"<span style='color:#b00'>{type(exc).__name__}: {exc}</span>"
            return
        image.value = figure_png(result.fig)
        plt.close(result.fig)
        who = state["who"] if base_box.value == 10000.0 else "the reference (base ≠ 10000)"
        others = result.similarity.copy()
        others[pos_slider.value] = -float("inf")
        status.value = (f"<small>table by {who}; the most similar other position to "
                        f"{pos_slider.value} is {int(others.argmax())}</small>")
        ui.result = result

    for control in (pos_slider, d_slider, base_box):
        control.observe(redraw, names="value")
    redraw()
    return ui
