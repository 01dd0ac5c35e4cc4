"""Sandboxed grading kernels (and audit processes) with Debian's bubblewrap.

Every process that runs a student's code starts as

    python -I _sandbox_exec.py SPEC -- bwrap OPTIONS -- COMMAND

``_sandbox_exec`` (trusted, outside the sandbox) puts itself into fresh per-sandbox cgroups
where the machine allows (processes, memory, a fair CPU share), sets resource limits (CPU
time, file size, memory where there is no cgroup, open files) and a clean environment, then
runs ``bwrap``, which gives the code:

* no network (``--unshare-net``: only its own loopback), its own PID namespace (it sees and
  signals only its own processes), a new session, no capabilities (even when the grader runs
  as root), and it dies with its parent;
* the whole filesystem read-only, with empty private ``/tmp``, ``/var/tmp`` and ``$HOME``;
* the course root hidden behind an empty tmpfs: no gradebook, no ``submitted/``,
  ``autograded/``, ``feedback/`` or ``solutions/``; only the Python environment and the
  ``course_utils`` package are mounted back, read-only, when they live inside it;
* one writable scratch folder, a copy of the submission's own folder, at its usual path.

The grading kernel hooks in through ``SandboxKernelManager``, a jupyter_client KernelManager
that wraps the kernel command line this way, talks to the kernel over Unix sockets in a
folder bound into the sandbox (``transport="ipc"``) and interrupts it with a message. It is
set as ``Execute.kernel_manager_class`` by ``configure``. Where bubblewrap is missing or does
not work (macOS, a container without user namespaces), ``available()`` says why and the
grader runs the kernel unsandboxed, loudly.
"""
from __future__ import annotations

import atexit
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path


PACKAGE_DIR = Path(__file__).resolve().parent
EXEC = PACKAGE_DIR / "_sandbox_exec.py"
CGROUP_ROOT = Path("/sys/fs/cgroup")
UNSANDBOXED_WARNING = ("WARNING: grading WITHOUT a sandbox ({why}): student code runs with your "
                       "rights and can read or change the gradebook. Install bubblewrap "
                       "(apt-get install bubblewrap) to sandbox it.")


@dataclass(frozen=True)
class Limits:
    """What one sandbox may use."""

    memory_mb: int = 3072      # cgroup memory limit, else address space (torch maps ~1.5 GB)
    cpu_seconds: int = 600     # CPU time per process (RLIMIT_CPU)
    processes: int = 128       # tasks (threads count) in the sandbox's pids cgroup
    file_mb: int = 64          # largest file it may write (RLIMIT_FSIZE)
    open_files: int = 1024


@functools.lru_cache(maxsize=None)
def available() -> tuple[bool, str]:
    """(True, "") when bubblewrap exists and runs a sandbox here, else (False, why)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False, "bubblewrap (bwrap) is not installed"
    try:
        probe = subprocess.run([bwrap, *_namespace_options(), "--ro-bind", "/", "/", "--dev", "/dev",
                                "--proc", "/proc", "--tmpfs", "/tmp", "--", "true"],
                               capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bubblewrap does not run: {exc}"
    if probe.returncode != 0:
        return False, f"bubblewrap does not work here: {probe.stderr.strip()[:200]}"
    return True, ""


def _namespace_options() -> list[str]:
    # --cap-drop ALL: a grader running as root (a container, CI) would otherwise hand the
    # student's code root's capabilities, enough to unmount what hides the course folders.
    return ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--die-with-parent", "--new-session", "--cap-drop", "ALL"]


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def _python_dirs() -> list[Path]:
    """Folders the sandboxed Python needs to read: its environment and this package."""
    found = [Path(sys.prefix), Path(sys.base_prefix), PACKAGE_DIR]
    return [p.resolve() for p in dict.fromkeys(found)]


def bwrap_options(*, hidden_roots: tuple[Path, ...] = (), scratch: Path, cwd: Path,
                  rw: tuple[Path, ...] = (), home: Path | None = None) -> list[str]:
    """bwrap options: read-only everything, private /tmp and $HOME (empty, or ``home``
    bound there), ``hidden_roots`` emptied (the Python environment and this package mounted
    back), ``scratch`` at ``cwd`` writable, and ``rw`` folders writable at their own paths."""
    real_home = Path(os.path.expanduser("~")).resolve()
    hidden = [Path("/tmp"), Path("/var/tmp"), real_home, *(Path(h).resolve() for h in hidden_roots)]
    options = [*_namespace_options(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for folder in dict.fromkeys(hidden):
        if folder != Path("/") and folder.is_dir():
            options += ["--tmpfs", str(folder)]
    if home is not None:  # a private, pre-seeded $HOME (before the environment, which may live in it)
        options += ["--bind", str(home), str(real_home)]
    for folder in _python_dirs():
        if any(_inside(folder, h) for h in hidden):
            options += ["--ro-bind", str(folder), str(folder)]
    for folder in rw:
        options += ["--bind", str(folder), str(folder)]
    options += ["--bind", str(scratch), str(cwd), "--chdir", str(cwd)]
    return options


# --------------------------------------------------------------------------- cgroups

def _cgroup_base(controller: str) -> Path | None:
    """This process's own cgroup (v1) of ``controller``, when it is writable."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                base = CGROUP_ROOT / controller / path.lstrip("/")
                return base if os.access(base, os.W_OK) else None
    except OSError:
        return None
    return None


