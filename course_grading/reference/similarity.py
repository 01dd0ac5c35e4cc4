"""02_cosine_similarity: comparing vectors by angle (NumPy)."""

from __future__ import annotations

import numpy as np


def cosine_similarity(u, v) -> float:
    """cos(theta) = u.v / (|u| |v|), a float in [-1, 1]."""
    u, v = np.asarray(u, dtype=np.float64), np.asarray(v, dtype=np.float64)
    return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))


def cosine_similarity_matrix(A, B) -> np.ndarray:
    """Cosine of every row of A with every row of B: shape ``(len(A), len(B))``."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    A = A / np.linalg.norm(A, axis=1, keepdims=True)
    B = B / np.linalg.norm(B, axis=1, keepdims=True)
    return A @ B.T


def most_similar(query, E, k: int = 5, exclude=()) -> np.ndarray:
    """Ids of the ``k`` rows of ``E`` most cosine-similar to ``query``, best first."""
    sims = cosine_similarity_matrix(np.asarray(query)[None, :], E)[0]
    sims[list(exclude)] = -np.inf
    order = np.argsort(-sims, kind="stable")
    return order[:k]


def analogy(a: int, b: int, c: int, E, k: int = 1) -> np.ndarray:
    """ "a is to b as c is to ?": the k ids nearest to ``E[b] - E[a] + E[c]``, not a, b or c."""
    E = np.asarray(E)
    target = E[b] - E[a] + E[c]
    return most_similar(target, E, k=k, exclude=(a, b, c)).astype(np.int64)
