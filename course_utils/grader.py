"""The nbgrader pipeline of the course, run in-process through nbgrader's Python API.

    release    solutions/ -> notebooks/ (normalized; refused if a solution or hidden test leaks)
    autograde  submitted/<student>/<assignment>/ -> autograded/, gradebook.db, reports/grades.csv
    feedback   autograded/ -> feedback/ (HTML, hidden tests removed)
    export     gradebook.db -> CSV (nbgrader's own export)
    check      one self-learner's notebook, graded in a throw-away course directory

Every function takes the course ``root`` (the folder holding ``nbgrader_config.py``), so tests
can run the pipeline on a small course in a temporary folder. nbgrader's log goes to the
``course_utils.nbgrader`` logger, which prints nothing unless a handler is added (``course -v``).
"""
from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import multiprocessing
import multiprocessing.util
import os
import re
import shutil
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

# jsonschema imports rfc3987_syntax, when installed, for its "iri" format check; that module
# builds a grammar on import (1.2 s of every `course` command here). Notebook validation never
# checks that format, so it is kept out of this process unless something loaded it already.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

import nbformat
import nbgrader.api
from alembic.script import ScriptDirectory
from nbgrader import dbutil
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.converters import Autograde, GenerateAssignment, GenerateFeedback
from nbgrader.coursedir import CourseDirectory
from nbgrader.plugins import CsvExportPlugin
from nbgrader.preprocessors import NbGraderPreprocessor, SaveCells
from sqlalchemy.exc import SQLAlchemyError
from traitlets.config import Config
from traitlets.config.loader import PyFileConfigLoader

from . import sandbox
from .audit import review
from .course_dir import find_submissions
from .scan import scan
from .nbformat_tools import dumps, read_notebook


def _alembic_head() -> str:
    """The gradebook schema revision, as nbgrader.api.get_alembic_version finds it by running
    the ``alembic`` command (3-7 s here, and only if the venv's bin/ is on PATH)."""
    return ScriptDirectory(dbutil.ALEMBIC_DIR).get_current_head()


# nbgrader asks for it whenever it creates a gradebook: each `course check`, each test course.
nbgrader.api.get_alembic_version = _alembic_head

LOG = logging.getLogger("course_utils.nbgrader")
LOG.setLevel(logging.INFO)
LOG.propagate = False
LOG.addHandler(logging.NullHandler())

SOLUTION_MARKERS = ("BEGIN SOLUTION", "END SOLUTION")
HIDDEN_MARKERS = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")
MARKERS = SOLUTION_MARKERS + HIDDEN_MARKERS
MIN_SECRET_LENGTH = 12  # shorter lines ("return x", "pass") are too common to count as leaks
CHECK_STUDENT = "you"
GRADES_CSV = Path("reports") / "grades.csv"
FLAGS_CSV = Path("reports") / "flags.csv"
_LOCK_RETRIES = 5
_MESSAGE_LENGTH = 1000
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_IGNORED = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
_TRACEBACK_CODE = re.compile(r"^\s*(?:-*>)?\s*(?:\d+\s)?(.*)$")  # "----> 3 code" / "      3 code"


class GradingError(Exception):
    """A pipeline step cannot run: bad input, unknown assignment, or nbgrader failed."""


@dataclass(frozen=True)
class Leak:
    """A line of a solution or hidden-test region that a release would show to students."""

    notebook: str
    cell: str
    line: str

    def __str__(self) -> str:
        return f"{self.notebook}, cell {self.cell!r}: {self.line!r}"


class LeakError(GradingError):
    """A release would leak solutions or hidden tests; nothing was written."""

    def __init__(self, leaks: list[Leak]):
        self.leaks = leaks
        more = f" (and {len(leaks) - 1} more)" if len(leaks) > 1 else ""
        super().__init__(f"refusing to release, solution or hidden test would leak: {leaks[0]}{more}")


@dataclass
class ExerciseResult:
    """One grade cell of one submission."""

    grade_id: str
    score: float
    max_score: float
    message: str = ""  # first line of the failure, when the cell lost points

    @property
    def passed(self) -> bool:
        return self.score >= self.max_score


