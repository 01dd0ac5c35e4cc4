"""The adversarial catalogue: broken or cheating submissions of 01_embeddings, graded together
in ONE sandboxed, audited autograde run (two workers), then given feedback.

Whatever a submission does, the run completes, every student has a row, honest students get
exactly the scores they get when graded alone, the gradebook stays intact, every cheat ends at
zero for what it cheated on, or flagged for the instructor, or as an error row (the expected
outcome of each kind is in CATALOGUE), nothing of a submission is followed through a link, and
no feedback shows what the hidden tests ran on or their source.
"""

from __future__ import annotations

import csv
import hashlib
import inspect
import json
import os
import re
import socket
import sqlite3
import threading
from html import unescape
from pathlib import Path

import nbformat
import pytest
from nbgrader.utils import compute_checksum

from conftest import ROOT
from course_grading import untrusted
from course_grading.authoring.cells import hidden_lines
from course_grading.authoring.nbformat_tools import write_notebook
from course_grading.course.course import Course
from course_grading.course.nbgrader_setup import GradingRun
from course_grading.grading import autograde, recorded
from course_grading.reports import class_report, feedback
from course_grading.reports import results as results_module
from course_grading.sandbox import bubblewrap

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not bubblewrap.available()[0], reason="needs a working bubblewrap sandbox"),
]

A = "01_embeddings"
FULL = {"test_encode": 1.0, "test_one_hot": 2.0, "test_embed": 2.0}
WRONG_ONE_HOT = "def one_hot(ids, vocab_size):\n    return np.zeros((*np.shape(ids), vocab_size))\n"
CORRECT_ONE_HOT = (
    "def one_hot(ids, vocab_size):\n    ids = np.asarray(ids)\n"
    "    return (ids[..., None] == np.arange(vocab_size)).astype(np.float64)\n"
)
ENCODE_BODY = "    return [int(vocab.get(t, vocab[unk_token])) for t in tokens]\n"
PORT_FILE = "PORT"  # the test's listening port is substituted below


def _body(code: str) -> str:
    return "\n".join("    " + line for line in code.splitlines())


EXTRA_FILES = "files beside the notebook"  # a CATALOGUE entry's extra files: {path: text}
LEAVE_BEHIND = """import ctypes, os, socket, time
for folder in ('/tmp', '/var/tmp', '/dev/shm', os.path.expanduser('~'), '.'):
    try:
        open(os.path.join(folder, 'left-for-the-next'), 'w').write('x')
    except OSError:
        pass
try:
    startup = os.path.expanduser('~/.ipython/profile_default/startup')
    open(os.path.join(startup, '00-left.py'), 'w').write('LEFT_BEHIND = True')
except OSError:
    pass
try:
    folder = os.path.expanduser('~/left-read-only')
    os.makedirs(folder, exist_ok=True)
    open(os.path.join(folder, 'left-for-the-next'), 'w').write('x')
    os.chmod(folder, 0o500)
except OSError:
    pass
ctypes.CDLL(None).shmget(ctypes.c_int(0xC0FFEE), ctypes.c_size_t(4096), ctypes.c_int(0o1000 | 0o600))
if os.fork() == 0:
    os.setsid()
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    listener = socket.socket(socket.AF_UNIX)
    listener.bind('\\0left-for-the-next')
    listener.listen()
    time.sleep(3600)
"""
FIND_LEFTOVERS = """import ctypes, os, socket
FOUND = [p for p in ('/tmp/left-for-the-next', '/var/tmp/left-for-the-next', '/dev/shm/left-for-the-next',
                     os.path.expanduser('~/left-for-the-next'), 'left-for-the-next',
                     os.path.expanduser('~/left-read-only')) if os.path.exists(p)]
if 'LEFT_BEHIND' in globals():
    FOUND.append('startup file')
if ctypes.CDLL(None).shmget(ctypes.c_int(0xC0FFEE), ctypes.c_size_t(0), ctypes.c_int(0)) >= 0:
    FOUND.append('sysv')
try:
    socket.socket(socket.AF_UNIX).connect('\\0left-for-the-next')
    FOUND.append('abstract socket')
except OSError:
    pass
FOUND += [p for p in os.listdir('/proc') if p.isdigit() and 1 < int(p) < os.getpid()]  # older: not its own
"""
FILL_EVERYTHING = """import os
for folder in ('/tmp', '/var/tmp', '/dev/shm', os.path.expanduser('~'), '.', '/dev'):
    try:
        for i in range(128):  # up to 1 GB in each
            with open(os.path.join(folder, f'fill-{i}'), 'wb') as fh:
                fh.write(bytes(8 << 20))
    except OSError:
        pass
"""
SHADOW_MODULES = {
    "numpy/__init__.py": "raise SystemExit('shadowed numpy')\n",
    "torch.py": "raise SystemExit('shadowed torch')\n",
    "course_utils/__init__.py": "raise SystemExit('shadowed course_utils')\n",
    "course_utils/checks/embeddings.py": "def check_one_hot(*args, **kwargs):\n    pass\n",
}
# configuration files beside the notebook that, read by the kernel or the grader, would skip
# the one_hot test cell (as the input_transformer kind does from a solution cell)
SKIP_TESTS = (
    "get_ipython().input_transformers_post.append(lambda lines: ['pass\\n'] "
    "if any('check_one_hot' in l for l in lines) else lines)"
)
CONFIG_FILES = {
    name: (
        f"c = get_config()\nc.InteractiveShellApp.exec_lines = [{SKIP_TESTS!r}]\n"
        f"c.IPKernelApp.exec_lines = [{SKIP_TESTS!r}]\n"
    )
    for name in ("ipython_config.py", "ipython_kernel_config.py", "jupyter_config.py", "nbgrader_config.py")
}
REACH_REFERENCE = """import builtins, glob
KERNEL = hasattr(builtins, 'get_ipython')  # graded in a kernel; else in the audit
def _reach():
    try:
        from course_grading.reference.embeddings import one_hot as found
        return found
    except Exception:
        pass
    for path in [p for depth in range(4) for p in glob.glob('/' + '*/' * depth + 'course_grading/reference/embeddings.py')]:
        try:
            namespace = {}
            exec(open(path).read(), namespace)
            return namespace['one_hot']
        except Exception:
            continue
_REF = None if KERNEL else _reach()
"""


