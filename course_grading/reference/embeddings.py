"""01_embeddings: from token ids to vectors (NumPy)."""

from __future__ import annotations

import numpy as np


def one_hot(ids, vocab_size: int) -> np.ndarray:
    """One-hot rows: shape ``(*ids.shape, vocab_size)``, float."""
    ids = np.asarray(ids)
    return (ids[..., None] == np.arange(vocab_size)).astype(np.float64)


def embed(ids, E: np.ndarray) -> np.ndarray:
    """Row lookup ``E[ids]``: shape ``(*ids.shape, d)``. Equals ``one_hot(ids, V) @ E``."""
    return np.asarray(E)[np.asarray(ids)]


def encode(tokens, vocab: dict, unk_token: str = "<unk>") -> list[int]:
    """Token strings to ids; tokens outside ``vocab`` get the id of ``unk_token``."""
    unk = vocab[unk_token]
    return [int(vocab.get(t, unk)) for t in tokens]
