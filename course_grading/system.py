"""Commands that change this machine, written for this machine: what needs root is run as it
(plainly when we are root, else through ``sudo``, else ``su``), a package is installed with the
package manager found here (reinstalled when it is installed but its files are gone), and a
kernel setting that forbids user namespaces is named with its value. ``course doctor`` prints
them as fixes; the sandbox names bubblewrap's when it cannot run.

Each returns one command line for a POSIX shell, or ``None`` where no command can be known.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

# a package manager: its command, how it installs, how it reinstalls, how to ask if installed
_MANAGERS = (
    (
        "apt-get",
        "apt-get install -y {}",
        "apt-get install -y --reinstall {}",
        ["dpkg-query", "-W", "-f=${db:Status-Abbrev}"],
    ),
    ("dnf", "dnf install -y {}", "dnf reinstall -y {}", ["rpm", "-q"]),
    ("yum", "yum install -y {}", "yum reinstall -y {}", ["rpm", "-q"]),
    (
        "zypper",
        "zypper --non-interactive install {}",
        "zypper --non-interactive install --force {}",
        ["rpm", "-q"],
    ),
    ("pacman", "pacman -S --noconfirm {}", "pacman -S --noconfirm {}", ["pacman", "-Q"]),
    ("apk", "apk add {}", "apk fix {}", ["apk", "info", "-e"]),
)
# where a system keeps its programs, for a PATH without them
SYSTEM_BIN = ("/usr/bin", "/bin", "/usr/local/bin", "/usr/sbin", "/sbin")
# kernel settings that forbid user namespaces: (name, its forbidding value, the allowing one,
# whether root is bound by it: the first two bind only processes without CAP_SYS_ADMIN)
USERNS_SETTINGS = (
    ("kernel.apparmor_restrict_unprivileged_userns", "1", "0", False),  # Ubuntu 23.10+
    ("kernel.unprivileged_userns_clone", "0", "1", False),  # Debian before 11
    ("user.max_user_namespaces", "0", "15000", True),
)


def as_root(command: str) -> str:
    """``command`` as root: itself when we are root, else through sudo, else su."""
    if os.geteuid() == 0:
        return command
    if shutil.which("sudo"):
        return f"sudo {command}" if _simple(command) else f"sudo sh -c {shlex.quote(command)}"
    return f"su root -c {shlex.quote(command)}"


def as_user(user: str, command: str) -> str:
    """``command`` as the account ``user`` (PostgreSQL's ``postgres``, say)."""
    if os.geteuid() == 0 and shutil.which("runuser"):
        return f"runuser -u {shlex.quote(user)} -- {command}"
    if os.geteuid() != 0 and shutil.which("sudo"):
        return f"sudo -u {shlex.quote(user)} {command}"
    return as_root(f"su {shlex.quote(user)} -s /bin/sh -c {shlex.quote(command)}")


def _simple(command: str) -> bool:
    """Whether ``command`` is one program and its arguments (sudo can run it as it is)."""
    return not any(sign in command for sign in ("&&", "||", "|", ";", ">", "<", "$", "`"))


def off_path(program: str) -> str | None:
    """The system's ``program`` when PATH does not lead to it (what runs it looks on PATH)."""
    if shutil.which(program):
        return None
    found = [folder for folder in SYSTEM_BIN if os.access(os.path.join(folder, program), os.X_OK)]
    return os.path.join(found[0], program) if found else None


def provide(program: str, package: str) -> str:
    """The command that puts ``program`` on PATH: the folder of the system's own, or
    ``package`` installed; prose where neither can be known."""
    elsewhere = off_path(program)
    if elsewhere:
        return f'export PATH="$PATH:{os.path.dirname(elsewhere)}"'
    return install(package) or f"install {package} with this system's package manager"


def install(package: str) -> str | None:
    """The command that installs ``package`` with this machine's package manager (reinstalls
    it when the manager has it installed: its files are gone; apt's lists updated first when
    they offer no such package: removed, as container images do), as root; None without one."""
    for program, fresh, again, query in _MANAGERS:
        if not shutil.which(program):
            continue
        name = shlex.quote(package)
        if _installed(query, package):
            return as_root(again.format(name))
        if program == "apt-get" and not _apt_offers(package):
            return as_root(f"apt-get update && {fresh.format(name)}")
        return as_root(fresh.format(name))
    return None


def _run(command: list[str]) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _installed(query: list[str], package: str) -> bool:
    done = _run([*query, package])
    if done is None or done.returncode != 0:
        return False
    return done.stdout.startswith("ii") if query[0] == "dpkg-query" else True


def _apt_offers(package: str) -> bool:
    """Whether apt's lists have a version of ``package`` to install."""
    done = _run(["apt-cache", "policy", package])
    found = [
        ln.split(":", 1)[1].strip()
        for ln in (done.stdout if done else "").splitlines()
        if ln.strip().startswith("Candidate:")
    ]
    return bool(found) and found[0] != "(none)"


def userns_setting(proc: str = "/proc/sys") -> tuple[str, str] | None:
    """The kernel setting that keeps this process from making user namespaces, and the value
    that allows them; None when none of them does (a container's seccomp filter, say)."""
    root = os.geteuid() == 0
    for name, forbids, allows, binds_root in USERNS_SETTINGS:
        try:
            value = Path(proc, *name.split(".")).read_text(encoding="ascii").strip()
        except OSError:
            continue
        if value == forbids and (binds_root or not root):
            return name, allows
    return None


def userns_fix(proc: str = "/proc/sys") -> str | None:
    """The command that allows user namespaces here (until the next boot), or None."""
    found = userns_setting(proc)
    return as_root(f"sysctl -w {found[0]}={found[1]}") if found else None


def git_changed(clone: Path, file: str) -> bool:
    """Whether ``file``, tracked by the git checkout ``clone``, differs from git's copy (False
    where git, or the checkout, is missing)."""
    if not (clone / ".git").exists() or not shutil.which("git"):
        return False
    done = _run(["git", "-C", str(clone), "diff", "--quiet", "HEAD", "--", file])
    return done is not None and done.returncode == 1
