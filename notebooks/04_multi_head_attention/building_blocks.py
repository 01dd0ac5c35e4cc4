"""Building blocks for 04_multi_head_attention: the course's own versions of components that
earlier notebooks had you build (scaled_dot_product_attention from 03_attention, causal_mask
from 03_attention), so that this notebook works whatever state your earlier work is in.

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


def causal_mask(size: int, device=None) -> torch.Tensor:
    """(size, size) bool, True on and below the diagonal: position i may attend to j <= i."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()