@dataclass
class SubmissionResult:
    """One (student, assignment): its exercises, or ``error`` when grading itself broke."""

    student: str
    assignment: str
    exercises: list[ExerciseResult] = field(default_factory=list)
    error: str = ""
    flags: list = field(default_factory=list)  # scan.Flag: red flags and audit disagreements

    @property
    def score(self) -> float:
        return sum(e.score for e in self.exercises)

    @property
    def max_score(self) -> float:
        return sum(e.max_score for e in self.exercises)


# --------------------------------------------------------------------------- configuration

def load_config(root) -> Config:
    """The traitlets config of ``root/nbgrader_config.py`` (NbGraderAPI does not read it)."""
    root = Path(root)
    if not (root / "nbgrader_config.py").is_file():
        raise GradingError(f"{root} is not a course directory: it has no nbgrader_config.py")
    return PyFileConfigLoader("nbgrader_config.py", path=str(root)).load_config()


def source_assignments(root) -> list[str]:
    """Names of the assignments in ``root/solutions`` (folders holding a notebook)."""
    solutions = Path(root) / "solutions"
    if not solutions.is_dir():
        return []
    return sorted(d.name for d in solutions.iterdir() if d.is_dir() and any(d.glob("*.ipynb")))


def _select_assignments(root, requested) -> list[str]:
    known = source_assignments(root)
    unknown = [a for a in requested or [] if a not in known]
    if unknown:
        raise GradingError(f"unknown assignment {unknown[0]!r} (solutions/ has: {', '.join(known) or 'none'})")
    return list(requested) if requested else known


def _course_directory(config_root, **overrides) -> CourseDirectory:
    """A CourseDirectory configured from ``config_root``; ``overrides`` set its traits
    (``root`` first, so that a default ``db_url`` follows it)."""
    config = load_config(config_root)
    if "extra_arguments" not in config.Execute:  # the kernel's own log warnings stay quiet
        config.Execute.extra_arguments = ["--IPKernelApp.log_level=ERROR"]
    if "autograde_preprocessors" not in config.Autograde:  # output kept per cell is bounded
        config.Autograde.autograde_preprocessors = sandbox.autograde_preprocessors(
            Autograde.class_traits()["autograde_preprocessors"].default())
    sandboxed = overrides.pop("sandbox", False)
    coursedir = CourseDirectory(config=config, log=LOG)
    coursedir.root = str(Path(overrides.pop("root", config_root)).resolve())
    if sandboxed:  # every grading kernel in bubblewrap, the course folders hidden
        sandbox.configure(config, coursedir.root, Path(config_root).resolve())
    for name, value in overrides.items():
        setattr(coursedir, name, value)
    return coursedir


def _gradebook(coursedir: CourseDirectory) -> Gradebook:
    return Gradebook(coursedir.db_url, coursedir.course_id)


# --------------------------------------------------------------------------- running nbgrader

class NbgraderFailure(GradingError):
    """An nbgrader converter failed; ``log`` holds its whole log."""

    def __init__(self, message: str, log: str):
        self.log = log
        super().__init__(message)


