"""Machinery shared by every check: quiet calls, forbidden built-ins, clear failures.

A check calls the learner's code through :meth:`Check.call`, which

* runs it quietly (nbgrader scores a grade cell 0 for *any* stderr output, so a correct
  solution that happens to warn must not lose marks);
* records (``_recording``) what it actually calls while it runs — Python functions and methods (by their code),
  built-ins called from Python (by name), and, for torch exercises, the operators torch
  dispatches whatever route led to them (``torch._softmax``, ``torch.ops.aten``, a
  ``functools.partial``, a C++ path) — and fails the exercise when that includes what the
  exercise asks the learner to build;
* also fails it when the function merely *holds* such a built-in: as a global, a default
  argument, in a closure, a ``functools.partial`` or a method of the learner's class;
* turns ``NotImplementedError`` into "not implemented yet" and any other exception into a
  message naming the learner's own line;
* grades only when it can trust what it sees (``Check.sound``, before and after every call):
  the library functions and classes it decides with, and the checks themselves, as they were
  recorded before any learner code ran (``_seal``), and no thread alive that could run the
  learner's work beyond the recording's sight.

A failing check raises :class:`CheckFailed`, whose traceback in Jupyter (and in nbgrader's
feedback) is the message alone: what went wrong and the likely cause, never the answer.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import traceback
import warnings
from typing import Callable, Iterable

import numpy as np

from ..notebook import wrapped
from . import _seal, _watch
from ._recording import Forbidden, _Recorder

# Everything the checks rely on is recorded before any learner code can change it: under
# grading when the kernel starts, before the notebook's first cell; else now (the setup cell).
_seal.take()


def _recorded(module: str, name: str) -> Callable:
    """``module.name`` as it was recorded, before any learner code ran (torch is recorded when
    it is first imported, if that is later: a NumPy-only notebook does not import it)."""

    def tool(*args, **kwargs):
        return _original(module, name)(*args, **kwargs)

    tool.__name__ = tool.__qualname__ = f"{module}.{name}"
    return tool


# The functions the checks decide with, taken before any learner code ran; the checks call these,
# never the library's attributes, and every check proves first that the library's attributes
# are still these (``_seal.changed``).
torch_equal = _recorded("torch", "equal")
torch_allclose = _recorded("torch", "allclose")
torch_isclose = _recorded("torch", "isclose")
torch_isfinite = _recorded("torch", "isfinite")
np_array_equal = np.array_equal
np_allclose = np.allclose
np_isclose = np.isclose
np_isfinite = np.isfinite
np_all = np.all
np_unique = np.unique
np_abs = np.abs
np_max = np.max
# The record's own functions, taken as the checks' other tools are.
_changed, _foreign_threads, _foreign_processes = _seal.changed, _seal.foreign_threads, _seal.foreign_processes
_unwatched, _idle_now, _ran_meanwhile = (
    _watch.kernel_threads_unwatched,
    _seal.idle_threads_now,
    _seal.ran_meanwhile,
)
_original = _seal.original
_isclose = np_isclose
_allclose = np_allclose
_asarray = np.asarray


class CheckFailed(AssertionError):
    """A check found a mistake. The message names the likely cause."""

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of a traceback: the message, not the check's internals,
        in lines broken between words (``course_utils.notebook.wrapped``)."""
        return wrapped(f"\x1b[0;31m{type(self).__name__}\x1b[0m: {self}")


@contextlib.contextmanager
def quiet():
    """Swallow warnings, stdout and stderr from the code under test."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            yield


# --------------------------------------------------------------------------- where it went wrong

# Not the learner's code: libraries, the course package, and the earlier components a release
# provides beside its notebook (building_blocks.py), which the learner's code calls into.
_LIBRARIES = (
    os.sep + "site-packages" + os.sep,
    os.sep + "lib" + os.sep + "python",
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
    "<frozen",
    os.sep + "building_blocks.py",
    # the grading package beside it, where it is installed (the hidden checks' devices)
    os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "course_grading"
    )
    + os.sep,
)


def _where(exc: BaseException) -> str:
    """' in line `...`': the last line of the learner's own code in the traceback, if known."""
    mine = [
        f for f in traceback.extract_tb(exc.__traceback__) if not any(lib in f.filename for lib in _LIBRARIES)
    ]
    if mine and mine[-1].line:
        return f" in line `{mine[-1].line.strip()}`"
    return ""


