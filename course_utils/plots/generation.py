"""08_generation: what a decoder sees at each step, and where the trained model looks.

- ``next_token_step(model, src_text, prefix_ids, causal_mask, ..., sample_fn)``: one decoding
  step on the dates model: the model's next-token distribution, what your
  ``sample_next_token`` makes of it under temperature / top-k / top-p (the share of many draws),
  the token a greedy or sampling decoder picks, and the cross-attention of the step.
- ``plot_next_token(step)``: bars of those two distributions.
- ``temperature_curves(logits, temperatures)`` / ``plot_temperatures``: one distribution at
  several temperatures.
- ``cross_attention(model, src_text, output_ids, causal_mask)`` / ``plot_cross_attention``:
  source words × output characters, the alignment the model learned.

The model's own masks come from the functions you pass (``causal_mask`` of 03_attention); a
single source sentence has no padding, so it needs no padding mask. Every function returns the
numbers it drew. matplotlib is imported inside the functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from ..toy_task import Tokenizer, source_tokenizer, target_tokenizer
from .attention import AttentionPlot, plot_attention
from .transformer import attention_maps


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _src(src_text: str, src_tok: Tokenizer, device) -> torch.Tensor:
    return torch.tensor([src_tok.encode(src_text)], dtype=torch.long, device=device)  # (1, s)


@torch.no_grad()
def cross_attention(
    model, src_text: str, output_ids: Sequence[int], causal_mask: Callable, src_tok: Tokenizer | None = None
) -> torch.Tensor:
    """Cross-attention weights while the model writes ``output_ids`` (starting with <bos>).

    Row i is what the decoder looked at in the source while predicting output_ids[i + 1].
    ``causal_mask(size, device=...)`` masks the decoder's self-attention (03_attention's).
    Returns (layers, heads, len(output_ids) - 1, source tokens) on the CPU.
    """
    src_tok = src_tok or source_tokenizer()
    device = _device(model)
    src = _src(src_text, src_tok, device)  # (1, s), no padding: no source mask needed
    ys = torch.as_tensor(list(output_ids), dtype=torch.long, device=device)[None, :-1]  # (1, t)
    if ys.size(1) == 0:
        raise ValueError("output_ids should hold <bos> and at least one generated token")
    maps = attention_maps(model, src, ys, None, causal_mask(ys.size(1), device=device))
    return torch.stack([w[0] for w in maps["cross"]])  # (layers, heads, t, s)


def plot_cross_attention(
    weights: torch.Tensor,
    src_tokens: Sequence[str],
    out_tokens: Sequence[str],
    layer: int = -1,
    head: int | None = None,
    ax=None,
) -> AttentionPlot:
    """Heatmap of ``cross_attention``'s weights: one row per output token, one column per
    source token. ``head=None`` averages the heads of ``layer``."""
    w = weights[layer]  # (heads, t, s)
    w = w.mean(0) if head is None else w[head]  # (t, s)
    layer_no = layer % weights.shape[0]
    what = "mean of the heads" if head is None else f"head {head}"
    return plot_attention(
        w,
        list(out_tokens),
        list(src_tokens),
        ax=ax,
        annotate=False,
        title=f"cross-attention, layer {layer_no}, {what}",
    )


@dataclass
class Step:
    """One decoding step: everything the stepper widget shows."""

    src_tokens: list[str]
    prefix: list[int]  # ids so far, starting with <bos>
    labels: list[str]  # target vocabulary, as text
    probs: np.ndarray  # (V,) softmax(logits), temperature 1
    filtered: np.ndarray | None  # (V,) share of `draws` draws by sample_fn (None without it)
    draws: int  # how many draws `filtered` counts
    chosen: int  # the id greedy (the most likely) or sampling picked
    attention: np.ndarray  # (t, s) cross-attention rows so far (last layer, mean of heads)
    sampled: bool = False  # True: ``chosen`` was drawn by sample_fn; False: greedy
    temperature: float = 1.0  # the sampler's settings the blue bars were drawn with
    top_k: int | None = None
    top_p: float | None = None

    @property
    def greedy(self) -> int:
        """The id greedy decoding picks here: the most likely token."""
        return int(np.argmax(self.probs))


@torch.no_grad()
def next_token_step(
    model,
    src_text: str,
    prefix: Sequence[int],
    causal_mask: Callable,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    sample_fn: Callable | None = None,
    sample: bool = False,
    generator: torch.Generator | None = None,
    draws: int = 4000,
    src_tok: Tokenizer | None = None,
    tgt_tok: Tokenizer | None = None,
) -> Step:
    """Run the model on ``src_text`` and ``prefix`` (ids starting with <bos>) and describe the
    next-token choice.

    ``sample_fn`` is 08's ``sample_next_token(logits, temperature, top_k, top_p, generator)``
    (yours): ``filtered`` is the share of ``draws`` draws it makes from this step's logits (a
    fixed seed, so the bars hold still), and ``sample=True`` draws the token with
    ``generator``. Greedy picks the most likely token: the filters always keep it, so it is
    the same before and after them.
    """
    src_tok, tgt_tok = src_tok or source_tokenizer(), tgt_tok or target_tokenizer()
    device = _device(model)
    src = _src(src_text, src_tok, device)
    ys = torch.as_tensor(list(prefix), dtype=torch.long, device=device)[None]  # (1, t)
    logits = model.decode(ys, model.encode(src), causal_mask(ys.size(1), device=device))
    logits = logits[:, -1].float()  # (1, V) the next token
    probs = torch.softmax(logits[0].double(), -1).cpu()  # (V,)
    filtered = None
    if sample_fn is not None:
        fixed = torch.Generator(device=logits.device).manual_seed(0)
        many = sample_fn(logits.expand(draws, -1), temperature, top_k, top_p, fixed)  # (draws,)
        counts = torch.bincount(torch.as_tensor(many).reshape(-1).cpu(), minlength=len(probs))[: len(probs)]
        filtered = (counts.double() / draws).numpy()
    if sample:
        if sample_fn is None:
            raise ValueError("sampling needs a sample_fn (your sample_next_token)")
        chosen = int(torch.as_tensor(sample_fn(logits, temperature, top_k, top_p, generator)).reshape(-1)[0])
    else:
        chosen = int(probs.argmax())
    attn = cross_attention(model, src_text, list(prefix) + [chosen], causal_mask, src_tok)[-1].mean(0)
    return Step(
        src_tok.tokenize(src_text),
        [int(t) for t in prefix],
        list(tgt_tok.itos),
        probs.numpy(),
        filtered,
        draws,
        chosen,
        attn.numpy(),
        bool(sample),
        float(temperature),
        top_k,
        top_p,
    )


def _settings(step: Step) -> str:
    k = "all" if step.top_k is None or step.top_k >= len(step.labels) else f"{step.top_k}"
    p = "1" if step.top_p is None else f"{step.top_p:g}"
    return f"T = {step.temperature:.3g}, top-k = {k}, top-p = {p}"


def plot_next_token(step: Step, ax=None, title: str | None = None):
    """Bars of the next-token distribution: grey = the model's, blue = what the filters leave
    (the share of the draws of your sampler, at the settings written in the legend). The
    chosen token's bar is outlined in red, and the title says how it was chosen: greedy (the
    tallest grey bar; the blue bars are then only what sampling would draw from, drawn pale)
    or sampled from the blue bars (and whether greedy would have picked the same).
    Returns the Axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.2))
    x = np.arange(len(step.labels))
    wide = step.filtered is not None
    grey = ax.bar(x - 0.2 * wide, step.probs, width=0.4 if wide else 0.7, color="0.7", label="model (T = 1)")
    bars = grey
    if wide:
        blue = ax.bar(
            x + 0.2,
            step.filtered,
            width=0.4,
            color="C0",
            alpha=1.0 if step.sampled else 0.35,
            label=f"your sample_next_token, {_settings(step)} ({step.draws:,} draws)",
        )
        bars = blue if step.sampled else grey
    bars[step.chosen].set_edgecolor("C3")
    bars[step.chosen].set_linewidth(2)
    ax.set_xticks(x, [lab.strip("<>") if len(lab) > 1 else lab for lab in step.labels], rotation=60)
    ax.set_ylim(0, 1)
    ax.set_ylabel("probability")
    # the legend goes above the axes, where no bar can be (a bar may reach any height inside
    # them), and the title above the legend
    ax.legend(
        loc="lower left",
        bbox_to_anchor=(0.0, 1.0),
        ncols=1,
        fontsize=8,
        frameon=False,
        borderaxespad=0.1,
        handlelength=1.2,
        columnspacing=1.0,
    )
    if title is None:
        word = step.labels[step.chosen]
        if step.sampled:
            share = step.filtered[step.chosen] if wide else step.probs[step.chosen]
            same = (
                "greedy would pick it too"
                if step.chosen == step.greedy
                else f"greedy would pick “{step.labels[step.greedy]}”"
            )
            title = f"sampled “{word}” (blue bar {share:.0%}); {same}"
        else:
            title = f"greedy: the tallest grey bar, “{word}” ({step.probs[step.chosen]:.0%})"
    ax.set_title(title, fontsize=10, pad=(30 if wide else 18))
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
    # beside the axes, so that no bar is hidden whatever its height, and clear of any title
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9, frameon=False)
    return ax, probs
