"""The integrity audit: each graded function of a submission, re-run on inputs it never saw.

The trusted side (this module, which never runs student code) draws fresh inputs from a
secret seed made at run time (never written into any notebook), writes them as .npy/JSON
into a scratch folder, and starts ``_audit_child.py`` once per submission in a fresh
sandboxed Python process (no Jupyter). The child runs the setup cell and the solution cells
(taken from the submitted notebook by grade_id), calls every audited function and writes its
outputs as plain data (JSON and .npy, never pickle). This side reads them back and compares
them with ``course_utils.reference`` on the same inputs.

``review()`` puts the audit and the static scanner together: an exercise whose autograded
score gives points that the audit denies is flagged, with the reason; scanner findings are
flagged as they are. Nothing here changes a score.
"""
from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from . import sandbox
from .nbformat_tools import read_notebook
from .scan import Flag, scan

CHILD = Path(__file__).resolve().with_name("_audit_child.py")
TIMEOUT = 40  # seconds for one submission's whole audit (each call: CALL_SECONDS in the child)


class T:
    """A torch tensor input (its data as float32 / int64 / bool NumPy)."""

    def __init__(self, array):
        self.array = np.asarray(array)


class ToyModel:
    """The trained dates Transformer shipped with the course (``load_toy_model``), as an input
    of the decoding functions of 08."""


