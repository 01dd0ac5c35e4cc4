"""A character-level language model on Shakespeare: the text, its tokenizer, training, perplexity,
and the shipped checkpoint of notebook 09.

    text = load_text()                                   # 300 KB of Shakespeare (PROVENANCE.md)
    tok = CharTokenizer(text)                            # one id per character
    train_ids, val_ids = split(tok.encode(text))         # the last 10 % held out
    model, tok = load_gpt(GPT)                           # the trained model, in a moment
    perplexity(model, val_ids)                           # exp(mean cross-entropy per character)

    model = build_gpt(GPT, GPTConfig(num_layers=2))      # or train one yourself
    history = train_lm(model, train_ids, steps=300, time_budget=20)

``PrefixLM`` is a fake model with GPT's contract that the checks of ``generate`` (visible,
hidden and the audit's) run on: its logits are a fixed function of the whole prefix, and its
"cache" carries the tokens it has seen.

This module holds no model of its own: ``GPT`` is notebook 09's class (the learner's own, or the
course's), taken as an argument. Training is next-token prediction on random windows of the
text: the model reads ``ids[i : i + block]`` and is scored on ``ids[i + 1 : i + block + 1]``,
the shifted target of notebook 07 on one stream of text (cross-entropy, AdamW, linear warm-up
then cosine decay, on ``get_device()``). With a ``time_budget`` the run times a few steps and
then fits its length, and its schedule, to what this machine can do in that time.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from .device import get_device
from .training import History, ModelRun, Plan, run_steps

DATA = Path(__file__).resolve().parent / "data"
TEXT = DATA / "tiny_shakespeare.txt"
CHECKPOINT = DATA / "shakespeare_gpt.pt"
VAL_FRACTION = 0.1


def load_text(path: Path | str = TEXT) -> str:
    """The course's public-domain text (UTF-8)."""
    return Path(path).read_text(encoding="utf-8")


class CharTokenizer:
    """One token per character: the sorted characters of ``text`` are the vocabulary."""

    def __init__(self, text: str | None = None, itos: list[str] | None = None):
        self.itos = list(itos) if itos is not None else sorted(set(text or ""))
        self.stoi = {ch: i for i, ch in enumerate(self.itos)}

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        unknown = sorted(set(text) - set(self.stoi))
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {''.join(unknown)!r}")
        return [self.stoi[ch] for ch in text]

    def decode(self, ids) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return "".join(self.itos[int(i)] for i in ids)


def split(ids, val_fraction: float = VAL_FRACTION) -> tuple[torch.Tensor, torch.Tensor]:
    """(train, held-out) as 1-D long tensors: the held-out part is the END of the text, so no
    window of it was ever read in training."""
    ids = torch.as_tensor(ids, dtype=torch.long)
    cut = int(len(ids) * (1 - val_fraction))
    return ids[:cut], ids[cut:]


@dataclass
class GPTConfig(ModelRun):
    """09's character-level GPT and its training run: those of the shipped checkpoint."""

    d_model: int = 96
    d_ff: int = 384
    num_layers: int = 3
    max_len: int = 128
    block: int = 128  # characters per training window: every position of max_len trained
    steps: int = 2400
    batch_size: int = 16
    weight_decay: float = 0.1


def build_gpt(gpt_cls, config: GPTConfig | None = None, vocab_size: int | None = None):
    """A fresh (untrained) ``gpt_cls`` (09's GPT contract) sized for the text's characters."""
    config = config or GPTConfig()
    vocab_size = vocab_size or len(CharTokenizer(load_text()))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        return gpt_cls(vocab_size, **config.model_kwargs())


def windows(data: torch.Tensor, block: int, batch_size: int, generator: torch.Generator):
    """A random batch of windows: inputs x (b, block) and the targets y, x shifted by one."""
    starts = torch.randint(len(data) - block - 1, (batch_size,), generator=generator)
    offsets = torch.arange(block)
    x = data[starts[:, None] + offsets]  # (b, block)
    y = data[starts[:, None] + offsets + 1]  # (b, block) each position's next character
    return x, y


def lm_loss(model, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of the model's next-token logits on x against y."""
    logits, _ = model(x)  # (b, t, V)
    return nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))


def train_lm(
    model,
    data: torch.Tensor,
    *,
    steps: int = 1200,
    block: int = 128,
    batch_size: int = 16,
    lr: float = 3e-3,
    warmup: int = 100,
    weight_decay: float = 0.1,
    device=None,
    seed: int = 0,
    time_budget: float | None = None,
    time_limit: float | None = None,
    show: str | None = None,
    redraw_every: float = 2.0,
) -> History:
    """Train ``model`` in place on random windows of ``data`` (1-D ids); returns the History.

    ``time_budget`` (seconds): after a few steps, set the number of steps (and the warm-up and
    decay with it) to what fits; ``time_limit`` stops the run wherever it is. ``show``:
    "notebook", "text" or "quiet" (default: the notebook's live curve, quiet under grading)."""
    plan = Plan(steps, lr, warmup, time_budget, time_limit, show, redraw_every, device)
    device = plan.device
    model.to(device).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(seed)

    def batch_loss(step: int) -> torch.Tensor:
        x, y = windows(data, block, batch_size, gen)
        return lm_loss(model, x.to(device), y.to(device))

    return run_steps(model, opt, batch_loss, plan, probe=5, reserve=0.1)


