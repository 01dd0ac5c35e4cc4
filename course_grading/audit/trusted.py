"""The integrity audit: each graded function of a submission, re-run on inputs it never saw.

The trusted side (this module, which never runs student code) draws fresh inputs from a
secret seed made at run time (never written into any notebook), writes them as .npy/JSON
into a scratch folder (``wire``), and starts ``child.py`` once per submission in a fresh
sandboxed Python process (no Jupyter). The child runs the setup cell and the solution cells
(taken from the submitted notebook by grade_id), calls every audited function and writes its
outputs as plain data (JSON and .npy, never pickle). This side reads them back and compares
them with ``course_grading.reference`` on the same inputs, and reads the child's record (``hooks``,
through ``channel``, judged by ``evidence``): an exercise whose calls ran a built-in it forbids,
or a child that tried an escape or touched its record, disagrees whatever its values.

``review()`` puts the audit and the static scanner together: an exercise whose autograded
score gives points that the audit denies is flagged, with the reason; scanner findings are
flagged as they are. Nothing here changes a score.
"""

from __future__ import annotations

import io
import json
import math
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np

from course_grading import untrusted
from course_grading.authoring import building_blocks
from course_grading.authoring.cells import setup_and_solution_sources
from course_grading.authoring.nbformat_tools import read_untrusted
from course_grading.grading.red_flags import Flag, scan

from ..sandbox import warm as warm_sandbox
from ..sandbox.settings import Settings
from . import SANDBOX_ENTRY, channel, evidence, forbidden, wire
from .exercises import EXERCISES, Exercise, Init
from .wire import Gen, Lookup, Prefix, T, ToyModel

warm_sandbox.hand_audit(SANDBOX_ENTRY)  # before any sandbox starts: the sandbox runs the audit by name

TIMEOUT = 40  # seconds for one submission's whole audit (each call: CALL_SECONDS in the child)
MAX_OUTPUT_BYTES = 256 * 2**20  # read back for one exercise, its .json and .npy files together
# what is parsed of one exercise's out-<grade_id>.json (the arrays are in .npy files beside it)
OUTPUT_JSON = {"max_bytes": 16 * 2**20, "max_containers": 100_000, "max_values": 1_000_000, "max_depth": 32}


@dataclass
class Verdict:
    """The audit of one grade cell: ``agrees`` with the reference, or why not."""

    grade_id: str
    agrees: bool
    reason: str = ""


# --------------------------------------------------------------------------- inputs and outputs


def _as_reference_input(value):
    import torch

    if isinstance(value, T):
        return torch.from_numpy(value.array.copy())
    if isinstance(value, ToyModel):
        return _toy_model()
    if isinstance(value, Gen):
        return torch.Generator().manual_seed(value.seed)
    if isinstance(value, Lookup):
        from course_utils.toy_task import LookupModel

        return LookupModel(**value.kwargs)
    if isinstance(value, Prefix):
        from course_utils.language_model import PrefixLM

        return PrefixLM(**value.kwargs)
    if isinstance(value, tuple):
        return tuple(_as_reference_input(v) for v in value)
    return value


@lru_cache(maxsize=1)
def _toy_model():
    """The shipped toy model, loaded once per process (decoding does not change it)."""
    from course_utils.training import load_toy_model

    from ..reference.decoder import Transformer

    return load_toy_model(Transformer, "cpu")[0]


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
    ref = getattr(importlib.import_module(f"course_grading.reference.{module}"), name)
    calls = []
    for entry in ex.inputs(rng):
        if ex.kind == "module":
            init, args, kwargs = entry
            calls.append(
                {"init": init, "module": _reference_module(ref, init, rng), "args": args, "kwargs": kwargs}
            )
        else:
            args, kwargs = entry
            calls.append({"function": ref, "args": args, "kwargs": kwargs})
    return calls