class Lookup:
    """A ``toy_task.LookupModel`` (deterministic logits from a seed, the source and the prefix;
    rows say eos at different steps), as an input of the decoding functions of 08."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


class Gen:
    """A ``torch.Generator`` seeded with ``seed``."""

    def __init__(self, seed: int):
        self.seed = int(seed)


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
    reference: str                        # "module.name" in course_utils.reference
    inputs: Callable
    compare: str = "close"                # "close" | "exact" | "ids" | "support"
    kind: str = "function"                # "function" | "module"


def _f32(rng, *shape):
    return T(rng.standard_normal(shape).astype(np.float32))


def _one_hot_inputs(rng):
    v = int(rng.integers(3, 9))
    return [((rng.integers(0, v, size=(2, 3)), v), {}), ((rng.integers(0, v, size=5), v), {})]


def _embed_inputs(rng):
    v, d = int(rng.integers(4, 9)), int(rng.integers(2, 6))
    return [((rng.integers(0, v, size=(3, 2)), rng.standard_normal((v, d))), {}),
            ((rng.integers(0, v, size=4), rng.standard_normal((v, d))), {})]


def _encode_inputs(rng):
    words = [f"w{int(i)}" for i in rng.choice(1000, size=6, replace=False)]
    vocab = {w: int(i) for i, w in enumerate(words[:4] + ["<unk>"])}
    return [((words, vocab), {}), ((words[::-1], {**vocab, "<pad>": 99}), {"unk_token": "<pad>"})]


def _cos_inputs(rng):
    return [((rng.standard_normal(7), rng.standard_normal(7)), {}),
            ((rng.standard_normal(3), 2.5 * rng.standard_normal(3)), {})]


def _cos_matrix_inputs(rng):
    return [((rng.standard_normal((4, 6)), rng.standard_normal((3, 6))), {})]


def _most_similar_inputs(rng):
    E = rng.standard_normal((30, 5))
    return [((E[3] + 0.1 * rng.standard_normal(5), E), {"k": 4}),
            ((E[7], E), {"k": 3, "exclude": (7, int(rng.integers(0, 30)))})]


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
    return [((_f32(rng, 2, q, d), _f32(rng, 2, k, d), _f32(rng, 2, k, 3)), {}),
            ((_f32(rng, 2, 2, q, d), _f32(rng, 2, 2, k, d), _f32(rng, 2, 2, k, 3)), {"mask": T(mask)})]


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
        ids[row, length - int(rng.integers(1, length)):] = 0
    return ids


def _causal(size: int) -> T:
    return T(np.tril(np.ones((size, size), dtype=bool)))


def _mha_inputs(rng):
    h = int(rng.choice([1, 2, 4]))
    d = h * int(rng.integers(2, 5))
    q, k = int(rng.integers(2, 6)), int(rng.integers(2, 6))
    x = _f32(rng, 2, q, d)
    return [(Init((d, h)), (_f32(rng, 2, q, d), _f32(rng, 2, k, d), _f32(rng, 2, k, d)), {}),
            (Init((d, h), {"bias": False}), (x, x, x), {"mask": _causal(q)})]


def _pe_module_inputs(rng):
    d = 2 * int(rng.integers(1, 6))
    return [(Init((d,), {"max_len": int(rng.integers(8, 20))}), (_f32(rng, 2, int(rng.integers(1, 8)), d),), {})]


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
    return [(Init((d, h, ff)), (_f32(rng, 2, s, d),), {"mask": _padding(ids)}),
            (Init((d, h, ff), {"norm_first": True}), (_f32(rng, 2, s, d),), {})]


def _encoder_inputs(rng):
    v, s = int(rng.integers(6, 15)), int(rng.integers(3, 8))
    ids = _padded_ids(rng, v, 2, s)
    return [(Init((v, 8, 2, 16, int(rng.integers(1, 3)))), (T(ids),), {"src_mask": _padding(ids)})]


def _decoder_layer_inputs(rng):
    d, ff, t, s = 8, int(rng.integers(8, 17)), int(rng.integers(2, 6)), int(rng.integers(2, 6))
    ids = _padded_ids(rng, 9, 2, s)
    return [(Init((d, 2, ff)), (_f32(rng, 2, t, d), _f32(rng, 2, s, d)),
             {"tgt_mask": _causal(t), "memory_mask": _padding(ids)}),
            (Init((d, 2, ff), {"norm_first": True}), (_f32(rng, 2, t, d), _f32(rng, 2, s, d)), {})]


def _decoder_inputs(rng):
    v, t, s = int(rng.integers(6, 15)), int(rng.integers(2, 6)), int(rng.integers(2, 6))
    ids = _padded_ids(rng, 9, 2, s)
    return [(Init((v, 8, 2, 16, int(rng.integers(1, 3)))), (_i64(rng, v, 2, t), _f32(rng, 2, s, 8)),
             {"tgt_mask": _causal(t), "memory_mask": _padding(ids)})]


def _transformer_inputs(rng):
    sv, tv, s, t = int(rng.integers(6, 15)), int(rng.integers(6, 15)), int(rng.integers(3, 7)), int(rng.integers(2, 6))
    src = _padded_ids(rng, sv, 2, s)
    return [(Init((sv, tv), {"d_model": 8, "num_heads": 2, "d_ff": 16, "num_layers": 1}),
             (T(src), _i64(rng, tv, 2, t)), {"src_mask": _padding(src), "tgt_mask": _causal(t)}),
            (Init((sv, tv)), (T(src), _i64(rng, tv, 2, t)), {"tgt_mask": _causal(t)})]  # the defaults


def _padding_mask_inputs(rng):
    ids = _padded_ids(rng, 9, 3, int(rng.integers(3, 8)))
    pad = int(rng.integers(1, 4))
    return [((T(ids), 0), {}), ((T(np.where(ids == 0, pad, ids)), pad), {})]


def _date_sources(rng, n: int) -> np.ndarray:
    """``n`` dates in words, tokenised for the toy model and padded (id 0)."""
    import datetime
    import random

    from .toy_task import pad_batch, source_tokenizer, to_words

    tok, words = source_tokenizer(), random.Random(int(rng.integers(1 << 30)))
    dates = [datetime.date(1900, 1, 1) + datetime.timedelta(days=int(d)) for d in rng.integers(0, 73000, n)]
    return pad_batch([tok.encode(to_words(d, words)) for d in dates], tok.pad_id).numpy()


def _lookup(rng, eos_bias: float) -> Lookup:
    return Lookup(vocab_size=8, seed=int(rng.integers(1 << 30)), eos_id=2, eos_bias=eos_bias)


def _greedy_inputs(rng):
    src, ids = _date_sources(rng, 3), _padded_ids(rng, 8, 4, 5)
    return [((ToyModel(), T(src), 12, 1, 2), {"src_mask": _padding(src)}),
            ((ToyModel(), T(src[:1, :int((src[0] != 0).sum())]), int(rng.integers(3, 8)), 1, 2), {}),
            ((_lookup(rng, 1.5), T(ids), 10, 1, 2), {"src_mask": _padding(ids)}),
            ((_lookup(rng, 0.5), T(ids), 10, 1, 2), {})]


def _sample_inputs(rng):
    logits = np.repeat(rng.standard_normal((3, 9)).astype(np.float32) * 2, 8, axis=0)  # 24 draws
    seed = int(rng.integers(1 << 31))
    return [((T(logits),), {"generator": Gen(seed)}),
            ((T(logits),), {"temperature": 0.7, "top_k": 4, "generator": Gen(seed + 1)}),
            ((T(logits),), {"top_p": 0.8, "generator": Gen(seed + 2)}),
            ((T(logits),), {"temperature": 1.5, "top_k": 6, "top_p": 0.6, "generator": Gen(seed + 3)})]


def _beam_inputs(rng):
    src = _date_sources(rng, 2)
    one = lambda row: T(src[row:row + 1, :int((src[row] != 0).sum())])  # noqa: E731
    ids = _padded_ids(rng, 8, 1, 4)
    return [((ToyModel(), one(0), 3, 12, 1, 2), {}),
            ((ToyModel(), one(1), 2, 12, 1, 2), {"length_penalty": 0.6}),
            ((_lookup(rng, 1.0), T(ids), 3, 9, 1, 2), {}),
            ((_lookup(rng, 1.5), T(ids), 4, 9, 1, 2), {"length_penalty": 0.5}),
            ((_lookup(rng, 0.0), T(ids), 1, 9, 1, 2), {})]


EXERCISES: dict[str, dict[str, Exercise]] = {
    "01_embeddings": {
        "test_one_hot": Exercise("one_hot", "embeddings.one_hot", _one_hot_inputs),
        "test_embed": Exercise("embed", "embeddings.embed", _embed_inputs),
        "test_encode": Exercise("encode", "embeddings.encode", _encode_inputs, "exact"),
    },
    "02_cosine_similarity": {
        "test_cosine_similarity": Exercise("cosine_similarity", "similarity.cosine_similarity", _cos_inputs),
        "test_cosine_similarity_matrix": Exercise("cosine_similarity_matrix",
                                                  "similarity.cosine_similarity_matrix", _cos_matrix_inputs),
        "test_most_similar": Exercise("most_similar", "similarity.most_similar", _most_similar_inputs, "ids"),
        "test_analogy": Exercise("analogy", "similarity.analogy", _analogy_inputs, "ids"),
    },
    "03_attention": {
        "test_softmax": Exercise("softmax", "attention.softmax", _softmax_inputs),
        "test_simple_self_attention": Exercise("simple_self_attention", "attention.simple_self_attention",
                                               _simple_attention_inputs),
        "test_scaled_dot_product_attention": Exercise("scaled_dot_product_attention",
                                                      "attention.scaled_dot_product_attention", _sdpa_inputs),
        "test_causal_mask": Exercise("causal_mask", "attention.causal_mask", _causal_inputs, "exact"),
    },
    "04_multi_head_attention": {
        "test_split_heads": Exercise("split_heads", "multi_head.split_heads", _split_inputs),
        "test_merge_heads": Exercise("merge_heads", "multi_head.merge_heads", _merge_inputs),
        "test_multi_head_attention": Exercise("MultiHeadAttention", "multi_head.MultiHeadAttention",
                                              _mha_inputs, kind="module"),
    },
    "05_positional_encoding": {
        "test_sinusoidal_positional_encoding": Exercise(
            "sinusoidal_positional_encoding", "positional.sinusoidal_positional_encoding", _sinusoidal_inputs),
        "test_positional_encoding": Exercise("PositionalEncoding", "positional.PositionalEncoding",
                                             _pe_module_inputs, kind="module"),
    },
    "06_encoder": {
        "test_layer_norm": Exercise("LayerNorm", "encoder.LayerNorm", _layer_norm_inputs, kind="module"),
        "test_feed_forward": Exercise("FeedForward", "encoder.FeedForward", _feed_forward_inputs, kind="module"),
        "test_encoder_layer": Exercise("EncoderLayer", "encoder.EncoderLayer", _encoder_layer_inputs,
                                       kind="module"),
        "test_encoder": Exercise("Encoder", "encoder.Encoder", _encoder_inputs, kind="module"),
    },
    "07_decoder": {
        "test_decoder_layer": Exercise("DecoderLayer", "decoder.DecoderLayer", _decoder_layer_inputs,
                                       kind="module"),
        "test_decoder": Exercise("Decoder", "decoder.Decoder", _decoder_inputs, kind="module"),
        "test_make_padding_mask": Exercise("make_padding_mask", "decoder.make_padding_mask",
                                           _padding_mask_inputs, "exact"),
        "test_transformer": Exercise("Transformer", "decoder.Transformer", _transformer_inputs, kind="module"),
    },
    "08_generation": {
        "test_greedy_decode": Exercise("greedy_decode", "generation.greedy_decode", _greedy_inputs, "exact"),
        "test_sample_next_token": Exercise("sample_next_token", "generation.filter_logits",
                                           _sample_inputs, "support"),
        "test_beam_search": Exercise("beam_search", "generation.beam_search", _beam_inputs, "exact"),
    },
}


@dataclass
class Verdict:
    """The audit of one grade cell: ``agrees`` with the reference, or why not."""

    grade_id: str
    agrees: bool
    reason: str = ""


# --------------------------------------------------------------------------- inputs and outputs

def _encode_input(value, folder: Path, names: list):
    if isinstance(value, ToyModel):
        return {"toy_model": True}
    if isinstance(value, Gen):
        return {"generator": value.seed}
    if isinstance(value, Lookup):
        return {"lookup_model": value.kwargs}
    if isinstance(value, (T, np.ndarray)):
        name = f"in-{len(names)}.npy"
        names.append(name)
        np.save(folder / name, value.array if isinstance(value, T) else value, allow_pickle=False)
        return {"t" if isinstance(value, T) else "nd": name}
    if isinstance(value, tuple):
        return {"tuple": [_encode_input(v, folder, names) for v in value]}
    return value


def _as_reference_input(value):
    import torch
    if isinstance(value, T):
        return torch.from_numpy(value.array.copy())
    if isinstance(value, ToyModel):
        return _toy_model()
    if isinstance(value, Gen):
        return torch.Generator().manual_seed(value.seed)
    if isinstance(value, Lookup):
        from .toy_task import LookupModel
        return LookupModel(**value.kwargs)
    return value


@lru_cache(maxsize=1)
def _toy_model():
    """The shipped toy model, loaded once per process (decoding does not change it)."""
    from .training import load_toy_model
    return load_toy_model("cpu")[0]


def _reference_module(ref_cls, init: Init, rng):
    """The reference class built with ``init``, every parameter drawn from ``rng``."""
    import torch
    module = ref_cls(*init.args, **init.kwargs)
    with torch.no_grad():
        for _, p in module.named_parameters():
            p.copy_(torch.from_numpy((0.3 * rng.standard_normal(tuple(p.shape))).astype(np.float32)))
    return module.eval()


def _plan(ex: Exercise, rng) -> list[dict]:
    """The calls of one exercise: args and kwargs, and for a class its Init and the
    reference module (with its drawn parameters) that the child's copy must match."""
    import importlib

    module, name = ex.reference.rsplit(".", 1)
    ref = getattr(importlib.import_module(f"course_utils.reference.{module}"), name)
    calls = []
    for entry in ex.inputs(rng):
        if ex.kind == "module":
            init, args, kwargs = entry
            calls.append({"init": init, "module": _reference_module(ref, init, rng), "args": args,
                          "kwargs": kwargs})
        else:
            args, kwargs = entry
            calls.append({"function": ref, "args": args, "kwargs": kwargs})
    return calls


