"""Reading files that someone else could have written: a student's submission, what a sandboxed
process left in a folder it could write (the audit's outputs), and anything copied from them.

Such a file is opened without following a symbolic link and without blocking (a FIFO, a
device), checked with ``fstat`` to be a regular file, and read up to a size cap; anything else
raises ``UntrustedFileError`` (an OSError) saying what the file is. A notebook (or other JSON)
is held to bounds before anything parses it (``NotebookBounds``: bytes, JSON objects and arrays,
values, depth, then cells and each cell's metadata), by a linear scan of its bytes that builds
nothing: a notebook beyond one is refused, naming the bound. ``copy_tree`` copies a folder that
way: regular files and folders only, never through a link, notebooks within their bounds, within
limits; what it leaves out comes back with the reason. Every reader of such files in the grading
pipeline goes through here.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from course_grading.reports.reports_csv import clean

MAX_NOTEBOOK_BYTES = 32 * 2**20  # a notebook with its outputs (nbgrader clears them anyway)
MAX_FILE_BYTES = 16 * 2**20  # any other file of a submission
MAX_TOTAL_BYTES = 64 * 2**20  # a whole submission
MAX_ENTRIES = 1000  # files and folders of a submission
MAX_DEPTH = 8  # nested folders of a submission
SKIPPED = (".ipynb_checkpoints", "__pycache__")  # never graded (nbgrader ignores them too)


@dataclass(frozen=True)
class NotebookBounds:
    """What the grader parses of a notebook someone else wrote. A notebook beyond any bound is
    not parsed at all: parsing and validating it would cost the grader time and memory out of
    all proportion to its bytes (two million ``{}`` in 6 MB took 4.5 GB), while a course
    notebook, outputs included, stays far inside them."""

    max_bytes: int = MAX_NOTEBOOK_BYTES
    max_containers: int = 100_000  # JSON objects and arrays
    max_values: int = 1_000_000  # JSON values of any kind
    max_depth: int = 64  # objects and arrays nested in one another
    max_cells: int = 2_000
    max_cell_metadata_bytes: int = 64 * 2**10  # one cell's metadata, as JSON

    @classmethod
    def from_config(cls, config) -> "NotebookBounds":
        """The bounds an nbgrader traitlets ``config`` sets (``c.NotebookBounds.max_cells =
        ...`` in nbgrader_config.py), the others as above."""
        section = (config or {}).get("NotebookBounds", {})
        return cls(**{name: int(section[name]) for name in cls.__dataclass_fields__ if name in section})


NOTEBOOK_BOUNDS = NotebookBounds()

_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
_OPEN_DIR = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_DIRECTORY
_CHUNK = 1 << 20


class UntrustedFileError(OSError):
    """A file that was not read, and why (``reason``: "is a symbolic link", ...)."""

    def __init__(self, name: str, reason: str):
        super().__init__(f"{name} {reason}")
        self.name, self.reason = name, reason


def what_is(mode: int) -> str:
    """What a file of ``mode`` (an ``lstat`` mode) is, for a message."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISDIR(mode):
        return "a folder"
    return "not a regular file"


def _megabytes(limit: int) -> str:
    if limit >= 2**20:
        return f"{limit / 2**20:g} MB"
    return f"{limit / 2**10:g} KB" if limit >= 2**10 and limit % 2**10 == 0 else f"{limit} bytes"


def _open(name: str, flags: int, dir_fd: int | None, label: str) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # O_NOFOLLOW met a link
            raise UntrustedFileError(label, "is a symbolic link") from None
        if exc.errno == errno.ENOTDIR and flags & os.O_DIRECTORY:  # a link to a folder lands here too
            try:
                mode = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode
            except OSError:
                mode = 0
            raise UntrustedFileError(
                label,
                "is a symbolic link"
                if stat.S_ISLNK(mode)
                else f"is {what_is(mode)}, not a folder"
                if mode
                else "is not a folder",
            ) from None
        raise


