"""The graders catch the common mistakes and accept every correct way of writing each exercise.

Variants live in tests/variants/<assignment>.py as two dicts, each {grade_id: {name: source}}:
BUGGY (each must FAIL its grade cell) and CORRECT (each must PASS it). Every graded cell of
every solution notebook must have at least three buggy variants.
"""

from __future__ import annotations

import pytest

from harness import ROOT, VARIANTS, cells, load_variants, run_grade_cell, variants


def _assignments() -> list[str]:
    return sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit())


def _cases(kind: str):
    for assignment, grade_id, name, src in variants(kind):
        yield pytest.param(assignment, grade_id, src, id=f"{assignment}-{grade_id}-{name}")


@pytest.mark.parametrize("assignment", _assignments())
def test_solution_passes_every_grade_cell(assignment):
    for grade_id in cells(assignment)["grades"]:
        outcome = run_grade_cell(assignment, grade_id)
        assert outcome.passed, f"{assignment}/{grade_id}: the solution fails: {outcome.message}"


@pytest.mark.parametrize("assignment", _assignments())
def test_every_grade_cell_has_three_buggy_variants(assignment):
    path = VARIANTS / f"{assignment}.py"
    assert path.exists(), f"no buggy variants for {assignment}: add {path.relative_to(ROOT)}"
    buggy = load_variants(path).BUGGY
    for grade_id in cells(assignment)["grades"]:
        assert len(buggy.get(grade_id, {})) >= 3, f"{assignment}/{grade_id}: fewer than 3 buggy variants"


@pytest.mark.parametrize("assignment,grade_id,src", list(_cases("BUGGY")))
def test_buggy_variant_loses_the_points(assignment, grade_id, src):
    outcome = run_grade_cell(assignment, grade_id, src)
    assert not outcome.passed, "the grade cell passed a buggy implementation"
    assert outcome.message, "a failing check must say why"


@pytest.mark.parametrize("assignment,grade_id,src", list(_cases("CORRECT")))
def test_alternative_correct_variant_keeps_full_marks(assignment, grade_id, src):
    outcome = run_grade_cell(assignment, grade_id, src)
    assert outcome.passed, f"a correct implementation was failed: {outcome.message}"