def _encode_call(call: dict, folder: Path, names: list) -> dict:
    encoded = {"args": [_encode_input(a, folder, names) for a in call["args"]],
               "kwargs": {k: _encode_input(v, folder, names) for k, v in call["kwargs"].items()}}
    if "init" in call:
        encoded["init"] = {"args": [_encode_input(a, folder, names) for a in call["init"].args],
                           "kwargs": {k: _encode_input(v, folder, names) for k, v in call["init"].kwargs.items()}}
        encoded["state"] = {n: _encode_input(T(p.detach().numpy()), folder, names)
                            for n, p in call["module"].named_parameters()}
    return encoded


def _expected(call: dict, compare: str):
    import torch
    args = [_as_reference_input(a) for a in call["args"]]
    kwargs = {k: _as_reference_input(v) for k, v in call["kwargs"].items()
              if not (compare == "support" and k == "generator")}
    with torch.no_grad():
        return (call["module"] if "module" in call else call["function"])(*args, **kwargs)


def _load_output(entry, folder: Path):
    if "seq" in entry:
        return [_load_output(e, folder) for e in entry["seq"]]
    if "py" in entry:
        return entry["py"]
    name = entry.get("t") or entry.get("nd")
    if not isinstance(name, str) or "/" in name or not name.endswith(".npy"):
        raise ValueError("malformed output")
    return np.load(folder / name, allow_pickle=False)


