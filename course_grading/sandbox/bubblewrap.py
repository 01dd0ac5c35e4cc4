"""Sandboxed grading kernels (and audit processes) with Debian's bubblewrap.

Every process that runs a student's code starts as

    python -I exec_limited.py SPEC -- bwrap OPTIONS -- COMMAND

``exec_limited`` (trusted, outside the sandbox) puts itself into fresh per-sandbox cgroups
where the machine allows (processes, memory, a fair CPU share), sets resource limits (CPU
time, file size, memory where there is no cgroup, open files) and a clean environment, then
runs ``bwrap``, which gives the code:

* no network (``--unshare-net``: only its own loopback), its own PID namespace (it sees and
  signals only its own processes), a new session, no capabilities (even when the grader runs
  as root), and it dies with its parent;
* the whole filesystem read-only, with empty private ``/tmp``, ``/var/tmp`` and ``$HOME``;
* the course root hidden behind an empty tmpfs: no gradebook, no ``submitted/``,
  ``autograded/``, ``feedback/`` or ``solutions/``; only the Python environment and the
  course's two packages are mounted back, read-only, when they live inside it;
* one writable scratch folder, a copy of the submission's own folder, at its usual path.

The grading kernel hooks in through ``SandboxKernelManager``, a jupyter_client KernelManager
that wraps the kernel command line this way, talks to the kernel over Unix sockets in a
folder bound into the sandbox (``transport="ipc"``) and interrupts it with a message. It is
set as ``Execute.kernel_manager_class`` by ``configure``. Where bubblewrap is missing or does
not work (macOS, a container without user namespaces), ``available()`` says why and the
grader runs the kernel unsandboxed, loudly.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import course_utils


LEARNER_PACKAGE = Path(course_utils.__file__).resolve().parent
GRADING_PACKAGE = Path(__file__).resolve().parents[1]
EXEC = Path(__file__).resolve().with_name("exec_limited.py")
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


def inside(path: Path, folder: Path) -> bool:
    try:
        path.relative_to(folder)
        return True
    except ValueError:
        return False


def _python_dirs() -> list[Path]:
    """Folders the sandboxed Python needs to read: its environment and this package."""
    found = [Path(sys.prefix), Path(sys.base_prefix), LEARNER_PACKAGE, GRADING_PACKAGE]
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
        if any(inside(folder, h) for h in hidden):
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
    config.Execute.kernel_manager_class = (
        "course_grading.sandbox.sandbox_kernel_manager.SandboxKernelManager")
    return True
