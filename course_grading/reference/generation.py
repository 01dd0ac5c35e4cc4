"""08_generation: greedy decoding, sampling (temperature, top-k, top-p) and beam search.

Every decoder here talks to the model through two methods only, as the course's Transformer
has them: ``memory = model.encode(src, src_mask)`` and
``logits = model.decode(ys, memory, tgt_mask, memory_mask)`` with logits ``(b, t, vocab)``.
The logits at the LAST position predict the next token.
"""

from __future__ import annotations

import torch

from .attention import causal_mask


@torch.no_grad()
def greedy_decode(
    model, src: torch.Tensor, max_len: int, bos_id: int, eos_id: int, src_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """Append the most likely next token until every row has produced eos_id or L == max_len.

    src (b, s) -> ys (b, L), L <= max_len, ys[:, 0] == bos_id; after a row's eos_id the row
    continues with eos_id.
    """
    memory = model.encode(src, src_mask)  # (b, s, d_model)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (b, 1)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)  # (b,)
    while ys.size(1) < max_len and not bool(done.all()):
        L = ys.size(1)
        logits = model.decode(ys, memory, causal_mask(L, device=src.device), src_mask)  # (b, L, V)
        next_id = logits[:, -1].argmax(dim=-1)  # (b,): the last position predicts the next token
        next_id = torch.where(done, torch.full_like(next_id, eos_id), next_id)
        ys = torch.cat([ys, next_id[:, None]], dim=1)  # (b, L + 1)
        done = done | (next_id == eos_id)
    return ys


def filter_logits(
    logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None
) -> torch.Tensor:
    """The logits ``sample_next_token`` samples from: scaled by 1/temperature, -inf outside the
    top_k highest and outside the nucleus. (b, vocab) -> (b, vocab). softmax of it gives the
    renormalised distribution."""
    logits = logits / temperature  # (b, V): T < 1 sharpens, T > 1 flattens
    if top_k is not None:
        k = min(int(top_k), logits.size(-1))
        kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (b, 1) the k-th highest logit
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (b, V)
        probs = torch.softmax(sorted_logits, dim=-1)
        before = torch.cumsum(probs, dim=-1) - probs  # (b, V) mass of the tokens ranked above
        drop_sorted = before >= top_p  # the set already reached top_p without this token
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)  # back to vocab order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def sample_next_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row from logits (b, vocab): temperature, then top-k, then top-p (the token
    that crosses top_p is kept), renormalised, sampled with torch.multinomial. -> (b,) long."""
    probs = torch.softmax(filter_logits(logits, temperature, top_k, top_p), dim=-1)  # (b, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (b,)


@torch.no_grad()
def sample_decode(
    model,
    src: torch.Tensor,
    max_len: int,
    bos_id: int,
    eos_id: int,
    src_mask: torch.Tensor | None = None,
    sample_fn=None,
    **sample_kwargs,
):
    """greedy_decode's loop with the argmax replaced by ``sample_fn(logits, **sample_kwargs)``
    (default: sample_next_token), e.g. ``temperature=0.8, top_p=0.9, generator=g``."""
    sample_fn = sample_fn or sample_next_token
    memory = model.encode(src, src_mask)  # (b, s, d_model)
    ys = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (b, 1)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    while ys.size(1) < max_len and not bool(done.all()):
        logits = model.decode(ys, memory, causal_mask(ys.size(1), device=src.device), src_mask)
        next_id = sample_fn(logits[:, -1], **sample_kwargs)  # (b,)
        next_id = torch.where(done, torch.full_like(next_id, eos_id), next_id)
        ys = torch.cat([ys, next_id[:, None]], dim=1)
        done = done | (next_id == eos_id)
    return ys


@torch.no_grad()
def beam_search(
    model,
    src: torch.Tensor,
    beam_size: int,
    max_len: int,
    bos_id: int,
    eos_id: int,
    length_penalty: float = 1.0,
) -> torch.Tensor:
    """Beam search for ONE source sentence, src (1, s) -> (L,) starting with bos_id.

    Each step extends every live hypothesis by every token and keeps the beam_size best
    extensions by total log-probability; one ending in eos_id is finished and leaves the beam.
    Stops when nothing is live or the length reaches max_len. Returns, among finished and
    live hypotheses, the best by total log-prob / n ** length_penalty (n = tokens after bos).
    """
    memory = model.encode(src, None)  # (1, s, d_model)
    live = torch.full((1, 1), bos_id, dtype=torch.long, device=src.device)  # (beams, L)
    live_scores = torch.zeros(1, device=src.device, dtype=torch.float64)  # (beams,) total log-prob
    finished: list[tuple[float, torch.Tensor]] = []  # (total log-prob, sequence)
    while live.size(0) > 0 and live.size(1) < max_len:
        beams, L = live.shape
        logits = model.decode(
            live, memory.expand(beams, -1, -1), causal_mask(L, device=src.device), None
        )  # (beams, L, V)
        logp = torch.log_softmax(logits[:, -1].double(), dim=-1)  # (beams, V)
        total = (live_scores[:, None] + logp).flatten()  # (beams * V,) every extension
        top = torch.topk(total, min(beam_size, total.numel()))
        V = logp.size(-1)
        rows, tokens = top.indices // V, top.indices % V  # which hypothesis, which token
        new = torch.cat([live[rows], tokens[:, None]], dim=1)  # (k, L + 1)
        ended = tokens == eos_id
        finished += [(float(s), seq) for s, seq in zip(top.values[ended], new[ended])]
        live, live_scores = new[~ended], top.values[~ended]
    candidates = finished + [(float(s), seq) for s, seq in zip(live_scores, live)]

    def normalised(item):
        score, seq = item
        n = max(seq.numel() - 1, 1)  # tokens after bos
        return score / n**length_penalty

    return max(candidates, key=normalised)[1]


__all__ = ["greedy_decode", "filter_logits", "sample_next_token", "sample_decode", "beam_search"]
