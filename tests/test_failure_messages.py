"""What a learner reads of a failing check in nbgrader's feedback: the check's message alone,
with their own line when their code raised, and nothing of the course's internals. The cell
still scores 0. (tests/test_browser.py shows the same in JupyterLab.)"""

from __future__ import annotations

import csv
import html
import linecache
import re
import shutil

import nbformat
import pytest

from conftest import ROOT
from course_grading.commands.cli import main
from course_utils.notebook import WIDTH
from harness import run_grade_cell

ASSIGNMENT = "03_attention"
# softmax sums over the whole tensor, not along dim; simple_self_attention raises inside itself
BUGGY = {
    "softmax": "def softmax(x, dim=-1):\n    e = torch.exp(x - x.max())\n    return e / e.sum()\n",
    "simple_self_attention": (
        "def simple_self_attention(X):\n    scores = X @ X.transpose(-2, -1)\n"
        "    return softmax(scores) @ X[..., :2, :]\n"
    ),
}
INTERNALS = (
    "_core.py",
    "course_utils",
    "Check.close",
    "def close",
    "def fail",
    "self.fail",
    "Traceback (most recent call last)",
    "site-packages",
)


def learner_submission():
    """The student release with two buggy exercises and two left unwritten."""
    nb = nbformat.read(ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in BUGGY:
            cell.source = BUGGY[grade_id]
    return nb


def _errors(page) -> list[str]:
    """The text of every error output of a feedback page, tags dropped and entities decoded."""
    blocks = re.findall(
        r'<div class="[^"]*output_error[^"]*">(.*?)</div>', page.read_text(encoding="utf-8"), re.S
    )
    return [html.unescape(re.sub(r"<[^>]+>", "", block)).strip() for block in blocks]


@pytest.mark.slow
def test_feedback_shows_the_message_and_the_learners_line_only(tmp_path, capsys):
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / ASSIGNMENT, course / "solutions" / ASSIGNMENT)
    folder = course / "submitted" / "ada" / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(learner_submission(), str(folder / f"{ASSIGNMENT}.ipynb"))

    assert main(["--root", str(course), "autograde", ASSIGNMENT, "--jobs", "1"]) == 0
    assert main(["--root", str(course), "feedback", ASSIGNMENT]) == 0
    capsys.readouterr()

    rows = list(csv.DictReader((course / "reports" / "grades.csv").open()))
    scores = {r["exercise"]: float(r["score"]) for r in rows}
    assert scores == {
        "test_softmax": 0,
        "test_simple_self_attention": 0,
        "test_scaled_dot_product_attention": 0,
        "test_causal_mask": 0,
        "written_sqrt_dk": 0,
        "written_mask_before_softmax": 0,
    }
    written = [r for r in rows if r["exercise"].startswith("written_")]
    assert all("not answered" in " ".join(r.values()) for r in written), written  # graded by hand

    (page,) = (course / "feedback" / "ada" / ASSIGNMENT).glob("*.html")
    errors = _errors(page)
    checks = [e for e in errors if e.startswith("CheckFailed")]
    assert len(checks) == 4, errors  # one per test cell: each is its message alone
    # its lines broken between words (course_utils.notebook.wrapped), a `code span` whole
    assert all(max(map(len, e.splitlines())) <= WIDTH for e in checks), checks
    assert any("`return softmax(scores) @ X[..., :2, :]`" in line for e in checks for line in e.splitlines())
    text = "\n".join(" ".join(e.split()) for e in checks)
    assert "CheckFailed: softmax: values are off (largest difference" in text
    assert "each row should sum to 1 along dim=-1" in text
    assert (
        "CheckFailed: simple_self_attention raised RuntimeError:" in text
        and "in line `return softmax(scores) @ X[..., :2, :]`" in text
    )
    assert "CheckFailed: causal_mask is not implemented yet" in text
    for internal in INTERNALS:
        assert internal not in text, f"a failed check shows {internal!r}"
    # the demo cells that run the buggy code show the learner's own cells, never the checks'
    assert not any("_core.py" in e or "course_utils" in e for e in errors), errors


# The learner's attention call is wrong; the error is raised inside the MultiHeadAttention that
# building_blocks.py provides. The message names the learner's line, not the course's.
WRONG_CALL = """
class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        attended = self.self_attn(x, x.transpose(-2, -1), x, mask)[0]
        x = self.norm1(x + self.dropout(attended))
        return self.norm2(x + self.dropout(self.ffn(x)))
"""


