"""The learner side of notebooks 01-04 holds no solution and no hidden case.

``course_utils`` is installed on every student's machine. Its checks for 01_embeddings,
02_cosine_similarity, 03_attention and 04_multi_head_attention must not import the instructor
side, must not contain a line of any solution or hidden test of the course (the lines
``course release`` keeps out of the student notebooks), and must not hold the hidden checks'
inputs; the hidden halves live in ``course_grading.checks``.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_grading.authoring.release import secret_lines

ROOT = Path(__file__).resolve().parents[1]
MODULES = {
    "01_embeddings": "embeddings",
    "02_cosine_similarity": "similarity",
    "03_attention": "attention",
    "04_multi_head_attention": "multi_head",
}
# each notebook's visible checks: its module, and the module of 04's split_heads and merge_heads
LEARNER = {a: [ROOT / "course_utils" / "checks" / f"{m}.py"] for a, m in MODULES.items()}
LEARNER["04_multi_head_attention"].append(ROOT / "course_utils" / "checks" / "heads.py")


def _all_secret_lines() -> dict[str, str]:
    """{secret line: notebook} over the eight source notebooks."""
    found = {}
    for path in sorted((ROOT / "solutions").glob("[0-9]*/*.ipynb")):
        for line in secret_lines(nbformat.read(str(path), as_version=4)):
            found[line] = path.parent.name
    return found


SECRETS = _all_secret_lines()


def test_there_are_secrets_to_look_for():
    assert len(SECRETS) > 100 and {n[:2] for n in SECRETS.values()} == set(
        "01 02 03 04 05 06 07 08 09".split()
    )


@pytest.mark.parametrize("assignment", sorted(MODULES))
def test_learner_checks_hold_no_solution_or_hidden_test_line(assignment):
    for path in LEARNER[assignment]:
        lines = path.read_text().splitlines()
        leaks = [
            (n, line.strip(), SECRETS[line.strip()])
            for n, line in enumerate(lines, 1)
            if line.strip() in SECRETS
        ]
        assert not leaks, f"lines of solutions or hidden tests in {path.name}: {leaks}"


@pytest.mark.parametrize("assignment", sorted(MODULES))
def test_learner_checks_never_reach_the_instructor_side(assignment):
    assert not any("course_grading" in path.read_text() for path in LEARNER[assignment])
    module = f"course_utils.checks.{MODULES[assignment]}"
    code = (
        f"import sys, {module}\nprint(sorted(m for m in sys.modules if m.split('.')[0] == 'course_grading'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", f"{module} loads {out.stdout.strip()}"


@pytest.mark.parametrize("assignment", sorted(MODULES))
def test_every_visible_check_has_a_hidden_half_taking_only_the_learners_code(assignment):
    import importlib

    visible = importlib.import_module(f"course_utils.checks.{MODULES[assignment]}")
    hidden = importlib.import_module(f"course_grading.checks.{MODULES[assignment]}")
    names = sorted(n for n in vars(visible) if n.startswith("check_"))
    assert names and names == sorted(n for n in vars(hidden) if n.startswith("check_"))
    for name in names:
        for check in (getattr(visible, name), getattr(hidden, name)):
            assert len(inspect.signature(check).parameters) == 1, f"{check.__module__}.{name}"


_SEEDERS = {"generator", "default_rng", "manual_seed", "Generator"}


def _inputs(tree: ast.AST, skip=()) -> tuple[set, set]:
    """The seeds (first argument of generator(...), default_rng(...), manual_seed(...)) and the
    literal lists/tuples of three or more numbers or strings in ``tree``, outside the functions
    named in ``skip``."""
    seeds, literals = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name in skip:
            node.body = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name in _SEEDERS and node.args and isinstance(node.args[0], ast.Constant):
                seeds.add(node.args[0].value)
        if (
            isinstance(node, (ast.List, ast.Tuple))
            and len(node.elts) >= 3
            and all(
                isinstance(e, ast.Constant)
                and isinstance(e.value, (int, float, str))
                and not isinstance(e.value, bool)
                for e in node.elts
            )
        ):
            literals.add(ast.unparse(node))
    return seeds, literals


@pytest.mark.parametrize("assignment", sorted(MODULES))
def test_learner_checks_hold_none_of_the_hidden_inputs(assignment):
    hidden_path = ROOT / "course_grading" / "checks" / f"{MODULES[assignment]}.py"
    # what the hidden module computes for the visible checks is not a hidden case
    hidden_seeds, hidden_literals = _inputs(
        ast.parse(hidden_path.read_text()), skip=("expected_outputs", "_visible_cases")
    )
    seeds, literals = set(), set()
    for path in LEARNER[assignment]:
        more_seeds, more_literals = _inputs(ast.parse(path.read_text()))
        seeds, literals = seeds | more_seeds, literals | more_literals
    assert not hidden_seeds & seeds, f"the visible checks draw from the hidden seeds {hidden_seeds & seeds}"
    assert not hidden_literals & literals, (
        f"hidden inputs in the visible checks: {hidden_literals & literals}"
    )
