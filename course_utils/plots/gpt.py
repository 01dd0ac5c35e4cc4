"""09_gpt: where a GPT's newest token looks, what it predicts, and what the cache weighs.

- ``cached_step(model, ids, past)``: one call ``model(ids, past)`` that also returns every
  block's attention weights of the new positions, read with forward hooks (the block's input and
  its ``present``; the queries come from the block's own ``ln1`` and ``attn.q_proj``).
- ``GenerationState`` / ``advance``: token-by-token generation with the cache, for the widget.
- ``plot_next_char``: the next-character distribution and what your sampler makes of it;
  ``update_next_char`` redraws it in the same Axes.
- ``plot_new_token_attention``: one row per block, one column per position so far: where the
  newest character looks (mean of the heads).
- ``plot_generation``: the 09 widget's picture, both of them, redrawn in place.
- ``cache_bytes(present)`` / ``cache_formula(...)``: the cache's size, measured from its storage
  and predicted.

The model is any module with the GPT contract (notebook 09's ``GPT``: ``blocks`` of
``GPTBlock`` with ``ln1`` and ``attn``). matplotlib is imported inside the functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch


def _heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    b, t, d = x.shape
    return x.reshape(b, t, num_heads, d // num_heads).transpose(1, 2)  # (b, H, t, d_head)


@torch.no_grad()
def cached_step(model, ids: torch.Tensor, past=None):
    """``model(ids, past)`` and the attention of the new positions in every block.

    Returns (logits (b, t, V), present, weights): weights is a list with one
    (b, heads, t, T) tensor per block, T = cached + new positions."""
    captured = []

    def hook(block, args, out):
        x = args[0]  # (b, t, d_model) the block's input
        K = out[1][0]  # (b, H, T, d_head) every key so far
        Q = _heads(block.attn.q_proj(block.ln1(x)), K.size(1))  # (b, H, t, d_head)
        t, T = Q.size(2), K.size(2)
        scores = Q @ K.transpose(-2, -1) / math.sqrt(K.size(-1))  # (b, H, t, T)
        allowed = torch.ones(t, T, dtype=torch.bool, device=K.device).tril(diagonal=T - t)
        captured.append(torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1))

    handles = [block.register_forward_hook(hook) for block in model.blocks]
    try:
        logits, present = model(ids, past)
    finally:
        for h in handles:
            h.remove()
    return logits, present, captured


def cache_bytes(present) -> int:
    """Bytes of memory a cache holds, measured: the storage every K and V of every block lives
    in, each storage counted once (a view into a bigger tensor counts the whole of it)."""
    storages = {}
    for kv in present:
        for t in kv:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(storages.values())


def cache_formula(
    layers: int, heads: int, d_head: int, tokens: int, bytes_per_number: int, batch: int = 1
) -> int:
    """2 (K and V) × layers × heads × d_head × tokens × bytes per number (× batch)."""
    return 2 * layers * heads * d_head * tokens * bytes_per_number * batch


@dataclass
class GenerationState:
    """Token-by-token generation of one sequence with the cache, for the widget."""

    ids: list[int]  # the prompt and everything written so far
    past: list | None = None  # the cache after the last call
    logits: np.ndarray | None = None  # (V,) the next token's logits
    attention: list = field(default_factory=list)  # per written token: (layers, T) mean of heads


@torch.no_grad()
def start(model, prompt_ids: Sequence[int]) -> GenerationState:
    """Run the whole prompt once (filling the cache); the state holds the next token's logits."""
    device = next(model.parameters()).device
    ids = torch.tensor([list(prompt_ids)], dtype=torch.long, device=device)
    logits, present, weights = cached_step(model, ids)
    state = GenerationState(list(prompt_ids), present, logits[0, -1].float().cpu().numpy())
    state.attention.append(torch.stack([w[0, :, -1].mean(0) for w in weights]).cpu().numpy())
    return state


@torch.no_grad()
def advance(model, state: GenerationState, token: int) -> GenerationState:
    """Append ``token`` and feed only it, with the cache: one cheap step."""
    device = next(model.parameters()).device
    logits, present, weights = cached_step(model, torch.tensor([[token]], device=device), state.past)
    state.ids.append(int(token))
    state.past = present
    state.logits = logits[0, -1].float().cpu().numpy()
    state.attention.append(torch.stack([w[0, :, -1].mean(0) for w in weights]).cpu().numpy())
    return state


def sampler_share(
    logits: np.ndarray,
    sample_fn: Callable,
    draws: int = 2000,
    generator: torch.Generator | None = None,
    **knobs,
) -> np.ndarray:
    """(V,) the share of ``draws`` draws of ``sample_fn`` (your sample_next_token) per token."""
    row = torch.as_tensor(logits, dtype=torch.float32)[None].expand(draws, -1).contiguous()
    picks = sample_fn(row, generator=generator, **knobs)
    return np.bincount(picks.cpu().numpy(), minlength=row.size(1)) / draws


def show_char(ch: str) -> str:
    return {"\n": "⏎", " ": "␣"}.get(ch, ch)


