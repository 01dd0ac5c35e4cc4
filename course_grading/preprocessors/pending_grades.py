"""``PendingGrades``: nbgrader's GetGrades for feedback, saying which scores are not grades yet.

A written answer that waits for grading by hand (``needs_manual_grade`` in the gradebook: never
graded, or its text changed since) has a score of 0 there, and nbgrader's feedback page shows
"Score: 0.0 / 2.0" as if it were the grade. This step puts a comment on each such answer that
says so, before any earlier comment (which may be about a previous text of the answer).
"""

from __future__ import annotations

from nbgrader.preprocessors import GetGrades

NOT_YET = (
    "Not graded yet: this answer waits to be graded by hand, so the score shown for it "
    "({points:g} points) is not its grade."
)


class PendingGrades(GetGrades):
    """GetGrades, with a comment on every answer whose grade waits for grading by hand."""

    def _get_score(self, cell, resources) -> None:
        """GetGrades's own (the score and points from the gradebook), and the comment."""
        grade = self.gradebook.find_grade(
            cell.metadata["nbgrader"]["grade_id"], self.notebook_id, self.assignment_id, self.student_id
        )
        cell.metadata.nbgrader["score"], cell.metadata.nbgrader["points"] = grade.score, grade.max_score
        if grade.needs_manual_grade:
            said = NOT_YET.format(points=grade.max_score or 0)
            earlier = cell.metadata.nbgrader.get("comment")
            cell.metadata.nbgrader["comment"] = f"{said}\n\nEarlier comment: {earlier}" if earlier else said
