"""nbgrader set-up shared by every pipeline step: the course's configuration, its
CourseDirectory and gradebook, running a converter in-process, generating an assignment.

Every step takes the course ``root`` (the folder holding ``nbgrader_config.py``), so tests can
run the pipeline on a small course in a temporary folder. nbgrader's log goes to the
``course_grading.nbgrader`` logger, which prints nothing unless a handler is added
(``course -v``).
"""
from __future__ import annotations

import io
import logging
import re
import sys
from pathlib import Path

# jsonschema imports rfc3987_syntax, when installed, for its "iri" format check; that module
# builds a grammar on import (1.2 s of every `course` command here). Notebook validation never
# checks that format, so it is kept out of this process unless something loaded it already.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]

import nbgrader.api  # noqa: E402
from alembic.script import ScriptDirectory  # noqa: E402
from nbgrader import dbutil  # noqa: E402
from nbgrader.api import Gradebook  # noqa: E402
from nbgrader.converters import Autograde, GenerateAssignment  # noqa: E402
from nbgrader.coursedir import CourseDirectory  # noqa: E402
from nbgrader.preprocessors import SaveCells  # noqa: E402
from sqlalchemy.exc import SQLAlchemyError  # noqa: E402
from traitlets.config import Config  # noqa: E402
from traitlets.config.loader import PyFileConfigLoader  # noqa: E402

from .preprocessors import LimitedExecute, RequireSetup, SanitizeNotebook  # noqa: E402
from .sandbox import bubblewrap  # noqa: E402


def _alembic_head() -> str:
    """The gradebook schema revision, as nbgrader.api.get_alembic_version finds it by running
    the ``alembic`` command (3-7 s here, and only if the venv's bin/ is on PATH)."""
    return ScriptDirectory(dbutil.ALEMBIC_DIR).get_current_head()


# nbgrader asks for it whenever it creates a gradebook: each `course check`, each test course.
nbgrader.api.get_alembic_version = _alembic_head

LOG = logging.getLogger("course_grading.nbgrader")
LOG.setLevel(logging.INFO)
LOG.propagate = False
LOG.addHandler(logging.NullHandler())

MESSAGE_LENGTH = 1000
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class GradingError(Exception):
    """A pipeline step cannot run: bad input, unknown assignment, or nbgrader failed."""


class GradebookError(GradingError):
    """The gradebook cannot be opened or used (not a database, a folder, unreachable)."""


def gradebook_problem(db_url: str, exc: BaseException) -> str:
    """One line for an error of the database behind ``db_url`` (SQLAlchemy's messages run on
    with the SQL and a link)."""
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    first = re.sub(r"^(?:\w+: )?\((?:sqlite3|psycopg2)\.[\w.]+\)\s*", "", first)
    where = re.sub(r"//([^:/@]+):[^@/]*@", r"//\1:***@", str(db_url))  # no password in messages
    return short(f"cannot use the gradebook {where}: {first}")


class NbgraderFailure(GradingError):
    """An nbgrader converter failed; ``log`` holds its whole log."""

    def __init__(self, message: str, log: str):
        self.log = log
        super().__init__(message)


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def short(text: str) -> str:
    """One message for a table or a CSV cell: colour codes gone, at most MESSAGE_LENGTH long."""
    text = strip_ansi(text).strip()
    return text if len(text) <= MESSAGE_LENGTH else text[:MESSAGE_LENGTH - 1] + "…"


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


def select_assignments(root, requested) -> list[str]:
    """``requested`` (all of them when empty), after checking each exists in solutions/."""
    known = source_assignments(root)
    unknown = [a for a in requested or [] if a not in known]
    if unknown:
        raise GradingError(f"unknown assignment {unknown[0]!r} (solutions/ has: {', '.join(known) or 'none'})")
    return list(requested) if requested else known


