"""``course feedback``: HTML feedback for students (hidden tests, what ran while they ran, and
the hidden lines quoted in tracebacks removed). The grades as CSV: ``grade_exports``.

Feedback is generated from a copy of each ``autograded/<student>/<assignment>/`` that follows no
link (``untrusted.copy_tree``): a folder or notebook that is a link gets no feedback, and a
file that is one is left out, each said in ``FeedbackIncomplete``; the other students' feedback
is generated all the same.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from nbgrader.converters import GenerateFeedback

from course_grading import untrusted
from course_grading.course.course import Course
from course_grading.course.course_dir import find_submissions
from course_grading.course.nbgrader_setup import LOG, course_directory, gradebook, run_converter
from course_grading.errors import GradingError
from course_grading.grading import ledger
from course_grading.preprocessors import FEEDBACK_LAST, FEEDBACK_PREPROCESSORS, PendingGrades
from course_grading.reports.results import pending_points


class FeedbackIncomplete(GradingError):
    """Some submissions got no feedback (or got it without some files): ``problems`` says
    which and why, one line each; ``pages`` are the HTML files that were written."""

    def __init__(self, problems: list[str], pages: list[Path]):
        self.problems, self.pages = problems, pages
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{problems[0]}{more}")


def feedback(course, assignments=None, students=None, db_url=None) -> list[Path]:
    """nbgrader generate_feedback for the autograded submissions; returns the HTML files.

    Raises FeedbackIncomplete, after every other submission got its feedback, when some
    submission could not have it (or lost files on the way)."""
    course = Course.of(course)
    where = course.folders
    autograded = where.autograded
    pairs = find_submissions(autograded, students, assignments)
    if not pairs:
        raise GradingError(f"nothing autograded under {autograded}: run `course autograde` first")
    with gradebook(course_directory(course, db_url=db_url)):
        pass  # a gradebook that cannot be opened stops here, with one line
    problems: list[str] = []
    for student, assignment in pairs:
        failed = ledger.failure(course.root, student, assignment)
        if failed:  # autograded/ still holds the submission before: its feedback would be stale
            problems.append(
                f"no feedback for {student}/{assignment}: its last grading failed "
                f"({failed.splitlines()[0][:200]}); `course autograde` it again"
            )
            continue
        coursedir = course_directory(course, db_url=db_url, student_id=student, assignment_id=assignment)
        with tempfile.TemporaryDirectory(prefix="course-feedback-") as stage:
            try:
                left = _stage(autograded, student, assignment, Path(stage), course.notebook_bounds)
            except untrusted.UntrustedFileError as exc:
                problems.append(f"no feedback for {student}/{assignment}: autograded/{exc}")
                continue
            notebooks = [item for item in left if item.path.endswith(".ipynb") and "/" not in item.path]
            problems += [
                f"no feedback for {student}/{assignment}/{item.shown}: {item.reason}" for item in notebooks
            ]
            if notebooks:  # none of it through a link: this student gets no feedback
                continue
            problems += [
                f"feedback for {student}/{assignment} without {item.shown}: {item.reason}" for item in left
            ]
            coursedir.autograded_directory = stage
            converter = GenerateFeedback(coursedir=coursedir, config=coursedir.config, log=LOG)
            converter.preprocessors = feedback_preprocessors(converter.preprocessors)
            converter.force = True
            try:
                run_converter(converter)
            except GradingError as exc:
                problems.append(f"no feedback for {student}/{assignment}: {exc}")
    pages = sorted(
        p for student, assignment in pairs for p in (where.feedback / student / assignment).glob("*.html")
    )
    if problems:
        raise FeedbackIncomplete(problems, pages)
    return pages


def awaiting_manual(course, assignments=None, students=None, db_url=None) -> list[str]:
    """One line per gradebook submission whose written answers wait for manual grading: its
    feedback shows them as nbgrader scores them until they are graded (0, or a resubmitted
    answer's old score; then run ``course feedback`` again)."""
    coursedir = course_directory(course, db_url=db_url)
    lines = []
    with gradebook(coursedir) as gb:
        for assignment in gb.assignments:
            if assignments and assignment.name not in assignments:
                continue
            for submission in assignment.submissions:
                if students and submission.student.id not in students:
                    continue
                pending = pending_points(submission)
                if pending:
                    lines.append(
                        f"{submission.student.id}/{assignment.name}: {pending:g} points of written "
                        "answers not graded by hand yet (its feedback says so beside each)"
                    )
    return sorted(lines)


def feedback_preprocessors(configured: list) -> list:
    """``configured`` (nbgrader_config.py's GenerateFeedback.preprocessors, classes or dotted
    names) with the course's feedback filters first where it does not list them, nbgrader's
    GetGrades replaced by ``PendingGrades``, and the course's style (long lines wrap) last."""
    from nbgrader.preprocessors import GetGrades
    from traitlets.utils.importstring import import_item

    classes = [import_item(p) if isinstance(p, str) else p for p in configured]
    return [
        *(p for p in FEEDBACK_PREPROCESSORS if p not in classes),
        *(PendingGrades if p is GetGrades else p for p in classes),
        *(p for p in FEEDBACK_LAST if p not in classes),
    ]


def _stage(
    autograded: Path,
    student: str,
    assignment: str,
    stage: Path,
    bounds: untrusted.NotebookBounds = untrusted.NOTEBOOK_BOUNDS,
) -> list[untrusted.LeftOut]:
    """Copy ``autograded/<student>/<assignment>/`` to ``stage/<student>/<assignment>/``,
    following no link; what was left out (UntrustedFileError when a folder is a link)."""
    base = untrusted.open_folder(autograded)
    try:
        student_fd = untrusted.open_folder(student, dir_fd=base, label=student)
        try:
            return untrusted.copy_tree(
                assignment,
                stage / student / assignment,
                dir_fd=student_fd,
                label=f"{student}/{assignment}",
                notebook_bounds=bounds,
            )
        finally:
            os.close(student_fd)
    finally:
        os.close(base)