def _run(converter) -> None:
    """Start an nbgrader converter, keeping its log; raise NbgraderFailure if it fails."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    LOG.addHandler(handler)
    try:
        converter.start()
    except Exception as exc:
        log = buffer.getvalue()
        raise NbgraderFailure(_last_exception_line(log) or str(exc), log) from exc
    finally:
        LOG.removeHandler(handler)


def _last_exception_line(log: str) -> str:
    """``Type: message`` of the last traceback in an nbgrader log, module path dropped."""
    found, in_traceback = "", False
    for line in log.splitlines():
        if line.startswith("Traceback (most recent call last)"):
            in_traceback = True
        elif in_traceback and line and not line[0].isspace():
            found, in_traceback = line, False
    name, sep, rest = found.partition(":")
    return _short(name.rsplit(".", 1)[-1] + sep + rest) if found else ""


def _short(text: str) -> str:
    text = _ANSI.sub("", text).strip()
    return text if len(text) <= _MESSAGE_LENGTH else text[:_MESSAGE_LENGTH - 1] + "…"


def _generate(config_root, assignment: str, release_dir, record=True, **overrides) -> None:
    """nbgrader generate_assignment of one assignment into ``release_dir``. With ``record``
    it also records the assignment (its cells, hidden tests included) in the gradebook, which
    autograde needs; without, no gradebook is opened (SaveCells only writes to it)."""
    coursedir = _course_directory(config_root, release_directory=str(release_dir),
                                  assignment_id=assignment, **overrides)
    converter = GenerateAssignment(coursedir=coursedir, config=coursedir.config, log=LOG)
    converter.force = True
    converter.create_assignment = True
    if not record:
        converter.no_database = True
        converter.preprocessors = [p for p in converter.preprocessors if p is not SaveCells]
    _run(converter)


# --------------------------------------------------------------------------- release

def release(root, assignments=None, check_only=False) -> list[str]:
    """Regenerate ``notebooks/`` from ``solutions/`` (all assignments, or those named).

    Each released notebook is normalized and scanned for leaks before anything is written; a
    leak raises LeakError and leaves ``notebooks/`` untouched. Returns the paths (relative to
    ``root``) whose content changed; with ``check_only`` nothing is written and no gradebook
    is touched, and the return value lists the files that are out of date.
    """
    root = Path(root).resolve()
    names = _select_assignments(root, assignments)
    if not names:
        raise GradingError(f"no assignments under {root / 'solutions'}")
    with tempfile.TemporaryDirectory(prefix="course-release-") as tmp:
        files: dict[Path, bytes] = {}
        for name in names:
            _generate(root, name, tmp, record=not check_only)
            files.update(_render(root, name, Path(tmp)))
    changed = [rel for rel, data in files.items() if _read_bytes(root / rel) != data]
    if not check_only:
        for rel in changed:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(files[rel])
    return [str(rel) for rel in changed]


def _render(root: Path, assignment: str, release_dir: Path) -> dict[Path, bytes]:
    """The final bytes of every released file of ``assignment``; raise LeakError on leaks."""
    generated, files, leaks = release_dir / assignment, {}, []
    for path in sorted(p for p in generated.rglob("*") if p.is_file()):
        rel = Path("notebooks") / assignment / path.relative_to(generated)
        if path.suffix == ".ipynb":
            released = read_notebook(path)
            source = read_notebook(root / "solutions" / assignment / path.relative_to(generated))
            leaks += find_leaks(source, released, notebook=str(rel))
            files[rel] = dumps(released).encode("utf-8")
        else:
            files[rel] = path.read_bytes()
    if leaks:
        raise LeakError(leaks)
    return files


def _read_bytes(path: Path) -> bytes | None:
    return path.read_bytes() if path.is_file() else None


def secret_lines(source_nb) -> set[str]:
    """Stripped non-trivial lines of the solution and hidden-test regions of a source notebook.

    A region lies between BEGIN/END markers, or is a whole solution cell without markers.
    Trivial lines (short, comments, the ``raise NotImplementedError()`` stub) and lines that
    also appear outside every region are not secrets.
    """
    secret, public = set(), set()
    for cell in source_nb.cells:
        lines = _text(cell.get("source", "")).splitlines()
        meta = cell.get("metadata", {}).get("nbgrader", {})
        inside = meta.get("solution", False) and not any(m in ln for ln in lines for m in SOLUTION_MARKERS)
        for line in lines:
            if any(m.startswith("BEGIN") and m in line for m in MARKERS):
                inside = True
            elif any(m.startswith("END") and m in line for m in MARKERS):
                inside = False
            else:
                (secret if inside else public).add(line.strip())
    return {s for s in secret - public if _nontrivial(s)}


def _nontrivial(line: str) -> bool:
    return (len(line) >= MIN_SECRET_LENGTH and not line.startswith("#")
            and line != "raise NotImplementedError()")


def find_leaks(source_nb, release_nb, notebook: str = "") -> list[Leak]:
    """Lines of ``release_nb`` that carry a region marker or a secret line of ``source_nb``."""
    secrets = secret_lines(source_nb)
    leaks = []
    for index, cell in enumerate(release_nb.cells):
        cell_name = cell.get("id") or f"cell-{index}"
        for line in _text(cell.get("source", "")).splitlines():
            if any(m in line for m in MARKERS) or line.strip() in secrets:
                leaks.append(Leak(notebook, cell_name, line.strip()))
    return leaks


# --------------------------------------------------------------------------- autograde

def autograde(root, submitted_dir=None, students=None, assignments=None, jobs=None,
              progress=True, db_url=None, sandboxed=True, audit=True) -> list[SubmissionResult]:
    """Grade every submission ``submitted/<student>/<assignment>/`` (optionally filtered).

    The gradebook learns missing assignments from ``solutions/`` (``notebooks/`` is never
    touched) and the students; then ``jobs`` worker processes (default: one per CPU) grade one
    submission each. A broken submission becomes a result with ``error`` set; the rest go on.
    Results are sorted by student and assignment. ``db_url`` (default: nbgrader_config.py's
    ``CourseDirectory.db_url``, else ``root/gradebook.db``) may name a shared PostgreSQL
    gradebook, which several graders can fill at once.

    With ``sandboxed`` every kernel runs in bubblewrap (where it is missing, grading goes on
    unsandboxed after a loud warning on stderr); with ``audit`` each result carries ``flags``:
    red flags of the scanner and exercises whose points the integrity audit denies.
    """
    root = Path(root).resolve()
    submitted = Path(submitted_dir).resolve() if submitted_dir else root / "submitted"
    _select_assignments(root, assignments)
    pairs = find_submissions(submitted, students, assignments)
    if not pairs:
        raise GradingError(f"no submissions to grade under {submitted}")
    known = set(source_assignments(root))
    overrides = {"submitted_directory": str(submitted), **_db_override(db_url),
                 **_safety(sandboxed, audit)}
    tasks = [(str(root), overrides, student, assignment, assignment in known)
             for student, assignment in pairs]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    warm = overrides["sandbox"] and jobs == 1
    if warm:  # its imports overlap with the gradebook's set-up below
        sandbox.hide(root)
        sandbox.start_warm()
    try:
        _prepare_gradebook(root, sorted({a for _, a in pairs} & known), sorted({s for s, _ in pairs}),
                           _db_override(db_url))
        results = _grade_all(tasks, jobs, progress, str(root) if overrides["sandbox"] else None)
    finally:
        if warm:
            sandbox.stop_warm()
    return sorted(results, key=lambda r: (r.student, r.assignment))


def _db_override(db_url) -> dict:
    return {"db_url": db_url} if db_url else {}


def _prepare_gradebook(root: Path, assignments: list[str], students: list[str],
                       overrides: dict | None = None) -> None:
    """Record missing assignments (generated into a temporary folder) and the students.

    Another grader sharing the gradebook (PostgreSQL) may be recording the same rows at the
    same moment: a clash (a duplicate key) is retried, and the retry finds the rows there.
    """
    for attempt in range(_LOCK_RETRIES):
        try:
            coursedir = _course_directory(root, **(overrides or {}))
            with _gradebook(coursedir) as gb:
                missing = [a for a in assignments if not _has_notebooks(gb, a)]
                for student in students:
                    gb.update_or_create_student(student)
            for assignment in missing:
                with tempfile.TemporaryDirectory(prefix="course-generate-") as tmp:
                    _generate(root, assignment, tmp, **(overrides or {}))
            return
        except (SQLAlchemyError, NbgraderFailure):
            if attempt == _LOCK_RETRIES - 1:
                raise
            time.sleep(0.5 * (attempt + 1))


def _has_notebooks(gb: Gradebook, assignment: str) -> bool:
    try:
        return len(gb.find_assignment(assignment).notebooks) > 0
    except MissingEntry:
        return False


def _grade_all(tasks: list[tuple], jobs: int, progress: bool,
               sandbox_root: str | None = None) -> list[SubmissionResult]:
    """Run ``_grade_task`` over ``tasks``, in ``jobs`` processes when more than one (each
    starts its warm sandbox for ``sandbox_root`` as soon as it exists, when given)."""
    jobs = max(1, min(jobs, len(tasks)))
    results = []

    def done(result: SubmissionResult) -> None:
        results.append(result)
        if progress:
            outcome = f"ERROR {result.error}" if result.error else f"{result.score:g}/{result.max_score:g}"
            print(f"[{len(results)}/{len(tasks)}] {result.student} {result.assignment} {outcome}",
                  file=sys.stderr, flush=True)

    if jobs == 1:
        for task in tasks:
            done(_grade_task(*task))
        return results
    with ProcessPoolExecutor(jobs, mp_context=_mp_context(), initializer=_start_worker,
                             initargs=(_kernel_threads(jobs), sandbox_root)) as pool:
        futures = {pool.submit(_grade_task, *task): task for task in tasks}
        for future in as_completed(futures):
            _, _, student, assignment, _ = futures[future]
            try:
                done(future.result())
            except Exception as exc:  # the worker process itself died (killed, out of memory)
                done(SubmissionResult(student, assignment, error=f"worker died: {exc!r}"))
    return results


def _start_worker(env: dict[str, str], sandbox_root: str | None) -> None:
    """A grading worker: its kernels' environment, and its warm sandbox, started at once
    (closed when the worker ends)."""
    os.environ.update(env)
    if sandbox_root is not None:
        sandbox.hide(sandbox_root)
        sandbox.start_warm()
        multiprocessing.util.Finalize(None, sandbox.stop_warm, exitpriority=10)


def _kernel_threads(jobs: int) -> dict[str, str]:
    """Share the cores between the parallel kernels: each gets cores // jobs math threads.

    Without this every kernel's torch starts one thread per core, and ``jobs`` kernels on the
    same cores fight over them (much slower than one thread each). An explicit
    ``OMP_NUM_THREADS`` in the environment wins. Set in each worker, so its kernels inherit it.
    """
    if "OMP_NUM_THREADS" in os.environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // jobs))}


def _mp_context():
    """Workers come from a fresh fork server, never from a fork of the calling process.

    A forked copy of a process that has already run torch (its OpenMP thread pool) can hang
    on its first tensor operation: seen when grading from inside a test run. The server
    imports this module once, so workers still start without re-importing nbgrader.
    """
    if sys.platform != "linux":
        return None
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def _grade_task(config_root: str, overrides: dict, student: str, assignment: str,
                known: bool) -> SubmissionResult:
    """Grade one submission (in a worker process); any failure becomes an error result."""
    if not known:
        return SubmissionResult(student, assignment, error=f"no assignment {assignment!r} in solutions/")
    try:
        return _grade_submission(config_root, overrides, student, assignment)
    except GradingError as exc:
        result = SubmissionResult(student, assignment, error=str(exc))
    except Exception as exc:  # keep grading the others, whatever this one did
        result = SubmissionResult(student, assignment, error=_short(f"{type(exc).__name__}: {exc}"))
    if overrides.get("audit"):  # what broke the grading may be what the scanner looks for
        result.flags = _scan_only(config_root, overrides, student, assignment)
    return result


def _scan_only(config_root: str, overrides: dict, student: str, assignment: str) -> list:
    """The scanner's red flags of a submission whose grading failed (nothing of it runs)."""
    root = Path(overrides.get("root") or config_root)
    folder = Path(overrides.get("submitted_directory") or root / "submitted") / student / assignment
    flags = []
    try:
        for path, source in _with_sources(folder, Path(config_root), assignment):
            flags += scan(path, source)
    except Exception:  # noqa: BLE001 - an unreadable notebook: the error row says enough
        return flags
    return flags