def _encode_call(call: dict, folder: Path, names: list) -> dict:
    encoded = {
        "args": [wire.encode_input(a, folder, names) for a in call["args"]],
        "kwargs": {k: wire.encode_input(v, folder, names) for k, v in call["kwargs"].items()},
    }
    if "init" in call:
        encoded["init"] = {
            "args": [wire.encode_input(a, folder, names) for a in call["init"].args],
            "kwargs": {k: wire.encode_input(v, folder, names) for k, v in call["init"].kwargs.items()},
        }
        encoded["state"] = {
            n: wire.encode_input(T(p.detach().numpy()), folder, names)
            for n, p in call["module"].named_parameters()
        }
    return encoded


def _expected(call: dict, compare: str):
    import torch

    args = [_as_reference_input(a) for a in call["args"]]
    kwargs = {
        k: _as_reference_input(v)
        for k, v in call["kwargs"].items()
        if not (compare == "support" and k == "generator")
    }
    with torch.no_grad():
        return (call["module"] if "module" in call else call["function"])(*args, **kwargs)


def _describe(entry) -> str:
    return f"{entry.get('dtype', '?')} on {entry.get('device', 'cpu')}" if "t" in entry else ""


def _compare(kind: str, got_entry, expected, outputs: "_Outputs") -> str:
    """'' when the child's output matches the reference's ``expected``, else the reason."""
    if isinstance(expected, tuple) or (isinstance(expected, list) and kind != "exact"):
        if "seq" not in got_entry or len(got_entry["seq"]) != len(expected):
            return f"returned {got_entry.get('type', 'a single value')}, expected {len(expected)} values"
        for part_entry, part in zip(got_entry["seq"], expected):
            reason = _compare(kind, part_entry, part, outputs)
            if reason:
                return reason
        return ""
    got = wire.load_output(got_entry, outputs.read)
    if hasattr(expected, "detach"):
        if "t" not in got_entry:
            return f"returned {got_entry.get('type') or got_entry.get('dtype')}, expected a tensor"
        want = "torch.int64" if kind == "support" else str(expected.dtype)
        if got_entry.get("dtype") != want:
            return f"dtype {got_entry.get('dtype')}, expected {want}"
        if got_entry.get("device") != str(expected.device):
            return f"device {got_entry.get('device')}, expected {expected.device}"
        expected = (
            expected.detach().cpu().double().numpy() if expected.is_floating_point() else expected.numpy()
        )
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


