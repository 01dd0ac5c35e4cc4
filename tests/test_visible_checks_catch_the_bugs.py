"""What the hidden tests catch, the learner's own run of the visible checks catches too.

A buggy variant that passes the visible half of its grade cell loses points the learner was
never warned about (issue 19: a hint invited a mistake only the hidden tests saw). For the
notebooks listed here, every buggy variant of tests/variants/ must fail the visible half alone,
except those that reach for the instructor side (`course_grading` is not installed where
learners run the visible checks, so only the grader can see them). Add a notebook to
``NOTEBOOKS`` once its visible checks close the gap.
"""

from __future__ import annotations

import pytest

from harness import VARIANTS, load_variants, run_grade_cell

NOTEBOOKS = ["01_embeddings", "02_cosine_similarity", "05_positional_encoding", "06_encoder", "09_gpt"]


def _cases():
    for assignment in NOTEBOOKS:
        variants = load_variants(VARIANTS / f"{assignment}.py")
        on_a_device = getattr(variants, "RIGHT_ON_THE_CPU", {})  # seen on a second device only
        for grade_id, found in variants.BUGGY.items():
            for name, source in found.items():
                if "course_grading" not in source and name not in on_a_device.get(grade_id, ()):
                    yield pytest.param(assignment, grade_id, source, id=f"{assignment}-{grade_id}-{name}")


@pytest.mark.parametrize("assignment,grade_id,src", list(_cases()))
def test_buggy_variant_fails_the_visible_check(assignment, grade_id, src):
    outcome = run_grade_cell(assignment, grade_id, src, visible_only=True)
    assert not outcome.passed, "the visible check passed a bug that the hidden tests catch"
    assert outcome.message, "a failing check must say why"


@pytest.mark.parametrize("assignment", NOTEBOOKS)
def test_the_solution_passes_the_visible_checks(assignment):
    from harness import cells

    for grade_id in cells(assignment)["grades"]:
        outcome = run_grade_cell(assignment, grade_id, visible_only=True)
        assert outcome.passed, f"{assignment}/{grade_id}: {outcome.message}"