BEFORE_SETUP = "a cell before the setup cell"  # a CATALOGUE entry's code cell put first
BLANK = {
    "one_hot": "def one_hot(ids, vocab_size):\n    raise NotImplementedError()\n",
    "embed": "def embed(ids, E):\n    raise NotImplementedError()\n",
    "encode": "def encode(tokens, vocab, unk_token='<unk>'):\n    raise NotImplementedError()\n",
}
BREAKS_SETUP = "import sys\nsys.modules['course_utils.checks.embeddings'] = None\n"
# embed that changes E in place, which the hidden check catches with np.array_equal
EMBED_IN_PLACE = (
    "def embed(ids, E):\n    E = np.asarray(E)\n    out = E[np.asarray(ids)].copy()\n"
    "    E[...] = 0.0\n    return out\n"
)
# F.one_hot (forbidden) computed on a thread that exists before the check: a pool, a timer
# started in an earlier cell, a thread started when a module of the submission is imported
ON_A_POOL = (
    "from concurrent.futures import ThreadPoolExecutor\nimport torch\n_POOL = ThreadPoolExecutor(1)\n"
    "_POOL.submit(int).result()\ndef one_hot(ids, vocab_size):\n"
    "    ids = torch.as_tensor(np.asarray(ids))\n"
    "    return _POOL.submit(lambda: torch.nn.functional.one_hot(ids, vocab_size).double().numpy()).result()\n"
)
SERVER = (
    "import queue, threading\nimport torch\nJOBS = queue.Queue()\ndef serve():\n    while True:\n"
    "        fn, box, done = JOBS.get()\n        box.append(fn())\n        done.set()\n"
    "def run(fn):\n    box, done = [], threading.Event()\n    JOBS.put((fn, box, done))\n    done.wait()\n"
    "    return box[0]\n"
)
ON_SERVER = (
    "def one_hot(ids, vocab_size):\n    ids = torch.as_tensor(np.asarray(ids))\n"
    "    return run(lambda: torch.nn.functional.one_hot(ids, vocab_size).double().numpy())\n"
)
ON_A_TIMER = SERVER + "threading.Timer(0.0, serve).start()\n" + ON_SERVER
ON_AN_IMPORTED_THREAD = "import numpy as np, torch\nfrom helper import run\n" + ON_SERVER


# a forbidden built-in where the checks cannot see it: on a native thread (ctypes imported by a
# computed name), or after the checks' own record was reset. The audit's record sees both.
EMBED_ON_A_NATIVE_THREAD = (
    "import pkgutil, torch\nct = pkgutil.resolve_name('ct' + 'ypes')\ndef embed(ids, E):\n    out = {}\n"
    "    def work(_):\n        out['y'] = torch.nn.functional.embedding(torch.as_tensor(np.asarray(ids)), "
    "torch.as_tensor(np.asarray(E))).numpy()\n        return 0\n"
    "    callback = ct.CFUNCTYPE(ct.c_void_p, ct.c_void_p)(work)\n    libc, tid = ct.CDLL(None), ct.c_ulong()\n"
    "    libc.pthread_create(ct.byref(tid), None, callback, None)\n    libc.pthread_join(tid, None)\n"
    "    return out['y']\n"
)
EMBED_AFTER_A_RESET = (
    "import torch\nfrom course_utils.checks import _core, _seal\n_core.Check._verdict = lambda *a, **k: None\n"
    "_core.Forbidden.held_by = lambda *a, **k: []\n_seal._SEAL = None\ndef embed(ids, E):\n"
    "    return torch.nn.functional.embedding(torch.as_tensor(np.asarray(ids)), torch.as_tensor(np.asarray(E))).numpy()\n"
)


