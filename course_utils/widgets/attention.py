"""The 03_attention widget: type a sentence, watch its words attend to each other.

Thin on purpose: ``course_utils.plots.attention`` computes and draws; this only wires a text
box, a scale slider and a causal-mask toggle to it.
"""
from __future__ import annotations

import math
from typing import Callable

from ..device import grading


def attention_explorer(attention_fn: Callable | None = None,
                       sentence: str = "we sat on the bank of the river",
                       scale: float | None = None, causal: bool = False):
    """Heatmap of GloVe self-attention for a typed sentence, with the scores divided by a slider.

    ``attention_fn`` is your ``scaled_dot_product_attention`` (the reference when None, or when
    yours is not written yet). Returns the ipywidgets container, or None while grading.
    """
    if grading():
        return None
    import ipywidgets as W
    import matplotlib.pyplot as plt

    from ..plots.attention import figure_png, plot_sentence_attention, sentence_attention
    from course_grading.reference.attention import scaled_dot_product_attention as reference_fn

    state = {"fn": attention_fn or reference_fn,
             "who": "your function" if attention_fn else "the reference"}
    text = W.Text(value=sentence, description="sentence", continuous_update=False,
                  layout=W.Layout(width="560px"))
    slider = W.FloatLogSlider(value=scale or math.sqrt(50), base=10, min=0, max=3, step=0.05,
                              description="divide by", readout_format=".3g",
                              continuous_update=False, layout=W.Layout(width="420px"))
    mask_box = W.Checkbox(value=causal, description="causal mask", indent=False)
    status = W.HTML()
    image = W.Image(format="png")
    ui = W.VBox([text, W.HBox([slider, mask_box]), status, image])

    def redraw(*_):
        try:
            result = sentence_attention(text.value, slider.value, mask_box.value, state["fn"])
        except NotImplementedError:
            state["fn"], state["who"] = reference_fn, "the reference (yours is not written yet)"
            return redraw()
        except Exception as exc:  # a typo in the box, or a bug in the learner's function
            status.value = f"<span style='color:#b00'>{type(exc).__name__}: {exc}</span>"
            return
        fig = plot_sentence_attention(result).fig
        image.value = figure_png(fig)
        plt.close(fig)
        status.value = (f"<small>attention by {state['who']}; √d_k = √50 ≈ 7.07; "
                        "mean row entropy "
                        f"{result.entropy.mean():.2f} nats</small>")
        ui.result = result  # the numbers drawn, for whoever wants them

    for control in (text, slider, mask_box):
        control.observe(redraw, names="value")
    redraw()
    return ui