def audit(
    notebook,
    assignment: str,
    *,
    sandboxed: bool = True,
    settings=None,
    seed: int | None = None,
    timeout: int = TIMEOUT,
    runner: Callable[[Path], str] | None = None,
    blocks: Path | None = None,
    bounds: untrusted.NotebookBounds = untrusted.NOTEBOOK_BOUNDS,
) -> list[Verdict]:
    """Audit the graded functions and classes of ``notebook`` (a path) for ``assignment``;
    [] when the assignment has no audited exercises. ``blocks`` is the instructor's copy of the
    assignment's building_blocks.py, put beside the cells. ``settings`` (``sandbox.settings``)
    are the sandbox's: its hidden folders and limits. ``runner(folder)`` replaces the child
    process (the tests run the child in-process on hundreds of variants); it returns '' or why
    the child ended early."""
    exercises = EXERCISES.get(assignment, {})
    if not exercises:
        return []
    seed = secrets.randbits(63) if seed is None else seed
    rng = np.random.default_rng(seed)
    nb = read_untrusted(notebook, bounds=bounds)
    plans = {gid: _plan(ex, rng) for gid, ex in exercises.items()}
    folder = Path(tempfile.mkdtemp(prefix="course-audit-"))  # the grader's own, never the sandbox's
    try:
        names: list = []
        calls = {
            gid: {
                "function": ex.function,
                "module": ex.kind == "module",
                "calls": [_encode_call(call, folder, names) for call in plans[gid]],
            }
            for gid, ex in exercises.items()
        }
        (folder / wire.CALLS).write_text(json.dumps(calls), encoding="utf-8")
        (folder / wire.CELLS).write_text(json.dumps(setup_and_solution_sources(nb)), encoding="utf-8")
        (folder / wire.RECORDED).write_text(json.dumps(forbidden.recorded_names()), encoding="utf-8")
        if blocks is not None and Path(blocks).is_file():
            shutil.copyfile(blocks, folder / building_blocks.FILE_NAME)
        if runner is not None:
            ended = runner(folder)
        elif sandboxed:  # inputs copied in, the out-* files copied back (sandbox.warm)
            ended, record = warm_sandbox.run_audit(folder, timeout, settings or Settings())
            if record is not None:  # else none: a missing record is itself a finding
                channel.write_record(folder, record)
        else:
            ended = _run_unsandboxed(folder, timeout)
        found = _findings(
            folder,
            {gid: (ex.function, len(plans[gid])) for gid, ex in exercises.items()},
            ended,
            required=runner is None,
        )
        return [
            _judge(gid, ex, plans[gid], folder, ended, found.get(gid, "")) for gid, ex in exercises.items()
        ]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _findings(folder: Path, calls: dict, ended: str, required: bool) -> dict[str, str]:
    """``evidence.findings`` on the record the grader's side wrote into ``folder``; none when a
    test's runner kept no record (``required`` False)."""
    try:
        record = untrusted.read_in(folder, wire.RECORD, channel.MAX_BYTES + len(channel.OVERFLOW))
    except FileNotFoundError:
        if not required:
            return {}
        record = b""
    except OSError:
        record = b"unreadable\n"
    return evidence.findings(record, calls, ended)


def _run_unsandboxed(folder: Path, timeout: int) -> str:
    """The child as a plain Python process (grading without a sandbox), its record read from
    its pipe; '' or why it ended early."""
    read, write = channel.open_pipe()
    command = [sys.executable, "-I", "-m", "course_grading.audit.child", str(folder), str(write)]
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=folder,
            pass_fds=(write,),
        )
    finally:
        os.close(write)
    drain = channel.Drain(read)
    try:
        process.wait(timeout=timeout)
        ended = ""
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        ended = f"the audit ran out of time ({timeout} s)"
    channel.write_record(folder, drain.finish())
    return ended


class _Outputs:
    """Reads what the child wrote into the audit's folder, which the sandbox could write:
    each file through ``untrusted`` (no link, no FIFO, a regular file, a size cap), and at most
    ``MAX_OUTPUT_BYTES`` for one exercise's outputs in all. An .npy file is given only when its
    header describes a plain numeric array of exactly the bytes that follow it (NumPy would
    otherwise allocate whatever size the header claims); the .json is parsed by ``load_json``,
    within OUTPUT_JSON. Anything else: UntrustedFileError, saying why."""

    def __init__(self, folder: Path):
        self.folder, self.left = folder, MAX_OUTPUT_BYTES

    def read(self, name: str, limit: int | None = None) -> bytes:
        data = untrusted.read_in(self.folder, name, min(self.left, limit or self.left))
        self.left -= len(data)
        problem = _npy_problem(data) if name.endswith(".npy") else ""
        if problem:
            raise untrusted.UntrustedFileError(name, problem)
        return data

    def load_json(self, name: str):
        data = self.read(name, OUTPUT_JSON["max_bytes"])
        problem = untrusted.json_bound(
            data, OUTPUT_JSON["max_containers"], OUTPUT_JSON["max_values"], OUTPUT_JSON["max_depth"]
        )
        if problem:
            raise untrusted.UntrustedFileError(name, problem)
        return json.loads(data.decode("utf-8"))