# kind -> (changes, expected): changes maps a grade_id to new source (or a callable on the
# cell); expected is "full", "zero:<grade_id>" (that exercise scores 0), "none" (graded, every
# exercise 0), "flag:<grade_id>" (flagged, whatever it scored) or "error" (an error row: not
# graded at all). "+flag" adds that
# a flag must be raised as well (also when the grading of that submission broke: an error row,
# scored 0 in the gradebook). FILES changes a submission's folder after its notebook is written.
CATALOGUE = {
    "correct": ({}, "full"),
    "correct_warns": (
        {
            "one_hot": "import warnings, sys\n"
            + CORRECT_ONE_HOT.replace(
                "    ids = np.asarray(ids)\n",
                "    warnings.warn('deprecated thing')\n    print('note', file=sys.stderr)\n    ids = np.asarray(ids)\n",
            )
        },
        "full",
    ),
    "correct_huge_output": (
        {"one_hot": "for _ in range(40):\n    print('x' * 1_000_000)\n" + CORRECT_ONE_HOT},
        "full",
    ),
    "honest_partial": ({"one_hot": WRONG_ONE_HOT}, "zero:test_one_hot"),
    "infinite_loop": (
        {"one_hot": "def one_hot(ids, vocab_size):\n    while True:\n        pass\n"},
        "zero:test_one_hot",
    ),
    "ignores_sigint": (
        {
            "one_hot": "import signal\ndef one_hot(ids, vocab_size):\n"
            "    signal.signal(signal.SIGINT, signal.SIG_IGN)\n    while True:\n        pass\n"
        },
        "zero:test_one_hot",
    ),
    "os_exit": ({"one_hot": CORRECT_ONE_HOT + "import os\nos._exit(3)\n"}, "zero:test_one_hot+flag"),
    "memory_bomb": (
        {"one_hot": "def one_hot(ids, vocab_size):\n    hog = bytearray(16 * 2**30)\n    return hog\n"},
        "zero:test_one_hot",
    ),
    "fork_bomb": (
        {
            "one_hot": "import os, time\ndef one_hot(ids, vocab_size):\n    for _ in range(400):\n"
            "        if os.fork() == 0:\n            time.sleep(30)\n            os._exit(0)\n"
            "    return None\n"
        },
        "zero:test_one_hot+flag",
    ),
    "syntax_error": ({"one_hot": "def one_hot(ids, vocab_size)\n    return ids\n"}, "zero:test_one_hot"),
    "nan_output": (
        {
            "one_hot": "def one_hot(ids, vocab_size):\n"
            "    return np.full((*np.shape(ids), vocab_size), np.nan)\n"
        },
        "zero:test_one_hot",
    ),
    "wrong_dtype": (
        {"one_hot": CORRECT_ONE_HOT.replace(".astype(np.float64)", ".astype(str)")},
        "zero:test_one_hot",
    ),
    "deleted_test_cell": ({"one_hot": WRONG_ONE_HOT, "test_one_hot": None}, "zero:test_one_hot+flag"),
    "edited_test_cell": ({"one_hot": WRONG_ONE_HOT, "test_one_hot": "pass\n"}, "zero:test_one_hot+flag"),
    "rechecksummed_test_cell": (
        {"one_hot": WRONG_ONE_HOT, "test_one_hot": ("print('ok')\n", "rechecksum")},
        "zero:test_one_hot+flag",
    ),
    "changed_points": ({"one_hot": WRONG_ONE_HOT, "test_one_hot": ("points", 100)}, "zero:test_one_hot+flag"),
    "skip_execution_tag": (
        {"one_hot": WRONG_ONE_HOT, "test_one_hot": ("tags", ["skip-execution"])},
        "zero:test_one_hot+flag",
    ),
    "patched_allclose": (
        {
            "one_hot": "np.allclose = lambda *a, **k: True\nnp.array_equal = lambda *a, **k: True\n"
            + WRONG_ONE_HOT
        },
        "zero:test_one_hot+flag",
    ),
    # the visible call goes through the notebook's namespace; the hidden half, imported from
    # course_grading, runs the visible check again: the patch gains nothing
    "patched_checker": (
        {"one_hot": WRONG_ONE_HOT + "check_one_hot = lambda *a, **k: None\n"},
        "zero:test_one_hot+flag",
    ),
    "input_transformer": (
        {
            "one_hot": WRONG_ONE_HOT
            + (
                "get_ipython().input_transformers_post.append(\n"
                "    lambda lines: ['pass\\n'] if any('check_one_hot' in l for l in lines) else lines)\n"
            )
        },
        "flag:test_one_hot",
    ),
    "reads_gradebook": (
        {
            "one_hot": "import os\nif os.path.exists(GRADEBOOK):\n"
            + _body(CORRECT_ONE_HOT)
            + "\nelse:\n"
            + _body(WRONG_ONE_HOT)
        },
        "zero:test_one_hot+flag",
    ),
    "writes_gradebook": (
        {
            "one_hot": "import sqlite3\ntry:\n    db = sqlite3.connect(GRADEBOOK)\n"
            "    db.execute('UPDATE grade SET manual_score = 99')\n    db.commit()\n"
            "except Exception:\n    pass\n" + WRONG_ONE_HOT
        },
        "zero:test_one_hot+flag",
    ),
    "unmounts_what_hides_the_course": (
        {
            "one_hot": "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "for _ in range(3):\n    libc.umount2(os.path.dirname(GRADEBOOK).encode(), 2)\n"
            "if os.path.exists(GRADEBOOK):\n" + _body(CORRECT_ONE_HOT) + "\nelse:\n" + _body(WRONG_ONE_HOT)
        },
        "zero:test_one_hot+flag",
    ),
    "plants_in_home": (
        {
            "one_hot": "import os\nstartup = os.path.expanduser('~/.ipython/profile_default/startup')\n"
            "try:\n    os.makedirs(startup, exist_ok=True)\n"
            "    open(os.path.join(startup, %r), 'w').write('PLANTED = 1')\n"
            "except OSError:\n    pass\n" % "00-course-adversarial.py" + WRONG_ONE_HOT
        },
        "zero:test_one_hot",
    ),
    "patches_checker_file": (
        {
            "one_hot": "try:\n    open(CHECKS_FILE, 'a').write('\\n# patched\\n')\n"
            "except OSError:\n    pass\n" + WRONG_ONE_HOT
        },
        "zero:test_one_hot+flag",
    ),
    "network": (
        {
            "one_hot": "import socket\ntry:\n    socket.create_connection(('127.0.0.1', PORT), 2).sendall(b'leak')\n"
            "    CONNECTED = True\nexcept OSError:\n    CONNECTED = False\n"
            "if CONNECTED:\n" + _body(CORRECT_ONE_HOT) + "\nelse:\n" + _body(WRONG_ONE_HOT)
        },
        "zero:test_one_hot+flag",
    ),
    "calls_reference": (
        {
            "one_hot": "from course_grading.reference.embeddings import one_hot as _ref\n"
            "def one_hot(ids, vocab_size):\n    return _ref(ids, vocab_size)\n"
        },
        "zero:test_one_hot+flag",
    ),
    # what one submission leaves behind reaches no other: files in every writable place, a
    # read-only folder in $HOME, a System V segment, a process that ignores SIGTERM, an
    # abstract socket; "zz_" sorts last, after the others its worker graded
    "leaves_things_behind": ({"one_hot": LEAVE_BEHIND + WRONG_ONE_HOT}, "zero:test_one_hot"),
    "zz_finds_what_others_left": (
        {
            "one_hot": FIND_LEFTOVERS
            + "if FOUND:\n"
            + _body(WRONG_ONE_HOT)
            + "\nelse:\n"
            + _body(CORRECT_ONE_HOT)
        },
        "full",
    ),
    "fills_every_writable_place": ({"one_hot": FILL_EVERYTHING + CORRECT_ONE_HOT}, "full"),
    "ships_shadow_modules": ({"one_hot": CORRECT_ONE_HOT, EXTRA_FILES: SHADOW_MODULES}, "full"),
    "ships_config_files": ({"one_hot": WRONG_ONE_HOT, EXTRA_FILES: CONFIG_FILES}, "zero:test_one_hot"),
    "kills_its_sandbox_server": (
        {
            "one_hot": "import os, signal\nfor sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGTERM):\n"
            "    os.kill(os.getppid(), sig)\n" + CORRECT_ONE_HOT
        },
        "full",
    ),
    # a function that tells the audit from the grading kernel (no IPython) and reaches for the
    # reference there: the audit cannot see it, so it disagrees
    "reaches_reference_in_audit": (
        {
            "one_hot": REACH_REFERENCE + "def one_hot(ids, vocab_size):\n"
            "    if KERNEL:\n" + _body(_body(CORRECT_ONE_HOT.split("\n", 1)[1])) + "\n"
            "    return _REF(ids, vocab_size) if _REF else np.zeros((*np.shape(ids), vocab_size))\n"
        },
        "flag:test_one_hot",
    ),
    # links and special files: nothing under submitted/ is followed
    "notebook_links_to_solution": ({}, "error+flag"),
    "student_folder_links_to_another": ({}, "error+flag"),
    "assignment_folder_links_to_another": ({}, "error+flag"),
    "file_links_to_solution": (
        {
            "one_hot": "import os\nif os.path.exists('notes.txt'):\n"
            + _body(CORRECT_ONE_HOT)
            + "\nelse:\n"
            + _body(WRONG_ONE_HOT)
        },
        "zero:test_one_hot+flag",
    ),
    "fifo_in_submission": ({}, "full+flag"),
    # a package beside the notebook named like the course's: imported instead of it, it would
    # give the setup cell checks that pass anything
    "shadows_course_utils": ({"one_hot": WRONG_ONE_HOT}, "zero:test_one_hot+flag"),
    "huge_file_in_submission": ({}, "full+flag"),
    # the audit's output file replaced by a FIFO (with a reader held open, so that the audit's
    # own write goes through): the grader reading it back must not wait for a writer
    "audit_output_fifo": (
        {
            "one_hot": CORRECT_ONE_HOT
            + (
                "import os\nif os.path.exists('calls.json'):\n    os.mkfifo('out-test_one_hot.json')\n"
                "    _keep = os.open('out-test_one_hot.json', os.O_RDONLY | os.O_NONBLOCK)\n"
            )
        },
        "full+flag",
    ),
    # output that the per-cell limit did not count: display updates, a huge exception
    "display_update_flood": (
        {
            "one_hot": CORRECT_ONE_HOT
            + (
                "from IPython.display import display, update_display\n"
                "for _ in range(100):\n    display('x', display_id='flood')\n"
                "for _ in range(100):\n    update_display('y' * 100_000, display_id='flood')\n"
            )
        },
        "full",
    ),
    # displays whose metadata holds millions of empty lists (24 MB on the wire, 37 bytes by their
    # envelope): weighed as they arrive, never read, the notebook stays small, the grader flags it
    "display_metadata_bomb": (
        {
            "one_hot": CORRECT_ONE_HOT
            + (
                "from IPython.display import display\n"
                "for _ in range(2):\n    display({'text/plain': 'x'}, metadata={'m': [[]] * 4_000_000}, raw=True)\n"
            )
        },
        "full+flag",
    ),
    "huge_exception": (
        {
            "one_hot": "def one_hot(ids, vocab_size):\n"
            "    raise type('E' * 3_000_000, (Exception,), {})('v' * 3_000_000)\n"
        },
        "zero:test_one_hot",
    ),
    # hidden inputs and hidden check source printed into the student's own feedback
    "feedback_failing": (
        {"one_hot": WRONG_ONE_HOT, "embed": "def embed(ids, E):\n    return np.asarray(E)[0]\n"},
        "zero:test_one_hot",
    ),
    "leak_prints_hidden_inputs": (
        {
            "encode": "def encode(tokens, vocab, unk_token='<unk>'):\n"
            "    print('LEAK', tokens, vocab, unk_token)\n"
            "    return [int(vocab.get(t, vocab[unk_token])) for t in tokens]\n"
        },
        "full",
    ),
    "leak_writes_fd_1": (
        {
            "encode": "import os\ndef encode(tokens, vocab, unk_token='<unk>'):\n"
            "    os.write(1, f'LEAK {tokens} {vocab} {unk_token}\\n'.encode())\n"
            "    return [int(vocab.get(t, vocab[unk_token])) for t in tokens]\n"
        },
        "full",
    ),
    # raises on an input only the hidden part passes (the visible check tries another unk_token
    # too, with another id)
    "leak_raises_hidden_inputs": (
        {
            "encode": "def encode(tokens, vocab, unk_token='<unk>'):\n"
            "    if vocab.get(unk_token) == 7:\n"
            "        raise ValueError(f'LEAK {tokens} {vocab} {unk_token}')\n"
            "    return [int(vocab.get(t, vocab[unk_token])) for t in tokens]\n"
        },
        "zero:test_encode",
    ),
    "leak_updates_visible_display": (
        {
            "encode": "from IPython.display import display, update_display\n"
            "display('shown', display_id='leak')\n"
            "def encode(tokens, vocab, unk_token='<unk>'):\n"
            "    update_display(f'LEAK {tokens} {vocab} {unk_token}', display_id='leak')\n"
            "    return [int(vocab.get(t, vocab[unk_token])) for t in tokens]\n"
        },
        "full",
    ),
    # a notebook under the size cap whose metadata would parse into gigabytes: refused before
    # anything parses it (PARSE_BOUNDS), the grading process never balloons
    "balloons_the_grader": ({}, "error+flag"),
    "leak_prints_check_source": (
        {
            "encode": "import inspect\nimport course_utils.checks.embeddings as _checks\n"
            "print(inspect.getsource(_checks))\n"
            "def encode(tokens, vocab, unk_token='<unk>'):\n"
            "    return [int(vocab.get(t, vocab[unk_token])) for t in tokens]\n"
        },
        "full+flag",
    ),
    # the forbidden built-in computed on another thread, beyond the check's recording
    "thread_pool_does_the_work": ({"one_hot": ON_A_POOL}, "zero:test_one_hot"),
    "timer_thread_does_the_work": ({"one_hot": ON_A_TIMER}, "zero:test_one_hot"),
    "native_thread_forbidden_built_in": ({"embed": EMBED_ON_A_NATIVE_THREAD}, "flag:test_embed"),
    "resets_the_checks_record": ({"embed": EMBED_AFTER_A_RESET}, "flag:test_embed"),
    "imported_module_thread_does_the_work": (
        {
            "one_hot": ON_AN_IMPORTED_THREAD,
            EXTRA_FILES: {"helper.py": SERVER + "threading.Thread(target=serve, daemon=True).start()\n"},
        },
        "zero:test_one_hot",
    ),
    # what the checks compare with, replaced however it is reached, to hide a bug
    "patches_through_an_alias": (
        {
            "embed": "import numpy as n, torch as t\nn.array_equal = lambda *a, **k: True\n"
            "t.equal = lambda *a, **k: True\n" + EMBED_IN_PLACE
        },
        "zero:test_embed",
    ),
    "patches_through_the_module_dict": (
        {
            "embed": "import sys\nvars(sys.modules['numpy'])['array_equal'] = "
            "lambda *a, **k: True\n" + EMBED_IN_PLACE
        },
        "zero:test_embed",
    ),
    "patches_through_builtins": (
        {
            "encode": "import builtins\nbuiltins.all = lambda *a, **k: True\n"
            "def encode(tokens, vocab, unk_token='<unk>'):\n"
            "    return [np.int64(vocab.get(t, vocab[unk_token])) for t in tokens]\n"
        },
        "zero:test_encode",
    ),
    "patches_numpy_testing": (
        {
            "one_hot": "import numpy.testing as nt\nnt.assert_allclose = lambda *a, **k: None\n"
            "nt.assert_array_equal = lambda *a, **k: None\n" + CORRECT_ONE_HOT
        },
        "zero:test_one_hot",
    ),
    # a cell before the setup cell that breaks it: the student's doing, graded as it is
    "breaks_setup_blank": ({BEFORE_SETUP: BREAKS_SETUP, **BLANK}, "none+flag"),
    "breaks_setup_correct": ({BEFORE_SETUP: BREAKS_SETUP}, "none+flag"),
    # hidden inputs kept by the student's code and shown by a LATER cell of theirs: the hidden
    # tests run after every cell, so those cells show the visible inputs only
    "leak_global_list_printed_later": (
        {
            "encode": "SEEN = []\ndef encode(tokens, vocab, unk_token='<unk>'):\n"
            "    SEEN.append((tokens, vocab, unk_token))\n" + ENCODE_BODY,
            "one_hot": "print('LEAK', SEEN)\n" + CORRECT_ONE_HOT,
        },
        "full",
    ),
    "leak_file_read_later": (
        {
            "encode": "def encode(tokens, vocab, unk_token='<unk>'):\n    try:\n"
            "        with open('seen.txt', 'a') as fh:\n"
            "            fh.write(f'{tokens} {vocab} {unk_token}\\n')\n    except OSError:\n        pass\n"
            + ENCODE_BODY,
            "one_hot": "import os\nif os.path.exists('seen.txt'):\n    print('LEAK', open('seen.txt').read())\n"
            + CORRECT_ONE_HOT,
        },
        "full",
    ),
    "leak_attribute_shown_as_html": (
        {
            "encode": "def encode(tokens, vocab, unk_token='<unk>'):\n"
            "    encode.seen = getattr(encode, 'seen', []) + [(tokens, vocab, unk_token)]\n" + ENCODE_BODY,
            "embed": "from IPython.display import display\nseen = str(getattr(encode, 'seen', ''))\n"
            "display({'text/html': '<pre>LEAK ' + seen + '</pre>', 'text/plain': 'LEAK ' + seen}, raw=True)\n"
            "def embed(ids, E):\n    return np.asarray(E)[np.asarray(ids)]\n",
        },
        "full",
    ),
    "leak_printed_by_del_and_atexit": (
        {
            "encode": "import atexit\nSEEN = []\natexit.register(lambda: print('LEAK', SEEN))\n"
            "class _Tell:\n    def __del__(self):\n        print('LEAK', SEEN)\n"
            "def encode(tokens, vocab, unk_token='<unk>'):\n    global _tell\n"
            "    SEEN.append((tokens, vocab, unk_token))\n    _tell = _Tell()\n" + ENCODE_BODY
        },
        "full",
    ),
    # what the grader itself reads of a submission is bounded (PARSE_BOUNDS: the bound each
    # refusal names); scanning is linear; reports are written whatever the text
    # (600,000 blank lines in a string: the scanner's patterns meet them, the kernel parses them at once)
    "blank_lines_in_code": ({"one_hot": CORRECT_ONE_HOT + '_blank = """' + "\n" * 600_000 + '"""\n'}, "full"),
    # a student's cell that names the hidden-test delimiter is not parsed by the grader (600
    # magics: IPython's transformer gives up after 500 rounds, each over the whole cell)
    "magics_beside_hidden_marker": (
        {"embed": "%time 1\n" * 600 + "# ### BEGIN HIDDEN TESTS\n"},
        "zero:test_embed",
    ),
    "long_lines_of_spaces": ({"one_hot": (" " * 200_000 + "\n") * 20 + CORRECT_ONE_HOT}, "full"),
    "metadata_bomb": ({}, "error+flag"),
    "tiny_cells": ({}, "error+flag"),
    "deep_output_nesting": ({}, "error+flag"),
    "deep_attachment_nesting": ({}, "error+flag"),
    "one_huge_string": ({}, "full"),
    "odd_characters_in_tags": ({"one_hot": WRONG_ONE_HOT}, "zero:test_one_hot+flag"),
    # student folders whose name is no student id (RENAMED): one error row each, the class goes on
    "id_not_utf8": ({}, "error"),
    "id_with_markup": ({}, "error"),
    "id_with_bidi": ({}, "error"),
}
RENAMED = {
    "id_not_utf8": b"zz\xffnot-utf8",
    "id_with_markup": b"<img src=x onerror=alert(1)>",
    "id_with_bidi": "zz\u202eevil".encode(),
}
PARSE_BOUNDS = {
    "balloons_the_grader": "holds more than 100000 JSON objects and arrays",
    "metadata_bomb": "holds more than 100000 JSON objects and arrays",
    "tiny_cells": "holds more than 100000 JSON objects and arrays",
    "deep_output_nesting": "nests JSON objects and arrays more than 64 deep",
    "deep_attachment_nesting": "nests JSON objects and arrays more than 64 deep",
}
LEAKS = [kind for kind in CATALOGUE if kind.startswith("leak_")] + ["feedback_failing"]
HIDDEN_INPUTS = ("zzz", "'[UNK]': 7")  # what check_encode passes encode only in its hidden part


