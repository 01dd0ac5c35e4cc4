"""Sandboxed grading kernels (and audit processes) with Debian's bubblewrap.

Every process that runs a student's code is a child of a sandbox server (``warm_server``)
started as

    python -I exec_limited.py SPEC -- bwrap OPTIONS -- python -I -m ...warm_server ...

``exec_limited`` (trusted, outside the sandbox) puts itself into fresh per-sandbox cgroups
where the machine allows (processes, memory, a fair CPU share), sets resource limits (CPU
time, file size, memory where there is no cgroup, open files) and a clean environment, then
runs ``bwrap``, which gives the code:

* a user namespace without capabilities (when the grader runs as root, the sandbox runs as
  ``nobody`` in it), no network (``--unshare-net``: only its own loopback), its own PID
  namespace (the server is its PID 1: nothing inside can signal or trace it), IPC and UTS
  namespaces, a new session, and it dies with its parent;
* the whole filesystem read-only, ``/dev`` too; of the root folder, only the system's folders
  (``SYSTEM_FOLDERS``): every other one, and the course folders (``settings``), behind empty
  read-only tmpfs, the Python environment and the course's two packages mounted back,
  read-only, where they live; nbgrader's configuration files covered;
* writable only: size-limited tmpfs on ``/tmp``, ``/var/tmp``, ``/dev/shm`` and ``$HOME``
  (``Sandbox.tmpfs_mb`` each), and the socket folder of the kernels (``ipc``);
* read-only: the ``spool`` where the grader puts each job's files.

Inside, each kernel or audit the server forks gets fresh namespaces of its own (see
``warm_server`` and ``isolate``). Where bubblewrap is missing or does not work (macOS, a
container without user namespaces), ``available()`` says why, ``fix()`` what makes it run on
this machine, and the grader refuses to grade a class (or, for one notebook, runs the kernel
unsandboxed, loudly).
"""

from __future__ import annotations

import functools
import json
import os
import resource
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import course_utils

from .. import system
from .settings import Settings

LEARNER_PACKAGE = Path(course_utils.__file__).resolve().parent
GRADING_PACKAGE = Path(__file__).resolve().parents[1]
# The instructor's secrets: no audit process may import or read them, the warm server never
# imports them (grading kernels do: the hidden checks use the reference).
SECRET_MODULES = ("course_grading.reference", "course_grading.checks")
SECRET_FOLDERS = tuple(GRADING_PACKAGE / m.rsplit(".", 1)[1] for m in SECRET_MODULES)
EXEC = Path(__file__).resolve().with_name("exec_limited.py")
CGROUP_ROOT = Path("/sys/fs/cgroup")
GRADER_GROUP = "course-grader-"  # name prefix of a grading worker's memory cgroup (workers.py)
NOBODY = 65534
HIDDEN_MB = 1  # the empty tmpfs over a hidden folder (read-only once the mounts inside are made)
IPC_MB = 1  # a single-use sandbox's socket folder
# What a sandboxed process sees of the root folder: the system's own folders. Every other one
# (/home, /root, /srv, /opt, /mnt, /run, ...: other courses, other copies of the reference,
# runtime files of the instructor's own Jupyter) is an empty folder, but for the Python
# environment and the course's packages, mounted back read-only where they live.
SYSTEM_FOLDERS = (
    "bin",
    "sbin",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "usr",
    "etc",
    "var",
    "tmp",
    "dev",
    "proc",
    "sys",
    "nix",
    "gnu",
)
# ... less what a system keeps for root alone (a sandbox of a root grader runs as root's uid)
SYSTEM_SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
    "/var/backups",
    "/var/cache",
    "/var/lib",
    "/var/log",
    "/var/mail",
    "/var/spool",
)
UNSANDBOXED_WARNING = (
    "WARNING: grading WITHOUT a sandbox ({why}): student code runs with your "
    "rights and can read or change the gradebook. To sandbox it: {fix}"
)
UNSANDBOXED_REFUSAL = (
    "grading needs the bubblewrap sandbox, which does not run here ({why}). "
    "To fix it: {fix}; or grade unsandboxed with --no-sandbox"
)


