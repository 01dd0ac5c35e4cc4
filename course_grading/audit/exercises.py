"""What the audit re-runs: for every graded function and class, how to draw fresh inputs.

``EXERCISES[assignment][grade_id]`` is an :class:`Exercise`: the contract function or class, the
reference it is compared with, and a function that draws its inputs from a random generator
(seeded from a secret made at run time).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .wire import Gen, Lookup, Prefix, T, ToyModel


@dataclass
class Init:
    """How a class under audit is built: constructor arguments, then the reference's own
    parameters (drawn at random from the audit's seed) loaded into it by name."""

    args: tuple = ()
    kwargs: dict = field(default_factory=dict)


@dataclass
class Exercise:
    """One audited grade cell: the contract function or class, and how to draw its inputs.

    For a function, ``inputs(rng)`` gives a list of (args, kwargs). For a class
    (``kind="module"``) it gives (Init, args, kwargs): the class is built with Init, given
    the reference's parameters by name, put in eval mode and called with (args, kwargs).
    With ``compare="support"`` (sampling) the reference gives the filtered logits (its
    ``generator`` argument dropped) and every sampled id must be one they keep.
    """

    function: str
    reference: str  # "module.name" in course_grading.reference
    inputs: Callable
    compare: str = "close"  # "close" | "exact" | "ids" | "support"
    kind: str = "function"  # "function" | "module"


def _f32(rng, *shape):
    return T(rng.standard_normal(shape).astype(np.float32))


def _one_hot_inputs(rng):
    v = int(rng.integers(3, 9))
    return [((rng.integers(0, v, size=(2, 3)), v), {}), ((rng.integers(0, v, size=5), v), {})]


def _embed_inputs(rng):
    v, d = int(rng.integers(4, 9)), int(rng.integers(2, 6))
    return [
        ((rng.integers(0, v, size=(3, 2)), rng.standard_normal((v, d))), {}),
        ((rng.integers(0, v, size=4), rng.standard_normal((v, d))), {}),
    ]


def _encode_inputs(rng):
    words = [f"w{int(i)}" for i in rng.choice(1000, size=6, replace=False)]
    vocab = {w: int(i) for i, w in enumerate(words[:4] + ["<unk>"])}
    return [((words, vocab), {}), ((words[::-1], {**vocab, "<pad>": 99}), {"unk_token": "<pad>"})]


def _cos_inputs(rng):
    return [
        ((rng.standard_normal(7), rng.standard_normal(7)), {}),
        ((rng.standard_normal(3), 2.5 * rng.standard_normal(3)), {}),
    ]


def _cos_matrix_inputs(rng):
    return [((rng.standard_normal((4, 6)), rng.standard_normal((3, 6))), {})]


def _most_similar_inputs(rng):
    E = rng.standard_normal((30, 5))
    return [
        ((E[3] + 0.1 * rng.standard_normal(5), E), {"k": 4}),
        ((E[7], E), {"k": 3, "exclude": (7, int(rng.integers(0, 30)))}),
    ]


def _analogy_inputs(rng):
    E = rng.standard_normal((25, 6))
    a, b, c = (int(x) for x in rng.choice(25, size=3, replace=False))
    return [((a, b, c, E), {}), ((c, a, b, E), {"k": 3})]


def _softmax_inputs(rng):
    big = rng.standard_normal((2, 5)).astype(np.float32) * 1e4
    return [((_f32(rng, 3, 4, 5),), {}), ((_f32(rng, 4, 6),), {"dim": 0}), ((T(big),), {})]


def _simple_attention_inputs(rng):
    return [((_f32(rng, 2, 5, 4),), {}), ((_f32(rng, 3, 6),), {})]


def _sdpa_inputs(rng):
    q, k, d = int(rng.integers(2, 6)), int(rng.integers(2, 6)), int(rng.integers(2, 7))
    mask = rng.random((q, k)) < 0.7
    mask[:, 0] = True
    return [
        ((_f32(rng, 2, q, d), _f32(rng, 2, k, d), _f32(rng, 2, k, 3)), {}),
        ((_f32(rng, 2, 2, q, d), _f32(rng, 2, 2, k, d), _f32(rng, 2, 2, k, 3)), {"mask": T(mask)}),
    ]


def _causal_inputs(rng):
    return [((int(rng.integers(2, 9)),), {}), ((1,), {})]


def _split_inputs(rng):
    h = int(rng.integers(1, 4))
    return [((_f32(rng, 2, 3, 2 * h), h), {})]


def _merge_inputs(rng):
    return [((_f32(rng, 2, int(rng.integers(1, 4)), 3, 2),), {})]


def _sinusoidal_inputs(rng):
    return [((int(rng.integers(3, 12)), 2 * int(rng.integers(1, 5))), {})]


def _i64(rng, high, *shape):
    return T(rng.integers(0, high, size=shape).astype(np.int64))


def _padding(ids: np.ndarray, pad_id: int = 0) -> T:
    return T((ids != pad_id)[:, None, None, :])


def _padded_ids(rng, vocab: int, batch: int, length: int) -> np.ndarray:
    ids = rng.integers(1, vocab, size=(batch, length)).astype(np.int64)
    for row in range(1, batch):  # later rows end in padding (id 0)
        ids[row, length - int(rng.integers(1, length)) :] = 0
    return ids


def _causal(size: int) -> T:
    return T(np.tril(np.ones((size, size), dtype=bool)))


def _mha_inputs(rng):
    h = int(rng.choice([1, 2, 4]))
    d = h * int(rng.integers(2, 5))
    q, k = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    x = _f32(rng, 2, q, d)
    return [
        (Init((d, h)), (_f32(rng, 2, q, d), _f32(rng, 2, k, d), _f32(rng, 2, k, d)), {}),
        (Init((d, h), {"bias": False}), (x, x, x), {"mask": _causal(q)}),
    ]


def _pe_module_inputs(rng):
    d = 2 * int(rng.integers(1, 6))
    return [
        (Init((d,), {"max_len": int(rng.integers(8, 20))}), (_f32(rng, 2, int(rng.integers(1, 8)), d),), {})
    ]


def _layer_norm_inputs(rng):
    d = int(rng.integers(3, 9))
    shifted = T(rng.standard_normal((2, 3, d)).astype(np.float32) * 3 + 1)
    return [(Init((d,)), (shifted,), {}), (Init((d,), {"eps": 1e-3}), (_f32(rng, 4, d),), {})]


def _feed_forward_inputs(rng):
    d, ff = int(rng.integers(3, 9)), int(rng.integers(8, 17))
    return [(Init((d, ff)), (_f32(rng, 2, 3, d),), {})]


def _encoder_layer_inputs(rng):
    h = int(rng.choice([1, 2]))
    d, ff, s = 4 * h, int(rng.integers(8, 17)), int(rng.integers(3, 7))
    ids = _padded_ids(rng, 9, 2, s)
    return [
        (Init((d, h, ff)), (_f32(rng, 2, s, d),), {"mask": _padding(ids)}),
        (Init((d, h, ff), {"norm_first": True}), (_f32(rng, 2, s, d),), {}),
    ]


def _encoder_inputs(rng):
    v, s = int(rng.integers(6, 15)), int(rng.integers(3, 8))
    ids = _padded_ids(rng, v, 2, s)
    return [(Init((v, 8, 2, 16, int(rng.integers(1, 3)))), (T(ids),), {"src_mask": _padding(ids)})]


def _decoder_layer_inputs(rng):
    d, ff, t, s = 8, int(rng.integers(8, 17)), int(rng.integers(2, 6)), int(rng.integers(2, 6))
    ids = _padded_ids(rng, 9, 2, s)
    return [
        (
            Init((d, 2, ff)),
            (_f32(rng, 2, t, d), _f32(rng, 2, s, d)),
            {"tgt_mask": _causal(t), "memory_mask": _padding(ids)},
        ),
        (Init((d, 2, ff), {"norm_first": True}), (_f32(rng, 2, t, d), _f32(rng, 2, s, d)), {}),
    ]


def _decoder_inputs(rng):
    v, t, s = int(rng.integers(6, 15)), int(rng.integers(2, 6)), int(rng.integers(2, 6))
    ids = _padded_ids(rng, 9, 2, s)
    return [
        (
            Init((v, 8, 2, 16, int(rng.integers(1, 3)))),
            (_i64(rng, v, 2, t), _f32(rng, 2, s, 8)),
            {"tgt_mask": _causal(t), "memory_mask": _padding(ids)},
        )
    ]


def _transformer_inputs(rng):
    sv, tv, s, t = (
        int(rng.integers(6, 15)),
        int(rng.integers(6, 15)),
        int(rng.integers(3, 7)),
        int(rng.integers(2, 6)),
    )
    src = _padded_ids(rng, sv, 2, s)
    return [
        (
            Init((sv, tv), {"d_model": 8, "num_heads": 2, "d_ff": 16, "num_layers": 1}),
            (T(src), _i64(rng, tv, 2, t)),
            {"src_mask": _padding(src), "tgt_mask": _causal(t)},
        ),
        (Init((sv, tv)), (T(src), _i64(rng, tv, 2, t)), {"tgt_mask": _causal(t)}),
    ]  # the defaults


def _padding_mask_inputs(rng):
    ids = _padded_ids(rng, 9, 3, int(rng.integers(3, 8)))
    pad = int(rng.integers(1, 4))
    return [((T(ids), 0), {}), ((T(np.where(ids == 0, pad, ids)), pad), {})]


def _date_sources(rng, n: int) -> np.ndarray:
    """``n`` dates in words, tokenised for the toy model and padded (id 0)."""
    import datetime
    import random

    from course_utils.toy_task import pad_batch, source_tokenizer, to_words

    tok, words = source_tokenizer(), random.Random(int(rng.integers(1 << 30)))
    dates = [datetime.date(1900, 1, 1) + datetime.timedelta(days=int(d)) for d in rng.integers(0, 73000, n)]
    return pad_batch([tok.encode(to_words(d, words)) for d in dates], tok.pad_id).numpy()


def _lookup(rng, eos_bias: float) -> Lookup:
    """A LookupModel that, like a decoder of two layers, needs the causal mask."""
    return Lookup(vocab_size=8, seed=int(rng.integers(1 << 30)), eos_id=2, eos_bias=eos_bias, layers=2)


def _greedy_inputs(rng):
    src, ids = _date_sources(rng, 3), _padded_ids(rng, 8, 4, 5)
    return [
        ((ToyModel(), T(src), 12, 1, 2), {"src_mask": _padding(src)}),
        ((ToyModel(), T(src[:1, : int((src[0] != 0).sum())]), int(rng.integers(3, 8)), 1, 2), {}),
        ((_lookup(rng, 1.5), T(ids), 10, 1, 2), {"src_mask": _padding(ids)}),
        ((_lookup(rng, 0.5), T(ids), 10, 1, 2), {}),
    ]


def _sample_inputs(rng):
    logits = np.repeat(rng.standard_normal((3, 9)).astype(np.float32) * 2, 8, axis=0)  # 24 draws
    seed = int(rng.integers(1 << 31))
    return [
        ((T(logits),), {"generator": Gen(seed)}),
        ((T(logits),), {"temperature": 0.7, "top_k": 4, "generator": Gen(seed + 1)}),
        ((T(logits),), {"top_p": 0.8, "generator": Gen(seed + 2)}),
        ((T(logits),), {"temperature": 1.5, "top_k": 6, "top_p": 0.6, "generator": Gen(seed + 3)}),
    ]


def _beam_inputs(rng):
    src = _date_sources(rng, 2)
    one = lambda row: T(src[row : row + 1, : int((src[row] != 0).sum())])  # noqa: E731 - a one-line helper of this case
    ids = _padded_ids(rng, 8, 1, 4)
    return [
        ((ToyModel(), one(0), 3, 12, 1, 2), {}),
        ((ToyModel(), one(1), 2, 12, 1, 2), {"length_penalty": 0.6}),
        ((_lookup(rng, 1.0), T(ids), 3, 9, 1, 2), {}),
        ((_lookup(rng, 1.5), T(ids), 4, 9, 1, 2), {"length_penalty": 0.5}),
        ((_lookup(rng, 0.0), T(ids), 1, 9, 1, 2), {}),
    ]


def _kv(rng, b: int, h: int, t: int, d_head: int):
    """A random cache (K, V), each (b, h, t, d_head)."""
    return (_f32(rng, b, h, t, d_head), _f32(rng, b, h, t, d_head))


def _gpt_block_inputs(rng):
    h = int(rng.choice([1, 2]))
    d, ff, t, past = 4 * h, int(rng.integers(8, 17)), int(rng.integers(1, 4)), int(rng.integers(1, 5))
    return [
        (Init((d, h, ff)), (_f32(rng, 2, int(rng.integers(2, 6)), d),), {}),
        (Init((d, h, ff)), (_f32(rng, 2, t, d), _kv(rng, 2, h, past, d // h)), {}),
    ]


def _gpt_inputs(rng):
    v, t, past = int(rng.integers(6, 15)), int(rng.integers(1, 4)), int(rng.integers(1, 6))
    sizes = {"d_model": 8, "num_heads": 2, "d_ff": 16, "num_layers": 2, "max_len": 12}
    cache = tuple(_kv(rng, 2, 2, past, 4) for _ in range(2))  # one (K, V) per block
    return [
        (Init((v,), sizes), (_i64(rng, v, 2, int(rng.integers(2, 8))),), {}),
        (Init((v,), sizes), (_i64(rng, v, 2, t), cache), {}),
    ]


def _generate_inputs(rng):
    v = int(rng.integers(5, 11))
    model = lambda: Prefix(vocab_size=v, seed=int(rng.integers(1 << 30)))  # noqa: E731 - a one-line helper of this case
    prompts = _i64(rng, v, 3, int(rng.integers(1, 6)))
    seed = int(rng.integers(1 << 31))
    return [
        ((model(), prompts, 5), {"temperature": 0}),
        ((model(), prompts, 6), {"temperature": 0.9, "top_k": 4, "generator": Gen(seed)}),
        ((model(), prompts, 4), {"top_p": 0.8, "use_cache": False, "generator": Gen(seed + 1)}),
    ]


EXERCISES: dict[str, dict[str, Exercise]] = {
    "01_embeddings": {
        "test_one_hot": Exercise("one_hot", "embeddings.one_hot", _one_hot_inputs),
        "test_embed": Exercise("embed", "embeddings.embed", _embed_inputs),
        "test_encode": Exercise("encode", "embeddings.encode", _encode_inputs, "exact"),
    },
    "02_cosine_similarity": {
        "test_cosine_similarity": Exercise("cosine_similarity", "similarity.cosine_similarity", _cos_inputs),
        "test_cosine_similarity_matrix": Exercise(
            "cosine_similarity_matrix", "similarity.cosine_similarity_matrix", _cos_matrix_inputs
        ),
        "test_most_similar": Exercise("most_similar", "similarity.most_similar", _most_similar_inputs, "ids"),
        "test_analogy": Exercise("analogy", "similarity.analogy", _analogy_inputs, "ids"),
    },
    "03_attention": {
        "test_softmax": Exercise("softmax", "attention.softmax", _softmax_inputs),
        "test_simple_self_attention": Exercise(
            "simple_self_attention", "attention.simple_self_attention", _simple_attention_inputs
        ),
        "test_scaled_dot_product_attention": Exercise(
            "scaled_dot_product_attention", "attention.scaled_dot_product_attention", _sdpa_inputs
        ),
        "test_causal_mask": Exercise("causal_mask", "attention.causal_mask", _causal_inputs, "exact"),
    },
    "04_multi_head_attention": {
        "test_split_heads": Exercise("split_heads", "multi_head.split_heads", _split_inputs),
        "test_merge_heads": Exercise("merge_heads", "multi_head.merge_heads", _merge_inputs),
        "test_multi_head_attention": Exercise(
            "MultiHeadAttention", "multi_head.MultiHeadAttention", _mha_inputs, kind="module"
        ),
    },
    "05_positional_encoding": {
        "test_sinusoidal_positional_encoding": Exercise(
            "sinusoidal_positional_encoding", "positional.sinusoidal_positional_encoding", _sinusoidal_inputs
        ),
        "test_positional_encoding": Exercise(
            "PositionalEncoding", "positional.PositionalEncoding", _pe_module_inputs, kind="module"
        ),
    },
    "06_encoder": {
        "test_layer_norm": Exercise("LayerNorm", "encoder.LayerNorm", _layer_norm_inputs, kind="module"),
        "test_feed_forward": Exercise(
            "FeedForward", "encoder.FeedForward", _feed_forward_inputs, kind="module"
        ),
        "test_encoder_layer": Exercise(
            "EncoderLayer", "encoder.EncoderLayer", _encoder_layer_inputs, kind="module"
        ),
        "test_encoder": Exercise("Encoder", "encoder.Encoder", _encoder_inputs, kind="module"),
    },
    "07_decoder": {
        "test_decoder_layer": Exercise(
            "DecoderLayer", "decoder.DecoderLayer", _decoder_layer_inputs, kind="module"
        ),
        "test_decoder": Exercise("Decoder", "decoder.Decoder", _decoder_inputs, kind="module"),
        "test_make_padding_mask": Exercise(
            "make_padding_mask", "decoder.make_padding_mask", _padding_mask_inputs, "exact"
        ),
        "test_transformer": Exercise(
            "Transformer", "decoder.Transformer", _transformer_inputs, kind="module"
        ),
    },
    "08_generation": {
        "test_greedy_decode": Exercise("greedy_decode", "generation.greedy_decode", _greedy_inputs, "exact"),
        "test_sample_next_token": Exercise(
            "sample_next_token", "generation.filter_logits", _sample_inputs, "support"
        ),
        "test_beam_search": Exercise("beam_search", "generation.beam_search", _beam_inputs, "exact"),
    },
    "09_gpt": {
        "test_gpt_block": Exercise("GPTBlock", "gpt.GPTBlock", _gpt_block_inputs, kind="module"),
        "test_gpt": Exercise("GPT", "gpt.GPT", _gpt_inputs, kind="module"),
        "test_generate": Exercise("generate", "gpt.generate", _generate_inputs, "exact"),
    },
}
