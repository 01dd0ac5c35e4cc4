"""What each child of the sandbox's server sets up for itself before its code runs.

``fresh_namespaces``: new user, mount, IPC and network namespaces, new tmpfs over the server's
private folders, and the grader's folder covered but for the job's own folders (``warm_server``
lists all of it). For a kernel: an empty IPython profile (``ipython_profile``), a helper that
keeps the privilege to make its socket folder read-only once the kernel has bound its sockets
(``ReadOnlyLater``, ``wait_for_sockets``). ``probe`` tells whether a child can have all of it here;
``mount_points`` and ``under`` read the mounts.
"""

import os
import re
import select
import time

from course_grading.sandbox import isolate

SOCKET_SECONDS = 20  # for a kernel to bind its sockets
PROFILE_DIRS = (("startup", 0o755), ("log", 0o755), ("security", 0o700), ("pid", 0o700))


def decode_mount_path(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def mount_points() -> list[str]:
    found = []
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as fh:
        for line in fh:
            found.append(decode_mount_path(line.split()[4]))
    return found


def under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def probe(jobs_root: str, isolate_child) -> tuple[bool, str]:
    """Whether a child can get namespaces of its own here, and why not: a throw-away child
    tries every step (the server's namespace with ``jobs_root``, then a child's,
    ``isolate_child()``, then dropping privileges)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            isolate.enter_namespaces(network=False, ipc=False)
            isolate.tmpfs(jobs_root, 1, mode=0o755)
            inner = os.fork()
            if inner == 0:
                try:
                    isolate_child()
                    isolate.drop_privileges()
                    os._exit(0)
                except BaseException as exc:  # noqa: BLE001 - whatever failed, the parent reads it from the pipe
                    os.write(write, f"{type(exc).__name__}: {exc}".encode()[:500])
                    os._exit(1)
            _, status = os.waitpid(inner, 0)
            os._exit(0 if status == 0 else 1)
        except BaseException as exc:  # noqa: BLE001 - whatever failed, the parent reads it from the pipe
            os.write(write, f"{type(exc).__name__}: {exc}".encode()[:500])
            os._exit(1)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read, "rb") as fh:
        why = fh.read().decode(errors="replace")
    return status == 0, why or ("" if status == 0 else f"the probe ended with status {status}")


def fresh_namespaces(keep: list, hide=(), *, private: list, base: str, megabytes: int, home: str) -> None:
    """Fresh namespaces for this (forked, single-threaded) child (``warm_server`` says what it
    gets): ``private`` folders covered by new tmpfs of ``megabytes`` (``home`` 0700), ``base``
    by an empty read-only one in which only ``keep``, (source, target, "ro" or "rw") folders,
    appear; ``hide``: folders covered by an empty read-only tmpfs."""
    covered = list(private)
    points = mount_points()
    carried = [m for m in points if any(under(m, c) and m != c for c in covered) and not under(m, base)]
    carried = [m for m in dict.fromkeys(carried) if not any(under(m, o) and m != o for o in carried)]
    isolate.enter_namespaces()
    stage_root = "/dev/shm"
    isolate.tmpfs(stage_root, megabytes, mode=0o1777)  # the staging area, then /dev/shm
    stage = os.path.join(stage_root, ".stage")
    os.mkdir(stage, 0o700)
    moves = []
    for index, (source, target, mode) in enumerate([*((m, m, "ro") for m in carried), *keep]):
        staged = os.path.join(stage, str(index))
        os.mkdir(staged)
        isolate.mount(source, staged, None, isolate.MS_BIND | isolate.MS_REC)
        moves.append((staged, target, mode))
    for folder in covered:
        if folder != stage_root:
            isolate.tmpfs(folder, megabytes, mode=0o700 if folder == home else 0o1777)
    os.makedirs(base, exist_ok=True)
    isolate.tmpfs(base, 1, mode=0o755)
    for staged, target, mode in moves:
        os.makedirs(target, exist_ok=True)
        isolate.mount(staged, target, None, isolate.MS_BIND | isolate.MS_REC)
        if mode == "ro":
            isolate.remount_readonly(target)
    isolate.remount_readonly(base)
    for staged, _, _ in moves:
        isolate.unmount(staged)
        os.rmdir(staged)
    os.rmdir(stage)
    for folder in hide:
        if os.path.isdir(folder):
            isolate.tmpfs(folder, 0.0625, mode=0o555, readonly=True)
    isolate.loopback_up()
    isolate.new_session_keyring()


class ReadOnlyLater:
    """A process that keeps the child's privileges (in the child's own namespace) for one
    step after the child has dropped them: the socket folder made read-only once the kernel
    has bound its sockets. Not dumpable, it cannot be traced by the kernel."""

    def __init__(self, folder: str):
        self.go_r, self.go_w = os.pipe()
        self.done_r, self.done_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.go_w)
            os.close(self.done_r)
            code = 1
            try:
                if os.read(self.go_r, 1) == b"1":
                    isolate.remount_readonly(folder)
                    os.write(self.done_w, b"1")
                    code = 0
            finally:
                os._exit(code)
        os.close(self.go_r)
        os.close(self.done_w)

    def finish(self) -> None:
        os.write(self.go_w, b"1")
        ready, _, _ = select.select([self.done_r], [], [], SOCKET_SECONDS)
        if not ready or os.read(self.done_r, 1) != b"1":
            raise isolate.IsolationError(1, "the socket folder could not be made read-only")
        os.waitpid(self.pid, 0)
        os.close(self.go_w)
        os.close(self.done_r)


def ipython_profile(home: str, readonly: bool) -> str:
    """An empty IPython profile in $HOME (read-only when it can be): no startup file, no
    configuration, wherever the kernel looks. Returns its folder."""
    profile = os.path.join(home, ".ipython", "profile_default")
    for name, mode in PROFILE_DIRS:
        os.makedirs(os.path.join(profile, name), mode=mode, exist_ok=True)
        os.chmod(os.path.join(profile, name), mode)
    if readonly:
        isolate.mount(profile, profile, None, isolate.MS_BIND | isolate.MS_REC)
        isolate.remount_readonly(profile)
    return profile


def wait_for_sockets(app) -> None:
    ports = (app.shell_port, app.iopub_port, app.stdin_port, app.control_port, app.hb_port)
    paths = [f"{app.ip}-{port}" for port in ports]
    deadline = time.monotonic() + SOCKET_SECONDS
    while not all(os.path.exists(p) for p in paths):
        if time.monotonic() > deadline:
            raise isolate.IsolationError(1, "the kernel did not bind its sockets")
        time.sleep(0.002)
