"""The warm sandbox: grading kernels and audits forked, one submission at a time, from one
sandboxed process that has torch, IPython and the course already imported."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from course_grading.audit import trusted as audit
from course_grading.sandbox import bubblewrap
from course_grading.sandbox import warm as warm_sandbox
from course_grading.sandbox.sandbox_kernel_manager import SandboxKernelManager

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not bubblewrap.available()[0], reason="needs a working bubblewrap sandbox")]


@pytest.fixture
def course(tmp_path, monkeypatch):
    course = tmp_path / "course"
    course.mkdir()
    (course / "gradebook.db").write_text("secret")
    monkeypatch.setenv("COURSE_SANDBOX_HIDE", str(course))
    yield course
    warm_sandbox.stop_warm()


def _submission(course: Path, name: str, files=("notes.txt",)) -> Path:
    folder = course / "autograded" / name
    folder.mkdir(parents=True)
    for file in files:
        (folder / file).write_text(name)
    return folder


def _run(folder: Path, *cells: str) -> list[str]:
    """Execute ``cells`` in a grading kernel started in ``folder``; what each cell printed
    (or its error's name)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in cells]
    NotebookClient(nb, kernel_manager_class=SandboxKernelManager, allow_errors=True, timeout=60,
                   resources={"metadata": {"path": str(folder)}}).execute()
    printed = []
    for cell in nb.cells:
        text = "".join(o.get("text", "") for o in cell.outputs if o["output_type"] == "stream").strip()
        errors = [o["ename"] for o in cell.outputs if o["output_type"] == "error"]
        printed.append(text or (errors[0] if errors else ""))
    return printed


def test_warm_kernel_is_sandboxed_preloaded_and_cannot_reach_its_server(course, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # nbgrader sets it while grading
    warm = warm_sandbox.start_warm()
    assert warm is warm_sandbox.current_warm() is not None
    spawned = []
    original = warm.spawn_kernel
    warm.spawn_kernel = lambda argv, env=None: spawned.append(1) or original(argv, env)
    folder = _submission(course, "a")
    out = _run(folder,
               "import os, sys\nprint(sorted(os.listdir('.')), os.path.exists(%r))" % str(course / "gradebook.db"),
               "print('torch' in sys.modules, 'course_utils.checks.attention' in sys.modules)",
               "import socket\nsocket.create_connection(('127.0.0.1', 9), 1)",
               "os.readlink(f'/proc/{os.getppid()}/fd/0')",
               "open(f'/proc/{os.getppid()}/mem', 'rb')",
               "open('scratch.txt', 'w').write('mine'); print(open('scratch.txt').read())",
               "print(os.environ.get('COURSE_SANDBOXED'), os.environ.get('NBGRADER_EXECUTION'))")
    assert spawned == [1]
    assert out[0] == "['notes.txt'] False"
    assert out[1] == "True True"  # imported before the kernel started
    assert out[2] in ("OSError", "ConnectionRefusedError")
    assert out[3] == out[4] == "PermissionError"  # the server is not dumpable: its socket and
    assert out[5] == "mine" and not (folder / "scratch.txt").exists()  # memory stay its own
    assert out[6] == "1 autograde"  # the notebooks' grading() sees it: demos are skipped
    assert (course / "gradebook.db").read_text() == "secret"


def test_warm_kernel_imports_a_module_beside_the_notebook(course):
    """As a kernel started in the submission's folder does: notebooks 04-08 import the
    components they build on from building_blocks.py, beside them."""
    warm_sandbox.start_warm()
    folder = _submission(course, "blocks", files=())
    (folder / "building_blocks.py").write_text("ANSWER = 42\n")
    assert _run(folder, "from building_blocks import ANSWER\nprint(ANSWER)") == ["42"]


def test_nothing_of_one_submission_reaches_the_next(course):
    warm_sandbox.start_warm()
    first = _run(_submission(course, "a"),
                 "import os, subprocess\n"
                 "subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
                 "if os.fork() == 0:\n    os.setsid()\n    import time\n    time.sleep(600)\n"
                 "open('/tmp/planted', 'w').write('x')\nopen('/dev/shm/planted', 'w').write('x')\n"
                 "startup = os.path.expanduser('~/.ipython/profile_default/startup')\n"
                 "os.makedirs(startup, exist_ok=True)\n"
                 "open(os.path.join(startup, '00-planted.py'), 'w').write('PLANTED = True')\n"
                 "open('left-behind.txt', 'w').write('x')\nprint('planted')")
    assert first == ["planted"]
    second = _run(_submission(course, "b", files=("mine.txt",)),
                  "import os\nprint(sorted(os.listdir('.')))",
                  "print(os.path.exists('/tmp/planted'), os.path.exists('/dev/shm/planted'), 'PLANTED' in globals())",
                  "names = [open(f'/proc/{p}/comm').read().strip() for p in os.listdir('/proc') if p.isdigit()]\n"
                  "print('sleep' in names, sum(1 for n in names if n.startswith('python')))")
    assert second[0] == "['mine.txt']"
    assert second[1] == "False False False"
    assert second[2] == "False 2"  # the server and this kernel; the first one's processes are gone


def test_a_killed_warm_sandbox_is_bypassed_then_replaced(course):
    first = warm_sandbox.start_warm()
    assert _run(_submission(course, "a"), "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    # the next kernel finds the sandbox gone and starts the slow way, still sandboxed
    second = _run(_submission(course, "b"), "import os\nprint(sorted(os.listdir('.')), os.environ.get('COURSE_SANDBOXED'))")
    assert second == ["['notes.txt'] 1"]
    assert first.broken and warm_sandbox.current_warm() is None
    replaced = warm_sandbox.start_warm()
    assert replaced is not None and replaced is not first
    third = _run(_submission(course, "c"), "import sys\nprint('torch' in sys.modules)")
    assert third == ["True"]


def test_audit_runs_in_the_warm_sandbox(course, tmp_path):
    warm = warm_sandbox.start_warm()
    spawned = []
    original = warm.spawn_audit
    warm.spawn_audit = lambda folder, cpu: spawned.append(folder) or original(folder, cpu)
    nb = nbformat.read(str(ROOT / "solutions" / "03_attention" / "03_attention.ipynb"), 4)
    path = tmp_path / "03_attention.ipynb"
    nbformat.write(nb, str(path))
    hide = bubblewrap.hidden_roots()
    assert all(v.agrees for v in audit.audit(path, "03_attention", hide=hide))
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "softmax":
            cell.source = "def softmax(x, dim=-1):\n    return (x.exp() / x.exp().sum(dim, keepdim=True)).double()\n"
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "causal_mask":
            cell.source = "import os\nos.kill(os.getppid(), 9)\n"  # kills the server mid-audit
    nbformat.write(nb, str(path))
    found = {v.grade_id: v for v in audit.audit(path, "03_attention", hide=hide)}
    assert len(spawned) == 2
    assert not found["test_softmax"].agrees
    assert not found["test_causal_mask"].agrees
