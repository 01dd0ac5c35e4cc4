""" "Run All" on a half-done notebook goes to the end: the cells that run the learner's code are
tagged ``raises-exception``, and a cell that needs an unwritten exercise says so in one line
instead of a ``NotImplementedError`` traceback (``course_utils.notebook``)."""

from __future__ import annotations

import re
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import ROOT
from course_grading.authoring.cells import KEEP_GOING, is_grade, runs_learner_code
from course_utils import notebook

NOTEBOOKS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _source(name):
    return nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)


# --------------------------------------------------------------------------- the tags


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_cells_that_run_learner_code_carry_the_tag(name):
    nb = _source(name)
    want = runs_learner_code(nb)
    tagged = [KEEP_GOING in c.metadata.get("tags", []) for c in nb.cells]
    wrong = [i for i, (w, t) in enumerate(zip(want, tagged)) if w != t]
    assert not wrong, (
        f"cells {wrong} of {name} are tagged wrongly: run "
        "`python tools/tag_cells.py solutions/*/*.ipynb`, then `course release`"
    )
    assert all(t for c, t in zip(nb.cells, tagged) if is_grade(c)), "every test cell keeps going"


def test_the_rule_follows_names_through_cells():
    cells = [
        nbformat.v4.new_code_cell(s)
        for s in (
            "import torch",  # setup-like, but not nbgrader: reads nothing tainted
            "def softmax(x):\n    raise NotImplementedError()",
            "w = softmax(s)",  # calls the learner's function
            "y = w * 2",  # uses what that cell computed
            "w = 3\nprint(w)",  # rebinds w first: independent of the learner
            "print(w, torch.pi)",  # w is clean again
            "z = (",  # does not parse: counts as running learner code
        )
    ]
    cells[1].metadata["nbgrader"] = {"solution": True, "grade_id": "softmax"}
    assert runs_learner_code(nbformat.v4.new_notebook(cells=cells)) == [
        False,
        True,
        True,
        True,
        False,
        False,
        True,
    ]


# --------------------------------------------------------------------------- the one-line note


def test_exercise_headings_match_the_notes_and_the_test_cells():
    """``### Exercise N — `name` (P points)``: N is what the one-line note says, P what the
    exercise's test cell is worth."""
    found = {}
    for name in NOTEBOOKS:
        nb = _source(name)
        points = {c.source.splitlines()[0]: c.metadata["nbgrader"]["points"] for c in nb.cells if is_grade(c)}
        for cell in nb.cells:
            for number, exercise, worth in re.findall(
                r"^### Exercise (\d+) — `(\w+)` \((\d+) points?\)$", cell.source, re.M
            ):
                found[exercise] = int(number)
                (test,) = [v for k, v in points.items() if k.endswith(f"({exercise})")]
                assert float(worth) == test, (name, exercise)
    assert found == notebook.EXERCISES


class FakeShell:
    """What the handler uses of IPython's shell: its history and its two ways to show errors."""

    def __init__(self, history=("",)):
        self.user_ns = {"In": list(history)}
        self.execution_count = len(history) - 1  # the last entry is the cell that runs
        self.shown, self.usual = [], []

    def _showtraceback(self, etype, value, stb):
        self.shown.append((etype, value, stb))

    def showtraceback(self, exc_tuple, tb_offset=None):
        self.usual.append(exc_tuple)


def _raised(code: str, ns: dict):
    try:
        exec(compile(code, "<cell>", "exec"), ns)
    except Exception:  # noqa: BLE001 - whatever the cell raised is the result
        return sys.exc_info()
    raise AssertionError("the code did not raise")


def test_a_stub_becomes_one_line_naming_its_exercise():
    ns = {}
    exec(
        "def softmax(x, dim=-1):\n    raise NotImplementedError()\n"
        "class LayerNorm:\n    def __init__(self, d):\n        raise NotImplementedError()\n"
        "def attention(q):\n    return softmax(q) * 2\n",
        ns,
    )
    for code, exercise in (
        ("softmax(1)", "softmax"),
        ("attention(1)", "softmax"),
        ("LayerNorm(4)", "LayerNorm"),
    ):
        shell = FakeShell()
        etype, value, tb = _raised(code, ns)
        assert notebook.missing_exercise(tb) == exercise
        notebook._handler(shell, etype, value, tb)
        ((_, _, stb),) = shell.shown
        text = ANSI.sub("", "\n".join(stb))
        exercise_number = notebook.EXERCISES[exercise]
        assert text.startswith(
            f"this cell needs `{exercise}`, exercise {exercise_number} above — not written yet"
        )
        assert "Traceback" not in text and not shell.usual
        assert stb == notebook.wrapped(notebook.note(exercise))  # lines broken between words


