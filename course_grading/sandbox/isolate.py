"""Linux primitives for a fresh, private set of namespaces per sandboxed process (standard
library only: it runs inside the sandbox, in the warm server and in each child it forks).

A process inside bubblewrap has no capabilities, but it may still create a user namespace of
its own, in which it holds every capability over what it creates there: a mount namespace
whose mounts it may cover with new tmpfs (the ones it inherited are locked: it can cover them,
never unmount them to see what they hid), and new IPC and network namespaces. The warm server
enters one such namespace once (to mount each job's working folder); every kernel and audit
it forks enters another before any student code runs:

    enter_namespaces()        a user namespace mapping this uid/gid to itself, plus new mount
                              (made private), and optionally IPC and network namespaces
    tmpfs(path, mb)           a new tmpfs (size-limited) on ``path``
    bind_fd(fd, path)         an open directory bound on ``path``
    remount_readonly(path)    make the mount at ``path`` read-only
    loopback_up()             the new network namespace's ``lo`` up (nothing else exists)
    new_session_keyring()     a kernel keyring of its own, not the server's
    drop_privileges()         every capability gone, in every set, for good (then checked)

``copy_tree`` copies a folder's regular files and folders, never following or creating a
symbolic link, within a budget: the grader uses it to copy a submission in, the warm server to
fill a job's working folder.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import socket
import stat
import struct

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC = 32, 1024, 2048, 4096, 16384
MS_PRIVATE, MS_RELATIME = 1 << 18, 1 << 21
MNT_DETACH = 2
# statvfs flags -> the mount flags a remount must repeat (a locked mount refuses to lose them)
_KEEP_FLAGS = {
    os.ST_NOSUID: MS_NOSUID,
    os.ST_NODEV: MS_NODEV,
    os.ST_NOEXEC: MS_NOEXEC,
    os.ST_NOATIME: MS_NOATIME,
    os.ST_NODIRATIME: MS_NODIRATIME,
    os.ST_RELATIME: MS_RELATIME,
}

PR_GET_DUMPABLE, PR_SET_DUMPABLE = 3, 4
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# root is no longer special (exec grants nothing), the set*uid fix-ups are off, ambient
# capabilities cannot be raised: each bit locked
SECUREBITS = 0b11101111
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_KEYCTL = {"x86_64": 250, "aarch64": 219}
KEYCTL_JOIN_SESSION_KEYRING = 1
NOBODY = 65534

_libc = ctypes.CDLL(None, use_errno=True)


class IsolationError(OSError):
    """A namespace, mount or privilege step failed: nothing of a student's may run then."""


def _check(result: int, what: str) -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise IsolationError(code, f"{what}: {os.strerror(code)}")
    return result


def prctl(option: int, value: int = 0, arg3: int = 0) -> int:
    return _check(
        _libc.prctl(
            ctypes.c_int(option),
            ctypes.c_ulong(value),
            ctypes.c_ulong(arg3),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        ),
        f"prctl({option})",
    )


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def enter_namespaces(*, network: bool = True, ipc: bool = True) -> None:
    """Enter a new user namespace and a new mount namespace whose mounts stop propagating;
    with ``network`` and ``ipc``, new network (only a loopback, down) and IPC (System V, POSIX
    queues) namespaces too.

    The new user namespace maps this uid and gid to themselves, or root to ``nobody``: only a
    process that held CAP_SETFCAP may map root, and nothing here needs to be root."""
    uid, gid = os.geteuid(), os.getegid()
    inner_uid, inner_gid = uid or NOBODY, gid or NOBODY
    flags = CLONE_NEWUSER | CLONE_NEWNS | (CLONE_NEWNET if network else 0) | (CLONE_NEWIPC if ipc else 0)
    dumpable = prctl(PR_GET_DUMPABLE)
    set_dumpable(True)  # else /proc/self/*_map belong to root and may not be written
    try:
        _check(_libc.unshare(ctypes.c_int(flags)), "unshare")
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{inner_uid} {uid} 1\n")
        _write("/proc/self/gid_map", f"{inner_gid} {gid} 1\n")
    finally:
        set_dumpable(bool(dumpable))
    mount(None, "/", None, MS_REC | MS_PRIVATE)


