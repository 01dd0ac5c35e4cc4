"""The audit's untrusted half: runs a submission's code on given inputs, writes plain data.

    python -I -m course_grading.audit.child FOLDER RECORD_FD
    (or main(FOLDER, RECORD_FD) in a fork of the warm sandbox)

It reads the calls and the cells from FOLDER and writes one output file per exercise there, in
the format of ``wire``. Before the first cell it arms its record on the pipe RECORD_FD
(``hooks``) and marks every call there. Nothing else of the grader is imported here; this
process runs inside the sandbox.
"""

import contextlib
import importlib.machinery
import io
import json
import os
import signal
import sys
import types

from course_grading.audit import hooks, wire

FOLDER = ""  # set by main()
_dumps, _open = json.dumps, open  # taken before any student code runs
_decode, _encode = wire.decode_input, wire.encode_output
CALL_SECONDS = 5


class CallTimeout(BaseException):
    """One call ran longer than CALL_SECONDS."""


def _alarm(signum, frame):
    raise CallTimeout(f"took longer than {CALL_SECONDS} s")


class Anything(types.ModuleType):
    """A stand-in module that accepts anything."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything(name)

    def __call__(self, *args, **kwargs):
        return Anything("result")

    def __iter__(self):
        return iter((Anything("a"), Anything("b")))


# Not audited, only imported by the setup cells: the learner side's checks, plots and widgets
# (which may use the instructor's reference, out of this process's reach).
UNAUDITED = ("course_utils.checks", "course_utils.plots", "course_utils.widgets")


class _StandIns:
    """A meta path finder that gives the UNAUDITED modules as stand-ins."""

    def find_spec(self, name, path=None, target=None):
        if any(name == p or name.startswith(p + ".") for p in UNAUDITED):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return Anything(spec.name)

    def exec_module(self, module):
        pass


def _stub_matplotlib():
    """Plots are not audited: a stand-in that accepts anything keeps the import cheap."""
    for name in ("matplotlib", "matplotlib.pyplot", "ipywidgets"):
        sys.modules.setdefault(name, Anything(name))


def stand_in_unaudited():
    """In the sandbox, before ``main``: the learner side's checks, plots and widgets are
    stand-ins too (not audited; they may use the instructor's reference, which this process
    cannot see)."""
    for name in list(sys.modules):
        if any(name == p or name.startswith(p + ".") for p in UNAUDITED):
            del sys.modules[name]
    sys.meta_path.insert(0, _StandIns())


def _built(cls, call, counter):
    """The student's class built with the call's arguments, holding the given parameters
    (matched by name, as the exercise names them), in eval mode."""
    import torch

    module = cls(
        *[_decode(a, FOLDER) for a in call["init"]["args"]],
        **{k: _decode(v, FOLDER) for k, v in call["init"]["kwargs"].items()},
    )
    mine = dict(module.named_parameters())
    state = {k: _decode(v, FOLDER) for k, v in call["state"].items()}
    missing, extra = sorted(set(state) - set(mine)), sorted(set(mine) - set(state))
    if missing or extra:
        raise ValueError(
            f"parameters differ from the exercise's names: missing {missing[:3]}, unexpected {extra[:3]}"
        )
    with torch.no_grad():
        for name, value in state.items():
            if tuple(mine[name].shape) != tuple(value.shape):
                raise ValueError(
                    f"parameter {name} has shape {tuple(mine[name].shape)}, expected {tuple(value.shape)}"
                )
            mine[name].copy_(value)
    return module.eval()


def _call(target, args, kwargs, module):
    if not module:
        return target(*args, **kwargs)
    import torch

    with torch.no_grad():
        return target(*args, **kwargs)


def _recorded(folder):
    """The operators to record, as the grader's side derived them (``wire.RECORDED``): a child
    started afresh need not derive them again. None where the folder has none."""
    try:
        with _open(os.path.join(folder, wire.RECORDED), encoding="utf-8") as fh:
            return tuple(json.load(fh))
    except FileNotFoundError:
        return None


def main(folder, record_fd=None):
    """Run the cells, then every call; ``record_fd``: the pipe of the record (``hooks``)."""
    global FOLDER
    mark, MARK = (
        hooks.arm(record_fd, _recorded(folder)),
        hooks.MARK,
    )  # kept in this frame, before any cell runs
    FOLDER = folder
    _stub_matplotlib()
    sys.modules.pop("building_blocks", None)  # the assignment's provided components, beside the cells
    sys.path.append(folder)
    with _open(os.path.join(FOLDER, wire.CELLS), encoding="utf-8") as fh:
        cells = json.load(fh)
    with _open(os.path.join(FOLDER, wire.CALLS), encoding="utf-8") as fh:
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
            mark(MARK, "begin", grade_id, index)
            _one_call(grade_id, spec, function, index, call, counter, outputs, cell_errors, sink)
            mark(MARK, "end", grade_id, index)
        with _open(os.path.join(FOLDER, wire.output_name(grade_id)), "w", encoding="utf-8") as fh:
            fh.write(_dumps({"outputs": outputs}))
    mark(MARK, "done", "", 0)


def _one_call(grade_id, spec, function, index, call, counter, outputs, cell_errors, sink):
    """One call of an exercise, its output (or error) appended to ``outputs``."""
    if function is None:
        outputs.append(
            {
                "error": f"{spec['function']} is not defined"
                + (f" ({cell_errors[spec['function']]})" if spec["function"] in cell_errors else "")
            }
        )
        return
    try:
        args = [_decode(a, FOLDER) for a in call["args"]]
        kwargs = {k: _decode(v, FOLDER) for k, v in call["kwargs"].items()}
        signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, CALL_SECONDS)
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                target = _built(function, call, counter) if spec.get("module") else function
                result = _call(target, args, kwargs, spec.get("module"))
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        outputs.append({"value": _encode(result, f"out-{grade_id}-{index}", counter, FOLDER)})
    except BaseException as exc:  # noqa: BLE001 - what the learner's code raised is its output
        outputs.append({"error": f"{type(exc).__name__}: {exc}"[:300]})
    sink.seek(0)
    sink.truncate()


if __name__ == "__main__":  # FOLDER [RECORD_FD]
    stand_in_unaudited()
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None)
