"""``course export --format nbgrader|canvas|moodle|wide``: the gradebook's grades in
nbgrader's export columns, in the files that instructors upload to their LMS, and a plain wide
table, all from one reading of the grades (``collect``).

One grade per (student, assignment) in every format: nbgrader's score after its late penalty;
for an assignment not submitted, 0 once its due date has passed (nbgrader's own export gives
0; so does this one where the assignment has no due date) and **no grade yet** before it. A
grade that is not known is never written as a number: a submission whose last grading failed
(the grading run's error row, recorded by ``ledger``: the gradebook then holds an earlier grade
or nothing; or a cell without a score), one whose written answers wait for manual grading
(nbgrader would count them 0, or, for an answer put back into the queue, its old score), or one
not due yet. Canvas gets an empty cell, Moodle ``-`` (an empty cell
is "no grade" for an existing Moodle grade item only; mapped to a new one, Moodle stores 0),
so an upload never records a partial score as if it were final; ``export`` returns one note
per grade left without a number, which the command prints.

The column rules each format follows, from the importers' published source:

* **Canvas** (instructure/canvas-lms, ``app/models/gradebook_importer.rb``): the header row's
  first cell contains "Student", its second "ID"; "SIS User ID" and "SIS Login ID" may follow;
  the last student column contains "Section"; every later column is an assignment, matched to
  an existing one by "Title (id)" or by its title, else created. A row whose first cell
  contains "Points Possible" sets the assignments' points (a cell left empty keeps them). A
  student is found by the "ID" column (Canvas's own user id), else by "SIS User ID", else by
  "SIS Login ID", else by name: here "ID" is left empty and the student id goes into "SIS
  Login ID" (a hub's user name is usually the LMS login). An assignment that
  ``c.LMS.canvas_assignment_ids`` maps to its Canvas id is titled "name (id)". This file suits assignments the
  import creates; for assignments Canvas already has, fill the gradebook the instructor
  downloads from Canvas instead (``lms/canvas.py``: its ids, its points, its students).
* **Moodle**: ``lms/moodle.py`` (one identifier column, ``-`` for no grade, feedback columns,
  only the students of the LMS's own participants list with ``roster``).
* **Canvas, filling the instructor's own download**: ``lms/canvas.py``.
* **nbgrader**: nbgrader's export columns, one row per assignment and student, and a ``note``
  saying what is not a grade (no score where grading failed or nothing is due yet).
* **wide**: one row per student; per assignment its grade, its late penalty, the points of its
  written answers graded by hand, and the points still waiting for that; then the total of
  the points known so far (a submission whose written answers wait counts with the points it
  has), the points still waiting (a total with any is partial, and its note says so first),
  the maximum, and a note naming what is not a grade yet.

Every cell goes through ``reports_csv.safe_cell`` (no text taken for a spreadsheet formula; a
student's name comes from the roster, which students fill in at their LMS).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from nbgrader.api import MissingEntry

from course_grading.authoring import cells
from course_grading.authoring.nbformat_tools import read_untrusted
from course_grading.course.course import Course
from course_grading.course.nbgrader_setup import course_directory, gradebook
from course_grading.grading import ledger
from course_grading.reports.lms import ids
from course_grading.reports.reports_csv import clean, write_rows
from course_grading.reports.results import awaits_manual, manual_cells, pending_points, uncomputed

FORMATS = ("nbgrader", "canvas", "moodle", "wide")
NBGRADER_COLUMNS = [
    "assignment",
    "duedate",
    "timestamp",
    "student_id",
    "last_name",
    "first_name",
    "email",
    "raw_score",
    "late_submission_penalty",
    "score",
    "max_score",
    "note",
]
CANVAS_STUDENT_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_POINTS_ROW = "Points Possible"
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
    awaiting_manual: float = 0.0  # points of written answers not graded (or graded again) yet
    waiting_score: float = 0.0  # what nbgrader's score still counts for those (a stale score)
    failure: str = ""  # why grading failed: a grading run's error, or a cell without a score
    due: datetime | None = None  # the assignment's due date (UTC), None without one
    timestamp: datetime | None = None  # when the graded submission was made
    comments: list = field(default_factory=list)  # "grade id: the grader's comment"

    @property
    def failed(self) -> bool:
        return bool(self.failure)

    @property
    def grade(self) -> float | None:
        """The grade to upload, or None where it is not known yet."""
        if self.failed or self.awaiting_manual or self.not_due:
            return None
        return max(0.0, self.raw_score - self.late_penalty) if self.submitted else 0.0

    @property
    def not_due(self) -> bool:
        """Not submitted, and its due date is still to come: no grade yet (not a 0)."""
        return not self.submitted and self.due is not None and self.due > _now()

    @property
    def points_so_far(self) -> float:
        """The points known now: the grade, or, while written answers wait, the points
        already given (after the late penalty); 0 where grading failed or nothing is due."""
        if self.grade is not None:
            return self.grade
        if self.submitted and not self.failed:
            return max(0.0, self.raw_score - self.waiting_score - self.late_penalty)
        return 0.0

    @property
    def why_blank(self) -> str:
        if self.failed:
            return f"grading failed: {self.failure}"
        if self.awaiting_manual:
            return f"{self.awaiting_manual:g} points of written answers to grade by hand"
        if self.not_due:
            return f"not submitted, due {self.due:%Y-%m-%d %H:%M} UTC: no grade yet"
        return ""

    def feedback(self) -> str:
        """What the student's LMS grade comes with: the grader's comments on the written
        answers, and what is not a grade yet."""
        parts = list(self.comments)
        if self.why_blank:
            parts.append(f"no grade yet: {self.why_blank}" if not self.not_due else self.why_blank)
        elif self.late_penalty:
            parts.append(f"late penalty {self.late_penalty:g}")
        return clean("; ".join(parts), MAX_FEEDBACK)


MAX_FEEDBACK = 1000  # characters of one feedback cell


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)  # nbgrader stores naive UTC


@dataclass
class StudentGrades:
    id: str
    first_name: str
    last_name: str
    email: str
    grades: dict  # assignment -> Grade
    lms_id: str = ""  # the LMS's own id of the student (Canvas's ID, Moodle's ID number: ``lms.ids``)

    @property
    def canvas_id(self) -> str:
        return ids.canvas_id(self.lms_id)

    @property
    def id_number(self) -> str:
        return ids.id_number(self.lms_id)

    @property
    def display_name(self) -> str:
        """ "Last, First" (Canvas's sortable name), else the id."""
        names = [n for n in (self.last_name, self.first_name) if n]
        return ", ".join(names) or self.id


def collect(
    course, assignments=None, students=None, db_url=None
) -> tuple[dict[str, float], list[StudentGrades]]:
    """({assignment: max score}, one StudentGrades per gradebook student), in the gradebook's
    order of assignments (as nbgrader lists them) and by student id."""
    coursedir = course_directory(course, db_url=db_url)
    failed = ledger.failures(Course.of(course).root)  # {(student, assignment): why}
    with gradebook(coursedir) as gb:
        chosen = [a for a in gb.assignments if not assignments or a.name in assignments]
        maxima = {a.name: float(a.max_score) for a in chosen}
        dues = {a.name: a.duedate for a in chosen}
        names = list(maxima)
        orders = {name: _cell_order(course, name) for name in names}
        found = []
        for student in sorted(gb.students, key=lambda s: s.id):
            if students and student.id not in students:
                continue
            row = StudentGrades(
                student.id,
                student.first_name or "",
                student.last_name or "",
                student.email or "",
                {},
                student.lms_user_id or "",
            )
            for name in names:
                grade = Grade(name, maxima[name], due=dues[name])
                row.grades[name] = _fill(grade, gb, failed.get((student.id, name)), student.id, orders[name])
            found.append(row)
    return maxima, found


def _fill(grade: Grade, gb, failure: str | None, student: str, order: dict) -> Grade:
    """``grade`` of ``student``: ``failure``, where the course recorded that the last grading
    of the submission failed (``ledger.failures``: the gradebook then holds an earlier grade, or
    nothing), else from the gradebook (``order``: ``_cell_order`` of its assignment)."""
    assignment = grade.assignment
    if failure is not None:
        grade.submitted, grade.failure = True, failure
        return grade
    try:
        submission = gb.find_submission(assignment, student)
    except MissingEntry:
        return grade
    grade.submitted = True
    grade.timestamp = submission.timestamp
    grade.raw_score = float(submission.score)
    grade.late_penalty = float(submission.late_submission_penalty or 0)
    if uncomputed(submission):
        grade.failure = "an autograded cell has no score"
        return grade
    grade.awaiting_manual = pending_points(submission)
    grade.manual_points, grade.waiting_score = _hand_points(submission)
    grade.comments = _comments(submission, order)
    return grade


def _hand_points(submission) -> tuple[float, float]:
    """(points given by hand to written answers that stand, what nbgrader's score still
    counts for written answers waiting to be graded by hand again)."""
    given = waiting = 0.0
    for nb in submission.notebooks:
        manual = manual_cells(nb.notebook)
        for g in nb.grades:
            if awaits_manual(g, manual):
                waiting += float(g.score or 0)
            elif g.name in manual and g.manual_score is not None:
                given += float(g.manual_score)
    return given, waiting


def _comments(submission, order: dict[str, dict[str, int]]) -> list[str]:
    """The comments graders wrote on a gradebook submission, "grade id: comment", in notebook
    order (``order``: ``_cell_order``); nbgrader's own automatic ones ("No response.") are no
    grader's and are left out."""
    found = []
    for nb in sorted(submission.notebooks, key=lambda n: n.name):
        place = order.get(nb.name, {})
        written = [c for c in nb.comments if c.manual_comment and c.manual_comment.strip()]
        found += [
            f"{c.name}: {' '.join(c.manual_comment.split())}"
            for c in sorted(written, key=lambda c: (place.get(c.name, len(place)), c.name))
        ]
    return found


def _cell_order(course, assignment: str) -> dict[str, dict[str, int]]:
    """{notebook: {grade id: its place}} of the assignment's source notebooks (the order the
    students saw the cells in); a notebook that cannot be read has none."""
    found = {}
    for path in sorted(Course.of(course).folders.source_of(assignment).glob("*.ipynb")):
        try:
            nb = read_untrusted(path)
        except (OSError, ValueError):
            continue
        grade_ids = [cells.grade_id(cell) for cell in nb.cells]
        found[path.stem] = {g: i for i, g in enumerate(grade_ids) if isinstance(g, str)}
    return found


def _number(value: float | None):
    return "" if value is None else value


def canvas_rows(maxima: dict[str, float], found: list[StudentGrades], ids: dict | None = None) -> list[list]:
    """Canvas's columns; an assignment that ``ids`` maps to its Canvas id is titled
    "name (id)", which Canvas matches by the id."""
    names = list(maxima)
    titles = [f"{n} ({ids[n]})" if ids and n in ids else n for n in names]
    rows = [CANVAS_STUDENT_COLUMNS + titles, [CANVAS_POINTS_ROW, "", "", "", ""] + list(maxima.values())]
    for s in found:
        rows.append([s.display_name, "", "", s.id, ""] + [_number(s.grades[n].grade) for n in names])
    return rows


def nbgrader_rows(maxima: dict[str, float], found: list[StudentGrades]) -> list[list]:
    """nbgrader's export columns (one row per assignment and student), and a last column
    ``note``: where a score is not a grade no number is written (grading failed, not due
    yet); written answers waiting for the instructor leave a partial score, which the note
    says."""
    rows = [NBGRADER_COLUMNS]
    for name, most in maxima.items():
        for s in found:
            g = s.grades[name]
            if g.failed or g.not_due:
                scores, note = ["", "", ""], g.why_blank
            elif g.submitted:
                raw = g.raw_score - g.waiting_score
                scores = [raw, g.late_penalty, max(0.0, raw - g.late_penalty)]
                note = f"needs manual grading ({g.awaiting_manual:g} points)" if g.awaiting_manual else ""
            else:
                scores, note = [0.0, 0.0, 0.0], "not submitted"
            row = [name, g.due, g.timestamp, s.id, s.last_name, s.first_name, s.email, *scores, most, note]
            rows.append(["" if cell is None else str(cell) for cell in row])
    return rows


def wide_rows(maxima: dict[str, float], found: list[StudentGrades]) -> list[list]:
    names = list(maxima)
    rows = [
        WIDE_STUDENT_COLUMNS
        + [f"{n}{suffix}" for n in names for suffix in WIDE_PER_ASSIGNMENT]
        + ["total", "total_awaiting_manual", "max_total", "note"]
    ]
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
        waiting = sum(s.grades[n].awaiting_manual for n in names)
        if waiting:  # the total so far is no final grade: say so first
            notes.insert(0, f"partial total: {waiting:g} points wait for grading by hand")
        row += [
            sum(s.grades[n].points_so_far for n in names),
            waiting,
            sum(maxima.values()),
            "; ".join(notes),
        ]
        rows.append(row)
    return rows


@dataclass
class Exported:
    """What ``export`` wrote: the file, one note per grade left without a number, and one
    problem per student left out of the file (the command then ends with exit status 1)."""

    path: Path
    notes: list
    problems: list = field(default_factory=list)


def export(
    course,
    path,
    fmt: str,
    assignments=None,
    students=None,
    db_url=None,
    *,
    match: str = "username",
    roster=None,
) -> Exported:
    """Write the grades in format ``fmt`` (``FORMATS``) to ``path``. Moodle's file
    identifies students by ``match`` (``lms.moodle.IDENTIFIERS``); with ``roster`` (an LMS's
    participants or class list) only its students are written, the others named."""
    maxima, found = collect(course, assignments, students, db_url)
    left_out: list[str] = []
    if roster is not None:
        from course_grading.reports.lms.moodle import only_listed

        found, left_out = only_listed(found, roster, match if fmt == "moodle" else "username")
    if fmt == "moodle":
        from course_grading.reports.lms.moodle import moodle_rows

        rows, missing = moodle_rows(maxima, found, match)
        left_out += missing
    elif fmt == "canvas":
        from course_grading.reports.lms.canvas import canvas_ids

        rows = canvas_rows(maxima, found, canvas_ids(course))
    else:
        rows = nbgrader_rows(maxima, found) if fmt == "nbgrader" else wide_rows(maxima, found)
    written = write_rows(Path(path).resolve(), rows)
    left = "not a grade yet" if fmt == "nbgrader" else "left blank"
    notes = [
        f"{s.id}/{n}: {left}, {s.grades[n].why_blank}" for s in found for n in maxima if s.grades[n].why_blank
    ]
    return Exported(written, notes, left_out)
