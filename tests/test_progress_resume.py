"""Long class runs: the progress bar (a terminal) or plain lines (a log), and a run that is
interrupted and resumed without grading again what is done (``course_grading.grading.ledger``)."""

from __future__ import annotations

import io
import os
import pty
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ASSIGNMENT, make_course, tiny_notebook
from course_grading.grading import autograde, ledger
from course_grading.grading.progress import Pace, Progress
from course_grading.grading.red_flags import Flag
from course_grading.reports.results import ExerciseResult, SubmissionResult

COURSE = Path(sys.executable).with_name("course")


def result(student, score=2.0, error="", key="k" * 64, assignment=ASSIGNMENT):
    exercises = (
        []
        if error
        else [ExerciseResult("test_double", score, 2.0, "" if score == 2 else "AssertionError: no")]
    )
    return SubmissionResult(
        student,
        assignment,
        exercises,
        error=error,
        flags=[Flag("test_double", "a flag")] if not error else [],
        key=key,
    )


# --------------------------------------------------------------------------- the display


def read_all(fd: int) -> str:
    chunks = []
    while select.select([fd], [], [], 0.2)[0]:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks).decode("utf-8", "replace")


def test_a_terminal_gets_a_bar_with_rate_and_eta():
    master, slave = pty.openpty()
    try:
        with os.fdopen(os.dup(slave), "w", encoding="utf-8") as terminal:
            with Progress(4, stream=terminal, already=1) as shown:
                shown.done(result("ada"))
                shown.done(result("ben", error="no 01_tiny.ipynb in the submission"))
        text = read_all(master)
    finally:
        os.close(master)
        os.close(slave)
    assert "\r" in text and "%|" in text  # one line, redrawn
    assert "3/4" in text and "ETA" in text and "submission" in text  # rate: s/submission or submission/s
    assert "ben 01_tiny ERROR no 01_tiny.ipynb" in text  # an error row is written above the bar
    assert "[2/4]" not in text  # no log lines on a terminal


def test_the_eta_waits_for_a_round_of_workers_and_leaves_out_their_start():
    """20 submissions on 4 workers: the first after 20 s (start-up), then one every 2.5 s
    (each worker 10 s per submission). No ETA before 4 results; then 2.5 s each."""
    now = [0.0]
    pace = Pace(workers=4, clock=lambda: now[0])
    times = [20.0, 20.5, 21.0, 22.5, 25.0]
    rates = []
    for t in times:
        now[0] = t
        pace.done()
        rates.append(pace.rate)
    assert rates[:3] == [None, None, None]
    assert rates[3] == pytest.approx(3 / 2.5) and rates[4] == pytest.approx(4 / 5.0)
    assert (20 - 5) / rates[4] == pytest.approx(18.75)  # the ETA at 5 of 20: about 19 s, not 6 min
    master, slave = pty.openpty()
    try:
        with os.fdopen(os.dup(slave), "w", encoding="utf-8") as terminal:
            with Progress(20, stream=terminal, workers=4) as shown:
                shown.done(result("ada"))
        text = read_all(master)
    finally:
        os.close(master)
        os.close(slave)
    assert "1/20" in text and "ETA ?" in text


def test_a_log_gets_one_plain_line_per_submission():
    log = io.StringIO()
    with Progress(3, stream=log, already=1) as shown:
        shown.done(result("ada"))
        shown.done(result("ben\u202e", error="broken\nnotebook"))
    assert log.getvalue().splitlines() == [
        "[2/3] ada 01_tiny 2/2",
        "[3/3] ben\\u202e 01_tiny ERROR broken\\nnotebook",
    ]


# --------------------------------------------------------------------------- the record


def test_a_record_is_kept_for_a_grade_and_a_failure(tmp_path):
    ledger.write(tmp_path, result("ada"))
    back = ledger.read(tmp_path, "ada", ASSIGNMENT)
    assert (back.exercises, [str(f) for f in back.flags], back.key) == (
        result("ada").exercises,
        ["test_double: a flag"],
        "k" * 64,
    )
    assert ledger.failure(tmp_path, "ada", ASSIGNMENT) is None
    ledger.write(tmp_path, result("ada", error="the worker grading it died (killed by SIGKILL)"))
    assert ledger.read(tmp_path, "ada", ASSIGNMENT) is None  # an error is not a grade
    # but it is recorded: the exports say grading failed, not the earlier grade
    assert ledger.failure(tmp_path, "ada", ASSIGNMENT) == "the worker grading it died (killed by SIGKILL)"
    ledger.write(tmp_path, result("ada"))
    assert ledger.failure(tmp_path, "ada", ASSIGNMENT) is None and ledger.read(tmp_path, "ada", ASSIGNMENT)
    ledger.write(tmp_path, result("ada", key=""))
    assert ledger.read(tmp_path, "ada", ASSIGNMENT) is None  # nor is a result without its key
    ledger.write(tmp_path, result("../ada"))
    assert not list(tmp_path.rglob("*.json"))  # only plain names become file names
    ledger.record_path(tmp_path, "ben", ASSIGNMENT).parent.mkdir(parents=True, exist_ok=True)
    ledger.record_path(tmp_path, "ben", ASSIGNMENT).write_text('{"format": 1, "key": ')  # cut short
    assert ledger.read(tmp_path, "ben", ASSIGNMENT) is None