def _describe(entry) -> str:
    return f"{entry.get('dtype', '?')} on {entry.get('device', 'cpu')}" if "t" in entry else ""


def _compare(kind: str, got_entry, expected, folder: Path) -> str:
    """'' when the child's output matches the reference's ``expected``, else the reason."""
    if isinstance(expected, tuple) or (isinstance(expected, list) and kind != "exact"):
        if "seq" not in got_entry or len(got_entry["seq"]) != len(expected):
            return f"returned {got_entry.get('type', 'a single value')}, expected {len(expected)} values"
        for part_entry, part in zip(got_entry["seq"], expected):
            reason = _compare(kind, part_entry, part, folder)
            if reason:
                return reason
        return ""
    got = _load_output(got_entry, folder)
    if hasattr(expected, "detach"):
        if "t" not in got_entry:
            return f"returned {got_entry.get('type') or got_entry.get('dtype')}, expected a tensor"
        want = "torch.int64" if kind == "support" else str(expected.dtype)
        if got_entry.get("dtype") != want:
            return f"dtype {got_entry.get('dtype')}, expected {want}"
        if got_entry.get("device") != str(expected.device):
            return f"device {got_entry.get('device')}, expected {expected.device}"
        expected = expected.detach().cpu().double().numpy() if expected.is_floating_point() else expected.numpy()
    exp = np.asarray(expected)
    try:
        arr = np.asarray(got)
    except Exception:
        return "unreadable output"
    if kind == "support":  # sampled ids (b,), each kept by the filtered logits (b, vocab)
        if arr.shape != exp.shape[:1] or arr.dtype.kind not in "iu":
            return f"returned {arr.dtype} of shape {arr.shape}, expected int64 ids of shape {exp.shape[:1]}"
        if arr.min() < 0 or arr.max() >= exp.shape[1]:
            return "ids outside the vocabulary"
        if not np.all(np.isfinite(exp[np.arange(len(arr)), arr])):
            return "sampled a token that temperature/top-k/top-p should have removed"
        return ""
    if arr.shape != exp.shape:
        return f"shape {arr.shape}, expected {exp.shape}"
    if kind in ("exact", "ids") or exp.dtype == bool:
        return "" if np.array_equal(arr, exp) else "values differ from the reference"
    if arr.dtype.kind not in "fiub" or exp.dtype.kind not in "fiub":
        return f"dtype {arr.dtype}, expected {exp.dtype}"
    if not np.array_equal(np.isfinite(arr), np.isfinite(exp)):
        return "NaN or inf where the reference is finite"
    finite = np.isfinite(exp)
    if not np.allclose(arr[finite], exp[finite], atol=1e-5, rtol=1e-4):
        return "values differ from the reference"
    return ""


