"""Checks for 01_embeddings: one_hot, embed, encode."""
from __future__ import annotations

import numpy as np

from course_grading.reference import embeddings as ref
from ._core import Check, to_numpy


def check_one_hot(one_hot, hidden: bool = False) -> None:
    c = Check("one_hot", forbidden=["course_grading.reference.embeddings.one_hot",
                                    "torch.nn.functional.one_hot"], hidden=hidden)
    ids = np.array([2, 0, 3, 2])
    out = c.call(one_hot, ids, 5)
    c.shape(out, (4, 5), "one_hot(ids, 5) for 4 ids",
            "Expected one row per id and one column per word in the vocabulary.")
    out = to_numpy(out)
    c.that(np.issubdtype(out.dtype, np.floating),
           "should return floats (so the result can be multiplied with an embedding matrix); "
           "look at the dtype you create the array with.", "shape (4, 5) and a float dtype")
    c.that(set(np.unique(out)) <= {0.0, 1.0} and np.all(out.sum(axis=-1) == 1),
           "every row should contain a single 1 and zeros elsewhere.", "one 1 per row")
    c.that(np.array_equal(out.argmax(axis=-1), ids),
           "the 1 is in the wrong column: row i should have its 1 at column ids[i] "
           "(check for an off-by-one or a transposed result).", "the 1 sits at column ids[i]")
    grid = np.array([[1, 4, 0], [3, 3, 2]])
    got = c.call_on("a (2, 3) grid of ids", one_hot, grid, 6)
    c.shape(got, (2, 3, 6), "one_hot on a (2, 3) grid of ids with vocab_size 6",
            "The result should be shaped (*ids.shape, vocab_size): don't flatten the ids.")
    c.close(got, ref.one_hot(grid, 6), "A grid of ids should give a grid of one-hot rows.",
            passed="works for ids of any shape")
    if hidden:
        got = c.call(one_hot, [0, 1], 3)
        c.close(got, ref.one_hot([0, 1], 3), "A plain Python list of ids should work too.",
                passed="accepts a Python list")
        got = c.call(one_hot, np.array([0, 0, 0]), 2)
        c.close(got, ref.one_hot([0, 0, 0], 2), "Repeated ids give repeated rows.",
                passed="repeated ids")
    c.done()


def check_embed(embed, hidden: bool = False) -> None:
    c = Check("embed", forbidden=["course_grading.reference.embeddings.embed",
                                  "torch.nn.functional.embedding"], hidden=hidden)
    rng = np.random.default_rng(0)
    E = rng.normal(size=(6, 3))
    ids = np.array([4, 1, 1, 5])
    out = c.call(embed, ids, E)
    c.shape(out, (4, 3), "embed(ids, E) with 4 ids and E of shape (6, 3)",
            "Expected one row of E per id: (len(ids), d).")
    c.close(out, ref.embed(ids, E),
            "Row i of the result should be the embedding of ids[i], i.e. a row of E "
            "(not a column: E has one row per word).", passed="picks the rows of E")
    if hidden:
        sq = rng.normal(size=(4, 4))
        c.close(c.call(embed, np.array([3, 0]), sq), ref.embed([3, 0], sq),
                "With a square E, rows and columns are easy to confuse: look up rows.",
                passed="rows, not columns, of a square E")
        grid = np.array([[0, 5], [2, 2], [1, 3]])
        got = c.call(embed, grid, E)
        c.shape(got, (3, 2, 3), "embed on a (3, 2) grid of ids",
                "The result should be shaped (*ids.shape, d): don't flatten the ids.")
        c.close(got, ref.embed(grid, E), "Each id in the grid becomes its row of E.",
                passed="ids of any shape")
        before = E.copy()
        c.call(embed, ids, E)
        c.that(np.array_equal(E, before), "embed changed E in place; it should only read it.",
               "leaves E unchanged")
    c.done()


def check_encode(encode, hidden: bool = False) -> None:
    c = Check("encode", forbidden=["course_grading.reference.embeddings.encode"], hidden=hidden)
    vocab = {"<unk>": 0, "the": 1, "cat": 2, "sat": 3}
    out = c.call(encode, ["the", "cat", "sat"], vocab)
    c.that(isinstance(out, list), f"should return a list, got {type(out).__name__}.")
    c.that(list(out) == [1, 2, 3], "known tokens should map to their ids in vocab.",
           "known tokens map to their ids")
    out = c.call(encode, ["the", "dog", "sat"], vocab)
    c.that(len(out) == 3, "every token needs an id, including unknown ones: the result "
           "should be as long as the input (are you skipping unknown tokens?).",
           "one id per token")
    c.that(list(out) == [1, 0, 3], "an unknown token should map to the id of unk_token.",
           "unknown tokens map to the <unk> id")
    if hidden:
        vocab2 = {"a": 0, "b": 1, "[UNK]": 7}
        out = c.call(encode, ["b", "zzz", "a"], vocab2, unk_token="[UNK]")
        c.that(list(out) == [1, 7, 0],
               "use the unk_token argument and its id in vocab: it is not always '<unk>' and "
               "its id is not always 0.", "honours unk_token and its id")
        out = c.call(encode, [], vocab)
        c.that(list(out) == [], "an empty list of tokens should give an empty list.",
               "empty input")
        out = c.call(encode, ["cat", "cat"], vocab)
        c.that(all(type(i) is int for i in out),
               "the ids should be plain Python ints (wrap NumPy integers with int()).",
               "plain Python ints")
    c.done()
