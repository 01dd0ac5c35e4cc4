"""The committed notebooks: every solution has its release, the releases are exactly what
`course release` generates, with nothing leaked, and no notebook carries outputs or machine
metadata. (The solutions run whole, every cell, in tests/test_autograde_course.py; the
releases, blank and filled in, in tests/test_student_side.py.)"""

from __future__ import annotations

import json

import pytest

from notebook_runner import ROOT, notebooks

SOLUTIONS = notebooks("solutions")
RELEASES = notebooks("notebooks")
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def _name(p):
    return p.parent.name


def test_every_solution_has_a_release():
    assert SOLUTIONS, "no solution notebooks found"
    assert [_name(p) for p in SOLUTIONS] == [_name(p) for p in RELEASES]


def test_committed_releases_are_what_course_release_generates():
    from course_grading.authoring.release import release

    stale = release(ROOT, check_only=True)
    assert not stale, f"notebooks/ is out of date, run `course release`: {stale}"


# The blank releases run where students run them, on the installed student side:
# tests/test_student_side.py (every grade cell fails "not implemented yet", nothing else fails).


@pytest.mark.parametrize("path", RELEASES, ids=_name)
def test_release_has_no_solution_or_hidden_test_text(path):
    import nbformat

    from course_grading.authoring.release import find_leaks

    text = path.read_text()
    for marker in MARKERS:
        assert marker not in text
    source = nbformat.read(ROOT / "solutions" / _name(path) / path.name, as_version=4)
    leaks = find_leaks(source, nbformat.reads(text, as_version=4), path.name)
    assert not leaks, f"solution or hidden-test lines in the student notebook: {leaks[:5]}"


@pytest.mark.parametrize("path", SOLUTIONS + RELEASES, ids=lambda p: f"{p.parts[-3]}-{_name(p)}")
def test_committed_notebooks_carry_no_outputs_or_machine_metadata(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
        # nbgrader marks locked cells deletable/editable False so JupyterLab enforces the lock
        assert set(cell.get("metadata", {})) <= {"nbgrader", "tags", "deletable", "editable"}
    assert set(nb["metadata"]) <= {"kernelspec", "language_info"}
