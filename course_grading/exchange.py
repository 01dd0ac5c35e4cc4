"""nbgrader's exchange, with who submitted and when taken from what a student cannot forge.

nbgrader's own exchange (``nbgrader.exchange.default``) learns both from the student: a
submission is a folder ``inbound/<student>+<assignment>+<timestamp>+<random>`` that the
student's own process names, holding a ``timestamp.txt`` that process writes, and
``nbgrader collect`` files it under ``submitted/<student>/`` with that time (its owner check
only warns). A student who submits under another student's id, or writes an earlier time, is
believed; one folder name it cannot parse stops the collection of the whole class.

Where every student's server runs as a Unix user of their own, named as on the hub, the
operating system records what a student cannot set:

- the **owner** of the submission folder: the user whose process created it;
- the **ctime** of the folder and of everything in it: the kernel sets it to the current time
  whenever a file's content, name or metadata changes, and its owner cannot move it back
  (``touch -d`` and ``os.utime`` move mtime back, and ctime forward to now).

``OwnerCollect`` (``c.ExchangeFactory.collect``) files each submission under its owner's name.
It refuses, loudly and copying nothing of it, a submission whose name claims another student,
whose id is not a plain id (``untrusted.plain_name``, valid UTF-8), that is not a real folder,
or that holds a file of another user; the other submissions are collected, and the command
then fails (exit status 1) naming each refused one. The time of a submission is the last change
of anything in it (the latest ctime), read after copying it, so that nothing in the copy is
newer; that time, never the student's, goes into ``submitted/<student>/<assignment>/
timestamp.txt``, where nbgrader's late penalties read it. Files are copied as
``untrusted.copy_tree`` copies them: no link followed, sizes and counts capped.

``SafeReleaseAssignment`` (``c.ExchangeFactory.release_assignment``) keeps the course's folder
in the exchange the instructor's: the exchange root is sticky (``1777``: every server must be
able to write in it, nbgrader checks that, but nobody can rename or remove a folder of another
user there, such as the course folder, to put a release of their own in its place);
``outbound/`` and the course folder are writable by the instructor alone; ``inbound/`` is sticky
too (no student can rename or remove another's submission).
"""

from __future__ import annotations

import datetime
import fnmatch
import os
import pwd
import secrets
import shutil
import stat
import time
from dataclasses import dataclass

from dateutil.tz import gettz
from nbgrader.api import Gradebook, MissingEntry
from nbgrader.exchange.default.collect import ExchangeCollect
from nbgrader.exchange.default.release_assignment import ExchangeReleaseAssignment
from nbgrader.utils import parse_utc

from . import untrusted

TIMESTAMP_FILE = "timestamp.txt"


class Refused(Exception):
    """A submission that is not collected, and why."""


def shown(name: str) -> str:
    """A folder name of the exchange as a message may show it: its bytes as UTF-8 where they
    are, escapes for the rest, quoted (no control character, no bidi override)."""
    text = os.fsencode(name).decode("utf-8", "backslashreplace")
    return (
        "'"
        + "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
        + "'"
    )