def test_other_errors_keep_their_usual_traceback():
    shell = FakeShell()
    etype, value, tb = _raised("raise NotImplementedError('torch lacks this')", {})
    notebook._handler(shell, etype, value, tb)
    assert shell.usual and not shell.shown
    shell = FakeShell(["", "x = 1"])
    etype, value, tb = _raised("print(typo)", {})  # a name no cell ever defined
    notebook._handler(shell, etype, value, tb)
    assert shell.usual and not shell.shown


def test_a_name_a_stopped_cell_did_not_define_says_which_cell():
    history = ["", "import torch", "model = Transformer(13, 13)\nlosses = []", "print(model)"]
    shell = FakeShell(history)
    etype, value, tb = _raised("print(model)", {})
    notebook._handler(shell, etype, value, tb)
    ((_, _, stb),) = shell.shown
    assert ANSI.sub("", stb[0]).startswith(
        "this cell needs `model`, which cell [2] above stopped before defining"
    )
    assert notebook.cell_that_binds(["", "def f():\n    model = 1"], "model") is None
    # the running cell itself may bind the name later: not "a cell above"
    assert notebook.cell_that_binds(["", "x = 1", "print(model)\nmodel = 2"], "model", before=2) is None


def test_installed_in_ipython_only(monkeypatch):
    import IPython

    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    assert notebook.explain_missing_exercises() is False
    installed = []
    shell = FakeShell()
    shell.set_custom_exc = lambda exceptions, handler: installed.append((exceptions, handler))
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    assert notebook.explain_missing_exercises() is True
    assert installed == [((NotImplementedError, NameError), notebook._handler)]


# --------------------------------------------------------------------------- Run All, for real


def _half_done(name: str, solved: int):
    """The student release with its first ``solved`` exercises written (the solutions)."""
    nb = nbformat.read(ROOT / "notebooks" / name / f"{name}.ipynb", as_version=4)
    answers = {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in _source(name).cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    cells = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    for cell in cells[:solved]:
        cell.source = "\n".join(
            ln for ln in answers[cell.metadata["nbgrader"]["grade_id"]].splitlines() if "SOLUTION" not in ln
        )
    return nb


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, solved, waiting",
    [
        ("03_attention", 2, {"scaled_dot_product_attention", "causal_mask"}),
        ("07_decoder", 3, {"Transformer", "model"}),  # model: what the training cell did not get to
    ],
)
def test_run_all_on_a_half_done_notebook_reaches_the_end(name, solved, waiting, monkeypatch):
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = _half_done(name, solved)
    # allow_errors=False: like JupyterLab's Run All, nbclient stops at a failing cell unless
    # it is tagged raises-exception
    NotebookClient(
        nb,
        timeout=300,
        kernel_name="python3",
        allow_errors=False,
        resources={"metadata": {"path": str(ROOT / "notebooks" / name)}},
    ).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "Run All stopped before the end"
    written = {
        c.metadata["nbgrader"]["grade_id"]
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("solution") and "NotImplementedError" not in c.source
    }
    notes = set()
    for cell in code:
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if is_grade(cell):  # a test of a written exercise passes, the others fail as before
            grade_id = cell.metadata["nbgrader"]["grade_id"]
            assert bool(errors) == (grade_id.removeprefix("test_") not in written), grade_id
        for error in errors:
            text = ANSI.sub("", "\n".join(error.traceback))
            assert "Traceback" not in text and "course_utils" not in text, text
            if error.ename == "CheckFailed":
                assert "not implemented yet" in text, text
            else:
                assert text.startswith("this cell needs `"), text
                notes.add(text.split("`")[1])
    assert notes == waiting
