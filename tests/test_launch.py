"""The ``course`` entry point: when it starts the warm sandbox early, and the real console
script grading one submission end to end."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ASSIGNMENT, make_course, tiny_notebook
from course_grading.authoring.nbformat_tools import write_notebook
from course_grading.commands import cli
from course_grading.course.course import Course
from course_grading.sandbox import bubblewrap, warm

BIN = Path(sys.executable).parent


def _submit(course: Path, student: str, assignment: str = ASSIGNMENT) -> None:
    folder = course / "submitted" / student / assignment
    folder.mkdir(parents=True)
    write_notebook(tiny_notebook(), folder / f"{assignment}.ipynb")


def _grades_here(argv, course):
    return cli._grades_here(cli.build_parser().parse_args(argv), Course(course))


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


@pytest.mark.parametrize(
    "argv", [["release"], ["feedback"], ["autograde", "--no-sandbox"], ["export", "--to", "x.csv"]]
)
def test_no_early_start_for_other_commands(tmp_path, argv, monkeypatch):
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    _submit(course, "ann")
    started = []
    monkeypatch.setattr(warm, "ensure_warm", lambda settings: started.append(1))
    args = cli.build_parser().parse_args(["--root", str(course), *argv])
    assert cli._start_early(args, Course(course)) is None
    assert started == []


def test_a_class_starts_its_workers_fork_server_first(tmp_path, monkeypatch):
    """Several submissions, graded in workers: the fork server is started before anything
    else (its imports run beside the command's own), with the module the workers run; one
    submission, or --jobs 1, or --resume: no fork server."""
    from course_grading.grading import autograde, workers

    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    _submit(course, "ann")
    started = []
    monkeypatch.setattr(workers, "start_fork_server", lambda preload: started.append(preload))
    monkeypatch.setattr(warm, "ensure_warm", lambda settings: None)

    def early(*argv):
        return cli._start_early(cli.build_parser().parse_args(["--root", str(course), *argv]), Course(course))

    early("autograde", "--jobs", "2")
    assert started == []
    _submit(course, "bob")
    for argv in (["--jobs", "1"], ["--jobs", "2", "--resume"], ["--jobs", "2", "--student", "bob"]):
        early("autograde", *argv)
        assert started == [], argv
    assert early("autograde", "--jobs", "2") is cli._import_report_side
    assert started == [autograde.WORKER_PRELOAD] == [cli.GRADING_MODULES]


@pytest.mark.slow
@pytest.mark.skipif(not bubblewrap.available()[0], reason="needs a working bubblewrap sandbox")
def test_console_script_grades_one_submission(tmp_path):
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    _submit(course, "ann")
    env = {**os.environ, "TMPDIR": str(tmp_path), "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [str(BIN / "course"), "--root", str(course), "autograde"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "ann" in done.stdout and "2/2" in done.stdout
    assert (course / "reports" / "grades.csv").read_text().count("ann") == 1
    assert (course / "reports" / "class_report.png").stat().st_size > 0
    assert not list(tmp_path.glob("course-warm-*"))  # the warm sandbox was closed
    copy = tmp_path / "mine" / f"{ASSIGNMENT}.ipynb"
    copy.parent.mkdir()
    shutil.copy(course / "submitted" / "ann" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", copy)
    done = subprocess.run(
        [str(BIN / "course"), "--root", str(course), "check", str(copy)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "PASS" in done.stdout and "total  2/2" in done.stdout
    assert not list(tmp_path.glob("course-warm-*"))


EVIL = "import os\nopen(os.environ['COURSE_EVIL_MARKER'], 'a').write(__name__ + '\\n')\n"


@pytest.mark.slow
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_grading_from_a_folder_holding_another_course_imports_only_the_installed_one(tmp_path, jobs):
    """Run from a folder that holds its own course_utils, course_grading and multiprocessing
    (a student's submission, an old copy of the course): none of them is imported, by the
    command, its fork server, its workers or the kernels; the grades are right."""
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    for student in ("ann", "bob"):
        _submit(course, student)
    here = tmp_path / "elsewhere"
    for package in (
        "course_utils",
        "course_grading",
        "course_grading/sandbox",
        "multiprocessing",
        "nbgrader",
    ):
        (here / package).mkdir(parents=True, exist_ok=True)
        (here / package / "__init__.py").write_text(EVIL)
    marker = tmp_path / "imported"
    env = {**os.environ, "TMPDIR": str(tmp_path), "MPLBACKEND": "Agg", "COURSE_EVIL_MARKER": str(marker)}
    done = subprocess.run(
        [str(BIN / "course"), "--root", str(course), "autograde", "--jobs", jobs, "--no-report"],
        cwd=here,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert not marker.exists(), marker.read_text()
    assert done.returncode == 0, done.stderr
    assert len(re.findall(r"^(ann|bob) +2/2 +2/2$", done.stdout, re.M)) == 2, done.stdout


def test_a_grader_importing_another_copy_of_the_course_grades_nothing(tmp_path, monkeypatch):
    import types

    from course_grading.course.course import Course
    from course_grading.course.nbgrader_setup import GradingRun
    from course_grading.grading import autograde
    from course_grading.sandbox import installed

    assert installed.installed_locations() is not None  # the test runs on an installed course
    installed.verify()
    other = types.ModuleType("course_utils")
    other.__file__ = str(tmp_path / "course_utils" / "__init__.py")
    monkeypatch.setitem(sys.modules, "course_utils", other)
    with pytest.raises(installed.ImportMismatch, match="not the installed course"):
        installed.verify()
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    run = GradingRun(Course(course), str(course / "submitted"))
    result = autograde._grade_task(run, "ann", ASSIGNMENT, True)
    assert result.error and "not the installed course" in result.error and not result.exercises


def test_safe_path_drops_the_current_directory(tmp_path, monkeypatch):
    from course_grading.sandbox.installed import safe_path

    monkeypatch.chdir(tmp_path)
    assert safe_path(["", ".", "relative", str(tmp_path), "/usr/lib/python3"]) == ["/usr/lib/python3"]