def student_id_problem(name: str) -> str | None:
    """Why ``name`` cannot be a student id, or None when it can."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid UTF-8"
    if not untrusted.plain_name(name) or "+" in name:
        return "is not a plain student id"
    return None


@dataclass
class Candidate:
    """An entry of inbound/ that is a submission of the assignment by ``student`` (its owner)."""

    name: str
    student: str
    uid: int
    last_change_ns: int


def last_change(dir_fd: int, name: str, uid: int) -> int:
    """The latest ctime (ns) of folder ``name`` (in ``dir_fd``) and of everything in it.

    Refused when the folder is not a real folder, is not owned by ``uid``, holds anything
    owned by another user, or holds more entries or deeper folders than a submission may."""
    try:
        fd = untrusted.open_folder(name, dir_fd=dir_fd, label=shown(name))
    except untrusted.UntrustedFileError as exc:
        raise Refused(exc.reason) from None
    except OSError as exc:
        raise Refused(f"cannot be read ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if info.st_uid != uid:
            raise Refused(f"changed owner while being collected (uid {info.st_uid})")
        counted = [0]
        return max(info.st_ctime_ns, _latest(fd, uid, "", 0, counted))
    finally:
        os.close(fd)


def _latest(fd: int, uid: int, prefix: str, depth: int, counted: list[int]) -> int:
    latest = 0
    with os.scandir(fd) as entries:
        for entry in entries:
            counted[0] += 1
            if counted[0] > untrusted.MAX_ENTRIES:
                raise Refused(f"holds more than {untrusted.MAX_ENTRIES} files and folders")
            where = prefix + entry.name
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:  # removed meanwhile
                raise Refused(f"changed while being collected ({shown(where)}): collect again") from None
            if info.st_uid != uid:
                raise Refused(f"holds {shown(where)}, which belongs to another user (uid {info.st_uid})")
            latest = max(latest, info.st_ctime_ns)
            if stat.S_ISDIR(info.st_mode):
                if depth + 1 > untrusted.MAX_DEPTH:
                    raise Refused(f"holds folders more than {untrusted.MAX_DEPTH} deep")
                try:
                    sub = untrusted.open_folder(entry.name, dir_fd=fd, label=where)
                except OSError:
                    raise Refused(f"holds {shown(where)}, which cannot be read") from None
                try:
                    latest = max(latest, _latest(sub, uid, where + "/", depth + 1, counted))
                finally:
                    os.close(sub)
    return latest


def owner_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


class OwnerCollect(ExchangeCollect):
    """``nbgrader collect`` that takes the student from the owner of each submission and its
    time from the kernel's ctimes (see the module's docstring)."""

    def _refuse(self, name: str, reason: str) -> None:
        message = f"{shown(name)} in {self.inbound_path} {reason}: refused, nothing of it collected"
        self.log.error(message)
        self.refused.append(message)

    def init_src(self):
        if self.coursedir.course_id == "":
            self.fail("No course id specified. Re-run with --course flag.")
        if not self.check_owner:
            self.fail(
                "OwnerCollect takes each student id from the owner of the submission; it "
                "cannot collect with ExchangeCollect.check_owner = False"
            )
        self.course_path = os.path.join(self.root, self.coursedir.course_id)
        self.inbound_path = os.path.join(self.course_path, "inbound")
        self.refused: list[str] = []
        try:
            self.inbound_fd = untrusted.open_folder(self.inbound_path)
        except OSError as exc:
            self.fail(f"Course not found or not readable: {self.inbound_path} ({exc})")
        assignment = self.coursedir.assignment_id
        wanted = self.coursedir.student_id if self.coursedir.student_id not in ("", "*") else None
        try:
            found = self.candidates(assignment, wanted)
            with Gradebook(self.coursedir.db_url, self.coursedir.course_id) as gb:
                try:
                    self.duedate = gb.find_assignment(assignment).duedate
                except MissingEntry:
                    self.duedate = None
        except BaseException:
            os.close(self.inbound_fd)
            raise
        self.src_records = []
        for student, candidates in sorted(found.items()):
            candidates.sort(key=lambda c: c.last_change_ns, reverse=True)
            chosen = candidates[0]
            if self.duedate is not None and self.before_duedate:
                before = [c for c in candidates if self.utc(c.last_change_ns) <= self.duedate]
                chosen = before[0] if before else chosen
            self.src_records.append(chosen)

    def candidates(self, assignment: str, wanted: str | None) -> dict[str, list[Candidate]]:
        """{student: their submissions of ``assignment``} in inbound/, each checked; what fails
        a check is refused (``self.refused``)."""
        found: dict[str, list[Candidate]] = {}
        for name in sorted(os.listdir(self.inbound_fd)):
            if f"+{assignment}+" not in name:
                continue  # another assignment's
            parts = name.split("+")
            claimed = parts[0]
            if wanted is not None and claimed != wanted:
                continue
            if len(parts) not in (3, 4) or parts[1] != assignment:
                self._refuse(name, "is not named <student>+<assignment>+<time>[+<random>]")
                continue
            problem = student_id_problem(claimed)
            if problem:
                self._refuse(name, f"claims a student id that {problem}")
                continue
            try:
                info = os.stat(name, dir_fd=self.inbound_fd, follow_symlinks=False)
            except OSError as exc:
                self._refuse(name, f"cannot be read ({exc.strerror})")
                continue
            if not stat.S_ISDIR(info.st_mode):
                self._refuse(name, f"is {untrusted.what_is(info.st_mode)}, not a folder")
                continue
            owner = owner_name(info.st_uid)
            if owner != claimed:
                who = repr(owner) if owner else f"uid {info.st_uid}, which has no user name"
                self._refuse(
                    name,
                    f"claims to be submitted by {claimed!r} but belongs to {who} "
                    "(a student submitting as another?)",
                )
                continue
            try:
                when = last_change(self.inbound_fd, name, info.st_uid)
            except Refused as exc:
                self._refuse(name, str(exc))
                continue
            found.setdefault(owner, []).append(Candidate(name, owner, info.st_uid, when))
        return found

    def utc(self, ns: int) -> datetime.datetime:
        """``ns`` as the naive UTC datetime that nbgrader's gradebook compares with."""
        return parse_utc(self.format_time(ns))

    def format_time(self, ns: int) -> str:
        """``ns`` (since the epoch) as nbgrader writes a timestamp.txt."""
        tz = gettz(self.timezone)
        if tz is None:
            self.fail(f"Invalid timezone: {self.timezone}")
        moment = datetime.datetime.fromtimestamp(ns // 10**9, tz).replace(microsecond=ns // 1000 % 10**6)
        return moment.strftime(self.timestamp_format)

    def copy_files(self):
        try:
            if not self.src_records:
                self.log.warning(
                    f"No submissions of '{self.coursedir.assignment_id}' for course "
                    f"'{self.coursedir.course_id}' to collect"
                )
            else:
                self.log.info(
                    f"Processing {len(self.src_records)} submissions of "
                    f"'{self.coursedir.assignment_id}' for course '{self.coursedir.course_id}'"
                )
            for record in self.src_records:
                try:
                    self.collect_one(record)
                except Refused as exc:
                    self._refuse(record.name, str(exc))
        finally:
            os.close(self.inbound_fd)
        if self.refused:
            self.fail(
                f"{len(self.refused)} submission(s) of '{self.coursedir.assignment_id}' refused "
                "(the others were collected):\n" + "\n".join(self.refused)
            )

    def collect_one(self, record: Candidate) -> None:
        student, assignment = record.student, self.coursedir.assignment_id
        dest = self.coursedir.format_path(self.coursedir.submitted_directory, student, assignment)
        updating = os.path.lexists(dest)
        if updating:
            existing = self.existing_time(dest)
            new = self.utc(record.last_change_ns)
            if not (
                (self.update and (existing is None or new > existing))
                or (self.before_duedate and existing != new)
            ):
                what = (
                    "No newer submission to collect"
                    if self.update
                    else "Submission already exists, use --update to update"
                )
                self.log.info(f"{what}: {student} {assignment}")
                return
        parent = os.path.dirname(dest)
        os.makedirs(parent, exist_ok=True)
        staging = os.path.join(parent, f".{assignment}.collecting-{secrets.token_hex(8)}")
        os.mkdir(staging)
        try:
            try:
                left = untrusted.copy_tree(
                    record.name, staging, dir_fd=self.inbound_fd, label=shown(record.name)
                )
            except OSError as exc:
                raise Refused(f"cannot be copied ({exc})") from None
            for item in left:
                self.log.warning(f"{student} {assignment}: {item}: left out")
            try:  # after the copy: no change to what was copied is later than this
                when = max(record.last_change_ns, last_change(self.inbound_fd, record.name, record.uid))
            except Refused:  # gone or changed meanwhile: the moment of collecting bounds it
                when = max(record.last_change_ns, time.time_ns())
            self.prune(staging)
            timestamp = os.path.join(staging, TIMESTAMP_FILE)
            if os.path.lexists(timestamp):
                os.unlink(timestamp)
            with open(timestamp, "x", encoding="utf-8") as fh:
                fh.write(self.format_time(when))
            if updating:
                self.log.info(f"Updating submission: {student} {assignment}")
                if os.path.isdir(dest) and not os.path.islink(dest):
                    shutil.rmtree(dest)
                else:
                    os.unlink(dest)
            else:
                self.log.info(f"Collecting submission: {student} {assignment}")
            os.rename(staging, dest)
            self.log.info(
                f"{student} {assignment}: last changed in the exchange at "
                f"{self.format_time(when)} (written to {TIMESTAMP_FILE})"
            )
        finally:
            if os.path.lexists(staging):
                shutil.rmtree(staging)

    def existing_time(self, dest: str) -> datetime.datetime | None:
        """The time this collect wrote for an earlier copy in ``submitted/`` (None if unreadable)."""
        try:
            return parse_utc(untrusted.read_in(dest, TIMESTAMP_FILE, 1000).decode("utf-8").strip())
        except (OSError, ValueError, OverflowError):
            return None

    def prune(self, folder: str) -> None:
        """Leave out of the copy what nbgrader's collect leaves out: ``CourseDirectory.ignore``,
        files not in ``CourseDirectory.include``, files over ``CourseDirectory.max_file_size``
        (kB). ``folder`` is the collector's own copy: it holds no link."""
        exclude, include = self.coursedir.ignore, self.coursedir.include
        limit = self.coursedir.max_file_size
        for here, folders, files in os.walk(folder):
            for name in list(folders):
                if any(fnmatch.fnmatch(name, g) for g in exclude):
                    shutil.rmtree(os.path.join(here, name))
                    folders.remove(name)
            for name in files:
                path = os.path.join(here, name)
                if any(fnmatch.fnmatch(name, g) for g in exclude) or (
                    include and not any(fnmatch.fnmatch(name, g) for g in include)
                ):
                    os.unlink(path)
                elif limit and os.path.getsize(path) > 1000 * limit:
                    self.log.warning(
                        f"Ignoring file too large {shown(os.path.relpath(path, folder))} "
                        "(see config option CourseDirectory.max_file_size)"
                    )
                    os.unlink(path)


class SafeReleaseAssignment(ExchangeReleaseAssignment):
    """``nbgrader release_assignment`` that keeps the course's folder in the exchange the
    instructor's (see the module's docstring)."""

    def ensure_root(self):
        super().ensure_root()
        mode = os.stat(self.root).st_mode
        if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
            try:
                os.chmod(self.root, stat.S_IMODE(mode) | stat.S_ISVTX)
            except PermissionError:
                self.fail(
                    f"The exchange {self.root} is writable by everyone without the sticky bit: "
                    "any student could rename the course's folder in it and put a release of "
                    f"their own in its place. Ask its owner to run: chmod 1777 {self.root}"
                )
            self.log.warning(
                f"Made the exchange {self.root} sticky (chmod +t): nobody may rename "
                "or remove another user's folder in it"
            )

    def init_dest(self):
        super().init_dest()  # each folder created, or owned by this user: nbgrader checks it
        others = stat.S_IWOTH | (0 if self.coursedir.groupshared else stat.S_IWGRP)
        for path in (self.course_path, self.outbound_path):
            mode = stat.S_IMODE(os.lstat(path).st_mode)
            if mode & others:
                os.chmod(path, mode & ~others)
                self.log.warning(f"{path} was writable by others: no longer")
        mode = stat.S_IMODE(os.lstat(self.inbound_path).st_mode)
        if not mode & stat.S_ISVTX:
            os.chmod(self.inbound_path, mode | stat.S_ISVTX)
