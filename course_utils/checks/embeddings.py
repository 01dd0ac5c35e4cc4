"""Visible checks for 01_embeddings: one_hot, embed, encode.

These run in the learner's own kernel, so they hold no solution: expectations come from NumPy
itself (``np.eye``, ``np.take``) or are written out by hand. The grader adds its hidden cases in
the hidden part of each test cell; they live with the instructor, not here.
"""

from __future__ import annotations

import numpy as np

from ..forbidden import EMBED_BUILTINS, EMBED_OPS, ONE_HOT_BUILTINS
from ._core import Check, np_all, np_allclose, np_array_equal, np_unique, to_numpy


def check_one_hot(one_hot) -> None:
    c = Check("one_hot", ONE_HOT_BUILTINS)
    ids = np.array([2, 0, 3, 2])
    out = c.call(one_hot, ids, 5)
    c.shape(
        out,
        (4, 5),
        "one_hot(ids, 5) for 4 ids",
        "Expected one row per id and one column per word in the vocabulary.",
    )
    out = to_numpy(out)
    c.that(
        np.issubdtype(out.dtype, np.floating),
        "should return floats (so the result can be multiplied with an embedding matrix); "
        "look at the dtype you create the array with.",
        "shape (4, 5) and a float dtype",
    )
    c.that(
        set(np_unique(out)) <= {0.0, 1.0} and np_all(out.sum(axis=-1) == 1),
        "every row should contain a single 1 and zeros elsewhere.",
        "one 1 per row",
    )
    c.that(
        np_array_equal(out.argmax(axis=-1), ids),
        "the 1 is in the wrong column: row i should have its 1 at column ids[i] "
        "(check for an off-by-one or a transposed result).",
        "the 1 sits at column ids[i]",
    )
    grid = np.array([[1, 4, 0], [3, 3, 2]])
    got = c.call_on("a (2, 3) grid of ids", one_hot, grid, 6)
    c.shape(
        got,
        (2, 3, 6),
        "one_hot on a (2, 3) grid of ids with vocab_size 6",
        "The result should be shaped (*ids.shape, vocab_size): don't flatten the ids.",
    )
    c.close(
        got,
        np.eye(6)[grid],
        "A grid of ids should give a grid of one-hot rows.",
        passed="works for ids of any shape",
    )
    c.done()


def check_embed(embed) -> None:
    c = Check("embed", EMBED_BUILTINS, ops=EMBED_OPS)
    rng = np.random.default_rng(0)
    E = rng.normal(size=(6, 3))
    ids = np.array([4, 1, 1, 5])
    out = c.call(embed, ids, E)
    c.shape(
        out,
        (4, 3),
        "embed(ids, E) with 4 ids and E of shape (6, 3)",
        "Expected one row of E per id: (len(ids), d).",
    )
    unit = np.take(E / np.linalg.norm(E, axis=1, keepdims=True), ids, axis=0)
    if np.shape(out) == unit.shape and np_allclose(to_numpy(out), unit, atol=1e-6):
        c.fail(
            "the rows come out scaled to length 1: an embedding is the row of E as it is, "
            "not normalised (cosine similarity normalises, in notebook 02)."
        )
    c.close(
        out,
        np.take(E, ids, axis=0),
        "Row i of the result should be the embedding of ids[i], i.e. a row of E "
        "(not a column: E has one row per word).",
        passed="picks the rows of E",
    )
    square = rng.normal(size=(3, 3))  # rows and columns both index 0 … 2
    c.close(
        c.call_on("a square E", embed, np.array([2, 0]), square),
        np.take(square, [2, 0], axis=0),
        "With a square E, rows and columns are easy to confuse: look up rows, whatever E's shape.",
        passed="rows, not columns, of a square E",
    )
    grid = np.array([[5, 0, 2], [2, 3, 3]])
    before = E.copy()
    got = c.call_on("a (2, 3) grid of ids", embed, grid, E)
    c.shape(
        got,
        (2, 3, 3),
        "embed on a (2, 3) grid of ids with E of shape (6, 3)",
        "The result should be shaped (*ids.shape, d): don't flatten the ids.",
    )
    c.close(
        got, np.take(E, grid, axis=0), "Each id in the grid becomes its row of E.", passed="ids of any shape"
    )
    c.that(
        np_array_equal(E, before),
        "embed changed E in place; it should only read it "
        "(no `E *= …`, `E[...] = …` or in-place method on E).",
        "leaves E unchanged",
    )
    c.done()


def check_encode(encode) -> None:
    c = Check("encode")
    vocab = {"<unk>": 0, "the": 1, "cat": 2, "sat": 3}
    out = c.call(encode, ["the", "cat", "sat"], vocab)
    c.that(isinstance(out, list), f"should return a list, got {type(out).__name__}.")
    c.that(
        list(out) == [1, 2, 3],
        "known tokens should map to their ids in vocab.",
        "known tokens map to their ids",
    )
    out = c.call(encode, ["the", "dog", "sat"], vocab)
    c.that(
        len(out) == 3,
        "every token needs an id, including unknown ones: the result "
        "should be as long as the input (are you skipping unknown tokens?).",
        "one id per token",
    )
    c.that(
        list(out) == [1, 0, 3],
        "an unknown token should map to the id of unk_token.",
        "unknown tokens map to the <unk> id",
    )
    c.that(
        all(type(i) is int for i in out),
        "the ids should be plain Python ints, not NumPy integers (int() converts one).",
        "plain Python ints",
    )
    # another vocabulary: the unknown token has another name and another id
    bert_like = {"[PAD]": 0, "[UNK]": 1, "the": 2, "cat": 3}
    out = c.call(encode, ["the", "dog"], bert_like, unk_token="[UNK]")
    c.that(
        list(out) == [2, 1],
        f"with vocab {bert_like} and unk_token='[UNK]', ['the', 'dog'] should give [2, 1], "
        f"got {list(out)}: take the unknown id from the unk_token argument and vocab, "
        "without assuming it is '<unk>' or 0.",
        "honours unk_token and its id",
    )
    c.done()
