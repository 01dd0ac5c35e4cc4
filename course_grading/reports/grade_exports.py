"""``course export --format canvas|moodle|wide``: the gradebook's grades in the files that
instructors upload to their LMS, and a plain wide table.

One grade per (student, assignment) in every format: nbgrader's score after its late penalty,
0 for an assignment not submitted (as nbgrader's own export). A grade that is not known is
left **blank**, never written as a number: a submission whose autograding failed (a cell
without a score), or one whose written answers still wait for manual grading (nbgrader would
count them 0). Both LMS importers read a blank cell as "no grade" (see below), so an upload
never records a partial score as if it were final; ``export`` returns one note per blank
grade, which the command prints.

The column rules each format follows, from the importers' published source:

* **Canvas** (instructure/canvas-lms, ``app/models/gradebook_importer.rb``): the header row's
  first cell contains "Student", its second "ID"; "SIS User ID" and "SIS Login ID" may follow;
  the last student column contains "Section"; every later column is an assignment, matched to
  an existing one by "Title (id)" or by its title, else created. A row whose first cell
  contains "Points Possible" gives the assignments' points. A student is found by the "ID"
  column (Canvas's own user id), else by "SIS User ID", else by "SIS Login ID", else by name:
  here "ID" is left empty and the student id goes into "SIS Login ID" (a hub's user name is
  usually the LMS login).
* **Moodle** (moodle/moodle, ``grade/import/csv/classes/load_data.php``): the first row names
  the columns; the instructor maps one column to a user field (``userid``, ``useridnumber``,
  ``useremail``, ``username``) and each other column to a grade item or a new one. A grade
  must be a number (else the import stops with "badgrade"); an empty cell or ``-`` is no
  grade. Columns here: "First name", "Last name", "Username" (the student id), "Email
  address", one per assignment.
* **wide**: one row per student; per assignment its grade, its late penalty, the points of its
  written answers graded by hand, and the points still waiting for that; then the total of
  the known grades, the maximum, and a note naming what is not a grade yet.

Every cell goes through ``reports_csv.safe_cell`` (no text taken for a spreadsheet formula; a
student's name comes from the roster, which students fill in at their LMS).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import MissingEntry

from course_grading.course.nbgrader_setup import course_directory, gradebook
from course_grading.reports.reports_csv import write_rows
from course_grading.reports.results import manual_cells, pending_points, uncomputed

FORMATS = ("nbgrader", "canvas", "moodle", "wide")
CANVAS_STUDENT_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_ROW = "Points Possible"
MOODLE_STUDENT_COLUMNS = ["First name", "Last name", "Username", "Email address"]
WIDE_STUDENT_COLUMNS = ["student_id", "last_name", "first_name", "email"]
WIDE_PER_ASSIGNMENT = ("", " late_penalty", " manual_points", " awaiting_manual")


@dataclass
class Grade:
    """One (student, assignment) of the gradebook."""

    assignment: str
    max_score: float
    submitted: bool = False
    raw_score: float = 0.0
    late_penalty: float = 0.0
    manual_points: float = 0.0  # points given by hand to written answers
    awaiting_manual: float = 0.0  # points of written answers not graded yet
    failed: bool = False  # an autograded cell without a score

    @property
    def grade(self) -> float | None:
        """The grade to upload, or None where it is not known yet."""
        if self.failed or self.awaiting_manual:
            return None
        return max(0.0, self.raw_score - self.late_penalty) if self.submitted else 0.0

    @property
    def why_blank(self) -> str:
        if self.failed:
            return "autograding failed"
        if self.awaiting_manual:
            return f"{self.awaiting_manual:g} points of written answers to grade by hand"
        return ""


@dataclass
class StudentGrades:
    id: str
    first_name: str
    last_name: str
    email: str
    grades: dict  # assignment -> Grade

    @property
    def display_name(self) -> str:
        """"Last, First" (Canvas's sortable name), else the id."""
        names = [n for n in (self.last_name, self.first_name) if n]
        return ", ".join(names) or self.id


def collect(course, assignments=None, students=None, db_url=None) -> tuple[dict[str, float], list[StudentGrades]]:
    """({assignment: max score}, one StudentGrades per gradebook student), in the gradebook's
    order of assignments (as nbgrader lists them) and by student id."""
    coursedir = course_directory(course, db_url=db_url)
    with gradebook(coursedir) as gb:
        maxima = {a.name: float(a.max_score) for a in gb.assignments
                  if not assignments or a.name in assignments}
        names = list(maxima)
        found = []
        for student in sorted(gb.students, key=lambda s: s.id):
            if students and student.id not in students:
                continue
            row = StudentGrades(student.id, student.first_name or "", student.last_name or "",
                                student.email or "", {})
            for name in names:
                grade = Grade(name, maxima[name])
                try:
                    submission = gb.find_submission(name, student.id)
                except MissingEntry:
                    pass
                else:
                    grade.submitted = True
                    grade.raw_score = float(submission.score)
                    grade.late_penalty = float(submission.late_submission_penalty or 0)
                    grade.failed = uncomputed(submission)
                    grade.awaiting_manual = pending_points(submission)
                    grade.manual_points = _manual_points(submission)
                row.grades[name] = grade
            found.append(row)
    return maxima, found


def _manual_points(submission) -> float:
    """Points the instructor gave to written answers (scores set by hand)."""
    total = 0.0
    for nb in submission.notebooks:
        manual = manual_cells(nb.notebook)
        total += sum(float(g.manual_score) for g in nb.grades
                     if g.name in manual and g.manual_score is not None)
    return total


def _number(value: float | None):
    return "" if value is None else value


def canvas_rows(maxima: dict[str, float], found: list[StudentGrades]) -> list[list]:
    names = list(maxima)
    rows = [CANVAS_STUDENT_COLUMNS + names, [CANVAS_POINTS_ROW, "", "", "", ""] + list(maxima.values())]
    for s in found:
        rows.append([s.display_name, "", "", s.id, ""] + [_number(s.grades[n].grade) for n in names])
    return rows


def moodle_rows(maxima: dict[str, float], found: list[StudentGrades]) -> list[list]:
    names = list(maxima)
    rows = [MOODLE_STUDENT_COLUMNS + names]
    for s in found:
        rows.append([s.first_name, s.last_name, s.id, s.email] + [_number(s.grades[n].grade) for n in names])
    return rows


def wide_rows(maxima: dict[str, float], found: list[StudentGrades]) -> list[list]:
    names = list(maxima)
    rows = [WIDE_STUDENT_COLUMNS + [f"{n}{suffix}" for n in names for suffix in WIDE_PER_ASSIGNMENT]
            + ["total", "max_total", "note"]]
    for s in found:
        row = [s.id, s.last_name, s.first_name, s.email]
        notes = []
        for n in names:
            g = s.grades[n]
            row += [_number(g.grade), g.late_penalty, g.manual_points, g.awaiting_manual]
            if g.why_blank:
                notes.append(f"{n}: {g.why_blank}")
            elif not g.submitted:
                notes.append(f"{n}: not submitted")
        known = [s.grades[n].grade for n in names if s.grades[n].grade is not None]
        row += [sum(known), sum(maxima.values()), "; ".join(notes)]
        rows.append(row)
    return rows


WRITERS = {"canvas": canvas_rows, "moodle": moodle_rows, "wide": wide_rows}


def export(course, path, fmt: str, assignments=None, students=None, db_url=None) -> tuple[Path, list[str]]:
    """Write the grades in format ``fmt`` (canvas, moodle, wide) to ``path``; return the path
    and one note per grade left blank (student/assignment: why)."""
    maxima, found = collect(course, assignments, students, db_url)
    names = list(maxima)
    written = write_rows(Path(path).resolve(), WRITERS[fmt](maxima, found))
    notes = [f"{s.id}/{n}: left blank, {s.grades[n].why_blank}" for s in found for n in names
             if s.grades[n].why_blank]
    return written, notes