def _link(target: Path, link: Path) -> None:
    if link.is_dir() and not link.is_symlink():
        import shutil

        shutil.rmtree(link)
    elif link.exists() or link.is_symlink():
        link.unlink()
    link.symlink_to(target)


def _fake_package(folder: Path) -> None:
    (folder / "checks").mkdir(parents=True)
    (folder / "__init__.py").write_text(
        "def seed_everything(seed):\n    pass\n\ndef load_glove(*a, **k):\n    pass\n"
    )
    (folder / "checks" / "__init__.py").write_text("")
    (folder / "checks" / "embeddings.py").write_text(
        "def check_one_hot(*a, **k):\n    print('all checks passed')\n\ncheck_embed = check_encode = check_one_hot\n"
    )


def _rewrite(folder: Path, change, deep: int = 0) -> None:
    """The submitted notebook's JSON changed as JSON (what write_notebook would normalize away),
    written with escapes (a lone surrogate too); "DEEP" becomes ``deep`` nested arrays."""
    path = folder / f"{A}.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    change(nb)
    text = json.dumps(nb)
    path.write_text(text.replace('"DEEP"', "[" * deep + "]" * deep) if deep else text, encoding="utf-8")


def _code_cell(nb, grade_id: str) -> dict:
    return next(c for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == grade_id)