def read_bytes(path, limit: int, *, dir_fd: int | None = None, label: str | None = None) -> bytes:
    """The bytes of regular file ``path`` (relative to ``dir_fd`` when given), at most ``limit``.

    UntrustedFileError when ``path`` is a symbolic link, not a regular file (checked on the
    open file), or larger than ``limit``; other OSErrors as ``open`` raises them. Only the last
    component of ``path`` is protected: pass a folder's ``dir_fd`` (``open_folder``) and a plain
    name when the folders on the way could be links too.
    """
    label = label or os.fspath(path)
    fd = _open(os.fspath(path), _OPEN_FILE, dir_fd, label)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UntrustedFileError(label, f"is {what_is(info.st_mode)}")
        if info.st_size > limit:
            raise UntrustedFileError(label, f"is over {_megabytes(limit)}")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # it grew while being read
                raise UntrustedFileError(label, f"is over {_megabytes(limit)}")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path, limit: int, **kw) -> str:
    """``read_bytes`` decoded as UTF-8 (UnicodeDecodeError, a ValueError, if it is not)."""
    return read_bytes(path, limit, **kw).decode("utf-8")


_SCAN_CHUNK = 4 * 2**20  # bytes of JSON text scanned at a time (what the scan holds beside it)
_OPEN, _CLOSE, _COMMA, _QUOTE = (ord("["), ord("{")), (ord("]"), ord("}")), ord(","), ord('"')


def json_bound(data: bytes, max_containers: int, max_values: int, max_depth: int) -> str:
    """'' when JSON text ``data`` holds at most ``max_containers`` objects and arrays,
    ``max_values`` values and ``max_depth`` levels of nesting, else which bound it passes.

    Linear in ``len(data)``, without parsing and without an object per value: escapes are
    blanked out (every ``"`` left then opens or closes a string), and the brackets and commas
    outside strings are counted chunk by chunk. Text that is not JSON passes or fails as its
    brackets say: the parser rejects it afterwards, at its first error."""
    import numpy as np

    plain = data.replace(b"\\\\", b"__").replace(b'\\"', b"__")  # left to right, as JSON reads them
    opened = closed = commas = inside = 0
    steps = []  # +1 / -1 for each bracket outside strings, in order
    for start in range(0, len(plain), _SCAN_CHUNK):
        chunk = np.frombuffer(plain, np.uint8, count=min(_SCAN_CHUNK, len(plain) - start), offset=start)
        in_string = (np.cumsum(chunk == _QUOTE, dtype=np.uint8) + inside) & 1  # parity survives wrapping
        inside = int(in_string[-1])
        outside = chunk[in_string == 0]
        opens = (outside == _OPEN[0]) | (outside == _OPEN[1])
        closes = (outside == _CLOSE[0]) | (outside == _CLOSE[1])
        opened, closed = opened + int(opens.sum()), closed + int(closes.sum())
        commas += int((outside == _COMMA).sum())
        if opened > max_containers:
            return f"holds more than {max_containers} JSON objects and arrays"
        if opened + commas + 1 > max_values:
            return f"holds more than {max_values} JSON values"
        if closed > max_containers:  # more closed than there can be open: not JSON
            return ""
        steps.append(opens[opens | closes].astype(np.int8) * 2 - 1)
    nesting = np.cumsum(np.concatenate(steps or [np.zeros(0, np.int8)]), dtype=np.int64)
    if nesting.size and int(nesting.max()) > max_depth:
        return f"nests JSON objects and arrays more than {max_depth} deep"
    return ""


def _notebook(data: bytes, bounds: NotebookBounds):
    """(the bound ``data`` passes, None) or ('', the parsed JSON value); ValueError (or
    UnicodeDecodeError) when it is not JSON text."""
    if len(data) > bounds.max_bytes:
        return f"is over {_megabytes(bounds.max_bytes)}", None
    problem = json_bound(data, bounds.max_containers, bounds.max_values, bounds.max_depth)
    if problem:
        return problem, None
    value = json.loads(data.decode("utf-8"))  # within the bounds: time and memory in proportion
    cells = value.get("cells") if isinstance(value, dict) else None
    if isinstance(cells, list):
        if len(cells) > bounds.max_cells:
            return f"has more than {bounds.max_cells} cells", None
        for index, cell in enumerate(cells):
            metadata = cell.get("metadata") if isinstance(cell, dict) else None
            if metadata and len(json.dumps(metadata)) > bounds.max_cell_metadata_bytes:
                return (
                    f"has a cell (cell {index}) whose metadata is over "
                    f"{_megabytes(bounds.max_cell_metadata_bytes)}"
                ), None
    return "", value