def test_a_record_keeps_written_answers_waiting_not_zero(tmp_path):
    """A resumed run shows a written answer graded before the interruption as it was: waiting
    for the instructor (``manual/2``), not 0/2 in the table, grades.csv and the class report."""
    waiting = SubmissionResult(
        "ada",
        ASSIGNMENT,
        [
            ExerciseResult("test_double", 2.0, 2.0),
            ExerciseResult("written_double", 0.0, 2.0, "needs manual grading", manual=True, pending=True),
            ExerciseResult("written_two", 1.5, 2.0, "graded by hand", manual=True),
        ],
        key="k" * 64,
    )
    ledger.write(tmp_path, waiting)
    back = ledger.read(tmp_path, "ada", ASSIGNMENT)
    assert back.exercises == waiting.exercises
    assert [e.shown() for e in back.exercises] == ["2/2", "manual/2", "1.5/2"]
    assert back.total() == "3.5/6 +2 manual"


def test_the_key_follows_the_submission_the_course_and_the_gradebook(tmp_path):
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    folder = tmp_path / "staged"
    folder.mkdir()
    (folder / f"{ASSIGNMENT}.ipynb").write_text("{}")
    (folder / "timestamp.txt").write_text("2026-11-26 09:00:00")
    key = ledger.submission_key(course, ASSIGNMENT, folder, "sqlite:///a.db")
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    assert ledger.submission_key(course, ASSIGNMENT, copy, "sqlite:///a.db") == key
    assert ledger.submission_key(course, ASSIGNMENT, copy, "sqlite:///b.db") != key
    assert (
        ledger.submission_key(course, ASSIGNMENT, copy, "sqlite:///a.db", "sandbox=False audit=True") != key
    )
    (copy / "timestamp.txt").write_text("2026-11-27 09:00:00")  # submitted again, later
    assert ledger.submission_key(course, ASSIGNMENT, copy, "sqlite:///a.db") != key
    (course / "nbgrader_config.py").write_text((course / "nbgrader_config.py").read_text() + "\n# changed\n")
    assert ledger.submission_key(course, ASSIGNMENT, folder, "sqlite:///a.db") != key
    before = ledger.course_version(course, ASSIGNMENT)
    source = course / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    source.write_text(source.read_text().replace("double(2) == 4", "double(3) == 6"))
    assert ledger.course_version(course, ASSIGNMENT) != before


def _tasks(course, students):
    return [(str(course), {}, s, ASSIGNMENT, True) for s in students]


def test_an_interrupted_run_keeps_what_was_graded_and_says_how_much(tmp_path, monkeypatch):
    graded = []

    def fake_task(root, overrides, student, assignment, known):
        if student == "cy":
            raise KeyboardInterrupt  # Ctrl-C while cy is graded
        graded.append(student)
        return result(student, error="broken" if student == "ben" else "")

    monkeypatch.setattr(autograde, "_grade_task", fake_task)
    with pytest.raises(autograde.Interrupted) as stop:
        autograde._grade_all(_tasks(tmp_path, ["ada", "ben", "cy", "dee"]), 1, False, ledger_root=tmp_path)
    assert (stop.value.graded, stop.value.total) == (2, 4)
    assert graded == ["ada", "ben"]
    recorded = sorted(p.stem for p in (tmp_path / ledger.FOLDER / ASSIGNMENT).glob("*.json"))
    assert recorded == ["ada", "ben"]  # ada as done, ben's error as a failure, cy and dee not at all
    assert ledger.read(tmp_path, "ada", ASSIGNMENT) and ledger.read(tmp_path, "ben", ASSIGNMENT) is None
    assert ledger.failure(tmp_path, "ben", ASSIGNMENT) == "broken"


def test_a_result_that_comes_back_after_a_stop_is_not_kept(tmp_path, monkeypatch):
    """SIGTERM (or Ctrl-C) caught below the dispatcher (a kernel interrupted with the grader
    fails a cell, not the grading): the submission's result is not kept as done."""

    def fake_task(root, overrides, student, assignment, known):
        if student == "ben":
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except KeyboardInterrupt:
                pass  # swallowed by something below
        return result(student)

    monkeypatch.setattr(autograde, "_grade_task", fake_task)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(autograde.Interrupted) as stop:
        autograde._grade_all(_tasks(tmp_path, ["ada", "ben", "cy"]), 1, False, ledger_root=tmp_path)
    assert (stop.value.graded, stop.value.total) == (1, 3)
    assert [p.stem for p in (tmp_path / ledger.FOLDER / ASSIGNMENT).glob("*.json")] == ["ada"]
    assert signal.getsignal(signal.SIGTERM) is before  # the handlers before are back


