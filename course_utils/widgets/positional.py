"""The 05_positional_encoding widget: the sinusoidal table and how alike two positions are.

Thin on purpose: ``course_utils.plots.positional.plot_explorer`` computes and draws; this wires
a position slider, a d_model slider and a table-length menu to it.
"""

from __future__ import annotations

from typing import Callable

from ..device import grading

LENGTHS = (100, 1000, 10000)
KEPT = 3  # figures kept, one per table: going back to a table only moves its row and curve


def positional_explorer(encoding_fn: Callable, d_model: int = 100, max_len: int = 100, pos: int = 20):
    """Heatmap of the (max_len, d_model) table and PE[pos] · PE[j] for every j.

    ``encoding_fn`` is your ``sinusoidal_positional_encoding``; the widget says so when it is
    not written yet. A longer table shows the slow columns turning. Returns the ipywidgets
    container, or None while grading.
    """
    if grading():
        return None
    import ipywidgets as W
    from matplotlib.figure import Figure

    from ..plots.positional import explorer_artists, plot_explorer, update_explorer
    from .picture import slider, widget_box

    lengths = sorted(set(LENGTHS) | {max_len})
    pos_slider = slider(W, "IntSlider", pos, 0, max_len - 1, "position", "420px")
    d_slider = slider(W, "IntSlider", d_model, 4, 256, "d_model", "420px", step=2)
    len_box = W.Dropdown(
        options=[(f"{n:,}", n) for n in lengths],
        value=max_len,
        description="positions",
        layout=W.Layout(width="200px"),
    )
    ui, status, picture = widget_box(
        W,
        [W.HBox([pos_slider, len_box]), d_slider],
        {
            "position": pos_slider,
            "d_model": d_slider,
            "positions": len_box,
        },
    )
    state = {"busy": False}
    kept = {}  # (max_len, d_model) -> its drawn ExplorerPlot, for the last KEPT tables

    def on_length(change):
        state["busy"] = True  # one redraw for the whole change
        try:
            pos_slider.max = change["new"] - 1
            pos_slider.value = min(pos_slider.value, pos_slider.max)
        finally:
            state["busy"] = False
        redraw()

    def redraw(*_):
        if state["busy"]:
            return
        key = (len_box.value, d_slider.value)
        try:
            if key in kept:
                # a table drawn before: move the marked row and the curve of its figure
                result = update_explorer(kept.pop(key), pos_slider.value)
            else:
                # a figure outside pyplot: kept for the next redraw, never shown by the
                # notebook's inline backend under the widget
                result = plot_explorer(
                    encoding_fn,
                    d_slider.value,
                    pos_slider.value,
                    len_box.value,
                    fig=Figure(figsize=(9.6, 4.2)),
                )
        except NotImplementedError:
            status.value = ""
            picture.fail(
                "Your sinusoidal_positional_encoding is not written yet: write it "
                "above, run its cell, then run this cell again."
            )
            return
        except Exception as exc:  # a bug in the learner's function
            status.value = ""
            picture.fail(exc)
            return
        kept[key] = result  # the most recent last
        while len(kept) > KEPT:
            kept.pop(next(iter(kept)))
        # the table's heatmap and colour bar are drawn once per table; a new position draws
        # only the marked row and the similarity curve
        picture.show(result.fig, close=False, dynamic=explorer_artists(result))
        others = result.similarity.copy()
        others[pos_slider.value] = -float("inf")
        status.value = (
            f"<small>table by your <code>sinusoidal_positional_encoding</code>; the "
            f"most similar other position to {pos_slider.value} is "
            f"{int(others.argmax())}</small>"
        )
        ui.result = result

    for control in (pos_slider, d_slider):
        control.observe(redraw, names="value")
    len_box.observe(on_length, names="value")
    redraw()
    return ui
