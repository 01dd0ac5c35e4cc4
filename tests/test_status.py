"""``course status``: a self-learner's notebooks, exercise by exercise, graded with the hidden
tests (``course check``'s machinery), cached by the notebook's bytes and the course version."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course_grading.commands import status
from course_grading.commands.cli import main
from course_grading.grading import ledger
from course_grading.reports.results import ExerciseResult, SubmissionResult
from course_utils.notebook import EXERCISES

ROOT = Path(__file__).resolve().parents[1]
COURSE = Path(sys.executable).with_name("course")
# notebook 03 half done: two exercises solved, one with the softmax over the wrong dim, one untouched
BUGGY = "def simple_self_attention(X):\n    return softmax(X @ X.transpose(-2, -1), dim=-2) @ X\n"


def learner_notebook(folder: Path, assignment: str, solved=(), replaced=None) -> Path:
    """The release of ``assignment`` in ``folder``, as a learner would have it: the cells
    ``solved`` written as the solution does, those of ``replaced`` with the given code."""
    release = json.loads((ROOT / "notebooks" / assignment / f"{assignment}.ipynb").read_text())
    source = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    solutions = {
        c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"])
        for c in source["cells"]
        if c["metadata"].get("nbgrader", {}).get("solution")
    }
    for cell in release["cells"]:
        gid = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if gid in solved:
            cell["source"] = "\n".join(
                line
                for line in solutions[gid].splitlines()
                if "### BEGIN SOLUTION" not in line and "### END SOLUTION" not in line
            )
        if replaced and gid in replaced:
            cell["source"] = replaced[gid]
    path = folder / assignment / f"{assignment}.ipynb"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(release))
    return path


@pytest.fixture
def half_done(tmp_path, monkeypatch) -> Path:
    """01 untouched, 03 half done, the others never opened (no file)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    folder = tmp_path / "mine"
    learner_notebook(folder, "01_embeddings")
    learner_notebook(
        folder, "03_attention", solved={"softmax", "causal_mask"}, replaced={"simple_self_attention": BUGGY}
    )
    return folder


def _states(found) -> dict:
    """The state of each exercise the tests grade (written answers are graded by hand)."""
    return {n.assignment: {e.name: e.state for e in n.tested} for n in found}


