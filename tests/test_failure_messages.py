"""What a learner reads of a failing check in nbgrader's feedback: the check's message alone,
with their own line when their code raised, and nothing of the course's internals. The cell
still scores 0. (tests/test_browser.py shows the same in JupyterLab.)"""
from __future__ import annotations

import csv
import html
import re
import shutil

import nbformat
import pytest

from conftest import ROOT
from course_grading.cli import main

pytestmark = pytest.mark.slow

ASSIGNMENT = "03_attention"
# softmax sums over the whole tensor, not along dim; simple_self_attention raises inside itself
BUGGY = {
    "softmax": "def softmax(x, dim=-1):\n    e = torch.exp(x - x.max())\n    return e / e.sum()\n",
    "simple_self_attention": ("def simple_self_attention(X):\n    scores = X @ X.transpose(-2, -1)\n"
                              "    return softmax(scores) @ X[..., :2, :]\n"),
}
INTERNALS = ("_core.py", "course_utils", "Check.close", "def close", "def fail", "self.fail",
             "Traceback (most recent call last)", "site-packages")


def learner_submission():
    """The student release with two buggy exercises and two left unwritten."""
    nb = nbformat.read(ROOT / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb", as_version=4)
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if grade_id in BUGGY:
            cell.source = BUGGY[grade_id]
    return nb


def _errors(page) -> list[str]:
    """The text of every error output of a feedback page, tags dropped and entities decoded."""
    blocks = re.findall(r'<div class="[^"]*output_error[^"]*">(.*?)</div>', page.read_text(encoding="utf-8"), re.S)
    return [html.unescape(re.sub(r"<[^>]+>", "", block)).strip() for block in blocks]


def test_feedback_shows_the_message_and_the_learners_line_only(tmp_path, capsys):
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / ASSIGNMENT, course / "solutions" / ASSIGNMENT)
    folder = course / "submitted" / "ada" / ASSIGNMENT
    folder.mkdir(parents=True)
    nbformat.write(learner_submission(), str(folder / f"{ASSIGNMENT}.ipynb"))

    assert main(["--root", str(course), "autograde", ASSIGNMENT, "--jobs", "1"]) == 0
    assert main(["--root", str(course), "feedback", ASSIGNMENT]) == 0
    capsys.readouterr()

    scores = {r["exercise"]: float(r["score"]) for r in csv.DictReader((course / "reports" / "grades.csv").open())}
    assert scores == {"test_softmax": 0, "test_simple_self_attention": 0,
                      "test_scaled_dot_product_attention": 0, "test_causal_mask": 0}

    page, = (course / "feedback" / "ada" / ASSIGNMENT).glob("*.html")
    errors = _errors(page)
    checks = [e for e in errors if e.startswith("CheckFailed")]
    assert len(checks) == 4, errors  # one per test cell: each is its message, one line
    assert all("\n" not in e for e in checks), checks
    text = "\n".join(checks)
    assert "CheckFailed: softmax: values are off (largest difference" in text
    assert "each row should sum to 1 along dim=-1" in text
    assert ("CheckFailed: simple_self_attention raised RuntimeError:" in text
            and "in line `return softmax(scores) @ X[..., :2, :]`" in text)
    assert "CheckFailed: causal_mask is not implemented yet" in text
    for internal in INTERNALS:
        assert internal not in text, f"a failed check shows {internal!r}"
    # the demo cells that run the buggy code show the learner's own cells, never the checks'
    assert not any("_core.py" in e or "course_utils" in e for e in errors), errors
