"""An attention viewer for encoders, decoders and encoder-decoder transformers.

Thin: :func:`course_utils.plots.transformer.attention_maps` collects the weights (once), and
:func:`course_utils.plots.transformer.plot_transformer_attention` draws them; the widget only
wires a kind menu and layer / head / example sliders to them. A choice the model does not
offer (one kind of attention, one layer, one head) is written out instead of being a control
that does nothing.
"""

from __future__ import annotations

from typing import Sequence

from ..device import grading
from ..plots.attention import attention_artists, update_attention
from ..plots.transformer import (
    attention_labels,
    attention_maps_and_output,
    plot_transformer_attention,
    predicted_tokens,
)


def attention_viewer(
    model,
    *inputs,
    src_tokens: Sequence[Sequence[str]] | None = None,
    tgt_tokens: Sequence[Sequence[str]] | None = None,
    kind: str | None = None,
    vocab: Sequence[str] | None = None,
    **kwargs,
):
    """Show one model's attention: choose kind, layer, head and example of the batch.

    ``model(*inputs, **kwargs)`` is run once, e.g. ``attention_viewer(model, src, tgt,
    src_mask, tgt_mask, src_tokens=..., tgt_tokens=...)`` for a Transformer or
    ``attention_viewer(encoder, src, src_tokens=...)`` for an Encoder. ``src_tokens`` and
    ``tgt_tokens`` hold one list of token strings per example. With ``vocab`` (the target
    vocabulary, id -> text) the decoder's rows read "input → predicted": the token the row
    reads, and the one the model predicts from there (its most likely next token, from the
    same run). Returns the ipywidgets container, or None while grading.
    """
    if grading():
        return None
    import ipywidgets as W

    from .picture import Picture

    maps, output = attention_maps_and_output(model, *inputs, **kwargs)
    first = next(iter(maps.values()))[0]
    batch, heads = first.shape[0], first.shape[1]
    decoder = maps.get("cross") or maps.get("decoder self")
    predicted = predicted_tokens(output, vocab, batch, decoder[0].shape[2]) if decoder else None
    kinds = list(maps)
    kind_box = W.Dropdown(options=kinds, value=kind if kind in maps else kinds[0], description="attention")
    layer = W.IntSlider(
        0, 0, max(1, len(maps[kind_box.value]) - 1), description="layer", continuous_update=False
    )
    head = W.IntSlider(0, 0, max(1, heads - 1), description="head", continuous_update=False)
    example = W.IntSlider(0, 0, max(1, batch - 1), description="example", continuous_update=False)
    facts = W.HTML()
    picture = Picture()

    def only(text: str) -> W.HTML:
        return W.HTML(f"<span style='color:#555'>{text}</span>", layout=W.Layout(margin="0 1.5em 0 0.5em"))

    kind_row = [kind_box] if len(kinds) > 1 else [only(f"{kinds[0]} attention (the only kind in this model)")]
    head_row = [head] if heads > 1 else [only("1 head")]
    example_row = [example] if batch > 1 else []
    layer_slot = W.Box([layer])
    ui = W.VBox(
        [
            W.HBox(kind_row + [layer_slot]),
            W.HBox(head_row + example_row),
            facts,
            picture.message,
            picture.image,
        ]
    )
    ui.add_class("course-widget")
    ui.controls = {
        "kind": kind_box,
        "layer": layer,
        "head": head,
        "example": example,
        "image": picture.image,
        "message": picture.message,
    }

    def show_layer_control():
        n = len(maps[kind_box.value])
        if n > 1:
            layer.max = n - 1
            layer.value = min(layer.value, n - 1)
            layer_slot.children = [layer]
        else:
            layer.value = 0
            layer_slot.children = [only(f"1 {kind_box.value} layer")]

    drawn = {}  # kind -> (example, arrows, plot): one kept figure per kind of attention

    def draw(*_):
        from matplotlib.figure import Figure

        i, kind = example.value, kind_box.value
        title = f"{kind} attention, layer {layer.value}, head {head.value}"
        src = src_tokens[i] if src_tokens is not None else None
        tgt = tgt_tokens[i] if tgt_tokens is not None else None
        pred = predicted[i] if predicted is not None else None
        try:
            weights, rows, cols, arrows = attention_labels(
                maps, kind, layer.value, head.value, i, src, tgt, pred
            )
            kept = drawn.get(kind)
            if kept is not None and kept[1] == arrows and kept[2].weights.shape == weights.shape:
                # the same figure: new colours and numbers, and the tokens of this example
                plot = update_attention(kept[2], weights, title, *((rows, cols) if kept[0] != i else ()))
            else:
                q, k = maps[kind][0].shape[2:]
                side = max(3.0, 0.55 * max(q, k) + 1.5)  # plot_attention's own size
                # a figure outside pyplot: kept for the next redraw, never shown by the
                # notebook's inline backend under the widget
                # with room for row labels "<bos> → <eos>" and rotated key tokens inside it
                fig = Figure(figsize=(side + 1.6, side + 0.4))
                fig.subplots_adjust(left=1.5 / (side + 1.6), bottom=1.0 / (side + 0.4))
                ax = fig.add_subplot()
                plot = plot_transformer_attention(
                    maps, kind, layer.value, head.value, i, src, tgt, ax=ax, predicted=pred
                )
            drawn[kind] = (i, arrows, plot)
        except Exception as exc:
            drawn.pop(kind_box.value, None)
            picture.fail(exc)
            return
        # the tokens, axes and colour bar are drawn once per example; layer and head redraw
        # only the heatmap, its numbers, its frame and the title
        picture.show(plot.fig, close=False, dynamic=attention_artists(plot), static_key=i)

    def on_kind(*_):
        show_layer_control()
        draw()

    kind_box.observe(on_kind, names="value")
    for control in (layer, head, example):
        control.observe(draw, names="value")
    show_layer_control()
    draw()
    return ui
