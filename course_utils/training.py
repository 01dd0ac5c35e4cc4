"""Train the course's encoder-decoder Transformer on the dates task, evaluate it, load the
shipped checkpoint.

    model, src_tok, tgt_tok = load_toy_model(Transformer)   # trained, in a fraction of a second
    exact_match(model, make_pairs(200, "test"), decode=greedy_decode,
                make_padding_mask=make_padding_mask)        # -> 0.99...

    model = build_model(Transformer, ToyConfig())            # or train one yourself
    history = train(model, make_pairs(40_000), causal_mask=causal_mask,
                    make_padding_mask=make_padding_mask, steps=1_500)

This module holds no model and no exercise of its own: ``Transformer`` is the encoder-decoder
of notebook 07, ``causal_mask`` that of 03, ``make_padding_mask`` that of 07 and
``greedy_decode`` that of 08, each the learner's own or the one an assignment provides.

The loop is the textbook one: teacher forcing (the decoder reads ``<bos> y1 … y_{n-1}`` and
is scored on ``y1 … y_n <eos>``), padding masks from ``make_padding_mask``, a causal mask on
the target, cross-entropy (optionally label-smoothed) that ignores ``<pad>``, AdamW, linear
warm-up then cosine decay. It runs on ``get_device()`` (CUDA, MPS or CPU, the same code).
With a ``time_budget`` the run first times a few steps and then sets its own length (and its
learning-rate schedule) to what this machine can do in that time.
In a notebook it shows a progress bar and a live loss curve (redrawn at most every
``redraw_every`` seconds); elsewhere it prints a line now and then; under nbgrader it is silent.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable, ClassVar, Sequence

import torch
from torch import nn

from .device import get_device, grading
from .toy_task import Tokenizer, encode_pairs, source_tokenizer, target_tokenizer

CHECKPOINT = Path(__file__).resolve().parent / "data" / "dates_transformer.pt"
MAX_TARGET_LEN = 12  # <bos> + "YYYY-MM-DD" + <eos>


@dataclass
class ModelRun:
    """What the course's training runs share: the defaults both models keep, and
    ``model_kwargs()``, the fields the model's constructor takes (``MODEL_FIELDS``). Each
    run's configuration (``ToyConfig``, 09's ``GPTConfig``) adds its own sizes and length."""

    MODEL_FIELDS: ClassVar[tuple[str, ...]] = (
        "d_model",
        "num_heads",
        "d_ff",
        "num_layers",
        "max_len",
        "dropout",
    )

    num_heads: int = 4
    dropout: float = 0.0
    lr: float = 3e-3
    warmup: int = 100  # steps of linear warm-up before the cosine decay
    seed: int = 0

    def model_kwargs(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name in self.MODEL_FIELDS}


@dataclass
class ToyConfig(ModelRun):
    """The dates Transformer (07, 08) and its training run: those of the shipped checkpoint."""

    d_model: int = 64
    d_ff: int = 128
    num_layers: int = 2
    steps: int = 900
    batch_size: int = 64
    label_smoothing: float = 0.1
    weight_decay: float = 0.01
    train_pairs: int = 40_000


def build_model(
    transformer_cls,
    config: ToyConfig | None = None,
    src_tok: Tokenizer | None = None,
    tgt_tok: Tokenizer | None = None,
):
    """A fresh (untrained) ``transformer_cls`` (07's Transformer contract) sized for the dates task."""
    config = config or ToyConfig()
    src_tok, tgt_tok = src_tok or source_tokenizer(), tgt_tok or target_tokenizer()
    torch.manual_seed(config.seed)
    return transformer_cls(len(src_tok), len(tgt_tok), max_len=64, **config.model_kwargs())


def lr_at(step: int, peak: float, warmup: int, total: int, floor: float = 0.05) -> float:
    """Linear warm-up from 0 to ``peak`` over ``warmup`` steps, then cosine decay to
    ``floor * peak`` at step ``total``."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return peak * (floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress)))


def teacher_forcing_loss(
    model,
    src: torch.Tensor,
    tgt: torch.Tensor,
    pad_id: int,
    causal_mask: Callable,
    make_padding_mask: Callable,
    label_smoothing: float = 0.0,
) -> torch.Tensor:
    """Cross-entropy of predicting tgt[:, 1:] from tgt[:, :-1] (the shifted target).

    src (b, s), tgt (b, t) = <bos> y1 … yn <eos> <pad>…; <pad> positions are not scored.
    ``causal_mask(size, device=...)`` and ``make_padding_mask(ids, pad_id)`` build the masks.
    """
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # (b, t-1) each: read up to i, predict i+1
    src_mask = make_padding_mask(src, pad_id)  # (b, 1, 1, s)
    t = tgt_in.size(1)
    tgt_mask = causal_mask(t, device=tgt.device) & make_padding_mask(tgt_in, pad_id)  # (b,1,t,t)
    logits = model(src, tgt_in, src_mask, tgt_mask)  # (b, t-1, V)
    return nn.functional.cross_entropy(
        logits.reshape(-1, logits.size(-1)),
        tgt_out.reshape(-1),
        ignore_index=pad_id,
        label_smoothing=label_smoothing,
    )


@dataclass
class History:
    losses: list[float] = field(default_factory=list)  # one per step
    lrs: list[float] = field(default_factory=list)
    seconds: float = 0.0
    device: str = "cpu"
    requested: int = 0  # the steps asked for
    planned: int = 0  # the steps the run set out to do (fewer when a time budget says so)
    budget: float | None = None  # the time budget the plan was made for (seconds)
    time_limit: float | None = None  # where the run would stop, wherever it was (seconds)

    @property
    def steps(self) -> int:
        return len(self.losses)

    def recent_loss(self, last: int = 20) -> float:
        """The mean loss of the last ``last`` steps (all of them in a shorter run); NaN before any."""
        recent = self.losses[-last:]
        return sum(recent) / len(recent) if recent else float("nan")

    def summary(self) -> str:
        """How far the run got, e.g. '321 steps in 13.5 s on cpu, loss 0.572 (planned: what
        the pace of its first steps fits in a budget of about 12 s; the full run is 900)'."""
        loss = f", loss {self.recent_loss():.3f}" if self.losses else ""
        done = f"{self.steps} steps in {self.seconds:.1f} s on {self.device}{loss}"
        if self.steps >= self.requested:
            return "all " + done
        if self.steps < self.planned:  # the time limit cut the plan short
            limit = f" at the {self.time_limit:g} s time limit" if self.time_limit else ""
            return (
                f"{done} (stopped{limit}, {self.steps} of the {self.planned} steps "
                f"planned; the full run is {self.requested})"
            )
        budget = f" in a budget of about {self.budget:g} s" if self.budget else " in the budget"
        return (
            f"{done} (planned: what the pace of its first steps fits{budget}; the full run "
            f"is {self.requested})"
        )


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class _Display:
    """Progress bar + live loss curve in a notebook, a text line elsewhere, nothing when quiet."""

    def __init__(self, total: int, mode: str, redraw_every: float):
        self.total, self.mode, self.redraw_every = total, mode, redraw_every
        self.last = -math.inf
        if mode == "notebook":
            import ipywidgets as widgets
            from IPython.display import display

            from .widgets.picture import Picture

            self.bar = widgets.IntProgress(value=0, min=0, max=total, description="training")
            self.label = widgets.Label("")
            self.picture = Picture()
            # the label on a line of its own: the final summary is longer than a line's rest
            box = widgets.VBox([self.bar, self.label, self.picture.image])
            box.add_class("course-widget")
            display(box)

    def plan(self, total: int):
        self.total = total
        if self.mode == "notebook":
            self.bar.max = total

    def update(self, step: int, history: History, force: bool = False, final: bool = False):
        if self.mode == "quiet":
            return
        now = time.perf_counter()
        if not force and now - self.last < self.redraw_every:
            return
        self.last = now
        if final:
            text = f"step {step}/{self.total}: {history.summary()}"
        else:
            text = (
                f"step {step}/{self.total}  loss {history.recent_loss():.3f}  "
                f"{history.seconds:.0f}s on {history.device}"
            )
        if self.mode == "text":
            print(text, flush=True)
            return
        self.bar.value = step
        self.label.value = history.summary() if final else text  # the bar shows the step
        self.picture.show(plot_loss(history))


