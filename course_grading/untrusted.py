"""Reading files that someone else could have written: a student's submission, what a sandboxed
process left in a folder it could write (the audit's outputs), and anything copied from them.

Such a file is opened without following a symbolic link and without blocking (a FIFO, a
device), checked with ``fstat`` to be a regular file, and read up to a size cap; anything else
raises ``UntrustedFileError`` (an OSError) saying what the file is. ``copy_tree`` copies a folder
that way: regular files and folders only, never through a link, within limits; what it leaves
out comes back with the reason. Every reader of such files in the grading pipeline goes through
here.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

MAX_NOTEBOOK_BYTES = 32 * 2**20  # a notebook with its outputs (nbgrader clears them anyway)
MAX_FILE_BYTES = 16 * 2**20      # any other file of a submission
MAX_TOTAL_BYTES = 64 * 2**20     # a whole submission
MAX_ENTRIES = 1000               # files and folders of a submission
MAX_DEPTH = 8                    # nested folders of a submission
SKIPPED = (".ipynb_checkpoints", "__pycache__")  # never graded (nbgrader ignores them too)

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
    return f"{limit / 2**20:g} MB" if limit >= 2**20 else f"{limit} bytes"


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
            raise UntrustedFileError(label, "is a symbolic link" if stat.S_ISLNK(mode)
                                     else f"is {what_is(mode)}, not a folder" if mode else "is not a folder") from None
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


def open_folder(path, *, dir_fd: int | None = None, label: str | None = None) -> int:
    """A file descriptor of folder ``path``, not followed if it is a link (close it)."""
    return _open(os.fspath(path), _OPEN_DIR, dir_fd, label or os.fspath(path))


# A student id, an assignment, a file of a submission: ASCII letters, digits and . _ - @, not
# starting with . or -, at most MAX_NAME characters. Nothing else: such a name is written into
# the gradebook, into paths and into the instructor's pages (Formgrader), where a name holding
# markup or quotes would be read as markup.
MAX_NAME = 64
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_@][A-Za-z0-9._@-]*")


def plain_name(name: str) -> bool:
    """Whether ``name`` is a safe name of a folder entry, a student id or an assignment: ASCII
    letters, digits, ``. _ - @``, not starting with ``.`` or ``-`` (so never ``.`` or ``..``),
    1 to MAX_NAME characters."""
    return (isinstance(name, str) and 0 < len(name) <= MAX_NAME
            and _PLAIN_NAME.fullmatch(name) is not None)


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

    def __str__(self) -> str:
        return f"{self.path} {self.reason}"


@dataclass
class _Budget:
    total: int
    entries: int


def copy_tree(source, target, *, dir_fd: int | None = None, label: str | None = None,
              max_file_bytes: int = MAX_FILE_BYTES, max_notebook_bytes: int = MAX_NOTEBOOK_BYTES,
              max_total_bytes: int = MAX_TOTAL_BYTES, max_entries: int = MAX_ENTRIES,
              max_depth: int = MAX_DEPTH) -> list[LeftOut]:
    """Copy folder ``source`` (relative to ``dir_fd`` when given) into folder ``target``
    (created): regular files and folders only, never following a link, each file within its cap
    (``*.ipynb``: ``max_notebook_bytes``), all within ``max_total_bytes`` and ``max_entries``, at
    most ``max_depth`` folders deep. Returns what was left out and why. ``source`` itself must be
    a real folder, else UntrustedFileError (named ``label``)."""
    fd = open_folder(source, dir_fd=dir_fd, label=label)
    left: list[LeftOut] = []
    try:
        Path(target).mkdir(parents=True, exist_ok=True)
        _copy_folder(fd, Path(target), "", 0, left, _Budget(max_total_bytes, max_entries),
                     (max_file_bytes, max_notebook_bytes, max_depth))
    finally:
        os.close(fd)
    return left


def _copy_folder(fd: int, target: Path, prefix: str, depth: int, left: list[LeftOut],
                 budget: _Budget, caps: tuple[int, int, int]) -> None:
    max_file, max_notebook, max_depth = caps
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
                left.append(LeftOut(shown, exc.reason if isinstance(exc, UntrustedFileError)
                                    else f"cannot be read ({exc.strerror})"))
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
        (target / name).write_bytes(data)
