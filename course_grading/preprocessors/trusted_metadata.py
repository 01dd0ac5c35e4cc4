"""``TrustedMetadata``: a submission's nbgrader metadata is the assignment's, never the student's.

nbgrader reads a submitted cell's ``metadata.nbgrader`` as it comes: a ``points`` that is a
string, a list or missing, a ``grade_id`` that is a list, nbgrader metadata that is a list, a
``schema_version`` that is text, a second cell with a grade id already taken, a cell that claims
to be graded under an id the assignment does not have (or under none) each stopped nbgrader's
own steps (``OverwriteCells``, ``DeduplicateIds``, ``CheckCellMetadata``) with an exception, and
the submission became an error row: a student could turn their 0 into "not graded" with one
edited field. Right after ``RefuseLinks``, before nbgrader's steps read any of it, this makes
every cell's nbgrader metadata what the gradebook (the instructor's source) says:

* a cell whose ``grade_id`` is a grade id of this notebook in the gradebook, seen for the first
  time, gets the gradebook's metadata for it (grade, solution, locked, task, points), whatever it
  held; nbgrader's ``OverwriteCells`` then restores a locked cell's source and type as always;
* any other nbgrader metadata (not a mapping, no grade id, an id that is not text, unknown, or
  taken by an earlier cell) is removed: the cell is an ordinary cell of the student's, and runs
  as one;
* cell metadata that is not a mapping becomes an empty one.

Nothing here changes what the red-flag scanner reads: it scans the submitted file, where every
such edit is flagged ("nbgrader metadata edited", "not in the assignment", "duplicated").
"""

from __future__ import annotations

from nbformat import NotebookNode
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.preprocessors import NbGraderPreprocessor

SCHEMA_VERSION = 3


class TrustedMetadata(NbGraderPreprocessor):
    """Every cell's nbgrader metadata from the gradebook, or none (see the module)."""

    def preprocess(self, nb, resources):
        known = _known_cells(
            resources["nbgrader"]["db_url"],
            resources["nbgrader"]["notebook"],
            resources["nbgrader"]["assignment"],
        )
        seen: set[str] = set()
        for cell in nb.cells:
            if not isinstance(cell.get("metadata"), dict):
                cell["metadata"] = NotebookNode()
            metadata = cell["metadata"]
            if "nbgrader" not in metadata:
                continue
            grading = metadata["nbgrader"]
            grade_id = grading.get("grade_id") if isinstance(grading, dict) else None
            if isinstance(grade_id, str) and grade_id in known and grade_id not in seen:
                seen.add(grade_id)
                metadata["nbgrader"] = NotebookNode(known[grade_id])
            else:
                del metadata["nbgrader"]
        return nb, resources


def _known_cells(db_url: str, notebook: str, assignment: str) -> dict[str, dict]:
    """{grade id: the nbgrader metadata the gradebook gives it} of one notebook of an
    assignment (nothing when the gradebook does not know the notebook: nbgrader says so)."""
    with Gradebook(db_url) as gb:
        try:
            nb = gb.find_notebook(notebook, assignment)
        except MissingEntry:
            return {}
        graded = {c.name: c for c in nb.grade_cells}
        solutions = {c.name for c in nb.solution_cells}
        tasks = {c.name: c for c in nb.task_cells}
        found = {}
        for source in nb.source_cells:
            name = source.name
            points = (
                graded[name].max_score if name in graded else tasks[name].max_score if name in tasks else None
            )
            meta = {
                "grade": name in graded,
                "grade_id": name,
                "locked": bool(source.locked),
                "schema_version": SCHEMA_VERSION,
                "solution": name in solutions,
                "task": name in tasks,
            }
            if points is not None:
                meta["points"] = float(points)
            found[name] = meta
        return found
