"""The nbgrader pipeline: notebook normalization, the leak scan, and a full round trip on a
tiny synthetic course (release -> autograde -> feedback -> export, and a self-check)."""

from __future__ import annotations

import csv
import shutil
from pathlib import Path

import nbformat
import pytest

from conftest import ASSIGNMENT, make_course, nbgrader_meta, tiny_notebook
from course_grading.authoring import release
from course_grading.authoring.nbformat_tools import is_normalized, normalize, write_notebook
from course_grading.commands.cli import main
from course_grading.errors import GradingError
from course_grading.grading import autograde
from course_grading.reports import feedback, grade_exports
from course_grading.reports import results as grading_results

SOLUTION_LINE = "result_value = x + x"
HIDDEN_LINE = 'assert double(-21) == -42, "hidden: double(-21) should be -42"'
TEST_WITH_MARKER = "assert double(2) == 4\n### END HIDDEN TESTS\n"


# --------------------------------------------------------------------------- normalize


def messy_notebook():
    """A notebook as Jupyter leaves it: outputs, counts, random ids, machine metadata."""
    nb = tiny_notebook()
    nb.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Py", "language": "python"},
        "language_info": {"name": "python", "version": "3.11.7"},
        "widgets": {"state": {}},
    }
    code = nb.cells[1]
    code.execution_count = 7
    code.outputs = [nbformat.v4.new_output("stream", name="stdout", text="hi\n")]
    code.metadata.update({"collapsed": True, "tags": ["keep"], "ExecuteTime": {"start": "x"}})
    nb.cells.append(nbformat.v4.new_code_cell("print(1)", metadata={"scrolled": True}))
    return nb


def test_normalize_strips_run_and_machine_state():
    nb = normalize(messy_notebook())
    assert nb.metadata == {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    assert (nb.nbformat, nb.nbformat_minor) == (4, 5)
    code = nb.cells[1]
    assert code.outputs == [] and code.execution_count is None
    assert set(code.metadata) == {"nbgrader", "tags"}
    assert nb.cells[3].metadata == {}
    assert [c.id for c in nb.cells] == ["cell-0", "double", "test_double", "cell-3"]


def test_normalize_keeps_lock_flags_and_makes_ids_unique():
    nb = tiny_notebook()
    nb.cells[2].metadata.update({"deletable": False, "editable": True})
    nb.cells.append(nbformat.v4.new_code_cell("x = 1", metadata=nbgrader_meta("double")))
    nb.cells.append(nbformat.v4.new_code_cell("y = 1", metadata=nbgrader_meta("bad id/with:chars")))
    out = normalize(nb)
    assert out.cells[2].metadata["deletable"] is False and "editable" not in out.cells[2].metadata
    ids = [c.id for c in out.cells]
    assert len(set(ids)) == len(ids) and ids[3] == "double-3" and ids[4] == "bad-id-with-chars"
    nbformat.validate(out)


def test_write_notebook_is_deterministic(tmp_path):
    first, second = tmp_path / "a.ipynb", tmp_path / "b.ipynb"
    write_notebook(messy_notebook(), first)
    write_notebook(nbformat.read(str(first), as_version=4), second)
    text = first.read_text(encoding="utf-8")
    assert first.read_bytes() == second.read_bytes()
    assert text.endswith("}\n") and text.startswith('{\n "cells": [\n  {\n')
    assert is_normalized(first)
    nbformat.write(messy_notebook(), str(second))
    assert not is_normalized(second)


def test_write_notebook_keeps_unicode(tmp_path):
    nb = tiny_notebook()
    nb.cells[0].source = "# Aufmerksamkeit · αβ"
    write_notebook(nb, tmp_path / "u.ipynb")
    assert "Aufmerksamkeit · αβ" in (tmp_path / "u.ipynb").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- leak scan


def test_secret_lines_are_the_nontrivial_region_lines():
    nb = tiny_notebook(
        solution=(
            "def double(x):\n"
            "    ### BEGIN SOLUTION\n"
            "    result_value = x + x\n"
            "    # a comment inside the solution\n"
            "    return res\n"  # short: ignored
            "    print('shared line here')\n"  # also outside the region: public
            "    ### END SOLUTION\n"
            "print('shared line here')\n"
        )
    )
    assert release.secret_lines(nb) == {SOLUTION_LINE, HIDDEN_LINE}


def test_whole_solution_cell_without_markers_is_secret():
    nb = tiny_notebook(solution="def double(x):\n    return x * 2  # the answer\n")
    assert "return x * 2  # the answer" in release.secret_lines(nb)


def test_find_leaks_names_notebook_cell_and_line():
    source = tiny_notebook()
    leaky = normalize(
        tiny_notebook(solution="def double(x):\n    result_value = x + x\n", test=TEST_WITH_MARKER)
    )
    leaks = release.find_leaks(source, leaky, notebook="nb.ipynb")
    assert release.Leak("nb.ipynb", "double", SOLUTION_LINE) in leaks
    assert release.Leak("nb.ipynb", "test_double", "### END HIDDEN TESTS") in leaks
    clean = normalize(
        tiny_notebook(
            solution="def double(x):\n    raise NotImplementedError()\n", test="assert double(2) == 4\n"
        )
    )
    assert release.find_leaks(source, clean) == []


def test_release_refuses_a_leak_and_writes_nothing(tiny_course, monkeypatch):
    """A generator that forgets to clear a solution line: the scan must stop the release."""

    def leaky_generate(course, assignment, release_dir, **overrides):
        nb = nbformat.read(str(course.folders.source_notebook(assignment)), 4)
        for cell in nb.cells:
            cell.source = "\n".join(
                ln
                for ln in cell.source.splitlines()
                if "BEGIN" not in ln and "END" not in ln and "HIDDEN" not in ln
            )
        (Path(release_dir) / assignment).mkdir(parents=True)
        nbformat.write(nb, str(Path(release_dir) / assignment / f"{assignment}.ipynb"))

    monkeypatch.setattr(release, "generate", leaky_generate)
    committed = tiny_course / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    committed.parent.mkdir(parents=True)
    committed.write_text("committed\n")
    with pytest.raises(release.LeakError) as info:
        release.release(tiny_course)
    message = str(info.value)
    assert f"notebooks/{ASSIGNMENT}/{ASSIGNMENT}.ipynb" in message and "'double'" in message
    assert SOLUTION_LINE in message
    assert {leak.line for leak in info.value.leaks} == {SOLUTION_LINE, "return result_value", HIDDEN_LINE}
    assert committed.read_text() == "committed\n"
    assert sorted(p.name for p in (tiny_course / "notebooks").rglob("*")) == [
        ASSIGNMENT,
        f"{ASSIGNMENT}.ipynb",
    ]


def test_release_of_unknown_assignment_is_refused(tiny_course):
    with pytest.raises(GradingError, match="unknown assignment 'nope'"):
        release.release(tiny_course, ["nope"])


# --------------------------------------------------------------------------- round trip


def submit(course: Path, student: str, notebook: Path) -> None:
    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True)
    shutil.copy(notebook, folder / f"{ASSIGNMENT}.ipynb")