# --------------------------------------------------------------------------- running

def _cells(nb, exercises: dict[str, Exercise]) -> list[list[str]]:
    """The setup cell and the solution cells, in notebook order."""
    keep = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {}) or {}
        if cell.get("cell_type") == "code" and (meta.get("grade_id") == "setup" or meta.get("solution")):
            source = cell.get("source", "")
            keep.append([str(meta.get("grade_id")), "".join(source) if isinstance(source, list) else source])
    return keep


def audit(notebook, assignment: str, *, sandboxed: bool = True, hide=(), seed: int | None = None,
          timeout: int = TIMEOUT, runner: Callable[[Path], str] | None = None) -> list[Verdict]:
    """Audit the graded functions and classes of ``notebook`` (a path) for ``assignment``;
    [] when the assignment has no audited exercises. ``runner(folder)`` replaces the child
    process (the tests run the child in-process on hundreds of variants); it returns '' or why
    the child ended early."""
    exercises = EXERCISES.get(assignment, {})
    if not exercises:
        return []
    seed = secrets.randbits(63) if seed is None else seed
    rng = np.random.default_rng(seed)
    nb = read_notebook(notebook)
    plans = {gid: _plan(ex, rng) for gid, ex in exercises.items()}
    warm = sandbox.current_warm(tuple(Path(h) for h in hide)) if sandboxed and runner is None else None
    if warm is not None:
        try:  # the warm sandbox, emptied of the kernel that graded the notebook
            folder = warm.prepare()
        except sandbox.WarmError:
            warm = None
    if warm is None:
        folder = Path(tempfile.mkdtemp(prefix="course-audit-"))
    try:
        names: list = []
        calls = {gid: {"function": ex.function, "module": ex.kind == "module",
                       "calls": [_encode_call(call, folder, names) for call in plans[gid]]}
                 for gid, ex in exercises.items()}
        (folder / "calls.json").write_text(json.dumps(calls), encoding="utf-8")
        (folder / "cells.json").write_text(json.dumps(_cells(nb, exercises)), encoding="utf-8")
        ended = runner(folder) if runner is not None else (
            _run_warm(warm, folder, timeout) if warm is not None else None)
        if ended is None:
            ended = _run_cold(folder, sandboxed, hide, timeout)
        return [_judge(gid, ex, plans[gid], folder, ended) for gid, ex in exercises.items()]
    finally:
        if warm is None:
            shutil.rmtree(folder, ignore_errors=True)