# What an exercise may return, taken as the checks' tools are: values whose every method is the
# library's or Python's own, so that nothing the check does with them afterwards (compare,
# convert, index, iterate) runs the learner's code outside the recording. Types are matched
# exactly (``type(x) is ...``, never ``isinstance``, which an object's ``__class__`` can answer).
_PLAIN_DATA = frozenset((type(None), bool, int, float, complex, str, bytes))
_NUMPY_SCALARS = frozenset(t for t in set(np.sctypeDict.values()) if isinstance(t, type))
_NDARRAY = np.ndarray
_CONTAINERS = (tuple, list, dict)
_MAX_PARTS = 1_000_000  # values inside one result (a KV cache of a few layers holds dozens)
_MAX_NESTING = 32


def _torch_types():
    """(Tensor, Parameter, Module, other plain torch types, structseq types) as recorded, or
    None when torch was never imported (then no result can be a tensor)."""
    if "torch" not in sys.modules:
        return None
    tensor, parameter = _original("torch", "Tensor"), _original("torch.nn", "Parameter")
    module = _original("torch.nn", "Module")
    plain = tuple(
        t for t in (_original("torch", n) for n in ("Size", "dtype", "device")) if isinstance(t, type)
    )
    returns = sys.modules.get("torch.return_types")
    structs = (
        tuple(t for t in vars(returns).values() if isinstance(t, type) and issubclass(t, tuple))
        if returns
        else ()
    )
    return tensor, parameter, module, plain, structs


def _plain(result, exercise: str, module: bool = False):
    """``result`` if it holds only plain values (``None``, bools, numbers, strings, NumPy
    scalars, arrays of numbers, plain tensors, and tuples, lists and dicts of them; with
    ``module``, the learner's nn.Module itself), else CheckFailed: an object of another type
    (a subclass of a tensor, an array, a list or an int included) would run learner code inside
    the check after the call, beyond the recording's sight (``__array__``, ``__eq__``,
    ``__iter__``, ``detach``...), where it could compute with what the exercise forbids or read
    the check's expected values from its frames."""
    torch_types = _torch_types()
    stack, seen, parts = [(result, 0)], set(), 0
    while stack:
        value, depth = stack.pop()
        kind = type(value)
        parts += 1
        if parts > _MAX_PARTS or depth > _MAX_NESTING:
            raise CheckFailed(
                f"{exercise} returned a structure nested too deep or holding too many "
                "values: return a tensor, an array, a number or a short tuple of them."
            )
        if kind in _PLAIN_DATA or kind in _NUMPY_SCALARS:
            continue
        if kind is _NDARRAY:
            if value.dtype.hasobject:
                raise CheckFailed(
                    f"{exercise} returned an array of Python objects (dtype=object): "
                    "return an array of numbers."
                )
            continue
        if kind in _CONTAINERS:
            if id(value) in seen:
                continue
            seen.add(id(value))
            inner = [*value.keys(), *value.values()] if kind is dict else value
            stack.extend((part, depth + 1) for part in inner)
            continue
        if torch_types is not None:
            tensor, parameter, module_type, plain, structs = torch_types
            if kind is tensor or kind is parameter or kind in plain:
                continue
            if kind in structs:  # torch.max(...)'s (values, indices): a tuple of tensors
                stack.extend((part, depth + 1) for part in tuple.__iter__(value))
                continue
            if issubclass(kind, tensor):
                raise CheckFailed(
                    f"{exercise} returned a {kind.__name__}, a subclass of "
                    "torch.Tensor: return a plain tensor."
                )
            if module and value is result and issubclass(kind, module_type):
                continue  # the learner's module: the check calls it through Check.call
        if issubclass(kind, _NDARRAY):
            raise CheckFailed(
                f"{exercise} returned a {kind.__name__}, a subclass of "
                "np.ndarray: return a plain array (np.asarray)."
            )
        raise CheckFailed(
            f"{exercise} returned a {kind.__name__}, which is not a plain value: return "
            "a tensor, an array, a number, or a tuple or list of them (no object of a "
            "class of your own, nor a subclass of list, int or the like)."
        )
    return result


# --------------------------------------------------------------------------- the check