def _safety(sandboxed: bool, audit: bool) -> dict:
    """The overrides that sandbox the kernels and audit the results; warns when unsandboxed."""
    ok, why = sandbox.available() if sandboxed else (False, "--no-sandbox")
    if not ok:
        print(sandbox.UNSANDBOXED_WARNING.format(why=why), file=sys.stderr, flush=True)
    return {"sandbox": ok, "audit": audit}


def _grade_submission(config_root, overrides: dict, student: str, assignment: str) -> SubmissionResult:
    """nbgrader autograde of one (student, assignment), retried while SQLite is locked;
    then, when ``overrides`` asks for an audit, its red flags and audit disagreements."""
    overrides = dict(overrides)
    audited = overrides.pop("audit", False)
    coursedir = _course_directory(config_root, student_id=student, assignment_id=assignment,
                                  **overrides)
    if overrides.get("sandbox"):  # a running one is kept; a broken one is replaced
        sandbox.start_warm()
    _expect_notebooks(coursedir, student, assignment)
    for attempt in range(_LOCK_RETRIES):
        converter = Autograde(coursedir=coursedir, config=coursedir.config, log=LOG)
        converter.force = True
        converter.create_student = True
        try:
            _run(converter)
            break
        except NbgraderFailure as exc:
            if "database is locked" not in exc.log or attempt == _LOCK_RETRIES - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
    result = SubmissionResult(student, assignment, _exercise_results(coursedir, student, assignment))
    if audited:
        result.flags = _review(coursedir, result, bool(overrides.get("sandbox")))
    return result