@pytest.mark.slow
def test_round_trip(tiny_course, capsys):
    course = tiny_course
    released = course / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    source = course / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"

    assert release.release(course) == [f"notebooks/{ASSIGNMENT}/{ASSIGNMENT}.ipynb"]
    first = released.read_bytes()
    text = first.decode("utf-8")
    assert is_normalized(released)
    assert "raise NotImplementedError()" in text and "assert double(2) == 4" in text
    for secret in (SOLUTION_LINE, "double(-21)", "BEGIN", "END SOLUTION"):
        assert secret not in text
    assert release.release(course) == [] and released.read_bytes() == first
    assert release.release(course, check_only=True) == []

    submit(course, "alice", source)
    submit(course, "bob", released)
    (course / "submitted" / "carol" / ASSIGNMENT).mkdir(parents=True)
    (course / "submitted" / "carol" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").write_text("{not json")

    results = {r.student: r for r in autograde.autograde(course, jobs=2)}
    assert "[3/3]" in capsys.readouterr().err
    alice, bob, carol = results["alice"], results["bob"], results["carol"]
    assert [(e.grade_id, e.score, e.max_score, e.passed) for e in alice.exercises] == [
        ("test_double", 2, 2, True)
    ]
    assert (bob.score, bob.max_score, bob.error) == (0, 2, "")
    assert bob.exercises[0].message.startswith("NotImplementedError")
    assert carol.exercises == [] and "JSON" in carol.error

    rows = list(
        csv.DictReader(
            grading_results.write_csv(list(results.values()), course / "reports" / "grades.csv").open()
        )
    )
    assert [(r["student"], r["exercise"], r["score"]) for r in rows] == [
        ("alice", "test_double", "2"),
        ("bob", "test_double", "0"),
        ("carol", "", ""),
    ]
    assert "grading failed" in rows[2]["message"]
    table = grading_results.format_table(list(results.values()))
    assert "test_double" in table and "ERROR" in table

    # The command: failed tests are not an error, a broken submission is.
    assert main(["--root", str(course), "autograde", "--student", "alice", "bob", "--jobs", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1:4] == [
        "student  test_double  total",
        "alice    2/2          2/2",
        "bob      0/2          0/2",
    ]
    assert f"grades: {course / 'reports' / 'grades.csv'}" in out
    assert main(["--root", str(course), "autograde", ASSIGNMENT, "--student", "carol"]) == 1
    assert "grading failed for carol/01_tiny" in capsys.readouterr().err

    pages = feedback.feedback(course)
    assert [p.relative_to(course).parts[:2] for p in pages] == [("feedback", "alice"), ("feedback", "bob")]
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert "double(-21)" not in html and "HIDDEN TESTS" not in html
    assert "NotImplementedError" in pages[1].read_text(encoding="utf-8")

    exported = grade_exports.export(course, course / "out" / "grades.csv", "nbgrader").path
    rows = {r["student_id"]: r for r in csv.DictReader(exported.open())}
    assert {s: rows[s]["score"] for s in rows} == {"alice": "2.0", "bob": "0.0", "carol": ""}
    # carol's notebook could not be graded: no score and why, not 0 "not submitted"
    assert rows["carol"]["note"].startswith("grading failed: ") and "JSON" in rows["carol"]["note"]


@pytest.mark.slow
def test_check_grades_a_notebook_without_touching_the_course(tiny_course, tmp_path, capsys):
    course = tiny_course
    mine = tmp_path / "my_work.ipynb"  # any name: the cells tell the assignment
    nb = tiny_notebook(solution="def double(x):\n    return x + x if x > 0 else 0\n")
    write_notebook(nb, mine)
    before = mine.read_bytes()

    assert main(["--root", str(course), "check", str(mine)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "FAIL  test_double  0/2"
    assert out[1].strip().startswith("AssertionError: hidden: double(-21) should be -42")
    assert out[-1] == "total  0/2"
    assert mine.read_bytes() == before
    assert sorted(p.name for p in course.iterdir()) == ["nbgrader_config.py", "solutions"]

    write_notebook(tiny_notebook(), mine)
    assert main(["--root", str(course), "check", str(mine)]) == 0
    assert capsys.readouterr().out.splitlines() == ["PASS  test_double  2/2", "total  2/2"]


def test_release_check_reports_stale_notebooks(tiny_course, capsys):
    course = tiny_course
    assert main(["--root", str(course), "release", "--check"]) == 1
    assert f"notebooks/{ASSIGNMENT}/{ASSIGNMENT}.ipynb" in capsys.readouterr().out
    assert not (course / "notebooks").exists() and not (course / "gradebook.db").exists()
    assert main(["--root", str(course), "release"]) == 0
    assert main(["--root", str(course), "release", "--check"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "notebooks/ is up to date"


def test_parallel_kernels_share_the_cores(monkeypatch):
    import os

    from course_grading.grading.autograde import _kernel_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert _kernel_threads(4) == {"OMP_NUM_THREADS": "2"}
    assert _kernel_threads(16) == {"OMP_NUM_THREADS": "1"}
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert _kernel_threads(4) == {}


# --------------------------------------------------------------------------- a failed setup cell

# a set-up that breaks where the file "broken-setup" lies beside the notebook (as an import that
# runs out of time would break it on a loaded machine)
SETUP_CELL = (
    "import os\nif os.path.exists('broken-setup'):\n    raise RuntimeError('the set-up broke here')\n"
)


def _with_setup():
    nb = tiny_notebook()
    setup = {"nbgrader": {**nbgrader_meta("setup")["nbgrader"], "locked": True}}
    nb.cells.insert(1, nbformat.v4.new_code_cell(SETUP_CELL, metadata=setup))
    return nb


@pytest.mark.slow
def test_failed_setup_or_linked_notebook_is_no_grade_with_plain_nbgrader_and_course(tmp_path, capsys):
    """A setup cell that fails (for one of the students here) leaves no score: plain `nbgrader
    autograde` (through nbgrader_config.py) reports that submission as failed and records no
    score for it, as it does for a notebook that is a link to the solutions; the other student
    is graded; `course report` and `course export` do not show the failed ones as 0; `course
    autograde` gives an error row with the reason."""
    import os
    import subprocess
    import sys

    from course_grading.course.nbgrader_setup import course_directory, gradebook
    from course_grading.reports.results import uncomputed

    course = make_course(tmp_path / "course", {ASSIGNMENT: _with_setup()})
    for student in ("good", "broken"):
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        write_notebook(_with_setup(), folder / f"{ASSIGNMENT}.ipynb")
    (course / "submitted" / "broken" / ASSIGNMENT / "broken-setup").write_text("")
    linked = course / "submitted" / "linked" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    linked.parent.mkdir(parents=True)
    linked.symlink_to(course / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    for step in ("generate_assignment", "autograde"):
        done = subprocess.run(
            [str(bin_dir / "nbgrader"), step, ASSIGNMENT, "--force"],
            cwd=course,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 1, done.stderr[-3000:]  # nbgrader: some submission failed
    assert (
        "SetupCellFailed: the setup cell 'setup' failed (RuntimeError: the set-up broke here)" in done.stderr
    )
    assert f"LinkedSubmission: {linked} is a symbolic link: not graded" in done.stderr
    for student in ("broken", "linked"):
        assert not (course / "autograded" / student / ASSIGNMENT).exists()
    with gradebook(course_directory(course)) as gb:
        good, broken, link = (gb.find_submission(ASSIGNMENT, s) for s in ("good", "broken", "linked"))
        assert (good.score, uncomputed(good)) == (2, False) and uncomputed(link)
        grades = [g for nb in broken.notebooks for g in nb.grades]
        assert grades and all(g.auto_score is None and g.manual_score is None for g in grades)
        assert uncomputed(broken) and broken.score == 0  # what nbgrader's own export would show

    assert main(["--root", str(course), "report"]) == 0
    rows = list(csv.DictReader((course / "reports" / "class_report.csv").open(encoding="utf-8")))
    assert [(r["exercise"], r["attempts"], r["failure_1"], r["failure_1_count"]) for r in rows] == [
        ("test_double", "1", "", ""),
        ("(grading failed)", "2", report_not_graded(), "2"),
    ]
    exported = grade_exports.export(course, course / "reports" / "export.csv", "nbgrader").path
    notes = {
        r["student_id"]: (r["score"], r["note"]) for r in csv.DictReader(exported.open(encoding="utf-8"))
    }
    no_score = ("", "grading failed: an autograded cell has no score")  # not nbgrader's 0
    assert notes == {"good": ("2.0", ""), "broken": no_score, "linked": no_score}

    capsys.readouterr()
    assert main(["--root", str(course), "autograde", "--student", "broken"]) == 1
    captured = capsys.readouterr()
    assert (
        "grading failed for broken/01_tiny: SetupCellFailed: the setup cell 'setup' failed "
        "(RuntimeError: the set-up broke here): no score can be computed"
    ) in captured.err
    # a regrade of one student still reports the whole class: the others as the gradebook holds them
    grades_csv = list(csv.DictReader((course / "reports" / "grades.csv").open(encoding="utf-8")))
    by_student = {r["student"]: r for r in grades_csv}
    assert sorted(by_student) == ["broken", "good", "linked"]
    assert by_student["broken"]["score"] == "" and by_student["linked"]["score"] == ""
    assert by_student["broken"]["message"].startswith("grading failed: SetupCellFailed: the setup cell")
    assert by_student["good"]["score"] not in ("", "0")
    # the export says what the grading run said
    exported = grade_exports.export(course, course / "reports" / "export.csv", "nbgrader")
    assert any(
        n.startswith("broken/01_tiny: not a grade yet, grading failed: SetupCellFailed")
        for n in exported.notes
    )


def report_not_graded() -> str:
    from course_grading.reports.class_report import NOT_GRADED

    return NOT_GRADED


def test_a_clash_with_another_grader_is_retried_not_reported(tmp_path):
    """Two graders sharing a gradebook may write the same rows at once: what the slower one
    meets is retried (the retry finds the rows there); a broken gradebook is not. Decided from
    the exception objects (class, the driver's error code), never from message text."""
    import sqlite3

    from nbgrader.converters.base import NbGraderException
    from sqlalchemy.exc import IntegrityError, OperationalError

    from course_grading.course.nbgrader_setup import run_converter
    from course_grading.errors import (
        AssignmentChanged,
        GradebookBusy,
        GradebookError,
        NbgraderFailure,
        retriable,
    )

    db = tmp_path / "gradebook.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    holder.execute("BEGIN EXCLUSIVE")
    other = sqlite3.connect(db, timeout=0)
    with pytest.raises(sqlite3.OperationalError) as locked:
        other.execute("INSERT INTO t VALUES (1)")
    holder.execute("INSERT INTO t VALUES (1)")
    holder.execute("COMMIT")
    with pytest.raises(sqlite3.IntegrityError) as duplicate:
        holder.execute("INSERT INTO t VALUES (1)")
    (tmp_path / "junk.db").write_bytes(b"this is not a database, only text" * 100)
    with pytest.raises(sqlite3.DatabaseError) as not_a_database:
        sqlite3.connect(tmp_path / "junk.db").execute("SELECT * FROM t")

    assert retriable(locked.value)
    assert retriable(OperationalError("INSERT", {}, locked.value))  # as SQLAlchemy raises it
    assert retriable(IntegrityError("INSERT", {}, duplicate.value))
    assert retriable(type("UniqueViolation", (Exception,), {"pgcode": "23505"})())  # psycopg2's
    assert retriable(type("ForeignKeyViolation", (Exception,), {"pgcode": "23503"})())
    assert not retriable(not_a_database.value)
    assert not retriable(OperationalError("SELECT", {}, not_a_database.value))
    assert not retriable(type("UndefinedTable", (Exception,), {"pgcode": "42P01"})())
    assert not retriable(RuntimeError("database is locked"))  # words alone decide nothing

    class Converter:
        """Fails inside a step, as nbgrader's converters do: caught, logged, a generic error."""

        coursedir = type("C", (), {"db_url": f"sqlite:///{db}"})()

        def __init__(self, inside):
            self.inside = inside

        def _clean_old_notebooks(self):
            raise NbGraderException(
                "Cannot modify existing assignment 'a' because there are submissions associated with it"
            )

        def init_assignment(self):
            raise self.inside

        def start(self):
            try:
                self._clean_old_notebooks() if self.inside is None else self.init_assignment()
            except Exception:
                pass
            raise NbGraderException("Please see the the above traceback for details")

    with pytest.raises(GradebookBusy):
        run_converter(Converter(OperationalError("INSERT", {}, locked.value)))
    with pytest.raises(GradebookError) as broken:
        run_converter(Converter(OperationalError("SELECT", {}, not_a_database.value)))
    assert not isinstance(broken.value, GradebookBusy) and "not a database" in str(broken.value)
    with pytest.raises(NbgraderFailure) as changed:
        run_converter(Converter(None))
    assert isinstance(changed.value.cause, AssignmentChanged) and retriable(changed.value)
    with pytest.raises(NbgraderFailure) as other_failure:
        run_converter(Converter(ValueError("a cell has no source\nsecond line")))
    assert str(other_failure.value) == "ValueError: a cell has no source"
    assert not retriable(other_failure.value)


def test_course_folders_come_from_the_configuration(tmp_path):
    """The folders are nbgrader's CourseDirectory settings, read from the course's
    nbgrader_config.py (defaults: nbgrader's own); no grading step spells a folder name."""
    import ast

    from nbgrader.coursedir import CourseDirectory

    from course_grading.course.course import Course
    from course_grading.course.course_dir import FOLDER_DEFAULTS

    traits = CourseDirectory.class_traits()
    assert FOLDER_DEFAULTS == {k: traits[f"{k}_directory"].default() for k in FOLDER_DEFAULTS}
    (tmp_path / "nbgrader_config.py").write_text(
        'c = get_config()\nc.CourseDirectory.source_directory = "instructor"\n'
    )
    (tmp_path / "instructor" / "01_x").mkdir(parents=True)
    (tmp_path / "instructor" / "01_x" / "01_x.ipynb").write_text("{}")
    (tmp_path / "solutions" / "02_y").mkdir(parents=True)
    (tmp_path / "solutions" / "02_y" / "02_y.ipynb").write_text("{}")
    course = Course(tmp_path)
    where, root = course.folders, tmp_path.resolve()
    assert (where.source, where.release, where.submitted) == (
        root / "instructor",
        root / "release",
        root / "submitted",
    )
    assert where.source_notebook("01_x") == root / "instructor" / "01_x" / "01_x.ipynb"
    assert course.source_assignments() == ["01_x"]
    with pytest.raises(GradingError, match="instructor/ has: 01_x"):
        course.select_assignments(["02_y"])

    root = Path(__file__).resolve().parents[1]
    names = set(FOLDER_DEFAULTS.values()) | {"solutions", "notebooks"}
    spelled = []
    for path in sorted((root / "course_grading").rglob("*.py")):
        if path.name == "course_dir.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Div)
                and isinstance(node.right, ast.Constant)
                and node.right.value in names
            ):
                spelled.append(str(path.relative_to(root)))
    # the one exception: the student package's own layout written by `course build-student`
    assert set(spelled) <= {"course_grading/authoring/student_side.py"}, spelled
