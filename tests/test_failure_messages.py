"""What a learner reads of a failing check in nbgrader's feedback: the check's message alone,
with their own line when their code raised, and nothing of the course's internals. The cell
still scores 0. (tests/test_browser.py shows the same in JupyterLab.)"""
from __future__ import annotations

import csv
import html
import linecache
import re
import shutil

import nbformat
import pytest

from conftest import ROOT
from course_grading.cli import main
from harness import run_grade_cell

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


@pytest.mark.slow
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


# The learner's attention call is wrong; the error is raised inside the MultiHeadAttention that
# building_blocks.py provides. The message names the learner's line, not the course's.
WRONG_CALL = """
class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        attended = self.self_attn(x, x.transpose(-2, -1), x, mask)[0]
        x = self.norm1(x + self.dropout(attended))
        return self.norm2(x + self.dropout(self.ffn(x)))
"""


def test_the_learners_line_not_the_provided_components(monkeypatch):
    # IPython keeps every cell's source in linecache, so a traceback can quote it; do the same
    # for the "<variant>" the harness compiles the learner's code as
    monkeypatch.setitem(linecache.cache, "<variant>",
                        (len(WRONG_CALL), None, WRONG_CALL.splitlines(True), "<variant>"))
    outcome = run_grade_cell("06_encoder", "test_encoder_layer", WRONG_CALL)
    assert not outcome.passed
    assert outcome.message.endswith(
        "in line `attended = self.self_attn(x, x.transpose(-2, -1), x, mask)[0]`"), outcome.message
