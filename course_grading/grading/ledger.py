"""What has been graded already: the record that lets an interrupted class run resume, and
the fingerprints that say whether a grade still stands.

A grade stands for exactly what was graded, by exactly what graded it. Its **key** is a hash
of three things:

* the submission as it was graded: every file of the staged copy (names and bytes,
  ``timestamp.txt`` included), the copy ``staging.stage`` makes, so that what is
  hashed is what ran (a resubmission, a new ``timestamp.txt``, a file added: another key);
* the course version of its assignment (``course_version``): the installed course's own
  files (``course_grading``, ``course_utils``: checks, references, data), the course's
  ``nbgrader_config.py`` and the assignment's ``solutions/`` folder;
* the gradebook it was written to (its URL), and how it was graded (in the sandbox or not,
  with the integrity audit or not: a resumed run keeps only what it would have done itself).

``course autograde`` writes one record per graded submission, as it is graded, into
``reports/progress/<assignment>/<student>.json`` (written whole, then renamed into place, so a
record is there or not, never half). A submission whose grading failed (an error row) gets a
failure record instead (its error, no key): an error is not a grade, ``--resume`` grades it
again, and the exports read it (``failure``) so that the gradebook's earlier grade of the
student, or its absence, is never taken for this submission's grade. ``course autograde --resume`` takes a
submission as done only when its record's key is the key of the submission as it is now and
the gradebook still holds the same computed scores for it (``recorded._still_recorded``);
anything else is graded again. An interrupted submission never has a record: a run forgets
the record of every submission it is about to grade, and writes it again once the grade has
come back (so a run that regrades the class, interrupted, resumes regrading what it had not
reached).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path

from course_grading.course.course import Course
from course_grading.grading.red_flags import Flag
from course_grading.reports.results import ExerciseResult, SubmissionResult

FOLDER = Path("reports") / "progress"
FORMAT = 2  # 2: each exercise says whether it is a written answer, and whether it waits
_SKIPPED = {"__pycache__", ".ipynb_checkpoints"}


def _hash_tree(digest, folder: Path, prefix: str = "") -> None:
    """Feed every regular file under ``folder`` (names and bytes, sorted; no link followed,
    caches skipped) into ``digest``."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if entry.name in _SKIPPED or entry.name.endswith(".pyc"):
            continue
        name = f"{prefix}{entry.name}"
        if entry.is_dir(follow_symlinks=False):
            digest.update(f"D {name}\0".encode("utf-8", "surrogateescape"))
            _hash_tree(digest, Path(entry.path), f"{name}/")
        elif entry.is_file(follow_symlinks=False):
            digest.update(
                f"F {name} {entry.stat(follow_symlinks=False).st_size}\0".encode("utf-8", "surrogateescape")
            )
            with open(entry.path, "rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        else:
            digest.update(f"O {name}\0".encode("utf-8", "surrogateescape"))


def tree_digest(folder) -> str:
    """A hash of a folder's files, names and bytes (a staged submission: the grader's own copy)."""
    digest = hashlib.sha256()
    _hash_tree(digest, Path(folder))
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def _installed_course() -> str:
    """A hash of the installed course's packages (their files, data included)."""
    import course_grading
    import course_utils

    digest = hashlib.sha256(f"format {FORMAT}\0".encode())
    for package in (course_grading, course_utils):
        digest.update(f"P {package.__name__}\0".encode())
        _hash_tree(digest, Path(package.__file__).resolve().parent)
    return digest.hexdigest()


@functools.lru_cache(maxsize=64)
def _course_files(config: Path, source: Path, assignment: str, stamp: tuple) -> str:
    digest = hashlib.sha256(_installed_course().encode())
    digest.update(b"C\0" + (config.read_bytes() if config.is_file() else b""))
    digest.update(f"A {assignment}\0".encode())
    _hash_tree(digest, source)
    return digest.hexdigest()


def _stamp(config: Path, source: Path) -> tuple:
    """What makes a cached course version stale within one process: the times and sizes of
    the configuration and of the assignment's source files."""
    found = []
    for path in [config, *sorted(source.glob("*"))]:
        try:
            st = path.stat()
            found.append((path.name, st.st_mtime_ns, st.st_size))
        except OSError:
            found.append((path.name, None, None))
    return tuple(found)


def course_version(course, assignment: str) -> str:
    """The version of the course that grades ``assignment``: a hash of the installed course's
    packages, the ``course``'s ``nbgrader_config.py`` and ``solutions/<assignment>/``
    (``course``: a ``Course``, or its root)."""
    course = Course.of(course)
    source = course.folders.source_of(assignment)
    return _course_files(course.config_file, source, assignment, _stamp(course.config_file, source))


def submission_key(course, assignment: str, staged_folder, db_url: str, how: str = "") -> str:
    """The key of a grade: the staged submission, the course version, the gradebook, and
    ``how`` it was graded (sandboxed, audited)."""
    parts = [tree_digest(staged_folder), course_version(course, assignment), str(db_url), how]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


# --------------------------------------------------------------------------- records


def record_path(root, student: str, assignment: str) -> Path:
    return Path(root) / FOLDER / assignment / f"{student}.json"


def _as_dict(result: SubmissionResult) -> dict:
    return {
        "format": FORMAT,
        "key": result.key,
        "student": result.student,
        "assignment": result.assignment,
        "exercises": [
            [e.grade_id, e.score, e.max_score, e.message, e.manual, e.pending] for e in result.exercises
        ],
        "flags": [[f.where, f.reason] for f in result.flags],
    }


def write(root, result: SubmissionResult) -> None:
    """Record ``result``: as done, or, for an error row, as failed (``failure``); a result
    with neither a grade nor an error (no key) removes any earlier record of its submission.
    Only plain names reach a file name."""
    from course_grading.untrusted import plain_name

    if not (plain_name(result.student) and plain_name(result.assignment)):
        return
    path = record_path(root, result.student, result.assignment)
    if not result.error and not result.key:
        forget(root, result.student, result.assignment)
        return
    record = _as_dict(result)
    if result.error:
        record = {k: record[k] for k in ("format", "student", "assignment")} | {"error": result.error}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{result.student}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def forget(root, student: str, assignment: str) -> None:
    try:
        record_path(root, student, assignment).unlink()
    except (FileNotFoundError, NotADirectoryError):  # there is none
        pass


def _load(root, student: str, assignment: str) -> dict | None:
    """The record of a submission as written, or None (none, or not one of this format)."""
    from course_grading.untrusted import plain_name

    if not (plain_name(student) and plain_name(assignment)):
        return None
    try:
        data = json.loads(record_path(root, student, assignment).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        return None
    return data if (data.get("student"), data.get("assignment")) == (student, assignment) else None


def failure(root, student: str, assignment: str) -> str | None:
    """Why the last grading of a submission failed, where it did (its failure record), else None."""
    data = _load(root, student, assignment)
    error = data.get("error") if data else None
    return error if isinstance(error, str) and error else None


def failures(root) -> dict[tuple[str, str], str]:
    """{(student, assignment): why its last grading failed} of every failure record."""
    found = {}
    for path in sorted((Path(root) / FOLDER).glob("*/*.json")):
        error = failure(root, path.stem, path.parent.name)
        if error is not None:
            found[(path.stem, path.parent.name)] = error
    return found


def read(root, student: str, assignment: str) -> SubmissionResult | None:
    """The recorded result of a submission, or None (no record, a failure record, or one that
    cannot be read)."""
    data = _load(root, student, assignment)
    if data is None or "error" in data:
        return None
    try:
        exercises = [
            ExerciseResult(str(g), float(s), float(m), str(msg), manual is True, pending is True)
            for g, s, m, msg, manual, pending in data["exercises"]
        ]
        flags = [Flag(str(w), str(r)) for w, r in data["flags"]]
        if not (isinstance(data["key"], str) and data["key"]):
            return None
        return SubmissionResult(student, assignment, exercises, flags=flags, key=data["key"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
