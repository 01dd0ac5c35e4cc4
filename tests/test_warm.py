"""The warm sandbox: grading kernels and audits forked, one submission at a time, from one
sandboxed process that has torch, IPython and the course already imported."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import json
import os
import time
import types
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from traitlets.config import Config

from course_grading.audit import trusted as audit
from course_grading.sandbox import bubblewrap, warm_server
from course_grading.sandbox import warm as warm_sandbox
from course_grading.sandbox.sandbox_kernel_manager import SandboxKernelManager
from course_grading.sandbox.settings import Settings
from harness import solution_with

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not bubblewrap.available()[0], reason="needs a working bubblewrap sandbox"),
]


CONFIG = Config()


@pytest.fixture
def course(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    (course / "gradebook.db").write_text("secret")
    CONFIG.SandboxKernelManager.hidden_folders = [str(course)]
    yield course
    warm_sandbox.stop_warm()


def _settings() -> Settings:
    return Settings.from_config(CONFIG)


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
    NotebookClient(
        nb,
        kernel_manager_class=SandboxKernelManager,
        allow_errors=True,
        timeout=60,
        config=CONFIG,
        resources={"metadata": {"path": str(folder)}},
    ).execute()
    printed = []
    for cell in nb.cells:
        text = "".join(o.get("text", "") for o in cell.outputs if o["output_type"] == "stream").strip()
        errors = [o["ename"] for o in cell.outputs if o["output_type"] == "error"]
        printed.append(text or (errors[0] if errors else ""))
    return printed


def test_warm_kernel_is_sandboxed_preloaded_and_cannot_reach_its_server(course, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # nbgrader sets it while grading
    warm = warm_sandbox.ensure_warm(_settings())
    assert warm is warm_sandbox.current_warm(_settings()) is not None
    spawned = []
    original = warm.spawn_kernel
    warm.spawn_kernel = lambda *args: spawned.append(1) or original(*args)
    folder = _submission(course, "a")
    out = _run(
        folder,
        "import os, sys\nprint(sorted(os.listdir('.')), os.path.exists(%r))" % str(course / "gradebook.db"),
        "secret = [m for m in sys.modules if m.startswith(('course_grading.reference', 'course_grading.checks'))]\n"
        "print('torch' in sys.modules, 'course_utils.training' in sys.modules, secret)",
        "import socket\nsocket.create_connection(('127.0.0.1', 9), 1)",
        "os.readlink(f'/proc/{os.getppid()}/fd/0')",
        "open(f'/proc/{os.getppid()}/mem', 'rb')",
        "open('scratch.txt', 'w').write('mine'); print(open('scratch.txt').read())",
        "print(os.environ.get('COURSE_SANDBOXED'), os.environ.get('NBGRADER_EXECUTION'))",
        "from course_grading.reference.attention import softmax\nprint(softmax.__module__)",
        "import signal\nos.kill(1, signal.SIGKILL); os.kill(1, signal.SIGSTOP); print(os.getppid())",
    )
    assert spawned == [1]
    assert out[0] == "['notes.txt'] False"
    assert out[1] == "True True []"  # imported before the kernel started; never the secrets
    assert out[2] in ("OSError", "ConnectionRefusedError")
    assert out[3] == out[4] == "PermissionError"  # the server is not dumpable: its socket and
    assert out[5] == "mine" and not (folder / "scratch.txt").exists()  # memory stay its own
    assert out[6] == "1 autograde"  # the notebooks' grading() sees it: demos are skipped
    assert out[7] == "course_grading.reference.attention"  # grade cells need the reference
    assert out[8] == "1"  # the server is PID 1: nothing inside can kill or stop it
    assert warm.request(op="reset") == {"ok": True}
    assert (course / "gradebook.db").read_text() == "secret"


PLANT = """
import ctypes, os, socket, subprocess, glob, time
libc = ctypes.CDLL(None, use_errno=True)
subprocess.Popen(['sleep', '600'], start_new_session=True)
if os.fork() == 0:
    os.setsid()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind('\\0course-planted')
    listener.listen()
    time.sleep(600)
