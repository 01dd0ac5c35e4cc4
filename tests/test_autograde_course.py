"""The whole course through the real grading pipeline: for every assignment, the solution scores
full marks in every test cell (its written answers wait for manual grading) and the blank
student release scores zero, in one parallel `course autograde` run (sandboxed kernels and the
integrity audit included, as instructors run it), with no red flag raised against either. Every
cell of each solution, graded or not (plots, widgets, training), runs without an error: the
autograded notebooks, executed whole by the grader, carry no error output."""

from __future__ import annotations

import csv
import shutil

import nbformat
import pytest

from conftest import ROOT
from course_grading.commands.cli import main

pytestmark = pytest.mark.slow

ASSIGNMENTS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.name[:2].isdigit())


def test_solutions_score_full_marks_and_blank_releases_zero(tmp_path, capsys):
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions", course / "solutions")
    for name in ASSIGNMENTS:
        for student, folder in (("solution", "solutions"), ("blank", "notebooks")):
            dest = course / "submitted" / student / name
            dest.mkdir(parents=True)
            shutil.copy(ROOT / folder / name / f"{name}.ipynb", dest)

    assert main(["--root", str(course), "autograde", "--jobs", "2"]) == 0
    capsys.readouterr()

    rows = list(csv.DictReader((course / "reports" / "grades.csv").open()))
    by = {}
    for row in rows:
        by.setdefault((row["student"], row["assignment"]), []).append(row)
    for name in ASSIGNMENTS:
        full, blank = by[("solution", name)], by[("blank", name)]
        assert full and len(full) == len(blank)
        for row in full:
            if row["exercise"].startswith("written_"):  # the model answer waits for the instructor
                assert (row["score"], row["message"]) == ("", "needs manual grading"), (name, row)
                continue
            assert float(row["score"]) == float(row["max_score"]) > 0, (name, row)
        for row in blank:
            assert float(row["score"]) == 0, (name, row)
            if row["exercise"].startswith("written_"):
                assert row["message"] == "not answered", (name, row)
                continue
            assert "not implemented yet" in row["message"] or "NotImplementedError" in row["message"]
    flags = course / "reports" / "flags.csv"
    if flags.exists():
        flagged = [r for r in csv.DictReader(flags.open())]
        assert not flagged, f"red flags on the course's own notebooks: {flagged[:3]}"
    for name in ASSIGNMENTS:
        graded = nbformat.read(str(course / "autograded" / "solution" / name / f"{name}.ipynb"), 4)
        errors = [
            (i, out.get("ename"), out.get("evalue", "")[:300])
            for i, cell in enumerate(graded.cells)
            for out in cell.get("outputs", [])
            if out.get("output_type") == "error"
        ]
        assert not errors, f"{name}: the solution's cells raised {errors}"