@functools.lru_cache(maxsize=None)
def available() -> tuple[bool, str]:
    """(True, "") when bubblewrap exists and runs a sandbox here, else (False, why)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False, "bubblewrap (bwrap) is not installed"
    try:
        probe = subprocess.run(
            [
                bwrap,
                *_namespace_options(),
                "--ro-bind",
                "/",
                "/",
                "--dev",
                "/dev",
                "--proc",
                "/proc",
                "--tmpfs",
                "/tmp",
                "--",
                "true",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bubblewrap does not run: {exc}"
    if probe.returncode != 0:
        return False, f"bubblewrap does not work here: {probe.stderr.strip()[:200]}"
    return True, ""


def fix() -> str:
    """What makes bubblewrap run here, as a command for this machine where one can (install it,
    put it on PATH, allow user namespaces), else what to do instead."""
    if shutil.which("bwrap") is None:
        return system.provide("bwrap", "bubblewrap")
    return system.userns_fix() or (
        "none here: this system forbids the user namespaces bubblewrap needs, and no kernel "
        "setting of it is to blame (a container's seccomp or AppArmor profile is): grade on a "
        "machine or VM, or in a container started with --security-opt seccomp=unconfined "
        "--security-opt apparmor=unconfined"
    )


def sandbox_ids() -> tuple[int, int]:
    """The uid and gid sandboxed code runs as: the grader's own, or nobody's for root."""
    return (os.getuid() or NOBODY), (os.getgid() or NOBODY)


def _namespace_options() -> list[str]:
    # A user namespace of its own, as nobody when the grader is root: the sandbox has no
    # capability outside it, and may make namespaces of its own inside (its children do).
    # --cap-drop ALL: none inside it either. --as-pid-1: the server is PID 1, which nothing in
    # the sandbox can kill, stop or trace; when it ends, everything in the sandbox ends.
    uid, gid = sandbox_ids()
    return [
        "--unshare-user",
        "--uid",
        str(uid),
        "--gid",
        str(gid),
        "--unshare-net",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
        "--as-pid-1",
    ]


def inside(path: Path, folder: Path) -> bool:
    try:
        Path(path).relative_to(folder)
        return True
    except ValueError:
        return False


def _python_dirs() -> list[Path]:
    """Folders the sandboxed Python needs to read: its environment (and whatever else is on
    its path) and the course's packages."""
    found = [
        Path(sys.prefix),
        Path(sys.base_prefix),
        LEARNER_PACKAGE,
        GRADING_PACKAGE,
        Path(sys.executable).resolve().parent,
    ]
    found += [Path(p) for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p)]
    found = [p.resolve() for p in dict.fromkeys(found)]
    return [p for p in found if not any(inside(p, q) and p != q for q in found)]


def outside_system() -> list[Path]:
    """The folders of / that are not the system's (see SYSTEM_FOLDERS)."""
    try:
        return sorted(
            p
            for p in Path("/").iterdir()
            if p.is_dir() and not p.is_symlink() and p.name not in SYSTEM_FOLDERS
        )
    except OSError:
        return []


def sandbox_home() -> Path:
    """$HOME inside the sandbox: the grader's own path (an empty private tmpfs there)."""
    home = Path(os.path.expanduser("~")).resolve()
    return home if home.is_dir() and home != Path("/") else Path("/tmp")


def private_folders() -> list[Path]:
    """The folders every sandboxed process writes in: each a size-limited tmpfs of its own."""
    return list(dict.fromkeys([Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), sandbox_home()]))


