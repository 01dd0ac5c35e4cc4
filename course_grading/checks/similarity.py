"""Hidden checks for 02_cosine_similarity, and the expected outputs its visible checks store."""

from __future__ import annotations

import numpy as np

from course_grading.reference import similarity as ref
from course_utils.checks import similarity as visible
from course_utils.checks.kit import Check, CheckFailed, to_numpy

from ._common import hidden_check

ASSIGNMENT = visible.ASSIGNMENT
# the course's own solutions are off limits too (an earlier exercise may be reused only in
# the learner's own version)
_FORBIDDEN = visible.COSINE_BUILTINS + [
    "course_grading.reference.similarity.cosine_similarity",
    "course_grading.reference.similarity.cosine_similarity_matrix",
    "course_grading.reference.similarity.most_similar",
    "course_grading.reference.similarity.analogy",
]


_cosine = hidden_check(visible, _FORBIDDEN, visible.COSINE_OPS)  # every check of this notebook


def _vectors_with_lengths(seed: int):
    """Unit directions scaled very differently, so dot product and cosine disagree."""
    rng = np.random.default_rng(seed)
    E = rng.normal(size=(12, 6))
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    return E * rng.uniform(0.2, 5.0, size=(12, 1)), rng


def expected_outputs() -> dict[str, np.ndarray]:
    """The inputs and expected outputs of the visible checks (course_utils.checks.similarity)."""
    rng = np.random.default_rng(2)
    A, B = rng.normal(size=(3, 4)), rng.normal(size=(5, 4))
    E, rng = _vectors_with_lengths(3)
    q = rng.normal(size=6)
    return {
        "king_queen": np.float64(ref.cosine_similarity(visible.KING, visible.QUEEN)),
        "matrix_A": A,
        "matrix_B": B,
        "matrix_expected": ref.cosine_similarity_matrix(A, B),
        "similar_E": E,
        "similar_query": q,
        "similar_ids": ref.most_similar(q, E, k=3),
    }


@_cosine
def check_cosine_similarity(c: Check, cosine_similarity) -> None:
    rng = np.random.default_rng(11)
    u, v = rng.normal(size=7), rng.normal(size=7)
    c.close(
        c.call(cosine_similarity, 5.0 * u, v),
        ref.cosine_similarity(u, v),
        "cosine should not change when a vector is scaled: normalise both u and v.",
        passed="ignores the vectors' lengths",
    )
    c.close(
        c.call(cosine_similarity, u, 0.1 * v),
        ref.cosine_similarity(u, v),
        "cosine should not change when a vector is scaled: normalise both u and v.",
        passed="ignores the other vector's length too",
    )
    c.close(
        c.call(cosine_similarity, u, -u),
        -1.0,
        "opposite vectors have cosine -1 (similarity, not distance).",
        passed="opposite vectors give -1",
    )
    c.close(
        c.call(cosine_similarity, [1, 2, 2], [2, 1, 2]),
        8 / 9,
        "plain Python lists of ints should work too (convert with np.asarray).",
        passed="lists of ints",
    )


@_cosine
def check_cosine_similarity_matrix(c: Check, cosine_similarity_matrix) -> None:
    rng = np.random.default_rng(12)
    A, B = rng.normal(size=(3, 4)), rng.normal(size=(5, 4))
    A2 = A * np.array([[0.1], [10.0], [3.0]])
    B2 = B * np.array([[7.0], [0.5], [1.0], [2.0], [0.01]])
    c.close(
        c.call(cosine_similarity_matrix, A2, B2),
        ref.cosine_similarity_matrix(A, B),
        "rows of different lengths must not matter: normalise each row of A and of B.",
        passed="ignores row lengths",
    )
    C = rng.normal(size=(4, 4))
    D = rng.normal(size=(4, 4)) * np.array([[1.0, 9.0, 0.2, 3.0]])
    c.close(
        c.call(cosine_similarity_matrix, C, D),
        ref.cosine_similarity_matrix(C, D),
        "with square inputs, normalising columns instead of rows (axis 0 vs 1) gives wrong values.",
        passed="normalises rows, not columns",
    )
    got = c.call(cosine_similarity_matrix, A, A)
    c.close(
        np.diag(to_numpy(got)),
        np.ones(3),
        "a row has cosine 1 with itself.",
        passed="diagonal of cos(A, A) is 1",
    )