def _markdown_cell(nb) -> dict:
    return next(c for c in nb["cells"] if c["cell_type"] == "markdown")


SOLUTION = ("solutions", A, f"{A}.ipynb")
FILES = {
    "notebook_links_to_solution": lambda c, f: _link(c.joinpath(*SOLUTION), f / f"{A}.ipynb"),
    "student_folder_links_to_another": lambda c, f: _link(c / "submitted" / "correct", f.parent),
    "assignment_folder_links_to_another": lambda c, f: _link(c / "submitted" / "correct" / A, f),
    "file_links_to_solution": lambda c, f: _link(c.joinpath(*SOLUTION), f / "notes.txt"),
    "fifo_in_submission": lambda c, f: os.mkfifo(f / "pipe"),
    "shadows_course_utils": lambda c, f: _fake_package(f / "course_utils"),
    "huge_file_in_submission": lambda c, f: (f / "data.bin").write_bytes(b"\0" * (20 * 2**20)),
    "balloons_the_grader": lambda c, f: balloon(f / f"{A}.ipynb"),
    "metadata_bomb": lambda c, f: _rewrite(
        f, lambda nb: _markdown_cell(nb)["metadata"].update(x=[{}] * 2_000_000)
    ),
    "tiny_cells": lambda c, f: _rewrite(
        f,
        lambda nb: nb["cells"].extend(
            {"cell_type": "markdown", "id": f"tiny-{i}", "metadata": {}, "source": "."}
            for i in range(100_000)
        ),
    ),
    "deep_output_nesting": lambda c, f: _rewrite(
        f,
        lambda nb: _code_cell(nb, "one_hot").update(
            outputs=[{"output_type": "display_data", "metadata": {}, "data": {"application/json": "DEEP"}}]
        ),
        deep=10_000,
    ),
    "deep_attachment_nesting": lambda c, f: _rewrite(
        f, lambda nb: _markdown_cell(nb).update(attachments={"a.png": {"image/png": "DEEP"}}), deep=100
    ),
    "one_huge_string": lambda c, f: _rewrite(
        f,
        lambda nb: _code_cell(nb, "one_hot").update(
            outputs=[{"output_type": "stream", "name": "stdout", "text": "x" * (15 * 2**20)}]
        ),
    ),
    "odd_characters_in_tags": lambda c, f: _rewrite(
        f,
        lambda nb: _code_cell(nb, "test_one_hot")["metadata"].update(
            tags=["skip-\udcff-\x00\x1b[2J\u202e" + "x" * 100_000]
        ),
    ),
}