done = []
def attempt(what, action):
    try:
        action()
        done.append(what)
    except OSError:
        pass
for folder in ('/tmp', '/var/tmp', '/dev/shm', '/dev', os.path.expanduser('~'), *glob.glob('/tmp/course-*/ipc/*')):
    attempt(folder, lambda: open(os.path.join(folder, 'planted'), 'w').write('x'))
startup = os.path.expanduser('~/.ipython/profile_default/startup')
attempt('startup', lambda: open(os.path.join(startup, '00-planted.py'), 'w').write('PLANTED = True'))
def read_only_folder():
    folder = os.path.expanduser('~/.ipython/extensions')
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, 'planted.py'), 'w').write('PLANTED = True')
    os.chmod(folder, 0o500)
attempt('read-only folder', read_only_folder)
attempt('left behind', lambda: open('left-behind.txt', 'w').write('x'))
if libc.shmget(ctypes.c_int(0xC0DE), ctypes.c_size_t(4096), ctypes.c_int(0o1000 | 0o600)) >= 0:
    done.append('sysv')
if os.uname().machine == 'x86_64' and libc.syscall(248, b'user', b'course-planted', b'x', 1, -3) >= 0:
    done.append('keyring')
print(sorted(done))
"""

FIND = """
import ctypes, os, socket
libc = ctypes.CDLL(None, use_errno=True)
found = [p for p in ('/tmp/planted', '/var/tmp/planted', '/dev/shm/planted', '/dev/planted',
                     os.path.expanduser('~/planted'), os.path.expanduser('~/.ipython/extensions'))
         if os.path.exists(p)]
if 'PLANTED' in globals():
    found.append('startup file')
if libc.shmget(ctypes.c_int(0xC0DE), ctypes.c_size_t(0), ctypes.c_int(0)) >= 0:
    found.append('sysv')
if os.uname().machine == 'x86_64' and libc.syscall(249, b'user', b'course-planted', None, 0) >= 0:
    found.append('keyring')
try:
    socket.socket(socket.AF_UNIX).connect('\\0course-planted')
    found.append('abstract socket')
except OSError:
    pass