@torch.no_grad()
def perplexity(model, data: torch.Tensor, block: int = 128, max_windows: int = 128) -> float:
    """exp(mean cross-entropy per character) on ``data``, read in consecutive windows of
    ``block`` characters (at most ``max_windows``, spread over the text)."""
    device = next(model.parameters()).device
    n = (len(data) - 1) // block
    picks = torch.linspace(0, n - 1, min(n, max_windows)).long()
    x = torch.stack([data[i * block : (i + 1) * block] for i in picks.tolist()]).to(device)
    y = torch.stack([data[i * block + 1 : (i + 1) * block + 1] for i in picks.tolist()]).to(device)
    was_training = model.training
    model.eval()
    total = 0.0
    for start in range(0, len(x), 16):  # 16 windows at a time: the attention maps stay small
        total += float(lm_loss(model, x[start : start + 16], y[start : start + 16])) * len(
            x[start : start + 16]
        )
    model.train(was_training)
    return math.exp(total / len(x))


# -- a fake model for the checks of generate ----------------------------------------------
class PrefixLM(nn.Module):
    """A fake GPT whose next-token logits are a fixed random function of the WHOLE prefix.

    ``forward(ids, past=None) -> (logits (b, t, V), present)`` like the GPT contract; its
    "cache" is one (K, V) per layer that carries the tokens seen so far (K) and their positions
    (V), so a wrong cache gives other logits. ``calls`` records (new tokens, cached tokens) of
    every call.
    """

    def __init__(
        self,
        vocab_size: int,
        seed: int,
        num_layers: int = 2,
        num_heads: int = 2,
        max_len: int = 64,
        scale: float = 3.0,
        device=None,
    ):
        super().__init__()
        self.vocab_size, self.seed, self.num_layers, self.num_heads = (
            vocab_size,
            seed,
            num_layers,
            num_heads,
        )
        self.max_len, self.scale = max_len, scale
        self.anchor = nn.Parameter(torch.zeros(1, device=device))  # where the model lives
        self.calls: list[tuple[int, int]] = []

    def logits_for(self, prefix: tuple) -> list[float]:
        h = self.seed
        for tok in prefix:
            h = (h * 1_000_003 + int(tok) + 1) % 2_147_483_647
        g = torch.Generator().manual_seed(h)
        return (self.scale * torch.randn(self.vocab_size, generator=g, dtype=torch.float64)).tolist()

    def forward(self, ids, past=None):
        b, t = ids.shape
        if past is None:
            seen = torch.zeros(b, 0, dtype=torch.long, device=ids.device)
        else:
            if not (isinstance(past, (list, tuple)) and len(past) == self.num_layers):
                raise ValueError(
                    "past should be the list of (K, V) pairs that the previous call returned as present"
                )
            seen = past[0][0][:, 0, :, 0].round().long()  # (b, t_past) the tokens cached
        full = torch.cat([seen, ids.long()], dim=1)  # (b, T)
        T = full.size(1)
        if T > self.max_len:
            raise ValueError(f"{T} positions pass max_len={self.max_len}")
        self.calls.append((t, T - t))
        rows = full.cpu().tolist()
        logits = torch.tensor(
            [[self.logits_for(tuple(r[: T - t + i + 1])) for i in range(t)] for r in rows], device=ids.device
        )  # (b, t, V)
        k = full.to(torch.get_default_dtype())[:, None, :, None].expand(b, self.num_heads, T, 1).contiguous()
        v = (
            torch.arange(T, device=ids.device)
            .to(k)[None, None, :, None]
            .expand(b, self.num_heads, T, 1)
            .contiguous()
        )
        present = [(k, v) for _ in range(self.num_layers)]
        return logits.to(self.anchor.dtype) + self.anchor, present


# -- the shipped checkpoint ----------------------------------------------------------------
def save_gpt(model, config: GPTConfig, tokenizer: CharTokenizer, path: Path | str = CHECKPOINT) -> Path:
    """The weights in float16 (half the bytes), the config and the vocabulary."""
    state = {
        k: v.detach().cpu().half() if v.is_floating_point() else v.detach().cpu()
        for k, v in model.state_dict().items()
    }
    torch.save({"config": dataclasses.asdict(config), "itos": tokenizer.itos, "state_dict": state}, path)
    return Path(path)


def load_gpt(gpt_cls, device=None, path: Path | str = CHECKPOINT):
    """The trained Shakespeare model in a ``gpt_cls`` (eval mode, float32, on ``device`` or
    ``get_device()``) and its tokenizer: ``model, tok = load_gpt(GPT)``."""
    blob = torch.load(path, map_location="cpu", weights_only=True)
    config = GPTConfig(**blob["config"])
    tok = CharTokenizer(itos=blob["itos"])
    model = build_gpt(gpt_cls, config, len(tok))
    model.load_state_dict(
        {k: v.float() if v.is_floating_point() else v for k, v in blob["state_dict"].items()}
    )
    device = torch.device(device) if device is not None else get_device()
    return model.to(device).eval(), tok


def describe_gpt(path: Path | str = CHECKPOINT) -> dict:
    """The JSON written next to the checkpoint (how it was trained, how well it does)."""
    return json.loads(Path(path).with_suffix(".json").read_text())
