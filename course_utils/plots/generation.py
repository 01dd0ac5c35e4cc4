"""08_generation: what a decoder sees at each step, and where the trained model looks.

- ``next_token_step(model, src_text, prefix_ids, ...)``: one decoding step on the dates model:
  the next-token distribution before and after temperature / top-k / top-p, the token a
  greedy or sampling decoder would pick, and the cross-attention of the step.
- ``plot_next_token(step)``: bars of that distribution (raw and filtered).
- ``temperature_curves(logits, temperatures)`` / ``plot_temperatures``: one distribution at
  several temperatures.
- ``cross_attention(model, src_text, output_ids)`` / ``plot_cross_attention``: source words ×
  output characters, the alignment the model learned.

Every function returns the numbers it drew. matplotlib is imported inside the functions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from course_grading.reference.attention import causal_mask
from course_grading.reference.decoder import make_padding_mask
from course_grading.reference.generation import filter_logits
from ..toy_task import Tokenizer, source_tokenizer, target_tokenizer
from .attention import AttentionPlot, plot_attention
from .transformer import attention_maps


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _src(src_text: str, src_tok: Tokenizer, device) -> torch.Tensor:
    return torch.tensor([src_tok.encode(src_text)], dtype=torch.long, device=device)  # (1, s)


@torch.no_grad()
def cross_attention(model, src_text: str, output_ids: Sequence[int],
                    src_tok: Tokenizer | None = None) -> torch.Tensor:
    """Cross-attention weights while the model writes ``output_ids`` (starting with <bos>).

    Row i is what the decoder looked at in the source while predicting output_ids[i + 1].
    Returns (layers, heads, len(output_ids) - 1, source tokens) on the CPU.
    """
    src_tok = src_tok or source_tokenizer()
    device = _device(model)
    src = _src(src_text, src_tok, device)  # (1, s)
    ys = torch.as_tensor(list(output_ids), dtype=torch.long, device=device)[None, :-1]  # (1, t)
    if ys.size(1) == 0:
        raise ValueError("output_ids should hold <bos> and at least one generated token")
    maps = attention_maps(model, src, ys, make_padding_mask(src, src_tok.pad_id),
                          causal_mask(ys.size(1), device=device))
    return torch.stack([w[0] for w in maps["cross"]])  # (layers, heads, t, s)


def plot_cross_attention(weights: torch.Tensor, src_tokens: Sequence[str],
                         out_tokens: Sequence[str], layer: int = -1, head: int | None = None,
                         ax=None) -> AttentionPlot:
    """Heatmap of ``cross_attention``'s weights: one row per output token, one column per
    source token. ``head=None`` averages the heads of ``layer``."""
    w = weights[layer]  # (heads, t, s)
    w = w.mean(0) if head is None else w[head]  # (t, s)
    layer_no = layer % weights.shape[0]
    what = "mean of the heads" if head is None else f"head {head}"
    return plot_attention(w, list(out_tokens), list(src_tokens), ax=ax, annotate=False,
                          title=f"cross-attention, layer {layer_no}, {what}")


@dataclass
class Step:
    """One decoding step: everything the stepper widget shows."""
    src_tokens: list[str]
    prefix: list[int]          # ids so far, starting with <bos>
    labels: list[str]          # target vocabulary, as text
    probs: np.ndarray          # (V,) softmax(logits), temperature 1
    filtered: np.ndarray       # (V,) after temperature, top-k, top-p, renormalised
    chosen: int                # the id greedy (argmax of filtered) or sampling picked
    attention: np.ndarray      # (t, s) cross-attention rows so far (last layer, mean of heads)


@torch.no_grad()
def next_token_step(model, src_text: str, prefix: Sequence[int], temperature: float = 1.0,
                    top_k: int | None = None, top_p: float | None = None, sample: bool = False,
                    generator: torch.Generator | None = None, src_tok: Tokenizer | None = None,
                    tgt_tok: Tokenizer | None = None) -> Step:
    """Run the model on ``src_text`` and ``prefix`` (ids starting with <bos>) and describe the
    next-token choice: greedy takes the most likely filtered token, ``sample=True`` draws one."""
    src_tok, tgt_tok = src_tok or source_tokenizer(), tgt_tok or target_tokenizer()
    device = _device(model)
    src = _src(src_text, src_tok, device)
    src_mask = make_padding_mask(src, src_tok.pad_id)
    ys = torch.as_tensor(list(prefix), dtype=torch.long, device=device)[None]  # (1, t)
    logits = model.decode(ys, model.encode(src, src_mask), causal_mask(ys.size(1), device=device),
                          src_mask)[0, -1].double().cpu()  # (V,)
    filtered = torch.softmax(filter_logits(logits[None], temperature, top_k, top_p), -1)[0]
    if sample:
        chosen = int(torch.multinomial(filtered, 1, generator=generator))
    else:
        chosen = int(filtered.argmax())
    attn = cross_attention(model, src_text, list(prefix) + [chosen], src_tok)[-1].mean(0)
    return Step(src_tok.tokenize(src_text), [int(t) for t in prefix], list(tgt_tok.itos),
                torch.softmax(logits, -1).numpy(), filtered.numpy(), chosen, attn.numpy())


def plot_next_token(step: Step, ax=None, title: str | None = None):
    """Bars of the next-token distribution: grey = the model's, blue = after the filters.
    The chosen token's bar is outlined. Returns the Axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3))
    x = np.arange(len(step.labels))
    ax.bar(x - 0.2, step.probs, width=0.4, color="0.7", label="model (T = 1)")
    bars = ax.bar(x + 0.2, step.filtered, width=0.4, color="C0", label="after the filters")
    bars[step.chosen].set_edgecolor("C3")
    bars[step.chosen].set_linewidth(2)
    ax.set_xticks(x, [lab.strip("<>") if len(lab) > 1 else lab for lab in step.labels],
                  rotation=60)
    ax.set_ylim(0, 1)
    ax.set_ylabel("probability")
    ax.legend(loc="upper right", fontsize=8)
    ax.set_title(title or "next-token distribution")
    return ax


def temperature_curves(logits, temperatures: Sequence[float]) -> np.ndarray:
    """softmax(logits / T) for each T: (len(temperatures), V)."""
    z = torch.as_tensor(logits, dtype=torch.float64)
    return np.stack([torch.softmax(z / t, -1).numpy() for t in temperatures])


def plot_temperatures(logits, labels: Sequence[str], temperatures=(0.5, 1.0, 2.0), ax=None):
    """Grouped bars: the same logits turned into probabilities at several temperatures.
    Returns (Axes, probabilities (len(temperatures), V))."""
    import matplotlib.pyplot as plt

    probs = temperature_curves(logits, temperatures)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3))
    x = np.arange(probs.shape[1])
    width = 0.8 / len(temperatures)
    for i, t in enumerate(temperatures):
        ax.bar(x + (i - (len(temperatures) - 1) / 2) * width, probs[i], width, label=f"T = {t}")
    ax.set_xticks(x, list(labels))
    ax.set_ylabel("probability")
    ax.legend()
    return ax, probs
