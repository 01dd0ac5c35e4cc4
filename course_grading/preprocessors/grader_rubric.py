"""``GraderRubric``: the model answer and the rubric beside each written answer, where the
grader scores it (the Formgrader's *Manual Grading* view of a submission).

The Formgrader renders ``autograded/<student>/<assignment>/<notebook>.ipynb`` with an
``HTMLExporter`` built from the course's configuration (``c.HTMLExporter.preprocessors``), and
passes it the submission's ids in ``resources`` (``submission_id``, ``assignment_id``,
``notebook_id``, ``notebook_path``). On that page only, this preprocessor puts after each
written answer (a graded solution cell) a markdown cell holding that answer cell of the
instructor's source notebook (``solutions/<assignment>/<notebook>.ipynb``: "**Model
answer.** … **Rubric (2 points).** …"), headed "For the grader". Nothing is written to any
file, and every other rendering (feedback, which ``GenerateFeedback`` renders with the same
exporter settings but without those ids) is left as it is: a student never sees it. The cell
is the course's own text; ``SanitizeNotebook``, after it, renders it like any markdown.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbconvert.preprocessors import Preprocessor
from nbgrader.coursedir import CourseDirectory

from course_grading.authoring.cells import meta, text

FORMGRADER_RESOURCES = ("submission_id", "assignment_id", "notebook_id", "notebook_path")
HEADING = "**For the grader** (the source notebook's answer cell; students never see this):"
RUBRIC_TAG = "grader-rubric"


def written_answers(nb) -> dict[str, str]:
    """{grade id: source} of a notebook's written answers (graded solution cells)."""
    found = {}
    for cell in nb.cells:
        m = meta(cell)
        if m.get("solution") and m.get("grade") and isinstance(m.get("grade_id"), str):
            found[m["grade_id"]] = text(cell.get("source"))
    return found


class GraderRubric(Preprocessor):
    """Insert the source's model answer and rubric after each written answer, on the
    Formgrader's submission page only (see the module's docstring)."""

    def preprocess(self, nb, resources):
        if not all(key in (resources or {}) for key in FORMGRADER_RESOURCES):
            return nb, resources
        rubrics = self._rubrics(str(resources["assignment_id"]), str(resources["notebook_id"]))
        if not rubrics:
            return nb, resources
        cells = []
        for cell in nb.cells:
            cells.append(cell)
            m = meta(cell)
            if m.get("solution") and m.get("grade") and m.get("grade_id") in rubrics:
                cells.append(
                    nbformat.v4.new_markdown_cell(
                        f"{HEADING}\n\n{rubrics[m['grade_id']]}", metadata={"tags": [RUBRIC_TAG]}
                    )
                )
        nb.cells = cells
        return nb, resources

    def _rubrics(self, assignment: str, notebook: str) -> dict[str, str]:
        """The written answers of the instructor's source notebook ({} where there is none)."""
        coursedir = CourseDirectory(config=self.config)
        path = Path(coursedir.format_path(coursedir.source_directory, ".", assignment), f"{notebook}.ipynb")
        try:
            return written_answers(nbformat.read(path, as_version=4))
        except (OSError, ValueError):
            return {}
