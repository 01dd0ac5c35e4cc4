"""``RequireSetup``: a submission whose setup cell failed has no grade at all.

The setup cell (``cells.is_setup``) is the course's own, locked and restored from the gradebook:
it imports the checks every test cell calls. When it fails (an import ran past the time limit
on a loaded machine, a broken installation), every test cell fails with a NameError and every
student, the instructor's own solution included, would score 0. Listed right after the Execute
preprocessor in ``Autograde.autograde_preprocessors``, this raises ``SetupCellFailed`` instead:
nbgrader then reports the submission as failed, writes no autograded notebook and records no
score (its gradebook rows keep no score at all: ``results.uncomputed``), and ``course
autograde`` shows an error row with the reason.
"""
from __future__ import annotations

from nbgrader.preprocessors import NbGraderPreprocessor

from ..cells import grade_id, is_setup


class SetupCellFailed(Exception):
    """The course's setup cell raised: no score of this submission can be known."""


class RequireSetup(NbGraderPreprocessor):
    """Raise SetupCellFailed when a setup cell of the executed notebook holds an error."""

    def preprocess(self, nb, resources):
        for cell in nb.cells:
            if not is_setup(cell):
                continue
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    what = f"{output.get('ename', '')}: {output.get('evalue', '')}".strip(": ")
                    first = what.splitlines()[0][:300] if what else "an error"
                    raise SetupCellFailed(f"the setup cell {grade_id(cell)!r} failed ({first}): "
                                          "no score can be computed")
        return nb, resources