names = [open(f'/proc/{p}/comm').read().strip() for p in os.listdir('/proc') if p.isdigit()]
print(found, 'sleep' in names, sum(1 for n in names if n.startswith('python')))
"""


def test_warm_kernel_imports_a_module_beside_the_notebook(course):
    """As a kernel started in the submission's folder does: notebooks 04-08 import the
    components they build on from building_blocks.py, beside them."""
    warm_sandbox.ensure_warm(_settings())
    folder = _submission(course, "blocks", files=())
    (folder / "building_blocks.py").write_text("ANSWER = 42\n")
    assert _run(folder, "from building_blocks import ANSWER\nprint(ANSWER)") == ["42"]


def test_nothing_of_one_submission_reaches_the_next(course):
    warm = warm_sandbox.ensure_warm(_settings())
    first = ast.literal_eval(_run(_submission(course, "a"), PLANT)[0])
    # a fresh /tmp, /var/tmp, /dev/shm and $HOME of its own, all writable; not so /dev, its
    # socket folder or its IPython profile
    home = str(bubblewrap.sandbox_home())
    assert {"/tmp", "/var/tmp", "/dev/shm", home, "left behind", "read-only folder", "sysv"} <= set(first)
    assert not [d for d in first if d in ("/dev", "startup") or "/ipc/" in d], first
    second = _run(
        _submission(course, "b", files=("mine.txt",)), "import os\nprint(sorted(os.listdir('.')))", FIND
    )
    assert second[0] == "['mine.txt']"
    assert second[1] == "[] False 2"  # the server and this kernel; nothing of the first one's
    assert warm_sandbox.current_warm(_settings()) is warm  # reused all along
    # what FIND looks for is there to be found, within one kernel
    found = ast.literal_eval(_run(_submission(course, "c"), PLANT, FIND)[1].rsplit("]", 1)[0] + "]")
    assert {"/tmp/planted", "/dev/shm/planted", "sysv", "abstract socket"} <= set(found)


def test_a_dead_warm_sandbox_is_bypassed_then_replaced(course):
    first = warm_sandbox.ensure_warm(_settings())
    assert _run(_submission(course, "a"), "print(1)") == ["1"]
    first.process.kill()  # the server dies between two kernels (killed from outside: nothing inside can)
    # the next kernel finds it gone and gets a sandbox of its own, as fresh
    second = _run(
        _submission(course, "b"),
        "import os\nprint(sorted(os.listdir('.')), os.environ.get('COURSE_SANDBOXED'))",
    )
    assert second == ["['notes.txt'] 1"]
    assert first.broken and warm_sandbox.current_warm(_settings()) is None
    replaced = warm_sandbox.ensure_warm(_settings())
    assert replaced is not None and replaced is not first
    third = _run(_submission(course, "c"), "import sys\nprint('torch' in sys.modules)")
    assert third == ["True"]


def test_a_frozen_warm_sandbox_is_bypassed(course, monkeypatch):
    import os
    import signal

    warm = warm_sandbox.ensure_warm(_settings())
    assert _run(_submission(course, "a"), "print(1)") == ["1"]
    server = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_server(int(p), warm.folder)]
    assert len(server) == 1
    monkeypatch.setattr(
        warm_sandbox.SandboxServer, "request", _with_timeout(warm_sandbox.SandboxServer.request, 3)
    )
    os.kill(server[0], signal.SIGSTOP)
    try:
        second = _run(_submission(course, "b"), "import sys\nprint('torch' in sys.modules)")
    finally:
        with contextlib.suppress(ProcessLookupError):  # the grader has killed it by now
            os.kill(server[0], signal.SIGCONT)
    assert second == ["False"]  # a sandbox of its own, without the warm one's imports
    assert warm.broken


def _is_server(pid: int, folder: Path) -> bool:
    """Whether host process ``pid`` is the server of the warm sandbox in ``folder`` (its PID 1)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        nspid = [ln for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ln.startswith("NSpid:")]
    except OSError:
        return False
    return (
        b"course_grading.sandbox.warm_server" in cmdline
        and str(folder).encode() in b" ".join(cmdline)
        and bool(nspid)
        and nspid[0].split()[-1] == "1"
    )


def _with_timeout(request, seconds):
    def limited(self, timeout=30, **message):
        return request(self, timeout=min(timeout, seconds), **message)

    return limited


def test_audit_runs_in_the_warm_sandbox(course, tmp_path):
    warm = warm_sandbox.ensure_warm(_settings())
    spawned = []
    original = warm.spawn_audit
    warm.spawn_audit = lambda job, cpu: spawned.append(job) or original(job, cpu)
    nb = nbformat.read(str(ROOT / "solutions" / "03_attention" / "03_attention.ipynb"), 4)
    path = tmp_path / "03_attention.ipynb"
    nbformat.write(nb, str(path))
    assert all(v.agrees for v in audit.audit(path, "03_attention", settings=_settings()))
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "softmax":
            cell.source = (
                "def softmax(x, dim=-1):\n    return (x.exp() / x.exp().sum(dim, keepdim=True)).double()\n"
            )
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "causal_mask":
            cell.source = "import os\nos.kill(os.getppid(), 9)\n"  # would kill the server mid-audit
    nbformat.write(nb, str(path))
    found = {v.grade_id: v for v in audit.audit(path, "03_attention", settings=_settings())}
    assert len(spawned) == 2 and warm_sandbox.current_warm(_settings()) is warm
    assert not found["test_softmax"].agrees
    assert not found["test_causal_mask"].agrees


