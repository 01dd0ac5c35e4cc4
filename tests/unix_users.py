"""Tests that run as other Unix users: throw-away users (the test's own, removed afterwards), a
view of the machine in which they can run this environment's Python, and running commands as
them in it.

The course's .venv may sit on an interpreter other users cannot reach (pyenv's, under /root,
which is 0700). ``passable_world`` then gives a command prefix for a mount namespace of the
test's own in which each such folder is an empty tmpfs (0755) with only what the environment
needs bound back into it, nothing changed outside it: a process started there (a JupyterHub),
and everything it starts, can run the .venv as any user; ``as_user`` enters it.
"""

from __future__ import annotations

import os
import pwd
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from jupyter_browser import require_or_skip

VERSION = f"python{sys.version_info.major}.{sys.version_info.minor}"
MARK = "attention-course test user"  # the GECOS field of the users the tests create


def _passable(folder: Path) -> bool:
    try:
        return bool(folder.stat().st_mode & stat.S_IXOTH)
    except OSError:
        return False


def _others_can_run(path: Path) -> bool:
    """Whether a user other than its owner can run ``path`` (every folder on the way can be
    passed, the file read and executed)."""
    path = path.resolve()
    try:
        if (path.stat().st_mode & (stat.S_IROTH | stat.S_IXOTH)) != (stat.S_IROTH | stat.S_IXOTH):
            return False
    except OSError:
        return False
    return all(_passable(p) for p in path.parents)


def reachable_python() -> str | None:
    """A Python of this one's version that every user can run as it is (for small scripts
    that need nothing installed), or None."""
    for candidate in (
        getattr(sys, "_base_executable", ""),
        sys.executable,
        shutil.which(VERSION, path="/usr/local/bin:/usr/bin:/bin") or "",
    ):
        if candidate and _others_can_run(Path(candidate)):
            done = subprocess.run(
                [candidate, "-I", "-c", "import os"], capture_output=True, timeout=60, user="nobody"
            )
            if done.returncode == 0:
                return candidate
    return None


def _needed() -> list[Path]:
    """What every user's processes need to reach: this environment and its interpreter."""
    return [Path(p).resolve() for p in (sys.base_prefix, sys.prefix, sys.executable)]


def _blocked() -> dict[Path, list[Path]]:
    """{a folder others cannot pass: the needed paths below it}."""
    found: dict[Path, list[Path]] = {}
    for path in _needed():
        for folder in reversed(path.parents):  # from / down
            if not _passable(folder):
                found.setdefault(folder, [])
                target = path if path.is_dir() else path.parent
                if target not in found[folder]:
                    found[folder].append(target)
                break
    return {
        folder: [p for p in paths if not any(p != q and q in p.parents for q in paths)]
        for folder, paths in found.items()
    }


def passable_world() -> list[str]:
    """A command prefix that runs a command in a mount namespace of its own where every user
    can reach this environment ([] when they can already)."""
    steps = ["set -e"]
    for n, (folder, paths) in enumerate(sorted(_blocked().items())):
        for m, path in enumerate(paths):  # set aside, cover the folder, bind back
            steps.append(f's{n}_{m}=$(mktemp -d); mount --bind {shlex.quote(str(path))} "$s{n}_{m}"')
        steps.append(f"mount -t tmpfs -o mode=0755,size=1m tmpfs {shlex.quote(str(folder))}")
        for m, path in enumerate(paths):
            where = shlex.quote(str(path))
            steps.append(
                f'mkdir -p {where}; mount --bind "$s{n}_{m}" {where}; umount "$s{n}_{m}"; rmdir "$s{n}_{m}"'
            )
    if len(steps) == 1:
        return []
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        "; ".join(steps) + '; exec "$@"',
        "sh",
    ]


def require_users() -> None:
    """Skip (fail in CI) unless this test can create users and run this Python as them."""
    if os.geteuid() != 0:
        require_or_skip(
            "this test runs each user as a Unix user of their own: it creates them "
            "with useradd, which needs root"
        )
    missing = [c for c in ("useradd", "userdel", "unshare", "nsenter") if not shutil.which(c)]
    if missing:
        require_or_skip(f"no {', '.join(missing)} on this machine (Debian: passwd, util-linux)")


def create_user(name: str, home: Path) -> pwd.struct_passwd:
    """A new user ``name`` (and group of the name) with home folder ``home`` (made, 0700).
    A user of that name left by an earlier run of these tests is replaced; any other is not
    touched: the test is skipped (fails in CI)."""
    try:
        found = pwd.getpwnam(name)
    except KeyError:
        found = None
    if found is not None:
        if found.pw_gecos != MARK:
            require_or_skip(f"a user {name!r} exists on this machine; the test needs to create its own")
        remove_user(name)
    subprocess.run(
        [
            "useradd",
            "--no-create-home",
            "--home-dir",
            str(home),
            "--shell",
            "/bin/bash",
            "--comment",
            MARK,
            "--user-group",
            name,
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    user = pwd.getpwnam(name)
    home.mkdir(parents=True, exist_ok=True)
    give(home, user)
    home.chmod(0o700)
    return user


def remove_user(name: str) -> None:
    """Remove a user these tests created (its processes must have ended)."""
    try:
        if pwd.getpwnam(name).pw_gecos != MARK:
            return
    except KeyError:
        return
    subprocess.run(["userdel", name], capture_output=True, timeout=60)


def give(path: Path, user: pwd.struct_passwd) -> None:
    """``path`` and everything in it to ``user`` (links themselves, not followed)."""
    os.chown(path, user.pw_uid, user.pw_gid, follow_symlinks=False)
    if path.is_dir() and not path.is_symlink():
        for here, folders, files in os.walk(path):
            for name in (*folders, *files):
                os.chown(os.path.join(here, name), user.pw_uid, user.pw_gid, follow_symlinks=False)


def run_as(user: pwd.struct_passwd, command: list[str], **kw) -> subprocess.CompletedProcess:
    """``command`` run as ``user`` (its uid, its group only)."""
    return subprocess.run(
        command, user=user.pw_uid, group=user.pw_gid, extra_groups=[], capture_output=True, text=True, **kw
    )


def as_user(
    world: int | None, user: pwd.struct_passwd, command: list[str], cwd: Path, **kw
) -> subprocess.CompletedProcess:
    """``command`` run as ``user`` in folder ``cwd``, in the mount namespace of process
    ``world`` (one started with ``passable_world``; None: this one)."""
    if world is None:
        return run_as(user, command, cwd=cwd, **kw)
    return subprocess.run(
        [
            "nsenter",
            f"--target={world}",
            "--mount",
            f"--wdns={cwd}",
            f"--setgid={user.pw_gid}",
            f"--setuid={user.pw_uid}",
            "--",
            *command,
        ],
        capture_output=True,
        text=True,
        **kw,
    )
