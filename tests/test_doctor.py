"""``course doctor``: one OK/FAIL line per thing the course needs, each failure with its fix,
on this environment and on broken ones (a package too old, bubblewrap and Chromium missing,
nbgrader's server extensions off, torch broken)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from course_grading.commands import doctor
from course_grading.commands.cli import main

ROOT = Path(__file__).resolve().parents[1]
COURSE = Path(sys.executable).with_name("course")


def _by_name(lines) -> dict:
    return {line.what: line for line in lines}


def test_this_environment(capsys):
    lines = doctor.diagnose()
    found = _by_name(lines)
    for what in ("python", "course", "numpy", "torch", "nbgrader", "ipywidgets", "tqdm", "torch device",
                 "jupyter", "widget extension", "nbgrader extensions"):
        assert found[what].status == doctor.OK, found[what]
    assert found["torch device"].detail.startswith("torch ") and "notebooks run on" in found["torch device"].detail
    assert all(line.fix for line in lines if line.status != doctor.OK)  # every problem has its fix
    failed = any(line.status == doctor.FAIL for line in lines)
    assert main(["--root", str(ROOT), "doctor"]) == (1 if failed else 0)
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("OK    python ")
    assert len([ln for ln in out.splitlines() if ln[:4] in ("OK  ", "FAIL", "WARN")]) == len(lines)


def test_a_broken_environment_says_what_and_how_to_fix_it(tmp_path):
    """ipywidgets too old (an older distribution first on the path), no bubblewrap nor Chromium
    on PATH, nbgrader's Formgrader switched off in the user's Jupyter configuration."""
    old = tmp_path / "site" / "ipywidgets-7.0.0.dist-info"
    old.mkdir(parents=True)
    (old / "METADATA").write_text("Metadata-Version: 2.1\nName: ipywidgets\nVersion: 7.0.0\n")
    config = tmp_path / "jupyter"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        '{"ServerApp": {"jpserver_extensions": {"nbgrader.server_extensions.formgrader": false}}}')
    env = {**os.environ, "PATH": str(COURSE.parent), "PYTHONPATH": str(tmp_path / "site"),
           # the user's configuration before the environment's (Jupyter's order: the first wins)
           "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_PREFER_ENV_PATH": "0"}
    run = subprocess.run([str(COURSE), "--root", str(ROOT), "doctor"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()

    def line(status, what):
        found = [i for i, ln in enumerate(lines) if ln.startswith(f"{status:<4}  {what} ")]
        assert found, f"no {status} {what} in\n{run.stdout}"
        return lines[found[0]], lines[found[0] + 1] if found[0] + 1 < len(lines) else ""

    text, fix = line("FAIL", "ipywidgets")
    assert "7.0.0 installed, the course needs >=8.1" in text and "fix: bash scripts/setup.sh" in fix
    text, fix = line("FAIL", "bubblewrap")
    assert "bwrap is not on PATH" in text and "apt-get install bubblewrap" in fix
    text, fix = line("FAIL", "nbgrader extensions")
    assert "nbgrader.server_extensions.formgrader" in text
    assert "jupyter server extension enable --sys-prefix nbgrader.server_extensions.formgrader" in fix
    text, fix = line("WARN", "chromium")  # only the tests need it ...
    assert "apt-get install chromium" in fix
    line("OK", "torch device")
    assert "3 problems found" in run.stdout

    quiet = subprocess.run([str(COURSE), "--root", str(ROOT), "doctor", "--test", "--quiet"],
                           capture_output=True, text=True, env=env, timeout=300)
    assert quiet.returncode == 1
    assert not any(ln.startswith("OK") for ln in quiet.stdout.splitlines())  # only what is wrong
    assert any(ln.startswith("FAIL  chromium") for ln in quiet.stdout.splitlines())  # ... unless --test
    assert "4 problems found" in quiet.stdout


def test_broken_torch_and_missing_widgets_fail_with_their_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    line = doctor.check_torch()
    assert (line.status, line.what) == (doctor.FAIL, "torch device") and "import of torch halted" in line.detail
    assert "scripts/setup.sh" in line.fix
    monkeypatch.setattr(doctor, "_labextension", lambda name: None)
    line = doctor.check_widgets()
    assert line.status == doctor.FAIL and "@jupyter-widgets/jupyterlab-manager" in line.detail and line.fix


def test_start_script_runs_the_doctor_before_jupyterlab():
    script = (ROOT / "scripts" / "start.sh").read_text()
    assert script.index("bash scripts/setup.sh") < script.index("course doctor --quiet") \
        < script.index("course start")
