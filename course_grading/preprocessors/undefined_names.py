"""``ExplainUndefinedNames``: a test that fails with "name 'softmax' is not defined" because the
student's cell defining ``softmax`` raised says which cell, and what it raised.

A syntax error, or any error, in the cell that defines an exercise leaves the name undefined;
every test of it then fails with a NameError that points away from the mistake (the student sees
"softmax is not defined" under a cell that plainly defines it). After the notebook has run, each
such NameError of a grade cell gets, in its message, the cell that defines the name and raised,
with that error's first line: what ``grades.csv``, the class report and feedback show. A name
defined again later by a cell that ran cleanly is not explained by an earlier failure.
Listed after ``RequireSetup`` in ``Autograde.autograde_preprocessors``.
"""

from __future__ import annotations

import re

from nbgrader.preprocessors import NbGraderPreprocessor

from course_grading.authoring.cells import is_code, is_grade, text

UNDEFINED = re.compile(r"name '([A-Za-z_]\w*)' is not defined")
DEFINES = re.compile(r"^(?:async\s+def|def|class)\s+([A-Za-z_]\w*)|^([A-Za-z_]\w*)\s*(?::[^=]*)?=(?!=)", re.M)
MAX_SHOWN = 200  # characters of the defining cell's error


class ExplainUndefinedNames(NbGraderPreprocessor):
    """Each grade cell's NameError for a name whose defining cell raised says so."""

    def preprocess(self, nb, resources):
        failed: dict[str, str] = {}  # name -> what its latest defining cell raised, said
        for number, cell in enumerate(nb.cells, start=1):
            if not is_code(cell):
                continue
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            if is_grade(cell):
                for error in errors:
                    found = UNDEFINED.fullmatch(str(error.get("evalue", "")))
                    if error.get("ename") == "NameError" and found and found.group(1) in failed:
                        error["evalue"] = f"{error['evalue']} ({failed[found.group(1)]})"
            defined = {a or b for a, b in DEFINES.findall(text(cell.get("source", "")))}
            for name in defined:
                if errors:
                    first = f"{errors[0].get('ename', '')}: {errors[0].get('evalue', '')}".strip(": ")
                    shown = first.splitlines()[0][:MAX_SHOWN] if first else "an error"
                    failed[name] = f"cell {number}, which defines it, raised {shown}"
                else:
                    failed.pop(name, None)
        return nb, resources
