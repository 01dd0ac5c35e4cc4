"""Hand grading that survives a regrade.

nbgrader's autograde (``SaveAutoGrades``) marks every written answer that has a manual score
as "needs manual grade" again, however unchanged the answer: a regrade of one student, or of
the whole class after a test is fixed, put every hand-graded answer back into the
Formgrader's *Manual Grading* queue, and the queue could no longer tell the teaching
assistants what is left. The scores and comments are kept; only the flag is wrong.

``answers`` reads, before the regrade, what each written answer of the last autograded
notebooks held (a hash of its source, per notebook and cell); ``keep_graded`` then clears the
flag of each answer that has a score given by hand and the same source after the regrade. An
answer whose text changed (a resubmission) stays in the queue, as nbgrader puts it there.
The autograded notebooks are read as untrusted (within the notebook bounds), like every
notebook a student wrote.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from course_grading import untrusted
from course_grading.authoring import cells
from course_grading.authoring.nbformat_tools import read_untrusted
from course_grading.course.nbgrader_setup import gradebook
from course_grading.reports.results import manual_cells


def answers(coursedir, student: str, assignment: str) -> dict[tuple[str, str], str]:
    """{(notebook, grade id): hash of the answer's source} of the written answers in
    ``autograded/<student>/<assignment>/`` as it is now ({} where there is none)."""
    folder = Path(coursedir.format_path(coursedir.autograded_directory, student, assignment))
    bounds = untrusted.NotebookBounds.from_config(coursedir.config)
    found = {}
    for path in sorted(folder.glob("*.ipynb")) if folder.is_dir() else []:
        try:
            nb = read_untrusted(path, bounds=bounds)
        except (OSError, ValueError):  # unreadable: nothing is known to be unchanged
            continue
        for cell in nb.cells:
            meta = cells.meta(cell)  # a written answer: a graded solution cell (markdown, mostly)
            grade_id = meta.get("grade_id")
            if meta.get("solution") and meta.get("grade") and isinstance(grade_id, str):
                source = cells.text(cell.get("source", ""))
                found[(path.stem, grade_id)] = hashlib.sha256(
                    source.encode("utf-8", "surrogatepass")
                ).hexdigest()
    return found


def keep_graded(coursedir, student: str, assignment: str, before: dict[tuple[str, str], str]) -> list[str]:
    """Take out of the manual grading queue each written answer of the regraded submission
    that was scored by hand and whose source is what it was ``before``; return their names."""
    if not before:
        return []
    after = answers(coursedir, student, assignment)
    kept = []
    with gradebook(coursedir) as gb:
        submission = gb.find_submission(assignment, student)
        for nb in submission.notebooks:
            manual = manual_cells(nb.notebook)
            for grade in nb.grades:
                key = (nb.name, grade.name)
                if (
                    grade.name in manual
                    and grade.manual_score is not None
                    and grade.needs_manual_grade
                    and key in after
                    and before.get(key) == after[key]
                ):
                    grade.needs_manual_grade = False
                    kept.append(grade.name)
        if kept:
            gb.db.commit()
    return kept
