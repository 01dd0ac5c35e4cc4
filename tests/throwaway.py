"""A throw-away copy of this machine for the tests that break a thing and run the fix
``course doctor`` prints for it: a mount namespace of the test's own whose chosen folders
(``/usr``, ``/etc`` and ``/var`` for a system package, the course's ``.venv`` for a Python one)
are overlays on a tmpfs. What a package manager changes there is seen by no other process and
is gone when the namespace ends: the machine's own files are never touched.

``heal`` runs, in such a namespace (or in this one, for what changes only a shell's PATH): the
breaking shell script, the doctor as the user would run it, the fix it printed for one line,
pasted into a shell as it is, then the doctor again in that shell. It returns that line before
and after, and what the fix printed and exited with.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SYSTEM = ("/usr", "/etc", "/var")
CANNOT_BREAK = 77  # the exit status of a breaking script that could not (a registry unreachable)
VENV = Path(sys.prefix)
COURSE = Path(sys.executable).with_name("course")
ROOT = Path(__file__).resolve().parents[1]

# Runs in the namespace: argv[1] the line's name, argv[2] the doctor's command line.
HEAL = r"""
import json, subprocess, sys
what, doctor = sys.argv[1], sys.argv[2]
MARK = "::the fix exited::"


def shown(out):
    lines = out.splitlines()
    for i, ln in enumerate(lines):
        if ln[6:].startswith(what + "  "):
            fix = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return {"status": ln[:4].strip(), "detail": ln[6:][len(what):].strip(),
                    "fix": fix[len("fix: "):] if fix.startswith("fix: ") else ""}
    return None


before = subprocess.run(doctor, shell=True, capture_output=True, text=True, timeout=300)
found = {"before": shown(before.stdout), "printed": before.stdout[-4000:] + before.stderr[-2000:]}
if found["before"] and found["before"]["fix"]:
    # one shell: what the fix exports is there for the doctor after it, as in a terminal
    after = subprocess.run(f'{found["before"]["fix"]}\necho "{MARK} $?"\n{doctor}',
                           shell=True, capture_output=True, text=True, timeout=900)
    fixing, _, again = after.stdout.partition(MARK)
    found.update(rc=int(again.split()[0]) if again else None, after=shown(again),
                 output=(fixing + after.stderr)[-3000:], printed_after=again[-4000:])
print(json.dumps(found))
"""


def unavailable(reason: str):
    """Skip, except under CI (root on Debian), where the test must run."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: under CI (root on Debian) the test must run")
    pytest.skip(reason)


def namespace(tmp_path: Path, folders) -> tuple[list[str], str]:
    """The command prefix of a mount namespace of its own, and the shell script that mounts
    each of ``folders`` there as an overlay on a tmpfs. Skipped where it cannot be made: not
    root on Linux (a failure under CI), no overlayfs in a mount namespace (a skip, even under
    CI: the runner's limit, not the course's)."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("unshare"):
        unavailable("a throw-away copy of this machine needs root, unshare and Linux")
    layers = tmp_path / "layers"
    layers.mkdir()
    mount = f'mount -t tmpfs tmpfs "{layers}"\n'
    for i, folder in enumerate(folders):
        upper, work = layers / f"{i}", layers / f"{i}.work"
        mount += (
            f'mkdir "{upper}" "{work}"\nmount -t overlay overlay -o '
            f'lowerdir="{folder}",upperdir="{upper}",workdir="{work}" "{folder}"\n'
        )
    prefix = ["unshare", "--mount", "--propagation", "private"]
    probe = subprocess.run(
        [*prefix, "sh", "-c", f"set -e\n{mount}"], capture_output=True, text=True, timeout=60
    )
    if probe.returncode != 0:
        pytest.skip(f"no overlay mount in a mount namespace here: {probe.stderr.strip()[:200]}")
    if "/var" in map(str, folders):  # dpkg's manual-page trigger (tens of seconds), off there only
        mount += "rm -f /var/lib/man-db/auto-update\n"
    return prefix, mount


def course(tmp_path: Path) -> tuple[list[str], str]:
    """``namespace`` over the clone and the course's environment (where pip and setup.sh write)."""
    return namespace(tmp_path, (ROOT,) if ROOT in VENV.parents else (ROOT, VENV))


def system(tmp_path: Path) -> tuple[list[str], str]:
    """``namespace`` over the system's own folders, where apt and dpkg install (a failure under
    CI where there are none: it runs as root on Debian)."""
    if not (shutil.which("apt-get") and shutil.which("dpkg")):
        unavailable("no apt-get or dpkg: not a Debian system")
    return namespace(tmp_path, SYSTEM)


def heal(what: str, breaking: str = "", prefix=(), mount: str = "", doctor: str = "", env=None) -> dict:
    """``breaking`` then HEAL in the namespace ``prefix`` (with ``mount`` first), for the
    doctor's line ``what``; ``doctor`` is the doctor's command (``course doctor --test``)."""
    doctor = doctor or f'"{COURSE}" --root "{ROOT}" doctor --test'
    script = f'set -e\n{mount}{breaking}\nexec "{sys.executable}" -c "$0" "$1" "$2"'
    done = subprocess.run(
        [*prefix, "/bin/sh", "-c", script, HEAL, what, doctor],
        capture_output=True,
        text=True,
        env=env,
        timeout=1200,
    )
    if done.returncode == CANNOT_BREAK:
        pytest.skip(f"the thing could not be broken here: {(done.stdout + done.stderr)[-300:]}")
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["before"], f"no {what} line in\n{found['printed']}"
    return found


# what pip and apt say when they cannot reach the package registry
UNREACHABLE = (
    "No matching distribution",
    "Could not find a version",
    "NewConnectionError",
    "Name or service not known",
    "Could not resolve",
    "Temporary failure resolving",
)


def healed(found: dict, status: str = "FAIL") -> dict:
    """Assert that the line was ``status``, its fix ran as printed, and the line is OK after it
    (skipped where the fix could not reach its package registry)."""
    assert found["before"]["status"] == status and found["before"]["fix"], found["printed"]
    if found["rc"] and any(why in found["output"] for why in UNREACHABLE):
        pytest.skip(f"the fix cannot reach its package registry here: {found['output'][-300:]}")
    assert found["rc"] == 0, f"{found['before']['fix']}\n{found['output']}"
    assert found["after"] and found["after"]["status"] == "OK", found["printed_after"]
    return found
