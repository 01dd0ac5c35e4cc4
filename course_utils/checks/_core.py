"""Machinery shared by every check: quiet calls, forbidden built-ins, clear failures."""
from __future__ import annotations

import contextlib
import importlib
import io
import os
import sys
import warnings
from typing import Callable, Iterable

import numpy as np

# Taken at import (the notebook's first cell), before any student code can patch them.
_isclose = np.isclose
_allclose = np.allclose
_asarray = np.asarray


class CheckFailed(AssertionError):
    """A check found a mistake. The message names the likely cause."""


@contextlib.contextmanager
def quiet():
    """Swallow warnings, stdout and stderr from the code under test.

    nbgrader gives a grade cell zero points for *any* stderr output, so a correct solution that
    happens to warn must not lose marks.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            yield


def _resolve(path: str):
    """'torch.nn.functional.softmax' -> (module or class, attribute name, object).

    None when the package was never imported: the student's code can't be calling it then,
    and a NumPy-only notebook should not pay for importing torch.
    """
    parts = path.split(".")
    if parts[0] not in sys.modules:
        return None
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:-1]:
                owner = getattr(owner, attr)
            return owner, parts[-1], getattr(owner, parts[-1])
        except AttributeError:
            return None
    return None


_LIBRARIES = (os.sep + "site-packages" + os.sep, os.sep + "lib" + os.sep + "python",
              os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep, "<frozen")


def _where(exc: BaseException) -> str:
    """' in line `...`': the last line of the student's own code in the traceback, if known."""
    import traceback

    mine = [f for f in traceback.extract_tb(exc.__traceback__)
            if not any(lib in f.filename for lib in _LIBRARIES)]
    if mine and mine[-1].line:
        return f" in line `{mine[-1].line.strip()}`"
    return ""


class _Tripwire:
    def __init__(self, path: str, original, calls: list):
        self.path, self.original, self.calls = path, original, calls

    def __call__(self, *args, **kwargs):
        self.calls.append(self.path)
        raise CheckFailed(f"uses {self.path}")

    def __get__(self, obj, objtype=None):  # as a method, e.g. Tensor.softmax
        if obj is None:
            return self
        return lambda *a, **k: self(obj, *a, **k)


@contextlib.contextmanager
def _forbidden(paths: Iterable[str], calls: list):
    patched = []
    try:
        for path in paths:
            found = _resolve(path)
            if found is None:
                continue
            owner, name, original = found
            try:
                setattr(owner, name, _Tripwire(path, original, calls))
            except (AttributeError, TypeError):
                continue
            patched.append((owner, name, original))
        yield
    finally:
        for owner, name, original in reversed(patched):
            setattr(owner, name, original)


def _referenced_forbidden(fn, paths: Iterable[str]) -> list[str]:
    """Forbidden objects that ``fn`` is, or names among its globals (catches aliases)."""
    targets = {}
    for path in paths:
        found = _resolve(path)
        if found is not None:
            targets[id(found[2])] = path
    hits = []
    if id(fn) in targets:
        hits.append(targets[id(fn)])
    code = getattr(fn, "__code__", None)
    glb = getattr(fn, "__globals__", {})
    if code is not None:
        for name in code.co_names:
            obj = glb.get(name)
            if obj is not None and id(obj) in targets:
                hits.append(targets[id(obj)])
    return hits


class Check:
    """One exercise's check: calls the student's function safely and reports clearly."""

    def __init__(self, exercise: str, forbidden: Iterable[str] = (), hidden: bool = False):
        self.exercise = exercise
        self.forbidden = tuple(forbidden)
        self.hidden = hidden

    # -- calling the student's code -------------------------------------------------------
    def call(self, fn: Callable, *args, **kwargs):
        hits = _referenced_forbidden(fn, self.forbidden)
        if hits:
            self._forbidden_failure(hits[0])
        loaded = set(sys.modules)
        result = self._guarded_call(fn, args, kwargs)
        if any(p.split(".")[0] not in loaded and p.split(".")[0] in sys.modules
               for p in self.forbidden):
            # the code imported a forbidden package itself: call again, now with the tripwires
            result = self._guarded_call(fn, args, kwargs)
        return result

    def call_on(self, what: str, fn: Callable, *args, **kwargs):
        """Like ``call``, and a failure says which input it was (``what``, e.g. "a batch")."""
        try:
            return self.call(fn, *args, **kwargs)
        except CheckFailed as exc:
            if "not implemented yet" in str(exc) or "the very thing" in str(exc):
                raise
            raise CheckFailed(f"{exc} (when called on {what})") from exc.__cause__

    def _guarded_call(self, fn, args, kwargs):
        calls: list[str] = []
        try:
            with quiet(), _forbidden(self.forbidden, calls):
                result = fn(*args, **kwargs)
        except NotImplementedError:
            raise CheckFailed(
                f"{self.exercise} is not implemented yet: replace the `raise NotImplementedError()` "
                "line with your code"
            ) from None
        except CheckFailed:
            if calls:
                self._forbidden_failure(calls[0])
            raise
        except Exception as exc:
            if calls:
                self._forbidden_failure(calls[0])
            raise CheckFailed(
                f"{self.exercise} raised {type(exc).__name__}: {exc}{_where(exc)}"
            ) from exc
        if calls:
            self._forbidden_failure(calls[0])
        return result

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

    def done(self):
        what = "hidden" if self.hidden else "visible"
        print(f"{self.exercise}: all {what} checks passed.")

    # -- common assertions ----------------------------------------------------------------
    def shape(self, got, expected: tuple, what: str, hint: str = ""):
        got_shape = tuple(getattr(got, "shape", np.shape(got)))
        if got_shape != tuple(expected):
            self.fail(
                f"{what} has shape {got_shape}, expected {tuple(expected)}."
                + (f" {hint}" if hint else "")
            )

    def close(self, got, expected, message: str, atol: float = 1e-6, rtol: float = 1e-5,
              passed: str | None = None):
        got_np, exp_np = to_numpy(got), to_numpy(expected)
        if got_np.shape != exp_np.shape:
            self.fail(f"returned shape {got_np.shape}, expected {exp_np.shape}. {message}")
        if not np.all(np.isfinite(got_np) == np.isfinite(exp_np)):
            self.fail(f"found NaN or inf where finite numbers belong. {message}")
        finite = np.isfinite(exp_np)
        if not _allclose(got_np[finite], exp_np[finite], atol=atol, rtol=rtol):
            worst = float(np.max(np.abs(got_np[finite] - exp_np[finite]))) if finite.any() else 0.0
            self.fail(f"values are off (largest difference {worst:.3g}). {message}")
        if passed:
            self.ok(passed)


def to_numpy(x) -> np.ndarray:
    """Any array-like (torch tensors on any device included) as a float64 NumPy array."""
    if hasattr(x, "detach"):
        x = x.detach().cpu()
        if x.dtype.is_floating_point or x.dtype.is_complex:
            x = x.double()
        return x.numpy()
    return _asarray(x)
