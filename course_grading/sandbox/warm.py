"""Over 500 lines: one concern, the grader's client of the sandbox servers and its one warm server.

The grader's side of the sandbox servers (``warm_server`` runs inside bubblewrap).

A grading process holds at most one *warm* server, started by ``ensure_warm`` (the one place
that starts it, whoever asks first: the ``course`` command before it imports nbgrader, a
grading worker as it starts, the first kernel). Every grading kernel and audit is a *job* of
a server (``open_job``): the warm one when it works, else a *single-use* server of its own.

A job's files travel one way: the grader copies them (regular files and folders only, never
through a link) into a fresh folder of its own, ``spool/<token>``, created after the reset,
when nothing runs in the sandbox; the sandbox sees it read-only and the server copies it into
the job's private working folder. An audit's outputs come back over the server's socket
(``collect``: its ``out-*`` files only, bounded) into the grader's folder. Nothing is ever
copied into a folder a sandbox could write.

The audit is the grader's: it hands its entry point here by name (``hand_audit``), and every
server started after is given it, so that nothing of the sandbox imports the audit.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from . import isolate
from .bubblewrap import (
    GRADING_PACKAGE,
    LEARNER_PACKAGE,
    SECRET_FOLDERS,
    SECRET_MODULES,
    available,
    inside,
    private_folders,
    sandbox_home,
    wrap,
)
from .settings import Settings

OUT_NAME = re.compile(r"out-[A-Za-z0-9_.-]{1,200}\.(json|npy)")
PRIVATE_NAMESPACES = True  # give each child namespaces of its own where it can (tests turn it off)


class SandboxError(Exception):
    """A sandbox server did not answer as it should (it is then replaced, or bypassed)."""


@dataclass
class Job:
    """One kernel or audit in a server."""

    token: str
    path: str  # its working folder, as the sandbox sees it
    spool: Path  # the grader's copy of its files (read-only in the sandbox)
    ipc: Path | None = None  # a kernel's socket folder, as the sandbox sees it
    ipc_here: Path | None = None  # the same folder, as the grader reaches it


class SandboxServer:
    """One ``warm_server`` in bubblewrap. ``warm``: pre-loaded, reused for job after job (reset
    before each); else single-use: one job, no preload (``hide_secrets`` for an audit's)."""

    START_SECONDS = 120

    def __init__(self, settings: Settings, *, warm: bool, hide_secrets: bool = False):
        self.settings, self.warm = settings, warm
        self.folder = _new_folder("course-warm-" if warm else "course-sandbox-")
        for name in ("spool", "ipc", "jobs") + (() if warm else ("work",)):
            (self.folder / name).mkdir(mode=0o700)
        _seed(self.folder / "spool" / "seed")
        ours, theirs = socket.socketpair()
        spec = {
            "base": str(self.folder),
            "isolate": PRIVATE_NAMESPACES,
            "preload": warm,
            "single": not warm,
            "tmpfs_mb": settings.tmpfs_mb,
            "home": str(sandbox_home()),
            "private": [str(p) for p in private_folders()],
            "secret_folders": [str(p) for p in SECRET_FOLDERS],
            "secret_modules": list(SECRET_MODULES),
            "audit": dict(_AUDIT) or None,
        }
        command = [
            sys.executable,
            "-I",
            "-m",
            "course_grading.sandbox.warm_server",
            str(theirs.fileno()),
            json.dumps(spec),
        ]
        argv, self.groups = wrap(command, settings, self.folder, single=not warm, hide_secrets=hide_secrets)
        self.log = (self.folder / "server.log").open("wb")
        try:
            self.process = subprocess.Popen(
                argv,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=self.log,
                cwd=self.folder,
                start_new_session=True,
            )
        except BaseException:
            self.groups.remove()
            self.log.close()
            shutil.rmtree(self.folder, ignore_errors=True)
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.reader = ours.makefile("rb")
        self.ready = False
        self.broken = False
        self.isolated = False
        self.used = False

    # ------------------------------------------------------------------ protocol

    def _read(self, timeout: float) -> dict:
        self.sock.settimeout(timeout)
        try:
            line = self.reader.readline()
        except OSError as exc:
            self.broken = True
            raise SandboxError(f"no answer from the sandbox: {exc}") from None
        if not line:
            self.broken = True
            raise SandboxError(f"the sandbox has ended{self._last_words()}")
        try:
            answer = json.loads(line)
        except ValueError:
            self.broken = True
            raise SandboxError("garbled answer from the sandbox") from None
        if not isinstance(answer, dict) or "error" in answer:
            raise SandboxError(f"the sandbox refused: {answer}")
        return answer

    def _last_words(self) -> str:
        try:
            self.log.flush()
            text = (self.folder / "server.log").read_bytes()[-600:].decode(errors="replace").strip()
        except OSError:
            return ""
        return f" ({text.splitlines()[-1]})" if text else ""

    def _start(self) -> None:
        answer = self._read(self.START_SECONDS)
        self.ready = True
        self.isolated = bool(answer.get("isolated"))
        if answer.get("secrets"):
            self.broken = True
            raise SandboxError(f"the sandbox loaded the instructor's secret modules: {answer['secrets'][:3]}")
        found = {k: [os.path.realpath(str(p)) for p in v] for k, v in (answer.get("packages") or {}).items()}
        expected = {"course_utils": [str(LEARNER_PACKAGE)], "course_grading": [str(GRADING_PACKAGE)]}
        if found != expected:
            self.broken = True
            raise SandboxError(
                f"the sandbox imports the course from {found}, not the installed course ({expected})"
            )
        if self.warm and not self.isolated:
            _NO_WARM.append(answer.get("why") or "no namespaces of its own for each child")
            self.broken = True
            raise SandboxError(
                f"no fresh namespaces per child here ({_NO_WARM[-1]}): every kernel gets a sandbox of its own"
            )

    def request(self, timeout: float = 30, **message) -> dict:
        """Send one request and return the answer; SandboxError if the server is gone."""
        if self.broken:
            raise SandboxError("the sandbox is broken")
        if not self.ready:
            self._start()
        try:
            self.sock.settimeout(timeout)
            self.sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError as exc:
            self.broken = True
            raise SandboxError(f"the sandbox is gone: {exc}") from None
        return self._read(timeout)

    # ------------------------------------------------------------------ jobs

    def reset(self) -> None:
        """Every process of the previous job killed, every job folder unmounted; a server
        that cannot prove it is clean is broken (and replaced)."""
        answer = self.request(timeout=30, op="reset")
        if not answer.get("ok"):
            self.broken = True
            raise SandboxError(f"the sandbox could not be reset: {answer.get('why')}")

    def new_job(self, source: Path | None = None, *, kernel: bool) -> Job:
        """A fresh job holding a copy of ``source`` (a folder); a kernel's gets a socket folder."""
        if self.warm:
            self.reset()
        elif self.used:
            raise SandboxError("a single-use sandbox serves one job")
        self.used = True
        token = secrets.token_hex(16)  # unguessable: the spool's names are the tokens
        spool = self.folder / "spool" / token
        spool.mkdir(mode=0o700)
        if source is not None:
            copy_in(Path(source), spool, self.settings.tmpfs_mb << 20)
        ipc_name = secrets.token_hex(3) if kernel else None  # short: a socket path fits in 107 bytes
        answer = self.request(op="job", token=token, ipc=ipc_name)
        job = Job(token, str(answer["path"]), spool)
        if kernel:
            job.ipc = Path(answer["ipc"])
            job.ipc_here = job.ipc if self.warm else self._inside() / job.ipc.relative_to("/")
        return job

    def _inside(self) -> Path:
        """The sandbox's root folder as this process reaches it: through its server's /proc
        entry (a single-use server's sockets are in a tmpfs of the sandbox's own)."""
        try:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        except OSError:
            children = []
        if len(children) != 1:
            raise SandboxError("the sandbox's server process cannot be found")
        return Path(f"/proc/{children[0]}/root")

    def end_job(self, job: Job) -> None:
        """The grader's folders of ``job`` removed (the job's own is unmounted by the next reset;
        a single-use server's go with it)."""
        for folder in (job.spool, job.ipc if self.warm else None):
            if folder is not None:
                shutil.rmtree(folder, ignore_errors=True)
                if folder.exists():
                    self.broken = True

    def spawn_kernel(self, job: Job, args: list[str], connection: dict, env: dict | None = None) -> int:
        return int(
            self.request(op="kernel", token=job.token, args=args, connection=connection, env=env or {})["pid"]
        )

    def spawn_audit(self, job: Job, cpu_seconds: int) -> int:
        return int(self.request(op="audit", token=job.token, cpu=cpu_seconds)["pid"])

    def collect(self, job: Job) -> tuple[dict[str, bytes], bytes]:
        """The ``out-*`` files the job left in its working folder (regular files, bounded), and
        the audit's record as the server read it from the audit's pipe."""
        reply = self.request(op="collect", token=job.token, timeout=60)
        files, record = reply.get("files") or {}, reply.get("record")
        return (
            {
                name: base64.b64decode(data)
                for name, data in files.items()
                if isinstance(name, str) and OUT_NAME.fullmatch(name) and isinstance(data, str)
            },
            base64.b64decode(record) if isinstance(record, str) else b"",
        )

    def poll(self, pid: int):
        return self.request(op="poll", pid=pid)["returncode"]

    def wait(self, pid: int, seconds: float):
        """The return code once ``pid`` ended, or None after ``seconds`` (the server's
        WAIT_SECONDS at most)."""
        return self.request(timeout=seconds + 30, op="wait", pid=pid, seconds=seconds)["returncode"]

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


def _new_folder(prefix: str) -> Path:
    """A new folder of the grader's own (0700) in the temporary folder; in /tmp when that one's
    path is so long that a kernel's socket path would not fit in 107 bytes."""
    folder = tempfile.mkdtemp(prefix=prefix)
    if len(folder) > 80:
        os.rmdir(folder)
        folder = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    return Path(folder)


def copy_in(source: Path, target: Path, max_bytes: int) -> None:
    """Copy the folder ``source`` into the grader's fresh folder ``target``: regular files and
    folders only, no link followed or made; SandboxError beyond ``max_bytes``."""
    try:
        from_fd = isolate.open_folder(str(source))
    except OSError as exc:
        raise SandboxError(f"cannot read the folder {source}: {exc.strerror}") from None
    try:
        to_fd = isolate.open_folder(str(target))
        try:
            isolate.copy_tree(from_fd, to_fd, max_bytes=max_bytes)
        except isolate.CopyError as exc:
            raise SandboxError(
                f"{source} cannot be copied into the sandbox: {exc.strerror} (at most {max_bytes >> 20} MB)"
            ) from None
        finally:
            os.close(to_fd)
    finally:
        os.close(from_fd)


def _seed(folder: Path) -> None:
    """Files every sandboxed $HOME starts with: matplotlib's font cache (else rebuilt each time)."""
    cache = Path(os.path.expanduser("~")) / ".cache" / "matplotlib"
    for font_list in cache.glob("fontlist-*.json") if cache.is_dir() else []:
        if font_list.is_file() and not font_list.is_symlink():
            (folder / ".cache" / "matplotlib").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(font_list, folder / ".cache" / "matplotlib" / font_list.name)


class RemoteProcess:
    """What jupyter_client's LocalProvisioner needs of a ``Popen``, for a kernel in a server."""

    stdin = stdout = stderr = None

    def __init__(self, server: SandboxServer, pid: int):
        self.server, self.pid, self.returncode = server, pid, None

    def poll(self):
        if self.returncode is None:
            try:
                self.returncode = self.server.poll(self.pid)
            except SandboxError:
                self.returncode = -9  # the whole sandbox is gone, and the kernel with it
        return self.returncode

    def wait(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("kernel", timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, signum):
        if self.poll() is None:
            try:
                self.server.signal(self.pid, signum)
            except SandboxError:
                pass

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)


# --------------------------------------------------------------------------- this process's servers

_WARM: list[SandboxServer] = []  # at most one per process
_AUDIT: dict = {}  # the audit's entry point, by name, as the grader handed it (hand_audit)
_NO_WARM: list[str] = []  # why a warm server cannot work here (its probe said so): never again


def hand_audit(entry: dict) -> None:
    """The audit's entry point, by name (``warm_server`` says what it holds), for every server
    started from now on: a warm one pre-loads it, and any runs it on an audit's job."""
    _AUDIT.clear()
    _AUDIT.update(entry)


def covers(server: Settings, wanted: Settings) -> bool:
    """Whether a server started with ``server`` settings serves a job that wants ``wanted``:
    the same limits, and every folder ``wanted`` hides hidden too (one of them, inside one,
    or inside the sandbox's own private folders)."""
    if {**vars(server), "hidden": ()} != {**vars(wanted), "hidden": ()}:
        return False
    hidden = [Path(h) for h in server.hidden] + private_folders()
    return all(any(inside(Path(r), h) for h in hidden) for r in wanted.hidden)


def current_warm(settings: Settings) -> SandboxServer | None:
    """This process's warm server, if one is running that serves ``settings``."""
    if not _WARM or _WARM[0].broken or not covers(_WARM[0].settings, settings):
        return None
    return _WARM[0]


def ensure_warm(settings: Settings) -> SandboxServer | None:
    """This process's warm server for ``settings``, started now (without waiting for it) if
    none serves them; any other is closed first. None where there is no sandbox, where the
    configuration turns warm servers off (``c.Sandbox.warm = False``), or where a probe found
    that children cannot get fresh namespaces here."""
    if not settings.warm or _NO_WARM or not available()[0]:
        return None
    warm = current_warm(settings)
    if warm is not None:
        return warm
    stop_warm()
    try:
        _WARM.append(SandboxServer(settings, warm=True))
    except (OSError, subprocess.SubprocessError):
        return None
    return _WARM[0]


def discard_warm(server: SandboxServer | None = None) -> None:
    if _WARM and (server is None or _WARM[0] is server):
        stop_warm()


def stop_warm() -> None:
    while _WARM:
        _WARM.pop().close()


atexit.register(stop_warm)


def open_job(settings: Settings, source: Path | None, *, kernel: bool) -> tuple[SandboxServer, Job]:
    """A job for a kernel (``kernel``) or an audit holding a copy of ``source``: in the warm
    server when it works, else in a single-use server of its own."""
    warm = ensure_warm(settings)
    if warm is not None:
        try:
            return warm, warm.new_job(source, kernel=kernel)
        except SandboxError:
            discard_warm(warm)
    return open_single(settings, source, kernel=kernel)


def open_single(settings: Settings, source: Path | None, *, kernel: bool) -> tuple[SandboxServer, Job]:
    """A job in a single-use server (fresh by construction); closed by ``release_job``."""
    try:
        server = SandboxServer(settings, warm=False, hide_secrets=not kernel)
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxError(f"the sandbox did not start: {exc}") from None
    try:
        return server, server.new_job(source, kernel=kernel)
    except BaseException:
        server.close()
        raise


def release_job(server: SandboxServer, job: Job) -> None:
    server.end_job(job)
    if not server.warm:
        server.close()


def run_audit(folder: Path, timeout: int, settings: Settings) -> tuple[str, bytes | None]:
    """The audit's entry point (``hand_audit``) on the inputs in ``folder``, in a sandbox; the
    ``out-*`` files it wrote are put back into ``folder``. Returns '' or why the audit ended
    early, and its record as the server read it from its pipe (None where the sandbox failed
    before the record could be collected)."""
    try:
        server, job = open_job(settings, folder, kernel=False)
        try:
            pid = server.spawn_audit(job, timeout)
        except SandboxError:
            if not server.warm:
                release_job(server, job)
                raise
            discard_warm(server)  # the warm server broke: this audit gets a sandbox of its own
            server, job = open_single(settings, folder, kernel=False)
            try:
                pid = server.spawn_audit(job, timeout)
            except SandboxError:
                release_job(server, job)
                raise
    except SandboxError as exc:
        return f"the audit's sandbox failed before the audit started ({exc})", None
    try:
        ended = _wait(server, pid, timeout)
        files, record = server.collect(job)
        _write_outputs(folder, files)
        return ended, record
    except SandboxError:
        if server.warm:
            discard_warm(server)
        return "the audit's sandbox ended before the audit did", None
    finally:
        release_job(server, job)


def _wait(server: SandboxServer, pid: int, timeout: int) -> str:
    deadline = time.monotonic() + timeout
    while server.wait(pid, min(2.0, max(deadline - time.monotonic(), 0.0))) is None:
        if time.monotonic() > deadline:
            server.signal(pid, signal.SIGKILL)
            return f"the audit ran out of time ({timeout} s)"
    return ""


def _write_outputs(folder: Path, files: dict[str, bytes]) -> None:
    """The collected files, each new in ``folder`` (the grader's own), never through a link."""
    for name, data in files.items():
        if not OUT_NAME.fullmatch(name):
            continue
        try:
            fd = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