def notebook_problem(data: bytes, bounds: NotebookBounds = NOTEBOOK_BOUNDS) -> str:
    """'' when notebook bytes ``data`` are within ``bounds`` (or are not JSON at all: whoever
    parses them says so), else the bound they pass ("has more than 2000 cells")."""
    try:
        return _notebook(data, bounds)[0]
    except ValueError:
        return ""


def load_notebook(data: bytes, label: str, bounds: NotebookBounds = NOTEBOOK_BOUNDS):
    """The JSON value of notebook bytes ``data``, parsed only when within ``bounds``:
    UntrustedFileError (named ``label``) naming the bound it passes; ValueError
    (UnicodeDecodeError, json.JSONDecodeError) when it is not UTF-8 JSON."""
    problem, value = _notebook(data, bounds)
    if problem:
        raise UntrustedFileError(label, problem)
    return value


def read_notebook(
    path, *, dir_fd: int | None = None, label: str | None = None, bounds: NotebookBounds = NOTEBOOK_BOUNDS
):
    """``load_notebook`` of the file ``path`` read as ``read_bytes`` reads it."""
    label = label or os.fspath(path)
    return load_notebook(read_bytes(path, bounds.max_bytes, dir_fd=dir_fd, label=label), label, bounds)


def open_folder(path, *, dir_fd: int | None = None, label: str | None = None) -> int:
    """A file descriptor of folder ``path``, not followed if it is a link (close it)."""
    return _open(os.fspath(path), _OPEN_DIR, dir_fd, label or os.fspath(path))


# A student id, an assignment, a file of a submission: ASCII letters, digits and . _ - @, not
# starting with . - or @, at most MAX_NAME characters. Nothing else: such a name is written into
# the gradebook, into paths and into the instructor's pages (Formgrader), where a name holding
# markup or quotes would be read as markup; and, verbatim, into the identifier columns of the
# exports, where a name a spreadsheet reads as a formula (``@...``, ``-...``) would have to be
# changed (``reports_csv.safe_cell``) and then match no student of the LMS.
MAX_NAME = 64
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._@-]*")


def plain_name(name: str) -> bool:
    """Whether ``name`` is a safe name of a folder entry, a student id or an assignment: ASCII
    letters, digits, ``. _ - @``, not starting with ``.``, ``-`` or ``@`` (so never ``.`` or ``..``,
    never what a spreadsheet reads as a formula), 1 to MAX_NAME characters."""
    return isinstance(name, str) and 0 < len(name) <= MAX_NAME and _PLAIN_NAME.fullmatch(name) is not None


def shown_name(name) -> str:
    """``name`` (a file or folder name, perhaps not UTF-8, perhaps huge) as printable ASCII for
    a message or a report: quoted, every other byte escaped, cut to MAX_NAME characters."""
    try:
        raw = (
            os.fsencode(name)
            if isinstance(name, (str, bytes))
            else str(name).encode("utf-8", "backslashreplace")
        )
    except UnicodeEncodeError:  # a surrogate that no file name decodes to
        raw = name.encode("utf-8", "backslashreplace")
    shown = repr(raw[:MAX_NAME])[1:]
    return shown + ("..." if len(raw) > MAX_NAME else "")


def read_in(folder, name: str, limit: int) -> bytes:
    """The bytes of file ``name`` directly inside ``folder`` (``read_bytes`` rules)."""
    if not plain_name(name):
        raise UntrustedFileError(repr(name), "is not a plain file name")
    fd = open_folder(folder)
    try:
        return read_bytes(name, limit, dir_fd=fd, label=name)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class LeftOut:
    """A file that ``copy_tree`` did not copy: its path relative to the copied folder, and why."""

    path: str
    reason: str

    @property
    def shown(self) -> str:
        """The path as a message may show it: a student chose it, so every control, bidi or
        other invisible character, and every byte that is not UTF-8, is written as an escape
        (``reports_csv.clean``): nothing of it moves a terminal's cursor or forges a log line."""
        return clean(self.path, MAX_NAME * (MAX_DEPTH + 1))

    def __str__(self) -> str:
        return f"{self.shown} {self.reason}"