def _review(coursedir: CourseDirectory, result: SubmissionResult, sandboxed: bool) -> list:
    """Scanner flags and audit disagreements of each notebook of a graded submission."""
    flags = []
    folder = Path(coursedir.format_path(coursedir.submitted_directory, result.student, result.assignment))
    scores = {e.grade_id: e.score for e in result.exercises}
    for path, source in _with_sources(folder, Path(coursedir.root), result.assignment):
        flags += review(path, source, result.assignment, scores, sandboxed=sandboxed,
                        hide=sandbox.hidden_roots())
    return flags


def _with_sources(folder: Path, root: Path, assignment: str) -> list[tuple[Path, Path]]:
    """Each submitted notebook of ``folder`` with its source in ``root/solutions``."""
    pairs = [(path, root / "solutions" / assignment / path.name) for path in sorted(folder.glob("*.ipynb"))]
    return [(path, source) for path, source in pairs if source.is_file()]


def format_flags(results: list[SubmissionResult]) -> str:
    """One line per flag (student, assignment, where, why); '' when nothing was flagged."""
    return "\n".join(f"FLAG {r.student}/{r.assignment} {flag}" for r in results for flag in r.flags)


def write_flags_csv(results: list[SubmissionResult], path) -> Path:
    """The flags for the instructor: student, assignment, cell (grade_id), reason."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student", "assignment", "cell", "reason"])
        for r in results:
            for flag in r.flags:
                writer.writerow([r.student, r.assignment, flag.where, flag.reason])
    return path


def _expect_notebooks(coursedir: CourseDirectory, student: str, assignment: str) -> None:
    """GradingError unless the submission holds a notebook of the assignment, by name
    (nbgrader would only say "did you forget to run generate_assignment?")."""
    folder = Path(coursedir.format_path(coursedir.submitted_directory, student, assignment))
    with _gradebook(coursedir) as gb:
        expected = sorted(f"{n.name}.ipynb" for n in gb.find_assignment(assignment).notebooks)
    found = sorted(p.name for p in folder.glob("*.ipynb"))
    if not set(expected) & set(found):
        raise GradingError(f"no {' or '.join(expected)} in the submission "
                           f"(found: {', '.join(found) or 'no notebooks'})")


def _exercise_results(coursedir: CourseDirectory, student: str, assignment: str) -> list[ExerciseResult]:
    """Scores from the gradebook, in notebook order, with the autograded notebook's messages."""
    results = []
    with _gradebook(coursedir) as gb:
        for notebook in sorted(gb.find_assignment(assignment).notebooks, key=lambda n: n.name):
            path = Path(coursedir.format_path(coursedir.autograded_directory, student, assignment),
                        f"{notebook.name}.ipynb")
            order, messages = _failure_messages(path)
            grades = {g.name: g for g in gb.find_submission_notebook(notebook.name, assignment, student).grades}
            for name in order + sorted(set(grades) - set(order)):
                grade = grades[name]
                score = float(grade.score or 0)
                message = "" if score >= grade.max_score else (
                    messages.get(name) or ("needs manual grading" if grade.needs_manual_grade else ""))
                results.append(ExerciseResult(name, score, float(grade.max_score), message))
    return results


