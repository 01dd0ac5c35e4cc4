"""``HideHiddenOutputs``: feedback shows what the visible tests said, nothing of the hidden ones.

Run by ``GenerateFeedback`` before nbgrader's ``ClearHiddenTests`` (which removes the hidden
tests from the cells' source, not what they printed). On each code cell of the autograded
notebook:

* everything from the cell's first hidden-test marker on (put there by ``LimitedExecute``,
  between the visible part's output and the hidden part's) is replaced by one line saying the
  hidden tests ran; a marker forged by the student's code earlier in the cell only hides more;
* a cell holding hidden tests but no marker (graded some other way) keeps no output at all;
* in what is kept, a line that holds a line of hidden-test source (of any cell) or of the
  grading side's files (``course_grading``, the checks) is removed, and displays keep their
  plain text only (no image or HTML can carry such a file past the line filter).

The score of each exercise is shown by nbgrader's feedback itself.

What the student's code keeps while the hidden tests run (their inputs, in a global, a file, an
attribute) cannot reach a cell of theirs: ``LimitedExecute`` runs every hidden part after all
the notebook's cells, so whatever prints it from then on prints into a hidden part's output,
after its marker.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor

from course_grading.authoring.cells import Markers, hidden_lines, text

from .hidden_split import is_hidden_marker

GRADING_FILES = (
    Path(__file__).resolve().parents[1],  # course_grading
    Path(__file__).resolve().parents[2] / "course_utils" / "checks",
)
MIN_LINE = 12  # shorter lines ("return x", "pass") are too common to withhold when quoted
HIDDEN_NOTE = "[the hidden tests ran here: what they printed is not part of the feedback]\n"
WITHHELD_NOTE = "[output not shown: this cell's hidden tests were not run apart from it]\n"
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


@lru_cache(maxsize=1)
def grading_lines() -> frozenset[str]:
    """Stripped lines (at least MIN_LINE long) of the grading side's Python files."""
    found = set()
    for folder in GRADING_FILES:
        for path in sorted(folder.rglob("*.py")) if folder.is_dir() else []:
            try:
                found |= {
                    ln.strip()
                    for ln in path.read_text(encoding="utf-8").splitlines()
                    if len(ln.strip()) >= MIN_LINE
                }
            except (OSError, UnicodeDecodeError):
                continue
    return frozenset(found)


class HideHiddenOutputs(NbGraderPreprocessor):
    """Outputs of hidden tests, and lines of hidden or grading source, out of feedback."""

    def preprocess(self, nb, resources):
        markers = Markers.from_config(self.config)
        hidden = set()
        for cell in nb.cells:
            hidden |= hidden_lines(text(cell.get("source")), markers)
        filt = _LineFilter({ln for ln in hidden if ln}, grading_lines())
        for cell in nb.cells:
            if cell.get("cell_type") == "code":
                cell.outputs = _visible_outputs(cell, markers, filt)
        return nb, resources


class _LineFilter:
    """Whether a line of output quotes a secret line: one of at least MIN_LINE characters
    anywhere in it, a shorter hidden-test line as the whole line.

    The long secrets (thousands: every line of the grading side) are found by their first
    MIN_LINE characters, one dictionary look-up per position of the line: time linear in the
    output, whatever the number of secrets (a test of each secret at each line took 19 s per MB
    of short lines)."""

    def __init__(self, hidden: set[str], grading: frozenset[str]):
        self.short = {ln for ln in hidden if len(ln) < MIN_LINE}
        self.long: dict[str, list[str]] = {}
        for secret in sorted({ln for ln in hidden if len(ln) >= MIN_LINE} | grading):
            self.long.setdefault(secret[:MIN_LINE], []).append(secret)

    def quotes(self, line: str) -> bool:
        plain = _ANSI.sub("", line).strip()
        if len(plain) < MIN_LINE:
            return plain in self.short
        long = self.long
        return any(
            plain.startswith(secret, i)
            for i in range(len(plain) - MIN_LINE + 1)
            if plain[i : i + MIN_LINE] in long
            for secret in long[plain[i : i + MIN_LINE]]
        )

    def clean(self, value: str) -> str:
        lines = value.splitlines(keepends=True)
        return "".join(ln for ln in lines if not self.quotes(ln))


def _visible_outputs(cell, markers: Markers, filt: _LineFilter) -> list:
    outputs = list(cell.get("outputs", []))
    cut = next((i for i, o in enumerate(outputs) if is_hidden_marker(o)), None)
    if cut is not None:
        ran = bool(
            ((outputs[cut].get("data") or {}).get("application/vnd.course.hidden-tests+json") or {}).get(
                "hidden_tests"
            )
        )
        tail = [new_output("stream", name="stdout", text=HIDDEN_NOTE)] if ran else []
        outputs = outputs[:cut]
    elif markers.begin_hidden in text(cell.get("source")) and outputs:
        return [new_output("stream", name="stdout", text=WITHHELD_NOTE)]
    else:
        tail = []
    kept = [c for c in (_clean(o, filt) for o in outputs) if c is not None]
    return kept + tail


def _clean(output, filt: _LineFilter):
    kind = output.get("output_type")
    if kind == "stream":
        return new_output(
            "stream", name=output.get("name", "stdout"), text=filt.clean(text(output.get("text")))
        )
    if kind == "error":
        frames = [filt.clean(str(frame)) for frame in output.get("traceback") or []]
        return new_output(
            "error",
            ename=filt.clean(str(output.get("ename", ""))).strip() or "Error",
            evalue=filt.clean(str(output.get("evalue", ""))),
            traceback=[f for f in frames if f.strip()],
        )
    if kind in ("display_data", "execute_result"):
        plain = (output.get("data") or {}).get("text/plain")
        if plain is None:
            return None
        data = {"text/plain": filt.clean(text(plain))}
        if kind == "execute_result":
            return new_output(kind, data=data, execution_count=output.get("execution_count"))
        return new_output(kind, data=data)
    return None
