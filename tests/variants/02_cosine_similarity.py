"""Variants for 02_cosine_similarity: BUGGY ones must fail their grade cell, CORRECT ones pass.

Each source replaces the solution's function of the same name; it runs after the setup cell and
the solution cells, so `np` and the other solutions (`cosine_similarity`,
`cosine_similarity_matrix`, `most_similar`) exist.
"""

BUGGY = {
    "test_cosine_similarity": {
        "raw_dot_product": """
def cosine_similarity(u, v):
    return float(np.dot(u, v))
""",
        "missing_norm_of_v": """
def cosine_similarity(u, v):
    u, v = np.asarray(u, float), np.asarray(v, float)
    return float(u @ v / np.linalg.norm(u))
""",
        "missing_norm_of_u": """
def cosine_similarity(u, v):
    u, v = np.asarray(u, float), np.asarray(v, float)
    return float(u @ v / np.linalg.norm(v))
""",
        "one_minus_cosine": """
def cosine_similarity(u, v):
    u, v = np.asarray(u, float), np.asarray(v, float)
    return float(1 - u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))
""",
        "squared_norms": """
def cosine_similarity(u, v):
    u, v = np.asarray(u, float), np.asarray(v, float)
    return float(u @ v / ((u @ u) * (v @ v)))
""",
        "sum_of_norms": """
def cosine_similarity(u, v):
    u, v = np.asarray(u, float), np.asarray(v, float)
    return float(u @ v / (np.linalg.norm(u) + np.linalg.norm(v)))
""",
        "norm_of_product": """
def cosine_similarity(u, v):
    u, v = np.asarray(u, float), np.asarray(v, float)
    return float(u @ v / np.linalg.norm(u * v))
""",
        "absolute_value": """
def cosine_similarity(u, v):
    u, v = np.asarray(u, float), np.asarray(v, float)
    return float(abs(u @ v) / (np.linalg.norm(u) * np.linalg.norm(v)))
""",
        "elementwise_no_sum": """
def cosine_similarity(u, v):
    u, v = np.asarray(u, float), np.asarray(v, float)
    return u * v / (np.linalg.norm(u) * np.linalg.norm(v))
""",
        "calls_torch": """
import torch
def cosine_similarity(u, v):
    return torch.nn.functional.cosine_similarity(torch.as_tensor(np.asarray(u, float)),
                                                 torch.as_tensor(np.asarray(v, float)), dim=0).item()
""",
        "not_implemented": """
def cosine_similarity(u, v):
    raise NotImplementedError()
""",
    },
    "test_cosine_similarity_matrix": {
        "normalises_columns": """
def cosine_similarity_matrix(A, B):
    A, B = np.asarray(A, float), np.asarray(B, float)
    A = A / np.linalg.norm(A, axis=0, keepdims=True)
    B = B / np.linalg.norm(B, axis=0, keepdims=True)
    return A @ B.T
""",
        "no_normalisation": """
def cosine_similarity_matrix(A, B):
    return np.asarray(A, float) @ np.asarray(B, float).T
""",
        "normalises_only_A": """
def cosine_similarity_matrix(A, B):
    A, B = np.asarray(A, float), np.asarray(B, float)
    return (A / np.linalg.norm(A, axis=1, keepdims=True)) @ B.T
""",
        "frobenius_norm": """
def cosine_similarity_matrix(A, B):
    A, B = np.asarray(A, float), np.asarray(B, float)
    return (A / np.linalg.norm(A)) @ (B / np.linalg.norm(B)).T
""",
        "transposed_result": """
def cosine_similarity_matrix(A, B):
    A, B = np.asarray(A, float), np.asarray(B, float)
    A = A / np.linalg.norm(A, axis=1, keepdims=True)
    B = B / np.linalg.norm(B, axis=1, keepdims=True)
    return B @ A.T
""",
        "norms_without_keepdims": """
def cosine_similarity_matrix(A, B):
    A, B = np.asarray(A, float), np.asarray(B, float)
    return (A @ B.T) / (np.linalg.norm(A, axis=1) * np.linalg.norm(B, axis=1))
""",
        "one_minus_cosine": """
def cosine_similarity_matrix(A, B):
    A, B = np.asarray(A, float), np.asarray(B, float)
    A = A / np.linalg.norm(A, axis=1, keepdims=True)
    B = B / np.linalg.norm(B, axis=1, keepdims=True)
    return 1 - A @ B.T
""",
        "calls_torch": """
import torch
def cosine_similarity_matrix(A, B):
    A, B = torch.as_tensor(np.asarray(A, float)), torch.as_tensor(np.asarray(B, float))
    return torch.nn.functional.cosine_similarity(A[:, None], B[None], dim=-1).numpy()
""",
        "not_implemented": """
def cosine_similarity_matrix(A, B):
    raise NotImplementedError()
""",
    },
    "test_most_similar": {
        "ascending_order": """
def most_similar(query, E, k=5, exclude=()):
    s = cosine_similarity_matrix(np.asarray(query)[None], E)[0]
    s[list(exclude)] = -np.inf
    return np.argsort(s)[:k]
""",
        "dot_instead_of_cosine": """
def most_similar(query, E, k=5, exclude=()):
    s = np.asarray(E) @ np.asarray(query)
    s[list(exclude)] = -np.inf
    return np.argsort(-s)[:k]
""",
        "euclidean_distance": """
def most_similar(query, E, k=5, exclude=()):
    d = np.linalg.norm(np.asarray(E) - np.asarray(query), axis=1)
    d[list(exclude)] = np.inf
    return np.argsort(d)[:k]
""",
        "excludes_after_top_k": """
def most_similar(query, E, k=5, exclude=()):
    s = cosine_similarity_matrix(np.asarray(query)[None], E)[0]
    top = np.argsort(-s)[:k]
    return np.array([i for i in top if i not in exclude], dtype=int)
""",
        "ignores_exclude": """
def most_similar(query, E, k=5, exclude=()):
    s = cosine_similarity_matrix(np.asarray(query)[None], E)[0]
    return np.argsort(-s)[:k]
""",
        "excluded_set_to_zero": """
def most_similar(query, E, k=5, exclude=()):
    s = cosine_similarity_matrix(np.asarray(query)[None], E)[0]
    s[list(exclude)] = 0.0
    return np.argsort(-s)[:k]
""",
        "tuple_index_for_exclude": """
def most_similar(query, E, k=5, exclude=()):
    s = cosine_similarity_matrix(np.asarray(query)[None], E)[0]
    if len(exclude):
        s[exclude] = -np.inf
    return np.argsort(-s)[:k]
""",
        "empty_tuple_index_for_exclude": """
def most_similar(query, E, k=5, exclude=()):
    s = cosine_similarity_matrix(np.asarray(query)[None], E)[0]
    s[exclude] = -np.inf  # with exclude=(), s[()] is every score
    return np.argsort(-s)[:k]
""",
        "excludes_only_first_id": """
def most_similar(query, E, k=5, exclude=()):
    s = cosine_similarity_matrix(np.asarray(query)[None], E)[0]
    if len(exclude):
        s[list(exclude)[0]] = -np.inf
    return np.argsort(-s)[:k]
""",
        "returns_similarities": """
def most_similar(query, E, k=5, exclude=()):
    s = cosine_similarity_matrix(np.asarray(query)[None], E)[0]
    s[list(exclude)] = -np.inf
    return np.sort(s)[::-1][:k]
""",
        "off_by_one_k": """
def most_similar(query, E, k=5, exclude=()):
    s = cosine_similarity_matrix(np.asarray(query)[None], E)[0]
    s[list(exclude)] = -np.inf
    return np.argsort(-s)[1:k + 1]
""",
        "default_k_3": """
def most_similar(query, E, k=3, exclude=()):
    s = cosine_similarity_matrix(np.asarray(query)[None], E)[0]
    s[list(exclude)] = -np.inf
    return np.argsort(-s)[:k]
""",
        "calls_the_reference": """
from course_grading.reference import similarity as _ref
def most_similar(query, E, k=5, exclude=()):
    return _ref.most_similar(query, E, k, exclude)
""",
        "not_implemented": """
def most_similar(query, E, k=5, exclude=()):
    raise NotImplementedError()
""",
    },
    "test_analogy": {
        "sign_flipped": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E)
    return most_similar(E[a] - E[b] + E[c], E, k=k, exclude=(a, b, c))
""",
        "c_minus_b": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E)
    return most_similar(E[a] + E[c] - E[b], E, k=k, exclude=(a, b, c))
""",
        "forgets_exclusions": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E)
    return most_similar(E[b] - E[a] + E[c], E, k=k)
