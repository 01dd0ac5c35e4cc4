"""``ScrubHiddenTracebacks``: hidden-test lines out of the tracebacks in feedback."""

from __future__ import annotations

import re

from nbgrader.preprocessors import NbGraderPreprocessor

from course_grading.authoring.cells import Markers, hidden_lines, text

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TRACEBACK_CODE = re.compile(r"^\s*(?:-*>)?\s*(?:\d+\s)?(.*)$")  # "----> 3 code" / "      3 code"


class ScrubHiddenTracebacks(NbGraderPreprocessor):
    """Drop hidden-test lines from the tracebacks of a cell's errors.

    nbgrader's ClearHiddenTests removes the hidden tests from a cell's source, but IPython's
    traceback quotes the code around the failing line, hidden tests included. This runs
    before it, while the cell still holds its hidden region.
    """

    def preprocess_cell(self, cell, resources, index):
        hidden = hidden_lines(text(cell.get("source", "")), Markers.from_config(self.config))
        for output in cell.get("outputs", []) if hidden else []:
            if output.get("output_type") == "error":
                output.traceback = [_scrub(frame, hidden) for frame in output.get("traceback", [])]
        return cell, resources


def _scrub(frame: str, hidden: set[str]) -> str:
    """A traceback entry without the lines that quote ``hidden`` code."""
    kept = [
        line
        for line in frame.split("\n")
        if _TRACEBACK_CODE.match(_ANSI.sub("", line)).group(1).strip() not in hidden
    ]
    return "\n".join(kept)
