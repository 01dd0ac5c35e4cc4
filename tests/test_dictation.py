"""No exercise dictates its solution: its text, its hint and its check's messages give ideas,
shapes and smaller worked cases, never a line of the solution (tests/dictation.py says how a
line is compared: tokens, names up to renaming).

``STILL_DICTATED`` lists the lines not rewritten yet; it may only shrink: a new leak fails,
and so does an entry that no longer leaks (remove it).
"""

from __future__ import annotations

import pytest

from dictation import assignments, leaks

STILL_DICTATED: set[tuple[str, str, str]] = set()


@pytest.mark.parametrize("assignment", assignments())
def test_no_text_hint_or_message_gives_a_solution_line(assignment):
    found = leaks(assignment)
    new = [leak for leak in found if (leak.assignment, leak.exercise, leak.line) not in STILL_DICTATED]
    assert not new, "\n".join(str(leak) for leak in new)
    gone = {entry for entry in STILL_DICTATED if entry[0] == assignment} - {
        (leak.assignment, leak.exercise, leak.line) for leak in found
    }
    assert not gone, f"no longer given, remove from STILL_DICTATED: {sorted(gone)}"


def test_the_measure_finds_a_dictated_line(tmp_path, monkeypatch):
    """A hint that spells a solution line, renamed and respaced, is found; an idea is not."""
    import dictation

    source = (
        "def f(x, t, T):\n    ### BEGIN SOLUTION\n"
        "    mask = torch.ones(t, T, dtype=torch.bool).tril(diagonal=T - t)\n"
        "    return x\n    ### END SOLUTION\n"
    )
    lines = dictation.solution_lines(source)
    assert [line for line, _ in lines] == ["mask = torch.ones(t, T, dtype=torch.bool).tril(diagonal=T - t)"]
    _, fragments = lines[0]

    def text(s):
        return dictation.normal([(k, v) for k, v, *_ in dictation.lex(s)])

    assert (
        dictation.found(fragments[1], text("use `torch.ones(a,b,dtype=torch.bool).tril( diagonal=b-a )`"))
        is not None
    )
    assert (
        dictation.found(fragments[0], text("the message: torch.ones(n, m).tril(diagonal=m - n)")) is not None
    )
    assert (
        dictation.found(fragments[1], text("which rows of a causal mask of size T? Look up tril's diagonal."))
        is None
    )
    assert dictation.found(fragments[1], text("torch.ones(a, a).tril(diagonal=a + a)")) is None