def test_the_audit_is_handed_to_the_sandbox_by_name():
    """The grader hands the audit's entry point to the sandbox (its server imports nothing of
    the audit): every name resolves, and what is not a dotted name is refused."""
    from course_grading.audit import SANDBOX_ENTRY, channel, child
    from course_grading.sandbox.preload import named

    assert warm_sandbox._AUDIT == SANDBOX_ENTRY  # handed when the audit's trusted side is imported
    assert named(SANDBOX_ENTRY["main"]) is child.main
    assert named(SANDBOX_ENTRY["prepare"]) is child.stand_in_unaudited
    assert (
        named(SANDBOX_ENTRY["pipe"]) is channel.open_pipe and named(SANDBOX_ENTRY["drain"]) is channel.Drain
    )
    assert all(callable(named(name)) for name in SANDBOX_ENTRY["warm_up"])
    assert [named(name).__name__ for name in SANDBOX_ENTRY["preload"]] == SANDBOX_ENTRY["preload"]
    for bad in ("os; import x", "os:system()", "../x", "", ".relative"):
        with pytest.raises(ValueError):
            named(bad)


def test_a_wait_ends_when_the_child_does_or_after_its_time():
    """The server's "wait": answered as soon as the child ends (the grader's audit waited for
    its next look, 20 ms apart), or after its seconds when it has not. The child ends when the
    test lets it (a pipe), so that a loaded machine cannot reorder the two; the bounds only tell
    "at the child's end" from "at the wait's limit" (WAIT_SECONDS, 5 s)."""
    server = types.SimpleNamespace(ended={})
    server.poll = lambda pid: warm_server.Server.poll(server, pid)
    hold, release = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(release)
        os.read(hold, 1)  # until the test lets it end
        os._exit(3)
    os.close(hold)
    started = time.monotonic()
    assert warm_server.Server.wait(server, pid, 0.2) is None  # still running: after its time
    assert time.monotonic() - started >= 0.2
    os.write(release, b"x")
    os.close(release)
    released = time.monotonic()
    assert warm_server.Server.wait(server, pid, 60) == 3
    assert time.monotonic() - released < warm_server.WAIT_SECONDS / 2  # at its end, not the limit
    again = time.monotonic()
    assert warm_server.Server.wait(server, pid, 60) == 3  # told again, at once
    assert time.monotonic() - again < warm_server.WAIT_SECONDS / 2


def test_an_audit_is_heard_of_as_soon_as_it_ends(course, tmp_path):
    warm = warm_sandbox.ensure_warm(_settings())
    job = warm.new_job(tmp_path, kernel=False)
    pid = warm.spawn_audit(job, 20)
    started = time.monotonic()
    assert warm.wait(pid, 20) is not None  # the audit of an empty folder ends at once
    assert time.monotonic() - started < 5
    warm_sandbox.release_job(warm, job)


# --------------------------------------------------------------------------- what a child may write

WRITABLE = """
import glob, json, os, stat
def fill(folder, limit=1 << 30):
    written = 0
    try:
        for i in range(limit // (8 << 20)):
            with open(os.path.join(folder, f'fill-{i}'), 'wb') as fh:
                fh.write(b'\\0' * (8 << 20))
            written += 8 << 20
    except OSError:
        pass
    for i in range(written // (8 << 20)):
        os.unlink(os.path.join(folder, f'fill-{i}'))
    return written >> 20
mounts = {}  # (no ctypes: the audit refuses it) the kernel's own words, in mountinfo and statvfs
for line in open('/proc/self/mountinfo'):
    fields = line.split()
    point = fields[4].encode().decode('unicode_escape')
    if not os.path.isdir(point) or os.statvfs(point).f_flag & os.ST_RDONLY:
        continue
    fs = os.statvfs(point)
    mounts[point] = [fields[fields.index('-') + 1], fs.f_blocks * fs.f_frsize >> 20]
places = ['/tmp', '/var/tmp', '/dev/shm', os.path.expanduser('~'), os.getcwd(), '/dev',
          *glob.glob('/tmp/course-*/ipc/*'), *glob.glob('/tmp/course-*/spool')]
RESULT = {'mounts': mounts, 'written': {p: fill(p) for p in places}}
"""


