"""The integrity audit on every variant of tests/variants/: it agrees with every correct way of
writing an audited exercise (no false flag), and disagrees with most buggy ones. Not all:
some bugs leave the outputs right on every input (calling a forbidden built-in, a warning,
dropout in training mode, a missing error message, a tensor made on the CPU that only another
device shows: ``RIGHT_ON_THE_CPU`` in a variants file); the grade cells catch those, and the
audit has no reason to.

The audit's child runs in a fork of the test process here (``audit_runner``): the same code as
in the sandbox, its hooks armed and its record judged, on the same fresh inputs and with the same
trusted comparison, hundreds of times in seconds. A correct variant raises no finding of the
record either: no forbidden operator, no escape. Buggy variants, which the values alone must
catch, run in-process without a record (``audit_runner.in_process``): a third of the time.
"""

from __future__ import annotations

import tempfile
from functools import lru_cache
from pathlib import Path

import nbformat
import pytest

from audit_runner import forked, in_process
from course_grading.audit import trusted as audit
from course_grading.audit.exercises import EXERCISES
from harness import ROOT, VARIANTS, load_variants, variants


def _cases(kind: str):
    for assignment, grade_id, name, source in variants(kind):
        if grade_id in EXERCISES.get(assignment, {}):
            yield pytest.param(assignment, grade_id, name, source, id=f"{assignment}-{grade_id}-{name}")


def _verdict(tmp_path: Path, assignment: str, grade_id: str, source: str, runner=forked):
    nb = nbformat.read(str(ROOT / "solutions" / assignment / f"{assignment}.ipynb"), 4)
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = {"solution": True, "grade_id": "variant", "grade": False, "locked": False}
    nb.cells.append(cell)  # after the solutions: it replaces one of them, as in the grade-cell tests
    path = tmp_path / f"{assignment}.ipynb"
    nbformat.write(nb, str(path))
    verdicts = {
        v.grade_id: v
        for v in audit.audit(
            path,
            assignment,
            seed=1234,
            runner=runner,
            blocks=ROOT / "solutions" / assignment / "building_blocks.py",
        )
    }
    return verdicts[grade_id]


@pytest.mark.parametrize("assignment", sorted(EXERCISES))
def test_every_graded_component_is_audited(assignment):
    nb = nbformat.read(str(ROOT / "solutions" / assignment / f"{assignment}.ipynb"), 4)
    graded = {
        c.metadata["nbgrader"]["grade_id"]
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade")
        and c.metadata["nbgrader"].get("grade_id", "").startswith("test_")
    }
    assert graded == set(EXERCISES[assignment])


@pytest.mark.parametrize("assignment,grade_id,name,source", list(_cases("CORRECT")))
def test_correct_variant_agrees(tmp_path, assignment, grade_id, name, source):
    verdict = _verdict(tmp_path, assignment, grade_id, source)
    assert verdict.agrees, verdict.reason


def _buggy_by_exercise():
    found: dict = {}
    for param in _cases("BUGGY"):
        assignment, grade_id, name, source = param.values
        right = getattr(load_variants(VARIANTS / f"{assignment}.py"), "RIGHT_ON_THE_CPU", {})
        if name not in right.get(grade_id, ()):
            found.setdefault((assignment, grade_id), []).append((name, source))
    return found


BUGGY = _buggy_by_exercise()


@lru_cache(maxsize=None)
def _caught(assignment: str, grade_id: str) -> tuple[str, ...]:
    with tempfile.TemporaryDirectory() as tmp:
        return tuple(
            name
            for name, source in BUGGY[(assignment, grade_id)]
            if not _verdict(Path(tmp), assignment, grade_id, source, in_process).agrees
        )


@pytest.mark.parametrize("assignment,grade_id", sorted(BUGGY), ids=lambda v: str(v))
def test_audit_catches_buggy_variants(assignment, grade_id):
    assert _caught(assignment, grade_id), f"the audit agreed with every buggy variant of {grade_id}"


def test_audit_catches_most_buggy_variants():
    caught = sum(len(_caught(a, g)) for a, g in BUGGY)
    total = sum(len(v) for v in BUGGY.values())
    print(f"the audit disagrees with {caught} of {total} buggy variants")
    assert caught >= 0.7 * total, f"the audit caught {caught} of {total} buggy variants"