@dataclass
class _Budget:
    total: int
    entries: int


def copy_tree(
    source,
    target,
    *,
    dir_fd: int | None = None,
    label: str | None = None,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_notebook_bytes: int = MAX_NOTEBOOK_BYTES,
    max_total_bytes: int = MAX_TOTAL_BYTES,
    max_entries: int = MAX_ENTRIES,
    max_depth: int = MAX_DEPTH,
    notebook_bounds: NotebookBounds | None = NOTEBOOK_BOUNDS,
) -> list[LeftOut]:
    """Copy folder ``source`` (relative to ``dir_fd`` when given) into folder ``target``
    (created): regular files and folders only, never following a link, each file within its cap
    (``*.ipynb``: ``max_notebook_bytes``, and ``notebook_bounds`` unless None), all within
    ``max_total_bytes`` and ``max_entries``, at most ``max_depth`` folders deep. Returns what was
    left out and why. ``source`` itself must be a real folder, else UntrustedFileError (named
    ``label``)."""
    fd = open_folder(source, dir_fd=dir_fd, label=label)
    left: list[LeftOut] = []
    try:
        Path(target).mkdir(parents=True, exist_ok=True)
        _copy_folder(
            fd,
            Path(target),
            "",
            0,
            left,
            _Budget(max_total_bytes, max_entries),
            (max_file_bytes, max_notebook_bytes, max_depth, notebook_bounds),
        )
    finally:
        os.close(fd)
    return left


def _copy_folder(
    fd: int, target: Path, prefix: str, depth: int, left: list[LeftOut], budget: _Budget, caps: tuple
) -> None:
    max_file, max_notebook, max_depth, notebook_bounds = caps
    for name in sorted(os.listdir(fd)):
        shown = prefix + name
        if name in SKIPPED:
            continue
        if budget.entries <= 0:
            left.append(LeftOut(shown, "is beyond the number of files a submission may hold"))
            continue
        budget.entries -= 1
        try:
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
        except OSError as exc:
            left.append(LeftOut(shown, f"cannot be read ({exc.strerror})"))
            continue
        if stat.S_ISDIR(mode):
            if depth + 1 > max_depth:
                left.append(LeftOut(shown, f"is more than {max_depth} folders deep"))
                continue
            try:
                sub = open_folder(name, dir_fd=fd, label=shown)
            except OSError as exc:
                left.append(
                    LeftOut(
                        shown,
                        exc.reason
                        if isinstance(exc, UntrustedFileError)
                        else f"cannot be read ({exc.strerror})",
                    )
                )
                continue
            try:
                (target / name).mkdir(exist_ok=True)
                _copy_folder(sub, target / name, shown + "/", depth + 1, left, budget, caps)
            finally:
                os.close(sub)
            continue
        if not stat.S_ISREG(mode):
            left.append(LeftOut(shown, f"is {what_is(mode)}"))
            continue
        cap = min(max_notebook if name.endswith(".ipynb") else max_file, budget.total)
        try:
            data = read_bytes(name, cap, dir_fd=fd, label=shown)
        except UntrustedFileError as exc:
            if cap == budget.total and "is over" in exc.reason:
                left.append(LeftOut(shown, "is beyond the total size a submission may have"))
            else:
                left.append(LeftOut(shown, exc.reason))
            continue
        except OSError as exc:
            left.append(LeftOut(shown, f"cannot be read ({exc.strerror})"))
            continue
        budget.total -= len(data)
        problem = (
            notebook_problem(data, notebook_bounds)
            if (notebook_bounds is not None and name.endswith(".ipynb"))
            else ""
        )
        if problem:
            left.append(LeftOut(shown, problem))
            continue
        (target / name).write_bytes(data)
