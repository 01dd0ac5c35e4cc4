"""The expected outputs stored for the visible checks are what the reference computes."""
from __future__ import annotations

from course_grading import expected


def test_stored_expected_outputs_match_the_reference():
    for assignment, make in expected.makers().items():
        path = expected.FOLDER / f"{assignment}.npz"
        assert expected._same(path, expected.render(make)), (
            f"{path} is out of date: run python -m course_grading.expected")
