"""The audit's record (``course_grading/audit/hooks.py``): forbidden built-ins decided with
evidence the submission's code cannot take back.

Each attack here took full marks with no flag before the record existed: a forbidden built-in
computed on a native thread (``pthread_create`` through ctypes imported by a computed name), on a
Python thread with profiling cleared, or after the checks' own record was reset. In the audit
each is now a disagreement that says what ran and, for an escape, the cell and line that tried
it. The child runs in a fork of the test process (``audit_runner``) and, once, in the sandbox.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from audit_runner import forked
from course_grading.audit import evidence, trusted as audit
from course_grading.sandbox import bubblewrap
from harness import ROOT, solution_with

SOFTMAX_WITH = "import torch\n\ndef softmax(x, dim=-1):\n    return {}\n"
NATIVE_THREAD = '''import pkgutil, torch
ct = pkgutil.resolve_name('ct' + 'ypes')
def softmax(x, dim=-1):
    out = {}
    def work(_):
        out['y'] = torch.softmax(x, dim)
        return 0
    callback = ct.CFUNCTYPE(ct.c_void_p, ct.c_void_p)(work)
    libc, tid = ct.CDLL(None), ct.c_ulong()
    libc.pthread_create(ct.byref(tid), None, callback, None)
    libc.pthread_join(tid, None)
    return out['y']
'''
PYTHON_THREAD = '''import sys, threading, time, _thread, torch
sys.setprofile(None)
threading.setprofile(None)
def softmax(x, dim=-1):
    out = []
    _thread.start_new_thread(lambda: out.append(torch.softmax(x, dim)), ())
    while not out:
        time.sleep(0.001)
    return out[0]
'''
RECORD_RESET = '''import torch
from course_utils.checks import _core, _seal
_core.Check._verdict = lambda *a, **k: None
_core.Forbidden.held_by = lambda *a, **k: []
_seal._SEAL = None
def softmax(x, dim=-1):
    return torch.softmax(x, dim)
'''
BY_ATTRIBUTE = '''import torch
def softmax(x, dim=-1):
    torch.ctypes.CDLL(None).getpid()
    return x.exp() / x.exp().sum(dim, keepdim=True)
'''
GC_WALK = '''import gc, torch
def softmax(x, dim=-1):
    hooks = [o for o in gc.get_objects() if callable(o) and getattr(o, "__name__", "") == "hook"]
    return x.exp() / x.exp().sum(dim, keepdim=True)
'''
FORGED_MARK = '''import sys, torch
def softmax(x, dim=-1):
    sys.audit("course.audit.mark", "end", "test_softmax", 0)
    return torch.softmax(x, dim)
'''
CLOSED_RECORD = '''import os, torch
def softmax(x, dim=-1):
    for fd in range(3, 256):
        try:
            os.fstat(fd)
        except OSError:
            continue
        if os.path.stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return torch.softmax(x, dim)
'''
NEW_PROGRAM = '''import os, sys
from multiprocessing import util
def softmax(x, dim=-1):
    pid = util.spawnv_passfds(sys.executable.encode(), [sys.executable, "-c", "pass"], ())
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
        raise RuntimeError("the program did not run")
    e = x.exp()
    return e / e.sum(dim, keepdim=True)
'''
SIGNAL_FRAMES = '''import signal, torch
def _loosen(signum, frame):  # a handler sees the frame it interrupts: the hook's, a kernel's
    while frame is not None:
        for value in list(frame.f_locals.values()):
            for cell in getattr(value, "__closure__", None) or ():
                try:
                    cell.cell_contents = None
                except Exception:
                    pass
        frame = frame.f_back
signal.signal(signal.SIGPROF, _loosen)
def softmax(x, dim=-1):
    signal.setitimer(signal.ITIMER_PROF, 0.0001, 0.0001)
    try:
        for _ in range(200):
            y = torch.softmax(x, dim)
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
    return torch.softmax(x, dim)
'''
REWRITTEN_MODULES = '''import sys, torch
hooks = sys.modules["course_grading.audit.hooks"]
hooks.NATIVE, hooks.MARK, hooks.OP = frozenset(), "nothing", "nothing"
hooks.ESCAPES.clear()
child = sys.modules["course_grading.audit.child"]
child.hooks = None
def softmax(x, dim=-1):
    return torch.softmax(x, dim)
'''
ATTACKS = {
    "plain": (SOFTMAX_WITH.format("torch.softmax(x, dim)"), "ran aten::_softmax"),
    "functional": (SOFTMAX_WITH.format("torch.nn.functional.softmax(x, dim)"), "ran aten::_softmax"),
    "aten_directly": (SOFTMAX_WITH.format("torch.ops.aten._softmax.default(x, dim, False)"), "ran aten::_softmax"),
    "inference_mode": ("import torch\ndef softmax(x, dim=-1):\n    with torch.inference_mode():\n"
                       "        return torch.softmax(x, dim).clone()\n", "ran aten::_softmax"),
    "log_softmax_exp": (SOFTMAX_WITH.format("torch.log_softmax(x, dim).exp()"), "ran aten::_log_softmax"),
    "attention_as_softmax": ("import torch, torch.nn.functional as F\ndef softmax(x, dim=-1):\n"
                             "    x = x.movedim(dim, -1)\n    n = x.shape[-1]\n    eye = torch.eye(n)\n"
                             "    out = F.scaled_dot_product_attention(x.reshape(-1, 1, n), eye, eye, scale=1.0)\n"
                             "    return out.reshape(x.shape).movedim(-1, dim)\n", "ran aten::_s"),
    "native_thread": (NATIVE_THREAD, "leave Python's reach: import:_ctypes (cell softmax, line 2)"),
    "ctypes_by_attribute": (BY_ATTRIBUTE, "ctypes.dlopen (cell softmax, line 3)"),
    "import_builtin": ("def softmax(x, dim=-1):\n    __import__('ct' + 'ypes')\n    return x\n",
                       "ctypes (cell softmax, line 2)"),
    "cffi": ("import importlib\ndef softmax(x, dim=-1):\n    importlib.import_module('cf' + 'fi')\n    return x\n",
             "leave Python's reach: import:"),
    "python_thread_unprofiled": (PYTHON_THREAD, "leave Python's reach: profiling (cell softmax, line 2)"),
    "record_reset": (RECORD_RESET, "ran aten::_softmax"),
    "gc_walk": (GC_WALK, "gc.get_objects (cell softmax, line 3)"),
    "tracing": ("import sys\ndef softmax(x, dim=-1):\n    sys.settrace(lambda *a: None)\n    return x\n", "tracing"),
    "fork": ("import os\ndef softmax(x, dim=-1):\n    os.fork()\n    return x\n", "os.fork (cell softmax, line 3)"),
    "new_program": (NEW_PROGRAM, "the program did not run"),  # no audit event: seccomp refuses execve
    "subprocess": ("import subprocess, sys\ndef softmax(x, dim=-1):\n    subprocess.run([sys.executable, '-c', 'pass'])\n"
                   "    return x\n", "subprocess (cell softmax, line 3)"),
    "signal_frames": (SIGNAL_FRAMES, "ran aten::_softmax"),
    "rewritten_modules": (REWRITTEN_MODULES, "ran aten::_softmax"),
    "gc_referrers": ("import gc, sys\ndef softmax(x, dim=-1):\n    gc.get_referrers(sys.audit)\n    return x\n",
                     "gc.get_referrers (cell softmax, line 3)"),
    "forged_mark": (FORGED_MARK, "the marks around its calls were forged"),
    "record_replaced": (CLOSED_RECORD, "ended before this exercise"),  # the child ends itself
}


def _verdicts(path: Path, assignment: str, **kw) -> dict:
    return {v.grade_id: v for v in audit.audit(path, assignment, seed=7, blocks=ROOT / "solutions" / assignment
                                               / "building_blocks.py", **kw)}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_softmax_attack_is_a_disagreement(tmp_path, name):
    source, said = ATTACKS[name]
    verdict = _verdicts(solution_with(tmp_path, "03_attention", softmax=source), "03_attention",
                        runner=forked)["test_softmax"]
    assert not verdict.agrees and said in verdict.reason, verdict.reason


def test_honest_softmax_and_the_rest_agree(tmp_path):
    found = _verdicts(solution_with(tmp_path, "03_attention"), "03_attention", runner=forked)
    assert all(v.agrees for v in found.values()), found


def test_gpt_block_on_the_built_in_attention(tmp_path):
    import nbformat as nbf
    nb = nbf.read(str(ROOT / "solutions" / "09_gpt" / "09_gpt.ipynb"), 4)
    source = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "gpt_block")
    source = source.replace("out, weights = scaled_dot_product_attention(Q, K, V, mask)",
                            "out = torch.nn.functional.scaled_dot_product_attention(Q, K, V, attn_mask=mask)\n"
                            "        weights = None")
    found = _verdicts(solution_with(tmp_path, "09_gpt", gpt_block=source), "09_gpt", runner=forked)
    assert not found["test_gpt_block"].agrees and "GPTBlock ran aten::_s" in found["test_gpt_block"].reason
    assert found["test_generate"].agrees  # generate does not forbid attention


def test_a_thread_left_running_is_seen_after_the_calls(tmp_path):
    # each call asks the thread for a built-in softmax after it, and the next call waits for it:
    # the thread's work lands between the calls whatever the machine's load
    source = ('import threading, time, torch\nASKED = []\n'
              'def _spin():\n    served = 0\n    while True:\n'
              '        if len(ASKED) > served:\n'
              '            torch.softmax(torch.ones(2), 0)\n            ASKED[served].set()\n'
              '            served += 1\n        time.sleep(0.001)\n'
              'threading.Thread(target=_spin, daemon=True).start()\n'
              'def softmax(x, dim=-1):\n    for asked in list(ASKED):\n        asked.wait(5)\n'
              '    ASKED.append(threading.Event())\n'
              '    e = (x - x.amax(dim, keepdim=True)).exp()\n'
              '    return e / e.sum(dim, keepdim=True)\n')
    verdict = _verdicts(solution_with(tmp_path, "03_attention", softmax=source), "03_attention",
                        runner=forked)["test_softmax"]
    assert not verdict.agrees and "aten::_softmax" in verdict.reason, verdict.reason


def test_evidence_reads_a_record_line_by_line():
    calls = {"test_softmax": ("softmax", 2), "test_causal_mask": ("causal_mask", 1)}
    honest = (b"op aten::_softmax\nbegin test_softmax 0\nend test_softmax 0\nbegin test_softmax 1\n"
              b"end test_softmax 1\nbegin test_causal_mask 0\nop aten::_softmax\nend test_causal_mask 0\ndone\n")
    assert evidence.findings(honest, calls, "") == {"test_softmax": "", "test_causal_mask": ""}
    cut = honest[:honest.index(b"begin test_causal_mask")]
    assert evidence.findings(cut, calls, "")["test_causal_mask"].startswith(evidence.MISSING)
    assert "no end" in evidence.findings(honest[:-5], calls, "")["test_softmax"]
    assert "never writes" in evidence.findings(honest + b"garbage\n", calls, "")["test_softmax"]
    assert "never writes" in evidence.findings(honest + b"done\n", calls, "")["test_softmax"]
    stray = honest.replace(b"begin test_softmax 1\n", b"op aten::_softmax.out\nbegin test_softmax 1\n")
    assert "outside the audited calls" in evidence.findings(stray, calls, "")["test_softmax"]


@pytest.mark.slow
@pytest.mark.skipif(not bubblewrap.available()[0], reason="needs bubblewrap")
def test_in_the_sandbox(tmp_path):
    path = solution_with(tmp_path, "03_attention", softmax=NATIVE_THREAD,
                     causal_mask=RECORD_RESET.replace("def softmax(x, dim=-1):\n    return torch.softmax(x, dim)\n",
                                                      "def causal_mask(size, device=None):\n"
                                                      "    return torch.ones(size, size).softmax(0) > 0\n"))
    found = _verdicts(path, "03_attention")
    assert "import:_ctypes (cell softmax, line 2)" in found["test_softmax"].reason
    plain = solution_with(tmp_path, "03_attention", softmax=SOFTMAX_WITH.format("torch.softmax(x, dim)"))
    found = _verdicts(plain, "03_attention")
    assert "softmax ran aten::_softmax" in found["test_softmax"].reason
    assert found["test_causal_mask"].agrees and found["test_scaled_dot_product_attention"].agrees
