"""Visible checks for 02_cosine_similarity.

These run in the learner's own kernel, so they hold no solution: NumPy has no cosine, so the
expected values are either known exactly (a vector with itself, perpendicular vectors, a
hand-made analogy) or stored with the package (``course_utils/data/expected/
02_cosine_similarity.npz``, inputs included, computed by the instructor's tools). The grader adds
its hidden cases in the hidden part of each test cell; they live with the instructor, not here.
"""

from __future__ import annotations

import numpy as np

from ..forbidden import COSINE_BUILTINS, COSINE_OPS
from ._core import Check, CheckFailed, np_allclose, stored
from ._exercise import exercise_check

ASSIGNMENT = "02_cosine_similarity"

KING = [0.9, 0.8, 0.7, 0.1, 0.2]  # the notebook's toy vectors
QUEEN = [0.9, 0.8, 0.7, 0.1, 0.7]


_cosine_check = exercise_check(COSINE_BUILTINS, COSINE_OPS)  # every check of this notebook


@_cosine_check
def check_cosine_similarity(c: Check, cosine_similarity) -> None:
    got = c.call(cosine_similarity, np.array(KING), np.array(QUEEN))
    c.that(np.ndim(got) == 0, f"should return one number, got an array of shape {np.shape(got)}.")
    c.that(
        -1.0 - 1e-9 <= float(got) <= 1.0 + 1e-9,
        f"a cosine lies in [-1, 1], got {float(got):.4f}: divide the dot product by BOTH norms.",
        "returns one number in [-1, 1]",
    )
    cos, u, v = float(stored(ASSIGNMENT, "king_queen")), np.array(KING), np.array(QUEEN)
    nu, nv = np.linalg.norm(u), np.linalg.norm(v)
    for wrong, message in (
        (1 - cos, "this is 1 - cosine (a distance): return the cosine itself."),
        (
            cos / (nu * nv),
            "the dot product is divided by the SQUARED norms "
            "(u·u and v·v): a norm is the square root of that.",
        ),
        (
            cos * nu * nv / (nu + nv),
            "the dot product is divided by the SUM of the norms: divide by their product.",
        ),
    ):
        if np_allclose(float(got), wrong, atol=1e-9):
            c.fail(message)
    c.close(
        got,
        cos,
        "for the toy king/queen vectors: is the formula u·v / (|u| |v|)?",
        atol=1e-6,
        passed="king vs queen from the toy vectors",
    )
    u = np.array([3.0, 4.0])
    c.close(
        c.call(cosine_similarity, u, u), 1.0, "a vector has cosine 1 with itself.", passed="cos(u, u) = 1"
    )
    c.close(
        c.call(cosine_similarity, np.array([1.0, 0.0]), np.array([0.0, 2.0])),
        0.0,
        "perpendicular vectors have cosine 0.",
        passed="perpendicular vectors give 0",
    )
    w = np.array([1.0, -2.0, 0.5])
    c.close(
        c.call(cosine_similarity, w, -2.0 * w),
        -1.0,
        "opposite vectors have cosine -1: a similarity keeps its sign (no abs, no 1 - …).",
        passed="opposite vectors give -1",
    )


@_cosine_check
def check_cosine_similarity_matrix(c: Check, cosine_similarity_matrix) -> None:
    A, B = stored(ASSIGNMENT, "matrix_A"), stored(ASSIGNMENT, "matrix_B")
    got = c.call(cosine_similarity_matrix, A, B)
    c.shape(
        got,
        (3, 5),
        "cosine_similarity_matrix(A, B) for A (3, 4) and B (5, 4)",
        "Entry [i, j] compares row i of A with row j of B.",
    )
    want = stored(ASSIGNMENT, "matrix_expected")
    rows = lambda M: M / np.linalg.norm(M, axis=1, keepdims=True)  # noqa: E731
    cols = lambda M: M / np.linalg.norm(M, axis=0, keepdims=True)  # noqa: E731
    for wrong, message in (
        (1 - want, "these are 1 - cosine (distances): return the cosines themselves."),
        (A @ B.T, "the rows are not normalised: these are the raw dot products."),
        (rows(A) @ B.T, "only A's rows are normalised: B's rows need it too."),
        (A @ rows(B).T, "only B's rows are normalised: A's rows need it too."),
        (
            cols(A) @ cols(B).T,
            "the COLUMNS are normalised (axis=0): each row is one vector, so normalise along axis=1.",
        ),
        (
            A / np.linalg.norm(A) @ (B / np.linalg.norm(B)).T,
            "A and B are each divided by one norm of the whole matrix: every row needs its own norm.",
        ),
    ):
        if np.shape(got) == want.shape and np_allclose(np.asarray(got, float), wrong, atol=1e-6):
            c.fail(message)
    c.close(
        got,
        want,
        "entry [i, j] should be the cosine of A[i] and B[j]: normalise every ROW of both "
        "A and B (axis=1) before the matrix product.",
        passed="matches pairwise cosines",
    )