@pytest.mark.slow
def test_a_half_done_course_without_bubblewrap_then_from_the_cache(half_done, tmp_path, capsys):
    # The command, where bubblewrap is missing (PATH without it): graded all the same, and said so.
    env = {**os.environ, "PATH": str(COURSE.parent), "COLUMNS": "100"}
    assert shutil.which("bwrap", path=env["PATH"]) is None
    run = subprocess.run(
        [str(COURSE), "--root", str(ROOT), "status", "--notebooks", str(half_done)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "WITHOUT a sandbox" in run.stderr and "grading 03_attention" in run.stderr
    assert "grading 01_embeddings" not in run.stderr  # untouched: nothing to grade
    lines = run.stdout.splitlines()
    assert "01_embeddings              · not started" in lines
    assert (
        "03_attention               ✘ 2 of 4 exercises, 3/8 points; written answers: 0 of 2 "
        "answered (graded by hand)"
    ) in lines
    assert any(
        line.startswith("  · written_sqrt_dk ") and line.endswith("not answered yet: graded by hand")
        for line in lines
    )  # in no count or total: the tests never grade it
    assert any(line.startswith("  ✔ softmax ") and line.endswith("2/2") for line in lines)
    assert any(line.startswith("  ✘ simple_self_attention ") for line in lines)
    assert any(
        line.startswith("  · scaled_dot_product_attention ") and line.endswith("not started")
        for line in lines
    )
    assert "LAST dim" in run.stdout  # the check's whole message, hint included
    assert "next: 01_embeddings, encode" in lines
    total = len(EXERCISES)  # every exercise of the course, the ones of notebooks never opened too
    assert f"2 of {total} exercises pass, 1 fail, {total - 3} not started" in lines
    assert "(1 notebook graded, 0 unchanged since the last run" in run.stdout

    # Again, nothing changed: nothing graded, the same answer, from the cache.
    found = status.status(ROOT, half_done)
    assert not any(n.graded for n in found) and [n.assignment for n in found if n.cached] == ["03_attention"]
    assert _states(found)["03_attention"] == {
        "softmax": status.PASSED,
        "simple_self_attention": status.FAILED,
        "scaled_dot_product_attention": status.NOT_STARTED,
        "causal_mask": status.PASSED,
    }
    assert set(_states(found)["01_embeddings"].values()) == {status.NOT_STARTED}
    assert set(_states(found)["05_positional_encoding"].values()) == {status.NOT_STARTED}  # no file
    assert main(["--root", str(ROOT), "status", "--notebooks", str(half_done)]) == 0
    assert "(0 notebooks graded, 1 unchanged since the last run" in capsys.readouterr().out


def _fake_grades(calls: list):
    def grade(root, path, sandboxed):
        calls.append(path.parent.name)
        return SubmissionResult(
            "you",
            path.parent.name,
            [
                ExerciseResult("test_softmax", 2, 2),
                ExerciseResult("test_simple_self_attention", 0, 2, "CheckFailed: off"),
                ExerciseResult(
                    "test_scaled_dot_product_attention", 0, 3, "NotImplementedError: … is not implemented yet"
                ),
                ExerciseResult("test_causal_mask", 1, 1),
            ],
        )

    return grade


def test_what_has_not_changed_is_not_graded_again(half_done, monkeypatch):
    calls: list = []
    monkeypatch.setattr(status, "_grade", _fake_grades(calls))
    notebook = half_done / "03_attention" / "03_attention.ipynb"

    first = status.status(ROOT, half_done)
    assert calls == ["03_attention"]  # 01 is untouched, the others have no file: not graded
    assert _states(first)["03_attention"]["scaled_dot_product_attention"] == status.NOT_STARTED
    assert status.status(ROOT, half_done) and calls == ["03_attention"]  # cached
    ran = json.loads(notebook.read_text())  # only run: outputs and execution counts, same sources
    for n, cell in enumerate(c for c in ran["cells"] if c["cell_type"] == "code"):
        cell["execution_count"] = n + 1
        cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": f"ran {n}\n"}]
        cell["metadata"]["execution"] = {"iopub.status.busy": "2026-11-29T04:00:00.000Z"}
    notebook.write_text(json.dumps(ran))
    assert status.status(ROOT, half_done) and calls == ["03_attention"]  # not graded again
    notebook.write_text(notebook.read_text().replace("dim=-2", "dim=-1"))  # the learner fixed it
    status.status(ROOT, half_done)
    assert calls == ["03_attention"] * 2
    monkeypatch.setattr(ledger, "course_version", lambda root, assignment: "a newer course")
    status.status(ROOT, half_done)
    assert calls == ["03_attention"] * 3  # another course version: graded again
    status.status(ROOT, half_done)
    status.status(ROOT, half_done, use_cache=False)
    assert calls == ["03_attention"] * 4
    flat = half_done / "downloads"  # notebooks downloaded side by side: found there too
    flat.mkdir()
    notebook.rename(flat / "03_attention.ipynb")
    assert _states(status.status(ROOT, flat))["03_attention"]["softmax"] == status.PASSED
    assert calls == ["03_attention"] * 4  # the same bytes: from the cache


def test_a_notebook_that_cannot_be_read_is_said_and_the_rest_shown(half_done, capsys, monkeypatch):
    calls: list = []
    monkeypatch.setattr(status, "_grade", _fake_grades(calls))
    (half_done / "01_embeddings" / "01_embeddings.ipynb").write_text("{not json")
    assert main(["--root", str(ROOT), "status", "--notebooks", str(half_done)]) == 1
    out = capsys.readouterr().out
    assert "01_embeddings              ✘ could not be graded:" in out and "invalid JSON" in out
    assert "03_attention               ✘ 2 of 4 exercises, 3/8 points" in out
    assert "next: 01_embeddings: make it gradable again" in out


def test_milestones_are_reached_when_their_notebooks_all_pass():
    def notebook(assignment, *states):
        return status.NotebookStatus(
            assignment,
            Path(assignment),
            [
                status.ExerciseStatus(f"e{i}", s, 1.0 if s == status.PASSED else 0.0, 1.0)
                for i, s in enumerate(states)
            ],
        )

    found = [
        notebook("01_embeddings", status.PASSED, status.PASSED),
        notebook("02_cosine_similarity", status.PASSED),
        notebook("03_attention", status.PASSED, status.FAILED),
        notebook("04_multi_head_attention", status.NOT_STARTED),
    ]
    assert status.milestones(found) == [
        (status.MILESTONES[0][0], ("01_embeddings", "02_cosine_similarity"), 3, 3),
        (status.MILESTONES[1][0], ("03_attention", "04_multi_head_attention"), 1, 3),
    ]
    text = status.format_status(found)
    assert f"★ {status.MILESTONES[0][0]}: reached" in text
    assert f"☆ {status.MILESTONES[1][0]}: 1 of 3 exercises" in text
    assert "next: 03_attention, e1" in text