def _check_writable(result: dict, megabytes: int) -> None:
    """Every writable folder a sandboxed process sees is a tmpfs of at most ``megabytes`` (or
    /proc, devpts: no storage), and no place took more."""
    for point, (kind, size) in result["mounts"].items():
        assert kind in ("tmpfs", "proc", "devpts"), (point, kind)
        if kind == "tmpfs":
            assert 0 < size <= megabytes, (point, size)
    written = result["written"]
    assert all(mb <= megabytes for mb in written.values()), written
    home, cwd = str(bubblewrap.sandbox_home()), [p for p in written if "/jobs/" in p or p.endswith("/work")]
    assert all(written[p] > 0 for p in ("/tmp", "/var/tmp", "/dev/shm", home, *cwd)), written
    assert all(mb == 0 for p, mb in written.items() if p == "/dev" or "/ipc/" in p or p.endswith("/spool")), (
        written
    )


MODES = ["warm", "single-use", "no-namespaces"]


@pytest.fixture(params=MODES)
def mode(request, monkeypatch):
    """How kernels and audits are started: forked by the warm server; by a single-use server
    (``c.Sandbox.warm = False``); or where a child cannot get namespaces of its own (the server's
    probe fails: simulated), by a single-use server whose bubblewrap alone makes it fresh."""
    if request.param == "no-namespaces":
        monkeypatch.setattr(warm_sandbox, "PRIVATE_NAMESPACES", False)
        monkeypatch.setattr(warm_sandbox, "_NO_WARM", [])
    return request.param


def test_a_kernel_writes_only_to_small_private_tmpfs(course, mode):
    CONFIG.Sandbox.tmpfs_mb = 24
    CONFIG.Sandbox.warm = mode != "single-use"
    try:
        out = _run(_submission(course, "a"), WRITABLE + "\nprint(json.dumps(RESULT))")
        assert bool(warm_sandbox.current_warm(_settings())) == (mode == "warm")
    finally:
        del CONFIG.Sandbox.tmpfs_mb, CONFIG.Sandbox.warm
    if mode == "no-namespaces":
        assert warm_sandbox._NO_WARM  # the probe failed: never a warm server again
    _check_writable(json.loads(out[0]), 24)


def test_an_audit_writes_only_to_small_private_tmpfs(course, tmp_path, monkeypatch, mode):
    settings = dataclasses.replace(_settings(), tmpfs_mb=24, warm=mode != "single-use")
    collected = {}
    original = warm_sandbox._write_outputs
    monkeypatch.setattr(
        warm_sandbox,
        "_write_outputs",
        lambda folder, files: collected.update(files) or original(folder, files),
    )
    spy = WRITABLE + "\nopen('out-spy.json', 'w').write(json.dumps(RESULT))\n"
    path = solution_with(tmp_path, "03_attention", softmax=spy + SOFTMAX)
    verdicts = {v.grade_id: v for v in audit.audit(path, "03_attention", settings=settings)}
    assert verdicts["test_softmax"].agrees  # the audit itself went on
    _check_writable(json.loads(collected["out-spy.json"]), 24)


SOFTMAX = "def softmax(x, dim=-1):\n    e = (x - x.max(dim, keepdim=True).values).exp()\n    return e / e.sum(dim, keepdim=True)\n"


# --------------------------------------------------------------------------- the instructor's secrets

