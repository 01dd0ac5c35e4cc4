"""The pipe that carries the audit child's record (``hooks``) to the side that started it.

The child holds only the write end. The reading side drains it on a thread of its own while
the child runs (a child never blocks on a full pipe that nobody reads), keeps at most
``MAX_BYTES`` (a record beyond that is itself a finding: ``evidence`` reads an ``overflow``
line), and gives the bytes once the child has ended.
"""

from __future__ import annotations

import fcntl
import os
import threading

PIPE_BYTES = 1 << 20  # the pipe's own buffer (Linux's default maximum for an unprivileged process)
MAX_BYTES = 16 << 20  # what the reading side keeps of one record
OVERFLOW = b"overflow\n"


def open_pipe() -> tuple[int, int]:
    """(read end, write end), both close-on-exec, the buffer as large as allowed."""
    read, write = os.pipe2(os.O_CLOEXEC)
    try:
        fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except OSError:
        pass
    return read, write


class Drain:
    """Reads ``fd`` (a pipe's read end, which it owns and closes) on a thread until its end."""

    def __init__(self, fd: int):
        self.fd, self.data, self.over = fd, bytearray(), False
        self.thread = threading.Thread(target=self._run, name="audit-record", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            while True:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    return
                if len(self.data) + len(chunk) <= MAX_BYTES:
                    self.data += chunk
                else:
                    self.over = True
        except OSError:
            return

    def finish(self, timeout: float = 5.0) -> bytes:
        """What was read once the writers are gone (or after ``timeout`` seconds: then what
        came so far); the pipe is closed."""
        self.thread.join(timeout)
        try:
            os.close(self.fd)
        except OSError:
            pass
        return bytes(self.data) + (OVERFLOW if self.over else b"")


def write_record(folder, data: bytes) -> None:
    """A record, as read from its pipe, into the grader's own ``folder`` (a new file, never
    through a link), where the audit's judge reads it."""
    from .wire import RECORD

    fd = os.open(os.path.join(folder, RECORD), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