class Check:
    """One exercise's check: calls the learner's code safely and reports clearly.

    ``forbidden``: dotted paths of what the exercise asks the learner to build themselves
    (``"torch.softmax"``, ``"torch.nn.MultiheadAttention"``); ``ops``: the torch operators
    behind them (``"_softmax"``), caught however they are reached.
    """

    def __init__(
        self, exercise: str, forbidden: Iterable[str] = (), hidden: bool = False, ops: Iterable[str] = ()
    ):
        self.exercise = exercise
        self.hidden = hidden
        # torch modes the learner's code runs under, entered before the recording starts (a
        # hidden check sets them while it runs the code on a second device)
        self.modes: tuple = ()
        self.sound()
        self.forbidden = Forbidden(forbidden, ops)

    # -- what the check relies on ---------------------------------------------------------
    def sound(self, recorder: _Recorder | None = None) -> None:
        """Fail the exercise unless the check can trust what it sees: the library functions,
        classes and checks it uses as they were before any learner code ran, no torch mode
        left entered, and no thread that could have run work beyond the recording's sight."""
        what = _changed()
        if what:
            raise CheckFailed(
                f"{self.exercise}: the check cannot trust its tools: {what} when the notebook "
                "started (code in this notebook replaced or changed it). Leave library functions, "
                "their classes and the checks as they are; this exercise scores zero until "
                "then."
            ) from None
        processes = _foreign_processes()
        if processes:
            raise CheckFailed(
                f"{self.exercise}: your code started another process ({', '.join(processes[:3])}), "
                "which could do the work where the check cannot see what it calls, so it cannot be "
                "sure what your code does. Stop it (or restart the kernel) and run everything in the "
                "notebook itself; this exercise scores zero until then."
            ) from None
        threads = _foreign_threads()
        if recorder is not None:
            threads += recorder.threads + _ran_meanwhile(recorder.idle)
        why = _unwatched()
        if threads or why:
            where = ", ".join(threads) if threads else why
            raise CheckFailed(
                f"{self.exercise}: your code runs work on another thread ({where}), where the "
                "check cannot see what it calls, so it cannot be sure what your code does. Run "
                "everything on the notebook's own thread (no thread, timer or pool: stop them, "
                "or restart the kernel); this exercise scores zero until then."
            ) from None

    # -- calling the learner's code --------------------------------------------------------
    def call(self, fn: Callable, *args, **kwargs):
        return self._call(fn, args, kwargs, module=False)

    def _call(self, fn: Callable, args, kwargs, module: bool):
        hits = self.forbidden.held_by(fn)
        if hits:
            self._forbidden_failure(hits[0])
        roots = {p.split(".")[0] for p in self.forbidden.paths} - set(sys.modules)
        result = self._guarded_call(fn, args, kwargs, module)
        if any(root in sys.modules for root in roots):
            # the code imported a forbidden package itself: look again, now that it exists
            self.forbidden = Forbidden(self.forbidden.paths, self.forbidden.ops)
            result = self._guarded_call(fn, args, kwargs, module)
        return result

    def call_on(self, what: str, fn: Callable, *args, **kwargs):
        """Like ``call``, and a failure says which input it was (``what``, e.g. "a batch")."""
        try:
            return self.call(fn, *args, **kwargs)
        except CheckFailed as exc:
            if "not implemented yet" in str(exc) or "the very thing" in str(exc):
                raise
            raise CheckFailed(f"{exc} (when called on {what})") from exc.__cause__

    def build(self, cls, *args, **kwargs):
        """An instance of the learner's class (an nn.Module), built quietly; fails if the
        class holds a forbidden built-in anywhere in its methods."""
        hits = self.forbidden.held_by(cls)
        if hits:
            self._forbidden_failure(hits[0])
        module = self._call(cls, args, kwargs, module=True)
        nn = sys.modules["torch"].nn
        self.that(
            isinstance(module, nn.Module),
            f"{self.exercise}(...) should create an "
            f"nn.Module (class {self.exercise}(nn.Module), with super().__init__() first), "
            f"got {type(module).__name__}.",
        )
        return module

    def _guarded_call(self, fn, args, kwargs, module: bool = False):
        self.sound()
        recorder = _Recorder(self.forbidden, self.modes)
        recorder.idle = _idle_now()
        try:
            with quiet(), recorder:
                result = fn(*args, **kwargs)
            self._verdict(recorder)
            return _plain(result, self.exercise, module)
        except NotImplementedError:
            self._verdict(recorder)
            raise CheckFailed(
                f"{self.exercise} is not implemented yet: replace the `raise NotImplementedError()` "
                "line with your code"
            ) from None
        except CheckFailed:
            self._verdict(recorder)
            raise
        except Exception as exc:
            self._verdict(recorder)
            raise CheckFailed(f"{self.exercise} raised {type(exc).__name__}: {exc}{_where(exc)}") from exc

    def _verdict(self, recorder: _Recorder) -> None:
        self.sound(recorder)
        if recorder.tampered:
            raise CheckFailed(
                f"{self.exercise} switches off the check's view of what it calls "
                f"({recorder.tampered[0]}); this exercise scores zero until it no longer does."
            ) from None
        if recorder.calls:
            self._forbidden_failure(recorder.calls[0])

    def _forbidden_failure(self, path: str):
        raise CheckFailed(
            f"{self.exercise} calls {path}, the very thing this exercise asks you to build. "
            "Write it with basic operations instead; this exercise scores zero until then."
        ) from None

    # -- reporting ------------------------------------------------------------------------
    def fail(self, message: str):
        raise CheckFailed(f"{self.exercise}: {message}")

    def ok(self, message: str):
        print(f"  ✓ {message}")

    def that(self, condition: bool, message: str, passed: str | None = None):
        if not condition:
            self.fail(message)
        if passed:
            self.ok(passed)

    def raises_value_error(self, what: str, fn, *args, wrong: str, instead: str, accepted: str, passed=None):
        """``fn(*args)`` (``what``, as the learner reads it) must raise a ValueError whose message
        says what is wrong (``wrong``); ``instead`` and ``accepted`` say what to do when it raises
        something else, or nothing."""
        try:
            self.call(fn, *args)
        except CheckFailed as exc:
            cause = exc.__cause__
            if cause is None:
                raise
            if not isinstance(cause, ValueError):
                self.fail(f"{what} raised {type(cause).__name__}: {instead}")
            self.that(
                len(str(cause)) > 10,
                f"raise the ValueError with a message that says what is wrong ({wrong}).",
                passed,
            )
            return
        self.fail(f"{what} was accepted: {accepted}")

    def done(self):
        self.sound()
        what = "hidden" if self.hidden else "visible"
        print(f"{self.exercise}: all {what} checks passed.")

    # -- common assertions ----------------------------------------------------------------
    def shape(self, got, expected: tuple, what: str, hint: str = ""):
        got_shape = tuple(getattr(got, "shape", np.shape(got)))
        if got_shape != tuple(expected):
            self.fail(
                f"{what} has shape {got_shape}, expected {tuple(expected)}." + (f" {hint}" if hint else "")
            )

    def close(
        self, got, expected, message: str, atol: float = 1e-6, rtol: float = 1e-5, passed: str | None = None
    ):
        got_np, exp_np = to_numpy(got), to_numpy(expected)
        if got_np.shape != exp_np.shape:
            self.fail(f"returned shape {got_np.shape}, expected {exp_np.shape}. {message}")
        if not np_all(np_isfinite(got_np) == np_isfinite(exp_np)):
            self.fail(f"found NaN or inf where finite numbers belong. {message}")
        finite = np_isfinite(exp_np)
        if not _allclose(got_np[finite], exp_np[finite], atol=atol, rtol=rtol):
            worst = float(np_max(np_abs(got_np[finite] - exp_np[finite]))) if finite.any() else 0.0
            self.fail(f"values are off (largest difference {worst:.3g}). {message}")
        if passed:
            self.ok(passed)

    def load_by_name(self, student, source, names: str, hint: str = "") -> None:
        """Copy ``source``'s parameters into the learner's module ``student``, matched by name
        (``names`` says which parts the exercise names), then put it in eval mode."""
        torch = sys.modules["torch"]
        mine, theirs = dict(student.named_parameters()), dict(source.named_parameters())
        missing, extra = sorted(set(theirs) - set(mine)), sorted(set(mine) - set(theirs))
        if missing or extra:
            self.fail(
                "could not load the known test weights into your module: "
                + (f"missing parameters {missing[:5]}" if missing else "")
                + (" and " if missing and extra else "")
                + (f"unexpected parameters {extra[:5]}" if extra else "")
                + f". Name the parts as the exercise says ({names}) and create only those "
                "parameters." + (f" {hint}" if hint else "")
            )
        for name, p in theirs.items():
            if tuple(mine[name].shape) != tuple(p.shape):
                self.fail(
                    f"parameter {name} has shape {tuple(mine[name].shape)}, expected "
                    f"{tuple(p.shape)} ({names})."
                )
        with torch.no_grad():
            for name, p in theirs.items():
                mine[name].copy_(p)
        student.eval()


# --------------------------------------------------------------------------- small helpers


def to_numpy(x) -> np.ndarray:
    """Any array-like (torch tensors on any device included) as a float64 NumPy array."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if x.dtype.is_floating_point or x.dtype.is_complex:
            x = x.double()
        return x.numpy()
    return _asarray(x)


def devices() -> list:
    """The CPU, plus the accelerator when there is one: the same code must run on both."""
    import torch

    from ..device import get_device

    extra = get_device()
    return [torch.device("cpu")] + ([extra] if extra.type != "cpu" else [])


_EXPECTED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "expected")


@functools.lru_cache(maxsize=None)
def _stored(assignment: str) -> bytes:
    with open(os.path.join(_EXPECTED, f"{assignment}.npz"), "rb") as fh:
        return fh.read()  # bytes: what learner code could reach of the cache, it cannot change


def stored(assignment: str, name: str) -> np.ndarray:
    """An expected output stored for the visible checks of ``assignment`` (read afresh)."""
    with np.load(io.BytesIO(_stored(assignment)), allow_pickle=False) as data:
        return data[name]


def generator(seed: int):
    """A torch CPU generator with ``seed``: inputs that never depend on the notebook's state."""
    import torch

    return torch.Generator().manual_seed(seed)