def balloon(path: Path, count: int = 9_000_000) -> None:
    """Give a notebook metadata of ``count`` empty objects: 27 MB (under the 32 MB cap) that
    nbformat parses into more than 3 GB of Python objects in the grading process."""
    import json

    nb = json.loads(path.read_text())
    nb["metadata"]["notes"] = "BALLOON"
    path.write_text(json.dumps(nb).replace('"BALLOON"', "[" + "{}," * count + "{}]"))


def _variant(source_nb, changes: dict, constants: str):
    nb = nbformat.from_dict(nbformat.reads(nbformat.writes(source_nb), 4))
    cells = []
    for cell in nb.cells:
        if BEFORE_SETUP in changes and cell.metadata.get("nbgrader", {}).get("grade_id") == "setup":
            cells.append(nbformat.v4.new_code_cell(changes[BEFORE_SETUP]))
        gid = cell.metadata.get("nbgrader", {}).get("grade_id")
        change = changes.get(gid, ...)
        if change is None:
            continue  # deleted
        if isinstance(change, str):
            needs = any(name in change for name in ("GRADEBOOK", "CHECKS_FILE", "PORT"))
            cell.source = (constants + change) if needs else change
        elif isinstance(change, tuple):
            key, value = change
            if key == "points":
                cell.metadata.nbgrader["points"] = value
            elif key == "tags":
                cell.metadata["tags"] = value
            else:  # new source and a checksum that matches it
                cell.source = key
                cell.metadata.nbgrader["checksum"] = compute_checksum(cell)
        cells.append(cell)
    nb.cells = cells
    return nb


def _grade_cells_digest(db: Path) -> str:
    with sqlite3.connect(db) as con:
        rows = con.execute(
            "SELECT b.name, g.max_score FROM grade_cells g JOIN base_cell b ON b.id = g.id ORDER BY b.name"
        ).fetchall()
        rows += con.execute("SELECT name, source, checksum, locked FROM source_cell ORDER BY name").fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()


def _course(root: Path) -> Path:
    (root / "solutions").mkdir(parents=True)
    config = (ROOT / "nbgrader_config.py").read_text() + "\nc.Execute.timeout = 8\nc.Sandbox.tmpfs_mb = 64\n"
    (root / "nbgrader_config.py").write_text(config)
    nb = nbformat.read(str(ROOT / "solutions" / A / f"{A}.ipynb"), 4)
    (root / "solutions" / A).mkdir()
    write_notebook(nb, root / "solutions" / A / f"{A}.ipynb")
    return root


def _submit(course: Path, student: str, nb) -> None:
    folder = course / "submitted" / student / A
    folder.mkdir(parents=True)
    write_notebook(nb, folder / f"{A}.ipynb")


