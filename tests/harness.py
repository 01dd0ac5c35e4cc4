"""Run a solution notebook's grade cells in-process, with some functions swapped out.

This is how the tests prove that the graders catch mistakes, in milliseconds instead of a full
nbgrader round trip: execute the notebook's setup cell and its solution cells, replace one
solution with a buggy (or alternative) implementation, then execute the grade cell, hidden
tests included, exactly as nbgrader would. A grade cell "passes" the way nbgrader scores it:
no exception and nothing written to stderr.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import traceback
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class Outcome:
    passed: bool
    message: str  # the exception line, or the stderr text, when it failed


@lru_cache(maxsize=None)
def cells(assignment: str) -> dict:
    """The solution notebook's setup, solution and grade cells, by role."""
    path = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    nb = json.loads(path.read_text())
    setup, solutions, grades = [], {}, {}
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        src = "".join(cell["source"])
        if meta.get("grade"):
            grades[meta["grade_id"]] = src
        elif meta.get("solution"):
            solutions[meta["grade_id"]] = src
        elif meta.get("locked") and meta.get("grade_id", "").startswith("setup"):
            setup.append(src)
    return {"setup": setup, "solutions": solutions, "grades": grades}


def run_grade_cell(
    assignment: str, grade_id: str, replacement: str | None = None, visible_only: bool = False
) -> Outcome:
    """Execute setup + solutions (+ ``replacement`` source) and then grade cell ``grade_id``
    (with ``visible_only``, its visible part alone: what the learner's own run checks). A
    visible-only outcome is kept for the session: several tests ask for the same ones."""
    key = (assignment, grade_id, replacement)
    if visible_only and key in _VISIBLE:
        return _VISIBLE[key]
    outcome = _run_grade_cell(assignment, grade_id, replacement, visible_only)
    if visible_only:
        _VISIBLE[key] = outcome
    return outcome


_VISIBLE: dict = {}


def _run_grade_cell(assignment: str, grade_id: str, replacement: str | None, visible_only: bool) -> Outcome:
    c = cells(assignment)
    if grade_id not in c["grades"]:
        raise KeyError(f"{assignment} has no grade cell {grade_id!r}; it has {sorted(c['grades'])}")
    grade = c["grades"][grade_id]
    if visible_only:
        grade = grade.split("### BEGIN HIDDEN TESTS")[0]
    ns: dict = {"__name__": "__main__"}
    use_building_blocks(assignment)
    for src in c["setup"] + list(c["solutions"].values()):
        exec(compile(src, f"<{assignment}>", "exec"), ns)
    if replacement is not None:
        exec(compile(replacement, "<variant>", "exec"), ns)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            exec(compile(grade, f"<{grade_id}>", "exec"), ns)
    except BaseException as exc:  # noqa: BLE001 - a grade cell may raise anything
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        return Outcome(False, last)
    if err.getvalue():
        return Outcome(False, "stderr: " + err.getvalue().strip()[:300])
    return Outcome(True, "")


VARIANTS = Path(__file__).parent / "variants"


def use_building_blocks(assignment: str) -> None:
    """Make ``import building_blocks`` find this assignment's (as a kernel started beside the
    notebook would), not another assignment's already imported one."""
    import sys

    folder = str(ROOT / "solutions" / assignment)
    sys.modules.pop("building_blocks", None)
    sys.path[:] = [p for p in sys.path if not p.startswith(str(ROOT / "solutions"))] + [folder]


def load_variants(path: Path):
    """The module tests/variants/<assignment>.py (BUGGY and CORRECT: {grade_id: {name: source}})."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def variants(kind: str):
    """(assignment, grade_id, name, source) of every ``kind`` ("BUGGY" or "CORRECT") variant."""
    for path in sorted(VARIANTS.glob("[0-9]*.py")):
        for grade_id, found in getattr(load_variants(path), kind).items():
            for name, source in found.items():
                yield path.stem, grade_id, name, source


def solution_with(tmp_path: Path, assignment: str, **sources) -> Path:
    """A copy of ``assignment``'s solution notebook in ``tmp_path`` whose cells with the grade
    ids named get the sources given (``softmax="def softmax(x, dim=-1): ..."``)."""
    import nbformat

    nb = nbformat.read(str(ROOT / "solutions" / assignment / f"{assignment}.ipynb"), 4)
    for cell in nb.cells:
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        if gid in sources:
            cell.source = sources[gid]
    path = tmp_path / f"{assignment}.ipynb"
    nbformat.write(nb, str(path))
    return path