class Cgroups:
    """Per-sandbox cgroups (v1: pids, memory, cpu) under this process's own; empty if not allowed."""

    def __init__(self, limits: Limits):
        self.paths: list[Path] = []
        self.memory = False
        name = f"course-sandbox-{uuid.uuid4().hex[:12]}"
        settings = {"pids": {"pids.max": str(limits.processes)},
                    "memory": {"memory.limit_in_bytes": str(limits.memory_mb << 20)},
                    "cpu": {}}
        for controller, files in settings.items():
            base = _cgroup_base(controller)
            if base is None:
                continue
            path = base / name
            try:
                path.mkdir()
                for file, value in files.items():
                    (path / file).write_text(value)
            except OSError:
                shutil.rmtree(path, ignore_errors=True) if path.exists() else None
                try:
                    path.rmdir()
                except OSError:
                    pass
                continue
            self.paths.append(path)
            self.memory = self.memory or controller == "memory"

    def remove(self) -> None:
        """Kill what is left in the groups, then remove them."""
        import signal
        for path in self.paths:
            try:
                for pid in (path / "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (OSError, ValueError):
                        pass
            except OSError:
                pass
        for path in self.paths:
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except OSError:
                    import time
                    time.sleep(0.05)
        self.paths = []


def _environment(home: str) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TZ", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
            "NBGRADER_EXECUTION")  # set by nbgrader while it grades: notebooks skip their demos
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update(HOME=home, PYTHONNOUSERSITE="1", MPLBACKEND="agg", PYTHONDONTWRITEBYTECODE="1",
               COURSE_SANDBOXED="1")
    return env


def wrap(command: list[str], *, scratch: Path, cwd: Path, hidden_roots: tuple[Path, ...] = (),
         limits: Limits = Limits(), rw: tuple[Path, ...] = (),
         home: Path | None = None) -> tuple[list[str], Cgroups]:
    """The full command line that runs ``command`` sandboxed, and its cgroups (call
    ``remove()`` on them when the process has ended)."""
    groups = Cgroups(limits)
    rlimits = {"RLIMIT_CPU": limits.cpu_seconds, "RLIMIT_FSIZE": limits.file_mb << 20,
               "RLIMIT_NOFILE": limits.open_files, "RLIMIT_CORE": 0}
    if not groups.memory:
        rlimits["RLIMIT_AS"] = (limits.memory_mb + 2048) << 20  # address space > resident memory
    spec = {"rlimits": rlimits, "cgroups": [str(p) for p in groups.paths],
            "env": _environment(os.path.expanduser("~")), "quiet": True}
    argv = [sys.executable, "-I", str(EXEC), json.dumps(spec), "--", shutil.which("bwrap") or "bwrap",
            *bwrap_options(hidden_roots=hidden_roots, scratch=scratch, cwd=cwd, rw=rw, home=home), "--", *command]
    return argv, groups


def describe(limits: Limits = Limits()) -> dict:
    return asdict(limits)


def seed_home(home: Path) -> None:
    """A private $HOME holding a copy of matplotlib's font cache (else rebuilt each time)."""
    home.mkdir(parents=True, exist_ok=True)
    cache = Path(os.path.expanduser("~")) / ".cache" / "matplotlib"
    for font_list in cache.glob("fontlist-*.json") if cache.is_dir() else []:
        (home / ".cache" / "matplotlib").mkdir(parents=True, exist_ok=True)
        shutil.copy(font_list, home / ".cache" / "matplotlib" / font_list.name)


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
        command = [sys.executable, "-I", "-m", "course_utils._warm_server", str(theirs.fileno()),
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
    return all(any(_inside(Path(r), Path(h)) for h in (*hidden, *private)) for r in required)


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


def hidden_roots() -> tuple[Path, ...]:
    """The course folders every sandbox hides (``COURSE_SANDBOX_HIDE``, set by ``configure``)."""
    return tuple(Path(p) for p in os.environ.get("COURSE_SANDBOX_HIDE", "").split(os.pathsep) if p)


def hide(*roots) -> None:
    """Add ``roots`` to the course folders every sandbox hides (``COURSE_SANDBOX_HIDE``)."""
    known = [str(p) for p in hidden_roots()]
    os.environ["COURSE_SANDBOX_HIDE"] = os.pathsep.join(
        dict.fromkeys(known + [str(Path(r).resolve()) for r in roots]))


def configure(config, *roots) -> bool:
    """Make ``config`` (nbgrader's) run every grading kernel sandboxed, hiding the course
    ``roots``. Returns False, changing nothing, when no sandbox is available here."""
    ok, _ = available()
    if not ok:
        return False
    hide(*roots)
    config.Execute.kernel_manager_class = "course_utils.sandbox.SandboxKernelManager"
    return True


_HEAVY = ("SandboxKernelManager", "LimitedExecute", "autograde_preprocessors")


def __getattr__(name: str):
    """The kernel manager and the Execute preprocessor need jupyter_client and nbgrader:
    imported on first use, so that starting a warm sandbox costs no such import."""
    if name in _HEAVY:
        from . import _sandbox_kernel
        return getattr(_sandbox_kernel, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
