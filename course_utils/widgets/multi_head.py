"""The 04_multi_head_attention widget: every head of your MultiHeadAttention on a real sentence.

Thin on purpose: ``course_utils.plots.multi_head`` computes and draws; this wires a head
slider, a query-token dropdown and a sentence box to it.
"""

from __future__ import annotations

from ..device import grading
from ..plots.multi_head import DEMO_SENTENCE


def head_viewer(
    mha_class, sentence: str = DEMO_SENTENCE, num_heads: int = 5, head: int = 0, query: str | None = "it"
):
    """Heads side by side for a typed sentence; pick a head and a query token to inspect.

    ``mha_class`` is your ``MultiHeadAttention`` class; it is built as (50, num_heads) and
    loaded with fixed weights. A new sentence keeps the query word when it still contains it.
    Returns the ipywidgets container, or None while grading.
    """
    if grading():
        return None
    import ipywidgets as W
    import numpy as np
    from matplotlib.figure import Figure

    from ..plots.attention import tokenize
    from ..plots.multi_head import changing_artists, head_attention, plot_heads, update_heads
    from .picture import slider, widget_box

    head_slider = slider(W, "IntSlider", head, 0, num_heads - 1, "head", "340px")
    tokens = tokenize(sentence)
    start = tokens.index(query) if query in tokens else 0
    query_box = W.Dropdown(
        options=[(f"{i}: {t}", i) for i, t in enumerate(tokens)], value=start, description="query"
    )
    text = W.Text(
        value=sentence, description="sentence", continuous_update=False, layout=W.Layout(width="620px")
    )
    ui, status, picture = widget_box(
        W,
        [W.HBox([head_slider, query_box]), text],
        {
            "head": head_slider,
            "query": query_box,
            "sentence": text,
        },
    )
    state = {"tokens": tokens, "busy": False, "plot": None, "labels": None, "drawn": 0}

    def keep_query(new_tokens: list[str]) -> int:
        """The query's position in the new sentence: the same word (its occurrence nearest the
        old position), else the same position, else the last token."""
        old = query_box.value or 0
        word = state["tokens"][old] if old < len(state["tokens"]) else None
        same = [i for i, t in enumerate(new_tokens) if t == word]
        if same:
            return min(same, key=lambda i: abs(i - old))
        return min(old, len(new_tokens) - 1)

    def redraw(*_):
        if state["busy"]:
            return
        result = picture.attempt(
            lambda: head_attention(text.value, num_heads, mha_class),
            status,
            "Your MultiHeadAttention is not written yet: write it above, run its cell, then run "
            "this cell again.",
        )
        if result is None:
            return
        new_tokens = result.tokens != state["tokens"]
        query = keep_query(result.tokens) if new_tokens else query_box.value
        drawn = state["plot"]
        if (
            drawn is not None
            and state["labels"] == result.labels
            and np.array_equal(drawn.weights, result.weights)
        ):
            # the same weights: move the frame, the boxes and the bars of the drawn figure
            state["plot"] = update_heads(drawn, head_slider.value, query)
        elif drawn is not None and drawn.weights.shape[0] == result.weights.shape[0]:
            # another sentence: new heatmaps and tokens in the same figure (its ticks reused)
            state["plot"] = update_heads(drawn, head_slider.value, query, result.weights, result.labels)
            state["labels"] = result.labels
            state["drawn"] += 1  # the heatmaps changed: draw them again
        else:
            # a figure of its own, outside pyplot: kept for the next redraw, and never shown
            # by the notebook's inline backend under the widget
            state["plot"] = plot_heads(
                result.weights, result.labels, head_slider.value, query, fig=Figure(figsize=(9.4, 5.8))
            )
            state["labels"] = result.labels
        # the heatmaps, tokens and colour bar are drawn once per sentence; a move of head or
        # query draws only the frames, the boxed rows and the bars
        picture.show(
            state["plot"].fig, close=False, dynamic=changing_artists(state["plot"]), static_key=state["drawn"]
        )
        if new_tokens:  # the menu of queries after the picture: the picture is what is awaited
            state["busy"] = True  # its new options and value redraw nothing
            try:
                # one message to the browser: new options alone would show the first token
                # chosen until the value follows
                with query_box.hold_sync():
                    query_box.options = [(f"{i}: {t}", i) for i, t in enumerate(result.labels)]
                    query_box.value = query
            finally:
                state["busy"] = False
            state["tokens"] = result.tokens
        status.value = (
            f"<small>weights from your MultiHeadAttention, d_model = 50 (GloVe), "
            f"{num_heads} heads of d_head = {50 // num_heads}; untrained heads, "
            "each comparing words in its own random view of the space</small>"
        )
        ui.result = result

    for control in (head_slider, query_box, text):
        control.observe(redraw, names="value")
    redraw()
    return ui