""",
        "excludes_only_c": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E)
    return most_similar(E[b] - E[a] + E[c], E, k=k, exclude=(c,))
""",
        "dot_instead_of_cosine": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E)
    s = E @ (E[b] - E[a] + E[c])
    s[[a, b, c]] = -np.inf
    return np.argsort(-s)[:k]
""",
        "euclidean_distance": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E)
    d = np.linalg.norm(E - (E[b] - E[a] + E[c]), axis=1)
    d[[a, b, c]] = np.inf
    return np.argsort(d)[:k]
""",
        "excludes_after_top_k": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E)
    top = most_similar(E[b] - E[a] + E[c], E, k=k)
    return np.array([i for i in top if i not in (a, b, c)], dtype=int)
""",
        "ignores_k": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E)
    return most_similar(E[b] - E[a] + E[c], E, k=1, exclude=(a, b, c))
""",
        "returns_float_ids": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E)
    return most_similar(E[b] - E[a] + E[c], E, k=k, exclude=(a, b, c)).astype(float)
""",
        "calls_the_reference": """
from course_grading.reference.similarity import analogy as _ref_analogy
def analogy(a, b, c, E, k=1):
    return _ref_analogy(a, b, c, E, k)
""",
        "not_implemented": """
def analogy(a, b, c, E, k=1):
    raise NotImplementedError()
