"""What an exercise may not use, and the recording of what the learner's code calls while a
check runs it (``_core`` says why).

``Forbidden`` resolves an exercise's forbidden names to what can be recognised while it runs
(Python code objects, built-ins by name, torch operators), and finds them held by a function
(globals, defaults, closures, partials, a class's methods). ``_Recorder`` records, while the
learner's code runs, every forbidden thing it calls, any attempt to switch the recording off
and any thread it starts: a profile hook, a torch dispatch mode, and the recording on the
kernel's own threads (``_watch.WATCH``). ``prepare_recording`` pays torch's first-time cost of a
dispatch mode once, outside any hook.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
import threading
import types
from typing import Iterable

from . import _watch

# The recording's own references, taken before any learner code ran.
_WATCH = _watch.WATCH
_setprofile, _getprofile = sys.setprofile, sys.getprofile
_thread_setprofile = threading.setprofile

# Built-ins that switch off the recording below; an exercise has no business calling them.
_TAMPERING = _watch.SWITCHING_OFF | {"fork", "forkpty", "posix_spawn", "execv", "execve"}
# Built-ins that start a thread: its work would run beyond the recording's sight.
_THREADS = frozenset({"start_new_thread", "start_joinable_thread", "start_new"})


def _resolve(path: str):
    """'torch.nn.functional.softmax' -> the object, or None when its package was never
    imported (then the learner's code can't be calling it, and a NumPy-only notebook does
    not pay for importing torch) or does not exist."""
    parts = path.split(".")
    if parts[0] not in sys.modules:
        return None
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                owner = getattr(owner, attr)
            return owner
        except AttributeError:
            return None
    return None


def _code_of(obj):
    """The Python code object behind a function, method, or class's ``forward``/``__call__``
    (behind any decorators: ``@torch.no_grad()`` wrappers share one code object)."""
    obj = getattr(obj, "__func__", obj)
    try:
        obj = inspect.unwrap(obj)
    except ValueError:  # a cycle of __wrapped__
        pass
    code = getattr(obj, "__code__", None)
    if code is None and isinstance(obj, type):
        for name in ("forward", "__call__"):
            fn = getattr(obj, name, None)
            if getattr(fn, "__code__", None) is not None:
                return fn.__code__
    return code


class Forbidden:
    """What one exercise may not use, resolved to what can be recognised while it runs."""

    def __init__(self, paths: Iterable[str] = (), ops: Iterable[str] = ()):
        self.paths = tuple(paths)
        self.ops = tuple(ops)  # torch operator names (aten), e.g. "_softmax"; "name*" a prefix
        self.objects: dict[int, str] = {}
        self.codes: dict[types.CodeType, str] = {}
        self.c_names: dict[str, str] = {}
        for path in self.paths:
            obj = _resolve(path)
            if obj is None:
                continue
            self.objects[id(obj)] = path
            code = _code_of(obj)
            if code is not None:
                self.codes[code] = path
            elif callable(obj) and getattr(obj, "__name__", None):
                self.c_names[obj.__name__] = path  # a built-in: recognised by name when called

    def held_by(self, fn) -> list[str]:
        """Forbidden objects that ``fn`` is, or holds: its globals, default arguments, closure
        cells, the target of a ``functools.partial`` or bound method, the methods of a class
        (recursively, a few levels deep)."""
        hits: list[str] = []
        seen: set[int] = set()

        def visit(obj, depth: int) -> None:
            if depth > 4 or id(obj) in seen:
                return
            seen.add(id(obj))
            if id(obj) in self.objects:
                hits.append(self.objects[id(obj)])
                return
            code = _code_of(obj) if callable(obj) else None
            if code is not None and code in self.codes:
                hits.append(self.codes[code])
                return
            if isinstance(obj, functools.partial):
                visit(obj.func, depth + 1)
                for value in (*obj.args, *obj.keywords.values()):
                    visit(value, depth + 1)
                return
            if isinstance(obj, types.MethodType):
                visit(obj.__func__, depth + 1)
                return
            if isinstance(obj, type):
                for klass in obj.__mro__:
                    if klass.__module__.split(".")[0] in ("torch", "builtins", "numpy", "course_utils"):
                        continue
                    for value in vars(klass).values():
                        visit(getattr(value, "__func__", value), depth + 1)
                return
            if isinstance(obj, types.FunctionType):
                for value in (*(obj.__defaults__ or ()), *(obj.__kwdefaults__ or {}).values()):
                    visit(value, depth + 1)
                for cell in obj.__closure__ or ():
                    try:
                        visit(cell.cell_contents, depth + 1)
                    except ValueError:  # an empty cell
                        pass
                for name in _names(obj.__code__):
                    value = obj.__globals__.get(name)
                    if value is not None:
                        visit(value, depth + 1)

        visit(fn, 0)
        return hits


def _names(code: types.CodeType) -> set[str]:
    """Global names a code object (and the code nested in it) refers to."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