@_cosine_check
def check_most_similar(c: Check, most_similar) -> None:
    # unit directions scaled very differently, so that dot product and cosine disagree
    E, q = stored(ASSIGNMENT, "similar_E"), stored(ASSIGNMENT, "similar_query")
    got = np.asarray(c.call(most_similar, q, E, k=3))
    c.shape(got, (3,), "most_similar(query, E, k=3)", "Return the ids of the k best rows.")
    c.that(
        np.issubdtype(got.dtype, np.integer),
        "should return row ids (integers), not similarities.",
        "returns k integer ids",
    )
    want = stored(ASSIGNMENT, "similar_ids").tolist()
    if set(got.tolist()) != set(want):  # right with a list? Then the empty tuple was the index
        with_list = np.asarray(c.call(most_similar, q, E, k=3, exclude=[])).tolist()
        c.that(
            with_list != want,
            "wrong rows with the default exclude=(), right ones with "
            "exclude=[]: indexing with an empty tuple, scores[()], selects EVERY score, so "
            "all of them were excluded. Turn exclude into a list first.",
        )
    c.that(
        set(got.tolist()) == set(want),
        "these are not the k most cosine-similar rows: rank by cosine (not the raw dot "
        "product, which favours long vectors), highest first.",
        "finds the k nearest rows",
    )
    c.that(got.tolist() == want, "right rows, wrong order: most similar first.", "most similar first")

    # 2-D rows at known angles from the query (along the x axis), of very different lengths:
    # by cosine the rows rank 0, 1, 2, … (smallest angle first); 4, 5, 6 point away from it.
    degrees = np.array([10.0, 25.0, 50.0, 80.0, 120.0, 150.0, 170.0])
    lengths = np.array([3.0, 0.5, 4.0, 1.0, 2.0, 0.3, 1.5])
    rad = np.radians(degrees)
    F = lengths[:, None] * np.stack([np.cos(rad), np.sin(rad)], axis=1)  # (7, 2)
    x_axis = np.array([2.0, 0.0])
    for exclude in ((1, 0), [1, 0], {0, 1}):
        try:
            got = np.asarray(c.call(most_similar, x_axis, F, k=2, exclude=exclude))
        except CheckFailed as exc:
            if "IndexError" in str(exc):
                c.fail(
                    f"raised an IndexError with exclude={exclude!r}. NumPy reads a tuple index "
                    "as one index per axis, and a set is no index at all; turn exclude into a "
                    "list first."
                )
            raise
        ids = got.tolist()
        c.that(
            not set(ids) & {0, 1},
            f"with exclude={exclude!r} an excluded id came back "
            f"({ids}): every id in exclude must be left out, not just the first.",
        )
        c.that(
            len(ids) == 2,
            f"with k=2 and exclude={exclude!r} you returned {len(ids)} ids: "
            "make the excluded ids impossible to pick BEFORE taking the top k, so that k "
            "ids still come back.",
        )
        c.that(
            ids == [2, 3],
            f"with exclude={exclude!r}, k=2: expected the two rows at the smallest angles left, got {ids}.",
        )
    c.ok("exclude as a tuple, a list or a set; still k ids")
    got = np.asarray(c.call(most_similar, x_axis, F, k=2, exclude=(0, 1, 2, 3))).tolist()
    c.that(
        not set(got) & {0, 1, 2, 3},
        f"an excluded id came back ({got}) when every row left "
        "points away from the query (negative cosines): give excluded ids a score that no "
        "cosine can fall below (0 is not enough).",
    )
    c.that(
        got == [4, 5],
        f"with every candidate at a negative cosine, still take the highest "
        f"first (expected the rows at 120° and 150°), got {got}.",
        "excluded ids lose even against negative cosines",
    )
    got = np.asarray(c.call(most_similar, x_axis, F))
    c.that(len(got) == 5, f"without k, return 5 ids (the default k=5), got {len(got)}.", "default k=5")