def _npy_problem(data: bytes) -> str:
    """'' when ``data`` is an .npy file of a plain array (booleans, numbers or text; no object, no
    record, no sub-array) whose header's shape and dtype account for exactly the bytes after it."""
    from numpy.lib import format as npy

    stream = io.BytesIO(data)
    try:
        version = npy.read_magic(stream)
        reader = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}[version]
        shape, _, dtype = reader(stream, max_header_size=10_000)
    except Exception:  # noqa: BLE001 - a header NumPy cannot read, of whatever kind
        return "is not an array file"
    if (
        dtype.hasobject
        or dtype.names is not None
        or dtype.subdtype is not None
        or dtype.kind not in "biufcUS"
    ):
        return f"holds an array of {dtype}, not of numbers or text"
    if math.prod(shape) * dtype.itemsize != len(data) - stream.tell():
        return "holds fewer or more bytes than its header says"
    return ""


def _judge(gid: str, ex: Exercise, plan: list[dict], folder: Path, ended: str, finding: str = "") -> Verdict:
    """The verdict on the values, unless the record (``finding``) says the outputs do not count."""
    verdict = _judge_values(gid, ex, plan, folder, ended)
    if finding and (verdict.agrees or not finding.startswith(evidence.MISSING)):
        return Verdict(gid, False, finding)
    return verdict


def _judge_values(gid: str, ex: Exercise, plan: list[dict], folder: Path, ended: str) -> Verdict:
    outputs = _Outputs(folder)
    try:
        data = outputs.load_json(wire.output_name(gid))
    except FileNotFoundError:
        return Verdict(gid, False, ended or "the audited code ended before this exercise (crashed or exited)")
    except OSError as exc:  # a link, a FIFO, a folder, too large or nested: never followed, never waited on
        return Verdict(gid, False, f"unreadable output: {exc}")
    except ValueError:  # not JSON: also a write cut short by a crash
        return Verdict(gid, False, ended or "the audited code ended before this exercise (crashed or exited)")
    try:
        results = data["outputs"]
    except (ValueError, KeyError, TypeError, RecursionError):  # also a write cut short by a crash
        return Verdict(gid, False, ended or "the audited code ended before this exercise (crashed or exited)")
    if not isinstance(results, list) or len(results) != len(plan):
        return Verdict(gid, False, "malformed audit output")
    for index, (call, out) in enumerate(zip(plan, results)):
        if not isinstance(out, dict) or "value" not in out:
            error = out.get("error", "no output") if isinstance(out, dict) else "no output"
            return Verdict(gid, False, f"{ex.function} failed on fresh input {index + 1}: {str(error)[:300]}")
        expected = _expected(call, ex.compare)
        try:
            reason = _compare(ex.compare, out["value"], expected, outputs)
        except OSError as exc:
            reason = f"unreadable output: {exc}"
        except Exception as exc:  # noqa: BLE001 - whatever the child wrote, the grader goes on
            reason = f"unreadable output ({type(exc).__name__})"
        if reason:
            return Verdict(gid, False, f"{ex.function} on fresh input {index + 1}: {reason}")
    return Verdict(gid, True)


# --------------------------------------------------------------------------- review


def review(
    submitted: Path,
    source: Path,
    assignment: str,
    scores: dict[str, float],
    *,
    sandboxed: bool = True,
    settings=None,
    bounds: untrusted.NotebookBounds = untrusted.NOTEBOOK_BOUNDS,
) -> list[Flag]:
    """Flags for one submission: scanner findings, and every exercise whose autograded score
    (``scores``: grade_id -> points) gives points that the audit denies (the notebook read
    within ``bounds``)."""
    flags = scan(submitted, source, bounds)
    blocks = Path(source).with_name(building_blocks.FILE_NAME)
    for verdict in audit(
        submitted, assignment, sandboxed=sandboxed, settings=settings, blocks=blocks, bounds=bounds
    ):
        if not verdict.agrees and scores.get(verdict.grade_id, 0) > 0:
            flags.append(
                Flag(verdict.grade_id, f"audit disagrees with the autograded score: {verdict.reason}")
            )
    return flags
