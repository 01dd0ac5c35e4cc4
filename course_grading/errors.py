"""The grading pipeline's errors, by type: what went wrong is decided from exception objects
(their class, a database driver's error code), never by matching words in a log.

    GradingError               a pipeline step cannot run (bad input, unknown assignment, ...)
      GradebookError           the gradebook cannot be opened or used
        GradebookBusy          another grader holds or writes the same rows at this moment:
                               a retry resolves it (``retriable``)
      NbgraderFailure          an nbgrader converter failed; ``cause`` is what it raised
      SubmissionRefused        a submission not graded as it is; ``flags`` say why

nbgrader's converters catch what goes wrong inside them and keep only a log line;
``nbgrader_setup.run_converter`` records the exception objects themselves as they pass
(``Recorder``) and hands the last one to ``from_converter``.
"""

from __future__ import annotations

import re
import sqlite3
from typing import Iterable

from sqlalchemy import exc as sa_exc

MESSAGE_LENGTH = 1000
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# SQLite's primary result codes for "another connection holds the database" (sqlite3.h)
SQLITE_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED
# PostgreSQL SQLSTATEs of a clash with a concurrent writer (Appendix A of its manual):
# unique_violation, foreign_key_violation, serialization_failure, deadlock_detected,
# lock_not_available
POSTGRES_CLASH_CODES = frozenset({"23505", "23503", "40001", "40P01", "55P03"})


class GradingError(Exception):
    """A pipeline step cannot run: bad input, unknown assignment, or nbgrader failed."""


class GradebookError(GradingError):
    """The gradebook cannot be opened or used (not a database, a folder, unreachable)."""


class GradebookBusy(GradebookError):
    """Another grader holds the gradebook or writes the same rows at this moment (SQLite's lock,
    a duplicate key, an assignment recorded with other notebooks meanwhile); a retry resolves it."""


class NbgraderFailure(GradingError):
    """An nbgrader converter failed. ``cause`` is the exception it raised inside (None when it
    only logged), ``log`` its whole log (for ``course -v`` and the instructor, never parsed)."""

    def __init__(self, message: str, log: str = "", cause: BaseException | None = None):
        self.log = log
        self.cause = cause
        super().__init__(message)


class SubmissionRefused(GradingError):
    """A submission that is not graded as it is (its notebook is a link, ...); ``flags`` say why."""

    def __init__(self, message: str, flags: list):
        super().__init__(message)
        self.flags = flags


class AssignmentChanged(GradingError):
    """nbgrader refused to change an assignment's notebooks in the gradebook because it has
    submissions: either another grader is recording it at this moment (``GradebookBusy``
    retries it) or the instructor changed the assignment's notebooks after grading started."""


def retriable(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a clash with another grader, which a retry resolves."""
    return any(_busy(e) for e in _chain(exc))


def _chain(exc: BaseException | None) -> Iterable[BaseException]:
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        if isinstance(exc, NbgraderFailure) and exc.cause is not None:
            exc = exc.cause
        elif isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None:
            exc = exc.orig
        else:
            exc = exc.__cause__ or exc.__context__


def _busy(exc: BaseException) -> bool:
    if isinstance(exc, (GradebookBusy, AssignmentChanged, sa_exc.IntegrityError)):
        return True
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return code is not None and (code & 0xFF) in SQLITE_BUSY_CODES
    return getattr(exc, "pgcode", None) in POSTGRES_CLASH_CODES  # psycopg2's errors


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def short(text: str) -> str:
    """One message for a table or a CSV cell: colour codes gone, at most MESSAGE_LENGTH long."""
    text = strip_ansi(text).strip()
    return text if len(text) <= MESSAGE_LENGTH else text[: MESSAGE_LENGTH - 1] + "…"


def gradebook_problem(db_url: str, exc: BaseException) -> str:
    """One line for an error of the database behind ``db_url`` (SQLAlchemy's messages run on
    with the SQL and a link): the driver's own message, without the password of the URL."""
    orig = getattr(exc, "orig", None) or exc
    first = next((ln.strip() for ln in str(orig).splitlines() if ln.strip()), type(orig).__name__)
    where = re.sub(r"//([^:/@]+):[^@/]*@", r"//\1:***@", str(db_url))  # no password in messages
    return short(f"cannot use the gradebook {where}: {first}")


def gradebook_error(db_url: str, exc: BaseException) -> GradebookError:
    """The GradebookError (GradebookBusy when a retry resolves it) for a database error."""
    kind = GradebookBusy if retriable(exc) else GradebookError
    return kind(gradebook_problem(db_url, exc))


def from_converter(
    db_url: str, raised: BaseException | None, fallback: BaseException, log: str
) -> GradingError:
    """The typed error for an nbgrader converter that failed: ``raised`` is the last exception
    recorded inside it (None when nbgrader raised before any step), ``fallback`` what
    ``start()`` raised."""
    cause = raised if raised is not None else fallback
    if any(isinstance(e, sa_exc.SQLAlchemyError) or isinstance(e, sqlite3.Error) for e in _chain(cause)):
        database = next(e for e in _chain(cause) if isinstance(e, (sa_exc.SQLAlchemyError, sqlite3.Error)))
        return gradebook_error(db_url, database)
    first = next((ln.strip() for ln in strip_ansi(str(cause)).splitlines() if ln.strip()), "")
    return NbgraderFailure(
        short(f"{type(cause).__name__}: {first}" if first else type(cause).__name__), log, cause
    )