def plot_next_char(
    logits: np.ndarray,
    itos: Sequence[str],
    share: np.ndarray | None = None,
    chosen: int | None = None,
    top: int = 12,
    ax=None,
    knobs: str = "",
):
    """Bars of the next-character distribution (grey, temperature 1) and of ``share`` (blue,
    what the sampler draws), for the ``top`` most likely characters; ``chosen`` outlined.
    ``knobs`` (the sampler's settings, as text) is named in the legend, so that a picture always
    says what it was drawn with, even where a setting changes no bar."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3))
    p, order = _next_char_bars(logits, chosen, top)
    x = np.arange(len(order))
    ax.bar(x - 0.2, p[order], width=0.4, color="0.7", label="model (T = 1)")
    if share is not None:
        ax.bar(
            x + 0.2,
            share[order],
            width=0.4,
            color="C0",
            label="your sampler" + (f"\n({knobs})" if knobs else ""),
        )
    if chosen is not None:
        i = int(np.where(order == chosen)[0][0])
        ax.bar(x[i] - 0.2, p[chosen], width=0.4, fill=False, edgecolor="k", lw=1.5)
    ax.set_xticks(x, [show_char(itos[i]) for i in order])
    ax.set_ylim(0, 1)
    ax.set_ylabel("probability")
    ax.set_title("next character", fontsize=10)
    ax.legend(loc="upper right", fontsize=8)
    ax._course_next_char = (len(order), share is not None, chosen is not None)
    return p


def _next_char_bars(logits, chosen, top):
    z = logits - logits.max()
    p = np.exp(z) / np.exp(z).sum()
    order = np.argsort(-p)[:top]
    if chosen is not None and chosen not in order:
        order = np.append(order[:-1], chosen)
    return p, order


def update_next_char(
    ax,
    logits: np.ndarray,
    itos: Sequence[str],
    share: np.ndarray | None = None,
    chosen: int | None = None,
    top: int = 12,
    knobs: str = "",
):
    """What ``plot_next_char`` draws, drawn by changing the bars, tokens and legend of ``ax``
    (drawn by ``plot_next_char`` with as many bars, and with or without ``share`` and
    ``chosen`` as now); any other ``ax`` is cleared and drawn anew."""
    p, order = _next_char_bars(logits, chosen, top)
    if getattr(ax, "_course_next_char", None) != (len(order), share is not None, chosen is not None):
        ax.clear()
        return plot_next_char(logits, itos, share, chosen, top, ax, knobs)
    x = np.arange(len(order))
    for bar, height in zip(ax.containers[0], p[order]):
        bar.set_height(height)
    if share is not None:
        for bar, height in zip(ax.containers[1], share[order]):
            bar.set_height(height)
        label = "your sampler" + (f"\n({knobs})" if knobs else "")
        ax.containers[1].set_label(label)
        ax.get_legend().get_texts()[1].set_text(label)
    if chosen is not None:
        i = int(np.where(order == chosen)[0][0])
        outline = ax.containers[-1][0]
        outline.set_x(x[i] - 0.2 - 0.2)  # a bar's x is its left edge: centre - width / 2
        outline.set_height(p[chosen])
    ax.xaxis.set_ticklabels([show_char(itos[i]) for i in order])
    return p


def plot_new_token_attention(attention: np.ndarray, chars: Sequence[str], last: int = 40, ax=None):
    """Heatmap: one row per block, one column per position (the last ``last`` of them), the
    newest character's attention (mean of the heads). Given an ``ax`` it drew before, it
    changes that heatmap instead of drawing another."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 2))
    a = np.asarray(attention)[:, -last:]  # (layers, shown)
    shown = list(chars)[-a.shape[1] :]
    if getattr(ax, "_course_new_token", None) == a.shape[0] and ax.images:
        # drawn before with as many blocks: new colours, width and tokens, the same ticks
        image = ax.images[0]
        image.set_data(a)
        image.set_extent((-0.5, a.shape[1] - 0.5, a.shape[0] - 0.5, -0.5))  # imshow's
        image.set_clim(0, max(float(a.max()), 1e-6))
        ax.set_xlim(-0.5, a.shape[1] - 0.5)
        ax.set_ylim(a.shape[0] - 0.5, -0.5)
    else:
        if getattr(ax, "_course_new_token", None) is not None:
            ax.clear()  # its own heatmap, of another number of blocks
        ax.imshow(a, aspect="auto", cmap="Blues", vmin=0, vmax=max(float(a.max()), 1e-6))
        ax.set_yticks(range(a.shape[0]), [f"block {i}" for i in range(a.shape[0])])
        ax.set_title("where the newest character looks (mean of the heads)", fontsize=10)
        ax._course_new_token = a.shape[0]
    ax.set_xticks(range(len(shown)), [show_char(c) for c in shown], fontsize=8)
    return a


def plot_generation(
    state: GenerationState,
    itos: Sequence[str],
    share: np.ndarray | None = None,
    knobs: str = "",
    fig=None,
    heatmap: bool = True,
):
    """The 09 widget's picture: the next character's bars (``plot_next_char``, the argmax
    outlined) and where the newest character looked (``plot_new_token_attention``). Returns
    the figure: a new one, or ``fig`` (drawn by this before) changed in place, its heatmap
    only where ``heatmap``."""
    if fig is None:
        from matplotlib.figure import Figure

        fig = Figure(figsize=(10, 3.0))
        # fixed margins: tight_layout would measure every label again at each redraw
        fig.subplots_adjust(left=0.06, right=0.99, bottom=0.2, top=0.9, wspace=0.22)
        fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.6]})
        heatmap = True
    ax1, ax2 = fig.axes[:2]
    update_next_char(ax1, state.logits, itos, share, int(state.logits.argmax()), knobs=knobs)
    if heatmap:
        chars = [itos[i] for i in state.ids]
        plot_new_token_attention(state.attention[-1], chars, ax=ax2)
        shown = f"the last 40 of {len(chars)}" if len(chars) > 40 else f"all {len(chars)}"
        ax2.set_xlabel(
            f"positions so far ({shown}); the row is '{show_char(chars[-1])}' predicting the next", fontsize=8
        )
    return fig


__all__ = [
    "cached_step",
    "cache_bytes",
    "cache_formula",
    "GenerationState",
    "start",
    "advance",
    "sampler_share",
    "plot_next_char",
    "update_next_char",
    "plot_new_token_attention",
    "plot_generation",
]
