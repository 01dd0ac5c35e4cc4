"""The ``course`` command, in-process: bad input gets one clear line and exit status 2 (and the
input file is left as it was); ``course start`` builds the right JupyterLab command."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conftest import ASSIGNMENT, make_course, nbgrader_meta, tiny_notebook
from course_grading.authoring.nbformat_tools import write_notebook
from course_grading.commands import cli, handlers

OTHER = "02_other"


def other_notebook():
    """A notebook of a second assignment: different exercises, the same shape."""
    nb = tiny_notebook(
        solution="def triple(x):\n    ### BEGIN SOLUTION\n    return 3 * x\n    ### END SOLUTION\n",
        test="assert triple(1) == 3\n",
    )
    nb.cells[1].metadata = nbgrader_meta("triple", solution=True)
    nb.cells[2].metadata = nbgrader_meta("test_triple", grade=True, points=1)
    return nb


@pytest.fixture
def course(tmp_path) -> Path:
    return make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook(), OTHER: other_notebook()})


def run_error(capsys, *argv) -> str:
    """Run ``course argv``; assert exit status 2 and exactly one stderr line; return it."""
    assert cli.main(list(argv)) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("course: error: ") and "Traceback" not in captured.err
    return lines[0]


def test_check_missing_file(course, capsys, tmp_path):
    line = run_error(capsys, "--root", str(course), "check", str(tmp_path / "absent.ipynb"))
    assert "absent.ipynb: no such file" in line


def test_check_directory_without_notebooks(course, capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    assert "holds no notebook" in run_error(capsys, "--root", str(course), "check", str(tmp_path / "empty"))


@pytest.mark.parametrize(
    "content, expected",
    [
        ('{"cells": [', "invalid JSON"),
        ("", "invalid JSON"),
        ('{"hello": "world"}', "not a Jupyter notebook"),
        ("[1, 2, 3]", "not a Jupyter notebook"),
        ('{"cells": [], "nbformat": 3}', "not a Jupyter notebook"),
    ],
)
def test_check_corrupt_notebook(course, capsys, tmp_path, content, expected):
    path = tmp_path / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    path.parent.mkdir()
    path.write_text(content)
    assert expected in run_error(capsys, "--root", str(course), "check", str(path))
    assert path.read_text() == content


def test_check_binary_file(course, capsys, tmp_path):
    path = tmp_path / f"{ASSIGNMENT}.ipynb"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert "not UTF-8" in run_error(capsys, "--root", str(course), "check", str(path))
    assert path.read_bytes() == b"\xff\xfe\x00garbage"


def test_check_notebook_of_another_assignment(course, capsys, tmp_path):
    path = tmp_path / f"{ASSIGNMENT}.ipynb"  # named like 01_tiny, but holds 02_other's cells
    write_notebook(other_notebook(), path)
    before = path.read_bytes()
    line = run_error(capsys, "--root", str(course), "check", str(path))
    assert f"is not a notebook of assignment {ASSIGNMENT}" in line and "triple" in line
    assert path.read_bytes() == before


def test_check_notebook_of_no_assignment(course, capsys, tmp_path):
    path = tmp_path / "mine.ipynb"
    nb = tiny_notebook()
    for cell in nb.cells[1:]:
        cell.metadata = {}
    write_notebook(nb, path)
    assert "no nbgrader cells" in run_error(capsys, "--root", str(course), "check", str(path))


def test_check_unrecognisable_notebook(course, capsys, tmp_path):
    path = tmp_path / "mine.ipynb"
    nb = other_notebook()
    nb.cells[1].metadata = nbgrader_meta("quadruple", solution=True)
    nb.cells[2].metadata = nbgrader_meta("test_quadruple", grade=True, points=1)
    write_notebook(nb, path)
    assert "cannot tell which assignment" in run_error(capsys, "--root", str(course), "check", str(path))


def test_unknown_assignment(course, capsys):
    assert "unknown assignment 'nope'" in run_error(capsys, "--root", str(course), "release", "nope")
    assert "unknown assignment 'nope'" in run_error(capsys, "--root", str(course), "autograde", "nope")


def test_autograde_without_submissions(course, capsys):
    assert "no submissions to grade" in run_error(capsys, "--root", str(course), "autograde")
    said = run_error(capsys, "--root", str(course), "autograde", "01_tiny", "--student", "nobody")
    assert "no submissions of 'nobody' for 01_tiny to grade" in said, said


def test_feedback_before_autograde(course, capsys):
    assert "run `course autograde` first" in run_error(capsys, "--root", str(course), "feedback")


def test_not_a_course_directory(capsys, tmp_path):
    assert "no nbgrader_config.py" in run_error(capsys, "--root", str(tmp_path), "release")


def test_bad_jobs_value_is_a_usage_error(course, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--root", str(course), "autograde", "--jobs", "0"])
    assert info.value.code == 2 and "positive whole number" in capsys.readouterr().err


def test_root_is_never_found_from_the_current_directory(course, monkeypatch, tmp_path, capsys):
    """A folder holding nbgrader_config.py (a submission, a download) does not become the root:
    the installed course does, or, without one, the command refuses and names --root."""
    from course_grading.course import course_dir

    (course / "solutions" / ASSIGNMENT / "deep").mkdir()
    monkeypatch.chdir(course / "solutions" / ASSIGNMENT / "deep")
    monkeypatch.delenv("COURSE_ROOT", raising=False)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "no-jupyter-config"))
    assert cli.find_root() == course_dir.PACKAGE_ROOT != course.resolve()
    assert f"{course / 'nbgrader_config.py'} is not used" in capsys.readouterr().err  # a note
    monkeypatch.setattr(course_dir, "PACKAGE_ROOT", tmp_path / "not-a-clone")
    line = run_error(capsys, "release")
    assert f"{course / 'nbgrader_config.py'} is not used" in line and "--root DIR" in line


def test_start_runs_jupyter_lab_on_the_first_notebook(course, monkeypatch):
    first = course / handlers.FIRST_NOTEBOOK
    first.parent.mkdir(parents=True)
    shutil.copy(course / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", first)
    calls = []
    monkeypatch.setattr(handlers.subprocess, "call", lambda command, cwd: calls.append((command, cwd)) or 0)
    assert cli.main(["--root", str(course), "start", "--no-browser", "--port", "8899"]) == 0
    ((command, cwd),) = calls
    assert Path(command[0]).name == "jupyter" and command[1] == "lab"
    assert handlers.FIRST_NOTEBOOK in command and "--no-browser" in command and "--port=8899" in command
    assert f"--ServerApp.root_dir={course.resolve()}" in command and cwd == course.resolve()


# --------------------------------------------------------------------------- links and special files


def test_check_refuses_links_fifos_and_huge_files(course, capsys, tmp_path):
    import os

    real = tmp_path / "real" / f"{ASSIGNMENT}.ipynb"
    real.parent.mkdir()
    write_notebook(tiny_notebook(), real)
    link = tmp_path / f"{ASSIGNMENT}.ipynb"
    link.symlink_to(real)
    assert f"{link} is a symbolic link: not graded" in run_error(
        capsys, "--root", str(course), "check", str(link)
    )
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / f"{ASSIGNMENT}.ipynb").symlink_to(real)
    assert "is a symbolic link: not graded" in run_error(capsys, "--root", str(course), "check", str(folder))
    linked_folder = tmp_path / "linked"
    linked_folder.symlink_to(real.parent)
    assert "is a symbolic link: not graded" in run_error(
        capsys, "--root", str(course), "check", str(linked_folder)
    )
    fifo = tmp_path / "fifo" / f"{ASSIGNMENT}.ipynb"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    assert "is a named pipe (FIFO): not graded" in run_error(
        capsys, "--root", str(course), "check", str(fifo)
    )
    huge = tmp_path / "huge" / f"{ASSIGNMENT}.ipynb"
    huge.parent.mkdir()
    with huge.open("wb") as fh:
        fh.truncate(40 * 2**20)  # sparse: no 40 MB written
    assert "is over 32 MB: not graded" in run_error(capsys, "--root", str(course), "check", str(huge))


# --------------------------------------------------------------------------- a broken gradebook


@pytest.fixture(params=["garbage", "folder"])
def broken_gradebook(course, request):
    """The course with a gradebook.db that is not a database, or a folder."""
    db = course / "gradebook.db"
    if request.param == "garbage":
        db.write_bytes(b"this is not a database\n" * 300)
    else:
        db.mkdir()
    (course / "submitted" / "ann" / ASSIGNMENT).mkdir(parents=True)
    write_notebook(tiny_notebook(), course / "submitted" / "ann" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    (course / "autograded" / "ann" / ASSIGNMENT).mkdir(parents=True)
    return course


@pytest.mark.parametrize("command", ["autograde", "feedback", "export", "report", "release"])
def test_broken_gradebook_is_one_line(broken_gradebook, capsys, command):
    line = run_error(capsys, "--root", str(broken_gradebook), command)
    assert f"cannot use the gradebook sqlite:///{broken_gradebook / 'gradebook.db'}: " in line
    assert line.endswith(("file is not a database", "unable to open database file")), line


def test_warnings_stay_quiet_while_imports_run_in_a_thread(monkeypatch):
    """The command ignores warnings (the course's internals) unless -v; the trusted side's
    imports run meanwhile in a thread, where libraries enter and leave warnings.catch_warnings
    (matplotlib's, 35 times), which is process-wide and restores on exit the filters it found:
    those must already ignore warnings when the thread starts, or a learner's `course check`
    prints SQLAlchemy's warnings."""
    import threading
    import warnings

    from course_grading.commands import cli

    seen = {}
    done = threading.Event()

    def ignoring() -> bool:
        return (
            bool(warnings.filters)
            and warnings.filters[0][0] == "ignore"
            and warnings.filters[0][2] is Warning
        )

    def importer():
        seen["thread"] = ignoring()  # what a catch_warnings entered now would restore
        with warnings.catch_warnings():
            pass
        seen["after"] = ignoring()
        done.set()

    def command(args, root):
        assert done.wait(10)
        seen["command"] = ignoring()
        return 0

    monkeypatch.setattr(cli, "_start_early", lambda args, root: importer)
    monkeypatch.setattr(cli, "cmd_check", command)
    root = Path(__file__).resolve().parents[1]
    assert cli.main(["--root", str(root), "check", "nothing.ipynb"]) == 0
    assert seen == {"thread": True, "after": True, "command": True}
    assert not ignoring()  # the caller's filters are back


def test_workers_ignore_warnings_when_the_command_does_whatever_libraries_put_in_front():
    """The grading workers are told to ignore warnings when the command does. Libraries
    imported after the command's "ignore everything" (nbgrader, NumPy) put narrower filters of
    their own in front of it; judged by the first filter alone, the workers were not told, and
    nbgrader's SQLAlchemy warnings (12 of them, 3 lines each) filled the instructor's terminal
    during `course autograde`."""
    import warnings

    from course_grading.grading import autograde

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.filterwarnings("ignore", message="numpy.ndarray size changed")
        warnings.filterwarnings("default", category=DeprecationWarning, module="nbgrader")
        assert autograde._warnings_ignored()
    with warnings.catch_warnings():  # -v: the command shows warnings, and so do its workers
        warnings.resetwarnings()
        warnings.filterwarnings("ignore", message="numpy.ndarray size changed")
        warnings.simplefilter("ignore", DeprecationWarning)
        assert not autograde._warnings_ignored()


@pytest.mark.parametrize(
    "module", ["course_grading.reports.class_report", "course_grading.grading.autograde"]
)
def test_no_process_of_the_course_builds_jsonschemas_iri_grammar(module):
    """jsonschema imports rfc3987_syntax, when installed, for its "iri" format check, which
    notebook validation never uses; the package keeps it out (0.7 s of CPU in every process
    that imports nbformat: the command, its fork server). Whichever module comes first: the
    command's first import, class_report, imported nbgrader before the guard, and the fork
    server's, autograde, too."""
    import subprocess
    import sys

    code = f"import sys, {module}; print('rfc3987_syntax' in sys.modules and sys.modules['rfc3987_syntax'] is not None)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False", f"importing {module} built rfc3987_syntax's grammar"


def test_autograde_refuses_without_a_sandbox(course, capsys, monkeypatch):
    """Where bubblewrap does not run, grading a class is refused in one line that says how to fix
    it; only --no-sandbox grades unsandboxed (and says so)."""
    from course_grading.commands import doctor
    from course_grading.sandbox import bubblewrap

    submission = course / "submitted" / "alice" / ASSIGNMENT
    submission.mkdir(parents=True)
    write_notebook(tiny_notebook(), submission / f"{ASSIGNMENT}.ipynb")
    monkeypatch.setattr(bubblewrap, "available", lambda: (False, "bubblewrap (bwrap) is not installed"))
    monkeypatch.setenv("PATH", str(course))  # no bwrap on it
    line = run_error(capsys, "--root", str(course), "autograde", "--jobs", "1")
    # the fix `course doctor` prints, for this machine (test_doctor runs it)
    assert "bubblewrap (bwrap) is not installed" in line and f"To fix it: {bubblewrap.fix()};" in line
    assert bubblewrap.fix() == doctor.check_bubblewrap().fix != ""
    assert "--no-sandbox" in line


def test_a_partial_regrade_says_its_own_flags_and_the_class_files(course, capsys, monkeypatch):
    """Regrading one student prints that run's flags ("no red flags in this run"), and says
    that flags.csv, which keeps the whole class, still holds another submission's flag."""
    from course_grading.grading import autograde as grading
    from course_grading.grading.red_flags import Flag
    from course_grading.reports import class_report
    from course_grading.reports.results import SubmissionResult

    ben = SubmissionResult("ben", ASSIGNMENT)
    cy = SubmissionResult("cy", ASSIGNMENT, flags=[Flag("cell 3", "reads or writes the gradebook")])
    monkeypatch.setattr(grading, "autograde", lambda *a, **k: [ben])
    monkeypatch.setattr(class_report, "whole_class", lambda *a, **k: [ben, cy])
    argv = ["--root", str(course), "autograde", ASSIGNMENT, "--student", "ben", "--no-report"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "no red flags in this run" in out and "1 other submission of the class flagged before" in out
    assert "cy" in (course / "reports" / "flags.csv").read_text()
