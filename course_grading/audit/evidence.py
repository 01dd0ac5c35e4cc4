"""The grader's reading of the audit child's record (``hooks``): what each exercise's calls ran.

``findings(record, plan, ended)`` gives, for every audited exercise, '' or why its outputs do not
count whatever their values: an escape tried anywhere (named by its cell and line), a record
that was written to by other hands or cut short, or an operator the exercise may not run that
ran during its calls, or after the first call on a thread the submission left running.
"""

from __future__ import annotations

import re

from .forbidden import forbidden_ops, matches

LINE = re.compile(
    r"op (?P<op>[\w:.]{1,200}) (?P<at>\S{1,300})|escape (?P<what>\S{1,300}) (?P<where>\S{1,300})"
    r"|(?P<mark>begin|end) (?P<gid>[\w.-]{1,200}) (?P<index>\d{1,6})|(?P<done>done)|(?P<over>overflow)"
)


MISSING = "the audit's record of its calls is missing"


def _where(where: str) -> str:
    return "" if where == "-" else f" ({where.replace('+', ' ')})"


def findings(record: bytes, calls: dict[str, tuple[str, int]], ended: str) -> dict[str, str]:
    """``calls``: {grade_id: (function, number of calls)} in the order the child runs them;
    ``ended``: '' or why the child ended early (as the grader saw it)."""
    expected = [
        (kind, gid, i) for gid, (_, n) in calls.items() for i in range(n) for kind in ("begin", "end")
    ]
    problem, marks, window, escape = "", [], None, ""
    ran: dict[str, list[tuple[str, str]]] = {gid: [] for gid in calls}  # gid -> [(op, when)]
    stray: list[tuple[str, str]] = []  # (op, where) after the first call, outside every call
    done = False
    for raw in record.decode("utf-8", "replace").splitlines():
        m = LINE.fullmatch(raw)
        if m is None or (done and raw):
            problem = problem or "its record holds lines the audit never writes"
            continue
        if m["over"]:
            problem = problem or "its record grew past what any honest run writes"
        elif m["done"]:
            done = True
        elif m["what"]:
            escape = escape or f"{m['what'].replace('+', ' ')}{_where(m['where'])}"
        elif m["mark"]:
            mark = (m["mark"], m["gid"], int(m["index"]))
            if len(marks) >= len(expected) or expected[len(marks)] != mark:
                problem = problem or "the marks around its calls were forged or reordered"
                continue
            marks.append(mark)
            window = mark[1:] if mark[0] == "begin" else None
        elif window is not None:
            ran[window[0]].append((m["op"], f"on fresh input {window[1] + 1}{_where(m['at'])}"))
        elif marks:
            stray.append((m["op"], _where(m["at"])))
    if not problem and not done and not ended and len(marks) == len(expected):
        problem = "its record has no end (its channel was closed or replaced)"
    complete = {gid for gid in calls if all(("end", gid, i) in marks for i in range(calls[gid][1]))}
    result = {}
    for gid, (function, _) in calls.items():
        patterns = forbidden_ops(function)
        hit = next(((op, when) for op, when in ran[gid] if matches(op, patterns)), None)
        left = next((f"{op}{where}" for op, where in stray if matches(op, patterns)), None)
        if escape:
            result[gid] = f"the audited code tried to leave Python's reach: {escape}"
        elif problem:
            result[gid] = f"the audit's record was tampered with: {problem}"
        elif hit:
            result[gid] = f"{function} ran {hit[0]} {hit[1]}, a built-in the exercise asks to write by hand"
        elif left:
            result[gid] = f"{left} ran outside the audited calls, on a thread the submission left running"
        elif gid not in complete:
            result[gid] = f"{MISSING} (its channel was closed, replaced or filled)"
        else:
            result[gid] = ""
    return result
