"""06_encoder, 07_decoder, 08_generation: read and draw the attention inside a transformer.

The reference layers keep no attention weights of their own. Every attention block in them
(``self_attn`` in encoder and decoder layers, ``cross_attn`` in decoder layers) is the course's
MultiHeadAttention, whose forward returns ``(output, weights)``; :func:`attention_maps` runs the
model once with forward hooks on those blocks and collects the weights. It works on any model
that names its attention blocks that way: the reference Encoder/Decoder/Transformer, or yours.
"""

from __future__ import annotations

import re
from typing import Sequence

import torch

from .attention import AttentionPlot, plot_attention

KINDS = ("encoder self", "decoder self", "cross")


def _kind(name: str, in_decoder: bool) -> str | None:
    last = name.rsplit(".", 1)[-1]
    if last == "cross_attn":
        return "cross"
    if last == "self_attn":
        return "decoder self" if in_decoder or name.startswith("decoder") else "encoder self"
    return None


def attention_maps(model: torch.nn.Module, *inputs, **kwargs) -> dict[str, list[torch.Tensor]]:
    """Run ``model(*inputs, **kwargs)`` once and return its attention weights.

    Returns ``{"encoder self": [...], "decoder self": [...], "cross": [...]}``, one tensor per
    layer in order, each ``(batch, heads, q_len, k_len)`` on the CPU; kinds the model does not
    have are left out. E.g. ``attention_maps(transformer, src, tgt, src_mask, tgt_mask)`` or
    ``attention_maps(encoder, src)``.
    """
    return attention_maps_and_output(model, *inputs, **kwargs)[0]


def attention_maps_and_output(model: torch.nn.Module, *inputs, **kwargs):
    """``(attention_maps(...), what the model returned)`` from the same single run."""
    in_decoder = any(n.rsplit(".", 1)[-1] == "cross_attn" for n, _ in model.named_modules())
    found: list[tuple[str, int, str, torch.nn.Module]] = []
    for name, module in model.named_modules():
        kind = _kind(name, in_decoder and not name.startswith("encoder"))
        if kind is None:
            continue
        index = re.findall(r"(?:^|\.)(\d+)(?:\.|$)", name)
        found.append((kind, int(index[-1]) if index else 0, name, module))
    if not found:
        raise ValueError("no attention blocks named self_attn or cross_attn in this model")
    captured: dict[str, torch.Tensor] = {}
    hooks = []
    for kind, _, name, module in found:

        def hook(mod, args, output, name=name):
            captured[name] = output[1].detach().float().cpu()

        hooks.append(module.register_forward_hook(hook))
    try:
        was_training = model.training
        model.eval()
        with torch.no_grad():
            output = model(*inputs, **kwargs)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    maps: dict[str, list[torch.Tensor]] = {}
    for kind, _, name, _ in sorted(found, key=lambda f: (KINDS.index(f[0]), f[1])):
        if name in captured:
            maps.setdefault(kind, []).append(captured[name])
    return maps, output


def predicted_tokens(output, vocab: Sequence[str] | None, batch: int, length: int):
    """The token each decoder position predicts (the most likely one), as text: one list per
    example, or None when ``vocab`` is not given or ``output`` is not (batch, length, len(vocab))
    logits."""
    if vocab is None or not isinstance(output, torch.Tensor) or output.dim() != 3:
        return None
    if tuple(output.shape) != (batch, length, len(vocab)):
        return None
    return [[str(vocab[i]) for i in row] for row in output.argmax(-1).tolist()]


def plot_transformer_attention(
    maps: dict,
    kind: str,
    layer: int = 0,
    head: int = 0,
    example: int = 0,
    src_tokens: Sequence[str] | None = None,
    tgt_tokens: Sequence[str] | None = None,
    ax=None,
    predicted: Sequence[str] | None = None,
) -> AttentionPlot:
    """Draw the attention of one head in one layer for one example of a batch.

    ``maps`` comes from :func:`attention_maps`; ``kind`` is "encoder self" (source attends to
    source), "decoder self" (target to earlier target) or "cross" (target to source).
    Returns ``AttentionPlot(fig, ax, weights)`` (the heatmap is drawn by
    :func:`course_utils.plots.attention.plot_attention`). Token lists default to positions.
    ``predicted`` (one token per decoder position: what the model predicts there) labels the
    decoder's rows "input → predicted": row i reads token i and writes the next one.
    """
    w, rows, cols, arrows = attention_labels(
        maps, kind, layer, head, example, src_tokens, tgt_tokens, predicted
    )
    out = plot_attention(w, rows, cols, ax=ax, title=f"{kind} attention, layer {layer}, head {head}")
    if arrows:
        out.ax.set_ylabel("decoder input → predicted token")
    return out


def attention_labels(maps: dict, kind: str, layer, head, example, src_tokens, tgt_tokens, predicted):
    """What :func:`plot_transformer_attention` draws, given its arguments (the same meaning, no
    defaults): ``(weights (q, k), row labels, column labels, whether the rows read "input →
    predicted")``."""
    if kind not in maps:
        raise ValueError(f"this model has no {kind!r} attention; it has {sorted(maps)}")
    layers = maps[kind]
    if not 0 <= layer < len(layers):
        raise ValueError(f"layer {layer} out of range: {kind!r} has {len(layers)} layers")
    w = layers[layer][example, head]  # (q_len, k_len)
    rows = tgt_tokens if kind != "encoder self" else src_tokens
    cols = src_tokens if kind != "decoder self" else tgt_tokens
    rows = [str(t) for t in (rows if rows is not None else range(w.shape[0]))][: w.shape[0]]
    cols = [str(t) for t in (cols if cols is not None else range(w.shape[1]))][: w.shape[1]]
    arrows = kind != "encoder self" and predicted is not None and len(predicted) >= len(rows)
    if arrows:
        rows = [f"{t} → {p}" for t, p in zip(rows, predicted)]
    return w, rows, cols, arrows