def _failure_messages(path: Path) -> tuple[list[str], dict[str, str]]:
    """Grade cell ids of an autograded notebook in order, and each one's first error line."""
    if not path.is_file():
        return [], {}
    order, messages = [], {}
    for cell in read_notebook(path).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade"):
            order.append(meta["grade_id"])
            messages[meta["grade_id"]] = _cell_failure(cell)
    return order, messages


def _cell_failure(cell) -> str:
    """First line of a cell's error output, else of its stderr (nbgrader scores both 0)."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            text = f"{output.get('ename', '')}: {output.get('evalue', '')}".strip(": ")
            return _short(text.splitlines()[0]) if text else "error"
    for output in cell.get("outputs", []):
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            lines = [ln for ln in _ANSI.sub("", _text(output.get("text", ""))).splitlines() if ln.strip()]
            return _short("stderr: " + (lines[0] if lines else ""))
    return ""


def _text(value) -> str:
    """A notebook string field, whether stored as one string or a list of lines."""
    return "".join(value) if isinstance(value, list) else value


def write_csv(results: list[SubmissionResult], path) -> Path:
    """One row per (student, assignment, exercise); a broken submission gets one error row."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["student", "assignment", "exercise", "score", "max_score", "message"])
        for r in results:
            if r.error:
                writer.writerow([r.student, r.assignment, "", "", "", f"grading failed: {r.error}"])
            for e in r.exercises:
                writer.writerow([r.student, r.assignment, e.grade_id, f"{e.score:g}", f"{e.max_score:g}", e.message])
    return path


