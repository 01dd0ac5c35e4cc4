"""The angle explorer: two 2-D vectors, sliders for the angle and both lengths.

Thin on purpose: ``course_utils.plots.similarity`` computes the cosine, dot product and
distance and draws them; this only wires three sliders to it.
"""

from __future__ import annotations

from ..device import grading


def angle_explorer(angle: float = 45.0, len_u: float = 1.0, len_v: float = 2.0):
    """Drag the angle: the cosine moves. Drag a length: the dot product and the distance move,
    the cosine does not. Returns the ipywidgets container, or None while grading."""
    if grading():
        return None
    import ipywidgets as W

    from ..plots.similarity import plot_two_vectors, two_vectors
    from .picture import Picture, slider

    wide = {"description_width": "initial"}
    theta = slider(W, "FloatSlider", angle, 0, 180, "angle θ (°)", "380px", step=5, style=wide)
    lu = slider(W, "FloatSlider", len_u, 0.25, 3, "|u|", "380px", step=0.25)
    lv = slider(W, "FloatSlider", len_v, 0.25, 3, "|v|", "380px", step=0.25)
    table = W.HTML()
    picture = Picture()
    ui = W.HBox([picture.image, W.VBox([theta, lu, lv, table])], layout=W.Layout(align_items="flex-start"))
    ui.add_class("course-widget")
    ui.controls = {"angle": theta, "len_u": lu, "len_v": lv, "table": table, "image": picture.image}

    def redraw(*_):
        pair = two_vectors(theta.value, lu.value, lv.value)
        picture.show(plot_two_vectors(pair, limit=3.3).fig)
        table.value = (
            "<table style='font-size:14px'>"
            f"<tr><td>cosine&nbsp;&nbsp;</td><td><b>{pair.cosine:+.3f}</b></td>"
            "<td>&nbsp;angle only</td></tr>"
            f"<tr><td>dot product</td><td>{pair.dot:+.3f}</td><td>&nbsp;= |u| |v| cos θ</td></tr>"
            f"<tr><td>distance |u − v|</td><td>{pair.euclidean:.3f}</td>"
            "<td>&nbsp;angle and lengths</td></tr></table>"
        )
        ui.pair = pair  # the numbers drawn

    for control in (theta, lu, lv):
        control.observe(redraw, names="value")
    redraw()
    return ui