REACH_REFERENCE = '''
import builtins, glob, os, sys
GRADING = {grading!r}
def _reach():
    """The reference's softmax by any means: import it, or read its source and run it."""
    try:
        from course_grading.reference.attention import softmax as found
        return found, "import"
    except Exception:
        pass
    places = [os.path.join(GRADING, "reference", "attention.py")]
    for depth in range(4):  # any other copy of the course nearby: /work/*/..., /home/*/*/...
        places += glob.glob("/" + "*/" * depth + "course_grading/reference/attention.py")
    places += glob.glob(os.path.join(sys.prefix, "lib", "*", "site-packages", "course_grading", "reference", "attention.py"))
    for path in places:
        try:
            namespace = {{}}
            exec(compile(open(path).read(), path, "exec"), namespace)
            return namespace["softmax"], "read " + path
        except Exception:
            continue
    return None, ""
_FOUND, HOW = _reach()
in_audit = not hasattr(builtins, "get_ipython")
def softmax(x, dim=-1):
    if _FOUND is not None:
        return _FOUND(x, dim)
    return x  # wrong: the reference was out of reach
'''


def test_an_audit_cannot_reach_the_reference(course, tmp_path, mode):
    source = REACH_REFERENCE.format(grading=str(bubblewrap.GRADING_PACKAGE))
    path = solution_with(tmp_path, "03_attention", softmax=source)
    # the same code does reach it where the reference is there to be reached: in-process
    in_process = {v.grade_id: v for v in audit.audit(path, "03_attention", runner=_in_process)}
    assert in_process["test_softmax"].agrees
    settings = dataclasses.replace(_settings(), warm=mode != "single-use")
    sandboxed = {v.grade_id: v for v in audit.audit(path, "03_attention", settings=settings)}
    assert not sandboxed["test_softmax"].agrees, sandboxed["test_softmax"]
    assert "values differ" in sandboxed["test_softmax"].reason


def _in_process(folder: Path) -> str:
    import ipywidgets  # noqa: F401 - loaded for real first: the child stubs what is not loaded
    import matplotlib.pyplot  # noqa: F401 - loaded before the test, as the course loads it

    from course_grading.audit import child

    child.main(str(folder))
    return ""


# --------------------------------------------------------------------------- a submission's own modules

SHADOWS = {
    "torch.py": "raise SystemExit('shadowed torch')\n",
    "numpy/__init__.py": "raise SystemExit('shadowed numpy')\n",
    "course_utils/__init__.py": "raise SystemExit('shadowed course_utils')\n",
    "course_grading/checks/__init__.py": "",
    "course_grading/checks/attention.py": "def check_softmax(*a, **k):\n    print('shadowed check')\n",
    "ipykernel_launcher.py": "raise SystemExit('shadowed launcher')\n",
    "building_blocks.py": "GIVEN = 'building block'\n",
}


def test_modules_beside_the_notebook_never_shadow_the_installed_ones(course, mode):
    CONFIG.Sandbox.warm = mode != "single-use"
    folder = course / "autograded" / "s"
    for name, text in SHADOWS.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    try:
        out = _run(
            folder,
            "import os, sys, torch, numpy, course_utils\n"
            "print(all(m.__file__.startswith(sys.prefix) or '/course_utils/' in m.__file__ and "
            "os.getcwd() not in m.__file__ for m in (torch, numpy, course_utils)))",
            "import course_grading\nprint([p for p in course_grading.__path__ if os.getcwd() in p])",
            "try:\n    from course_grading.checks.attention import check_softmax\n"
            "    print(check_softmax.__module__, os.getcwd() in sys.modules['course_grading.checks.attention'].__file__)\n"
            "except ImportError as exc:\n    print('ImportError')",
            "from building_blocks import GIVEN\nprint(GIVEN)",
        )
    finally:
        del CONFIG.Sandbox.warm
    assert out[0] == "True"
    assert out[1] == "[]"
    assert out[2] in ("ImportError", "course_grading.checks.attention False")  # never the submission's
    assert out[3] == "building block"  # what sits beside the notebook is still importable, last
