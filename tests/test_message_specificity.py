"""The visible check names the bug: for every buggy variant it can see, its message is not the
check's fallback ("values are off …", "wrong token in column …"), or the fallback said for that
case names the bug (``NAMES_THE_BUG``: the words that do). tests/specificity.py runs it.

``STILL_GENERIC`` lists the variants whose message is still generic, or who pass the visible
half (only the hidden tests see them); it may only shrink: a new generic message fails, and
so does an entry that has become specific (remove it).
"""

from __future__ import annotations

import contextlib
import io

import pytest

from harness import run_grade_cell
from specificity import specific, visible_cases

STILL_GENERIC: set[tuple[str, str]] = {
    # the visible half passes them: a device, a default, or an order the hidden tests check
    ("03_attention", "ignores_device"),
    ("04_multi_head_attention", "hard_coded_d_model_12"),
    ("07_decoder", "fixed_pad_zero"),
    ("07_decoder", "wrong_default_d_ff"),
    ("08_generation", "temperature_after_filtering"),
    # the fallback: the mistakes of greedy decoding are named from stored outputs (naming
    # these needs new ones, written by course_grading.expected)
    ("08_generation", "first_position"),
    ("08_generation", "pytorch_convention_mask"),
}


def _assignments():
    return sorted({a for a, *_ in visible_cases()})


@pytest.mark.slow
@pytest.mark.parametrize("assignment", _assignments())
def test_the_visible_check_names_each_bug(assignment):
    generic_now = {}
    for _, grade_id, name, source in visible_cases([assignment]):
        with contextlib.redirect_stdout(io.StringIO()):
            outcome = run_grade_cell(assignment, grade_id, source, visible_only=True)
        if not specific(assignment, name, outcome.message):
            generic_now[assignment, name] = outcome.message or "(passes the visible half)"
    new = {k: v for k, v in generic_now.items() if k not in STILL_GENERIC}
    assert not new, "\n".join(f"{a}/{n}: {m[:200]}" for (a, n), m in new.items())
    gone = {k for k in STILL_GENERIC if k[0] == assignment} - set(generic_now)
    assert not gone, f"now specific, remove from STILL_GENERIC: {sorted(gone)}"
