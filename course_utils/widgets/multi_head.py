"""The 04_multi_head_attention widget: every head of a MultiHeadAttention on a real sentence.

Thin on purpose: ``course_utils.plots.multi_head`` computes and draws; this wires a head
slider, a query-token dropdown and a sentence box to it.
"""
from __future__ import annotations

from ..device import grading
from ..plots.multi_head import DEMO_SENTENCE


def head_viewer(mha_class=None, sentence: str = DEMO_SENTENCE, num_heads: int = 5,
                head: int = 0, query: str | None = "it"):
    """Heads side by side for a typed sentence; pick a head and a query token to inspect.

    ``mha_class`` is your ``MultiHeadAttention`` class (the reference when None, or when yours
    is not written yet); it is built as (50, num_heads) and loaded with fixed weights.
    Returns the ipywidgets container, or None while grading.
    """
    if grading():
        return None
    import ipywidgets as W
    import matplotlib.pyplot as plt

    from ..plots.attention import figure_png, tokenize
    from ..plots.multi_head import head_attention, plot_heads

    state = {"cls": mha_class, "who": "your MultiHeadAttention" if mha_class else "the reference"}
    head_slider = W.IntSlider(value=head, min=0, max=num_heads - 1, description="head",
                              continuous_update=False, layout=W.Layout(width="340px"))
    tokens = tokenize(sentence)
    start = tokens.index(query) if query in tokens else 0
    query_box = W.Dropdown(options=[(f"{i}: {t}", i) for i, t in enumerate(tokens)], value=start,
                           description="query")
    text = W.Text(value=sentence, description="sentence", continuous_update=False,
                  layout=W.Layout(width="620px"))
    status = W.HTML()
    image = W.Image(format="png")
    ui = W.VBox([W.HBox([head_slider, query_box]), text, status, image])

    def compute():
        try:
            return head_attention(text.value, num_heads, state["cls"])
        except NotImplementedError:
            state["cls"], state["who"] = None, "the reference (yours is not written yet)"
            return head_attention(text.value, num_heads, None)

    def redraw(*_):
        try:
            result = compute()
        except Exception as exc:  # a typo in the box, or a bug in the learner's class
            status.value = f"<span style='color:#b00'>{type(exc).__name__}: {exc}</span>"
            return
        options = [(f"{i}: {t}", i) for i, t in enumerate(result.labels)]
        if [o[0] for o in query_box.options] != [o[0] for o in options]:
            with query_box.hold_trait_notifications():
                query_box.options = options
                query_box.value = min(query_box.value or 0, len(options) - 1)
        fig = plot_heads(result.weights, result.labels, head_slider.value, query_box.value).fig
        image.value = figure_png(fig)
        plt.close(fig)
        status.value = (f"<small>weights from {state['who']}, d_model = 50 (GloVe), "
                        f"{num_heads} heads of d_head = {50 // num_heads}; untrained heads, "
                        "each comparing words in its own random view of the space</small>")
        ui.result = result

    for control in (head_slider, query_box, text):
        control.observe(redraw, names="value")
    redraw()
    return ui