def mount(source, target, fstype, flags: int, data: str | None = None) -> None:
    def enc(s):
        return None if s is None else os.fsencode(s)

    _check(
        _libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
        f"mount {target}",
    )


def unmount(target: str) -> None:
    _check(_libc.umount2(os.fsencode(target), ctypes.c_int(MNT_DETACH)), f"umount {target}")


def tmpfs(path: str, megabytes: float, *, mode: int = 0o755, readonly: bool = False) -> None:
    """A new tmpfs of at most ``megabytes`` on ``path`` (no devices, no set-uid)."""
    size = max(4, int(megabytes * 1024))
    flags = MS_NOSUID | MS_NODEV | (MS_RDONLY if readonly else 0)
    mount("tmpfs", path, "tmpfs", flags, f"size={size}k,nr_inodes={max(64, size // 4)},mode={mode:o}")


def bind_fd(fd: int, path: str, *, readonly: bool = False) -> None:
    """Bind the open directory ``fd`` on ``path`` (recursively: nothing beneath is revealed)."""
    mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
    if readonly:
        remount_readonly(path)


def remount_readonly(path: str) -> None:
    """The mount at ``path`` read-only, keeping the flags it had (a locked mount demands it)."""
    flags = os.statvfs(path).f_flag
    keep = 0
    for st_flag, ms_flag in _KEEP_FLAGS.items():
        if flags & st_flag:
            keep |= ms_flag
    mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)


def loopback_up() -> None:
    """Bring ``lo`` up in this network namespace (a new one has it down)."""
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock.fileno(), SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock.fileno(), SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | IFF_UP))


def new_session_keyring() -> bool:
    """Join a new anonymous session keyring (else every child would share the server's);
    False where the kernel refuses keyrings altogether."""
    number = _KEYCTL.get(os.uname().machine)
    if number is None:
        return False
    result = _libc.syscall(
        ctypes.c_long(number), ctypes.c_int(KEYCTL_JOIN_SESSION_KEYRING), ctypes.c_void_p(None)
    )
    if result < 0:
        if ctypes.get_errno() in (errno.ENOSYS, errno.EPERM, errno.EACCES):
            return False
        _check(result, "keyctl")
    return True


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap", encoding="ascii") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 63


def drop_privileges() -> None:
    """Give up every capability for good: securebits locked (exec grants root nothing), the
    bounding and ambient sets emptied, the effective, permitted and inheritable sets zeroed,
    no_new_privs set. Checked afterwards in /proc/self/status; IsolationError if anything is
    left (the bounding set may stay only where there was no privilege to empty it: with
    no_new_privs nothing can be gained from it). Capabilities belong to a thread: call it while
    this process has only one."""
    if len(os.listdir("/proc/self/task")) != 1:
        raise IsolationError(errno.EBUSY, "drop_privileges: more than one thread")
    try:
        prctl(PR_SET_SECUREBITS, SECUREBITS)
    except IsolationError:
        pass  # without CAP_SETPCAP: nothing to lock, the sets below are emptied all the same
    bounding_emptied = True
    for cap in range(_last_cap() + 1):
        try:
            prctl(PR_CAPBSET_DROP, cap)
        except IsolationError as exc:
            if exc.errno == errno.EPERM:
                bounding_emptied = False
                break
            if exc.errno != errno.EINVAL:
                raise
    try:
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    except IsolationError:
        pass  # kernels without ambient capabilities
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), ctypes.byref(data)), "capset")
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    left = privileges()
    sets = ("CapInh", "CapPrm", "CapEff", "CapAmb") + (("CapBnd",) if bounding_emptied else ())
    if any(int(left.get(k, "1"), 16) for k in sets) or left.get("NoNewPrivs") != "1":
        raise IsolationError(errno.EPERM, f"privileges left after dropping them: {left}")


