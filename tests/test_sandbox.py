"""The bubblewrap sandbox: what a grading kernel can and cannot do."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from traitlets.config import Config

from conftest import ASSIGNMENT, SOLUTION_CELL, make_course, tiny_notebook
from course_grading.authoring.nbformat_tools import write_notebook
from course_grading.sandbox import bubblewrap as sandbox
from course_grading.sandbox import warm
from course_grading.sandbox.sandbox_kernel_manager import SandboxKernelManager
from course_grading.sandbox.settings import Settings

needs_bwrap = pytest.mark.skipif(not sandbox.available()[0], reason="needs a working bubblewrap sandbox")


def test_available_says_why_when_missing(monkeypatch):
    sandbox.available.cache_clear()
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    try:
        ok, why = sandbox.available()
        assert not ok and "not installed" in why
    finally:
        sandbox.available.cache_clear()


@needs_bwrap
@pytest.mark.slow
def test_kernel_runs_inside_the_sandbox(tmp_path):
    """A kernel in a sandbox of its own (``c.Sandbox.warm = False``)."""
    course = tmp_path / "course"
    (course / "autograded" / "s").mkdir(parents=True)
    (course / "gradebook.db").write_text("secret")
    (course / "submitted" / "other").mkdir(parents=True)
    config = Config()
    config.SandboxKernelManager.hidden_folders = [str(course)]
    config.Sandbox.warm = False
    probes = [
        "import os, socket\nprint(sorted(os.listdir('.')), os.path.exists(%r))"
        % str(course / "gradebook.db"),
        "open(%r).read()" % str(course / "gradebook.db"),
        "socket.create_connection(('127.0.0.1', 9), 1)",
        "open(%r, 'w')" % str(Path(sandbox.__file__)),
        "open('scratch.txt', 'w').write('mine'); print(open('scratch.txt').read())",
        "print(os.environ.get('COURSE_SANDBOX_HIDE'), os.environ.get('COURSE_SANDBOXED'))",
        "print(sorted(os.listdir(os.path.expanduser('~'))))\n"
        "open(os.path.expanduser('~/course-sandbox-probe'), 'w').write('x')",
    ]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(p) for p in probes]
    marker = Path.home() / ".course-sandbox-marker"
    marker.write_text("the grader's own home")
    try:
        NotebookClient(
            nb,
            kernel_manager_class=SandboxKernelManager,
            allow_errors=True,
            timeout=60,
            config=config,
            resources={"metadata": {"path": str(course / "autograded" / "s")}},
        ).execute()
    finally:
        marker.unlink()
    assert not warm._WARM  # no warm sandbox was started
    out = [c.outputs[0] for c in nb.cells]
    # printed text may arrive as several stream messages: join them
    printed = [
        "".join(o.get("text", "") for o in c.outputs if o["output_type"] == "stream").strip()
        for c in nb.cells
    ]
    assert printed[0] == "[] False"
    assert out[1]["ename"] == "FileNotFoundError"
    assert (
        out[2]["ename"] in ("OSError", "ConnectionRefusedError")
        and "unreachable" in out[2]["evalue"]
        or out[2]["ename"] == "ConnectionRefusedError"
    )
    assert out[3]["ename"] == "OSError" and "Read-only" in out[3]["evalue"]
    assert printed[4] == "mine"
    assert printed[5] == "None 1"
    assert ".course-sandbox-marker" not in printed[6]  # a private home, not the grader's
    assert not (Path.home() / "course-sandbox-probe").exists()
    assert not (course / "autograded" / "s" / "scratch.txt").exists()
    assert (course / "gradebook.db").read_text() == "secret"


@needs_bwrap
def test_wrapped_process_has_limits(tmp_path):
    code = (
        "import resource, os, sys; print(resource.getrlimit(resource.RLIMIT_CPU)[0], "
        "resource.getrlimit(resource.RLIMIT_FSIZE)[0], len([p for p in os.listdir('/proc') if p.isdigit()]), "
        "[l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0], file=sys.stderr)"
    )
    for name in ("spool", "ipc", "jobs"):
        (tmp_path / name).mkdir()
    argv, groups = sandbox.wrap([sys.executable, "-c", code], Settings(cpu_seconds=7, file_mb=1), tmp_path)
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    finally:
        groups.remove()
    cpu, fsize, procs, caps = out.stderr.split() if out.stderr else ("", "", "", "")
    assert (cpu, fsize) == ("7", str(1 << 20)) and int(procs) <= 3, out
    assert int(caps, 16) == 0, out  # no capabilities, even when the grader runs as root


# --------------------------------------------------------------------------- the configuration


def test_sandbox_settings_come_from_nbgrader_config(tmp_path):
    from course_grading.course.course import Course
    from course_grading.course.nbgrader_setup import course_directory

    exchange, other = tmp_path / "exchange", tmp_path / "other-course"
    (exchange / "inbound").mkdir(parents=True)
    other.mkdir()
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    with open(course / "nbgrader_config.py", "a") as fh:
        fh.write(
            f"\nc.Exchange.root = {str(exchange)!r}\nc.Sandbox.memory_mb = 1234\n"
            f"c.Sandbox.tmpfs_mb = 48\nc.Sandbox.warm = False\n"
            f"c.Sandbox.hidden_folders = [{str(other)!r}]\n"
        )
    settings = Course(course).sandbox_settings()
    assert (settings.memory_mb, settings.tmpfs_mb, settings.warm) == (1234, 48, False)
    assert {str(course), str(exchange), str(other)} <= set(settings.hidden)
    if not sandbox.available()[0]:
        return
    # what the grading kernels get (nbgrader's configuration) is the same
    coursedir = course_directory(course, sandbox=True)
    assert Settings.from_config(coursedir.config) == settings
    base = tmp_path / "base"
    for name in ("spool", "ipc", "jobs"):
        (base / name).mkdir(parents=True)
    argv, groups = sandbox.wrap(["true"], settings, base)
    try:
        spec = json.loads(argv[3])
        limits = [
            Path(p, "memory.limit_in_bytes").read_text().strip() for p in spec["cgroups"] if "/memory/" in p
        ]
        assert limits == [str(1234 << 20)] or spec["rlimits"]["RLIMIT_AS"] == (1234 + 2048) << 20
        options = " ".join(argv)
        for folder in (exchange, other):  # covered, or inside a folder that is
            assert f"--tmpfs {folder} " in options or any(
                sandbox.inside(folder, p) and f"--tmpfs {p} " in options for p in sandbox.private_folders()
            )
        assert f"--size {48 << 20} --tmpfs /tmp" in options
    finally:
        groups.remove()


# --------------------------------------------------------------------------- an unprivileged grader

PLANT_LINK = """import os
os.makedirs("trap", exist_ok=True)
os.symlink({config!r}, "trap/evil.py")
os.chmod("trap", 0o500)  # a grader without privileges could not empty it
"""


def _as_unprivileged() -> list[str] | None:
    """A command prefix running as uid 1000 without any capability (in a user namespace of its
    own: files the test made, as root, belong to it), as an instructor on JupyterHub would."""
    unshare, setpriv = shutil.which("unshare"), shutil.which("setpriv")
    if not (unshare and setpriv):
        return None
    prefix = [
        unshare,
        "--user",
        "--map-user=1000",
        "--map-group=1000",
        "--",
        setpriv,
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ]
    probe = subprocess.run([*prefix, "id", "-u"], capture_output=True, text=True)
    return prefix if probe.returncode == 0 and probe.stdout.strip() == "1000" else None


@needs_bwrap
@pytest.mark.slow
def test_an_unprivileged_grader_keeps_the_sandbox_out_of_its_own_files(tmp_path):
    """Graded by an unprivileged user, a submission leaves in its working folder a folder it
    made read-only, holding a link to the course's nbgrader_config.py; the next submission
    ships a file of that name with code in it. Nothing of it reaches the grader (its working
    folder was its own, in memory; every copy goes into a fresh folder, never through a link):
    the configuration is unchanged, the code never runs, every grade is right."""
    prefix = _as_unprivileged()
    if prefix is None:
        pytest.skip("needs unshare and setpriv, and user namespaces")
    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    config = course / "nbgrader_config.py"
    before = config.read_text()
    marker = tmp_path / "pwned"
    plant = tiny_notebook(solution=PLANT_LINK.format(config=str(config)) + SOLUTION_CELL)
    for student, nb in (("a_plants", plant), ("b_ships", tiny_notebook()), ("c_next", tiny_notebook())):
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        write_notebook(nb, folder / f"{ASSIGNMENT}.ipynb")
    shipped = course / "submitted" / "b_ships" / ASSIGNMENT / "trap" / "evil.py"
    shipped.parent.mkdir()
    shipped.write_text(f"open({str(marker)!r}, 'w').write('the grader ran student code')\n")
    env = {**os.environ, "TMPDIR": str(tmp_path), "MPLBACKEND": "Agg", "HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    done = subprocess.run(
        [
            *prefix,
            str(Path(sys.executable).parent / "course"),
            "--root",
            str(course),
            "autograde",
            "--jobs",
            "1",
            "--no-report",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert not marker.exists()
    assert config.read_text() == before
    assert done.returncode == 0, done.stderr[-3000:]
    for student in ("a_plants", "b_ships", "c_next"):
        assert re.search(rf"^{student} +2/2 +2/2$", done.stdout, re.M), done.stdout


def test_an_ending_kernel_is_looked_at_often(monkeypatch):
    """At each submission's end jupyter_client asks whether the kernel has ended every 0.1 s,
    in its graceful shutdown and after a kill: the sandboxed kernel's manager asks every
    ``POLL_S`` (a message to the sandbox server), so no submission waits up to 0.1 s with
    nothing to do."""
    import asyncio
    import shutil

    from jupyter_client.manager import AsyncKernelManager

    from course_grading.sandbox import sandbox_kernel_manager as skm

    asked = []

    async def recording(self, pollinterval=0.1):
        asked.append(pollinterval)

    monkeypatch.setattr(AsyncKernelManager, "_async_wait", recording)
    km = skm.SandboxKernelManager()
    try:
        asyncio.run(km._async_wait(pollinterval=0.1))
        asyncio.run(km._async_wait())
    finally:
        shutil.rmtree(km._folder, ignore_errors=True)
    assert asked == [skm.POLL_S, skm.POLL_S] and skm.POLL_S <= 0.02