""",
    },
}

CORRECT = {
    "test_cosine_similarity": {
        "python_loops": """
import math
def cosine_similarity(u, v):
    u, v = [float(x) for x in u], [float(x) for x in v]
    dot = sum(a * b for a, b in zip(u, v))
    nu = math.sqrt(sum(a * a for a in u))
    nv = math.sqrt(sum(b * b for b in v))
    return dot / (nu * nv)
""",
        "normalise_then_dot": """
def cosine_similarity(u, v):
    u = np.asarray(u, dtype=float)
    v = np.asarray(v, dtype=float)
    return float(np.dot(u / np.linalg.norm(u), v / np.linalg.norm(v)))
""",
        "einsum_and_sqrt": """
def cosine_similarity(u, v):
    u, v = np.asarray(u, float), np.asarray(v, float)
    return np.einsum("i,i->", u, v) / np.sqrt(np.einsum("i,i->", u, u) * np.einsum("i,i->", v, v))
""",
        "float32_inputs": """
def cosine_similarity(u, v):
    u, v = np.asarray(u, np.float32), np.asarray(v, np.float32)
    return u @ v / (np.linalg.norm(u) * np.linalg.norm(v))
""",
        "clipped_to_range": """
def cosine_similarity(u, v):
    u, v = np.asarray(u, float), np.asarray(v, float)
    return float(np.clip(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)), -1.0, 1.0))
""",
        "warns_and_prints_to_stderr": """
import sys, warnings
def cosine_similarity(u, v):
    warnings.warn("computing a cosine")
    print("debug: cosine", file=sys.stderr)
    u, v = np.asarray(u, float), np.asarray(v, float)
    return float(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)))
""",
    },
    "test_cosine_similarity_matrix": {
        "loop_over_own_cosine": """
def cosine_similarity_matrix(A, B):
    return np.array([[cosine_similarity(a, b) for b in B] for a in A])
""",
        "einsum": """
def cosine_similarity_matrix(A, B):
    A, B = np.asarray(A, float), np.asarray(B, float)
    dots = np.einsum("id,jd->ij", A, B)
    na = np.sqrt(np.einsum("id,id->i", A, A))
    nb = np.sqrt(np.einsum("jd,jd->j", B, B))
    return dots / np.outer(na, nb)
""",
        "broadcasting": """
def cosine_similarity_matrix(A, B):
    A, B = np.asarray(A, float), np.asarray(B, float)
    dots = (A[:, None, :] * B[None, :, :]).sum(-1)
    return dots / (np.linalg.norm(A, axis=1)[:, None] * np.linalg.norm(B, axis=1)[None, :])
""",
        "float32": """