class _Recorder:
    """Records, while the learner's code runs, every forbidden thing it calls, any attempt to
    switch the recording off and any thread it starts. Python calls and built-ins called from
    Python are seen by a profile hook; torch operators by a dispatch mode, which sees them
    however they were reached. On the kernel's own threads the recording installed there before
    the first cell (``_seal.WATCH``) reports here too; other threads are refused outright."""

    def __init__(self, forbidden: Forbidden, modes: tuple = ()):
        self.forbidden = forbidden
        self.modes = modes  # torch modes the code runs under (a hidden check's second device)
        self.calls: list[str] = []
        self.tampered: list[str] = []
        self.threads: list[str] = []
        self.idle: dict = {}  # CPU time of the kernel's idle threads when the call began
        self._mode = None
        self._done = False
        self._hook = self._hook  # one bound method, so that "is it still installed" can be asked

    def _hook(self, frame, event, arg):
        self.observe(frame, event, arg)

    def observe(self, frame, event, arg):
        """One profile event, from the checking thread or a watched kernel thread."""
        if self._done:
            return
        if event == "call":
            path = self.forbidden.codes.get(frame.f_code)
            if path is not None:
                self.calls.append(path)
        elif event == "c_call":
            name = getattr(arg, "__name__", "")
            path = self.forbidden.c_names.get(name)
            if path is not None:
                self.calls.append(path)
            if name in _TAMPERING:
                self.tampered.append(name)
            elif name in _THREADS:
                self.threads.append("a thread it started")

    def observe_op(self, func) -> None:
        """One torch operator run on a watched kernel thread."""
        if not self._done and self.forbidden.ops:
            name = func.__name__.split(".")[0]
            if _op_matches(name, self.forbidden.ops):
                self.calls.append(f"torch operator {name}")

    def __enter__(self):
        self._previous = _getprofile()
        if self.forbidden.ops and "torch" in sys.modules:
            prepare_recording()  # before the profile hook, which would slow it down twice over
            self._mode = _op_recorder(self.forbidden.ops, self.calls)
            if self._mode is not None:
                self._mode.__enter__()
        entered = []
        try:
            for mode in self.modes:
                mode.__enter__()
                entered.append(mode)
        except BaseException:
            for mode in reversed(entered):
                mode.__exit__(None, None, None)
            raise
        _thread_setprofile(self._hook)
        _WATCH.recorder = self
        _setprofile(self._hook)
        return self

    def __exit__(self, *exc):
        still_ours = _getprofile() is self._hook
        self._done = True
        _setprofile(self._previous)
        _WATCH.recorder = None
        _thread_setprofile(None)
        for mode in reversed(self.modes):
            try:
                mode.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - the mode stack was changed under us
                self.tampered.append("the torch dispatch mode stack")
        if self._mode is not None:
            try:
                self._mode.__exit__(None, None, None)
            except Exception:  # noqa: BLE001 - the mode stack was changed under us
                self.tampered.append("the torch dispatch mode stack")
        if not still_ours:
            self.tampered.append("sys.setprofile")
        return False


_RECORDING_READY = False


def prepare_recording() -> None:
    """Pay, once per process and outside any profile hook, what torch costs the first time an
    operator runs under a Python dispatch mode (it imports torch._dynamo, about 1 s; under the
    profile hook of a check, 2.5 s). The warm sandbox calls it before forking its kernels."""
    global _RECORDING_READY
    if _RECORDING_READY or "torch" not in sys.modules:
        return
    _RECORDING_READY = True
    mode = _op_recorder((), [])
    if mode is not None:
        import torch

        with mode:
            torch.zeros(1).add(1)


def _op_recorder(ops: tuple, calls: list):
    """A torch dispatch mode that notes every operator named in ``ops`` (None if unavailable)."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:  # pragma: no cover - every torch the course supports has it
        return None

    class OpRecorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]  # "_softmax.default" -> "_softmax"
            if _op_matches(name, ops):
                calls.append(f"torch operator {name}")
            return func(*args, **(kwargs or {}))

    return OpRecorder()


def _op_matches(name: str, ops) -> bool:
    return any(name == op or (op.endswith("*") and name.startswith(op[:-1])) for op in ops)