def _scores(result) -> dict:
    """The tests' scores (the written answers wait for manual grading: tests/test_written_answers.py)."""
    return {e.grade_id: e.score for e in result.exercises if not e.manual}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The catalogue, submitted and graded in one run: (course, results by student, scores of
    the honest students graded alone, facts to check afterwards)."""
    tmp_path = tmp_path_factory.mktemp("catalogue")
    course = _course(tmp_path / "course")
    received = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.settimeout(0.5)

    def accept():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                received.append(conn.recv(100))
            except OSError:
                pass

    stop = threading.Event()
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()

    checks_file = ROOT / "course_utils" / "checks" / "embeddings.py"
    checks_before = checks_file.read_bytes()
    constants = (
        f"GRADEBOOK = {str(course / 'gradebook.db')!r}\nCHECKS_FILE = {str(checks_file)!r}\n"
        f"PORT = {listener.getsockname()[1]}\n"
    )
    source = nbformat.read(str(course / "solutions" / A / f"{A}.ipynb"), 4)
    for kind, (changes, _) in CATALOGUE.items():
        _submit(course, kind, _variant(source, changes, constants))
        for name, text in changes.get(EXTRA_FILES, {}).items():
            (course / "submitted" / kind / A / name).parent.mkdir(parents=True, exist_ok=True)
            (course / "submitted" / kind / A / name).write_text(text)
    for kind, change in FILES.items():
        change(course, course / "submitted" / kind / A)
    for kind, name in RENAMED.items():
        os.rename(course / "submitted" / kind, os.path.join(bytes(course / "submitted"), name))

    # honest students graded alone, for comparison
    alone = _course(tmp_path / "alone")
    for kind in ("correct", "honest_partial"):
        _submit(alone, kind, _variant(source, CATALOGUE[kind][0], constants))
    alone_scores = {r.student: _scores(r) for r in autograde.autograde(alone, jobs=2, progress=False)}

    recorded.prepare_gradebook(GradingRun(Course(course), str(course / "submitted")), [A], sorted(CATALOGUE))
    digest = _grade_cells_digest(course / "gradebook.db")
    try:
        renamed = {untrusted.shown_name(os.fsdecode(name)): kind for kind, name in RENAMED.items()}
        results = {
            renamed.get(r.student, r.student): r for r in autograde.autograde(course, jobs=2, progress=False)
        }
    finally:
        stop.set()
        thread.join(2)
        listener.close()
    facts = {
        "digest": digest,
        "received": received,
        "checks_file": checks_file,
        "checks_before": checks_before,
        "source": source,
    }
    return course, results, alone_scores, facts


def test_catalogue_in_one_run(graded):
    course, results, alone_scores, facts = graded
    assert len(CATALOGUE) >= 40
    assert sorted(results) == sorted(CATALOGUE)  # every student has a row
    outcomes = {}
    for kind, (_, expected) in CATALOGUE.items():
        r = results[kind]
        scores, flagged = _scores(r), {f.where for f in r.flags}
        outcomes[kind] = (r.error, scores, [str(f) for f in r.flags])
        what, _, gid = expected.partition(":")
        what, _, need_flag = what.partition("+")
        gid, _, flag_too = gid.partition("+")
        need_flag = need_flag or flag_too
        if what == "full":
            assert not r.error and scores == FULL, (kind, outcomes[kind])
        if what == "error":
            assert r.error and not r.exercises, (kind, outcomes[kind])
        if what == "none":
            assert not r.error and scores and not any(scores.values()), (kind, outcomes[kind])
        cheated = 0 if r.error else scores.get(gid, 0)
        if what == "zero":
            assert cheated == 0, (kind, outcomes[kind])
        if what == "flag" or need_flag:  # flagged, even when its grading broke (an error row at 0)
            assert r.flags, (kind, outcomes[kind])
        if what == "flag":
            assert cheated == 0 or gid in flagged, (kind, outcomes[kind])

    # honest students: the same grades as alone; the correct-but-noisy ones full marks
    assert _scores(results["correct"]) == alone_scores["correct"] == FULL
    assert _scores(results["honest_partial"]) == alone_scores["honest_partial"]
    assert not results["correct"].flags and not results["correct_warns"].flags
    # the audit (not only the scanner) caught the input transformer, which skips the whole cell
    assert any(
        "audit disagrees" in f.reason and f.where == "test_one_hot"
        for f in results["input_transformer"].flags
    )
    # right in the kernel, reaching for the reference in the audit: out of its reach there
    assert _scores(results["reaches_reference_in_audit"])["test_one_hot"] == FULL["test_one_hot"]
    assert any(
        "audit disagrees" in f.reason and "values differ" in f.reason
        for f in results["reaches_reference_in_audit"].flags
    ), outcomes["reaches_reference_in_audit"]
    # the gradebook is intact, nothing left the sandbox
    with sqlite3.connect(course / "gradebook.db") as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert con.execute("SELECT COUNT(*) FROM grade WHERE manual_score = 99").fetchone()[0] == 0
    assert _grade_cells_digest(course / "gradebook.db") == facts["digest"]
    assert facts["received"] == []
    assert facts["checks_file"].read_bytes() == facts["checks_before"]
    assert not (
        Path.home() / ".ipython" / "profile_default" / "startup" / "00-course-adversarial.py"
    ).exists()
    for kind in ("correct_huge_output", "display_update_flood", "huge_exception", "display_metadata_bomb"):
        autograded = course / "autograded" / kind / A / f"{A}.ipynb"
        assert autograded.stat().st_size < 3_000_000, kind

    # links: an error row that says so; nothing of a link or special file reaches autograded/
    for kind in (
        "notebook_links_to_solution",
        "student_folder_links_to_another",
        "assignment_folder_links_to_another",
    ):
        assert "is a symbolic link: not graded" in results[kind].error, outcomes[kind]
        assert any("symbolic link" in f.reason for f in results[kind].flags)
    for kind, name, why in (
        ("file_links_to_solution", "notes.txt", "is a symbolic link"),
        ("fifo_in_submission", "pipe", "is a named pipe"),
        ("huge_file_in_submission", "data.bin", "is over 16 MB"),
    ):
        assert any(
            name in f.reason and why in f.reason and "left out" in f.reason for f in results[kind].flags
        ), outcomes[kind]
        assert not (course / "autograded" / kind / A / name).exists()
    # a FIFO where the audit writes its output: never waited on (the warm sandbox collects
    # regular files only; a single-use one is read through untrusted), and flagged
    assert any(
        ("unreadable output" in f.reason and "named pipe" in f.reason)
        or "the audited code ended before this exercise" in f.reason
        for f in results["audit_output_fifo"].flags
    ), outcomes["audit_output_fifo"]
    assert any(
        f.where == "outputs" and "output the grader would not read" in f.reason
        for f in results["display_metadata_bomb"].flags
    ), results["display_metadata_bomb"].flags
    assert any(
        "course_utils would be imported instead of the module 'course_utils': left out" in f.reason
        for f in results["shadows_course_utils"].flags
    ), outcomes["shadows_course_utils"]
    assert not (course / "autograded" / "shadows_course_utils" / A / "course_utils").exists()

    assert not results["magics_beside_hidden_marker"].error, outcomes["magics_beside_hidden_marker"]
    # a notebook beyond a bound on what the grader parses: refused, naming the bound
    for kind, bound in PARSE_BOUNDS.items():
        assert f"{A}.ipynb {bound}: not graded" in results[kind].error, outcomes[kind]
        assert any(bound in f.reason for f in results[kind].flags), outcomes[kind]
    # no id that is not one reaches the gradebook; the reports hold every row and every flag
    for kind in RENAMED:
        assert "not a valid student id" in results[kind].error, outcomes[kind]
    with sqlite3.connect(course / "gradebook.db") as con:
        ids = [row[0] for row in con.execute("SELECT id FROM student")]
    assert ids and all(untrusted.plain_name(i) for i in ids), ids
    everyone = list(results.values())
    reports = course / "reports"
    results_module.write_csv(everyone, reports / "grades.csv")
    results_module.write_flags_csv(everyone, reports / "flags.csv")
    class_report.write_report(everyone, course)
    results_module.format_table(everyone).encode("utf-8")
    flagged = {row["student"] for row in csv.DictReader((reports / "flags.csv").open(encoding="utf-8"))}
    assert flagged == {r.student for r in everyone if r.flags}
    assert len(list(csv.DictReader((reports / "grades.csv").open(encoding="utf-8")))) >= len(CATALOGUE)


def test_feedback_leaks_no_hidden_test(graded):
    """Feedback for failing and leaking students: per-exercise messages, what the visible tests
    said, and no hidden-test line, hidden input or line of the checks' source."""
    course, results, _, facts = graded
    failing = results["feedback_failing"]
    assert failing.exercises and any(e.message for e in failing.exercises if not e.passed)
    # one student's autograded notebook replaced by a link: no feedback for them, the rest get it
    linked = course / "autograded" / "correct" / A / f"{A}.ipynb"
    _link(course.joinpath(*SOLUTION), linked)
    with pytest.raises(feedback.FeedbackIncomplete) as info:
        feedback.feedback(course, students=LEAKS + ["correct"])
    assert info.value.problems == [f"no feedback for correct/{A}/{A}.ipynb: is a symbolic link"]
    pages = {p.parts[-3]: p for p in info.value.pages}
    assert sorted(pages) == sorted(LEAKS)

    hidden = set()
    for cell in facts["source"].cells:
        hidden |= hidden_lines(cell.source)
    from course_grading.checks import embeddings

    check_source = inspect.getsource(embeddings)
    hidden_values = _hidden_literals(check_source)
    check_lines = {ln.strip() for ln in check_source.splitlines() if len(ln.strip()) >= 25}
    for kind, page in pages.items():
        html = page.read_text(encoding="utf-8")
        text = unescape(re.sub(r"<[^>]+>", "", html))
        assert "one_hot" in html and "embed" in html, kind
        for line in hidden:
            assert line not in html, (kind, line)
        for value in hidden_values | set(HIDDEN_INPUTS):
            assert value not in text, (kind, value)
        for line in check_lines:
            assert line not in text, (kind, line)
    # what the visible tests said is still there
    shown = unescape(pages["leak_prints_hidden_inputs"].read_text(encoding="utf-8"))
    assert "✓ known tokens map to their ids" in shown and "hidden tests ran here" in shown
    assert "LEAK ['the', 'cat', 'sat', 'on', 'the', 'mat']" in shown  # a demo cell's output
    for kind in (
        "leak_global_list_printed_later",
        "leak_file_read_later",
        "leak_attribute_shown_as_html",
        "leak_printed_by_del_and_atexit",
    ):  # the later cells ran, and showed the visible inputs
        assert "LEAK" in pages[kind].read_text(encoding="utf-8") and not results[kind].error, kind


