"""Written answers: nbgrader's manually graded answer cells, through the whole course.

The notebooks: each of 01-08 has a "Check your understanding" section just before its closing
section, whose answers carry points and a model answer with a rubric that the release replaces
by nbgrader's stub. The pipeline, on a tiny course with one autograded exercise and one written
answer: autograde shows an answer as waiting for manual grading (no score, not a 0, not an
error row) or as not answered; the class report, ``course export`` and the LMS exports keep
waiting points out of every grade; the red-flag scanner accepts a written answer and flags an
answer cell turned into code; once the instructor scores it and comments (the gradebook calls
the Formgrader makes), totals and exports include the points and the feedback page shows the
comment; ``course check`` says which answers are graded by hand and shows the model answer
only after the learner wrote one. tests/test_instructor_browser.py walks the Formgrader itself.
"""

from __future__ import annotations

import csv
import re
import shutil

import nbformat
import pytest

from conftest import ASSIGNMENT, ROOT, make_course, nbgrader_meta, tiny_notebook
from course_grading.authoring import release
from course_grading.authoring.cells import is_grade
from course_grading.authoring.nbformat_tools import read_notebook, write_notebook
from course_grading.commands.cli import main
from course_grading.grading.red_flags import scan
from course_grading.reports import class_report, feedback, grade_exports
from course_grading.reports import results as grading_results

NOTEBOOKS = sorted(
    p.name
    for p in (ROOT / "solutions").iterdir()
    if p.name[:2] in {"01", "02", "03", "04", "05", "06", "07", "08"}
)
SECTION = "## Check your understanding"
STUB = "YOUR ANSWER HERE"
MODEL = "**Model answer.** Doubling adds a number to itself.\n\n**Rubric (2 points).** 2 points: says x + x."


def _written(nb):
    return [c for c in nb.cells if c.cell_type == "markdown" and c.metadata.get("nbgrader", {}).get("grade")]


# --------------------------------------------------------------------------- the notebooks


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_each_notebook_asks_written_questions_before_its_closing_section(name):
    nb = read_notebook(ROOT / "solutions" / name / f"{name}.ipynb")
    headings = [
        (i, c.source.splitlines()[0])
        for i, c in enumerate(nb.cells)
        if c.cell_type == "markdown" and c.source.startswith("## ")
    ]
    at = [i for i, h in headings if h == SECTION]
    assert len(at) == 1, f"{name}: one '{SECTION}' section"
    following = [h for i, h in headings if i > at[0]]
    assert following and following[0].startswith(("## What you built", "## Going further")), following[:1]
    section = nb.cells[at[0] : next(i for i, _ in headings if i > at[0])]
    answers = _written(nb)
    assert 1 <= len(answers) <= 2 and all(c in section for c in answers)
    for answer in answers:
        meta = answer.metadata["nbgrader"]
        assert meta["solution"] and meta["grade"] and not meta["locked"] and meta["points"] > 0
        assert meta["grade_id"].startswith("written_")
        assert "**Model answer.**" in answer.source and "**Rubric" in answer.source
        # what a grader with 200 answers needs beside each: partial credit, the usual mistakes
        assert "**Partial credit.**" in answer.source and "**Common wrong answers" in answer.source
        # the question is the read-only cell right before its answer, and says its points
        question = nb.cells[nb.cells.index(answer) - 1]
        assert question.metadata["nbgrader"]["locked"] and not question.metadata["nbgrader"]["grade"]
        assert re.search(rf"\({meta['points']:g} points, graded by hand\)", question.source)


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_the_release_keeps_the_question_and_drops_the_model_answer(name):
    source = read_notebook(ROOT / "solutions" / name / f"{name}.ipynb")
    released = read_notebook(ROOT / "notebooks" / name / f"{name}.ipynb")
    by_id = {c.metadata["nbgrader"]["grade_id"]: c for c in released.cells if "nbgrader" in c.metadata}
    for answer in _written(source):
        gid = answer.metadata["nbgrader"]["grade_id"]
        assert by_id[gid].source == STUB and by_id[gid].cell_type == "markdown"
        assert by_id[gid].metadata["nbgrader"]["points"] == answer.metadata["nbgrader"]["points"]
        question = source.cells[source.cells.index(answer) - 1]
        assert by_id[question.metadata["nbgrader"]["grade_id"]].source == question.source
    released_text = "\n".join(c.source for c in released.cells)
    for line in (ln.strip() for a in _written(source) for ln in a.source.splitlines()):
        assert len(line) < 12 or line not in released_text, f"{name}: rubric line released: {line!r}"
    assert "Model answer" not in released_text and "Rubric" not in released_text
    assert release.find_leaks(source, released) == []


