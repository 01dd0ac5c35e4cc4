"""Which course a ``course`` command works on: ``--root``, ``COURSE_ROOT``, the instructor's
Jupyter configuration, else the clone the command was installed from; never the folder it was
typed in. A student's submission folder or a folder of downloads holding configuration files,
templates and packages that write a marker when run, imported or rendered: the real ``course``
command, run from there, never runs any of them, and grades when the course is named."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ASSIGNMENT, ROOT, make_course, tiny_notebook
from course_grading.authoring.nbformat_tools import write_notebook
from course_grading.commands import cli
from course_grading.course import course_dir
from course_grading.sandbox import bubblewrap

BIN = Path(sys.executable).parent
MARK = "import os\nopen(os.environ['COURSE_PLANTED_MARKER'], 'a').write({name!r} + '\\n')\n"
TEMPLATE = "{{{{ cycler.__init__.__globals__.os.system('echo {name} >> \"$COURSE_PLANTED_MARKER\"') }}}}\n"
CONFIG_FILES = (
    "nbgrader_config.py",
    "jupyter_config.py",
    "jupyter_server_config.py",
    "jupyter_lab_config.py",
    "jupyter_nbconvert_config.py",
    "ipython_config.py",
    "ipython_kernel_config.py",
    "sitecustomize.py",
    "usercustomize.py",
    "planted_backend.py",
)
PACKAGES = (
    "course_grading",
    "course_utils",
    "nbgrader",
    "traitlets",
    "jupyter_core",
    "multiprocessing",
    "matplotlib",
    "nbconvert",
)
TEMPLATES = (
    "index.html.j2",
    "feedback.html.j2",
    "base.html.j2",
    "lab/index.html.j2",
    "feedback/index.html.j2",
)
needs_sandbox = pytest.mark.skipif(not bubblewrap.available()[0], reason="needs a working bubblewrap sandbox")


def plant(folder: Path) -> Path:
    """Every file in ``folder`` that something could run from the current folder: each writes
    its name to $COURSE_PLANTED_MARKER when run (a Jinja template, when rendered)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in CONFIG_FILES:
        (folder / name).write_text(MARK.format(name=name))
    for name in PACKAGES:
        (folder / name).mkdir(exist_ok=True)
        (folder / name / "__init__.py").write_text(MARK.format(name=name))
    for name in TEMPLATES:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(TEMPLATE.format(name=name))
    (folder / "matplotlibrc").write_text("backend: module://planted_backend\n")
    return folder


@pytest.fixture
def place(tmp_path):
    """A course (not the installed one) with ann's submission, whose folder is planted, and a
    folder of downloads holding the notebook and the same plants; the command's environment
    (no COURSE_ROOT, an empty Jupyter configuration folder)."""
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    submission = plant(course / "submitted" / "ann" / ASSIGNMENT)
    write_notebook(tiny_notebook(), submission / f"{ASSIGNMENT}.ipynb")
    downloads = plant(tmp_path / "Downloads")
    write_notebook(tiny_notebook(), downloads / f"{ASSIGNMENT}.ipynb")
    marker = tmp_path / "marker"
    env = {k: v for k, v in os.environ.items() if k not in ("COURSE_ROOT", "PYTHONPATH")}
    env.update(
        TMPDIR=str(tmp_path),
        MPLBACKEND="Agg",
        COURSE_PLANTED_MARKER=str(marker),
        JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
    )
    return {
        "course": course,
        "submission": submission,
        "downloads": downloads,
        "marker": marker,
        "env": env,
        "tmp": tmp_path,
    }


