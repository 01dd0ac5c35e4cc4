"""Red flags in a submitted notebook, found by reading it (nothing of it runs).

Compared with the instructor's source notebook, a submission is flagged for: patched checks
or comparison functions, IPython input/AST transformers and event hooks, skip, raises or hide
tags that the source's cell does not carry itself (its cells that run the learner's code carry
``raises-exception``, so that "Run All" keeps going), edited nbgrader metadata (points, grade,
solution, locked, checksum), edited, deleted or added test cells, a changed kernel, access to
the gradebook or nbgrader, process control (``os._exit``, signals, fork), network access, the
reference implementations, and obfuscated code.

A flag is a reason for the instructor to look, not a penalty: nothing here changes a score.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .cells import is_setup, meta as _meta, text as _text, visible_part
from .nbformat_tools import read_notebook

META_KEYS = ("grade", "solution", "locked", "points", "task")

# (what it means, pattern) over the code of cells the student wrote or changed
PATTERNS = [
    ("patches a comparison function",
     r"\b(np|numpy|torch|math)\s*\.\s*(allclose|isclose|array_equal|equal|all|any|abs|max|isfinite)\s*=(?!=)"
     r"|\b(np|numpy|torch)\s*\.\s*testing\s*\.\s*\w+\s*=(?!=)|\btorch\s*\.\s*Tensor\s*\.\s*\w+\s*=(?!=)"
     r"|setattr\(\s*(np|numpy|torch)\b"),
    ("patches the checks", r"^\s*check_\w+\s*=(?!=)|^\s*def\s+check_\w+|course_(?:utils|grading)[./\\]checks|\bCheckFailed\b"
                           r"|\b_core\b|^\s*(Check|quiet|to_numpy)\s*=(?!=)"),
    ("IPython input or AST transformer / hook",
     r"input_transformers|ast_transformers|register_transformer|register_magic|events\s*\.\s*register"
     r"|set_custom_exc|\bshell\s*\.\s*(run_cell|ex)\b|get_ipython\s*\(\s*\)\s*\.\s*(run_cell|ast|input|events|set_hook)"),
    ("sends Jupyter messages itself (forged outputs, statuses or replies)",
     r"\bsession\s*\.\s*send\b|\biopub_(socket|thread|pub_socket)\b|\bshell_streams?\b|\bsend_multipart\b"
     r"|\bget_parent\s*\(|\.\s*kernel\s*\.\s*session\b"),
    ("reads or writes the gradebook / nbgrader", r"gradebook|\bsqlite3\b|\bnbgrader\b|\.db\b"),
    ("process control (exit, signals, fork)",
     r"\bos\s*\.\s*(_exit|kill|killpg|fork|forkpty|abort|setsid)\b|\bsignal\s*\.\s*(signal|alarm|setitimer|pthread)"
     r"|\bsys\s*\.\s*exit\b|\bfaulthandler\b|\bmultiprocessing\b|\bsubprocess\b|\bctypes\b"),
    ("network access", r"\bsocket\b|\burllib\b|\brequests\b|\bhttp\.client\b|\burlopen\b"),
    ("reaches into the grading side (reference implementations, hidden checks)",
     r"\bcourse_grading\b|course_utils\s*\.\s*reference|from\s+course_utils\s+import\s+reference"),
    ("tampers with builtins or loaded modules",
     r"__builtins__|\bbuiltins\b|sys\s*\.\s*modules|sys\s*\.\s*(settrace|setprofile|stdout|stderr)\s*="
     r"|\bwarnings\s*\.\s*(showwarning|warn)\s*=(?!=)"),
    ("obfuscated or dynamic code", r"(?<![.\w])(exec|eval|compile)\s*\(|\b__import__\b|\bimportlib\b|\bbase64\b|\bcodecs\b|\bmarshal\b|\bpickle\b"),
]
_COMPILED = [(why, re.compile(p, re.MULTILINE)) for why, p in PATTERNS]


@dataclass(frozen=True)
class Flag:
    """One red flag: where (a cell's grade_id or index), and why."""

    where: str
    reason: str

    def __str__(self) -> str:
        return f"{self.where}: {self.reason}"


def _checksum(cell) -> str:
    from nbgrader.utils import compute_checksum
    try:
        return compute_checksum(cell)
    except Exception:  # a malformed cell: its checksum cannot match
        return ""


def _tags_by_cell(nb) -> dict:
    """{grade_id, else cell id: set of tags} of the source notebook's cells (the release keeps
    both): the tags a submitted cell may carry without a flag."""
    found = {}
    for cell in nb.cells:
        key = _meta(cell).get("grade_id") or cell.get("id")
        if key:
            found[key] = {str(t) for t in cell.get("metadata", {}).get("tags", [])}
    return found


def scan(submitted, source) -> list[Flag]:
    """Red flags of notebook ``submitted`` (a path or notebook) against the source notebook."""
    sub = read_notebook(submitted) if not hasattr(submitted, "cells") else submitted
    src = read_notebook(source) if not hasattr(source, "cells") else source
    flags: list[Flag] = []
    source_cells = {_meta(c).get("grade_id"): c for c in src.cells if _meta(c).get("grade_id")}
    source_tags = _tags_by_cell(src)
    seen = set()
    unchanged = {_text(c.get("source")).strip() for c in src.cells}
    unchanged |= {visible_part(_text(c.get("source"))).strip() for c in src.cells}
    src_kernel = src.metadata.get("kernelspec", {}).get("name")
    sub_kernel = sub.metadata.get("kernelspec", {}).get("name")
    if sub_kernel and src_kernel and sub_kernel != src_kernel:
        flags.append(Flag("notebook", f"kernel changed to {sub_kernel!r}"))
    first_setup = next((i for i, c in enumerate(sub.cells) if is_setup(c)), -1)
    for index, cell in enumerate(sub.cells):
        meta = _meta(cell)
        grade_id = meta.get("grade_id")
        where = grade_id or f"cell {index}"
        tags = [str(t) for t in cell.get("metadata", {}).get("tags", [])]
        carried = source_tags.get(grade_id or cell.get("id"), set())  # the source's own tags
        odd_tags = [t for t in tags if t not in carried and (
            "skip" in t.lower() or "raises" in t.lower() or "hide" in t.lower())]
        if odd_tags:
            flags.append(Flag(where, f"tagged {', '.join(odd_tags)}"))
        original = source_cells.get(grade_id)
        if grade_id and original is None:
            flags.append(Flag(where, "nbgrader cell that is not in the assignment"
                                     + (" (claims points)" if meta.get("grade") else "")))
        if original is not None:
            if grade_id in seen:
                flags.append(Flag(where, "nbgrader cell duplicated"))
            seen.add(grade_id)
            want = _meta(original)
            changed = [k for k in META_KEYS if k in want and meta.get(k) != want.get(k)]
            changed += [k for k in META_KEYS if k not in want and meta.get(k)]
            if changed:
                flags.append(Flag(where, f"nbgrader metadata edited: {', '.join(sorted(set(changed)))}"))
            if want.get("grade") or want.get("locked"):
                if cell.get("cell_type") != original.get("cell_type") or (
                        visible_part(_text(cell.get("source"))) != visible_part(_text(original.get("source")))):
                    flags.append(Flag(where, "locked/test cell edited"))
                elif meta.get("checksum") and meta["checksum"] != _checksum(cell):
                    flags.append(Flag(where, "nbgrader checksum edited"))
        student_code = cell.get("cell_type") == "code" and _text(cell.get("source")).strip() not in unchanged and not (
            original is not None and (_meta(original).get("locked") or _meta(original).get("grade"))
            and visible_part(_text(cell.get("source"))) == visible_part(_text(original.get("source"))))
        if student_code and index < first_setup:
            flags.append(Flag(where, "code that runs before the setup cell"))
        if student_code:
            code = _text(cell.get("source"))
            for why, pattern in _COMPILED:
                match = pattern.search(code)
                if match:
                    flags.append(Flag(where, f"{why}: {match.group(0).strip()[:60]!r}"))
    for grade_id, cell in source_cells.items():
        if grade_id not in seen and (_meta(cell).get("grade") or _meta(cell).get("locked")):
            flags.append(Flag(grade_id, "test/locked cell deleted"))
    return flags