def test_the_learners_line_not_the_provided_components(monkeypatch):
    # IPython keeps every cell's source in linecache, so a traceback can quote it; do the same
    # for the "<variant>" the harness compiles the learner's code as
    monkeypatch.setitem(
        linecache.cache, "<variant>", (len(WRONG_CALL), None, WRONG_CALL.splitlines(True), "<variant>")
    )
    outcome = run_grade_cell("06_encoder", "test_encoder_layer", WRONG_CALL)
    assert not outcome.passed
    assert outcome.message.endswith(
        "in line `attended = self.self_attn(x, x.transpose(-2, -1), x, mask)[0]`"
    ), outcome.message


# --------------------------------------------------------------------------- what the checks rely on
# Library functions the checks decide with, replaced by the learner's code however it reaches
# them: the check names what was replaced and the exercise scores zero; put back, it grades.

import builtins
import sys

import numpy as np
import torch

from course_utils.checks import _record, _seal, attention, embeddings
from course_utils.checks._core import CheckFailed

TOOLS_MESSAGE = "the check cannot trust its tools"


def _softmax(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)


def _setattr_restore(owner, name, value):
    missing = object()
    before = owner.__dict__.get(name, missing) if isinstance(owner, type) else getattr(owner, name, missing)

    def restore():
        if before is missing:
            delattr(owner, name)
        else:
            setattr(owner, name, before)

    setattr(owner, name, value)
    return restore


def _alias():
    import torch as t

    return _setattr_restore(t, "equal", lambda *a, **k: True)


def _module_dict():
    space = sys.modules["torch"].__dict__
    before = space["equal"]
    space["equal"] = lambda *a, **k: True
    return lambda: space.__setitem__("equal", before)


def _vars():
    before = vars(np)["allclose"]
    vars(np)["allclose"] = lambda *a, **k: True
    return lambda: vars(np).__setitem__("allclose", before)


def _code_swapped():
    target = np.isclose._implementation
    before = target.__code__
    target.__code__ = (
        lambda a, b, rtol=1e-05, atol=1e-08, equal_nan=False: np.ones(np.shape(a), bool)
    ).__code__
    return lambda: setattr(target, "__code__", before)


