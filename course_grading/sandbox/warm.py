"""The warm sandbox: one pre-loaded process in bubblewrap per grading process, forking
every grading kernel and audit of that process (see ``warm_server``)."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

from .bubblewrap import Limits, available, hidden_roots, wrap, inside


# --------------------------------------------------------------------------- the warm sandbox

class WarmError(Exception):
    """The warm sandbox did not answer as it should (it is then replaced, or bypassed)."""


class WarmSandbox:
    """One ``_warm_server`` in bubblewrap, started by a grading process, that forks its
    kernels and audits with torch, IPython and the course already imported.

    Submissions pass through it one at a time: before each launch it is reset (every other
    process in it killed, its private /tmp and $HOME emptied inside) and its ``work`` and
    ``ipc`` folders are emptied from outside, ``work`` given the next submission's files.
    """

    START_SECONDS = 120

    def __init__(self, hide: tuple[Path, ...], limits: Limits = Limits()):
        self.hidden = tuple(hide)
        self.folder = Path(tempfile.mkdtemp(prefix="course-warm-"))
        self.ipc, self.work = self.folder / "ipc", self.folder / "work"
        for folder in (self.ipc, self.work):
            folder.mkdir()
        ours, theirs = socket.socketpair()
        command = [sys.executable, "-I", "-m", "course_grading.sandbox.warm_server", str(theirs.fileno()),
                   str(self.ipc), str(self.work)]
        argv, self.groups = wrap(command, scratch=self.work, cwd=self.work, hidden_roots=tuple(hide),
                                 limits=limits, rw=(self.ipc,))  # $HOME: its own tmpfs, emptied by reset
        self.log = (self.folder / "server.log").open("wb")
        self.process = subprocess.Popen(argv, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=self.log,
                                        cwd=self.work, start_new_session=True)
        theirs.close()
        self.sock = ours
        self.reader = ours.makefile("rb")
        self.ready = False
        self.broken = False

    def _read(self, timeout: float) -> dict:
        self.sock.settimeout(timeout)
        try:
            line = self.reader.readline()
        except OSError as exc:
            self.broken = True
            raise WarmError(f"no answer from the warm sandbox: {exc}") from None
        if not line:
            self.broken = True
            raise WarmError("the warm sandbox has ended")
        try:
            answer = json.loads(line)
        except ValueError:
            self.broken = True
            raise WarmError("garbled answer from the warm sandbox") from None
        if not isinstance(answer, dict) or "error" in answer:
            raise WarmError(f"the warm sandbox refused: {answer}")
        return answer

    def request(self, timeout: float = 30, **message) -> dict:
        """Send one request and return the answer; WarmError if the sandbox is gone."""
        if self.broken:
            raise WarmError("the warm sandbox is broken")
        if not self.ready:
            self._read(self.START_SECONDS)
            self.ready = True
        try:
            self.sock.settimeout(timeout)
            self.sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError as exc:
            self.broken = True
            raise WarmError(f"the warm sandbox is gone: {exc}") from None
        return self._read(timeout)

    def reset(self) -> None:
        """Kill every process left in the sandbox, empty its private folders and ours."""
        answer = self.request(timeout=30, op="reset")
        if not answer.get("ok"):
            self.broken = True
            raise WarmError(f"{answer.get('left')} processes survived the reset")
        for folder in (self.work, self.ipc):  # bound into the sandbox: kept, emptied
            _empty(folder)

    def prepare(self, source: Path | None = None) -> Path:
        """Reset, then copy ``source`` (a submission's folder) into ``work``; returns ``work``."""
        self.reset()
        if source is not None:
            shutil.copytree(source, self.work, symlinks=True, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        return self.work

    def spawn_kernel(self, argv: list[str], env: dict | None = None) -> int:
        return int(self.request(op="kernel", argv=argv, cwd=str(self.work), env=env or {})["pid"])

    def spawn_audit(self, folder: Path, cpu_seconds: int) -> int:
        return int(self.request(op="audit", folder=str(folder), cpu=cpu_seconds)["pid"])

    def poll(self, pid: int):
        return self.request(op="poll", pid=pid)["returncode"]

    def signal(self, pid: int, signum: int) -> None:
        self.request(op="signal", pid=pid, signal=int(signum))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.groups.remove()
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _empty(folder: Path) -> None:
    for item in folder.iterdir():
        if item.is_dir() and not item.is_symlink():
            shutil.rmtree(item, ignore_errors=True)
        else:
            item.unlink(missing_ok=True)


class RemoteProcess:
    """What jupyter_client's LocalProvisioner needs of a ``Popen``, for a warm kernel."""

    stdin = stdout = stderr = None

    def __init__(self, warm: WarmSandbox, pid: int):
        self.warm, self.pid, self.returncode = warm, pid, None

    def poll(self):
        if self.returncode is None:
            try:
                self.returncode = self.warm.poll(self.pid)
            except WarmError:
                self.returncode = -9  # the whole sandbox is gone, and the kernel with it
        return self.returncode

    def wait(self, timeout=None):
        import time
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("kernel", timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, signum):
        if self.poll() is None:
            try:
                self.warm.signal(self.pid, signum)
            except WarmError:
                pass

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)


_WARM: list[WarmSandbox] = []  # at most one per process


def current_warm(required: tuple[Path, ...] | None = None) -> WarmSandbox | None:
    """This process's warm sandbox, if ``start_warm`` started one that hides every folder of
    ``required`` (default: the current hidden roots)."""
    if not _WARM or _WARM[0].broken:
        return None
    warm = _WARM[0]
    return warm if covers(warm.hidden, hidden_roots() if required is None else required) else None


def covers(hidden: tuple[Path, ...], required: tuple[Path, ...]) -> bool:
    """Whether a sandbox hiding ``hidden`` hides every folder of ``required`` too: each is one
    of them, inside one, or inside the sandbox's own private /tmp or /var/tmp."""
    private = (Path("/tmp").resolve(), Path("/var/tmp").resolve())
    return all(any(inside(Path(r), Path(h)) for h in (*hidden, *private)) for r in required)


def start_warm() -> WarmSandbox | None:
    """Start (without waiting for it) this process's warm sandbox for the current hidden
    roots; any other one is closed first. None where there is no sandbox."""
    if not available()[0] or os.environ.get("COURSE_NO_WARM"):
        return None
    warm = current_warm()
    if warm is not None:
        return warm
    stop_warm()
    try:
        _WARM.append(WarmSandbox(hidden_roots()))
    except (OSError, subprocess.SubprocessError):
        return None
    return _WARM[0]


def discard_warm(warm: WarmSandbox | None = None) -> None:
    if _WARM and (warm is None or _WARM[0] is warm):
        stop_warm()


def stop_warm() -> None:
    while _WARM:
        _WARM.pop().close()


atexit.register(stop_warm)
