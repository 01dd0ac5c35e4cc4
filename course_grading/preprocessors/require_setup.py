"""``RequireSetup``: a submission whose setup cell failed through no fault of its own has no
grade at all; one that broke the setup cell itself is graded as it is.

The setup cell (``cells.is_setup``) is the course's own, locked and restored from the gradebook:
it imports the checks every test cell calls. When it fails, every test cell fails with a
NameError and every student would score 0. Whose failure is it?

* **The course's or the machine's** (an import ran past the time limit on a loaded machine, a
  broken installation): the instructor's own solution would score 0 too, so no score of this
  submission can be known. This raises ``SetupCellFailed``: nbgrader then reports the
  submission as failed, writes no autograded notebook and records no score (its gradebook rows
  keep no score at all: ``results.uncomputed``), and ``course autograde`` shows an error row
  with the reason.
* **The student's**: a cell the student put before the setup cell ran first and broke it (it
  defined something the setup trips over, used up the memory, ...). The notebook is graded as
  it is (0 where its tests fail), the setup cell's output says why, and the red-flag scanner
  flags the cell that runs before the setup cell.

To tell them apart, a failed setup cell that did not run first is run again, untouched and
alone, in a fresh kernel started as grading starts it (sandboxed when grading is, in the
submission's folder). If it succeeds there, the failure was the student's; if it fails there
too, it is the course's. A setup cell that ran first already ran that way: its failure is the
course's without a second run. The second run costs a kernel start, and happens only when the
setup cell failed. Listed right after the Execute preprocessor in
``Autograde.autograde_preprocessors``.
"""

from __future__ import annotations

import copy

from nbformat.v4 import new_notebook, new_output
from nbgrader.preprocessors import NbGraderPreprocessor

from course_grading.authoring.cells import grade_id, is_code, is_setup, text

STUDENTS_FAULT = (
    "[course: the setup cell failed because of the cells that ran before it (it "
    "runs without error on its own): graded as it is]\n"
)


class SetupCellFailed(Exception):
    """The course's setup cell raised: no score of this submission can be known."""


def _error(cell) -> str | None:
    """'EName: value' of the first error output of ``cell`` (None when it has none)."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            what = f"{output.get('ename', '')}: {output.get('evalue', '')}".strip(": ")
            return what.splitlines()[0][:300] if what else "an error"
    return None


class RequireSetup(NbGraderPreprocessor):
    """Raise SetupCellFailed when a setup cell of the executed notebook holds an error that
    is not the student's doing (see the module docstring)."""

    def preprocess(self, nb, resources):
        for index, cell in enumerate(nb.cells):
            if not is_setup(cell):
                continue
            what = _error(cell)
            if what is None:
                continue
            failure = f"the setup cell {grade_id(cell)!r} failed ({what})"
            if not any(is_code(c) and text(c.get("source")).strip() for c in nb.cells[:index]):
                raise SetupCellFailed(f"{failure}: no score can be computed")
            alone = self.run_alone(nb, cell, resources)
            if alone is not None:
                raise SetupCellFailed(
                    f"{failure}, and fails on its own too ({alone}): no score can be computed"
                )
            cell.setdefault("outputs", []).append(new_output("stream", name="stdout", text=STUDENTS_FAULT))
        return nb, resources

    def run_alone(self, nb, cell, resources) -> str | None:
        """Run the setup cell untouched and alone in a fresh kernel, as grading runs cells:
        None when it succeeds, else what went wrong."""
        from .limited_execute import LimitedExecute

        pristine = copy.deepcopy(cell)
        pristine["outputs"], pristine["execution_count"] = [], None
        alone = new_notebook(cells=[pristine], metadata=copy.deepcopy(nb.get("metadata", {})))
        try:
            LimitedExecute(config=self.config, log=self.log).preprocess(alone, copy.deepcopy(resources))
        except Exception as exc:  # noqa: BLE001 - a kernel that cannot run it says the same
            return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}".strip(": ")
        return _error(alone.cells[0])
