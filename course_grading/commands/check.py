"""``course check``: one learner's notebook graded against the full hidden tests, exactly as
the instructor's autograder would, in a throw-away course directory (the course's gradebook
and folders are never touched)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import nbformat

from course_grading import untrusted
from course_grading.authoring.nbformat_tools import read_notebook
from course_grading.course.course import Course
from course_grading.course.nbgrader_setup import GradingRun, generate
from course_grading.errors import GradingError
from course_grading.grading.autograde import grade_submission, sandbox_available
from course_grading.reports.results import SubmissionResult
from course_grading.sandbox import installed, warm

CHECK_STUDENT = "you"
_IGNORED = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")


def check(path, course, sandboxed=True, audit=True) -> SubmissionResult:
    """Grade one notebook against the full hidden tests, as the instructor's autograder would,
    in a temporary course directory: the course's gradebook and folders are never touched.

    The assignment comes from the file or folder name (else from the notebook's cells) and
    must match the notebook's nbgrader cells; bad input raises GradingError. The notebook is
    read once, as ``course autograde`` reads a submission: not through a symbolic link, a
    regular file, within the size cap. ``course``: a ``Course``, or its root.
    """
    course = Course.of(course)
    try:
        installed.verify()
    except installed.ImportMismatch as exc:
        raise GradingError(str(exc)) from None
    notebook_path = locate_notebook(path)
    data = read_submission(notebook_path)
    assignment = identify_assignment(course, notebook_path, load_submission(notebook_path, data))
    where = course.folders
    with tempfile.TemporaryDirectory(prefix="course-check-") as tmp:
        scratch = where.moved(Path(tmp))
        shutil.copytree(where.source_of(assignment), scratch.source_of(assignment), ignore=_IGNORED)
        target = scratch.submitted / CHECK_STUDENT / assignment / f"{assignment}.ipynb"
        target.parent.mkdir(parents=True)
        target.write_bytes(data)
        run = GradingRun(
            course,
            root=str(scratch.root),
            submitted=str(scratch.submitted),
            db_url=f"sqlite:///{scratch.root / 'gradebook.db'}",
            sandbox=sandbox_available(sandboxed),
            audit=audit,
        )
        if run.sandbox:  # its imports overlap with generating the assignment
            warm.ensure_warm(course.sandbox_settings(scratch.root))
        try:
            generate(course, assignment, scratch.release, root=run.root, db_url=run.db_url)
            return grade_submission(run, CHECK_STUDENT, assignment)
        finally:
            warm.stop_warm()


def locate_notebook(path) -> Path:
    """``path`` itself, or the one notebook in directory ``path``; neither may be a symbolic
    link (GradingError: not graded)."""
    path = Path(path)
    if path.is_symlink():
        raise GradingError(f"{path} is a symbolic link: not graded")
    if path.is_dir():
        found = sorted(p for p in path.glob("*.ipynb") if p.is_file() or p.is_symlink())
        if len(found) != 1:
            what = "no notebook" if not found else f"{len(found)} notebooks (name one)"
            raise GradingError(f"{path} holds {what}")
        if found[0].is_symlink():
            raise GradingError(f"{found[0]} is a symbolic link: not graded")
        return found[0]
    if not path.exists():
        raise GradingError(f"{path}: no such file")
    return path


def read_submission(path: Path) -> bytes:
    """The bytes of notebook file ``path``, read as the autograder reads a submission
    (GradingError when it is a link, not a regular file, or over the size cap)."""
    try:
        return untrusted.read_bytes(path, untrusted.MAX_NOTEBOOK_BYTES)
    except untrusted.UntrustedFileError as exc:
        raise GradingError(f"{exc}: not graded") from None


def load_submission(path: Path, data: bytes | None = None) -> nbformat.NotebookNode:
    """Read a notebook file (or parse its ``data``), with a clear GradingError for anything
    that is not one, or that passes a bound on what the grader parses (``untrusted.NotebookBounds``)."""
    try:
        data = read_submission(path) if data is None else data
        data = untrusted.load_notebook(data, str(path))
    except untrusted.UntrustedFileError as exc:
        raise GradingError(f"{exc}: not graded") from None
    except UnicodeDecodeError:
        raise GradingError(f"{path} is not a notebook: it is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise GradingError(f"{path} is not a notebook: invalid JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise GradingError(f"{path} is not a notebook: nested too deeply") from None
    if not (isinstance(data, dict) and isinstance(data.get("cells"), list) and data.get("nbformat") == 4):
        raise GradingError(f"{path} is not a Jupyter notebook (nbformat 4 with a list of cells)")
    try:
        return nbformat.from_dict(data)
    except Exception as exc:
        raise GradingError(f"{path} is not a readable notebook: {exc}") from None


def _nbgrader_ids(nb) -> set[str]:
    """The grade ids of ``nb``'s cells (a learner's: only those that are strings count)."""
    from course_grading.authoring.cells import grade_id

    return {gid for c in nb.cells if isinstance(c, dict) and isinstance(gid := grade_id(c), str)}


def identify_assignment(course: Course, path: Path, nb) -> str:
    """The assignment ``nb`` belongs to; GradingError if it cannot be told or does not match."""
    known = course.source_assignments()
    if not known:
        raise GradingError(f"no assignments under {course.folders.source}")
    sources = {a: _assignment_source(course, a) for a in known}
    ids = _nbgrader_ids(nb)
    if not ids:
        raise GradingError(f"{path} has no nbgrader cells: it is not a course notebook")
    by_name = [n for n in (path.stem, path.parent.name) if n in sources]
    overlap = {a: len(ids & _graded_ids(sources[a])) for a in known}
    if not by_name and not any(overlap.values()):
        raise GradingError(
            f"cannot tell which assignment {path} belongs to: "
            f"name it <assignment>.ipynb, one of {', '.join(known)}"
        )
    assignment = by_name[0] if by_name else max(known, key=overlap.get)
    foreign = sorted(ids - _nbgrader_ids(sources[assignment]))
    if foreign or not overlap[assignment]:
        hint = f" (its cells {', '.join(foreign[:3])} are not in {assignment})" if foreign else ""
        raise GradingError(f"{path} is not a notebook of assignment {assignment}{hint}")
    return assignment


def model_answers(course, assignment: str) -> dict[str, str]:
    """{grade_id: text} of the written answers of ``assignment``'s source notebook (nbgrader's
    manually graded answer cells): the model answer and the rubric the instructor wrote,
    which the release replaces by a stub. {} when the source is not there."""
    from course_grading.authoring.cells import grade_id, is_solution, meta, text

    try:
        nb = _assignment_source(Course.of(course), assignment)
    except (OSError, ValueError):
        return {}
    return {
        grade_id(c): text(c.get("source")).strip()
        for c in nb.cells
        if is_solution(c) and meta(c).get("grade") and isinstance(grade_id(c), str)
    }


def _assignment_source(course: Course, assignment: str):
    return read_notebook(course.folders.source_notebook(assignment))


def _graded_ids(nb) -> set[str]:
    return {
        c.metadata["nbgrader"]["grade_id"]
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade") or c.metadata.get("nbgrader", {}).get("solution")
    }