def _function_mode():
    from torch.overrides import TorchFunctionMode

    class Always(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.equal:
                return True
            return func(*args, **(kwargs or {}))

    mode = Always()
    mode.__enter__()
    return lambda: mode.__exit__(None, None, None)


def _forbidden_list_cleared():
    before = list(attention.SOFTMAX_BUILTINS)
    attention.SOFTMAX_BUILTINS.clear()
    return lambda: attention.SOFTMAX_BUILTINS.extend(before)


class _SaysEqual(float):
    """A number that says it equals anything, and prints as what it replaced."""

    def __eq__(self, other):
        return True

    __hash__ = float.__hash__

    def __repr__(self):
        return "None"


def _keyword_default_that_says_equal():
    defaults = torch.testing.assert_close.__kwdefaults__
    before = defaults["atol"]
    defaults["atol"] = _SaysEqual(1e9)  # every comparison would pass
    return lambda: defaults.__setitem__("atol", before)


def _closure_function():
    """A recorded library function with a closure (a wrapper around what it calls)."""
    for record in _seal._SEAL.records:
        for name, (value, inner, _) in record.entries.items():
            if (
                inner is not None
                and inner[3]
                and record.label.startswith("torch")
                and all(contents is not _record._EMPTY for _, contents in inner[3])
            ):
                return record.label, name, _record._function(value).__closure__[0]
    raise AssertionError("no recorded torch function with a closure")


def _closure_cell_replaced():
    _, _, cell = _closure_function()
    before = cell.cell_contents
    cell.cell_contents = lambda *a, **k: True
    return lambda: setattr(cell, "cell_contents", before)


def _closure_cell_emptied():
    _, _, cell = _closure_function()
    before = cell.cell_contents
    del cell.cell_contents
    return lambda: setattr(cell, "cell_contents", before)


def _keyword_default_moved():
    """A keyword default moved from one function's dict to the next one's: the joined keys and
    values stay the same, each dict does not."""
    from torch.storage import TypedStorage

    to, shared = TypedStorage.to.__kwdefaults__, TypedStorage._new_shared.__kwdefaults__
    before_to, before_shared = dict(to), dict(shared)
    to["device"] = shared.pop("device")

    def restore():
        to.clear(), to.update(before_to), shared.clear(), shared.update(before_shared)

    return restore


def _global_added_same_size():
    """A name the record leaves out removed and a global added: the namespace keeps its size,
    and the new ``abs`` shadows the built-in inside ``np.isclose``."""
    import numpy._core.numeric as numeric

    doc = numeric.__doc__
    del numeric.__doc__
    numeric.abs = lambda v: v * 0

    def restore():
        del numeric.abs
        numeric.__doc__ = doc

    return restore


def _callable_stand_in_submodule():
    """A module of the learner's class that can be called, named as a submodule would be."""
    import types

    import numpy._core.numeric as numeric

    class StandIn(types.ModuleType):
        def __call__(self, v):
            return v * 0

    numeric.abs = StandIn("numpy._core.numeric.abs")
    return lambda: delattr(numeric, "abs")


def _builtins_class_swapped():
    """builtins given a module class of the learner's, whose attributes answer as it likes
    (NumPy calls ``builtins.bool`` explicitly)."""
    import types

    class Lying(types.ModuleType):
        pass

    builtins.__class__ = Lying
    return lambda: setattr(builtins, "__class__", types.ModuleType)


PATCHES = {
    "import torch as t; t.equal = ...": (_alias, "torch.equal"),
    "setattr(torch, 'equal', ...)": (
        lambda: _setattr_restore(torch, "equal", lambda *a: True),
        "torch.equal",
    ),
    "sys.modules['torch'].__dict__['equal']": (_module_dict, "torch.equal"),
    "vars(np)['allclose']": (_vars, "numpy.allclose"),
    "np.testing.assert_allclose": (
        lambda: _setattr_restore(np.testing, "assert_allclose", lambda *a, **k: None),
        "numpy.testing.assert_allclose",
    ),
    "torch.Tensor.__eq__": (
        lambda: _setattr_restore(torch.Tensor, "__eq__", lambda *a: torch.tensor(True)),
        "torch.Tensor.__eq__",
    ),
    "torch.Tensor.all (not its own before)": (
        lambda: _setattr_restore(torch.Tensor, "all", lambda *a: torch.tensor(True)),
        "torch.Tensor.all was added",
    ),
    # (one that behaves as the original: what counts is that it is not the original)
    "builtins.isinstance": (
        lambda: _setattr_restore(builtins, "isinstance", lambda o, c, _i=isinstance: _i(o, c)),
        "builtins.isinstance",
    ),
    # what the look itself would use, were it not its own: it still sees
    "builtins.all, answering True": (
        lambda: _setattr_restore(builtins, "all", lambda *a, **k: True),
        "builtins.all",
    ),
    "operator.is_, answering True": (
        lambda: _setattr_restore(__import__("operator"), "is_", lambda a, b: True),
        "operator.is_",
    ),
    "np.isclose's code swapped": (_code_swapped, "numpy.isclose (its code"),
    "a torch function mode left entered": (_function_mode, "a torch function mode was left entered"),
    "the check's own captured function": (
        lambda: _setattr_restore(attention, "_softmax", _softmax),
        "course_utils.checks.attention._softmax",
    ),
    "the check's list of forbidden names cleared": (
        _forbidden_list_cleared,
        "SOFTMAX_BUILTINS (its contents)",
    ),
    # changed in place, by an object that says it is equal (its __eq__ must not be what decides)
    "a keyword default replaced by one that says it is equal": (
        _keyword_default_that_says_equal,
        "assert_close (its code, defaults or closure)",
    ),
    "a closure's cell given other contents": (_closure_cell_replaced, "(its code, defaults or closure)"),
    "a closure's cell emptied": (_closure_cell_emptied, "(its code, defaults or closure)"),
    "a keyword default moved to another function's dict": (
        _keyword_default_moved,
        "TypedStorage.to (its code, defaults or closure)",
    ),
    # names: a namespace that keeps its size, a stand-in submodule, the class of a module
    "a name removed and a global added": (_global_added_same_size, "numpy._core.numeric.abs was added"),
    "a callable stand-in named as a submodule": (
        _callable_stand_in_submodule,
        "numpy._core.numeric.abs was added",
    ),
    "builtins given another class": (_builtins_class_swapped, "builtins (its class) is not what it was"),
}


@pytest.mark.parametrize("how", PATCHES)
def test_a_replaced_tool_fails_the_check_and_names_it(how):
    patch, named = PATCHES[how]
    assert _seal.changed() is None
    restore = patch()
    try:
        with pytest.raises(CheckFailed, match=TOOLS_MESSAGE) as info:
            attention.check_softmax(_softmax)
    finally:
        restore()
    assert named in str(info.value), str(info.value)
    assert _seal.changed() is None
    attention.check_softmax(_softmax)  # put back: graded


def test_contents_are_compared_by_identity_to_any_depth():
    """A container's snapshot holds what it held, nested containers' contents too: an object
    that prints, or compares, as the one it replaced is still another object."""
    tolerances = {"atol": 1e-6, "names": ["torch.softmax"], "pair": (1, [2])}
    then = _record._contents(tolerances)
    assert _record._same_objects(_record._contents(tolerances), then)
    for change in (
        lambda d: d.__setitem__("atol", _SaysEqual(1e9)),
        lambda d: d["names"].append("torch.special.softmax"),
        lambda d: d["pair"][1].clear(),
        lambda d: d.__setitem__("names", list(d["names"])),
    ):
        changed = {"atol": tolerances["atol"], "names": tolerances["names"], "pair": tolerances["pair"]}
        snapshot = _record._contents(changed)
        kept = (changed["names"][:], changed["pair"][1][:])
        change(changed)
        assert not _record._same_objects(_record._contents(changed), snapshot)
        tolerances["names"][:], tolerances["pair"][1][:] = kept
    # nested the other way round is not the same either ([[a], b] against [[a, b]])
    inner, a, b = [], object(), object()
    outer = [inner, b]
    inner.append(a)
    snapshot = _record._contents(outer)
    outer.remove(b)
    inner.append(b)
    assert not _record._same_objects(_record._contents(outer), snapshot)


@pytest.mark.parametrize("where", ["sys.modules", "torch"])
def test_a_key_of_the_learners_class_runs_none_of_their_code(where):
    """A key whose class is the learner's, put into sys.modules or a namespace the checks rely
    on: comparing it, or hashing it, would run their code inside the check, outside any
    recording. The check refuses, having run none of it."""
    ran = []

    class Name(str):
        armed = False

        def __eq__(self, other):
            if Name.armed:
                ran.append("__eq__")
            return str.__eq__(self, other)

        def __hash__(self):
            if Name.armed:
                ran.append("__hash__")
            return str.__hash__(self)

        def __format__(self, spec):
            ran.append("__format__")
            return str.__format__(self, spec)

    key = Name("left_by_the_learner")
    space = sys.modules if where == "sys.modules" else vars(torch)

    def softmax(x, dim=-1):
        space[key] = None
        Name.armed = True
        return _softmax(x, dim)

    named = "sys.modules" if where == "sys.modules" else "torch.<a key that is not a name> was added"
    try:
        with pytest.raises(CheckFailed, match=TOOLS_MESSAGE + ": " + re.escape(named)):
            attention.check_softmax(softmax)
    finally:
        Name.armed = False
        del space[key]
    assert ran == []
    assert _seal.changed() is None
    attention.check_softmax(_softmax)  # taken out: graded


def test_a_key_colliding_with_a_recorded_name_is_seen_before_any_lookup():
    """A key of the learner's class with the hash of ``isclose``, put ahead of it in NumPy's
    namespace (``isclose`` taken out and put back): every lookup of ``isclose`` would run its
    ``__eq__``. The seal sees it by the names alone, and runs none of it."""
    import numpy._core.numeric as numeric

    ran = []

    class Colliding:
        armed = False

        def __hash__(self):
            return hash("isclose")

        def __eq__(self, other):
            if Colliding.armed:
                ran.append(other)
            return False

    space = vars(numeric)
    isclose = space.pop("isclose")
    key = Colliding()
    space[key] = None
    space["isclose"] = isclose
    Colliding.armed = True
    try:
        assert _seal.changed() == "numpy._core.numeric.<a key that is not a name> was added"
        assert ran == []
    finally:
        Colliding.armed = False
        del space[key]
    assert _seal.changed() is None
    attention.check_softmax(_softmax)


def test_a_tool_replaced_while_the_learners_code_runs():
    """Patched inside the exercise (and left so): the call that did it fails the check."""

    def embed(ids, E):
        import numpy as n

        n.array_equal = lambda *a, **k: True  # hides the in-place change below
        E = np.asarray(E)
        out = E[np.asarray(ids)].copy()
        E[0] = 0.0
        return out

    before = np.array_equal
    try:
        with pytest.raises(CheckFailed, match=TOOLS_MESSAGE + ": numpy.array_equal is not what it was"):
            embeddings.check_embed(embed)
    finally:
        np.array_equal = before


# --------------------------------------------------------------------------- a setup cell that failed
# Whose failure it is: a setup cell broken by cells that ran before it is the student's (graded
# as it is, and the setup cell says so); one that fails on its own too is the course's (no score).

from nbformat.v4 import new_code_cell, new_notebook

from conftest import nbgrader_meta
from course_grading.preprocessors import LimitedExecute, RequireSetup, SetupCellFailed
from course_grading.preprocessors.require_setup import STUDENTS_FAULT

SETUP = {"nbgrader": {**nbgrader_meta("setup")["nbgrader"], "locked": True}}


def _graded(before: str, setup: str):
    nb = new_notebook(
        cells=[
            new_code_cell(before),
            new_code_cell(setup, metadata=SETUP),
            new_code_cell("assert half == 0.5\n", metadata=nbgrader_meta("t", grade=True, points=1)),
        ]
    )
    resources = {"metadata": {"path": "."}}
    LimitedExecute(timeout=60).preprocess(nb, resources)
    return nb, resources


def test_a_setup_cell_broken_by_an_earlier_cell_is_the_students():
    nb, resources = _graded(
        "import fractions\nfractions.Fraction = None\n",
        "import fractions\nhalf = float(fractions.Fraction(1, 2))\n",
    )
    assert any(o.get("output_type") == "error" for o in nb.cells[1].outputs)
    out, _ = RequireSetup().preprocess(nb, resources)  # graded as it is: no SetupCellFailed
    assert out.cells[1].outputs[-1]["text"] == STUDENTS_FAULT
    assert any(o.get("ename") == "NameError" for o in out.cells[2].outputs)  # its test: 0


def test_a_setup_cell_that_fails_on_its_own_too_is_the_courses():
    nb, resources = _graded("x = 1\n", "import no_such_module_here\nhalf = 0.5\n")
    with pytest.raises(SetupCellFailed, match="fails on its own too .*ModuleNotFoundError"):
        RequireSetup().preprocess(nb, resources)


def test_a_name_left_undefined_by_a_failed_cell_points_to_that_cell():
    """A test's "name 'softmax' is not defined" names the student's cell that defines softmax
    and raised (a syntax error), and what it raised; a name defined again cleanly later, or one
    defined nowhere, keeps nbgrader's message."""
    from nbformat.v4 import new_code_cell, new_notebook, new_output

    from course_grading.preprocessors import ExplainUndefinedNames

    def failing(source, ename, evalue, **meta):
        cell = new_code_cell(source, metadata=meta)
        cell.outputs = [new_output("error", ename=ename, evalue=evalue, traceback=[])]
        return cell

    undefined = "name '{}' is not defined"
    nb = new_notebook(
        cells=[
            failing("def softmax(x)\n    return x\n", "SyntaxError", "expected ':' (3180312.py, line 1)"),
            failing(
                "check_softmax(softmax)\n",
                "NameError",
                undefined.format("softmax"),
                **nbgrader_meta("t1", grade=True, points=1),
            ),
            failing("helper = 1 / 0\n", "ZeroDivisionError", "division by zero"),
            new_code_cell("helper = 1\n"),
            failing(
                "check(helper, other)\n",
                "NameError",
                undefined.format("helper"),
                **nbgrader_meta("t2", grade=True, points=1),
            ),
            failing(
                "check(other)\n",
                "NameError",
                undefined.format("other"),
                **nbgrader_meta("t3", grade=True, points=1),
            ),
        ]
    )
    ExplainUndefinedNames().preprocess(nb, {})
    said = [c.outputs[0].evalue if c.outputs else "" for c in nb.cells]
    assert said[1] == (
        "name 'softmax' is not defined (cell 1, which defines it, raised SyntaxError: expected ':' "
        "(3180312.py, line 1))"
    )
    assert said[4] == undefined.format("helper") and said[5] == undefined.format("other")
