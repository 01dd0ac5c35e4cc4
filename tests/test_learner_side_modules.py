"""The learner side holds no solution: ``course_utils`` is installed on every student's machine.

Its plots, widgets, training loop and MiniLM loader take the components they need as arguments
(the learner's own, or those ``building_blocks.py`` provides); they never import the instructor
side, and no line of them is a line of a solution or a hidden test. (``course_utils/checks`` is
left out here: the checks behind the test cells have rules of their own.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from course_grading.authoring.nbformat_tools import read_notebook
from course_grading.authoring.release import secret_lines

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "course_utils"
MODULES = sorted(p for p in PACKAGE.rglob("*.py") if "checks" not in p.relative_to(PACKAGE).parts)
SOURCES = sorted((ROOT / "solutions").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))


def _imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of every import, at any depth (inside functions too)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def test_there_are_learner_side_modules_and_solution_sources():
    names = {p.relative_to(PACKAGE).as_posix() for p in MODULES}
    assert {
        "training.py",
        "minilm.py",
        "language_model.py",
        "plots/attention.py",
        "widgets/generation.py",
        "widgets/gpt.py",
    } <= names
    assert len(SOURCES) == 9


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_learner_side_module_imports_the_instructor_side(path):
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    bad = [
        f"line {line}: {name}"
        for line, name in _imported_modules(tree)
        if name == "course_grading" or name.startswith("course_grading.")
    ]
    assert not bad, f"{path.relative_to(ROOT)} imports the instructor side: {bad}"


def test_the_import_scan_sees_imports_at_any_depth():
    tree = ast.parse(
        "def f():\n    from course_grading.reference import attention\n"
        "    import course_grading.audit as a\n"
        "    importlib.import_module('course_grading.reference.decoder')\n"
    )
    assert [name for _, name in _imported_modules(tree)] == [
        "course_grading.reference",
        "course_grading.audit",
        "course_grading.reference.decoder",
    ]


@pytest.fixture(scope="module")
def solution_lines() -> dict[str, str]:
    """Every secret line of the eight sources (solutions and hidden tests) -> its notebook."""
    lines = {}
    for source in SOURCES:
        for line in secret_lines(read_notebook(source)):
            lines.setdefault(line, source.stem)
    assert len(lines) > 100  # the scan has something to compare with
    return lines


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.relative_to(PACKAGE).as_posix())
def test_no_learner_side_line_is_a_solution_line(path, solution_lines):
    hits = [
        f"line {n}: {line.strip()!r} (a secret line of {solution_lines[line.strip()]})"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if line.strip() in solution_lines
    ]
    assert not hits, f"{path.relative_to(ROOT)} holds solution lines: {hits}"
