"""The audit's untrusted half: runs a submission's code on given inputs, writes plain data.

    python -I _audit_child.py FOLDER     (or main(FOLDER) in a fresh fork of the warm sandbox)

FOLDER/cells.json: [[cell_id, source], ...] (the setup cell and the solution cells);
FOLDER/calls.json: {grade_id: {"function": name, "calls": [{"args": [...], "kwargs": {...}}]}}
with arrays as {"nd": "in-N.npy"} (NumPy) or {"t": "in-N.npy"} (a torch tensor).
It writes FOLDER/out-<grade_id>.json per exercise, arrays as .npy (never pickle). Nothing of
the grader is imported here; this process runs inside the sandbox.
"""
import contextlib
import io
import json
import os
import signal
import sys
import types

import numpy as np

FOLDER = ""  # set by main()
_save, _load, _dumps = np.save, np.load, json.dumps  # taken before any student code runs
_open, _isinstance, _str = open, isinstance, str
CALL_SECONDS = 5


class CallTimeout(BaseException):
    """One call ran longer than CALL_SECONDS."""


def _alarm(signum, frame):
    raise CallTimeout(f"took longer than {CALL_SECONDS} s")


def _stub_matplotlib():
    """Plots are not audited: a stand-in that accepts anything keeps the import cheap."""
    class Anything(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return Anything(name)

        def __call__(self, *args, **kwargs):
            return Anything("result")

        def __iter__(self):
            return iter((Anything("a"), Anything("b")))

    for name in ("matplotlib", "matplotlib.pyplot", "ipywidgets"):
        sys.modules.setdefault(name, Anything(name))


_TOY = []  # the toy model, loaded once


def _decode(value, counter):
    if _isinstance(value, dict) and value.get("toy_model"):
        if not _TOY:
            from course_utils.training import load_toy_model
            _TOY.append(load_toy_model("cpu")[0])
        return _TOY[0]
    if _isinstance(value, dict) and "lookup_model" in value:
        from course_utils.toy_task import LookupModel
        return LookupModel(**value["lookup_model"])
    if _isinstance(value, dict) and "generator" in value:
        import torch
        return torch.Generator().manual_seed(int(value["generator"]))
    if _isinstance(value, dict) and "nd" in value:
        return _load(os.path.join(FOLDER, value["nd"]), allow_pickle=False)
    if _isinstance(value, dict) and "t" in value:
        import torch
        return torch.from_numpy(_load(os.path.join(FOLDER, value["t"]), allow_pickle=False))
    if _isinstance(value, dict) and "tuple" in value:
        return tuple(_decode(v, counter) for v in value["tuple"])
    return value


def _encode(value, prefix, counter):
    if type(value).__module__.startswith("torch") and hasattr(value, "detach"):
        tensor = value.detach()
        name = f"{prefix}-{len(counter)}.npy"
        counter.append(name)
        dtype, device = _str(tensor.dtype), _str(tensor.device)
        array = tensor.cpu()
        array = array.double() if array.is_floating_point() else array
        _save(os.path.join(FOLDER, name), array.numpy(), allow_pickle=False)
        return {"t": name, "dtype": dtype, "device": device}
    if _isinstance(value, np.ndarray):
        if value.dtype == object:
            raise TypeError("returned an object array")
        name = f"{prefix}-{len(counter)}.npy"
        counter.append(name)
        _save(os.path.join(FOLDER, name), value, allow_pickle=False)
        return {"nd": name, "dtype": _str(value.dtype)}
    if _isinstance(value, (tuple, list)):
        return {"seq": [_encode(v, prefix, counter) for v in value], "type": type(value).__name__}
    if _isinstance(value, (bool, int, float, str, np.generic)) or value is None:
        return {"py": value.item() if _isinstance(value, np.generic) else value,
                "type": type(value).__name__}
    raise TypeError(f"returned a {type(value).__name__}")


def _built(cls, call, counter):
    """The student's class built with the call's arguments, holding the given parameters
    (matched by name, as the exercise names them), in eval mode."""
    import torch
    module = cls(*[_decode(a, counter) for a in call["init"]["args"]],
                 **{k: _decode(v, counter) for k, v in call["init"]["kwargs"].items()})
    mine = dict(module.named_parameters())
    state = {k: _decode(v, counter) for k, v in call["state"].items()}
    missing, extra = sorted(set(state) - set(mine)), sorted(set(mine) - set(state))
    if missing or extra:
        raise ValueError(f"parameters differ from the exercise's names: missing {missing[:3]}, "
                         f"unexpected {extra[:3]}")
    with torch.no_grad():
        for name, value in state.items():
            if tuple(mine[name].shape) != tuple(value.shape):
                raise ValueError(f"parameter {name} has shape {tuple(mine[name].shape)}, "
                                 f"expected {tuple(value.shape)}")
            mine[name].copy_(value)
    return module.eval()


def _call(target, args, kwargs, module):
    if not module:
        return target(*args, **kwargs)
    import torch
    with torch.no_grad():
        return target(*args, **kwargs)


def main(folder):
    global FOLDER
    FOLDER = folder
    _stub_matplotlib()
    with _open(os.path.join(FOLDER, "cells.json"), encoding="utf-8") as fh:
        cells = json.load(fh)
    with _open(os.path.join(FOLDER, "calls.json"), encoding="utf-8") as fh:
        exercises = json.load(fh)
    namespace = {"__name__": "__main__"}
    sink = io.StringIO()
    cell_errors = {}
    for cell_id, source in cells:
        lines = [ln for ln in source.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                exec(compile("\n".join(lines), f"<cell {cell_id}>", "exec"), namespace)
        except BaseException as exc:  # noqa: BLE001 - student code may raise anything
            cell_errors[cell_id] = f"{type(exc).__name__}: {exc}"[:300]
        sink.seek(0)
        sink.truncate()
    for grade_id, spec in exercises.items():
        counter, outputs = [], []
        function = namespace.get(spec["function"])
        for index, call in enumerate(spec["calls"]):
            if function is None:
                outputs.append({"error": f"{spec['function']} is not defined"
                                + (f" ({cell_errors[spec['function']]})" if spec["function"] in cell_errors else "")})
                continue
            try:
                args = [_decode(a, counter) for a in call["args"]]
                kwargs = {k: _decode(v, counter) for k, v in call["kwargs"].items()}
                signal.signal(signal.SIGALRM, _alarm)
                signal.setitimer(signal.ITIMER_REAL, CALL_SECONDS)
                try:
                    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                        target = _built(function, call, counter) if spec.get("module") else function
                        result = _call(target, args, kwargs, spec.get("module"))
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                outputs.append({"value": _encode(result, f"out-{grade_id}-{index}", counter)})
            except BaseException as exc:  # noqa: BLE001
                outputs.append({"error": f"{type(exc).__name__}: {exc}"[:300]})
            sink.seek(0)
            sink.truncate()
        with _open(os.path.join(FOLDER, f"out-{grade_id}.json"), "w", encoding="utf-8") as fh:
            fh.write(_dumps({"outputs": outputs}))


if __name__ == "__main__":
    main(sys.argv[1])
