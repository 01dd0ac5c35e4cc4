"""The hidden tests of a test cell, run apart: where a cell's hidden part begins
(``split_hidden``) and the marker output the grader puts before what that part printed
(``hidden_marker``, recognised by ``HIDDEN_MIME``).
"""

from __future__ import annotations

from nbformat.v4 import new_output

from course_grading.authoring.cells import Markers

HIDDEN_MIME = "application/vnd.course.hidden-tests+json"
HIDDEN_TEXT = "[course: the hidden tests ran from here on]"
NOT_RUN_TEXT = "[course: the hidden tests did not run]"
MAX_SPLIT_SOURCE = 64 * 2**10  # characters of a test cell parsed to run its hidden part apart


def hidden_marker(ran: bool = True) -> dict:
    """The output the grader puts where a cell's hidden tests begin (``ran``), or at the end
    of a cell whose hidden tests did not run (its visible part raised, or no time was left)."""
    return new_output(
        "display_data",
        data={HIDDEN_MIME: {"hidden_tests": ran}, "text/plain": HIDDEN_TEXT if ran else NOT_RUN_TEXT},
    )


def is_hidden_marker(output) -> bool:
    return output.get("output_type") == "display_data" and HIDDEN_MIME in (output.get("data") or {})


def split_hidden(source: str, markers: Markers = Markers()):
    """How a cell holding a hidden-test region runs: None when it holds none; else (visible,
    hidden): the lines before the first hidden-test delimiter (a final ``pass`` keeps their last
    expression from being displayed, as in one request) and the lines from it on, or (None,
    source) when they cannot be run apart (the delimiter is indented or inside an unfinished
    statement, a cell magic, a part that does not parse)."""
    if markers.begin_hidden not in source:
        return None
    if len(source) > MAX_SPLIT_SOURCE:  # no test cell is that long: not parsed, run whole
        return None, source
    lines = source.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if markers.begin_hidden in line), None)
    if at is None:
        return None
    visible, hidden = "".join(lines[:at]), "".join(lines[at:])
    if (
        lines[at][:1].isspace()
        or source.lstrip().startswith("%%")
        or not (_complete(visible) and _complete(hidden))
    ):
        return None, source
    if not visible.strip():
        return "pass\n", hidden
    return visible.rstrip("\n") + "\npass\n", hidden


def _complete(code: str) -> bool:
    """Whether ``code`` is whole statements, as IPython would run it (magics included)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        compile(TransformerManager().transform_cell(code), "<cell>", "exec")
    except (SyntaxError, ValueError, RuntimeError, MemoryError):  # RuntimeError: recursion, or
        return False  # IPython's "input transformation still changing after 500 iterations"
    return True
