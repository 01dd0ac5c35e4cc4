"""Visible checks for 02_cosine_similarity.

These run in the learner's own kernel, so they hold no solution: NumPy has no cosine, so the
expected values are either known exactly (a vector with itself, perpendicular vectors, a
hand-made analogy) or stored with the package (``course_utils/data/expected/
02_cosine_similarity.npz``, inputs included, computed by the instructor's tools). The grader adds
its hidden cases in the hidden part of each test cell; they live with the instructor, not here.
"""
from __future__ import annotations

import numpy as np

from ._core import Check, stored

ASSIGNMENT = "02_cosine_similarity"
# What the exercises ask the learner to build, as PyTorch ships it.
COSINE_BUILTINS = ["torch.nn.functional.cosine_similarity", "torch.cosine_similarity"]
COSINE_OPS = ["cosine_similarity"]

KING = [0.9, 0.8, 0.7, 0.1, 0.2]  # the notebook's toy vectors
QUEEN = [0.9, 0.8, 0.7, 0.1, 0.7]


def check_cosine_similarity(cosine_similarity) -> None:
    c = Check("cosine_similarity", COSINE_BUILTINS, ops=COSINE_OPS)
    got = c.call(cosine_similarity, np.array(KING), np.array(QUEEN))
    c.that(np.ndim(got) == 0, f"should return one number, got an array of shape {np.shape(got)}.")
    c.that(-1.0 - 1e-9 <= float(got) <= 1.0 + 1e-9,
           f"a cosine lies in [-1, 1], got {float(got):.4f}: divide the dot product by BOTH norms.",
           "returns one number in [-1, 1]")
    c.close(got, stored(ASSIGNMENT, "king_queen"),
            "for the toy king/queen vectors: is the formula u·v / (|u| |v|)?",
            atol=1e-6, passed="king vs queen from the toy vectors")
    u = np.array([3.0, 4.0])
    c.close(c.call(cosine_similarity, u, u), 1.0,
            "a vector has cosine 1 with itself.", passed="cos(u, u) = 1")
    c.close(c.call(cosine_similarity, np.array([1.0, 0.0]), np.array([0.0, 2.0])), 0.0,
            "perpendicular vectors have cosine 0.", passed="perpendicular vectors give 0")
    c.done()


def check_cosine_similarity_matrix(cosine_similarity_matrix) -> None:
    c = Check("cosine_similarity_matrix", COSINE_BUILTINS, ops=COSINE_OPS)
    A, B = stored(ASSIGNMENT, "matrix_A"), stored(ASSIGNMENT, "matrix_B")
    got = c.call(cosine_similarity_matrix, A, B)
    c.shape(got, (3, 5), "cosine_similarity_matrix(A, B) for A (3, 4) and B (5, 4)",
            "Entry [i, j] compares row i of A with row j of B.")
    c.close(got, stored(ASSIGNMENT, "matrix_expected"),
            "entry [i, j] should be the cosine of A[i] and B[j]: normalise every ROW of both "
            "A and B (axis=1) before the matrix product.", passed="matches pairwise cosines")
    c.done()


def check_most_similar(most_similar) -> None:
    c = Check("most_similar", COSINE_BUILTINS, ops=COSINE_OPS)
    # unit directions scaled very differently, so that dot product and cosine disagree
    E, q = stored(ASSIGNMENT, "similar_E"), stored(ASSIGNMENT, "similar_query")
    got = np.asarray(c.call(most_similar, q, E, k=3))
    c.shape(got, (3,), "most_similar(query, E, k=3)", "Return the ids of the k best rows.")
    c.that(np.issubdtype(got.dtype, np.integer),
           "should return row ids (integers), not similarities.", "returns k integer ids")
    want = stored(ASSIGNMENT, "similar_ids").tolist()
    c.that(set(got.tolist()) == set(want),
           "these are not the k most cosine-similar rows: rank by cosine (not the raw dot "
           "product, which favours long vectors), highest first.", "finds the k nearest rows")
    c.that(got.tolist() == want, "right rows, wrong order: most similar first.",
           "most similar first")
    c.done()


def check_analogy(analogy) -> None:
    c = Check("analogy", COSINE_BUILTINS, ops=COSINE_OPS)
    # a toy world: a=man, b=king, c=woman; queen = king - man + woman
    E = np.array([
        [1.0, 0.0, 0.2],   # 0 man
        [1.0, 1.0, 0.2],   # 1 king
        [0.0, 1.0, 0.2],   # 2 woman
        [0.1, 2.0, 0.2],   # 3 queen: nearest to king - man + woman = (0, 2, 0.2)
        [0.0, 0.0, 1.0],   # 4 nearest to the sign-flipped man - king + woman = (0, 0, 0.2)
        [-1.0, 0.2, 0.0],  # 5
    ])
    got = np.atleast_1d(np.asarray(c.call(analogy, 0, 1, 2, E)))
    c.that(len(got) == 1, f"with k=1 return one id (got {len(got)}).", "k=1 gives one id")
    c.that(np.issubdtype(got.dtype, np.integer), "return ids as integers.")
    c.that(int(got[0]) == 3, "'man is to king as woman is to ?' should be queen (id 3) here. "
           "The target vector is E[b] - E[a] + E[c]; check the signs.", "king - man + woman")
    c.done()