def bwrap_options(
    settings: Settings, base: Path, *, single: bool = False, hide_secrets: bool = False
) -> list[str]:
    """bwrap options for a sandbox server whose grader-side folder is ``base``: ``spool``
    bound read-only, ``jobs`` where the server mounts its jobs, ``ipc`` (the kernels' sockets)
    writable; with ``single``, ``work`` and ``ipc`` are size-limited tmpfs of the sandbox's own
    (its one job's working folder and socket folder). ``hide_secrets`` covers the instructor's
    secret folders too (a sandbox that only audits)."""
    size = str(settings.tmpfs_mb << 20)
    options = [*_namespace_options(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    private = private_folders()
    hidden = [Path(h) for h in (*settings.hidden, *SYSTEM_SECRETS)]
    hidden_dirs = [
        h
        for h in [*outside_system(), *hidden]
        if h.is_dir() and not h.is_symlink() and not any(inside(h, p) for p in private)
    ]
    hidden_dirs = [
        h for h in dict.fromkeys(hidden_dirs) if not any(inside(h, o) and h != o for o in hidden_dirs)
    ]
    for folder in hidden_dirs:
        options += ["--size", str(HIDDEN_MB << 20), "--tmpfs", str(folder)]
    for folder in private:  # after the hidden ones, which may hold one ($HOME in a hidden /home)
        if folder.is_dir() or folder == Path("/dev/shm"):
            options += ["--size", size, "--tmpfs", str(folder)]
    for folder in _python_dirs():
        if any(inside(folder, h) for h in (*hidden_dirs, *private)):
            options += ["--ro-bind", str(folder), str(folder)]
    for file in hidden:
        if (
            file.is_file()
            and not file.is_symlink()
            and not any(inside(file, h) for h in (*hidden_dirs, *private))
        ):
            options += ["--ro-bind", "/dev/null", str(file)]
    if hide_secrets:
        for folder in SECRET_FOLDERS:
            if folder.is_dir():
                options += ["--size", "65536", "--tmpfs", str(folder), "--remount-ro", str(folder)]
    options += [
        "--ro-bind",
        str(base / "spool"),
        str(base / "spool"),
        "--ro-bind",
        str(base / "jobs"),
        str(base / "jobs"),
    ]
    if single:  # its one job's folder and socket folder: tmpfs of its own
        options += [
            "--size",
            size,
            "--tmpfs",
            str(base / "work"),
            "--size",
            str(IPC_MB << 20),
            "--tmpfs",
            str(base / "ipc"),
        ]
    else:  # the sockets of every kernel (each child sees its own only, read-only once bound)
        options += ["--bind", str(base / "ipc"), str(base / "ipc")]
    for folder in hidden_dirs:
        options += ["--remount-ro", str(folder)]
    options += ["--remount-ro", "/dev", "--chdir", str(base / "spool")]
    return options


# --------------------------------------------------------------------------- cgroups


def _cgroup_base(controller: str) -> Path | None:
    """This process's own cgroup (v1) of ``controller``, when it is writable."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                base = CGROUP_ROOT / controller / path.lstrip("/")
                if base.name.startswith(GRADER_GROUP):  # a grading worker's own memory bound:
                    base = base.parent  # its sandboxes are bounded beside it, not within it
                return base if os.access(base, os.W_OK) else None
    except OSError:
        return None
    return None


class Cgroups:
    """Per-sandbox cgroups (v1: pids, memory, cpu) under this process's own; empty if not allowed.

    ``files`` (instead of ``limits``) makes other groups: ``{controller: {file: value}}``
    under ``prefix`` (a grading worker's own memory bound, ``workers``)."""

    def __init__(
        self, limits: Settings | None = None, *, files: dict | None = None, prefix: str = "course-sandbox-"
    ):
        self.paths: list[Path] = []
        self.memory = False
        self.memory_path: Path | None = None
        name = f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:12]}"  # whose: ``left_by``
        settings = (
            files
            if files is not None
            else {
                "pids": {"pids.max": str(limits.processes)},
                "memory": {"memory.limit_in_bytes": str(limits.memory_mb << 20)},
                "cpu": {},
            }
        )
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
            if controller == "memory":
                self.memory, self.memory_path = True, path

    @classmethod
    def left_by(cls, pid: int, prefix: str = "course-sandbox-") -> "Cgroups":
        """The groups that process ``pid``, now ended, made and did not remove (a grading
        worker killed with its sandboxes): call ``remove()`` on them."""
        groups = cls(files={})
        for controller in ("pids", "memory", "cpu"):
            base = _cgroup_base(controller)
            if base is not None:
                groups.paths += sorted(base.glob(f"{prefix}{pid}-*"))
        return groups

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer ended for going over the memory group's
        limit (v1 ``memory.oom_control``; else whether the limit was ever hit, ``failcnt``)."""
        if self.memory_path is None:
            return 0
        try:
            for line in (self.memory_path / "memory.oom_control").read_text().splitlines():
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
            return int((self.memory_path / "memory.failcnt").read_text())
        except (OSError, ValueError):
            return 0

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
        self.paths, self.memory_path = [], None


# What a kernel keeps of the grader's environment: locale and time zone, thread counts, and the
# CPU kernels torch and the BLAS libraries may use (set where older builds compute wrong results
# on a processor, or to grade as another machine would).
KEPT_ENVIRONMENT = (
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "ATEN_CPU_CAPABILITY",
    "MKL_ENABLE_INSTRUCTIONS",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
)


def _environment(home: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in KEPT_ENVIRONMENT if k in os.environ}
    env.update(
        HOME=home, PYTHONNOUSERSITE="1", MPLBACKEND="agg", PYTHONDONTWRITEBYTECODE="1", COURSE_SANDBOXED="1"
    )
    return env


def wrap(
    command: list[str],
    settings: Settings,
    base: Path,
    *,
    single: bool = False,
    hide_secrets: bool = False,
    cpu_seconds: int | None = None,
) -> tuple[list[str], "Cgroups"]:
    """The full command line that runs ``command`` in a sandbox (``bwrap_options``), and its
    cgroups (call ``remove()`` on them when the process has ended)."""
    groups = Cgroups(settings)
    rlimits = {
        "RLIMIT_CPU": cpu_seconds or settings.cpu_seconds,
        "RLIMIT_FSIZE": settings.file_mb << 20,
        "RLIMIT_NOFILE": settings.open_files,
        "RLIMIT_CORE": 0,
        # as high as allowed: a grading worker's own bound (workers.py) is not the sandbox's
        "RLIMIT_DATA": resource.getrlimit(resource.RLIMIT_DATA)[1],
    }
    if not groups.memory:
        rlimits["RLIMIT_AS"] = (settings.memory_mb + 2048) << 20  # address space > resident memory
    spec = {
        "rlimits": rlimits,
        "cgroups": [str(p) for p in groups.paths],
        "env": _environment(str(sandbox_home())),
        "quiet": True,
    }
    argv = [
        sys.executable,
        "-I",
        str(EXEC),
        json.dumps(spec),
        "--",
        shutil.which("bwrap") or "bwrap",
        *bwrap_options(settings, base, single=single, hide_secrets=hide_secrets),
        "--",
        *command,
    ]
    return argv, groups


def configure(config, *roots) -> bool:
    """Make ``config`` (nbgrader's) run every grading kernel sandboxed, hiding the course
    ``roots`` and every course folder the configuration names (``settings.course_folders``,
    kept in ``SandboxKernelManager.hidden_folders``). Returns False, changing nothing, when
    no sandbox is available here."""
    from .settings import course_folders

    ok, _ = available()
    if not ok:
        return False
    config.SandboxKernelManager.hidden_folders = list(course_folders(config, *roots))
    config.Execute.kernel_manager_class = "course_grading.sandbox.sandbox_kernel_manager.SandboxKernelManager"
    return True