def privileges() -> dict[str, str]:
    """This thread's capability sets and no_new_privs, as /proc/self/status shows them."""
    found = {}
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs")):
                name, value = line.split()
                found[name.rstrip(":")] = value
    return found


def set_dumpable(value: bool) -> None:
    prctl(PR_SET_DUMPABLE, 1 if value else 0)


# --------------------------------------------------------------------------- copying


class CopyError(OSError):
    """A folder could not be copied within its budget."""


SKIPPED = (".ipynb_checkpoints", "__pycache__")
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_folder(path: str, dir_fd: int | None = None) -> int:
    """An fd of the folder ``path`` itself (never of what a symbolic link there points to)."""
    return os.open(path, _DIR, dir_fd=dir_fd)


def copy_tree(
    source_fd: int, target_fd: int, *, max_bytes: int, max_entries: int = 10_000, skip=SKIPPED
) -> int:
    """Copy the regular files and folders under the folder ``source_fd`` into the (empty)
    folder ``target_fd``; symbolic links, devices, sockets and pipes are left out, nothing is
    followed and nothing existing is written through. Returns the bytes copied; CopyError when
    the tree holds more than ``max_bytes`` or ``max_entries``."""
    budget = {"bytes": max_bytes, "entries": max_entries}
    _copy_folder(source_fd, target_fd, budget, skip, depth=0)
    return max_bytes - budget["bytes"]


def _copy_folder(source_fd: int, target_fd: int, budget: dict, skip, depth: int) -> None:
    if depth > 32:
        raise CopyError(errno.ELOOP, "folders nested too deep")
    with os.scandir(source_fd) as entries:
        names = [(e.name, e.stat(follow_symlinks=False).st_mode) for e in entries]
    for name, mode in sorted(names):
        budget["entries"] -= 1
        if budget["entries"] < 0:
            raise CopyError(errno.EFBIG, "too many files")
        if stat.S_ISDIR(mode) and name not in skip:
            os.mkdir(name, 0o700, dir_fd=target_fd)
            inner_source = open_folder(name, source_fd)
            try:
                inner_target = open_folder(name, target_fd)
                try:
                    _copy_folder(inner_source, inner_target, budget, skip, depth + 1)
                finally:
                    os.close(inner_target)
            finally:
                os.close(inner_source)
        elif stat.S_ISREG(mode):
            _copy_file(name, source_fd, target_fd, budget)


def _copy_file(name: str, source_fd: int, target_fd: int, budget: dict) -> None:
    try:
        src = os.open(name, _READ, dir_fd=source_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOENT):
            return  # replaced by a link, or gone, since the listing
        raise
    try:
        if not stat.S_ISREG(os.fstat(src).st_mode):
            return
        dst = os.open(
            name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=target_fd
        )
        try:
            while True:
                chunk = os.read(src, 1 << 20)
                if not chunk:
                    break
                budget["bytes"] -= len(chunk)
                if budget["bytes"] < 0:
                    raise CopyError(errno.EFBIG, "more data than the folder may hold")
                view = memoryview(chunk)
                while view:
                    view = view[os.write(dst, view) :]
        finally:
            os.close(dst)
    finally:
        os.close(src)


def read_regular_files(folder_fd: int, accept, *, max_bytes: int) -> dict[str, bytes]:
    """The regular files directly in ``folder_fd`` whose names ``accept(name)`` takes, read
    without following links or blocking on pipes, at most ``max_bytes`` in all."""
    found, left = {}, max_bytes
    for name in sorted(os.listdir(folder_fd)):
        if not accept(name):
            continue
        try:
            fd = os.open(name, _READ, dir_fd=folder_fd)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            parts = []
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                parts.append(chunk)
                left -= len(chunk)
            if left <= 0 and os.read(fd, 1):
                raise CopyError(errno.EFBIG, f"the files hold more than {max_bytes} bytes")
            found[name] = b"".join(parts)
        finally:
            os.close(fd)
    return found
