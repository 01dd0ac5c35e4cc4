"""What the gradebook holds around a grading run: the assignments and students recorded before
it (``prepare_gradebook``, one recorder at a time on a shared PostgreSQL gradebook), and which
results of an earlier run still stand and need no grading again (``already_graded``).
"""

from __future__ import annotations

import contextlib
import hashlib
import tempfile
import time
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry
from nbgrader.coursedir import CourseDirectory
from sqlalchemy.exc import SQLAlchemyError

from course_grading import untrusted
from course_grading.course.nbgrader_setup import GradingRun, generate, gradebook
from course_grading.errors import GradingError, retriable
from course_grading.grading import ledger, staging
from course_grading.reports.results import SubmissionResult, uncomputed

LOCK_RETRIES = 5


def already_graded(run: GradingRun, tasks: list[tuple]) -> tuple[list[SubmissionResult], list[tuple]]:
    """The recorded results of an earlier run that still stand for ``tasks``, and the tasks
    left to grade. A record stands when its key is the key of the submission as it is now
    (staged again, as grading would stage it: ``ledger.submission_key``) and the gradebook
    holds the same computed scores and the autograded notebooks for it (``_still_recorded``).
    """
    coursedir = run.course_directory()
    submitted = Path(coursedir.submitted_directory)
    bounds = run.course.notebook_bounds
    candidates: dict[tuple[str, str], SubmissionResult] = {}
    for _, student, assignment, known in tasks:
        old = ledger.read(coursedir.root, student, assignment) if known else None
        if old is not None and old.key == _current_key(
            run, coursedir, submitted, student, assignment, bounds
        ):
            candidates[(student, assignment)] = old
    standing = _still_recorded(coursedir, candidates) if candidates else set()
    return (
        [candidates[pair] for pair in sorted(standing)],
        [task for task in tasks if (task[1], task[2]) not in standing],
    )


def _current_key(
    run: GradingRun,
    coursedir: CourseDirectory,
    submitted: Path,
    student: str,
    assignment: str,
    bounds: untrusted.NotebookBounds,
) -> str:
    """The key a grade of the submission would have now; '' when it would not be graded."""
    with tempfile.TemporaryDirectory(prefix="course-resume-") as stage:
        try:
            staging.stage(coursedir, submitted, student, assignment, Path(stage), bounds)
        except Exception:  # noqa: BLE001 - refused, unreadable: graded again (an error row)
            return ""
        return ledger.submission_key(
            run.graded, assignment, Path(stage) / student / assignment, coursedir.db_url, how(run)
        )


def how(run: GradingRun) -> str:
    """How a submission is graded, as far as its result depends on it: sandboxed or not (a
    grade computed unsandboxed is not one computed in the sandbox), audited or not (the flags)."""
    return f"sandbox={run.sandbox} audit={run.audit}"


def _still_recorded(coursedir: CourseDirectory, candidates: dict) -> set[tuple[str, str]]:
    """The (student, assignment) of ``candidates`` whose recorded scores the gradebook still
    holds, every cell with a computed score, and whose autograded notebooks are in place."""
    standing = set()
    with gradebook(coursedir) as gb:
        for (student, assignment), old in candidates.items():
            try:
                submission = gb.find_submission(assignment, student)
            except MissingEntry:
                continue
            if uncomputed(submission):
                continue
            held = {
                g.name: (float(g.score or 0), float(g.max_score))
                for nb in submission.notebooks
                for g in nb.grades
            }
            if held != {e.grade_id: (e.score, e.max_score) for e in old.exercises}:
                continue
            folder = Path(coursedir.format_path(coursedir.autograded_directory, student, assignment))
            if all((folder / f"{nb.name}.ipynb").is_file() for nb in submission.notebooks):
                standing.add((student, assignment))
    return standing


def prepare_gradebook(run: GradingRun, assignments: list[str], students: list[str]) -> None:
    """Record missing assignments (generated into a temporary folder) and the students.

    Another grader sharing the gradebook (PostgreSQL) may be recording the same rows at the
    same moment: a clash (a duplicate key) is retried, and the retry finds the rows there.
    """
    for attempt in range(LOCK_RETRIES):
        try:
            coursedir = run.course_directory()
            with _one_recorder_at_a_time(coursedir.db_url):
                with gradebook(coursedir) as gb:
                    missing = [a for a in assignments if not _has_notebooks(gb, a)]
                    for student in students:
                        if untrusted.plain_name(student):  # never an unsafe id (an error row)
                            gb.update_or_create_student(student)
                for assignment in missing:
                    with tempfile.TemporaryDirectory(prefix="course-generate-") as tmp:
                        generate(run.course, assignment, tmp, root=run.root, db_url=run.db_url)
            return
        except (SQLAlchemyError, GradingError) as exc:
            if attempt == LOCK_RETRIES - 1 or not retriable(exc):
                raise
            time.sleep(0.5 * (attempt + 1))


# a PostgreSQL advisory lock's key: "the course's assignments are being recorded"
RECORDING_LOCK = int.from_bytes(
    hashlib.sha256(b"attention-course: recording assignments").digest()[:8], "big", signed=True
)


@contextlib.contextmanager
def _one_recorder_at_a_time(db_url: str):
    """Graders sharing a PostgreSQL gradebook record missing assignments one at a time: two
    nbgrader generate_assignment runs of one assignment at once remove each other's notebook
    rows while the other grader is already grading against them. The lock is PostgreSQL's own
    (pg_advisory_lock, released when its connection closes, also if this grader dies).
    SQLite gradebooks are for one grader, whose own clashes are retried (``errors.retriable``)."""
    if not str(db_url).startswith("postgresql"):
        yield
        return
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": RECORDING_LOCK})
            try:
                yield
            finally:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": RECORDING_LOCK})
    finally:
        engine.dispose()


def _has_notebooks(gb: Gradebook, assignment: str) -> bool:
    try:
        return len(gb.find_assignment(assignment).notebooks) > 0
    except MissingEntry:
        return False