def cosine_similarity_matrix(A, B):
    A, B = np.asarray(A, np.float32), np.asarray(B, np.float32)
    A = A / np.linalg.norm(A, axis=-1, keepdims=True)
    B = B / np.linalg.norm(B, axis=-1, keepdims=True)
    return A @ B.T
""",
        "warns": """
import warnings
def cosine_similarity_matrix(A, B):
    warnings.warn("normalising rows", RuntimeWarning)
    A, B = np.asarray(A, float), np.asarray(B, float)
    return (A @ B.T) / np.outer(np.linalg.norm(A, axis=1), np.linalg.norm(B, axis=1))
""",
    },
    "test_most_similar": {
        "argpartition_then_sort": """
def most_similar(query, E, k=5, exclude=()):
    s = cosine_similarity_matrix(np.asarray(query)[None], E)[0]
    s[list(exclude)] = -np.inf
    top = np.argpartition(-s, k - 1)[:k]
    return top[np.argsort(-s[top])]
""",
        "loop_with_own_cosine": """
def most_similar(query, E, k=5, exclude=()):
    excluded = set(int(i) for i in exclude)
    scored = [(cosine_similarity(query, row), i) for i, row in enumerate(E) if i not in excluded]
    scored.sort(key=lambda p: -p[0])
    return np.array([i for _, i in scored[:k]], dtype=np.int64)
""",
        "argsort_reversed": """
def most_similar(query, E, k=5, exclude=()):
    E = np.asarray(E, dtype=float)
    q = np.asarray(query, dtype=float)
    s = (E @ q) / (np.linalg.norm(E, axis=1) * np.linalg.norm(q))
    for i in exclude:
        s[i] = -np.inf
    return np.argsort(s)[::-1][:k]
""",
        "boolean_mask_of_candidates": """
def most_similar(query, E, k=5, exclude=()):
    E = np.asarray(E, dtype=float)
    s = cosine_similarity_matrix(np.asarray(query, float)[None], E)[0]
    keep = np.ones(len(E), bool)
    keep[list(exclude)] = False
    candidates = np.flatnonzero(keep)
    return candidates[np.argsort(-s[candidates])[:k]]
""",
        "float32_and_list_result": """
def most_similar(query, E, k=5, exclude=()):
    E = np.asarray(E, np.float32)
    q = np.asarray(query, np.float32)
    s = (E / np.linalg.norm(E, axis=1, keepdims=True)) @ (q / np.linalg.norm(q))
    s[list(exclude)] = -np.inf
    return np.argsort(-s)[:k]
""",
        "prints_to_stderr": """
import sys
def most_similar(query, E, k=5, exclude=()):
    print("searching", len(E), "rows", file=sys.stderr)
    s = cosine_similarity_matrix(np.asarray(query)[None], E)[0]
    s[list(exclude)] = -np.inf
    return np.argsort(-s)[:k]
""",
    },
    "test_analogy": {
        "own_cosine_loop": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E, dtype=float)
    t = E[b] - E[a] + E[c]
    scores = np.array([cosine_similarity(t, row) for row in E])
    scores[[a, b, c]] = -np.inf
    return np.argsort(-scores)[:k]
""",
        "einsum_and_argpartition": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E, dtype=float)
    t = E[b] - E[a] + E[c]
    s = np.einsum("vd,d->v", E, t) / (np.linalg.norm(E, axis=1) * np.linalg.norm(t))
    s[[a, b, c]] = -np.inf
    top = np.argpartition(-s, k - 1)[:k]
    return top[np.argsort(-s[top])]
""",
        "target_as_c_plus_step": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E)
    step = E[b] - E[a]
    return np.asarray(most_similar(E[c] + step, E, k=k, exclude={a, b, c}), dtype=int)
""",
        "float32_E": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E, dtype=np.float32)
    return most_similar(E[b] - E[a] + E[c], E, k=k, exclude=[a, b, c])
""",
        "returns_a_list": """
def analogy(a, b, c, E, k=1):
    E = np.asarray(E)
    return [int(i) for i in most_similar(E[b] - E[a] + E[c], E, k=k, exclude=(a, b, c))]
""",
        "warns": """
import warnings
def analogy(a, b, c, E, k=1):
    warnings.warn("analogies are only approximate")
    E = np.asarray(E)
    return most_similar(E[b] - E[a] + E[c], E, k=k, exclude=(a, b, c))
""",
    },
}
