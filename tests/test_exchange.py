"""The nbgrader exchange, end to end on one machine, with the real 01_embeddings (NumPy only).

The instructor releases the assignment into a temporary exchange (c.Exchange.root); three
students, each with a home folder of their own, fetch it, work (one solves everything, one half,
one nothing) and submit; the instructor collects, runs `course autograde`, `course feedback`,
releases the feedback, the students fetch it, and `course export` writes the grades. The
instructor's steps run as the `nbgrader` commands an instructor types; the students' steps go
through the same exchange classes in-process (each student by id, as JupyterHub's per-user
servers would be), which keeps the test well under a minute.
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from traitlets.config import Config

from conftest import ROOT
from course_grading.authoring.nbformat_tools import read_notebook
from course_grading.commands.cli import main

pytestmark = pytest.mark.slow

ASSIGNMENT = "01_embeddings"
COURSE_ID = "attention-course"
BIN = Path(sys.executable).parent
# exercise -> points in 01_embeddings, in notebook order
# (and two written answers, graded by hand, that nobody answers here: 0 each, "not answered")
WRITTEN = {"written_lookup_vs_one_hot": 2, "written_one_hot_similarity": 2}
POINTS = {"test_encode": 1, "test_one_hot": 2, "test_embed": 2, **WRITTEN}
WORK = {"ada": "all", "ben": "half", "cy": "none"}
UNANSWERED = {k: 0 for k in WRITTEN}
EXPECTED = {
    "ada": {"test_encode": 1, "test_one_hot": 2, "test_embed": 2, **UNANSWERED},
    "ben": {"test_encode": 1, "test_one_hot": 2, "test_embed": 0, **UNANSWERED},
    "cy": {"test_encode": 0, "test_one_hot": 0, "test_embed": 0, **UNANSWERED},
}


def nbgrader(course: Path, exchange: Path, *args) -> str:
    """An instructor's `nbgrader` command in the course folder; returns its output."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        [str(BIN / "nbgrader"), *args, f"--Exchange.root={exchange}"],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def student_exchange(kind: str, student: str, home: Path, exchange: Path):
    """One of nbgrader's exchange actions (FetchAssignment, Submit, FetchFeedback) for ``student``."""
    from nbgrader.auth import Authenticator
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange import default as exchanges

    config = Config()
    config.CourseDirectory.course_id = COURSE_ID
    config.Exchange.root = str(exchange)
    config.Exchange.assignment_dir = str(home)
    config.Exchange.cache = str(home / ".local" / "share" / "jupyter" / "nbgrader_cache")
    coursedir = CourseDirectory(config=config)
    coursedir.student_id, coursedir.assignment_id = student, ASSIGNMENT
    action = getattr(exchanges, f"Exchange{kind}")(
        coursedir=coursedir, config=config, authenticator=Authenticator(config=config)
    )
    action.start()


