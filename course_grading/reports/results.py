"""What grading produced: one result per (student, assignment), and the ways it is written
out (the score table, ``reports/grades.csv``, ``reports/flags.csv``), read back from the
gradebook and the autograded notebooks. Every text is written through ``reports_csv.clean``:
whatever a student put in a tag, a cell id or an exception, the reports are written."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from course_grading import untrusted
from course_grading.authoring import cells
from course_grading.authoring.nbformat_tools import read_untrusted
from course_grading.errors import short, strip_ansi
from course_grading.reports.reports_csv import clean, write_rows

if TYPE_CHECKING:
    from nbgrader.coursedir import CourseDirectory

GRADES_CSV = Path("reports") / "grades.csv"
FLAGS_CSV = Path("reports") / "flags.csv"
NO_ASSIGNMENT = "(not graded: no assignment)"
NEEDS_MANUAL = "needs manual grading"  # a written answer not graded by hand yet (not a 0)
NOT_ANSWERED = "not answered"  # a written answer left as released: nbgrader scores it 0


@dataclass
class ExerciseResult:
    """One grade cell of one submission."""

    grade_id: str
    score: float
    max_score: float
    message: str = ""  # first line of the failure, when the cell lost points
    manual: bool = False  # a written answer (nbgrader's manually graded answer cell)
    pending: bool = False  # a written answer that waits for the instructor: no score yet

    @property
    def passed(self) -> bool:
        return not self.pending and self.score >= self.max_score

    def shown(self) -> str:
        """The score as the table shows it: ``2/3``, or ``manual/2`` while it waits."""
        return f"manual/{self.max_score:g}" if self.pending else f"{self.score:g}/{self.max_score:g}"


@dataclass
class SubmissionResult:
    """One (student, assignment): its exercises, or ``error`` when grading itself broke."""

    student: str
    assignment: str
    exercises: list[ExerciseResult] = field(default_factory=list)
    error: str = ""
    flags: list = field(default_factory=list)  # scan.Flag: red flags and audit disagreements
    key: str = ""  # what was graded, by what, into which gradebook (ledger.submission_key)

    @property
    def score(self) -> float:
        return sum(e.score for e in self.exercises)

    @property
    def max_score(self) -> float:
        return sum(e.max_score for e in self.exercises)

    @property
    def pending_points(self) -> float:
        """The points of written answers that wait for manual grading (in no score yet)."""
        return sum(e.max_score for e in self.exercises if e.pending)

    def total(self) -> str:
        """``score/max``, with ``+N manual`` while written answers wait for the instructor."""
        pending = self.pending_points
        return f"{self.score:g}/{self.max_score:g}" + (f" +{pending:g} manual" if pending else "")


def manual_cells(notebook) -> set[str]:
    """The names of a gradebook notebook's (nbgrader's Notebook) written answers: cells that
    are both graded and a solution, which nbgrader leaves to the instructor."""
    return {c.name for c in notebook.grade_cells} & {c.name for c in notebook.solution_cells}


def awaits_manual(grade, manual: set[str]) -> bool:
    """Whether a gradebook grade is a written answer (a name in ``manual``) that waits for the
    instructor: neither nbgrader (an answer it found unanswered scores 0) nor the instructor
    gave it a score, or nbgrader put it back into the manual grading queue (a resubmitted
    answer: the score given by hand to the earlier text is no grade of this one)."""
    return grade.name in manual and waits_for_hand(grade)


def waits_for_hand(grade) -> bool:
    """``awaits_manual`` of a grade known to be a written answer."""
    return bool(grade.needs_manual_grade) or (grade.auto_score is None and grade.manual_score is None)


def uncomputed(submission) -> bool:
    """Whether a gradebook submission (nbgrader's SubmittedAssignment) has an autograded cell
    without any score: nbgrader created its rows but its autograding failed. nbgrader counts
    such a cell as 0; it is not a grade. A written answer waiting for the instructor is not
    uncomputed (``pending_points``)."""
    for nb in submission.notebooks:
        manual = manual_cells(nb.notebook)
        if any(
            g.auto_score is None and g.manual_score is None and not awaits_manual(g, manual)
            for g in nb.grades
        ):
            return True
    return False


def pending_points(submission) -> float:
    """The points of a gradebook submission's written answers that wait for the instructor
    (nbgrader counts them 0 until then)."""
    total = 0.0
    for nb in submission.notebooks:
        manual = manual_cells(nb.notebook)
        total += sum(float(g.max_score) for g in nb.grades if awaits_manual(g, manual))
    return total


def exercise_results(coursedir: CourseDirectory, student: str, assignment: str) -> list[ExerciseResult]:
    """Scores from the gradebook, in notebook order, with the autograded notebook's messages."""
    results = []
    from course_grading.course.nbgrader_setup import gradebook  # nbgrader: only to read a gradebook

    with gradebook(coursedir) as gb:
        for notebook in sorted(gb.find_assignment(assignment).notebooks, key=lambda n: n.name):
            path = Path(
                coursedir.format_path(coursedir.autograded_directory, student, assignment),
                f"{notebook.name}.ipynb",
            )
            order, messages = _failure_messages(path, untrusted.NotebookBounds.from_config(coursedir.config))
            submitted = gb.find_submission_notebook(notebook.name, assignment, student)
            grades = {g.name: g for g in submitted.grades}
            comments = {c.name: c.comment for c in submitted.comments}
            manual = manual_cells(notebook)
            known = [name for name in dict.fromkeys(order) if name in grades]  # cells nbgrader graded
            for name in known + sorted(set(grades) - set(known)):
                results.append(
                    _exercise(grades[name], name in manual, messages.get(name), comments.get(name))
                )
    return results


def _exercise(grade, manual: bool, failure: str | None, comment: str | None = None) -> ExerciseResult:
    """One gradebook grade as an ExerciseResult: a written answer waits (pending, no score),
    was left unanswered (0, "not answered"), or has the instructor's score and comment (its
    first line, where the answer lost points)."""
    if manual and waits_for_hand(grade):
        return ExerciseResult(
            grade.name, 0.0, float(grade.max_score), NEEDS_MANUAL, manual=True, pending=True
        )
    score = float(grade.score or 0)
    if manual:
        comment = clean(short(next(iter((comment or "").strip().splitlines()), "")))
        message = (
            NOT_ANSWERED
            if grade.manual_score is None
            else ""
            if score >= grade.max_score
            else comment or "graded by hand"
        )
        return ExerciseResult(grade.name, score, float(grade.max_score), message, manual=True)
    message = (
        "" if score >= grade.max_score else (failure or (NEEDS_MANUAL if grade.needs_manual_grade else ""))
    )
    return ExerciseResult(grade.name, score, float(grade.max_score), message)


def _failure_messages(
    path: Path, bounds: untrusted.NotebookBounds = untrusted.NOTEBOOK_BOUNDS
) -> tuple[list[str], dict[str, str]]:
    """Grade cell ids of an autograded notebook in order, and each one's first error line
    (the notebook read as untrusted: within the notebook bounds before it is parsed)."""
    try:
        nb = read_untrusted(path, bounds=bounds)
    except (OSError, ValueError):  # missing, unreadable, beyond a bound: scores come from the gradebook
        return [], {}
    order, messages = [], {}
    for cell in nb.cells:
        meta = cells.meta(cell)
        if cells.is_grade(cell) and isinstance(meta.get("grade_id"), str):
            order.append(meta["grade_id"])
            messages[meta["grade_id"]] = _cell_failure(cell)
    return order, messages


def _cell_failure(cell) -> str:
    """First line of a cell's error output, else of its stderr (nbgrader scores both 0), as
    ``reports_csv.clean`` writes it."""
    outputs = [o for o in cell.get("outputs") or [] if isinstance(o, dict)]
    for output in outputs:
        if output.get("output_type") == "error":
            text = f"{output.get('ename', '')}: {output.get('evalue', '')}".strip(": ")
            return clean(short(text.splitlines()[0])) if text.strip() else "error"
    for output in outputs:
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            first = next(
                (ln for ln in strip_ansi(cells.text(output.get("text", ""))).splitlines() if ln.strip()), ""
            )
            return clean(short("stderr: " + first))
    return ""


def write_csv(results: list[SubmissionResult], path) -> Path:
    """One row per (student, assignment, exercise); a broken submission gets one error row."""
    rows = [["student", "assignment", "exercise", "score", "max_score", "message"]]
    for r in results:
        if r.error:
            rows.append([r.student, r.assignment, "", "", "", f"grading failed: {r.error}"])
        flagged = _flagged(r)
        for e in r.exercises:  # a written answer waiting for the instructor has no score yet
            message = " | ".join(m for m in (flagged.get(e.grade_id, ""), e.message) if m)
            rows.append(
                [
                    r.student,
                    r.assignment,
                    e.grade_id,
                    "" if e.pending else f"{e.score:g}",
                    f"{e.max_score:g}",
                    message,
                ]
            )
    return write_rows(path, rows)


FLAGGED = "!"  # beside a score in the table: the exercise is flagged


def _flagged(result: SubmissionResult) -> dict[str, str]:
    """{grade_id: "flagged: REASON; ..."} for the exercises of ``result`` that a flag names."""
    found: dict[str, list[str]] = {}
    for flag in result.flags:
        found.setdefault(str(flag.where), []).append(flag.reason)
    return {
        e.grade_id: "flagged: " + "; ".join(found[e.grade_id])
        for e in result.exercises
        if e.grade_id in found
    }


def format_table(results: list[SubmissionResult]) -> str:
    """A plain-text table per assignment: one row per student, one column per exercise (every
    text through ``reports_csv.clean``). Submissions of no assignment (a student folder whose
    name is not a valid id) come last, under NO_ASSIGNMENT."""
    blocks = []
    for assignment in sorted({r.assignment for r in results}, key=lambda a: (not a, a)):
        rows = [r for r in results if r.assignment == assignment]
        exercises = list(dict.fromkeys(e.grade_id for r in rows for e in r.exercises))
        table = [["student", *map(clean, exercises), "total"]]
        for r in rows:
            if r.error:
                table.append([clean(r.student), f"ERROR: {clean(r.error)}"])
                continue
            flagged = _flagged(r)
            scores = {
                e.grade_id: e.shown() + (f" {FLAGGED}" if e.grade_id in flagged else "") for e in r.exercises
            }
            table.append([clean(r.student), *(scores.get(x, "-") for x in exercises), r.total()])
        blocks.append(f"{clean(assignment) or NO_ASSIGNMENT}\n{_columns(table)}")
    if any(_flagged(r) for r in results):
        blocks.append(
            f"{FLAGGED}: flagged (the FLAG lines, reports/flags.csv): a reason to look; the score is "
            "as graded"
        )
    if any(e.pending for r in results for e in r.exercises):
        blocks.append(
            "manual: a written answer that needs manual grading (the Formgrader's "
            '"Manual Grading"); its points are in no total until then'
        )
    return "\n\n".join(blocks)


def _columns(table: list[list[str]]) -> str:
    """Left-aligned columns; a short row (an error) runs on from its first column."""
    full = [row for row in table if len(row) == len(table[0])]
    widths = [max(len(row[i]) for row in full) for i in range(len(table[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table)


def format_flags(results: list[SubmissionResult]) -> str:
    """One line per flag (student, assignment, where, why); '' when nothing was flagged."""
    return "\n".join(
        f"FLAG {clean(r.student)}/{clean(r.assignment)} {clean(flag)}" for r in results for flag in r.flags
    )


def write_flags_csv(results: list[SubmissionResult], path) -> Path:
    """The flags for the instructor: student, assignment, cell (grade_id), reason."""
    rows = [["student", "assignment", "cell", "reason"]]
    rows += [[r.student, r.assignment, flag.where, flag.reason] for r in results for flag in r.flags]
    return write_rows(path, rows)
