"""Deterministic, diff-friendly notebooks.

``normalize`` strips everything that changes from one run or machine to the next (outputs,
execution counts, kernel and widget metadata, random cell ids), so that a notebook written
twice from the same content is byte-identical, and ``write_notebook`` writes it in one fixed
layout. Committed notebooks (``solutions/`` and ``notebooks/``) are kept in this form.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import nbformat
from nbformat import versions
from nbformat.reader import get_version

from course_grading import untrusted

KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
LANGUAGE_INFO = {"name": "python"}

# Cell metadata worth keeping: nbgrader's roles, the author's tags, and the lock flags that
# nbgrader's LockCells writes into releases so that JupyterLab refuses to edit or delete
# read-only cells (kept only when they lock something, i.e. are False).
_KEPT_CELL_METADATA = ("nbgrader", "tags")
_LOCK_FLAGS = ("deletable", "editable")

_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]+")
_MAX_ID_LENGTH = 64  # nbformat 4.5: ids are 1-64 characters of [A-Za-z0-9_-]


def normalize(nb) -> nbformat.NotebookNode:
    """Return a normalized copy of notebook ``nb`` (a NotebookNode or a plain dict).

    No outputs or execution counts; notebook metadata cut to the kernelspec and language;
    cell metadata cut to ``nbgrader``, ``tags`` and False lock flags; cell ids derived from
    the nbgrader ``grade_id`` (or ``cell-<index>``), unique, so they never change by chance.
    """
    nb = nbformat.from_dict(copy.deepcopy(dict(nb)))
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata = nbformat.from_dict({"kernelspec": dict(KERNELSPEC), "language_info": dict(LANGUAGE_INFO)})
    used: set[str] = set()
    for index, cell in enumerate(nb.cells):
        cell.source = _source_text(cell.source)
        cell.metadata = _cell_metadata(cell.get("metadata", {}))
        cell.id = _unique_id(_base_id(cell, index), index, used)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        else:
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
    return nb


def dumps(nb) -> str:
    """The text of normalized ``nb`` as ``write_notebook`` writes it."""
    text = nbformat.writes(
        normalize(nb), version=4, indent=1, sort_keys=True, ensure_ascii=False, split_lines=True
    )
    return text if text.endswith("\n") else text + "\n"


def write_notebook(nb, path) -> None:
    """Normalize ``nb`` and write it to ``path`` (UTF-8, indent 1, sorted keys, final newline)."""
    Path(path).write_text(dumps(nb), encoding="utf-8")


def read_notebook(path) -> nbformat.NotebookNode:
    """Read a notebook file as nbformat 4 (errors: OSError, ValueError for bad content)."""
    return nbformat.read(str(path), as_version=4)


def read_untrusted(
    path=None,
    *,
    data: bytes | None = None,
    label: str | None = None,
    bounds: untrusted.NotebookBounds = untrusted.NOTEBOOK_BOUNDS,
) -> nbformat.NotebookNode:
    """A notebook someone else wrote (a submission, an autograded notebook), from file ``path``
    (read through ``untrusted``: no link, a regular file) or from its bytes ``data``: held to
    ``bounds`` before anything parses it, then read as nbformat 4 (not validated: its readers
    take any field as it comes). Errors: UntrustedFileError (an OSError) naming what it is or
    the bound it passes; ValueError when it is not a notebook."""
    label = label or (os.fspath(path) if path is not None else "notebook")
    value = (
        untrusted.read_notebook(path, label=label, bounds=bounds)
        if data is None
        else untrusted.load_notebook(data, label, bounds)
    )
    if not (isinstance(value, dict) and isinstance(value.get("cells", []), list)):
        raise ValueError(f"{label} is not a notebook")
    try:
        major, minor = get_version(value)
        nb = versions[major].to_notebook_json(value, minor=minor)
        return nbformat.convert(nb, 4)
    except Exception as exc:  # noqa: BLE001 - whatever the fields hold: not a notebook
        raise ValueError(f"{label} is not a readable notebook ({type(exc).__name__})") from None


def is_normalized(path) -> bool:
    """Whether the notebook file at ``path`` is byte-for-byte what ``write_notebook`` writes."""
    text = Path(path).read_text(encoding="utf-8")
    return text == dumps(nbformat.reads(text, as_version=4))


def _source_text(source) -> str:
    return "".join(source) if isinstance(source, list) else source


def _cell_metadata(metadata) -> dict:
    kept = {key: copy.deepcopy(metadata[key]) for key in _KEPT_CELL_METADATA if key in metadata}
    kept.update({key: False for key in _LOCK_FLAGS if metadata.get(key) is False})
    return kept


def _base_id(cell, index: int) -> str:
    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
    cleaned = _ID_CHARS.sub("-", str(grade_id)).strip("-") if grade_id else ""
    return cleaned[:_MAX_ID_LENGTH] or f"cell-{index}"


def _unique_id(base: str, index: int, used: set[str]) -> str:
    candidate = base
    if candidate in used:
        suffix = f"-{index}"
        candidate = base[: _MAX_ID_LENGTH - len(suffix)] + suffix
    while candidate in used:  # only if an author named a cell like another's fallback id
        candidate = f"cell-{index}-{len(used)}"
    used.add(candidate)
    return candidate