# --------------------------------------------------------------------------- a real class

STUDENTS = ["ada", "ben", "cy", "dee", "eve"]


def _submit(course: Path, student: str, solution: str) -> Path:
    import nbformat

    folder = course / "submitted" / student / ASSIGNMENT
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{ASSIGNMENT}.ipynb"
    nbformat.write(tiny_notebook(solution=solution), path)
    return path


def _records(course: Path) -> dict[str, int]:
    return {p.stem: p.stat().st_mtime_ns for p in (course / ledger.FOLDER / ASSIGNMENT).glob("*.json")}


def _autograded(course: Path, student: str) -> Path:
    return course / "autograded" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"


def _graded_lines(err: str) -> set[str]:
    return {line.split()[1] for line in err.splitlines() if line.startswith("[")}


@pytest.mark.slow
def test_a_class_run_interrupted_with_ctrl_c_resumes_without_grading_again(tmp_path):
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    right = "def double(x):\n    return 2 * x\n"
    for student in STUDENTS:
        _submit(course, student, right)
    command = [str(COURSE), "--root", str(course), "autograde", "--jobs", "2", "--no-audit", "--no-report"]
    env = {**os.environ, "COLUMNS": "120"}

    # 1. On a terminal (a pty): the bar; Ctrl-C (SIGINT to the process group) once one is graded.
    master, slave = pty.openpty()
    run = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True)
    os.close(slave)
    shown: list[bytes] = []
    reader = threading.Thread(target=lambda: _drain(master, shown), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300  # only a hang fails this
    while not _records(course) and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(run.pid, signal.SIGINT)
    assert run.wait(120) == 130
    reader.join(10)
    os.close(master)
    screen = b"".join(shown).decode("utf-8", "replace")
    assert "%|" in screen and "ETA" in screen, screen[-2000:]
    assert "course: interrupted after" in screen and "--resume" in screen, screen[-2000:]
    done = _records(course)
    assert 1 <= len(done) < len(STUDENTS), screen[-2000:]
    times = {s: _autograded(course, s).stat().st_mtime_ns for s in done}

    # 2. Resumed, into a log (not a terminal): plain lines, only for what was not graded.
    again = subprocess.run(command + ["--resume"], capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"resuming: {len(done)} of {len(STUDENTS)} submissions already graded" in again.stderr
    assert _graded_lines(again.stderr) == set(STUDENTS) - set(done), again.stderr[-3000:]
    assert "%|" not in again.stderr
    assert {s: _autograded(course, s).stat().st_mtime_ns for s in done} == times  # not graded again
    for student in STUDENTS:  # the table and grades.csv hold the whole class
        assert f"\n{student} " in again.stdout, again.stdout
    assert (course / "reports" / "grades.csv").read_text().count("test_double") == len(STUDENTS)

    # 3. A resubmission, and a grade whose autograded notebook is gone: those two are graded
    #    again; an error row is never done.
    _submit(course, "ben", "def double(x):\n    return x * 3\n")
    shutil.rmtree(course / "autograded" / "cy")
    (course / "submitted" / "dee" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").write_text("{not json")
    third = subprocess.run(command + ["--resume"], capture_output=True, text=True, env=env, timeout=300)
    assert third.returncode == 1, third.stderr[-3000:]  # dee's is an error row
    assert _graded_lines(third.stderr) == {"ben", "cy", "dee"}, third.stderr[-3000:]
    assert "ben      0/2" in third.stdout
    assert {"ben", "cy"} <= set(_records(course))
    # dee's error row is recorded as a failure (for the exports), never as done
    assert ledger.read(course, "dee", ASSIGNMENT) is None and "JSON" in ledger.failure(
        course, "dee", ASSIGNMENT
    )


def _drain(fd: int, into: list) -> None:
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            return
        if not data:
            return
        into.append(data)


def test_a_record_that_cannot_be_written_costs_only_a_regrade(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(
        autograde, "_grade_task", lambda root, overrides, student, assignment, known: result(student)
    )
    (tmp_path / "reports").write_text("a file where the records' folder would be")
    graded = autograde._grade_all(_tasks(tmp_path, ["ada", "ben"]), 1, False, ledger_root=tmp_path)
    assert [r.student for r in graded] == ["ada", "ben"]
    assert capsys.readouterr().err.count("cannot record what was graded") == 1
