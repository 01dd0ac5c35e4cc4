"""Red flags in a submitted notebook, found by reading it (nothing of it runs).

Compared with the instructor's source notebook, a submission is flagged for: patched checks
or comparison functions, IPython input/AST transformers and event hooks, skip, raises or hide
tags that the source's cell does not carry itself (its cells that run the learner's code carry
``raises-exception``, so that "Run All" keeps going), edited nbgrader metadata (points, grade,
solution, locked, checksum), edited, deleted or added test cells, a changed kernel, access to
the gradebook or nbgrader, process control (``os._exit``, signals, fork), network access,
listing folders (other students' work, the instructor's: the sandbox shows them empty), the
reference implementations, and obfuscated code.

A flag is a reason for the instructor to look, not a penalty: nothing here changes a score.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass

from course_grading.authoring.cells import is_setup, visible_part
from course_grading.authoring.cells import meta as _meta
from course_grading.authoring.cells import text as _text
from course_grading.authoring.nbformat_tools import read_notebook, read_untrusted
from course_grading.untrusted import NOTEBOOK_BOUNDS, NotebookBounds

META_KEYS = ("grade", "solution", "locked", "points", "task", "schema_version")

# (what it means, pattern) over the code of cells the student wrote or changed. Each runs in
# time linear in the code, whatever it holds: a pattern starts with a literal (a name, a dot), or
# with a line start followed by spaces and tabs only ([ \t]*, never \s*, which would run on
# across every following blank line from every line start: 600,000 blank lines took minutes).
# tests/test_scan.py times each one on adversarial code.
PATTERNS = [
    (
        "patches a comparison function",
        r"\b(np|numpy|torch|math)\s*\.\s*(allclose|isclose|array_equal|equal|all|any|abs|max|isfinite)\s*=(?!=)"
        r"|\b(np|numpy|torch)\s*\.\s*testing\s*\.\s*\w+\s*=(?!=)|\btorch\s*\.\s*Tensor\s*\.\s*\w+\s*=(?!=)"
        r"|setattr\(\s*(np|numpy|torch)\b",
    ),
    (
        "patches the checks",
        r"^[ \t]*check_\w+\s*=(?!=)|^[ \t]*def\s+check_\w+|course_(?:utils|grading)[./\\]checks"
        r"|\bCheckFailed\b|\b_core\b|^[ \t]*(Check|quiet|to_numpy)\s*=(?!=)",
    ),
    (
        "IPython input or AST transformer / hook",
        r"input_transformers|ast_transformers|register_transformer|register_magic|events\s*\.\s*register"
        r"|set_custom_exc|\bshell\s*\.\s*(run_cell|ex)\b|get_ipython\s*\(\s*\)\s*\.\s*(run_cell|ast|input|events|set_hook)",
    ),
    (
        "sends Jupyter messages itself (forged outputs, statuses or replies)",
        r"\bsession\s*\.\s*send\b|\biopub_(socket|thread|pub_socket)\b|\bshell_streams?\b|\bsend_multipart\b"
        r"|\bget_parent\s*\(|\.\s*kernel\s*\.\s*session\b",
    ),
    ("reads or writes the gradebook / nbgrader", r"gradebook|\bsqlite3\b|\bnbgrader\b|\.db\b"),
    (
        "process control (exit, signals, fork)",
        r"\bos\s*\.\s*(_exit|kill|killpg|fork|forkpty|abort|setsid)\b|\bsignal\s*\.\s*(signal|alarm|setitimer|pthread)"
        r"|\bsys\s*\.\s*exit\b|\bfaulthandler\b|\bmultiprocessing\b|\bsubprocess\b|\bctypes\b",
    ),
    ("network access", r"\bsocket\b|\burllib\b|\brequests\b|\bhttp\.client\b|\burlopen\b"),
    (
        "looks through folders (other students' work, the instructor's)",
        r"\bos\s*\.\s*(listdir|scandir|walk)\b|\bglob\s*\.\s*i?glob\b|\.(iterdir|rglob)\s*\("
        r"|\.\./|\b(submitted|autograded|solutions|feedback)[/\\]",
    ),
    (
        "reaches into the grading side (reference implementations, hidden checks)",
        r"\bcourse_grading\b|course_utils\s*\.\s*reference|from\s+course_utils\s+import\s+reference",
    ),
    (
        "tampers with builtins or loaded modules",
        r"__builtins__|\bbuiltins\b|sys\s*\.\s*modules|sys\s*\.\s*(settrace|setprofile|stdout|stderr)\s*="
        r"|\bwarnings\s*\.\s*(showwarning|warn)\s*=(?!=)",
    ),
    (
        "obfuscated or dynamic code",
        r"(?<![.\w])(exec|eval|compile)\s*\(|\b__import__\b|\bimportlib\b|\bbase64\b|\bcodecs\b|\bmarshal\b|\bpickle\b",
    ),
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
        key = _grade_id(cell) or _string(cell.get("id"))
        if key:
            found[key] = set(_tags(cell))
    return found


# A submitted notebook's fields hold whatever its author wrote (a list for a grade_id, numbers
# for tags): read them so that the scan goes on and anything odd shows in a flag.
def _string(value) -> str | None:
    return value if isinstance(value, str) else None


def _grade_id(cell) -> str | None:
    value = _meta(cell).get("grade_id")
    return None if value is None else value if isinstance(value, str) else repr(value)


def _tags(cell) -> list[str]:
    metadata = cell.get("metadata")
    tags = (metadata.get("tags") if isinstance(metadata, dict) else None) or []
    return [str(t) for t in tags] if isinstance(tags, list) else [str(tags)]


def _source(cell) -> str:
    value = cell.get("source")
    return "".join(map(str, value)) if isinstance(value, list) else _text(value)


def _kernel(nb) -> str | None:
    spec = (nb.get("metadata") or {}).get("kernelspec")
    return spec.get("name") if isinstance(spec, dict) else None


def _invalid(nb) -> str:
    """'' when notebook ``nb`` is valid nbformat 4, else the first problem, short (nbgrader
    refuses such a notebook: the submission is an error row, and this flag says why)."""
    import nbformat

    try:
        nbformat.validate(copy.deepcopy(nb), version=4)  # (it may repair what it reads)
    except nbformat.ValidationError as exc:
        return str(getattr(exc, "message", exc)).splitlines()[0][:120]
    except Exception as exc:  # noqa: BLE001 - whatever its fields hold, the scan goes on
        return type(exc).__name__
    return ""


def scan(submitted, source, bounds: NotebookBounds = NOTEBOOK_BOUNDS) -> list[Flag]:
    """Red flags of notebook ``submitted`` (a path or notebook) against the source notebook.
    A submitted path is read as untrusted (``nbformat_tools.read_untrusted``: within
    ``bounds`` before it is parsed, else UntrustedFileError)."""
    sub = read_untrusted(submitted, bounds=bounds) if not hasattr(submitted, "cells") else submitted
    src = read_notebook(source) if not hasattr(source, "cells") else source
    flags: list[Flag] = []
    source_cells = {_grade_id(c): c for c in src.cells if _grade_id(c)}
    source_tags = _tags_by_cell(src)
    seen = set()
    unchanged = {_source(c).strip() for c in src.cells}
    unchanged |= {visible_part(_source(c)).strip() for c in src.cells}
    problem = _invalid(sub)
    if problem:
        flags.append(Flag("notebook", f"not a valid notebook (nbformat): {problem}"))
    src_kernel, sub_kernel = _kernel(src), _kernel(sub)
    if sub_kernel and src_kernel and sub_kernel != src_kernel:
        flags.append(Flag("notebook", f"kernel changed to {sub_kernel!r}"))
    first_setup = next((i for i, c in enumerate(sub.cells) if isinstance(c, dict) and is_setup(c)), -1)
    for index, cell in enumerate(sub.cells):
        if not isinstance(cell, dict):
            flags.append(Flag(f"cell {index}", "not a notebook cell"))
            continue
        meta = _meta(cell)
        grade_id = _grade_id(cell)
        where = grade_id or f"cell {index}"
        metadata = cell.get("metadata")
        if not isinstance(metadata, dict) and metadata is not None:
            flags.append(Flag(where, "cell metadata that is not a mapping"))
        elif (
            isinstance(metadata, dict)
            and "nbgrader" in metadata
            and not isinstance(metadata["nbgrader"], dict)
        ):
            flags.append(Flag(where, "nbgrader metadata that is not a mapping"))
        elif meta and grade_id is None:
            flags.append(
                Flag(
                    where,
                    "nbgrader metadata without a grade id"
                    + (" (claims points)" if meta.get("grade") or meta.get("task") else ""),
                )
            )
        tags = _tags(cell)
        carried = source_tags.get(grade_id or _string(cell.get("id")), set())  # the source's own tags
        odd_tags = [
            t
            for t in tags
            if t not in carried and ("skip" in t.lower() or "raises" in t.lower() or "hide" in t.lower())
        ]
        if odd_tags:
            flags.append(Flag(where, f"tagged {', '.join(odd_tags)}"))
        original = source_cells.get(grade_id)
        if grade_id and original is None:
            flags.append(
                Flag(
                    where,
                    "nbgrader cell that is not in the assignment"
                    + (" (claims points)" if meta.get("grade") else ""),
                )
            )
        if original is not None:
            if grade_id in seen:
                flags.append(Flag(where, "nbgrader cell duplicated"))
            seen.add(grade_id)
            want = _meta(original)
            changed = [k for k in META_KEYS if k in want and meta.get(k) != want.get(k)]
            changed += [k for k in META_KEYS if k not in want and meta.get(k)]
            if changed:
                flags.append(Flag(where, f"nbgrader metadata edited: {', '.join(sorted(set(changed)))}"))
            if want.get("grade") and want.get("solution"):  # a written answer: the student writes it
                if cell.get("cell_type") != original.get("cell_type"):
                    flags.append(Flag(where, f"answer cell turned into a {cell.get('cell_type')} cell"))
            elif want.get("grade") or want.get("locked"):
                if cell.get("cell_type") != original.get("cell_type") or (
                    visible_part(_source(cell)) != visible_part(_source(original))
                ):
                    flags.append(Flag(where, "locked/test cell edited"))
                elif meta.get("checksum") and meta["checksum"] != _checksum(cell):
                    flags.append(Flag(where, "nbgrader checksum edited"))
        student_code = (
            cell.get("cell_type") == "code"
            and _source(cell).strip() not in unchanged
            and not (
                original is not None
                and (_meta(original).get("locked") or _meta(original).get("grade"))
                and not _meta(original).get("solution")
                and visible_part(_source(cell)) == visible_part(_source(original))
            )
        )
        if student_code and index < first_setup:
            flags.append(Flag(where, "code that runs before the setup cell"))
        if student_code:
            code = _source(cell)
            for why, pattern in _COMPILED:
                match = pattern.search(code)
                if match:
                    flags.append(Flag(where, f"{why}: {match.group(0).strip()[:60]!r}"))
    for grade_id, cell in source_cells.items():
        if grade_id not in seen and (_meta(cell).get("grade") or _meta(cell).get("locked")):
            flags.append(Flag(grade_id, "test/locked cell deleted"))
    return flags