def course_cmd(place, cwd: Path, *argv, env=None, python=None):
    command = [str(BIN / "course")] if python is None else [sys.executable, "-I", "-c", python]
    done = subprocess.run(
        [*command, *argv],
        cwd=cwd,
        env={**place["env"], **(env or {})},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert not place["marker"].exists(), f"ran from {cwd}: {place['marker'].read_text()}"
    return done


def error_lines(done) -> list[str]:
    """stderr's lines, checked: exactly one error line, no traceback."""
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr, done.stderr
    assert sum(ln.startswith("course: error: ") for ln in lines) == 1, done.stderr
    return lines


def test_from_a_submission_folder_the_installed_course_is_used(place):
    """`course check` and `course autograde --jobs 1` typed in a student's submission folder:
    its nbgrader_config.py is not the course's; the installed course is, and says so."""
    sub = place["submission"]
    done = course_cmd(place, sub, "check", f"{ASSIGNMENT}.ipynb")
    note, error = error_lines(done)
    assert done.returncode == 2
    assert note == (
        f"course: note: using the course {course_dir.PACKAGE_ROOT} (the installed course); "
        f"{sub / 'nbgrader_config.py'} is not used (name another course with "
        "--root DIR or COURSE_ROOT=DIR)"
    )
    assert error.startswith(f"course: error: cannot tell which assignment {sub / ASSIGNMENT}.ipynb")
    done = course_cmd(place, sub, "autograde", ASSIGNMENT, "--jobs", "1", "--no-sandbox")  # no warm start
    assert done.returncode == 2 and error_lines(done)[-1].startswith("course: error: unknown assignment")


NO_CLONE = (
    "import sys; from pathlib import Path; import course_grading.course.course_dir as d; "
    "d.PACKAGE_ROOT = Path(sys.argv.pop(1)); from course_grading.commands.cli import run; run()"
)


def test_without_a_course_the_command_refuses_in_one_line(place):
    """Installed without a clone (a wheel), no --root, no COURSE_ROOT: one line naming --root,
    from a submission folder, a folder of downloads and an empty folder."""
    not_clone = str(place["tmp"] / "site-packages")
    for cwd in (place["submission"], place["downloads"]):
        for argv in (["check", f"{ASSIGNMENT}.ipynb"], ["autograde", "--jobs", "1"], ["release"]):
            done = course_cmd(place, cwd, not_clone, *argv, python=NO_CLONE)
            assert done.returncode == 2 and done.stdout == ""
            assert error_lines(done) == [
                f"course: error: {cwd / 'nbgrader_config.py'} is not used: a course directory is never "
                "taken from the current folder (a submission or a download may be one); name the course "
                "with --root DIR (or COURSE_ROOT=DIR, or c.CourseDirectory.root in "
                "~/.jupyter/nbgrader_config.py)"
            ]
    (place["tmp"] / "empty").mkdir()
    done = course_cmd(place, place["tmp"] / "empty", not_clone, "release", python=NO_CLONE)
    assert done.returncode == 2 and error_lines(done)[0].startswith(
        "course: error: no course directory: name the course with --root DIR"
    )


@pytest.mark.slow
@needs_sandbox
def test_named_course_grades_from_a_planted_folder(place):
    """The course named by --root, COURSE_ROOT or the instructor's Jupyter configuration: from
    the planted submission folder and downloads, check, autograde, feedback and the class
    report work, and nothing planted ran."""
    course, sub, downloads = place["course"], place["submission"], place["downloads"]
    done = course_cmd(place, sub, "--root", str(course), "autograde", "--jobs", "1")
    assert done.returncode == 0, done.stderr
    assert re.search(r"^ann +2/2 +2/2$", done.stdout, re.M) and "course: note" not in done.stderr, done.stdout
    assert (course / "reports" / "class_report.png").stat().st_size > 0
    done = course_cmd(place, sub, "--root", str(course), "feedback")
    assert done.returncode == 0, done.stderr
    assert (course / "feedback" / "ann" / ASSIGNMENT / f"{ASSIGNMENT}.html").is_file()
    done = course_cmd(place, downloads, "check", f"{ASSIGNMENT}.ipynb", env={"COURSE_ROOT": str(course)})
    assert done.returncode == 0 and "total  2/2" in done.stdout, done.stderr
    assert done.stderr.splitlines() == [
        f"course: note: using the course {course} (COURSE_ROOT); "
        f"{downloads / 'nbgrader_config.py'} is not used (name another "
        "course with --root DIR or COURSE_ROOT=DIR)"
    ]
    # the instructor's ~/.jupyter/nbgrader_config.py loads the course's (docs/guides/jupyterhub.md, step 3)
    config_dir = Path(place["env"]["JUPYTER_CONFIG_DIR"])
    config_dir.mkdir()
    (config_dir / "nbgrader_config.py").write_text(
        f"c = get_config()\nload_subconfig({str(course / 'nbgrader_config.py')!r})\n"
    )
    done = course_cmd(place, sub, "check", f"{ASSIGNMENT}.ipynb")
    assert done.returncode == 0 and "total  2/2" in done.stdout and done.stderr == "", done.stderr


@pytest.mark.slow
@needs_sandbox
def test_a_self_learner_checks_a_download_against_the_clone(place):
    """A release notebook downloaded beside planted files, checked from that folder with the
    clone's command: graded against the clone (all FAIL, not written yet), nothing planted ran."""
    name = "01_embeddings"
    shutil.copy(ROOT / "notebooks" / name / f"{name}.ipynb", place["downloads"] / f"{name}.ipynb")
    done = course_cmd(place, place["downloads"], "check", f"{name}.ipynb")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL  test_one_hot" in done.stdout and "total  0/" in done.stdout
    assert done.stderr.splitlines() == [
        f"course: note: using the course {course_dir.PACKAGE_ROOT} (the installed course); "
        f"{place['downloads'] / 'nbgrader_config.py'} is not used (name another course with "
        "--root DIR or COURSE_ROOT=DIR)"
    ]


# --------------------------------------------------------------------------- in-process


@pytest.fixture
def clean(monkeypatch, tmp_path):
    monkeypatch.delenv("COURSE_ROOT", raising=False)
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "jupyter-config"))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", "")
    return tmp_path / "jupyter-config"


