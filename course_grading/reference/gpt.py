"""09_gpt: a decoder-only language model (GPT) and generation with a key-value cache.

Attribute names (the graders load known weights by them, and the shipped checkpoint uses them):

    GPTBlock  ln1 (LayerNorm), attn (MultiHeadAttention), ln2 (LayerNorm), ffn (FeedForward)
    GPT       tok_embedding, pos_embedding (nn.Embedding), blocks (ModuleList), ln_f, lm_head

The cache of one block is the pair ``(K, V)`` of the keys and values of every position seen so
far, each ``(b, num_heads, t, d_head)``: ``split_heads(attn.k_proj(ln1(x)))`` and the same with
``v_proj``. A block's ``forward(x, past)`` returns its output and ``present``, that pair extended
by the positions of ``x``; the model's ``forward(ids, past)`` takes and returns one pair per block.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import scaled_dot_product_attention
from .encoder import FeedForward, LayerNorm
from .generation import sample_next_token
from .multi_head import MultiHeadAttention, merge_heads, split_heads


class GPTBlock(nn.Module):
    """Pre-norm decoder block without cross-attention, as in GPT-2:
    x = x + attn(ln1(x)) (causal), then x = x + ffn(ln2(x))."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int, dropout: float = 0.0):
        super().__init__()
        self.ln1 = LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ln2 = LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, past=None):
        a = self.attn
        h = self.ln1(x)  # (b, t, d_model)
        Q = split_heads(a.q_proj(h), a.num_heads)  # (b, H, t, d_head)
        K = split_heads(a.k_proj(h), a.num_heads)  # (b, H, t, d_head)
        V = split_heads(a.v_proj(h), a.num_heads)  # (b, H, t, d_head)
        if past is not None:
            K = torch.cat([past[0], K], dim=2)  # (b, H, t_past + t, d_head)
            V = torch.cat([past[1], V], dim=2)
        t, T = x.size(1), K.size(2)
        # new position i (absolute T - t + i) sees every cached position and itself, not later ones
        mask = torch.ones(t, T, dtype=torch.bool, device=x.device).tril(diagonal=T - t)  # (t, T)
        out, weights = scaled_dot_product_attention(Q, K, V, mask)  # (b, H, t, d_head)
        if self.training and a.dropout.p > 0:
            out = a.dropout(weights) @ V
        x = x + self.dropout(a.out_proj(merge_heads(out)))  # (b, t, d_model)
        x = x + self.dropout(self.ffn(self.ln2(x)))  # (b, t, d_model)
        return x, (K, V)


class GPT(nn.Module):
    """Token + learned position embeddings, ``num_layers`` GPTBlocks, a final LayerNorm and a
    linear head to the vocabulary: ids (b, t) -> logits (b, t, vocab_size), and the cache."""

    def __init__(
        self, vocab_size, d_model=128, num_heads=4, d_ff=512, num_layers=4, max_len=256, dropout=0.0
    ):
        super().__init__()
        self.max_len = max_len
        self.tok_embedding = nn.Embedding(vocab_size, d_model)
        self.pos_embedding = nn.Embedding(max_len, d_model)  # learned positions, as in GPT-2
        self.dropout = nn.Dropout(dropout)
        self.blocks = nn.ModuleList([GPTBlock(d_model, num_heads, d_ff, dropout) for _ in range(num_layers)])
        self.ln_f = LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, ids: torch.Tensor, past=None):
        t_past = 0 if past is None else past[0][0].size(2)  # positions already in the cache
        t = ids.size(1)
        if t_past + t > self.max_len:
            raise ValueError(
                f"{t_past + t} positions ({t_past} cached + {t} new) do not fit in "
                f"max_len={self.max_len}: the model has no position embedding "
                "beyond it"
            )
        positions = torch.arange(t_past, t_past + t, device=ids.device)  # (t,) continue the cache
        x = self.dropout(self.tok_embedding(ids) + self.pos_embedding(positions))  # (b, t, d_model)
        present = []
        for i, block in enumerate(self.blocks):
            x, kv = block(x, None if past is None else past[i])  # (b, t, d_model)
            present.append(kv)
        return self.lm_head(self.ln_f(x)), present  # (b, t, vocab_size), one (K, V) per block


@torch.no_grad()
def generate(
    model,
    ids: torch.Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Append ``max_new_tokens`` tokens to ids (b, t), one at a time, each drawn by
    ``sample_next_token`` from the last position's logits (temperature 0: the argmax).

    With the cache the first step runs the whole prompt and each later step only the newest
    token; without it every step runs the whole sequence. -> (b, t + max_new_tokens)."""
    past = None
    for _ in range(max_new_tokens):
        if use_cache:
            step = ids if past is None else ids[:, -1:]  # (b, t) the prompt, then (b, 1)
            logits, past = model(step, past)
        else:
            logits, _ = model(ids)  # (b, L, V) the whole sequence again
        last = logits[:, -1]  # (b, V) the next token's logits
        if temperature == 0:
            next_id = last.argmax(dim=-1)  # (b,)
        else:
            next_id = sample_next_token(last, temperature, top_k, top_p, generator)  # (b,)
        ids = torch.cat([ids, next_id[:, None]], dim=1)  # (b, L + 1)
    return ids


__all__ = ["GPTBlock", "GPT", "generate"]
