"""``course doctor``: one OK/FAIL line per thing the course needs, each failure with its fix,
on this environment and on broken ones (a package too old, bubblewrap and Chromium missing,
nbgrader's server extensions off, torch broken)."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from course_grading.commands import doctor
from course_grading.commands.cli import main

ROOT = Path(__file__).resolve().parents[1]
COURSE = Path(sys.executable).with_name("course")


def _by_name(lines) -> dict:
    return {line.what: line for line in lines}


def test_this_environment(capsys):
    lines = doctor.diagnose()
    found = _by_name(lines)
    for what in (
        "python",
        "course",
        "numpy",
        "torch",
        "nbgrader",
        "ipywidgets",
        "tqdm",
        "torch device",
        "jupyter",
        "widget extension",
        "nbgrader extensions",
    ):
        assert found[what].status == doctor.OK, found[what]
    assert (
        found["torch device"].detail.startswith("torch ")
        and "notebooks run on" in found["torch device"].detail
    )
    assert all(line.fix for line in lines if line.status != doctor.OK)  # every problem has its fix
    failed = any(line.status == doctor.FAIL for line in lines)
    assert main(["--root", str(ROOT), "doctor"]) == (1 if failed else 0)
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("OK    python ")
    assert len([ln for ln in out.splitlines() if ln[:4] in ("OK  ", "FAIL", "WARN")]) == len(lines)


def test_a_broken_environment_says_what_and_how_to_fix_it(tmp_path):
    """ipywidgets too old (an older distribution first on the path), bubblewrap and Chromium
    not on PATH, nbgrader's Formgrader switched off in the user's Jupyter configuration."""
    old = tmp_path / "site" / "ipywidgets-7.0.0.dist-info"
    old.mkdir(parents=True)
    (old / "METADATA").write_text("Metadata-Version: 2.1\nName: ipywidgets\nVersion: 7.0.0\n")
    config = tmp_path / "jupyter"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        '{"ServerApp": {"jpserver_extensions": {"nbgrader.server_extensions.formgrader": false}}}'
    )
    env = {
        **os.environ,
        "PATH": str(COURSE.parent),
        "PYTHONPATH": str(tmp_path / "site"),
        # the user's configuration before the environment's (Jupyter's order: the first wins)
        "JUPYTER_CONFIG_DIR": str(config),
        "JUPYTER_PREFER_ENV_PATH": "0",
    }
    run = subprocess.run(
        [str(COURSE), "--root", str(ROOT), "doctor"], capture_output=True, text=True, env=env, timeout=300
    )
    assert run.returncode == 1, run.stdout + run.stderr
    lines = run.stdout.splitlines()

    def line(status, what):
        found = [i for i, ln in enumerate(lines) if ln.startswith(f"{status:<4}  {what} ")]
        assert found, f"no {status} {what} in\n{run.stdout}"
        return lines[found[0]], lines[found[0] + 1] if found[0] + 1 < len(lines) else ""

    text, fix = line("FAIL", "ipywidgets")
    assert "7.0.0 installed, the course needs >=8.1" in text and fix.strip() == f"fix: {doctor.SETUP}"
    text, fix = line("FAIL", "bubblewrap")  # installed, not on this PATH: the fix puts it there
    assert "bwrap is installed, but not on PATH" in text and 'fix: export PATH="$PATH:/' in fix
    text, fix = line("FAIL", "nbgrader extensions")
    assert "nbgrader.server_extensions.formgrader" in text
    assert fix.strip() == (
        f"fix: {sys.executable} -m course_grading.commands.server_config enable "
        "nbgrader.server_extensions.formgrader"
    )
    text, fix = line("WARN", "chromium")  # only the tests need it ...
    assert "chromium" in text and ('fix: export PATH="$PATH:/' in fix or "install" in fix)
    line("OK", "torch device")
    assert "3 problems found" in run.stdout

    quiet = subprocess.run(
        [str(COURSE), "--root", str(ROOT), "doctor", "--test", "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert quiet.returncode == 1
    assert not any(ln.startswith("OK") for ln in quiet.stdout.splitlines())  # only what is wrong
    assert any(ln.startswith("FAIL  chromium") for ln in quiet.stdout.splitlines())  # ... unless --test
    assert "4 problems found" in quiet.stdout

    # the fixes of nbgrader's extensions and of bubblewrap, run as printed (in one shell: the
    # PATH it sets is that shell's), make their lines OK
    fixes = [
        lines[lines.index(found) + 1].split("fix: ", 1)[1]
        for found in lines
        if found.startswith(("FAIL  nbgrader extensions", "FAIL  bubblewrap"))
    ]
    after = subprocess.run(
        " && ".join([*fixes, f'"{COURSE}" --root "{ROOT}" doctor']),
        shell=True,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert "OK    nbgrader extensions" in after.stdout and "OK    bubblewrap" in after.stdout, after.stdout


def test_broken_torch_and_missing_widgets_fail_with_their_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    line = doctor.check_torch()
    assert (line.status, line.what) == (
        doctor.FAIL,
        "torch device",
    ) and "import of torch halted" in line.detail
    # its files broken: reinstalled alone (tried: torch/__init__.py removed, the fix run, OK)
    assert (
        f"-m pip install --force-reinstall --no-deps torch=={importlib.metadata.version('torch')}" in line.fix
    )
    monkeypatch.setattr(doctor, "_labextension", lambda name: None)
    line = doctor.check_widgets()
    assert line.status == doctor.FAIL and "@jupyter-widgets/jupyterlab-manager" in line.detail
    # the package is installed, its extension's files are gone: setup.sh would change nothing,
    # the fix reinstalls that package alone, at its version (tried: the extension is back, OK)
    version = importlib.metadata.version("jupyterlab_widgets")
    assert line.fix == (
        f"{sys.executable} -m pip install --force-reinstall --no-deps jupyterlab_widgets=={version}"
    )
    assert line.blocks_start
    line = doctor.check_nbgrader_extensions()
    assert line.status == doctor.FAIL and "--force-reinstall --no-deps nbgrader==" in line.fix
    assert not line.blocks_start  # a learner's course works without the Assignments tab


def test_a_course_that_does_not_import_is_named_not_a_traceback(monkeypatch, capsys):
    """The learner side broken: the course line FAILs with its fix, and the lines that would run
    the course's code (the device, the sandbox's probe) wait for it, with that fix."""
    monkeypatch.setitem(sys.modules, "course_utils", None)  # `import course_utils` raises
    found = _by_name(doctor.diagnose())
    course = found["course"]
    assert course.status == doctor.FAIL and "course_utils" in course.detail and course.fix == doctor.SETUP
    for what in ("torch device", "bubblewrap"):
        assert found[what].status == doctor.FAIL and found[what].fix == course.fix, found[what]
        assert found[what].detail.startswith("not checked: the course does not import")
    assert not found["bubblewrap"].blocks_start
    assert main(["--root", str(ROOT), "doctor", "--quiet"]) == 1
    assert "FAIL  course" in capsys.readouterr().out


def test_a_device_that_fails_is_fixed_by_the_cpu(monkeypatch):
    import course_utils.device as device

    real = device.get_device
    monkeypatch.setattr(
        device, "get_device", lambda: (_ for _ in ()).throw(RuntimeError("CUDA error: no kernel image"))
    )
    line = doctor.check_torch()
    assert line.status == doctor.FAIL and line.fix.startswith("export COURSE_DEVICE=cpu")
    monkeypatch.setattr(device, "get_device", real)
    monkeypatch.setenv("COURSE_DEVICE", "cpu")  # the fix
    line = doctor.check_torch()
    assert line.status == doctor.OK and "notebooks run on cpu (COURSE_DEVICE)" in line.detail


def test_start_stops_only_for_what_breaks_the_course(monkeypatch, capsys):
    bwrap = doctor.Line(
        doctor.FAIL, "bubblewrap", "bwrap is not on PATH", "apt-get install bubblewrap", blocks_start=False
    )
    widgets = doctor.Line(doctor.FAIL, "widget extension", "gone", "pip install ...")
    monkeypatch.setattr(doctor, "diagnose", lambda test=False: [doctor.Line(doctor.OK, "python", "3"), bwrap])
    assert main(["--root", str(ROOT), "doctor", "--quiet", "--start"]) == 0  # shown, and it starts
    assert "FAIL  bubblewrap" in capsys.readouterr().out
    assert main(["--root", str(ROOT), "doctor", "--quiet"]) == 1
    monkeypatch.setattr(doctor, "diagnose", lambda test=False: [bwrap, widgets])
    assert main(["--root", str(ROOT), "doctor", "--quiet", "--start"]) == 1


def test_setup_reinstalls_what_is_missing_although_its_stamp_says_up_to_date():
    """setup.sh asks ``python -m course_grading.commands.doctor`` whether every package is there, at a
    version the course takes, before it trusts its stamp ("packages up to date")."""
    script = (ROOT / "scripts" / "setup.sh").read_text()
    assert (
        script.index("-m course_grading.commands.doctor")
        < script.index('rm -f "$stamp"')
        < script.index('if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]')
    )
    run = subprocess.run(
        [sys.executable, "-m", "course_grading.commands.doctor"], capture_output=True, timeout=120
    )
    assert run.returncode == (0 if doctor.installed_ok() else 1)


def _run_fix(line, env) -> None:
    """Run a doctor line's printed fix, as the instructor would paste it."""
    assert line.status == doctor.FAIL and line.fix, line
    done = subprocess.run(line.fix, shell=True, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_instructor_server_lines_are_made_ok_by_their_fixes(tmp_path, monkeypatch):
    """Without the Formgrader's CSP extension and frame-ancestors (a fresh user configuration),
    each line FAILs; its printed fix, run, makes it OK."""
    from course_grading.commands import doctor_instructor as di
    from course_grading.course.config import jupyter_server_config

    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")
    env = {**os.environ}
    config = jupyter_server_config()
    csp, framing = di.check_csp_extension(config), di.check_framing(config)
    if csp.status == doctor.OK or framing.status == doctor.OK:
        pytest.skip("this machine's system-wide Jupyter configuration already sets them")
    _run_fix(csp, env)
    _run_fix(framing, env)
    config = jupyter_server_config()
    assert di.check_csp_extension(config).status == doctor.OK
    line = di.check_framing(config)
    assert line.status == doctor.OK and "frame-ancestors 'self'" in line.detail


def test_exchange_modes_and_owner_are_made_ok_by_their_fixes(tmp_path):
    from course_grading.commands import doctor_instructor as di

    exchange = tmp_path / "exchange"
    assert "mkdir -p" in di.check_exchange(exchange, "attention-course").fix
    # not named by the configuration: a course that copies submissions itself needs none
    unnamed = di.check_exchange(exchange, "attention-course", named=False)
    assert unnamed.status == doctor.WARN and "needed only to release and collect" in unnamed.detail
    exchange.mkdir()
    exchange.chmod(0o755)  # not writable by students, not sticky
    env = {**os.environ}
    for _ in range(4):  # the root, then the course's folder, outbound/, inbound/: one fix each
        line = di.check_exchange(exchange, "attention-course")
        if line.status == doctor.OK:
            break
        _run_fix(line, env)
        if line.detail.startswith(f"{exchange}:"):  # the root fixed: a release made its folders, wrong
            course = exchange / "attention-course"
            for folder, mode in ((course, 0o777), (course / "outbound", 0o777), (course / "inbound", 0o755)):
                folder.mkdir(exist_ok=True)
                folder.chmod(mode)
    line = di.check_exchange(exchange, "attention-course")
    assert line.status == doctor.OK and "inbound/ 3733" in line.detail
    assert stat.S_IMODE((exchange / "attention-course" / "inbound").stat().st_mode) == 0o3733
    if os.geteuid() != 0:
        return  # giving a folder to another user needs root
    os.chown(exchange / "attention-course" / "outbound", 65534, 65534)  # another's (nobody's)
    line = di.check_exchange(exchange, "attention-course")
    assert line.status == doctor.FAIL and "outbound: owned by " in line.detail and "chown " in line.fix
    _run_fix(line, env)
    assert di.check_exchange(exchange, "attention-course").status == doctor.OK


def test_a_postgresql_gradebook_that_cannot_be_reached_fails_with_its_fix(tmp_path):
    """On another machine, no command from here starts its server: the line says so. (Each
    failure of a gradebook on this machine is broken and fixed in test_postgres.py.)"""
    from course_grading.commands import doctor_gradebook as dg

    line = dg.check_gradebook("postgresql+psycopg2://grader:secret@192.0.2.1:1/grades", tmp_path)
    assert line.status == doctor.FAIL and "secret" not in line.detail + line.fix
    assert line.fix.startswith("none from here: the server at 192.0.2.1:1 runs on another machine")
    assert dg.check_gradebook("sqlite:///gradebook.db", tmp_path) is None


def test_a_gradebook_driver_that_does_not_import_is_installed_by_its_fix(tmp_path, monkeypatch):
    """The fix installs the driver's package, or reinstalls it where it is installed and does
    not import (its files gone). Each run for psycopg2 in test_postgres.py."""
    from course_grading.commands import doctor_gradebook as dg

    monkeypatch.setitem(sys.modules, "psycopg2", None)  # `import psycopg2` raises ImportError
    line = dg.check_gradebook("postgresql+psycopg2://grader@localhost/gradebook", tmp_path)
    assert line.status == doctor.FAIL and "its driver does not import" in line.detail
    assert line.fix == doctor.reinstall("psycopg2-binary") != doctor.SETUP  # installed here
    monkeypatch.setitem(sys.modules, "psycopg", None)
    line = dg.check_gradebook("postgresql+psycopg://grader@localhost/gradebook", tmp_path)
    assert line.fix == f"{sys.executable} -m pip install 'psycopg[binary]'"


def test_the_gradebook_sql_quotes_what_the_url_holds():
    """The role, its password and the database, quoted for SQL and for psql."""
    from course_grading.commands import doctor_gradebook as dg

    sql = dg.sql("postgresql+psycopg2://o'neil:it%27s%20%5C%3Asecret@localhost/grade'book")
    assert "WHERE rolname = 'o''neil'" in sql and "PASSWORD %L', 'o''neil', 'it''s \\:secret')" in sql
    assert "\\connect 'grade\\'book'" in sql and sql.count("\\gexec") == 4
    assert "PASSWORD" not in dg.sql("postgresql://grader@localhost/gradebook")


def test_doctor_instructor_names_each_line_then_all_ok_after_the_fixes(tmp_path, monkeypatch, capsys):

    from course_grading.commands import doctor_instructor as di
    from course_grading.course.config import jupyter_server_config

    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    exchange = tmp_path / "exchange"
    with (course / "nbgrader_config.py").open("a", encoding="utf-8") as config:
        config.write(f"\nc.Exchange.root = {str(exchange)!r}\n")
    monkeypatch.setenv("JUPYTER_CONFIG_DIR", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_PREFER_ENV_PATH", "0")
    lines = {line.what: line for line in di.diagnose(course)}
    assert [lines[w].status for w in ("formgrader CSP", "frame-ancestors", "exchange")] == [doctor.FAIL] * 3
    if di.check_csp_extension(jupyter_server_config()).status == doctor.OK:
        pytest.skip("this machine's system-wide Jupyter configuration already enables it")
    for what in ("formgrader CSP", "exchange"):  # the first fix makes both server lines OK
        _run_fix(lines[what], {**os.environ})
    assert all(line.status == doctor.OK for line in di.diagnose(course)), di.diagnose(course)
    assert main(["--root", str(course), "doctor", "--instructor", "--quiet"]) in (0, 1)
    out = capsys.readouterr().out
    assert not any(
        ln.startswith(("FAIL  formgrader", "FAIL  frame", "FAIL  exchange")) for ln in out.splitlines()
    )


SERVER_SEES = """
import json
from jupyter_server.serverapp import ServerApp
from course_grading.course.config import jupyter_server_config
app = ServerApp()
app.load_config_file()
app.find_server_extensions()
ours = jupyter_server_config().ServerApp
keys = ("course_grading.instructor_server", "nbgrader.server_extensions.formgrader")
print(json.dumps([[{k: app.jpserver_extensions.get(k) for k in keys}, (app.tornado_settings.get("headers") or {})],
                  [{k: ours.jpserver_extensions.get(k) for k in keys},
                   (ours.get("tornado_settings", {}) or {}).get("headers") or {}]]))
"""


def _server_and_doctor_see(env) -> list:
    import json

    done = subprocess.run(
        [sys.executable, "-c", SERVER_SEES], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_server_settings_fixed_where_they_win(tmp_path):
    """A folder before the user's (JUPYTER_CONFIG_PATH, or the environment's in a virtual
    environment) turns the Formgrader off, its CSP extension too, and sets frame-ancestors
    'none'; a .py in the user's sets other things. The doctor reads what Jupyter's server
    reads, and the printed fixes, run, make the server itself see them right."""
    first, user = tmp_path / "first", tmp_path / "user"
    (user / "jupyter_server_config.d").mkdir(parents=True)
    first.mkdir()
    (first / "jupyter_server_config.json").write_text(
        '{"ServerApp": {"jpserver_extensions": {"nbgrader.server_extensions.formgrader": false, '
        '"course_grading.instructor_server": false}, "tornado_settings": {"xsrf_cookies": true, '
        '"headers": {"Content-Security-Policy": "default-src \'self\'; frame-ancestors \'none\'"}}}}'
    )
    (user / "jupyter_server_config.d" / "course.json").write_text(
        '{"ServerApp": {"jpserver_extensions": {"course_grading.instructor_server": true}}}'
    )
    (user / "jupyter_server_config.py").write_text(
        "c.ServerApp.tornado_settings = {'headers': {'X-Frame-Options': 'DENY'}}\n"
    )
    env = {
        **os.environ,
        "JUPYTER_CONFIG_PATH": str(first),
        "JUPYTER_CONFIG_DIR": str(user),
        "JUPYTER_PREFER_ENV_PATH": "0",
    }
    server, ours = _server_and_doctor_see(env)
    assert server == ours and server[0] == {
        "course_grading.instructor_server": False,
        "nbgrader.server_extensions.formgrader": False,
    }
    from course_grading.commands import doctor_instructor as di
    from course_grading.commands import server_config

    for fix in (di.CONFIGURE, server_config.command("nbgrader.server_extensions.formgrader")):
        done = subprocess.run(fix, shell=True, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0 and str(first) in done.stdout, done.stdout + done.stderr
    server, ours = _server_and_doctor_see(env)
    assert server == ours and server[0] == {
        "course_grading.instructor_server": True,
        "nbgrader.server_extensions.formgrader": True,
    }
    assert server[1] == {"Content-Security-Policy": "default-src 'self'; frame-ancestors 'self'"}


def test_fixes_are_written_for_root_for_sudo_and_for_su(tmp_path, monkeypatch):
    """The same fix as root (run plainly), as a user with sudo, and without it (su); the
    kernel setting that forbids user namespaces, which root's bwrap ignores but for
    user.max_user_namespaces."""
    from course_grading import system

    which = {"sudo": "/usr/bin/sudo", "runuser": "/usr/sbin/runuser"}
    monkeypatch.setattr(system.shutil, "which", lambda name: which.get(name))
    proc = tmp_path / "sys"
    (proc / "kernel").mkdir(parents=True)
    (proc / "kernel" / "apparmor_restrict_unprivileged_userns").write_text("1\n")
    for uid, chmod, pipe, userns in (
        (0, "chmod 1777 /x", "runuser -u postgres -- psql", None),
        (
            1000,
            "sudo chmod 1777 /x",
            "sudo -u postgres psql",
            "sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
        ),
    ):
        monkeypatch.setattr(system.os, "geteuid", lambda uid=uid: uid)
        assert system.as_root("chmod 1777 /x") == chmod
        assert system.as_user("postgres", "psql") == pipe
        assert system.userns_fix(str(proc)) == userns
    assert system.as_root("a && b") == "sudo sh -c 'a && b'"
    which.pop("sudo")
    assert system.as_root("chmod 1777 /x") == "su root -c 'chmod 1777 /x'"
    (proc / "user").mkdir()
    (proc / "user" / "max_user_namespaces").write_text("0\n")
    monkeypatch.setattr(system.os, "geteuid", lambda: 0)
    assert system.userns_fix(str(proc)) == "sysctl -w user.max_user_namespaces=15000"


def test_a_gradebook_on_another_machine_is_made_by_a_runnable_command(tmp_path, monkeypatch):
    """A server that answers but refuses the role: the fix pipes the SQL to psql on that host,
    as its superuser; a line the shell parses."""
    import shlex

    from sqlalchemy.engine import make_url

    from course_grading.commands import doctor_gradebook as dg

    monkeypatch.setattr(dg, "_answers", lambda url: True)
    line = dg.check_gradebook("postgresql+psycopg2://grader:pw@192.0.2.1:1/grades", tmp_path)
    assert line.status == doctor.FAIL and "as the server's superuser" in line.detail
    assert line.fix == dg._create(make_url("postgresql://grader@192.0.2.1:1/grades"), tmp_path)
    producer, consumer = line.fix.split(" | ")
    assert shlex.split(consumer) == [
        "psql",
        "-v",
        "ON_ERROR_STOP=1",
        "-q",
        "-d",
        "postgres",
        "-h",
        "192.0.2.1",
        "-p",
        "1",
        "-U",
        "postgres",
    ]
    assert shlex.split(producer)[-2:] == ["sql", str(tmp_path)]
