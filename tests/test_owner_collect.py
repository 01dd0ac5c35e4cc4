"""The course's exchange classes in-process (course_grading/exchange.py): who submitted is the
owner of the submission folder, when is its last ctime; what claims another student, or cannot
be a student id, is refused and the rest collected; a release keeps the course's folder the
instructor's.

Submissions belong to real users of this machine (``daemon``, ``bin``, ``nobody``): the test
chowns them, which needs root; it is skipped otherwise, except in CI (``CI`` set), where not
running as root is a failure. tests/test_hub.py walks the same with a hub and a Unix user per
student.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import stat
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from nbgrader.api import Gradebook
from nbgrader.auth import Authenticator
from nbgrader.coursedir import CourseDirectory
from nbgrader.exchange import ExchangeError
from nbgrader.utils import parse_utc
from traitlets.config import Config

import course_grading.course.nbgrader_setup  # noqa: F401  (a new gradebook without running alembic)
from course_grading.exchange import OwnerCollect, SafeReleaseAssignment
from jupyter_browser import require_or_skip
from unix_users import reachable_python, run_as

COURSE_ID = "attention-course"
A = "03_attention"
BACK = "2000-01-01 00:00:00.000000 UTC"  # what a student writes to look early
BACK_EPOCH = 946684800.0


def _require_root():
    if os.geteuid() != 0:
        require_or_skip("the exchange tests give submissions to other users (chown): run as root")


@pytest.fixture()
def users():
    _require_root()
    return {name: pwd.getpwnam(name).pw_uid for name in ("daemon", "bin", "nobody")}


@pytest.fixture()
def course(tmp_path):
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    course.mkdir()
    inbound = exchange / COURSE_ID / "inbound"
    inbound.mkdir(parents=True)
    os.chmod(exchange, 0o1777)
    os.chmod(inbound, 0o3733)
    return course, exchange, inbound


def _config(course: Path, exchange: Path) -> Config:
    config = Config()
    config.CourseDirectory.root = str(course)
    config.CourseDirectory.course_id = COURSE_ID
    config.CourseDirectory.release_directory = "notebooks"
    config.Exchange.root = str(exchange)
    return config


def collect(course: Path, exchange: Path, coursedir_traits: dict | None = None, **traits) -> tuple[bool, str]:
    """OwnerCollect of A, as `nbgrader collect` runs it: (succeeded, its log)."""
    config = _config(course, exchange)
    for key, value in (coursedir_traits or {}).items():
        setattr(config.CourseDirectory, key, value)
    for key, value in traits.items():
        setattr(config.ExchangeCollect, key, value)
    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = A
    action = OwnerCollect(coursedir=coursedir, authenticator=Authenticator(config=config), config=config)
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    action.log = logging.getLogger(f"owner-collect-{id(action)}")
    action.log.addHandler(handler)
    action.log.setLevel(logging.INFO)
    try:
        action.start()
        ok = True
    except ExchangeError:
        ok = False
    return ok, "\n".join(records)


def submit(
    inbound: Path,
    owner: str,
    *,
    claimed: str | None = None,
    name: str | None = None,
    notebook: str = "{}",
    backdate: bool = True,
) -> Path:
    """A submission as a student's process leaves it in inbound/ (folder 0777, files 0644,
    given to ``owner``), claiming ``claimed``, with a back-dated timestamp.txt and mtimes."""
    folder = inbound / (name or f"{claimed or owner}+{A}+{BACK}+r4nd0m")
    folder.mkdir()
    (folder / f"{A}.ipynb").write_text(notebook)
    (folder / "timestamp.txt").write_text(BACK)
    (folder / "submission_secret.txt").write_text("s3cret")
    uid = pwd.getpwnam(owner).pw_uid
    for path in (*folder.iterdir(), folder):
        os.chown(path, uid, -1, follow_symlinks=False)
        if backdate:
            os.utime(path, (BACK_EPOCH, BACK_EPOCH), follow_symlinks=False)
    os.chmod(folder, 0o777)
    return folder


def collected(course: Path) -> dict[str, str]:
    """{student: their collected notebook's text}."""
    return {
        p.name: (p / A / f"{A}.ipynb").read_text()
        for p in sorted((course / "submitted").iterdir())
        if not p.name.startswith(".")
    }


def written_time(course: Path, student: str) -> datetime:
    return parse_utc((course / "submitted" / student / A / "timestamp.txt").read_text())


def test_the_owner_is_the_student_and_the_time_is_the_last_change(users, course):
    course, exchange, inbound = course
    before = datetime.utcnow() - timedelta(seconds=2)  # ctime has ns, the clock may round
    submit(inbound, "daemon", notebook='"daemon\'s"')
    ok, log = collect(course, exchange)
    assert ok, log
    assert collected(course) == {"daemon": '"daemon\'s"'}
    # neither the timestamp.txt, nor the mtimes, nor the name's time: the kernel's ctime
    assert written_time(course, "daemon") >= before, log
    assert written_time(course, "daemon") <= datetime.utcnow() + timedelta(seconds=2)
    assert (course / "submitted" / "daemon" / A / "submission_secret.txt").read_text() == "s3cret"


def test_submitting_as_another_student_is_refused_and_the_victim_keeps_their_own(users, course):
    course, exchange, inbound = course
    submit(inbound, "bin", notebook='"bin\'s own"', name=f"bin+{A}+2026-01-01 10:00:00.000000 UTC+aaaa")
    time.sleep(0.05)
    # daemon submits as bin, later (newer by name and by ctime): nbgrader would take this one
    submit(
        inbound,
        "daemon",
        claimed="bin",
        notebook='"blank"',
        name=f"bin+{A}+2026-01-02 10:00:00.000000 UTC+bbbb",
    )
    ok, log = collect(course, exchange)
    assert not ok, "a refused submission must fail the command"
    assert collected(course) == {"bin": '"bin\'s own"'}
    assert "claims to be submitted by 'bin' but belongs to 'daemon'" in log
    assert "refused" in log and "bbbb" in log


def test_names_that_cannot_be_student_ids_are_refused_the_rest_collected(users, course, tmp_path):
    course, exchange, inbound = course
    secret = tmp_path / "solutions.txt"
    secret.write_text("the instructor's")
    submit(inbound, "daemon", notebook='"fine"')
    submit(inbound, "nobody", name=f"<img src=x onerror=alert(1)>+{A}+{BACK}+cccc")
    bad = os.fsencode(str(inbound)) + b"/\xff\xfe+" + A.encode() + b"+" + BACK.encode() + b"+dddd"
    os.mkdir(bad)
    os.chown(bad, users["nobody"], -1)
    submit(inbound, "nobody", name=f"nobody+{A}+too+many+pluses")
    (inbound / f"nobody+{A}+{BACK}+link").symlink_to(secret.parent)  # a link, not a folder
    os.chown(inbound / f"nobody+{A}+{BACK}+link", users["nobody"], -1, follow_symlinks=False)
    (inbound / f"nobody+{A}+{BACK}+file").write_text("{}")
    os.chown(inbound / f"nobody+{A}+{BACK}+file", users["nobody"], -1)
    submit(inbound, "bin", name=f"bin+01_embeddings+{BACK}+eeee")  # another assignment: not looked at

    ok, log = collect(course, exchange)
    assert not ok
    assert collected(course) == {"daemon": '"fine"'}, log
    assert "'<img src=x onerror=alert(1)>+03_attention" in log
    assert "'\\xff\\xfe+03_attention" in log and "is not valid UTF-8" in log
    assert "is not named <student>+<assignment>+<time>[+<random>]" in log
    assert "is a symbolic link, not a folder" in log
    assert "is not a regular file, not a folder" in log or "not a folder" in log
    assert "eeee" not in log
    assert log.count("refused, nothing of it collected") >= 5


def test_a_file_of_another_user_inside_a_submission_refuses_it(users, course):
    course, exchange, inbound = course
    folder = submit(inbound, "daemon")
    (folder / "planted.py").write_text("")
    os.chown(folder / "planted.py", users["bin"], -1)
    ok, log = collect(course, exchange)
    assert not ok and not (course / "submitted" / "daemon").exists()
    assert "'planted.py', which belongs to another user" in log


def test_links_in_a_submission_are_left_out_and_ignored_files_dropped(users, course, tmp_path):
    course, exchange, inbound = course
    secret = tmp_path / "gradebook-copy.txt"
    secret.write_text("secret")
    folder = submit(inbound, "daemon")
    (folder / "data.txt").symlink_to(secret)
    (folder / "feedback").mkdir()
    (folder / "feedback" / "old.html").write_text("")
    for path in (folder / "data.txt", folder / "feedback", folder / "feedback" / "old.html"):
        os.chown(path, users["daemon"], -1, follow_symlinks=False)
    ok, log = collect(course, exchange)
    assert ok, log
    got = sorted(p.name for p in (course / "submitted" / "daemon" / A).iterdir())
    assert got == [f"{A}.ipynb", "submission_secret.txt", "timestamp.txt"], got
    assert "data.txt is a symbolic link: left out" in log


def test_the_newest_by_the_kernels_clock_is_collected_not_by_the_name(users, course):
    course, exchange, inbound = course
    submit(inbound, "daemon", notebook='"first"', name=f"daemon+{A}+2099-01-01 00:00:00.000000 UTC+ffff")
    time.sleep(0.05)
    submit(inbound, "daemon", notebook='"second"', name=f"daemon+{A}+2001-01-01 00:00:00.000000 UTC+gggg")
    ok, log = collect(course, exchange)
    assert ok, log
    assert collected(course) == {"daemon": '"second"'}


def test_a_due_date_and_before_duedate_use_the_trusted_time(users, course):
    course, exchange, inbound = course
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        gb.update_or_create_assignment(A, duedate=datetime.utcnow() - timedelta(days=1))
    submit(inbound, "daemon", notebook='"late"')  # claims 2000, made now: after the due date
    ok, log = collect(course, exchange, before_duedate=True)
    assert ok, log
    assert collected(course) == {"daemon": '"late"'}
    assert written_time(course, "daemon") > datetime.utcnow() - timedelta(hours=1)


def test_before_duedate_takes_the_last_submission_made_in_time(users, course):
    course, exchange, inbound = course
    submit(inbound, "daemon", notebook='"in time"', name=f"daemon+{A}+2001-01-01 00:00:00.000000 UTC+hhhh")
    time.sleep(0.05)
    due = datetime.utcnow()
    time.sleep(0.05)
    submit(inbound, "daemon", notebook='"late"', name=f"daemon+{A}+2000-01-01 00:00:00.000000 UTC+iiii")
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", COURSE_ID) as gb:
        gb.update_or_create_assignment(A, duedate=due)
    ok, log = collect(course, exchange, before_duedate=True)
    assert ok, log
    assert collected(course) == {"daemon": '"in time"'}
    assert written_time(course, "daemon") <= due


def test_updating_an_earlier_collection_needs_a_later_change(users, course):
    course, exchange, inbound = course
    folder = submit(inbound, "daemon", notebook='"v1"')
    assert collect(course, exchange)[0]
    first = written_time(course, "daemon")
    ok, log = collect(course, exchange, update=True)
    assert ok and "No newer submission to collect" in log, log
    time.sleep(0.05)
    (folder / f"{A}.ipynb").write_text('"v2"')  # edited after submitting: ctime moves on
    os.utime(folder / f"{A}.ipynb", (BACK_EPOCH, BACK_EPOCH))
    ok, log = collect(course, exchange, update=True)
    assert ok, log
    assert collected(course) == {"daemon": '"v2"'}
    assert written_time(course, "daemon") > first


def test_check_owner_off_is_refused(users, course):
    course, exchange, inbound = course
    submit(inbound, "daemon")
    ok, log = collect(course, exchange, check_owner=False)
    assert not ok and "check_owner" in log
    assert not (course / "submitted").exists()


def _as_nobody(code: str) -> str:
    """``code`` run by Python as the user ``nobody``; what it prints."""
    python = reachable_python()
    if python is None:
        require_or_skip("no Python that the user nobody can run")
    done = run_as(pwd.getpwnam("nobody"), [python, "-I", "-c", code], timeout=60, cwd="/")
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.fixture()
def open_tmp():
    """A temporary folder that other users can reach (pytest's own is the owner's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="exchange-test-"))
    os.chmod(folder, 0o755)
    yield folder
    shutil.rmtree(folder)


def test_a_release_keeps_the_course_folder_the_instructors(users, open_tmp):
    course, exchange = open_tmp / "course", open_tmp / "exchange"
    (course / "notebooks" / A).mkdir(parents=True)
    (course / "notebooks" / A / f"{A}.ipynb").write_text('"release"')
    exchange.mkdir(mode=0o777)
    os.chmod(exchange, 0o777)  # as nbgrader's own release leaves it: writable by all, not sticky
    config = _config(course, exchange)
    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = A
    SafeReleaseAssignment(
        coursedir=coursedir, authenticator=Authenticator(config=config), config=config
    ).start()
    mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)  # noqa: E731 - a one-line helper of this test
    top = exchange / COURSE_ID
    assert mode(exchange) == 0o1777
    assert mode(top) == 0o755 and mode(top / "outbound") == 0o755
    assert mode(top / "inbound") & 0o1733 == 0o1733
    released = top / "outbound" / A / f"{A}.ipynb"
    attempts = _as_nobody(_student_attempts(str(exchange), str(top), str(released)))
    assert attempts == "denied denied denied denied", attempts
    assert released.read_text() == '"release"'


def _student_attempts(exchange: str, top: str, released: str) -> str:
    """What a student tries against the release: overwrite it, add to outbound/, rename the
    course folder away (to put one of their own in its place), remove the release's folder."""
    return f"""
import os, shutil
def attempt(f):
    try:
        f()
        return "done"
    except PermissionError:
        return "denied"
print(attempt(lambda: open({released!r}, "w").write("mine")),
      attempt(lambda: os.mkdir({top!r} + "/outbound/mine")),
      attempt(lambda: os.rename({top!r}, {exchange!r} + "/old")),
      attempt(lambda: os.rename({top!r} + "/outbound", {top!r} + "/out")))
"""


def test_a_release_into_a_course_folder_of_another_user_fails(users, tmp_path):
    course, exchange = tmp_path / "course", tmp_path / "exchange"
    (course / "notebooks" / A).mkdir(parents=True)
    (course / "notebooks" / A / f"{A}.ipynb").write_text('"release"')
    (exchange / COURSE_ID / "outbound").mkdir(parents=True)
    os.chmod(exchange, 0o1777)
    for path in (exchange / COURSE_ID, exchange / COURSE_ID / "outbound"):
        os.chown(path, users["nobody"], -1)  # a student made it before the instructor's release
    config = _config(course, exchange)
    coursedir = CourseDirectory(config=config)
    coursedir.assignment_id = A
    with pytest.raises(ExchangeError, match="don't own"):
        SafeReleaseAssignment(
            coursedir=coursedir, authenticator=Authenticator(config=config), config=config
        ).start()


def test_the_course_configuration_selects_these_classes():
    from traitlets.config.loader import PyFileConfigLoader

    from conftest import ROOT

    config = PyFileConfigLoader("nbgrader_config.py", path=str(ROOT)).load_config()
    assert config.ExchangeFactory.collect == "course_grading.exchange.OwnerCollect"
    assert config.ExchangeFactory.release_assignment == "course_grading.exchange.SafeReleaseAssignment"


def test_file_names_in_a_submission_reach_the_log_escaped(users, course):
    course, exchange, inbound = course
    folder = submit(inbound, "daemon")
    forged = "x\x1b]0;owned\x07\x1b[2J\n[OwnerCollect | INFO] Collecting submission: victim"
    (folder / forged).symlink_to("/etc/passwd")  # left out: its name is logged
    (folder / "big\x1b[2K\r.bin").write_bytes(b"0" * 3000)  # over max_file_size: its name is logged
    for path in folder.iterdir():
        os.chown(path, users["daemon"], -1, follow_symlinks=False)
    ok, log = collect(course, exchange, {"max_file_size": 1})
    assert ok, log
    assert all(line.isprintable() for line in log.splitlines()), log
    assert "\\x1b]0;owned\\x07" in log and "is a symbolic link: left out" in log
    assert "\\x1b[2K\\r.bin" in log
    assert not any(line.startswith("[OwnerCollect") for line in log.splitlines())
