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
from dataclasses import dataclass
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


@dataclass
class Exercise:
    """One audited grade cell: the contract function, and how to draw its inputs."""

    function: str
    reference: str                        # "module.name" in course_utils.reference
    inputs: Callable                      # rng -> list of (args, kwargs)
    compare: str = "close"                # "close" | "exact" | "ids"


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
    },
    "05_positional_encoding": {
        "test_sinusoidal_positional_encoding": Exercise(
            "sinusoidal_positional_encoding", "positional.sinusoidal_positional_encoding", _sinusoidal_inputs),
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
    if isinstance(value, (T, np.ndarray)):
        name = f"in-{len(names)}.npy"
        names.append(name)
        np.save(folder / name, value.array if isinstance(value, T) else value, allow_pickle=False)
        return {"t" if isinstance(value, T) else "nd": name}
    if isinstance(value, tuple):
        return {"tuple": [_encode_input(v, folder, names) for v in value]}
    return value


def _as_reference_input(value):
    if isinstance(value, T):
        import torch
        return torch.from_numpy(value.array.copy())
    return value


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
        if got_entry.get("dtype") != str(expected.dtype):
            return f"dtype {got_entry.get('dtype')}, expected {expected.dtype}"
        if got_entry.get("device") != str(expected.device):
            return f"device {got_entry.get('device')}, expected {expected.device}"
        expected = expected.detach().cpu().double().numpy() if expected.is_floating_point() else expected.numpy()
    exp = np.asarray(expected)
    try:
        arr = np.asarray(got)
    except Exception:
        return "unreadable output"
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
          timeout: int = TIMEOUT) -> list[Verdict]:
    """Audit the graded functions of ``notebook`` (a path) for ``assignment``; [] when the
    assignment has no audited exercises."""
    from . import reference  # noqa: F401
    import importlib

    exercises = EXERCISES.get(assignment, {})
    if not exercises:
        return []
    seed = secrets.randbits(63) if seed is None else seed
    rng = np.random.default_rng(seed)
    nb = read_notebook(notebook)
    plans = {gid: ex.inputs(rng) for gid, ex in exercises.items()}
    warm = sandbox.current_warm() if sandboxed else None
    if warm is not None and warm.key[0] != tuple(Path(h) for h in hide):
        warm = None
    if warm is not None:
        try:  # the warm sandbox, emptied of the kernel that graded the notebook
            folder = warm.prepare()
        except sandbox.WarmError:
            warm = None
    if warm is None:
        folder = Path(tempfile.mkdtemp(prefix="course-audit-"))
    try:
        names: list = []
        calls = {gid: {"function": ex.function,
                       "calls": [{"args": [_encode_input(a, folder, names) for a in args],
                                  "kwargs": {k: _encode_input(v, folder, names) for k, v in kwargs.items()}}
                                 for args, kwargs in plans[gid]]}
                 for gid, ex in exercises.items()}
        (folder / "calls.json").write_text(json.dumps(calls), encoding="utf-8")
        (folder / "cells.json").write_text(json.dumps(_cells(nb, exercises)), encoding="utf-8")
        ended = _run_warm(warm, folder, timeout) if warm is not None else None
        if ended is None:
            ended = _run_cold(folder, sandboxed, hide, timeout)
        verdicts = []
        for gid, ex in exercises.items():
            module, name = ex.reference.rsplit(".", 1)
            ref = getattr(importlib.import_module(f"course_utils.reference.{module}"), name)
            verdicts.append(_judge(gid, ex, ref, plans[gid], folder, ended))
        return verdicts
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


def _judge(gid: str, ex: Exercise, ref, plan, folder: Path, ended: str) -> Verdict:
    try:
        data = json.loads((folder / f"out-{gid}.json").read_text(encoding="utf-8"))
        outputs = data["outputs"]
    except (OSError, ValueError, KeyError, TypeError):
        return Verdict(gid, False, ended or "the audited code ended before this exercise (crashed or exited)")
    if not isinstance(outputs, list) or len(outputs) != len(plan):
        return Verdict(gid, False, "malformed audit output")
    for index, ((args, kwargs), out) in enumerate(zip(plan, outputs)):
        if not isinstance(out, dict) or "value" not in out:
            error = out.get("error", "no output") if isinstance(out, dict) else "no output"
            return Verdict(gid, False, f"{ex.function} failed on fresh input {index + 1}: {error}")
        expected = ref(*[_as_reference_input(a) for a in args],
                       **{k: _as_reference_input(v) for k, v in kwargs.items()})
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