@_cosine
def check_most_similar(c: Check, most_similar) -> None:
    E, rng = _vectors_with_lengths(13)
    q = rng.normal(size=6)
    target = E[4] / np.linalg.norm(E[4]) * 0.3
    got = np.asarray(c.call(most_similar, target, E, k=2, exclude=(4,)))
    c.that(4 not in got.tolist(), "an id in exclude was returned.", "never returns excluded ids")
    c.that(
        len(got) == 2,
        f"with exclude, still return k ids (got {len(got)}): drop the "
        "excluded ids before taking the top k, not after.",
        "still k ids with exclude",
    )
    c.that(
        got.tolist() == ref.most_similar(target, E, k=2, exclude=(4,)).tolist(),
        "wrong ids once exclude is used.",
        "right ids with exclude",
    )
    best3 = [int(i) for i in ref.most_similar(q, E, k=3)]
    want = ref.most_similar(q, E, k=3, exclude=best3).tolist()
    for excl in (tuple(best3), list(best3), set(best3)):
        try:
            got = np.asarray(c.call(most_similar, q, E, k=3, exclude=excl))
        except CheckFailed as exc:
            if "IndexError" in str(exc):
                c.fail(
                    f"raised an IndexError with exclude={excl!r}. NumPy reads a tuple "
                    "index as one index per axis; turn exclude into a list first."
                )
            raise
        c.that(
            not set(got.tolist()) & set(best3),
            f"with exclude={excl!r} an excluded id came back: every id in exclude must "
            "be left out, not just the first.",
        )
        c.that(got.tolist() == want, f"wrong ids with exclude={excl!r}.")
    c.ok("several excluded ids, given as a tuple, a list or a set")
    # every row left after the exclusion points away from the query
    F = np.array([[1.0, 0.0], [-1.0, 0.1], [-1.0, -0.2], [-0.5, -1.0]])
    got = np.asarray(c.call(most_similar, np.array([2.0, 0.0]), F, k=2, exclude=(0,)))
    c.that(
        0 not in got.tolist(),
        "an excluded id came back when all the other cosines are negative: give excluded "
        "ids a score that no cosine can fall below (0 is not enough).",
        "excluded ids lose even against negative cosines",
    )
    c.that(
        got.tolist() == ref.most_similar(np.array([2.0, 0.0]), F, k=2, exclude=(0,)).tolist(),
        "wrong ids when every candidate has a negative cosine: still highest first.",
    )
    got = np.asarray(c.call(most_similar, q, E, k=5))
    c.that(
        got.tolist() == ref.most_similar(q, E, k=5).tolist(),
        "k=5 gives wrong ids: take exactly the k highest cosines.",
        "k=5",
    )
    got = np.asarray(c.call(most_similar, q, E))
    c.that(len(got) == 5, "the default k is 5.", "default k=5")


@_cosine
def check_analogy(c: Check, analogy) -> None:
    rng = np.random.default_rng(5)
    E2 = rng.normal(size=(30, 8))
    for a, b, cc in [(0, 1, 2), (5, 9, 11), (3, 20, 7)]:
        got = np.asarray(c.call(analogy, a, b, cc, E2, k=4)).tolist()
        want = ref.analogy(a, b, cc, E2, k=4).tolist()
        c.that(
            len(got) == 4,
            f"with k=4 return 4 ids (got {len(got)}): pass k on, and "
            "exclude a, b, c before taking the top k, not after.",
        )
        c.that(not {a, b, cc} & set(got), "a, b and c must never be answers: exclude them.")
        c.that(
            got == want,
            "wrong ids for a random analogy: nearest by cosine to "
            "E[b] - E[a] + E[c], most similar first (is the sign of a or b flipped?).",
        )
    c.ok("excludes a, b, c; right ids, right order, right signs")
    # without exclusion, b itself would win here
    E3 = np.array([[1.0, 0.0], [0.0, 1.0], [0.9, 0.1], [-0.8, 0.9], [0.5, -1.0]])
    got = np.atleast_1d(np.asarray(c.call(analogy, 0, 1, 2, E3)))
    c.that(
        int(got[0]) not in (0, 1, 2),
        "one of the input words came back: exclude a, b, c.",
        "inputs excluded even when they are nearest",
    )