def format_table(results: list[SubmissionResult]) -> str:
    """A plain-text table per assignment: one row per student, one column per exercise."""
    blocks = []
    for assignment in sorted({r.assignment for r in results}):
        rows = [r for r in results if r.assignment == assignment]
        exercises = list(dict.fromkeys(e.grade_id for r in rows for e in r.exercises))
        table = [["student", *exercises, "total"]]
        for r in rows:
            if r.error:
                table.append([r.student, f"ERROR: {r.error}"])
                continue
            scores = {e.grade_id: f"{e.score:g}/{e.max_score:g}" for e in r.exercises}
            table.append([r.student, *(scores.get(x, "-") for x in exercises),
                          f"{r.score:g}/{r.max_score:g}"])
        blocks.append(f"{assignment}\n{_columns(table)}")
    return "\n\n".join(blocks)


def _columns(table: list[list[str]]) -> str:
    """Left-aligned columns; a short row (an error) runs on from its first column."""
    full = [row for row in table if len(row) == len(table[0])]
    widths = [max(len(row[i]) for row in full) for i in range(len(table[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table)


# --------------------------------------------------------------------------- feedback, export

def feedback(root, assignments=None, students=None, db_url=None) -> list[Path]:
    """nbgrader generate_feedback for the autograded submissions; returns the HTML files."""
    root = Path(root).resolve()
    pairs = find_submissions(root / "autograded", students, assignments)
    if not pairs:
        raise GradingError(f"nothing autograded under {root / 'autograded'}: run `course autograde` first")
    for student, assignment in pairs:
        coursedir = _course_directory(root, student_id=student, assignment_id=assignment,
                                      **_db_override(db_url))
        converter = GenerateFeedback(coursedir=coursedir, config=coursedir.config, log=LOG)
        converter.preprocessors = [ScrubHiddenTracebacks, *converter.preprocessors]
        converter.force = True
        _run(converter)
    return sorted(p for student, assignment in pairs
                  for p in (root / "feedback" / student / assignment).glob("*.html"))


class ScrubHiddenTracebacks(NbGraderPreprocessor):
    """Drop hidden-test lines from the tracebacks of a cell's errors.

    nbgrader's ClearHiddenTests removes the hidden tests from a cell's source, but IPython's
    traceback quotes the code around the failing line, hidden tests included. This runs
    before it, while the cell still holds its hidden region.
    """

    def preprocess_cell(self, cell, resources, index):
        hidden = _hidden_lines(_text(cell.get("source", "")))
        for output in cell.get("outputs", []) if hidden else []:
            if output.get("output_type") == "error":
                output.traceback = [_scrub(frame, hidden) for frame in output.get("traceback", [])]
        return cell, resources


def _hidden_lines(source: str) -> set[str]:
    """Stripped lines of a cell's hidden-test regions, markers included."""
    hidden, inside = set(), False
    for line in source.splitlines():
        inside = inside or HIDDEN_MARKERS[0] in line
        if inside and line.strip():
            hidden.add(line.strip())
        inside = inside and HIDDEN_MARKERS[1] not in line
    return hidden


def _scrub(frame: str, hidden: set[str]) -> str:
    """A traceback entry without the lines that quote ``hidden`` code."""
    kept = [line for line in frame.split("\n")
            if _TRACEBACK_CODE.match(_ANSI.sub("", line)).group(1).strip() not in hidden]
    return "\n".join(kept)


def export(root, path, assignments=None, students=None, db_url=None) -> Path:
    """nbgrader's CSV export of the gradebook (one row per student and assignment) to ``path``."""
    coursedir = _course_directory(Path(root).resolve(), **_db_override(db_url))
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    plugin = CsvExportPlugin(config=coursedir.config, log=LOG)
    plugin.to = str(path)
    plugin.assignment = list(assignments or [])
    plugin.student = list(students or [])
    with _gradebook(coursedir) as gb:
        plugin.export(gb)
    return path


# --------------------------------------------------------------------------- check

def check(path, root, sandboxed=True, audit=True) -> SubmissionResult:
    """Grade one notebook against the full hidden tests, as the instructor's autograder would,
    in a temporary course directory: the course's gradebook and folders are never touched.

    The assignment comes from the file or folder name (else from the notebook's cells) and
    must match the notebook's nbgrader cells; bad input raises GradingError.
    """
    root = Path(root).resolve()
    notebook_path = locate_notebook(path)
    assignment = identify_assignment(root, notebook_path, load_submission(notebook_path))
    with tempfile.TemporaryDirectory(prefix="course-check-") as tmp:
        course = Path(tmp)
        shutil.copytree(root / "solutions" / assignment, course / "solutions" / assignment, ignore=_IGNORED)
        target = course / "submitted" / CHECK_STUDENT / assignment / f"{assignment}.ipynb"
        target.parent.mkdir(parents=True)
        shutil.copyfile(notebook_path, target)
        overrides = {"root": str(course), "db_url": f"sqlite:///{course / 'gradebook.db'}",
                     **_safety(sandboxed, audit)}
        if overrides["sandbox"]:  # its imports overlap with generating the assignment
            sandbox.hide(course, root)
            sandbox.start_warm()
        try:
            _generate(root, assignment, course / "release",
                      **{k: v for k, v in overrides.items() if k not in ("sandbox", "audit")})
            return _grade_submission(root, overrides, CHECK_STUDENT, assignment)
        finally:
            sandbox.stop_warm()


def locate_notebook(path) -> Path:
    """``path`` itself, or the one notebook in directory ``path``."""
    path = Path(path)
    if path.is_dir():
        found = sorted(p for p in path.glob("*.ipynb") if p.is_file())
        if len(found) != 1:
            what = "no notebook" if not found else f"{len(found)} notebooks (name one)"
            raise GradingError(f"{path} holds {what}")
        return found[0]
    if not path.is_file():
        raise GradingError(f"{path}: no such file")
    return path


def load_submission(path: Path) -> nbformat.NotebookNode:
    """Read a notebook file, with a clear GradingError for anything that is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise GradingError(f"{path} is not a notebook: it is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise GradingError(f"{path} is not a notebook: invalid JSON ({exc.msg}, line {exc.lineno})") from None
    if not (isinstance(data, dict) and isinstance(data.get("cells"), list) and data.get("nbformat") == 4):
        raise GradingError(f"{path} is not a Jupyter notebook (nbformat 4 with a list of cells)")
    try:
        return nbformat.from_dict(data)
    except Exception as exc:
        raise GradingError(f"{path} is not a readable notebook: {exc}") from None


def _nbgrader_ids(nb) -> set[str]:
    return {c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in nb.cells} - {None}


def identify_assignment(root: Path, path: Path, nb) -> str:
    """The assignment ``nb`` belongs to; GradingError if it cannot be told or does not match."""
    known = source_assignments(root)
    if not known:
        raise GradingError(f"no assignments under {root / 'solutions'}")
    sources = {a: _assignment_source(root, a) for a in known}
    ids = _nbgrader_ids(nb)
    if not ids:
        raise GradingError(f"{path} has no nbgrader cells: it is not a course notebook")
    by_name = [n for n in (path.stem, path.parent.name) if n in sources]
    overlap = {a: len(ids & _graded_ids(sources[a])) for a in known}
    if not by_name and not any(overlap.values()):
        raise GradingError(f"cannot tell which assignment {path} belongs to: "
                           f"name it <assignment>.ipynb, one of {', '.join(known)}")
    assignment = by_name[0] if by_name else max(known, key=overlap.get)
    foreign = sorted(ids - _nbgrader_ids(sources[assignment]))
    if foreign or not overlap[assignment]:
        hint = f" (its cells {', '.join(foreign[:3])} are not in {assignment})" if foreign else ""
        raise GradingError(f"{path} is not a notebook of assignment {assignment}{hint}")
    return assignment


def _assignment_source(root: Path, assignment: str):
    return read_notebook(root / "solutions" / assignment / f"{assignment}.ipynb")


def _graded_ids(nb) -> set[str]:
    return {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade") or c.metadata.get("nbgrader", {}).get("solution")}
