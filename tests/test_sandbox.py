"""The bubblewrap sandbox: what a grading kernel can and cannot do."""
from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from traitlets.config import Config

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
        "import os, socket\nprint(sorted(os.listdir('.')), os.path.exists(%r))" % str(course / "gradebook.db"),
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
        NotebookClient(nb, kernel_manager_class=SandboxKernelManager, allow_errors=True, timeout=60,
                       config=config, resources={"metadata": {"path": str(course / "autograded" / "s")}}).execute()
    finally:
        marker.unlink()
    assert not warm._WARM  # no warm sandbox was started
    out = [c.outputs[0] for c in nb.cells]
    # printed text may arrive as several stream messages: join them
    printed = ["".join(o.get("text", "") for o in c.outputs if o["output_type"] == "stream").strip()
               for c in nb.cells]
    assert printed[0] == "[] False"
    assert out[1]["ename"] == "FileNotFoundError"
    assert out[2]["ename"] in ("OSError", "ConnectionRefusedError") and "unreachable" in out[2]["evalue"] or \
        out[2]["ename"] == "ConnectionRefusedError"
    assert out[3]["ename"] == "OSError" and "Read-only" in out[3]["evalue"]
    assert printed[4] == "mine"
    assert printed[5] == "None 1"
    assert ".course-sandbox-marker" not in printed[6]  # a private home, not the grader's
    assert not (Path.home() / "course-sandbox-probe").exists()
    assert not (course / "autograded" / "s" / "scratch.txt").exists()
    assert (course / "gradebook.db").read_text() == "secret"


@needs_bwrap
def test_wrapped_process_has_limits(tmp_path):
    import subprocess
    import sys
    code = ("import resource, os, sys; print(resource.getrlimit(resource.RLIMIT_CPU)[0], "
            "resource.getrlimit(resource.RLIMIT_FSIZE)[0], len([p for p in os.listdir('/proc') if p.isdigit()]), "
            "[l.split()[1] for l in open('/proc/self/status') if l.startswith('CapEff')][0], file=sys.stderr)")
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
