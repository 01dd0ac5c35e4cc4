"""03_attention: softmax, scaled dot-product attention and the causal mask (torch)."""

from __future__ import annotations

import math

import torch


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """exp(x_i - max x) / sum_j exp(x_j - max x): subtracting the max keeps exp from overflowing."""
    x = x - x.amax(dim=dim, keepdim=True)
    e = torch.exp(x)
    return e / e.sum(dim=dim, keepdim=True)


def simple_self_attention(X: torch.Tensor) -> torch.Tensor:
    """softmax(X Xᵀ) X, no parameters, no scaling. X: (..., seq, d) -> (..., seq, d)."""
    scores = X @ X.transpose(-2, -1)  # (..., seq, seq)
    return softmax(scores, dim=-1) @ X  # (..., seq, d)


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


def causal_mask(size: int, device=None) -> torch.Tensor:
    """(size, size) bool, True on and below the diagonal: position i may attend to j <= i."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()
