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
from course_grading import cli
from course_grading.sandbox import bubblewrap, warm
from course_grading.nbformat_tools import write_notebook

BIN = Path(sys.executable).parent


def _submit(course: Path, student: str, assignment: str = ASSIGNMENT) -> None:
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True)
    write_notebook(tiny_notebook(), folder / f"{assignment}.ipynb")


def _grades_here(argv, course):
    return cli._grades_here(cli.build_parser().parse_args(argv), course)


def test_single_submission_is_told_from_the_arguments(tmp_path):
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook(), "02_other": tiny_notebook()})
    _submit(course, "ann")
    assert _grades_here(["autograde"], course)
    _submit(course, "bob")
    _submit(course, "bob", "02_other")
    assert not _grades_here(["autograde"], course)
    assert not _grades_here(["autograde", ASSIGNMENT], course)
    assert _grades_here(["autograde", ASSIGNMENT, "--student", "bob"], course)
    assert _grades_here(["autograde", "--student", "ann"], course)
    assert _grades_here(["autograde", "--jobs", "1"], course)
    assert not _grades_here(["autograde", "--jobs", "2", "--csv", "x.csv"], course)
    assert _grades_here(["--root", str(course), "check", "x.ipynb"], course)
    assert not _grades_here(["check", "--no-sandbox", "x.ipynb"], course)


@pytest.mark.parametrize("argv", [["release"], ["feedback"], ["autograde", "--no-sandbox"],
                                  ["export", "--to", "x.csv"]])
def test_no_early_start_for_other_commands(tmp_path, argv, monkeypatch):
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    _submit(course, "ann")
    started = []
    monkeypatch.setattr(warm, "ensure_warm", lambda settings: started.append(1))
    args = cli.build_parser().parse_args(["--root", str(course), *argv])
    assert cli._start_early(args, course) is False
    assert started == []


@pytest.mark.slow
@pytest.mark.skipif(not bubblewrap.available()[0], reason="needs a working bubblewrap sandbox")
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
