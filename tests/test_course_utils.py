"""Unit tests of course_utils: device choice, seeding, GloVe, and the check machinery."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest
import torch

import course_utils
from course_utils.checks._core import Check, CheckFailed, quiet
from course_utils.glove import load_glove


def test_get_device_prefers_accelerators_and_honours_overrides(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    dev = course_utils.get_device()
    if torch.cuda.is_available():
        assert dev.type == "cuda"
    elif getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        assert dev.type == "mps"
    else:
        assert dev.type == "cpu"
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert course_utils.get_device().type == "cpu"
    assert course_utils.get_device("meta").type == "meta"


def test_seed_everything_repeats_numbers():
    course_utils.seed_everything(3)
    a = (np.random.rand(), torch.rand(2))
    course_utils.seed_everything(3)
    b = (np.random.rand(), torch.rand(2))
    assert a[0] == b[0] and torch.equal(a[1], b[1])


def test_grading_follows_nbgrader_environment(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("COURSE_GRADING", raising=False)
    assert not course_utils.grading()
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert course_utils.grading()


def test_glove_loads_real_vectors():
    g = load_glove()
    assert len(g) == 20000 and g.dim == 50 and g.vectors.dtype == np.float32
    assert g.words[0] == "the" and "king" in g and "zzzqqq" not in g
    # The first GloVe 6B 50-d line, as published: "the 0.418 0.24968 -0.41242 ..."
    assert g["the"][:3] == pytest.approx([0.418, 0.24968, -0.41242], abs=2e-3)
    u, v = g["king"], g["queen"]
    assert float(u @ v / np.linalg.norm(u) / np.linalg.norm(v)) == pytest.approx(0.784, abs=2e-3)
    with pytest.raises(KeyError, match="not among"):
        g.id("zzzqqq")


def test_quiet_swallows_warnings_and_stderr(capsys):
    with quiet():
        warnings.warn("noisy")
        print("to stderr", file=sys.stderr)
        print("to stdout")
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_check_call_turns_not_implemented_into_a_clear_message():
    def todo(x):
        raise NotImplementedError()

    with pytest.raises(CheckFailed, match="not implemented yet"):
        Check("todo").call(todo, 1)


def test_check_call_reports_the_students_exception():
    def broken(x):
        return x.nope

    with pytest.raises(CheckFailed, match="raised AttributeError"):
        Check("broken").call(broken, 1)


def test_check_call_forbids_builtins_called_directly_aliased_or_as_methods():
    forbidden = ["torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax"]
    F = torch.nn.functional

    def direct(x):
        return F.softmax(x, dim=-1)

    def method(x):
        return x.softmax(-1)

    def swallowed(x):  # catching the tripwire does not help
        try:
            return torch.softmax(x, -1)
        except Exception:
            return x

    for fn in (direct, method, swallowed, torch.softmax):
        with pytest.raises(CheckFailed, match="the very thing this exercise asks you to build"):
            Check("softmax", forbidden).call(fn, torch.ones(3))
    # restored afterwards
    assert torch.nn.functional.softmax(torch.zeros(2), dim=-1).tolist() == [0.5, 0.5]
    assert torch.zeros(2).softmax(-1).tolist() == [0.5, 0.5]


def test_check_call_allows_what_is_not_forbidden():
    def mine(x):
        e = torch.exp(x - x.max())
        return e / e.sum()

    out = Check("softmax", ["torch.softmax"]).call(mine, torch.zeros(4))
    assert out.tolist() == [0.25] * 4


def test_close_names_nan_and_values():
    c = Check("f")
    with pytest.raises(CheckFailed, match="NaN or inf"):
        c.close(torch.tensor([float("nan")]), torch.tensor([1.0]), "hint")
    with pytest.raises(CheckFailed, match="largest difference"):
        c.close(np.array([1.0, 2.0]), np.array([1.0, 2.5]), "hint")
    c.close(np.array([1.0, float("-inf")]), np.array([1.0, float("-inf")]), "hint")


def test_check_call_catches_a_builtin_imported_inside_the_function():
    import subprocess

    code = (
        "import sys\n"
        "from course_utils.checks.embeddings import check_one_hot\n"
        "def one_hot(ids, vocab_size):\n"
        "    import torch\n"
        "    return torch.nn.functional.one_hot(torch.as_tensor(ids), vocab_size).double().numpy()\n"
        "assert 'torch' not in sys.modules\n"
        "try:\n"
        "    check_one_hot(one_hot)\n"
        "except AssertionError as e:\n"
        "    print('caught:', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "caught:" in out.stdout and "torch.nn.functional.one_hot" in out.stdout, out.stdout + out.stderr


SOFTMAX = dict(
    forbidden=["torch.softmax", "torch.nn.functional.softmax", "torch.Tensor.softmax"],
    ops=("_softmax", "_log_softmax", "_safe_softmax"),
)


def _captured_as_default(x, _f=torch.softmax):
    return _f(x, -1)


def _captured_in_closure():
    f = torch.nn.functional.softmax

    def inner(x):
        return f(x, dim=-1)

    return inner


def _partial_built_inside(x):
    import functools

    return functools.partial(getattr(torch, "soft" + "max"), dim=-1)(x)


def _via_aten(x):
    return torch.ops.aten._softmax(x, -1, False)


def _private(x):
    return torch._softmax(x, -1, False)


def _through_map(x):
    return list(map(torch.softmax, [x], [-1]))[0]


@pytest.mark.parametrize(
    "fn",
    [
        _captured_as_default,
        _captured_in_closure(),
        _partial_built_inside,
        _via_aten,
        _private,
        _through_map,
        __import__("functools").partial(torch.softmax, dim=-1),
    ],
    ids=["default-arg", "closure", "partial-inside", "aten", "private", "map", "partial"],
)
def test_forbidden_builtins_are_caught_however_they_are_reached(fn):
    with pytest.raises(CheckFailed, match="the very thing this exercise asks you to build"):
        Check("softmax", **SOFTMAX).call(fn, torch.ones(2, 3))


def test_switching_the_recording_off_fails_the_exercise():
    def sneaky(x):
        previous = sys.getprofile()
        sys.setprofile(None)
        try:
            return torch.softmax(x, -1)
        finally:
            sys.setprofile(previous)

    with pytest.raises(CheckFailed, match="switches off the check's view"):
        Check("softmax", **SOFTMAX).call(sneaky, torch.ones(3))
    assert sys.getprofile() is None


def test_an_exercise_that_starts_a_thread_fails():  # where the recording would not look
    import threading

    def threaded(x):
        out = []
        worker = threading.Thread(target=lambda: out.append(torch.softmax(x, -1)))
        worker.start()
        worker.join()
        return out[0]

    with pytest.raises(CheckFailed, match=r"your code runs work on another thread \(a thread it started\)"):
        Check("softmax", **SOFTMAX).call(threaded, torch.ones(3))


def test_a_tensor_subclass_cannot_run_code_after_the_call():
    class Sly(torch.Tensor):
        pass

    with pytest.raises(CheckFailed, match="subclass of torch.Tensor"):
        Check("softmax", **SOFTMAX).call(lambda x: x.as_subclass(Sly), torch.ones(3))


class _ReadsTheExpected:
    """What an exercise could return to pass any comparison: converted by the check after the
    call, it finds the check's expected value in the caller's frames and hands it back."""

    def __init__(self, shape):
        self.shape = shape

    def __array__(self, dtype=None, copy=None):
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name == "close" and "expected" in frame.f_locals:
                return np.asarray(frame.f_locals["expected"], dtype=np.float64)
            frame = frame.f_back
        return np.zeros(self.shape)


class _ComputesLater:
    """A result that does the forbidden work only when the check converts it, after the call."""

    def __init__(self, ids, vocab_size):
        self.ids, self.vocab_size, self.shape = ids, vocab_size, (*np.shape(ids), vocab_size)

    def __array__(self, dtype=None, copy=None):
        return torch.nn.functional.one_hot(torch.as_tensor(self.ids), self.vocab_size).double().numpy()


class _AlwaysEqual(int):
    def __eq__(self, other):
        return True

    __hash__ = int.__hash__


class _ClaimsToBeAModule(_ReadsTheExpected):
    __class__ = property(lambda self: torch.nn.Module)  # what isinstance asks


@pytest.mark.parametrize(
    "check, fn",
    [
        ("check_embed", lambda ids, E: _ReadsTheExpected((*np.shape(ids), np.shape(E)[1]))),
        ("check_one_hot", lambda ids, vocab_size: _ComputesLater(ids, vocab_size)),
        (
            "check_embed",
            lambda ids, E: np.array([[_AlwaysEqual(0)] * np.shape(E)[1]] * len(ids), dtype=object),
        ),
        ("check_embed", lambda ids, E: _ClaimsToBeAModule((*np.shape(ids), np.shape(E)[1]))),
    ],
    ids=["reads-expected-from-frames", "computes-after-the-call", "object-array", "claims-to-be-a-module"],
)
def test_a_result_that_would_run_code_inside_the_check_fails(check, fn):
    from course_utils.checks import embeddings

    with quiet(), pytest.raises(CheckFailed, match="not a plain value|array of Python objects"):
        getattr(embeddings, check)(fn)


def test_plain_results_and_the_learners_module_still_pass():
    from course_utils.checks._core import _plain

    value = (
        torch.ones(2),
        torch.max(torch.ones(2, 2), 0),
        torch.Size([2]),
        None,
        [1, 2.0, np.float32(1)],
        {"k": torch.nn.Parameter(torch.ones(1))},
        np.ones(3),
        "text",
        True,
    )
    assert _plain(value, "x") is value
    looped = []
    looped.append(looped)
    assert _plain(looped, "x") is looped
    for sly in (
        _AlwaysEqual(1),
        type("L", (list,), {})([1]),
        (torch.ones(1), _ReadsTheExpected(())),
        {"k": _ComputesLater([0], 2)},
        [[[_AlwaysEqual(0)]]],
    ):
        with pytest.raises(CheckFailed, match="not a plain value"):
            _plain(sly, "x")
    layer = Check("Linear").build(torch.nn.Linear, 2, 2)  # build: the learner's module is the result
    assert isinstance(layer, torch.nn.Linear)
    with pytest.raises(CheckFailed, match="not a plain value"):
        Check("Linear").call(torch.nn.Linear, 2, 2)  # a function's result is no module


def test_a_failed_check_shows_its_message_not_the_checks_internals():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    result = shell.run_cell(
        "from course_utils.checks._core import Check\nCheck('softmax').fail('each row should sum to 1')",
        store_history=False,
    )
    assert isinstance(result.error_in_exec, CheckFailed)
    rendered = result.error_in_exec._render_traceback_()
    assert len(rendered) == 1 and "softmax: each row should sum to 1" in rendered[0]
    assert "_core.py" not in "".join(rendered)


def test_a_long_message_breaks_between_words_never_inside_one():
    """JupyterLab shows error output with ``word-break: break-all``: a line longer than the pane
    is cut inside a word ("`r eturn"). The messages come in lines that fit, broken at words,
    with a `code span` whole."""
    import re

    from course_utils.notebook import WIDTH, note, wrapped

    ansi = re.compile(r"\x1b\[[0-9;]*m")
    message = (
        "simple_self_attention raised RuntimeError: mat1 and mat2 shapes cannot be "
        "multiplied (3x3 and 2x2) in line `return softmax(scores) @ X[..., :2, :]`; "
        "expected softmax(X Xᵀ) X with the softmax over the LAST dim (each row of scores "
        "is one token's weights over all tokens). No scaling in this parameter-free form."
    )
    rendered = CheckFailed(message)._render_traceback_()
    plain = [ansi.sub("", line) for line in rendered]
    assert len(rendered) > 2 and max(map(len, plain)) <= WIDTH
    assert " ".join(plain) == f"CheckFailed: {message}"  # every break is between two words
    assert any("`return softmax(scores) @ X[..., :2, :]`" in line for line in plain)
    assert rendered[0].startswith("\x1b[0;31mCheckFailed\x1b[0m: ")
    # the note of an unwritten exercise too; a word longer than a line gets one of its own
    lines = [ansi.sub("", line) for line in wrapped(note("scaled_dot_product_attention"))]
    assert " ".join(lines) == ansi.sub("", note("scaled_dot_product_attention"))
    assert max(map(len, lines)) <= WIDTH < len(" ".join(lines))
    assert wrapped("a " + "x" * 100 + " b", width=20) == ["a", "x" * 100, "b"]
    assert wrapped("one\ntwo  three", width=20) == ["one", "two three"]
