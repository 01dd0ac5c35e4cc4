"""An attention viewer for encoders, decoders and encoder-decoder transformers.

Thin: :func:`course_utils.plots.transformer.attention_maps` collects the weights (once), and
:func:`course_utils.plots.transformer.plot_transformer_attention` draws them; the widget only
wires a kind menu and layer / head / example sliders to them.
"""
from __future__ import annotations

from typing import Sequence

from ..device import grading
from ..plots.transformer import attention_maps, plot_transformer_attention


def attention_viewer(model, *inputs, src_tokens: Sequence[Sequence[str]] | None = None,
                     tgt_tokens: Sequence[Sequence[str]] | None = None, kind: str | None = None,
                     **kwargs):
    """Show one model's attention: choose kind, layer, head and example of the batch.

    ``model(*inputs, **kwargs)`` is run once, e.g. ``attention_viewer(model, src, tgt,
    src_mask, tgt_mask, src_tokens=..., tgt_tokens=...)`` for a Transformer or
    ``attention_viewer(encoder, src, src_tokens=...)`` for an Encoder. ``src_tokens`` and
    ``tgt_tokens`` hold one list of token strings per example. Returns the ipywidgets
    container, or None while grading.
    """
    if grading():
        return None
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    from IPython.display import display

    maps = attention_maps(model, *inputs, **kwargs)
    first = next(iter(maps.values()))[0]
    batch, heads = first.shape[0], first.shape[1]
    kind = widgets.Dropdown(options=list(maps), value=kind if kind in maps else next(iter(maps)),
                            description="attention")
    layer = widgets.IntSlider(0, 0, len(maps[kind.value]) - 1, description="layer")
    head = widgets.IntSlider(0, 0, heads - 1, description="head")
    example = widgets.IntSlider(0, 0, batch - 1, description="example")
    out = widgets.Output()

    def draw(*_):
        layer.max = len(maps[kind.value]) - 1
        i = example.value
        with out:
            out.clear_output(wait=True)
            fig = plot_transformer_attention(
                maps, kind.value, layer.value, head.value, i,
                src_tokens[i] if src_tokens is not None else None,
                tgt_tokens[i] if tgt_tokens is not None else None).fig
            display(fig)
            plt.close(fig)

    for control in (kind, layer, head, example):
        control.observe(draw, names="value")
    draw()
    controls = [kind, layer, head] + ([example] if batch > 1 else [])
    return widgets.VBox([widgets.HBox(controls[:2]), widgets.HBox(controls[2:]), out])