@_cosine_check
def check_analogy(c: Check, analogy) -> None:
    # a toy world: a=man, b=king, c=woman; queen = king - man + woman
    E = np.array(
        [
            [1.0, 0.0, 0.2],  # 0 man
            [1.0, 1.0, 0.2],  # 1 king
            [0.0, 1.0, 0.2],  # 2 woman
            [0.1, 2.0, 0.2],  # 3 queen: nearest to king - man + woman = (0, 2, 0.2)
            [0.0, 0.0, 1.0],  # 4 nearest to the sign-flipped man - king + woman = (0, 0, 0.2)
            [-1.0, 0.2, 0.0],  # 5
        ]
    )
    got = np.atleast_1d(np.asarray(c.call(analogy, 0, 1, 2, E)))
    c.that(len(got) == 1, f"with k=1 return one id (got {len(got)}).", "k=1 gives one id")
    c.that(np.issubdtype(got.dtype, np.integer), "return ids as integers.")
    c.that(
        int(got[0]) == 3,
        "'man is to king as woman is to ?' should be queen (id 3) here. "
        "The target vector starts from king (b), takes man (a) away and adds woman (c): "
        "check the signs.",
        "king - man + woman",
    )
    got = np.atleast_1d(np.asarray(c.call(analogy, 0, 1, 2, E, k=2))).tolist()
    c.that(
        len(got) == 2,
        f"with k=2 return 2 ids (got {len(got)}): pass k on, and exclude "
        "a, b, c before taking the top k, not after.",
    )
    c.that(
        got == [3, 5],
        f"with k=2 the two best answers here are ids 3 and 5, best first; got {got}.",
        "k=2 gives the two best, best first",
    )

    # another world, with traps: b itself is nearest to E[b] - E[a] + E[c] = (0.8, 1.2, 0);
    # row 4 is long (it wins by dot product), row 5 is near the target point (it wins by
    # distance); by cosine, among the rows that are not a, b or c, row 3 wins.
    W = np.array(
        [
            [0.2, 0.0, 0.0],  # 0 a
            [1.0, 1.0, 0.0],  # 1 b
            [0.0, 0.2, 0.0],  # 2 c
            [1.0, 2.6, 0.3],  # 3 the answer
            [9.0, -1.0, 0.0],  # 4 long
            [0.5, 1.5, 0.8],  # 5 near the target point
            [0.0, 0.0, 1.0],  # 6
        ]
    )
    answer = int(np.atleast_1d(np.asarray(c.call(analogy, 0, 1, 2, W)))[0])  # a, b, c = 0, 1, 2
    c.that(
        answer not in range(3),
        f"the answer was input {answer} (one of a, b, c), which here "
        "is nearer to the target than any other row: leave a, b and c out of the search.",
        "inputs excluded even when they are nearest",
    )
    c.that(
        answer != 4,
        "the answer was the longest row, not the best-aligned one: rank by "
        "cosine, not by the raw dot product.",
    )
    c.that(
        answer != 5,
        "the answer was the row nearest to the target POINT: rank by cosine "
        "(direction), not by Euclidean distance.",
    )
    c.that(
        answer == 3,
        f"expected id 3 here, got {answer}: the row nearest by cosine to the "
        "target vector (king - man + woman), a, b and c excluded.",
        "by cosine, not dot product or distance",
    )