def plot_loss(history: History, ax=None):
    """The training loss per step (and a running mean). Returns the figure."""
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 3.0))
    losses = torch.tensor(history.losses)
    ax.plot(losses.numpy(), color="0.75", lw=0.8, label="loss per step")
    if len(losses) >= 20:
        smooth = losses.unfold(0, 20, 1).mean(-1)
        ax.plot(range(19, len(losses)), smooth.numpy(), color="C0", label="mean of 20 steps")
    ax.set_xlim(0, max(history.planned, len(losses), 1))
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.set_yscale("log")
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    low, high = ax.get_ylim()
    # a few plain numbers (0.5, 1, 2 rather than 5 × 10⁻¹): 1-2-5 steps over a wide range,
    # evenly spaced values within less than a factor of 10
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)) if high > 10 * low else MaxNLocator(nbins=4))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_title("training loss (teacher forcing)", fontsize=10)
    ax.legend(loc="upper right")
    ax.figure.tight_layout()
    return ax.figure


def train(
    model,
    pairs: Sequence[tuple[str, str]],
    *,
    causal_mask: Callable,
    make_padding_mask: Callable,
    src_tok: Tokenizer | None = None,
    tgt_tok: Tokenizer | None = None,
    steps: int = 900,
    batch_size: int = 64,
    lr: float = 3e-3,
    warmup: int = 100,
    label_smoothing: float = 0.1,
    weight_decay: float = 0.01,
    device=None,
    seed: int = 0,
    time_budget: float | None = None,
    time_limit: float | None = None,
    show: str | None = None,
    redraw_every: float = 2.0,
) -> History:
    """Train ``model`` in place on ``pairs`` for ``steps`` batches; returns the History.

    ``causal_mask`` (03_attention's) and ``make_padding_mask`` (07_decoder's) build the masks.
    Batches are drawn without replacement from shuffled pairs (a new shuffle each epoch).
    ``time_budget`` (seconds) fits the run to this machine: after a few steps it sets the number
    of steps, and the warm-up and decay with it, to what fits in the budget (at most
    ``steps``). ``time_limit`` (seconds) stops the run wherever it is. ``show``: "notebook",
    "text" or "quiet"; by default the notebook display in Jupyter, quiet under grading, text
    otherwise. ``history.summary()`` says how far the run got.
    """
    src_tok, tgt_tok = src_tok or source_tokenizer(), tgt_tok or target_tokenizer()
    plan = Plan(steps, lr, warmup, time_budget, time_limit, show, redraw_every, device)
    device = plan.device
    model.to(device).train()
    src_all, tgt_all = encode_pairs(pairs, src_tok, tgt_tok)  # (N, s), (N, t) on the CPU
    src_all, tgt_all = src_all.to(device), tgt_all.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.98))
    gen = torch.Generator().manual_seed(seed)
    order, cursor = torch.randperm(len(pairs), generator=gen), 0

    def batch_loss(step: int) -> torch.Tensor:
        nonlocal order, cursor
        if cursor + batch_size > len(order):
            order, cursor = torch.randperm(len(pairs), generator=gen), 0
        idx = order[cursor : cursor + batch_size].to(device)
        cursor += batch_size
        src, tgt = src_all[idx], tgt_all[idx]
        longest_src = int((src != src_tok.pad_id).sum(1).max())  # trim shared padding
        longest_tgt = int((tgt != tgt_tok.pad_id).sum(1).max())
        src, tgt = src[:, :longest_src], tgt[:, :longest_tgt]
        return teacher_forcing_loss(
            model, src, tgt, tgt_tok.pad_id, causal_mask, make_padding_mask, label_smoothing
        )

    return run_steps(model, opt, batch_loss, plan, probe=8)