def test_written_answers_are_not_code_grade_cells():
    """Everything that reads test cells (the harness, the audit, the tags) reads code only."""
    for name in NOTEBOOKS:
        nb = read_notebook(ROOT / "solutions" / name / f"{name}.ipynb")
        assert not any(is_grade(c) for c in _written(nb))
        assert all(c.metadata["nbgrader"]["grade_id"].startswith("test_") for c in nb.cells if is_grade(c))


# --------------------------------------------------------------------------- the pipeline


def written_notebook(answer=MODEL):
    """The tiny notebook plus a question and a written answer worth 2 points."""
    nb = tiny_notebook()
    question = nbformat.v4.new_markdown_cell(
        "### Question — why x + x? (2 points, graded by hand)", metadata=nbgrader_meta("q_double")
    )
    meta = nbgrader_meta("written_double", solution=True, grade=True, points=2)
    nb.cells += [question, nbformat.v4.new_markdown_cell(answer, metadata=meta)]
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """A course with a written answer, released, and three submissions autograded: ann
    answered, bob left the answer as released, cat answered and broke the test."""
    course = make_course(tmp_path_factory.mktemp("written") / "course", {ASSIGNMENT: written_notebook()})
    release.release(course)
    released = read_notebook(course / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    source = read_notebook(course / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    for student, nb in (("ann", _answered(source)), ("bob", released), ("cat", _answered(_broken(source)))):
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        write_notebook(nb, folder / f"{ASSIGNMENT}.ipynb")
    from course_grading.grading import autograde

    results = {r.student: r for r in autograde.autograde(course, jobs=2, progress=False)}
    return course, results


def _answered(nb):
    """The solution with the learner's own written answer in place of the model answer."""
    nb = read_notebook_copy(nb)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "written_double":
            cell.source = "Because doubling a number adds it to itself, so x + x."
    return nb


def read_notebook_copy(nb):
    return nbformat.reads(nbformat.writes(nb), as_version=4)


def _broken(nb):
    nb = read_notebook_copy(nb)
    nb.cells[1].source = "def double(x):\n    return x * 3\n"
    return nb


def test_autograde_shows_a_written_answer_as_waiting_not_as_a_zero(graded, tmp_path):
    course, results = graded
    ann, bob, cat = results["ann"], results["bob"], results["cat"]
    assert not (ann.error or bob.error or cat.error)
    assert not (ann.flags or bob.flags or cat.flags)  # the audit and the scanner, on written answers
    [test, written] = ann.exercises
    assert (test.grade_id, test.score, test.passed) == ("test_double", 2, True)
    assert (written.grade_id, written.manual, written.pending, written.passed) == (
        "written_double",
        True,
        True,
        False,
    )
    assert written.message == grading_results.NEEDS_MANUAL
    assert (ann.score, ann.max_score, ann.pending_points, ann.total()) == (2, 4, 2, "2/4 +2 manual")
    [_, blank] = bob.exercises  # left as released: nbgrader scores it 0, nothing to grade
    assert (blank.score, blank.pending, blank.message) == (0, False, grading_results.NOT_ANSWERED)

    table = grading_results.format_table(list(results.values()))
    assert re.search(r"ann\s+2/2\s+manual/2\s+2/4 \+2 manual", table), table
    assert "needs manual grading" in table.splitlines()[-1]
    rows = list(csv.DictReader(grading_results.write_csv(list(results.values()), tmp_path / "g.csv").open()))
    ann_written = [r for r in rows if r["student"] == "ann" and r["exercise"] == "written_double"]
    assert ann_written == [
        {
            "student": "ann",
            "assignment": ASSIGNMENT,
            "exercise": "written_double",
            "score": "",
            "max_score": "2",
            "message": "needs manual grading",
        }
    ]

    stats = {s.exercise: s for s in class_report.exercise_stats(list(results.values()))}
    assert (stats["written_double"].attempts, stats["written_double"].awaiting_manual) == (1, 2)
    assert stats["test_double"].attempts == 3
    report = {r.student: r for r in class_report.gradebook_results(course)}
    assert not any(r.error for r in report.values()), "waiting answers are not a failed grading"
    assert report["ann"].pending_points == 2


def test_the_scanner_accepts_written_answers_and_flags_an_answer_turned_into_code(graded):
    course, _ = graded
    source = course / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    ann = course / "submitted" / "ann" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert scan(ann, source) == []
    nb = read_notebook(ann)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "written_double")
    cell.cell_type, cell.outputs, cell.execution_count = "code", [], None
    cell.source = "import os\nos._exit(0)"
    reasons = [f.reason for f in scan(nb, source) if f.where == "written_double"]
    assert "answer cell turned into a code cell" in reasons
    assert any(r.startswith("process control") for r in reasons)


def test_exports_leave_waiting_grades_blank_until_the_instructor_grades(graded, tmp_path, capsys):
    course, _ = graded
    from course_grading.course.nbgrader_setup import course_directory, gradebook

    nbgrader_rows = {
        r["student_id"]: r
        for r in csv.DictReader(grade_exports.export(course, tmp_path / "n.csv", "nbgrader").path.open())
    }
    assert nbgrader_rows["ann"]["note"] == "needs manual grading (2 points)"
    assert nbgrader_rows["bob"]["note"] == ""
    exported = grade_exports.export(course, tmp_path / "w.csv", "wide")
    path, notes = exported.path, exported.notes
    wide = {r["student_id"]: r for r in csv.DictReader(path.open())}
    assert (wide["ann"][ASSIGNMENT], wide["ann"][f"{ASSIGNMENT} awaiting_manual"]) == ("", "2")
    assert notes == [
        f"ann/{ASSIGNMENT}: left blank, 2 points of written answers to grade by hand",
        f"cat/{ASSIGNMENT}: left blank, 2 points of written answers to grade by hand",
    ]

    capsys.readouterr()
    assert main(["--root", str(course), "feedback", "--student", "ann"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"course: note: ann/{ASSIGNMENT}: 2 points of written answers not graded by hand yet "
        "(its feedback says so beside each)"
    ]
    waiting = next(p for p in (course / "feedback" / "ann").rglob("*.html")).read_text(encoding="utf-8")
    assert "Not graded yet: this answer waits to be graded by hand" in waiting  # not a bare 0

    # the instructor scores ann's answer and comments, as the Formgrader's API does
    with gradebook(course_directory(course)) as gb:
        grade = gb.find_grade("written_double", ASSIGNMENT, ASSIGNMENT, "ann")
        grade.manual_score, grade.needs_manual_grade = 1.5, False
        comment = gb.find_comment("written_double", ASSIGNMENT, ASSIGNMENT, "ann")
        comment.manual_comment = "Right idea; say *why* adding equals doubling: x + x = 2x."
        gb.db.commit()

    [_, written] = grading_results.exercise_results(course_directory(course), "ann", ASSIGNMENT)
    assert (written.score, written.pending, written.message) == (
        1.5,
        False,
        "Right idea; say *why* adding equals doubling: x + x = 2x.",
    )
    exported = grade_exports.export(course, tmp_path / "w.csv", "wide")
    path, notes = exported.path, exported.notes
    wide = {r["student_id"]: r for r in csv.DictReader(path.open())}
    assert (wide["ann"][ASSIGNMENT], wide["ann"][f"{ASSIGNMENT} manual_points"], wide["ann"]["total"]) == (
        "3.5",
        "1.5",
        "3.5",
    )
    assert notes == [f"cat/{ASSIGNMENT}: left blank, 2 points of written answers to grade by hand"]
    nbgrader_rows = {
        r["student_id"]: r
        for r in csv.DictReader(grade_exports.export(course, tmp_path / "n.csv", "nbgrader").path.open())
    }
    assert (nbgrader_rows["ann"]["score"], nbgrader_rows["ann"]["note"]) == ("3.5", "")

    pages = feedback.feedback(course, students=["ann"])
    html = pages[0].read_text(encoding="utf-8")
    assert "Right idea; say <em>why</em> adding equals doubling" in html
    assert "Not graded yet" not in html
    assert "Because doubling a number adds it to itself" in html
    assert "overflow-wrap: anywhere" in html  # FeedbackStyle: long messages wrap


def test_the_formgrader_shows_the_rubric_beside_each_answer_and_feedback_does_not(graded):
    """The Formgrader's exporter (HTMLExporter with the course's configuration) on a submission
    page (its resources name the submission) inserts the source's model answer and rubric after
    the written answer; any other rendering (feedback's) does not."""
    from nbconvert import HTMLExporter

    from course_grading.course.nbgrader_setup import course_directory

    course, _ = graded
    exporter = HTMLExporter(config=course_directory(course).config)
    notebook = course / "autograded" / "ann" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    page, _ = exporter.from_filename(
        str(notebook),
        resources={
            "submission_id": "x",
            "assignment_id": ASSIGNMENT,
            "notebook_id": ASSIGNMENT,
            "notebook_path": f"/autograded/ann/{ASSIGNMENT}/{ASSIGNMENT}.ipynb",
        },
    )
    assert page.count("For the grader") == 1 and "Rubric (2 points)" in page
    assert page.index("Because doubling a number adds it to itself") < page.index("For the grader")
    other, _ = exporter.from_filename(str(notebook), resources={"nbgrader": {"student": "ann"}})
    assert "For the grader" not in other and "Rubric (2 points)" not in other


def _hand_grade(course, student, score):
    """Score a student's written answer by hand, as the Formgrader's API does."""
    from course_grading.course.nbgrader_setup import course_directory, gradebook

    with gradebook(course_directory(course)) as gb:
        grade = gb.find_grade("written_double", ASSIGNMENT, ASSIGNMENT, student)
        grade.manual_score, grade.needs_manual_grade = score, False
        gb.db.commit()


def _queue(course) -> dict[str, bool]:
    """{student: whether their written answer is in the Formgrader's manual grading queue}."""
    from course_grading.course.nbgrader_setup import course_directory, gradebook

    with gradebook(course_directory(course)) as gb:
        return {
            s: gb.find_grade("written_double", ASSIGNMENT, ASSIGNMENT, s).needs_manual_grade
            for s in ("ann", "cat")
        }


def test_a_regrade_keeps_unchanged_hand_graded_answers_out_of_the_queue(graded, capsys):
    course, _ = graded
    _hand_grade(course, "ann", 1.5)
    _hand_grade(course, "cat", 1)
    assert _queue(course) == {"ann": False, "cat": False}
    # cat resubmits with another answer; ann's is as it was
    path = course / "submitted" / "cat" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    nb = read_notebook(path)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "written_double")
    cell.source = "Adding x to itself gives two x."
    write_notebook(nb, path)
    assert main(["--root", str(course), "autograde", "--student", "ann", "cat", "--jobs", "1"]) == 0
    capsys.readouterr()
    assert _queue(course) == {"ann": False, "cat": True}  # only the changed answer waits for a look
    # the regrade of two students reports the whole class: bob's rows stay in grades.csv
    rows = list(csv.DictReader((course / "reports" / "grades.csv").open()))
    assert {r["student"] for r in rows} == {"ann", "bob", "cat"}
    ann = {r["exercise"]: r["score"] for r in rows if r["student"] == "ann"}
    assert ann == {"test_double": "2", "written_double": "1.5"}  # the hand score kept
    report = (course / "reports" / "class_report.csv").read_text()
    assert "test_double" in report


@pytest.mark.slow
def test_check_says_graded_by_hand_and_shows_the_model_answer_once_written(tmp_path, capsys):
    course = make_course(tmp_path / "course", {ASSIGNMENT: written_notebook()})
    release.release(course)
    mine = tmp_path / f"{ASSIGNMENT}.ipynb"
    shutil.copy(course / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", mine)
    nb = read_notebook(mine)
    nb.cells[1].source = "def double(x):\n    return x + x\n"
    write_notebook(nb, mine)
    assert main(["--root", str(course), "check", str(mine)]) == 1  # the answer is still to write
    out = capsys.readouterr().out
    assert "PASS  test_double" in out and "TODO  written_double  0/2" in out
    assert "Model answer" not in out and "Doubling adds" not in out

    nb.cells[-1].source = "It adds x to itself."
    write_notebook(nb, mine)
    assert main(["--root", str(course), "check", str(mine)]) == 0
    out = capsys.readouterr().out
    assert "HAND  written_double  ?/2  written answer, graded by hand" in out
    assert "total  2/2 (tests); written answers, graded by hand: 2 points" in out
    assert "Model answer for written_double" in out and "Doubling adds a number to itself." in out