def course_directory(config_root, **overrides) -> CourseDirectory:
    """A CourseDirectory configured from ``config_root``; ``overrides`` set its traits
    (``root`` first, so that a default ``db_url`` follows it). ``sandbox=True`` runs every
    grading kernel in bubblewrap with the course folders hidden."""
    config = load_config(config_root)
    if "extra_arguments" not in config.Execute:  # the kernel's own log warnings stay quiet
        config.Execute.extra_arguments = ["--IPKernelApp.log_level=ERROR"]
    if "autograde_preprocessors" not in config.Autograde:  # as nbgrader_config.py sets them
        config.Autograde.autograde_preprocessors = autograde_preprocessors()
    config.Autograde.autograde_preprocessors = sanitized_last(config.Autograde.autograde_preprocessors)
    sandboxed = overrides.pop("sandbox", False)
    coursedir = CourseDirectory(config=config, log=LOG)
    coursedir.root = str(Path(overrides.pop("root", config_root)).resolve())
    if sandboxed:
        bubblewrap.configure(config, coursedir.root, Path(config_root).resolve())
    for name, value in overrides.items():
        setattr(coursedir, name, value)
    return coursedir


def autograde_preprocessors() -> list:
    """nbgrader's autograde steps with Execute replaced by LimitedExecute and RequireSetup
    right after it (what nbgrader_config.py configures)."""
    default = Autograde.class_traits()["autograde_preprocessors"].default()
    steps = []
    for step in default:
        steps += [LimitedExecute, RequireSetup] if step.__name__ == "Execute" else [step]
    return sanitized_last(steps)


def sanitized_last(steps: list) -> list:
    """``steps`` (classes or dotted names) with SanitizeNotebook last: what autograded/ holds
    is inert in any page that shows it, whatever nbgrader_config.py lists."""
    from traitlets.utils.importstring import import_item

    kept = [s for s in steps if (import_item(s) if isinstance(s, str) else s) is not SanitizeNotebook]
    return [*kept, SanitizeNotebook]


def gradebook(coursedir: CourseDirectory) -> Gradebook:
    """The gradebook of ``coursedir``; GradebookError (one line) when it cannot be opened."""
    try:
        return Gradebook(coursedir.db_url, coursedir.course_id)
    except SQLAlchemyError as exc:
        raise GradebookError(gradebook_problem(coursedir.db_url, exc)) from None


def db_override(db_url) -> dict:
    return {"db_url": db_url} if db_url else {}


# --------------------------------------------------------------------------- running nbgrader

def run_converter(converter) -> None:
    """Start an nbgrader converter, keeping its log; raise NbgraderFailure if it fails."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    LOG.addHandler(handler)
    try:
        converter.start()
    except SQLAlchemyError as exc:
        raise GradebookError(gradebook_problem(converter.coursedir.db_url, exc)) from None
    except Exception as exc:
        log = buffer.getvalue()
        if "sqlalchemy.exc." in log and "database is locked" not in log:  # nbgrader caught it
            raise GradebookError(gradebook_problem(converter.coursedir.db_url,
                                                   _last_exception_line(log) or exc)) from None
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
    return short(name.rsplit(".", 1)[-1] + sep + rest) if found else ""


def generate(config_root, assignment: str, release_dir, record=True, **overrides) -> None:
    """nbgrader generate_assignment of one assignment into ``release_dir``. With ``record``
    it also records the assignment (its cells, hidden tests included) in the gradebook, which
    autograde needs; without, no gradebook is opened (SaveCells only writes to it)."""
    coursedir = course_directory(config_root, release_directory=str(release_dir),
                                 assignment_id=assignment, **overrides)
    converter = GenerateAssignment(coursedir=coursedir, config=coursedir.config, log=LOG)
    converter.force = True
    converter.create_assignment = True
    if not record:
        converter.no_database = True
        converter.preprocessors = [p for p in converter.preprocessors if p is not SaveCells]
    run_converter(converter)
