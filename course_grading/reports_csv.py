"""Writing the course's CSV files (grades, flags, the class report, the export) so that no cell
becomes a spreadsheet formula.

A student controls much of what lands in them: their folder name (the student id), the messages
of exceptions their code raised, the reasons of red flags. A spreadsheet reads a cell starting
with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return as a formula; every such text cell is
written with a leading apostrophe, which spreadsheets show as text. Numbers stay numbers.
"""
from __future__ import annotations

import csv
import os
import re
from pathlib import Path

FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def safe_cell(value) -> str:
    """``value`` as a CSV cell that no spreadsheet evaluates."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:g}" if isinstance(value, float) else str(value)
    text = "" if value is None else str(value)
    if text.startswith(FORMULA_START) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


def write_rows(path, rows, *, atomic: bool = False) -> Path:
    """Write ``rows`` (lists of cells) to CSV file ``path``, each cell through ``safe_cell``.
    With ``atomic`` the file is written beside ``path`` first and moved over it: graders that
    share a course folder never leave a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    target = path.with_name(f".{path.name}.{os.getpid()}.partial") if atomic else path
    with target.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        for row in rows:
            writer.writerow([safe_cell(cell) for cell in row])
    if atomic:
        os.replace(target, path)
    return path
