"""The 03_attention widget: type a sentence, watch its words attend to each other.

Thin on purpose: ``course_utils.plots.attention`` computes and draws; this only wires a text
box, a scale slider and a causal-mask toggle to it.
"""

from __future__ import annotations

import math
from typing import Callable

from ..device import grading


def attention_explorer(
    attention_fn: Callable,
    causal_mask_fn: Callable | None = None,
    sentence: str = "we sat on the bank of the river",
    scale: float | None = None,
    causal: bool = False,
):
    """Heatmap of GloVe self-attention for a typed sentence, with the scores divided by a slider.

    ``attention_fn`` is your ``scaled_dot_product_attention`` and ``causal_mask_fn`` your
    ``causal_mask``: the widget runs them, and says so when one is not written yet.
    Returns the ipywidgets container, or None while grading.
    """
    if grading():
        return None
    import ipywidgets as W
    import numpy as np
    from matplotlib.figure import Figure

    from ..plots.attention import (
        plot_sentence_attention,
        renew_sentence_attention,
        sentence_artists,
        sentence_attention,
        sentence_figsize,
        update_sentence_attention,
    )
    from .picture import widget_box

    text = W.Text(
        value=sentence, description="sentence", continuous_update=False, layout=W.Layout(width="560px")
    )
    slider = W.FloatLogSlider(
        value=scale or math.sqrt(50),
        base=10,
        min=0,
        max=3,
        step=0.05,
        description="divide by",
        readout_format=".3g",
        continuous_update=False,
        layout=W.Layout(width="420px"),
    )
    mask_box = W.Checkbox(
        value=causal, description="causal mask", indent=False, disabled=causal_mask_fn is None
    )
    ui, status, picture = widget_box(
        W,
        [text, W.HBox([slider, mask_box])],
        {
            "sentence": text,
            "scale": slider,
            "causal": mask_box,
        },
    )

    kept = {}  # causal -> the SentencePlot drawn last with (True) or without the causal mask

    def redraw(*_):
        which = "causal_mask" if mask_box.value else "scaled_dot_product_attention"
        result = picture.attempt(
            lambda: sentence_attention(
                text.value, attention_fn, slider.value, mask_box.value, causal_mask_fn
            ),
            status,
            f"Your {which} is not written yet: write it above, run its cell, then run this cell again.",
        )
        if result is None:
            return
        before = kept.get(result.causal)
        try:
            if before is None:
                # a figure outside pyplot: kept for the next redraw, never shown by the
                # notebook's inline backend under the widget
                plot = plot_sentence_attention(
                    result, fig=Figure(figsize=sentence_figsize(len(result.tokens)))
                )
            elif before.result.tokens == result.tokens and np.array_equal(
                before.result.allowed, result.allowed
            ):
                plot = update_sentence_attention(before, result)  # new weights, numbers, bars
            else:  # another sentence: the same Axes, new tokens, size and contents
                plot = renew_sentence_attention(before, result)
        except Exception as exc:  # e.g. a mask that changed from one call to the next
            kept.pop(result.causal, None)
            status.value = ""
            picture.fail(exc)
            return
        kept[result.causal] = plot
        # the tokens and axes are drawn once per sentence and mask; a new scale draws only the
        # heatmap, its numbers and the entropy bars
        picture.show(plot.fig, close=False, dynamic=sentence_artists(plot), static_key=tuple(result.labels))
        status.value = (
            "<small>attention by your <code>scaled_dot_product_attention</code>"
            + (" and <code>causal_mask</code>" if result.causal else "")
            + "; √d_k = √50 ≈ 7.07; mean row entropy "
            f"{result.entropy.mean():.2f} nats</small>"
        )
        ui.result = result  # the numbers drawn, for whoever wants them

    for control in (text, slider, mask_box):
        control.observe(redraw, names="value")
    redraw()
    return ui