def do_work(notebook: Path, how: str) -> None:
    """Fill the code solution cells from the worked solutions: all, the first two, or none."""
    solution = read_notebook(ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb")
    answers = {
        c.metadata["nbgrader"]["grade_id"]: "\n".join(
            ln for ln in c.source.splitlines() if "BEGIN SOLUTION" not in ln and "END SOLUTION" not in ln
        )
        for c in solution.cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    nb = nbformat.read(str(notebook), 4)
    cells = [c for c in nb.cells if c.cell_type == "code" and c.metadata.get("nbgrader", {}).get("solution")]
    for cell in cells[: {"all": len(cells), "half": 2, "none": 0}[how]]:
        cell.source = answers[cell.metadata["nbgrader"]["grade_id"]]
    nbformat.write(nb, str(notebook))


def test_release_fetch_submit_collect_grade_feedback_export(tmp_path, capsys):
    course, exchange, homes = tmp_path / "course", tmp_path / "exchange", tmp_path / "home"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(
        ROOT / "solutions" / ASSIGNMENT,
        course / "solutions" / ASSIGNMENT,
        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"),
    )

    # Instructor: release into notebooks/, then into the exchange.
    assert main(["--root", str(course), "release", ASSIGNMENT]) == 0
    nbgrader(course, exchange, "release_assignment", ASSIGNMENT)
    outbound = exchange / COURSE_ID / "outbound" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    assert outbound.read_bytes() == (course / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_bytes()
    assert "BEGIN SOLUTION" not in outbound.read_text(encoding="utf-8")

    # Students: fetch, work, submit.
    for student, how in WORK.items():
        home = homes / student
        home.mkdir(parents=True)
        student_exchange("FetchAssignment", student, home, exchange)
        mine = home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        assert mine.read_bytes() == outbound.read_bytes()
        do_work(mine, how)
        student_exchange("Submit", student, home, exchange)
    inbound = sorted(p.name.split("+")[0] for p in (exchange / COURSE_ID / "inbound").iterdir())
    assert inbound == sorted(WORK)

    # Instructor: collect, grade, feedback.
    # Its students are all this test's Unix user: collected by name, with nbgrader's own collect
    # (the course's takes each student from the owner: tests/test_owner_collect.py, test_hub.py).
    nbgrader(
        course,
        exchange,
        "collect",
        ASSIGNMENT,
        "--ExchangeFactory.collect=nbgrader.exchange.default.collect.ExchangeCollect",
    )
    for student in WORK:
        collected = course / "submitted" / student / ASSIGNMENT
        assert (collected / f"{ASSIGNMENT}.ipynb").read_bytes() == (
            homes / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        ).read_bytes()
        assert (collected / "timestamp.txt").is_file()

    capsys.readouterr()
    assert main(["--root", str(course), "autograde", ASSIGNMENT, "--jobs", "2"]) == 0
    assert "class report:" in capsys.readouterr().out
    grades = list(csv.DictReader((course / "reports" / "grades.csv").open(encoding="utf-8")))
    got = {s: {r["exercise"]: float(r["score"]) for r in grades if r["student"] == s} for s in WORK}
    assert got == EXPECTED
    assert all(r["message"] for r in grades if float(r["score"]) < POINTS[r["exercise"]])
    report = {r["exercise"]: r for r in csv.DictReader((course / "reports" / "class_report.csv").open())}
    assert {x: (r["attempts"], r["passed"]) for x, r in report.items() if x not in WRITTEN} == {
        "test_encode": ("3", "2"),
        "test_one_hot": ("3", "2"),
        "test_embed": ("3", "1"),
    }
    assert "not implemented yet" in report["test_embed"]["failure_1"]
    assert report["test_embed"]["failure_1_count"] == "2"

    assert main(["--root", str(course), "feedback", ASSIGNMENT]) == 0
    nbgrader(course, exchange, "release_feedback", ASSIGNMENT)

    # Students: fetch their feedback; nobody sees the hidden tests.
    hidden = "BEGIN HIDDEN TESTS"
    for student in WORK:
        student_exchange("FetchFeedback", student, homes / student, exchange)
        pages = list((homes / student / ASSIGNMENT / "feedback").rglob("*.html"))
        assert [p.name for p in pages] == [f"{ASSIGNMENT}.html"], student
        html = pages[0].read_text(encoding="utf-8")
        total = sum(EXPECTED[student].values())
        assert f"{ASSIGNMENT} (Score: {float(total)} / {float(sum(POINTS.values()))})" in html
        assert hidden not in html

    # Instructor: nbgrader's export of the gradebook.
    assert main(["--root", str(course), "export", "--to", str(tmp_path / "export.csv")]) == 0
    exported = {r["student_id"]: float(r["score"]) for r in csv.DictReader((tmp_path / "export.csv").open())}
    assert exported == {s: float(sum(v.values())) for s, v in EXPECTED.items()}
