"""The ``course`` entry point: when it starts the warm sandbox early, and the real console
script grading one submission end to end."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ASSIGNMENT, make_course, tiny_notebook
from course_utils import _launch, sandbox
from course_utils.course_dir import search_root
from course_utils.nbformat_tools import write_notebook

BIN = Path(sys.executable).parent


def _submit(course: Path, student: str, assignment: str = ASSIGNMENT) -> None:
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True)
    write_notebook(tiny_notebook(), folder / f"{assignment}.ipynb")


def test_single_submission_is_told_from_the_arguments(tmp_path):
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook(), "02_other": tiny_notebook()})
    _submit(course, "ann")
    assert _launch._single_submission(["autograde"], course)
    _submit(course, "bob")
    _submit(course, "bob", "02_other")
    assert not _launch._single_submission(["autograde"], course)
    assert not _launch._single_submission(["autograde", ASSIGNMENT], course)
    assert _launch._single_submission(["autograde", ASSIGNMENT, "--student", "bob"], course)
    assert _launch._single_submission(["autograde", "--student", "ann"], course)
    assert _launch._single_submission(["autograde", "--jobs", "1"], course)
    assert not _launch._single_submission(["autograde", "--jobs", "2", "--csv", "x.csv"], course)


def test_command_and_root(tmp_path):
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    assert _launch._command(["--root", str(course), "check", "x.ipynb"]) == "check"
    assert _launch._command(["-v", "autograde"]) == "autograde"
    assert search_root(_launch._value(["--root", str(course), "check"], "--root")) == course.resolve()


@pytest.mark.parametrize("argv", [["release"], ["feedback"], ["autograde", "--no-sandbox"],
                                  ["export", "--to", "x.csv"]])
def test_no_early_start_for_other_commands(tmp_path, argv, monkeypatch):
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    _submit(course, "ann")
    started = []
    monkeypatch.setattr(sandbox, "start_warm", lambda: started.append(1))
    assert _launch._start_early(["--root", str(course), *argv]) is False
    assert started == []


@pytest.mark.slow
@pytest.mark.skipif(not sandbox.available()[0], reason="needs a working bubblewrap sandbox")
def test_console_script_grades_one_submission(tmp_path):
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    _submit(course, "ann")
    env = {**os.environ, "TMPDIR": str(tmp_path), "MPLBACKEND": "Agg"}
    done = subprocess.run([str(BIN / "course"), "--root", str(course), "autograde"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "ann" in done.stdout and "2/2" in done.stdout
    assert (course / "reports" / "grades.csv").read_text().count("ann") == 1
    assert (course / "reports" / "class_report.png").stat().st_size > 0
    assert not list(tmp_path.glob("course-warm-*"))  # the warm sandbox was closed
    copy = tmp_path / "mine" / f"{ASSIGNMENT}.ipynb"
    copy.parent.mkdir()
    shutil.copy(course / "submitted" / "ann" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", copy)
    done = subprocess.run([str(BIN / "course"), "--root", str(course), "check", str(copy)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "PASS" in done.stdout and "total  2/2" in done.stdout
    assert not list(tmp_path.glob("course-warm-*"))
