"""The learner side of 05-09 holds no solution and no hidden check.

``course_utils`` is installed on every student's machine, so the checks there of
05_positional_encoding, 06_encoder, 07_decoder, 08_generation and 09_gpt must not import the instructor
side (``course_grading``: reference solutions, hidden checks), must not contain a line of any
solution or hidden test of the course, and must run only the visible cases.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import nbformat
import pytest

from conftest import ROOT
from course_grading.authoring.release import secret_lines

MODULES = ["positional", "encoder", "decoder", "generation", "sampling", "gpt", "gpt_block"]
LEARNER_FILES = [ROOT / "course_utils" / "checks" / f"{m}.py" for m in MODULES] + [
    ROOT / "course_utils" / "checks" / "torch_parts.py",  # 06, 07 and 09's PyTorch equivalents
    ROOT / "course_utils" / "toy_task.py",  # 08's models, which the visible checks decode with
    ROOT / "course_utils" / "language_model.py",
]  # 09's text, training and checkpoint


def _secrets() -> set[str]:
    found: set[str] = set()
    for path in sorted((ROOT / "solutions").glob("[0-9]*/[0-9]*.ipynb")):
        found |= secret_lines(nbformat.read(str(path), 4))
    return found


def test_every_source_notebook_has_secrets_to_compare_with():
    assert len(list((ROOT / "solutions").glob("[0-9]*/[0-9]*.ipynb"))) == 9
    assert len(_secrets()) > 100


@pytest.mark.parametrize("path", LEARNER_FILES, ids=lambda p: p.name)
def test_no_line_of_a_solution_or_hidden_test(path):
    secrets = _secrets()
    leaks = [
        (n, line.strip())
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if line.strip() in secrets
    ]
    assert not leaks, f"{path.name} repeats solution or hidden-test lines: {leaks[:5]}"


@pytest.mark.parametrize("path", LEARNER_FILES, ids=lambda p: p.name)
def test_no_mention_of_the_instructor_side(path):
    assert "course_grading" not in path.read_text()


def test_importing_the_checks_loads_nothing_of_the_instructor_side():
    code = (
        "import sys\n"
        + "".join(f"import course_utils.checks.{m}\n" for m in MODULES)
        + "import course_utils.toy_task\nimport course_utils.language_model\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'course_grading')\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT / "tests", timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("module", MODULES)
def test_learner_checks_take_only_the_learners_code(module):
    """A visible check is called with the exercise alone: no ``hidden`` switch, no hidden cases
    waiting behind it."""
    mod = __import__(f"course_utils.checks.{module}", fromlist=["_"])
    checks = {
        name: fn
        for name, fn in vars(mod).items()
        if name.startswith("check_") and inspect.isfunction(fn) and fn.__module__ == mod.__name__
    }
    assert checks
    for name, fn in checks.items():
        assert len(inspect.signature(fn).parameters) == 1, f"{name} takes {inspect.signature(fn)}"
        assert "hidden" not in inspect.getsource(fn), f"{name} mentions hidden cases"


@pytest.mark.parametrize(
    "assignment,module",
    [
        ("05_positional_encoding", "positional"),
        ("06_encoder", "encoder"),
        ("07_decoder", "decoder"),
        ("08_generation", "generation"),
        ("09_gpt", "gpt"),
    ],
)
def test_grade_cells_call_the_visible_then_the_hidden_check(assignment, module):
    nb = nbformat.read(str(ROOT / "solutions" / assignment / f"{assignment}.ipynb"), 4)
    grades = [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("grade")]
    assert grades  # code: the written answers are graded by hand (tests/test_written_answers.py)
    for cell in grades:
        first, *rest = cell.source.splitlines()
        name, arg = first.rstrip(")").split("(")
        assert rest == [
            "### BEGIN HIDDEN TESTS",
            f"from course_grading.checks.{module} import {name} as hidden_{name}",
            f"hidden_{name}({arg})",
            "### END HIDDEN TESTS",
        ], cell.source