@dataclass
class Plan:
    """How a training run goes (08's ``train`` and 09's ``train_lm`` take these arguments):
    ``steps`` at most, the learning rate's peak ``lr`` and its ``warmup``, the time budget and
    limit, what is shown, on which device. Unset, the device is ``get_device()``, ``show`` the
    notebook's live curve in Jupyter, quiet under grading, text otherwise, and with a budget the
    time limit is 1.5 × the budget (the pace can drop on a busy machine)."""

    steps: int
    lr: float
    warmup: int
    time_budget: float | None
    time_limit: float | None
    show: str | None
    redraw_every: float
    device: object = None

    def __post_init__(self):
        self.device = torch.device(self.device) if self.device is not None else get_device()
        if self.show is None:
            self.show = "quiet" if grading() else ("notebook" if _in_notebook() else "text")
        if self.time_limit is None and self.time_budget is not None:
            self.time_limit = 1.5 * self.time_budget


def run_steps(
    model,
    opt,
    batch_loss: Callable[[int], torch.Tensor],
    plan: Plan,
    probe: int,
    reserve: float | None = None,
) -> History:
    """The training loop that 08's ``train`` and 09's ``train_lm`` share: ``batch_loss(step)``
    draws a batch and returns its loss; each step sets the learning rate (``lr_at``), clips the
    gradient norm to 1 and records loss, rate and time in the History it returns.

    With a time budget, the first ``probe`` steps are timed (no drawing meanwhile), then the
    number of steps, and the warm-up and decay with it, is set to what fits in what is left of
    the budget, at most ``steps``: all of it but the share the live curve takes (the first
    picture is timed), or, with ``reserve``, all of it but that fixed fraction. The time limit
    stops the run wherever it is. Returns the History, the model in eval mode."""
    steps, lr, warmup, time_budget, time_limit = (
        plan.steps,
        plan.lr,
        plan.warmup,
        plan.time_budget,
        plan.time_limit,
    )
    probe = min(steps, probe) if time_budget is not None else 0  # steps timed before planning
    history = History(
        device=str(plan.device), requested=steps, planned=steps, budget=time_budget, time_limit=time_limit
    )  # the summary says what the plan was fitted to
    display = _Display(steps, plan.show, plan.redraw_every)
    total, warm = steps, warmup
    start = time.perf_counter()
    step, paces = 0, []  # seconds of each step, drawing excluded
    while step < total:
        began = time.perf_counter()
        for group in opt.param_groups:
            group["lr"] = lr_at(step, lr, warm, total)
        loss = batch_loss(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        history.losses.append(float(loss.detach()))
        history.lrs.append(opt.param_groups[0]["lr"])
        now = time.perf_counter()
        paces.append(now - began)
        history.seconds = now - start
        step += 1
        if step < probe:
            continue  # no drawing while the pace is measured
        if step == probe:  # plan the rest from the pace of the first steps
            drawing = time.perf_counter()
            display.update(step, history, force=True)  # the first picture, timed
            drawing = time.perf_counter() - drawing
            share = drawing / (drawing + display.redraw_every)  # of the time the live curve costs
            left = time_budget - (time.perf_counter() - start)
            usable = left * (1 - share) if reserve is None else left * (1 - reserve)
            timed = paces[1:] or paces  # the first step pays one-off costs
            pace = sorted(timed)[len(timed) // 2]  # the median step
            total = max(probe, min(steps, probe + int(usable / max(pace, 1e-9))))
            warm = max(1, round(warmup * total / steps))
            history.planned = total
            display.plan(total)
        else:
            display.update(step, history)
        if time_limit is not None and history.seconds > time_limit:
            break
    display.update(history.steps, history, force=True, final=True)
    model.eval()
    return history


# -- evaluation ----------------------------------------------------------------------------
@torch.no_grad()
def predict(
    model,
    sources: Sequence[str],
    *,
    decode: Callable,
    make_padding_mask: Callable,
    src_tok: Tokenizer | None = None,
    tgt_tok: Tokenizer | None = None,
    batch_size: int = 500,
    max_len: int = MAX_TARGET_LEN,
) -> list[str]:
    """Translate ``sources`` with ``decode``, batched.

    ``decode(model, src, max_len, bos_id, eos_id, src_mask)`` returns (b, L) ids (08's
    ``greedy_decode``, or any strategy with its signature); ``make_padding_mask(ids, pad_id)``
    (07's) masks the padding of each batch of sources.
    """
    src_tok, tgt_tok = src_tok or source_tokenizer(), tgt_tok or target_tokenizer()
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    out: list[str] = []
    for i in range(0, len(sources), batch_size):
        chunk = sources[i : i + batch_size]
        src, _ = encode_pairs([(s, "") for s in chunk], src_tok, tgt_tok, device)
        ys = decode(
            model, src, max_len, tgt_tok.bos_id, tgt_tok.eos_id, make_padding_mask(src, src_tok.pad_id)
        )
        out += [tgt_tok.decode(row) for row in ys.cpu()]
    model.train(was_training)
    return out


def exact_match(
    model,
    pairs: Sequence[tuple[str, str]],
    *,
    decode: Callable,
    make_padding_mask: Callable,
    src_tok: Tokenizer | None = None,
    tgt_tok: Tokenizer | None = None,
    batch_size: int = 500,
) -> float:
    """Fraction of pairs whose translation by ``decode`` equals the target exactly."""
    guesses = predict(
        model,
        [s for s, _ in pairs],
        decode=decode,
        make_padding_mask=make_padding_mask,
        src_tok=src_tok,
        tgt_tok=tgt_tok,
        batch_size=batch_size,
    )
    return sum(g == t for g, (_, t) in zip(guesses, pairs)) / max(1, len(pairs))


# -- the shipped checkpoint ----------------------------------------------------------------
def save_checkpoint(model, config: ToyConfig, path: Path | str = CHECKPOINT) -> Path:
    """Save the weights in float16 (half the bytes; the task does not notice) with the config."""
    state = {
        k: v.detach().cpu().half() if v.is_floating_point() else v.detach().cpu()
        for k, v in model.state_dict().items()
    }
    torch.save({"config": dataclasses.asdict(config), "state_dict": state}, path)
    return Path(path)


def load_toy_model(transformer_cls, device=None, path: Path | str = CHECKPOINT):
    """The trained dates model in a ``transformer_cls`` (eval mode, float32, on ``device`` or
    ``get_device()``), with its tokenisers: ``model, src_tok, tgt_tok = load_toy_model(Transformer)``."""
    blob = torch.load(path, map_location="cpu", weights_only=True)
    config = ToyConfig(**blob["config"])
    model = build_model(transformer_cls, config)
    model.load_state_dict(
        {k: v.float() if v.is_floating_point() else v for k, v in blob["state_dict"].items()}
    )
    device = torch.device(device) if device is not None else get_device()
    return model.to(device).eval(), source_tokenizer(), target_tokenizer()


def describe_checkpoint(path: Path | str = CHECKPOINT) -> dict:
    """The JSON written next to the checkpoint (how it was trained, how well it does)."""
    return json.loads(Path(path).with_suffix(".json").read_text())
