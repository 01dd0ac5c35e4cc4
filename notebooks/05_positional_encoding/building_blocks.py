"""Building blocks for 05_positional_encoding: the course's own versions of components that earlier
notebooks had you build (scaled_dot_product_attention from 03_attention, MultiHeadAttention from
04_multi_head_attention), so that this notebook works whatever state your earlier work is in.

Provided with the assignment by `course release`. Grading always uses the instructor's copy of
this file, so editing it changes nothing in your grade.
"""
import math

import torch
from torch import nn


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x_i - max x) / sum_j exp(x_j - max x): subtracting the max keeps exp from overflowing."""
    x = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(Q, K, V, mask=None):
    """softmax(Q Kᵀ / √d_k) V.

    Q (..., q, d_k), K (..., k, d_k), V (..., k, d_v); mask bool, broadcastable to (..., q, k),
    True = may attend. Returns output (..., q, d_v) and weights (..., q, k).
    """
    d_k = Q.size(-1)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d_k)  # (..., q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)  # (..., q, k)
    return weights @ V, weights  # (..., q, d_v), (..., q, k)


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(b, s, d_model) -> (b, num_heads, s, d_head).

    Head h gets features h*d_head ... (h+1)*d_head - 1 of every token.
    """
    b, s, d_model = x.shape
    x = x.view(b, s, num_heads, d_model // num_heads)  # (b, s, h, d_head): cut the features
    return x.transpose(1, 2)  # (b, h, s, d_head): each head sees the whole sequence


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(b, h, s, d_head) -> (b, s, h * d_head), the inverse of split_heads."""
    b, h, s, d_head = x.shape
    x = x.transpose(1, 2).contiguous()  # (b, s, h, d_head)
    return x.view(b, s, h * d_head)  # (b, s, d_model): the heads side by side


class MultiHeadAttention(nn.Module):
    """Concat(head_1, ..., head_h) W_O with head_i = Attention(Q W_Q^i, K W_K^i, V W_V^i).

    forward(query (b, q, d_model), key (b, k, d_model), value (b, k, d_model), mask=None)
    returns output (b, q, d_model) and the per-head weights (b, h, q, k), before dropout.
    ``mask``: bool, True = may attend, broadcastable to (b, h, q, k), e.g. (q, k) for a causal
    mask or (b, 1, 1, k) for padding. Dropout (training only) drops attention weights.
    """

    def __init__(self, d_model: int, num_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model={d_model} is not divisible by num_heads={num_heads}: "
                "every head needs the same size d_model // num_heads"
            )
        self.d_model, self.num_heads, self.d_head = d_model, num_heads, d_model // num_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # all heads' W_Q side by side
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O, called o_proj in Llama
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        Q = split_heads(self.q_proj(query), self.num_heads)  # (b, h, q, d_head)
        K = split_heads(self.k_proj(key), self.num_heads)  # (b, h, k, d_head)
        V = split_heads(self.v_proj(value), self.num_heads)  # (b, h, k, d_head)
        out, weights = scaled_dot_product_attention(Q, K, V, mask)  # (b,h,q,d_head), (b,h,q,k)
        if self.training and self.dropout.p > 0:
            out = self.dropout(weights) @ V  # drop attention links, as torch does
        return self.out_proj(merge_heads(out)), weights  # (b, q, d_model), (b, h, q, k)
