"""Writing the course's reports (grades, flags, the class report, the export, the printed
table) so that any text can be written and none of it is taken for something else; and reading
the CSV files an instructor gives the course (``read_rows``: bounded, no link followed).

A student controls much of what lands in them: their folder name (the student id), the messages
of exceptions their code raised, the reasons of red flags (their tags, their cells' ids). Every
text goes through ``clean``: lone surrogates (which no file or terminal can encode), control
characters, bidirectional overrides and other invisible format characters are written as
escapes (``\\x1b``, ``\\u202e``), and a text longer than ``MAX_TEXT`` characters is cut. A
spreadsheet reads a cell starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return as
a formula, also after leading spaces and in full-width or small forms (``＝``, ``﹢``); every
such text cell is written with a leading apostrophe, which spreadsheets show as text. Numbers
stay numbers.
"""

from __future__ import annotations

import csv
import io
import os
import re
import unicodedata
from pathlib import Path

from course_grading import untrusted
from course_grading.errors import GradingError

FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")
MAX_TEXT = 2000  # characters of one text in a report (messages are cut to 1000 before)
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
# Unicode categories written as escapes: controls, format characters (bidi overrides and
# isolates, zero-width ones), surrogates, private use, unassigned, line and paragraph separators
_ESCAPED = frozenset(("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"))


def clean(value, limit: int = MAX_TEXT) -> str:
    """``value`` as text that any report can hold and that shows what it is: at most ``limit``
    characters (then "…"), every control, format, surrogate, private-use or unassigned
    character escaped as Python writes it (``\\n``, ``\\x00``, ``\\u202e``, ``\\udcff``)."""
    text = "" if value is None else value if isinstance(value, str) else str(value)
    cut = len(text) > limit
    text = text[:limit]
    if not text.isprintable():  # only then character by character (bounded by ``limit``)
        text = "".join(_escape(ch) if unicodedata.category(ch) in _ESCAPED else ch for ch in text)
    return text + "…" if cut else text


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in "\n\r\t":
        return repr(ch)[1:-1]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


class Literal(str):
    """A cell the course itself writes, known to be safe, written as it is (Moodle's ``-``,
    "no grade", which ``safe_cell`` would otherwise write as text)."""


def safe_cell(value) -> str:
    """``value`` as a CSV cell that no spreadsheet evaluates (text through ``clean``)."""
    if isinstance(value, Literal):
        return str(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:g}" if isinstance(value, float) else str(value)
    text = clean(value)
    return "'" + text if _formula(text) else text


def _formula(text: str) -> bool:
    """Whether a spreadsheet could read ``text`` as a formula: its first character that is not
    a space (spreadsheets that trim, as Google Sheets and LibreOffice's "trim spaces" do, start
    there; ``str.lstrip`` takes Unicode spaces too) is one of FORMULA_START, or a compatibility
    form of one (full-width ``＝``, small ``﹢``: NFKC), and it is not a plain number."""
    start = text.lstrip()
    if not start:
        return False
    plain = unicodedata.normalize("NFKC", start)
    return plain.startswith(FORMULA_START) and not _NUMBER.fullmatch(plain)


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


def read_rows(path, limit: int, *, fix: str, what: str = "not read") -> tuple[list[list[str]], str]:
    """The rows and the delimiter of the CSV file at ``path`` (a roster, an LMS's download): at most ``limit``
    bytes of a regular file, no link followed, UTF-8 with or without a byte-order mark, the
    delimiter ``;`` where the first line holds more of them than commas (as Canvas's importer
    decides). GradingError, in one line, for a file that is missing, too large, not UTF-8 (with
    ``fix``) or holds a row the csv module refuses (a field over ``csv.field_size_limit()``, a
    NUL), naming the line; ``what`` says what came of the file ("roster not imported")."""
    try:
        data = untrusted.read_bytes(Path(path), limit)
    except untrusted.UntrustedFileError as exc:
        raise GradingError(f"{exc}: {what}") from None
    except FileNotFoundError:
        raise GradingError(f"{path}: no such file") from None
    try:
        text = data.decode("utf-8-sig")  # a spreadsheet's export may start with a byte-order mark
    except UnicodeDecodeError:
        raise GradingError(f"{path} is not UTF-8 text: {fix}") from None
    first = text.split("\n", 1)[0]
    delimiter = ";" if first.count(";") > first.count(",") else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        return list(reader), delimiter
    except csv.Error as exc:
        raise GradingError(f"{what}: {path}, line {reader.line_num}: {exc}") from None
