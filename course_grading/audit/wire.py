"""The audit's wire format, shared by its two processes: how the trusted side writes a call's
inputs and how the child writes back what the submission's code returned.

Everything crosses as plain data in one folder, never pickle:

* ``calls.json``  {grade_id: {"function": name, "module": bool, "calls": [call, ...]}}, each call
  {"args": [...], "kwargs": {...}} (a class also has "init" {"args", "kwargs"} and "state"
  {parameter name: value}); a value is JSON, or {"nd": "in-N.npy"} (a NumPy array),
  {"t": "in-N.npy"} (a torch tensor), {"tuple": [...]}, {"generator": seed},
  {"toy_model": true}, {"lookup_model": {kwargs}}, {"prefix_model": {kwargs}};
* ``cells.json``  [[grade_id, source], ...]: the setup cell and the solution cells;
* ``record.bin``  the lines of the child's record (``hooks``), as the grader's side read them
  from the child's pipe (never a file the child wrote);
* ``out-<grade_id>.json``  {"outputs": [{"value": v} or {"error": "Type: message"}, ...]}, one
  per call, a value being {"t": "out-….npy", "dtype", "device"}, {"nd": "out-….npy", "dtype"},
  {"seq": [...], "type": "tuple"|"list"} or {"py": JSON, "type": name}.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

CALLS, CELLS = "calls.json", "cells.json"
RECORDED = "recorded.json"  # the operators the child records (``forbidden.recorded_names``)
RECORD = "record.bin"  # the child's record (``hooks``), written here by the grader's side alone
_SAVE, _LOAD = np.save, np.load  # taken before any submission's code runs in the child


def output_name(grade_id: str) -> str:
    return f"out-{grade_id}.json"


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


class Prefix:
    """A ``course_utils.language_model.PrefixLM`` (logits a fixed function of the whole prefix, a
    cache that carries the tokens seen), as the model input of 09's ``generate``."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs


class Gen:
    """A ``torch.Generator`` seeded with ``seed``."""

    def __init__(self, seed: int):
        self.seed = int(seed)


def encode_input(value, folder: Path, names: list):
    if isinstance(value, ToyModel):
        return {"toy_model": True}
    if isinstance(value, Gen):
        return {"generator": value.seed}
    if isinstance(value, Lookup):
        return {"lookup_model": value.kwargs}
    if isinstance(value, Prefix):
        return {"prefix_model": value.kwargs}
    if isinstance(value, (T, np.ndarray)):
        name = f"in-{len(names)}.npy"
        names.append(name)
        np.save(folder / name, value.array if isinstance(value, T) else value, allow_pickle=False)
        return {"t" if isinstance(value, T) else "nd": name}
    if isinstance(value, tuple):
        return {"tuple": [encode_input(v, folder, names) for v in value]}
    return value


def load_output(entry, read):
    """The value of an output ``entry`` (trusted side); ``read(name)`` gives the bytes of a
    file the child wrote (``untrusted`` reading: no link, no FIFO, a size cap)."""
    if not isinstance(entry, dict):
        raise ValueError("malformed output")
    if "seq" in entry:
        if not isinstance(entry["seq"], list):
            raise ValueError("malformed output")
        return [load_output(e, read) for e in entry["seq"]]
    if "py" in entry:
        return entry["py"]
    name = entry.get("t") or entry.get("nd")
    if not isinstance(name, str) or "/" in name or not name.endswith(".npy"):
        raise ValueError("malformed output")
    return np.load(io.BytesIO(read(name)), allow_pickle=False)


# --------------------------------------------------------------------------- the child's half

_TOY = []  # the toy model, loaded once


def decode_input(value, folder: str):
    """An input value as the child's code receives it (the other half of ``encode_input``)."""
    if isinstance(value, dict) and value.get("toy_model"):
        if not _TOY:
            from building_blocks import Transformer  # the assignment's own, beside the cells

            from course_utils.training import load_toy_model

            _TOY.append(load_toy_model(Transformer, "cpu")[0])
        return _TOY[0]
    if isinstance(value, dict) and "lookup_model" in value:
        from course_utils.toy_task import LookupModel

        return LookupModel(**value["lookup_model"])
    if isinstance(value, dict) and "prefix_model" in value:
        from course_utils.language_model import PrefixLM

        return PrefixLM(**value["prefix_model"])
    if isinstance(value, dict) and "generator" in value:
        import torch

        return torch.Generator().manual_seed(int(value["generator"]))
    if isinstance(value, dict) and "nd" in value:
        return _LOAD(os.path.join(folder, value["nd"]), allow_pickle=False)
    if isinstance(value, dict) and "t" in value:
        import torch

        return torch.from_numpy(_LOAD(os.path.join(folder, value["t"]), allow_pickle=False))
    if isinstance(value, dict) and "tuple" in value:
        return tuple(decode_input(v, folder) for v in value["tuple"])
    return value


def encode_output(value, prefix: str, counter: list, folder: str):
    """What the code returned, as plain data (arrays saved beside it as .npy)."""
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        tensor = value.detach()
        name = f"{prefix}-{len(counter)}.npy"
        counter.append(name)
        dtype, device = str(tensor.dtype), str(tensor.device)
        array = tensor.cpu()
        array = array.double() if array.is_floating_point() else array
        _SAVE(os.path.join(folder, name), array.numpy(), allow_pickle=False)
        return {"t": name, "dtype": dtype, "device": device}
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError("returned an object array")
        name = f"{prefix}-{len(counter)}.npy"
        counter.append(name)
        _SAVE(os.path.join(folder, name), value, allow_pickle=False)
        return {"nd": name, "dtype": str(value.dtype)}
    if isinstance(value, (tuple, list)):
        return {
            "seq": [encode_output(v, prefix, counter, folder) for v in value],
            "type": type(value).__name__,
        }
    if isinstance(value, (bool, int, float, str, np.generic)) or value is None:
        return {"py": value.item() if isinstance(value, np.generic) else value, "type": type(value).__name__}
    raise TypeError(f"returned a {type(value).__name__}")