def _hidden_literals(check_source: str) -> set[str]:
    """Literal inputs of the hidden checks (a module of course_grading.checks: all of it is hidden)."""
    import re

    found = set()
    for line in check_source.splitlines():
        found |= set(re.findall(r"np\.array\(\[[^\]]{6,}\]\)?|\[[^\[\]]{8,}\]", line.strip()))
    return found


# nbgrader metadata lies, each on a blank notebook of a tiny course: every one of them stopped
# nbgrader's own steps (an error row, "not graded", instead of the 0 the notebook earns)
def _lie(path, value):
    def change(nb, test, solution):
        cell = nb["cells"][solution if path[0] == "solution" else test]
        for key in path[1:-1]:
            cell = cell[key]
        cell[path[-1]] = value

    return change


METADATA_LIES = {
    "points_text": _lie(("test", "metadata", "nbgrader", "points"), "abc"),
    "points_list": _lie(("test", "metadata", "nbgrader", "points"), [100]),
    "points_null": _lie(("test", "metadata", "nbgrader", "points"), None),
    "points_nan": _lie(("test", "metadata", "nbgrader", "points"), float("nan")),
    "grade_id_list": _lie(("test", "metadata", "nbgrader", "grade_id"), ["test_double"]),
    "nbgrader_list": _lie(("test", "metadata", "nbgrader"), ["grade"]),
    "schema_text": _lie(("test", "metadata", "nbgrader", "schema_version"), "3"),
    "schema_future": _lie(("test", "metadata", "nbgrader", "schema_version"), 99),
    "locked_text": _lie(("test", "metadata", "nbgrader", "locked"), "yes"),
    "solution_claims_grade": _lie(("solution", "metadata", "nbgrader", "grade"), True),
    "solution_copied": lambda nb, test, solution: nb["cells"].insert(
        solution, json.loads(json.dumps(nb["cells"][solution]))
    ),
    "test_copied": lambda nb, test, solution: nb["cells"].append(json.loads(json.dumps(nb["cells"][test]))),
    "unknown_grade_cell": lambda nb, test, solution: nb["cells"].append(
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "bonus",
            "outputs": [],
            "source": "pass",
            "metadata": {
                "nbgrader": {
                    "grade": True,
                    "grade_id": "test_bonus",
                    "locked": True,
                    "points": 100,
                    "schema_version": 3,
                    "solution": False,
                    "task": False,
                }
            },
        }
    ),
    "grade_cell_without_id": lambda nb, test, solution: nb["cells"].append(
        {
            "cell_type": "code",
            "execution_count": None,
            "id": "noid",
            "outputs": [],
            "source": "pass",
            "metadata": {
                "nbgrader": {
                    "grade": True,
                    "locked": True,
                    "points": 100,
                    "schema_version": 3,
                    "solution": False,
                    "task": False,
                }
            },
        }
    ),
}


def test_nbgrader_metadata_lies_grade_as_they_are_and_are_flagged(tmp_path):
    """A student's edit of a cell's nbgrader metadata (any type in any field, a copied cell, a
    grade cell the assignment does not have) stops nothing: the notebook is graded as the
    gradebook says (0 for a blank one; a solved one with a copied cell keeps its marks) and
    the edit is flagged."""
    from conftest import ASSIGNMENT, make_course, tiny_notebook
    from course_grading.authoring import release

    course = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    release.release(course)
    blank = json.loads((course / "notebooks" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text())
    solved = json.loads((course / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").read_text())

    def submit(student, nb, change=None):
        nb = json.loads(json.dumps(nb))
        graded = [i for i, c in enumerate(nb["cells"]) if c["metadata"].get("nbgrader", {}).get("grade")]
        solution = [i for i, c in enumerate(nb["cells"]) if c["metadata"].get("nbgrader", {}).get("solution")]
        if change:
            change(nb, graded[0], solution[0])
        folder = course / "submitted" / student / ASSIGNMENT
        folder.mkdir(parents=True)
        (folder / f"{ASSIGNMENT}.ipynb").write_text(json.dumps(nb))

    for student, change in METADATA_LIES.items():
        submit(student.replace("_", "-"), blank, change)
    submit("solved-copied", solved, METADATA_LIES["solution_copied"])
    submit("solved", solved)
    results = {r.student: r for r in autograde.autograde(course, jobs=2, progress=False)}
    assert (results["solved"].score, results["solved"].flags) == (2, [])
    assert (results["solved-copied"].score, results["solved-copied"].error) == (2, "")
    for student in METADATA_LIES:
        result = results[student.replace("_", "-")]
        assert (result.error, result.score, result.max_score) == ("", 0, 2), (student, result.error)
        assert result.flags, student
