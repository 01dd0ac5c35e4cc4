"""Hidden checks for 01_embeddings: the cases that catch the common mistakes."""

from __future__ import annotations

import numpy as np

from course_grading.reference import embeddings as ref
from course_utils.checks import embeddings as visible
from course_utils.checks.kit import Check, np_array_equal

from ._common import visible_first

ASSIGNMENT = "01_embeddings"
# the course's own solutions are off limits too
_REFERENCE = [
    "course_grading.reference.embeddings.one_hot",
    "course_grading.reference.embeddings.embed",
    "course_grading.reference.embeddings.encode",
]


def check_one_hot(one_hot) -> None:
    visible_first(visible.check_one_hot, one_hot)
    c = Check("one_hot", visible.ONE_HOT_BUILTINS + _REFERENCE, hidden=True)
    got = c.call(one_hot, [0, 1], 3)
    c.close(
        got,
        ref.one_hot([0, 1], 3),
        "A plain Python list of ids should work too.",
        passed="accepts a Python list",
    )
    got = c.call(one_hot, np.array([0, 0, 0]), 2)
    c.close(got, ref.one_hot([0, 0, 0], 2), "Repeated ids give repeated rows.", passed="repeated ids")
    c.done()


def check_embed(embed) -> None:
    visible_first(visible.check_embed, embed)
    c = Check("embed", visible.EMBED_BUILTINS + _REFERENCE, hidden=True, ops=visible.EMBED_OPS)
    rng = np.random.default_rng(10)
    E = rng.normal(size=(7, 3))
    sq = rng.normal(size=(4, 4))
    c.close(
        c.call(embed, np.array([3, 0]), sq),
        ref.embed([3, 0], sq),
        "With a square E, rows and columns are easy to confuse: look up rows.",
        passed="rows, not columns, of a square E",
    )
    grid = np.array([[0, 5], [2, 2], [1, 3]])
    got = c.call(embed, grid, E)
    c.shape(
        got,
        (3, 2, 3),
        "embed on a (3, 2) grid of ids",
        "The result should be shaped (*ids.shape, d): don't flatten the ids.",
    )
    c.close(got, ref.embed(grid, E), "Each id in the grid becomes its row of E.", passed="ids of any shape")
    before = E.copy()
    c.call(embed, np.array([6, 1, 1]), E)
    c.that(
        np_array_equal(E, before), "embed changed E in place; it should only read it.", "leaves E unchanged"
    )
    c.done()


def check_encode(encode) -> None:
    visible_first(visible.check_encode, encode)
    c = Check("encode", _REFERENCE, hidden=True)
    vocab2 = {"a": 0, "b": 1, "[UNK]": 7}
    out = c.call(encode, ["b", "zzz", "a"], vocab2, unk_token="[UNK]")
    c.that(
        list(out) == [1, 7, 0],
        "use the unk_token argument and its id in vocab: it is not always '<unk>' and "
        "its id is not always 0.",
        "honours unk_token and its id",
    )
    out = c.call(encode, [], {"<unk>": 0, "x": 1})
    c.that(list(out) == [], "an empty list of tokens should give an empty list.", "empty input")
    out = c.call(encode, ["cat", "cat"], {"<unk>": 0, "cat": 2})
    c.that(
        all(type(i) is int for i in out),
        "the ids should be plain Python ints (wrap NumPy integers with int()).",
        "plain Python ints",
    )
    c.done()