def test_the_rule_in_order(clean, tmp_path, monkeypatch):
    one, two, three = (
        make_course(tmp_path / n, {ASSIGNMENT: tiny_notebook()}) for n in ("one", "two", "three")
    )
    monkeypatch.chdir(three)
    assert course_dir.search_root() == (course_dir.PACKAGE_ROOT, "the installed course")
    clean.mkdir()
    (clean / "nbgrader_config.json").write_text('{"CourseDirectory": {"root": "%s"}}' % two)
    assert course_dir.search_root() == (two, f"CourseDirectory.root in {clean / 'nbgrader_config.json'}")
    monkeypatch.setenv("COURSE_ROOT", str(one))
    assert course_dir.search_root() == (one, "COURSE_ROOT")
    assert course_dir.search_root("../two") == (two, "--root")
    monkeypatch.setattr(course_dir, "PACKAGE_ROOT", tmp_path / "not-a-clone")
    monkeypatch.delenv("COURSE_ROOT")
    (clean / "nbgrader_config.json").unlink()
    assert course_dir.search_root() is None


def test_no_configuration_folder_is_relative(clean, tmp_path, monkeypatch):
    """An empty or relative entry of JUPYTER_CONFIG_PATH would be the current folder: skipped."""
    planted = plant(tmp_path / "planted")
    monkeypatch.setenv("COURSE_PLANTED_MARKER", str(tmp_path / "marker"))
    monkeypatch.setenv("JUPYTER_CONFIG_PATH", os.pathsep.join(["", ".", "planted"]))
    monkeypatch.chdir(planted)
    assert course_dir.search_root() == (course_dir.PACKAGE_ROOT, "the installed course")
    monkeypatch.chdir(tmp_path)
    assert course_dir.search_root() == (course_dir.PACKAGE_ROOT, "the installed course")
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize(
    "config, message",
    [
        (
            "c.CourseDirectory.root = '.'\n",
            "is a relative path (.): a course directory is never taken "
            "from the current folder; make it absolute, or use --root DIR",
        ),
        ("raise ValueError('broken')\n", "ValueError: broken"),
    ],
)
def test_an_unusable_jupyter_configuration_is_one_line(clean, capsys, config, message):
    clean.mkdir()
    (clean / "nbgrader_config.py").write_text(config)
    assert cli.main(["release", "--check"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("course: error: ") and message in err, err
    assert str(clean / "nbgrader_config.py") in err


@pytest.fixture
def course_in_tmp(tmp_path):
    return make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})


def test_the_command_works_from_the_course_and_takes_paths_from_where_it_was_typed(
    course_in_tmp, tmp_path, monkeypatch, capsys
):
    """Each command runs with the course directory as its current folder (what libraries read
    from the current folder is the course's); a relative path given is the typed folder's; the
    caller's folder is restored."""
    typed = tmp_path / "typed"
    typed.mkdir()
    monkeypatch.chdir(typed)
    seen = {}

    def fake_export(args, root):
        seen.update(cwd=os.getcwd(), to=args.to, db=args.db)
        return 0

    monkeypatch.setattr(cli, "cmd_export", fake_export)
    argv = ["--root", "../course", "export", "--to", "out.csv", "--db", "sqlite:///grades.db"]
    assert cli.main(argv) == 0
    assert seen == {
        "cwd": str(course_in_tmp),
        "to": str(typed / "out.csv"),
        "db": f"sqlite:///{typed / 'grades.db'}",
    }
    assert os.getcwd() == str(typed)
    monkeypatch.setattr(cli, "cmd_check", lambda args, root: seen.update(path=args.path) or 0)
    assert cli.main(["--root", str(course_in_tmp), "check", "--no-sandbox", "mine.ipynb"]) == 0
    assert seen["path"] == str(typed / "mine.ipynb") and os.getcwd() == str(typed)


def test_the_pipeline_reads_only_the_course_configuration(course_in_tmp, tmp_path, monkeypatch):
    """Called in-process from a planted folder (no `course` command moving to the course), the
    configuration and the nbgrader converters read the course's nbgrader_config.py only."""
    from course_grading.course import nbgrader_setup

    monkeypatch.setenv("COURSE_PLANTED_MARKER", str(tmp_path / "marker"))
    monkeypatch.chdir(plant(tmp_path / "planted"))
    coursedir = nbgrader_setup.course_directory(course_in_tmp)
    assert (
        coursedir.root == str(course_in_tmp)
        and coursedir.config.CourseDirectory.course_id == "attention-course"
    )
    nbgrader_setup.generate(course_in_tmp, ASSIGNMENT, tmp_path / "release", record=False)
    assert (tmp_path / "release" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file()
    assert not (tmp_path / "marker").exists()