def _run_cold(folder: Path, sandboxed: bool, hide, timeout: int) -> str:
    """The child as a new (sandboxed) Python process; '' or why it ended early."""
    command = [sys.executable, "-I", str(CHILD), str(folder)]
    groups = None
    if sandboxed:
        command, groups = sandbox.wrap(command, scratch=folder, cwd=folder,
                                       hidden_roots=tuple(Path(h) for h in hide),
                                       limits=sandbox.Limits(cpu_seconds=timeout))
    try:
        subprocess.run(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=timeout, cwd=folder)
        return ""
    except subprocess.TimeoutExpired:
        return f"the audit ran out of time ({timeout} s)"
    finally:
        if groups is not None:
            groups.remove()


def _run_warm(warm, folder: Path, timeout: int) -> str | None:
    """The child forked by the warm sandbox; '' or why it ended early, None if the warm
    sandbox failed before the child started (the caller then runs it cold)."""
    import time

    try:
        pid = warm.spawn_audit(folder, timeout)
    except sandbox.WarmError:
        sandbox.discard_warm(warm)
        return None
    deadline = time.monotonic() + timeout
    try:
        while warm.poll(pid) is None:
            if time.monotonic() > deadline:
                warm.signal(pid, 9)
                return f"the audit ran out of time ({timeout} s)"
            time.sleep(0.02)
    except sandbox.WarmError:
        sandbox.discard_warm(warm)
        return "the audit's sandbox ended before the audit did"
    return ""


def _judge(gid: str, ex: Exercise, plan: list[dict], folder: Path, ended: str) -> Verdict:
    try:
        data = json.loads((folder / f"out-{gid}.json").read_text(encoding="utf-8"))
        outputs = data["outputs"]
    except (OSError, ValueError, KeyError, TypeError):
        return Verdict(gid, False, ended or "the audited code ended before this exercise (crashed or exited)")
    if not isinstance(outputs, list) or len(outputs) != len(plan):
        return Verdict(gid, False, "malformed audit output")
    for index, (call, out) in enumerate(zip(plan, outputs)):
        if not isinstance(out, dict) or "value" not in out:
            error = out.get("error", "no output") if isinstance(out, dict) else "no output"
            return Verdict(gid, False, f"{ex.function} failed on fresh input {index + 1}: {error}")
        expected = _expected(call, ex.compare)
        try:
            reason = _compare(ex.compare, out["value"], expected, folder)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            reason = f"unreadable output ({type(exc).__name__})"
        if reason:
            return Verdict(gid, False, f"{ex.function} on fresh input {index + 1}: {reason}")
    return Verdict(gid, True)


# --------------------------------------------------------------------------- review

def review(submitted: Path, source: Path, assignment: str, scores: dict[str, float], *,
           sandboxed: bool = True, hide=()) -> list[Flag]:
    """Flags for one submission: scanner findings, and every exercise whose autograded score
    (``scores``: grade_id -> points) gives points that the audit denies."""
    flags = scan(submitted, source)
    for verdict in audit(submitted, assignment, sandboxed=sandboxed, hide=hide):
        if not verdict.agrees and scores.get(verdict.grade_id, 0) > 0:
            flags.append(Flag(verdict.grade_id, f"audit disagrees with the autograded score: {verdict.reason}"))
    return flags
