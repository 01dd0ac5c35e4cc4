"""05_positional_encoding: the sinusoidal table and the module that adds it.

    PositionalEncoding  pe (buffer, (max_len, d_model), not saved in the state_dict), dropout

The table is a *non-persistent* buffer: it follows ``.to(device)``/``.double()`` like a weight,
gets no gradient, and is left out of ``state_dict()`` because it is a fixed function of
(max_len, d_model): checkpoints stay small and load into a model built with another max_len.
"""

from __future__ import annotations

import torch
from torch import nn


def sinusoidal_positional_encoding(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """(max_len, d_model): PE[pos, 2i] = sin(pos / base^(2i/d_model)), PE[pos, 2i+1] = cos(same).

    Positions start at 0. Computed in float64, returned in torch's default dtype (float32).
    ``base`` is 10000 in the paper (and in the contract); it is a keyword only for the demos.
    """
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d/2),): 0, 2, 4, ...
    angle = pos / base ** (two_i / d_model)  # (max_len, ceil(d/2)), one frequency per pair
    pe = torch.empty(max_len, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)  # even columns
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])  # odd columns (one fewer when d is odd)
    return pe.to(torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    """x + PE[:seq], then dropout: x (b, seq, d_model) -> (b, seq, d_model)."""

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.register_buffer(
            "pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False
        )  # (max_len, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(x + self.pe[: x.size(1)])  # (b, seq, d_model)
