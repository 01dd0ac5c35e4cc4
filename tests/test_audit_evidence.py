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
from course_grading.audit import evidence
from course_grading.audit import trusted as audit
from course_grading.sandbox import bubblewrap
from harness import ROOT, solution_with

SOFTMAX_WITH = "import torch\n\ndef softmax(x, dim=-1):\n    return {}\n"
NATIVE_THREAD = """import pkgutil, torch
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
"""
PYTHON_THREAD = """import sys, threading, time, _thread, torch
sys.setprofile(None)
threading.setprofile(None)
def softmax(x, dim=-1):
    out = []
    _thread.start_new_thread(lambda: out.append(torch.softmax(x, dim)), ())
    while not out:
        time.sleep(0.001)
    return out[0]
"""
RECORD_RESET = """import torch
from course_utils.checks import _core, _seal
_core.Check._verdict = lambda *a, **k: None
_core.Forbidden.held_by = lambda *a, **k: []
_seal._SEAL = None
def softmax(x, dim=-1):
    return torch.softmax(x, dim)
"""
BY_ATTRIBUTE = """import torch
def softmax(x, dim=-1):
    torch.ctypes.CDLL(None).getpid()
    return x.exp() / x.exp().sum(dim, keepdim=True)
"""
GC_WALK = """import gc, torch
def softmax(x, dim=-1):
    hooks = [o for o in gc.get_objects() if callable(o) and getattr(o, "__name__", "") == "hook"]
    return x.exp() / x.exp().sum(dim, keepdim=True)
"""
FORGED_MARK = """import sys, torch
def softmax(x, dim=-1):
    sys.audit("course.audit.mark", "end", "test_softmax", 0)
    return torch.softmax(x, dim)
"""
CLOSED_RECORD = """import os, torch
def softmax(x, dim=-1):
    for fd in range(3, 256):
        try:
            os.fstat(fd)
        except OSError:
            continue
        if os.path.stat.S_ISFIFO(os.fstat(fd).st_mode):
            os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return torch.softmax(x, dim)
"""
NEW_PROGRAM = """import os, sys
from multiprocessing import util
def softmax(x, dim=-1):
    pid = util.spawnv_passfds(sys.executable.encode(), [sys.executable, "-c", "pass"], ())
    if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) != 0:
        raise RuntimeError("the program did not run")
    e = x.exp()
    return e / e.sum(dim, keepdim=True)
"""
SIGNAL_FRAMES = """import signal, torch
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
"""
REWRITTEN_MODULES = """import sys, torch
hooks = sys.modules["course_grading.audit.hooks"]
hooks.NATIVE, hooks.MARK, hooks.OP = frozenset(), "nothing", "nothing"
hooks.ESCAPES.clear()
child = sys.modules["course_grading.audit.child"]
child.hooks = None
def softmax(x, dim=-1):
    return torch.softmax(x, dim)
"""
BY_HAND = "    e = (x - x.amax(dim, keepdim=True)).exp()\n    return e / e.sum(dim, keepdim=True)\n"
CT = "import torch\nct = torch.ctypes  # imported by torch: no import event\ndef softmax(x, dim=-1):\n"
SUBCLASSES = (
    """import torch
def _all(cls):
    for sub in type.__subclasses__(cls):
        yield sub
        yield from _all(sub)
def softmax(x, dim=-1):
    c_char = next(c for c in _all(object) if c.__name__ == "c_char" and c.__module__ == "ctypes")
    c_char(b"x")
"""
    + BY_HAND
)
# every route from an already imported ctypes to an address, and the event the seal raises
CTYPES_ROUTES = {
    "memmove": "    ct.memmove(id(x), id(x), 0)\n",
    "memset": "    ct.memset(id(x) + 64, 0, 0)\n",
    "cast": "    ct.cast(id(x), ct.POINTER(ct.c_char))\n",
    "string_at": "    ct.string_at(id(x), 8)\n",
    "pointer_index": "    p = ct.pointer(ct.c_long(0))\n    p[1] = 0\n",
    "union_overlay": "    class U(ct.Union):\n        _fields_ = [('a', ct.c_void_p), ('b', ct.POINTER(ct.c_char))]\n    U()\n",
    "function_from_address": "    ct.CFUNCTYPE(ct.c_void_p, ct.c_void_p, ct.c_void_p, ct.c_size_t)(ct._memmove_addr)\n",
    "new_function_type": "    ct.CFUNCTYPE(ct.c_double, ct.c_char, ct.c_float)(lambda *a: 0)\n",
    "constructor_by_new": "    ct.c_char.__new__(ct.c_char)\n",
    "unpickle": "    ct.addressof.__self__._unpickle(ct.c_int, ({}, b'1234'))\n",
    "pythonapi": "    ct.pythonapi.Py_IncRef(ct.py_object(x))\n",
    "reference_counts": "    ct.addressof.__self__.Py_DECREF(x)\n",
    "slot_wrapper": "    ct.CFUNCTYPE(ct.c_void_p).__mro__[1].__call__(ct.memset, 0, 0, 0)\n",
}


ATTACKS = {
    "plain": (
        SOFTMAX_WITH.format("torch.softmax(x, dim)"),
        "ran aten::_softmax on fresh input 1 (cell softmax, line 4)",
    ),
    "functional": (SOFTMAX_WITH.format("torch.nn.functional.softmax(x, dim)"), "ran aten::_softmax"),
    "aten_directly": (
        SOFTMAX_WITH.format("torch.ops.aten._softmax.default(x, dim, False)"),
        "ran aten::_softmax",
    ),
    "inference_mode": (
        "import torch\ndef softmax(x, dim=-1):\n    with torch.inference_mode():\n"
        "        return torch.softmax(x, dim).clone()\n",
        "ran aten::_softmax",
    ),
    "log_softmax_exp": (SOFTMAX_WITH.format("torch.log_softmax(x, dim).exp()"), "ran aten::_log_softmax"),
    "attention_as_softmax": (
        "import torch, torch.nn.functional as F\ndef softmax(x, dim=-1):\n"
        "    x = x.movedim(dim, -1)\n    n = x.shape[-1]\n    eye = torch.eye(n)\n"
        "    out = F.scaled_dot_product_attention(x.reshape(-1, 1, n), eye, eye, scale=1.0)\n"
        "    return out.reshape(x.shape).movedim(-1, dim)\n",
        "ran aten::_s",
    ),
    "native_thread": (NATIVE_THREAD, "leave Python's reach: import:_ctypes (cell softmax, line 2)"),
    "ctypes_by_attribute": (BY_ATTRIBUTE, "ctypes.object (cell softmax, line 3)"),  # the library's class
    "import_builtin": (
        "def softmax(x, dim=-1):\n    __import__('ct' + 'ypes')\n    return x\n",
        "ctypes (cell softmax, line 2)",
    ),
    "cffi": (
        "import importlib\ndef softmax(x, dim=-1):\n    importlib.import_module('cf' + 'fi')\n    return x\n",
        "leave Python's reach: import:",
    ),
    "python_thread_unprofiled": (PYTHON_THREAD, "leave Python's reach: profiling (cell softmax, line 2)"),
    "record_reset": (RECORD_RESET, "ran aten::_softmax"),
    "gc_walk": (GC_WALK, "gc.get_objects (cell softmax, line 3)"),
    "tracing": (
        "import sys\ndef softmax(x, dim=-1):\n    sys.settrace(lambda *a: None)\n    return x\n",
        "tracing",
    ),
    "fork": (
        "import os\ndef softmax(x, dim=-1):\n    os.fork()\n    return x\n",
        "os.fork (cell softmax, line 3)",
    ),
    "new_program": (NEW_PROGRAM, "the program did not run"),  # no audit event: seccomp refuses execve
    "subprocess": (
        "import subprocess, sys\ndef softmax(x, dim=-1):\n    subprocess.run([sys.executable, '-c', 'pass'])\n"
        "    return x\n",
        "subprocess (cell softmax, line 3)",
    ),
    "signal_frames": (SIGNAL_FRAMES, "ran aten::_softmax"),
    "rewritten_modules": (REWRITTEN_MODULES, "ran aten::_softmax"),
    "gc_referrers": (
        "import gc, sys\ndef softmax(x, dim=-1):\n    gc.get_referrers(sys.audit)\n    return x\n",
        "gc.get_referrers (cell softmax, line 3)",
    ),
    "ctypes_from_address": (
        CT + "    ct.c_long.from_address(id(x))\n" + BY_HAND,
        "ctypes.cdata (cell softmax, line 4)",
    ),
    "ctypes_call_function": (
        CT + "    ct.addressof.__self__.call_function(ct._memset_addr, (0, 0, 0))\n" + BY_HAND,
        "ctypes.call_function (cell softmax, line 4)",
    ),
    "ctypes_loaded_again": (
        "import _imp, torch\nfrom importlib.machinery import ModuleSpec\ndef softmax(x, dim=-1):\n"
        "    origin = torch.ctypes.addressof.__self__.__file__\n"
        "    _imp.create_dynamic(ModuleSpec('_ctypes', None, origin=origin)).Py_DECREF(x)\n" + BY_HAND,
        "ctypes.object (cell softmax, line 5)",
    ),
    "ctypes_from_subclasses": (SUBCLASSES, "ctypes.object (cell softmax, line 8)"),
    **{
        f"ctypes_{name}": (CT + body + BY_HAND, "ctypes.object (cell softmax, line 4)")
        for name, body in CTYPES_ROUTES.items()
    },
    "special_softmax": (SOFTMAX_WITH.format("torch.special.softmax(x, dim)"), "ran aten::_softmax"),
    "softmin": (SOFTMAX_WITH.format("torch.nn.functional.softmin(-x, dim)"), "ran aten::_softmax"),
    "softmax_module": (SOFTMAX_WITH.format("torch.nn.Softmax(dim)(x)"), "ran aten::_softmax"),
    "private_softmax": (SOFTMAX_WITH.format("torch._softmax(x, dim, False)"), "ran aten::_softmax"),
    "softmax_out": (
        "import torch\ndef softmax(x, dim=-1):\n    out = torch.empty(0)\n"
        "    return torch.ops.aten._softmax.out(x, dim, False, out=out)\n",
        "ran aten::_softmax.out",
    ),
    "safe_softmax": (SOFTMAX_WITH.format("torch.ops.aten._safe_softmax(x, dim)"), "ran aten::_safe_softmax"),
    "masked_softmax": (
        SOFTMAX_WITH.format("torch._masked_softmax(x, torch.zeros_like(x, dtype=torch.bool), dim)"),
        "ran aten::_masked_softmax",
    ),
    "attention_math": (
        "import torch\ndef softmax(x, dim=-1):\n    x = x.movedim(dim, -1)\n    n = x.shape[-1]\n"
        "    eye = torch.eye(n, dtype=x.dtype)\n"
        "    out = torch.ops.aten._scaled_dot_product_attention_math(x.reshape(-1, 1, n), eye, eye, scale=1.0)[0]\n"
        "    return out.reshape(x.shape).movedim(-1, dim)\n",
        "ran aten::_s",
    ),
    "attention_module": (
        "import torch\ndef softmax(x, dim=-1):\n    x = x.movedim(dim, -1)\n    n = x.shape[-1]\n"
        "    layer = torch.nn.MultiheadAttention(n, 1, bias=False, batch_first=True).eval()\n"
        "    out = layer(x.reshape(-1, 1, n), x.reshape(-1, 1, n), x.reshape(-1, 1, n))[1]\n"
        "    return x",
        "ran aten::_softmax",
    ),
    "forged_mark": (FORGED_MARK, "the marks around its calls were forged"),
    "record_replaced": (CLOSED_RECORD, "ended before this exercise"),  # the child ends itself
}


def _verdicts(path: Path, assignment: str, **kw) -> dict:
    return {
        v.grade_id: v
        for v in audit.audit(
            path, assignment, seed=7, blocks=ROOT / "solutions" / assignment / "building_blocks.py", **kw
        )
    }


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_softmax_attack_is_a_disagreement(tmp_path, name):
    source, said = ATTACKS[name]
    verdict = _verdicts(
        solution_with(tmp_path, "03_attention", softmax=source), "03_attention", runner=forked
    )["test_softmax"]
    assert not verdict.agrees and said in verdict.reason, verdict.reason


def test_honest_softmax_and_the_rest_agree(tmp_path):
    found = _verdicts(solution_with(tmp_path, "03_attention"), "03_attention", runner=forked)
    assert all(v.agrees for v in found.values()), found


def test_gpt_block_on_the_built_in_attention(tmp_path):
    import nbformat as nbf

    nb = nbf.read(str(ROOT / "solutions" / "09_gpt" / "09_gpt.ipynb"), 4)
    source = next(c.source for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "gpt_block")
    source = source.replace(
        "out, weights = scaled_dot_product_attention(Q, K, V, mask)",
        "out = torch.nn.functional.scaled_dot_product_attention(Q, K, V, attn_mask=mask)\n"
        "        weights = None",
    )
    found = _verdicts(solution_with(tmp_path, "09_gpt", gpt_block=source), "09_gpt", runner=forked)
    assert not found["test_gpt_block"].agrees and "GPTBlock ran aten::_s" in found["test_gpt_block"].reason
    assert found["test_generate"].agrees  # generate does not forbid attention


MHA_WEIGHTS = """import math, torch
import torch.nn.functional as F
def scaled_dot_product_attention(Q, K, V, mask=None):
    d = Q.shape[-1]
    eye, zero = torch.eye(d), torch.zeros(3 * d)
    q = Q.reshape(-1, 1, d)
    F.multi_head_attention_forward(q, q, q, d, 1, torch.cat([eye] * 3), zero, None, None, False, 0.0, eye, zero[:d],
                                   training=False)
    scores = Q @ K.transpose(-2, -1) / math.sqrt(d)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = softmax(scores, dim=-1)
    return weights @ V, weights
"""


def test_attention_through_a_multihead_layers_weights(tmp_path):
    # softmax and matrix products only, as honest attention runs them: seen by its Python code
    path = solution_with(tmp_path, "03_attention", scaled_dot_product_attention=MHA_WEIGHTS)
    verdict = _verdicts(path, "03_attention", runner=forked)["test_scaled_dot_product_attention"]
    assert not verdict.agrees, verdict.reason
    assert (
        "ran python::multi_head_attention_forward on fresh input 1 (cell scaled_dot_product_attention, line 7)"
        in verdict.reason
    ), verdict.reason


def test_replacing_a_functions_code_is_an_escape(tmp_path):
    source = (
        "import torch\nimport torch.nn.functional as F\ndef softmax(x, dim=-1):\n"
        "    F.multi_head_attention_forward.__code__ = (lambda *a, **k: None).__code__\n" + BY_HAND
    )
    verdict = _verdicts(
        solution_with(tmp_path, "03_attention", softmax=source), "03_attention", runner=forked
    )["test_softmax"]
    assert "a function's code replaced (cell softmax, line 4)" in verdict.reason, verdict.reason


def test_a_thread_left_running_is_seen_after_the_calls(tmp_path):
    # each call asks the thread for a built-in softmax after it, and the next call waits for it:
    # the thread's work lands between the calls whatever the machine's load
    source = (
        "import threading, time, torch\nASKED = []\n"
        "def _spin():\n    served = 0\n    while True:\n"
        "        if len(ASKED) > served:\n"
        "            torch.softmax(torch.ones(2), 0)\n            ASKED[served].set()\n"
        "            served += 1\n        time.sleep(0.001)\n"
        "threading.Thread(target=_spin, daemon=True).start()\n"
        "def softmax(x, dim=-1):\n    for asked in list(ASKED):\n        asked.wait(5)\n"
        "    ASKED.append(threading.Event())\n"
        "    e = (x - x.amax(dim, keepdim=True)).exp()\n"
        "    return e / e.sum(dim, keepdim=True)\n"
    )
    verdict = _verdicts(
        solution_with(tmp_path, "03_attention", softmax=source), "03_attention", runner=forked
    )["test_softmax"]
    assert not verdict.agrees and "aten::_softmax" in verdict.reason, verdict.reason


def test_evidence_reads_a_record_line_by_line():
    calls = {"test_softmax": ("softmax", 2), "test_causal_mask": ("causal_mask", 1)}
    honest = (
        b"op aten::_softmax -\nbegin test_softmax 0\nend test_softmax 0\nbegin test_softmax 1\n"
        b"end test_softmax 1\nbegin test_causal_mask 0\nop aten::_softmax cell+c,+line+2\nend test_causal_mask 0\ndone\n"
    )
    assert evidence.findings(honest, calls, "") == {"test_softmax": "", "test_causal_mask": ""}
    cut = honest[: honest.index(b"begin test_causal_mask")]
    assert evidence.findings(cut, calls, "")["test_causal_mask"].startswith(evidence.MISSING)
    assert "no end" in evidence.findings(honest[:-5], calls, "")["test_softmax"]
    assert "never writes" in evidence.findings(honest + b"garbage\n", calls, "")["test_softmax"]
    assert "never writes" in evidence.findings(honest + b"done\n", calls, "")["test_softmax"]
    stray = honest.replace(
        b"begin test_softmax 1\n", b"op aten::_softmax.out cell+t,+line+9\nbegin test_softmax 1\n"
    )
    assert (
        "_softmax.out (cell t, line 9) ran outside the audited calls"
        in evidence.findings(stray, calls, "")["test_softmax"]
    )
    assert (
        "never writes"
        in evidence.findings(honest.replace(b"_softmax -", b"_softmax"), calls, "")["test_softmax"]
    )


@pytest.mark.slow
@pytest.mark.skipif(not bubblewrap.available()[0], reason="needs bubblewrap")
def test_in_the_sandbox(tmp_path):
    path = solution_with(
        tmp_path,
        "03_attention",
        softmax=NATIVE_THREAD,
        causal_mask=RECORD_RESET.replace(
            "def softmax(x, dim=-1):\n    return torch.softmax(x, dim)\n",
            "def causal_mask(size, device=None):\n    return torch.ones(size, size).softmax(0) > 0\n",
        ),
    )
    found = _verdicts(path, "03_attention")
    assert "import:_ctypes (cell softmax, line 2)" in found["test_softmax"].reason
    plain = solution_with(tmp_path, "03_attention", softmax=SOFTMAX_WITH.format("torch.softmax(x, dim)"))
    found = _verdicts(plain, "03_attention")
    assert "softmax ran aten::_softmax" in found["test_softmax"].reason
    assert found["test_causal_mask"].agrees and found["test_scaled_dot_product_attention"].agrees


# -- the operators each forbidden built-in reaches, derived by running it --------------------------
GENERAL = {
    "exp",
    "sum",
    "amax",
    "max",
    "mm",
    "bmm",
    "matmul",
    "div",
    "mul",
    "add",
    "sub",
    "where",
    "masked_fill",
    "transpose",
    "view",
    "reshape",
    "empty",
    "empty_like",
    "copy_",
    "_to_copy",
    "_unsafe_view",
    "tanh",
    "scatter_",
    "aminmax",
    "linalg_vector_norm",
    "clamp_min",
    "index_select",
    "index",
    "_local_scalar_dense",
}


def test_every_forbidden_built_in_is_probed():
    from course_grading.audit import derive, forbidden

    named = {b for builtins, _ in forbidden._checks().values() for b in builtins}
    assert named <= set(derive._probes()), sorted(named - set(derive._probes()))
    for builtins, _ in forbidden._checks().values():  # an elementary group is forbidden whole or not at all
        assert all(set(g) <= set(builtins) or not set(g) & set(builtins) for g in derive.ELEMENTARY.values())


def test_derived_operators_are_the_built_ins_own():
    from course_grading.audit import derive, forbidden

    _, honest = derive._reached_by()
    recorded = derive.recorded()
    assert not recorded & ({derive.base(op) for op in honest} | GENERAL), sorted(recorded)
    assert all(
        op.startswith("_") or op in derive.own_names(derive._probes()) or op in derive.PYTHON
        for op in recorded
    )
    for function, (builtins, _) in forbidden._checks().items():
        derived = derive.specific(builtins, derive.allowed_for(builtins))
        assert derived <= recorded and set(derived) <= set(forbidden.forbidden_ops(function)), function
        assert not derive.uncovered(builtins, derive.allowed_for(builtins)), function
    assert {"_softmax", "_log_softmax"} <= derive.specific(derive.SOFTMAX)
    assert "_softmax" not in derive.specific(
        ["torch.nn.functional.scaled_dot_product_attention"],
        derive.allowed_for(["torch.nn.functional.scaled_dot_product_attention"]),
    )


def test_derived_operators_are_kept_for_the_next_process(tmp_path, monkeypatch):
    """What a grading worker reads from the cache is what running the probes finds; a file
    that is garbled, or left by another version of the probes, is never read."""
    from course_grading.audit import derive

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = derive.cache_file()
    assert path.is_relative_to(tmp_path) and not path.exists()
    fresh = derive.run_probes()
    derive._reached_by.cache_clear()
    try:
        assert derive._reached_by() == fresh and path.is_file()  # run once, then written
        derive._reached_by.cache_clear()
        assert derive._reached_by() == fresh  # read back, the same
        path.write_text('{"found": {"torch.softmax": [[]]}, "honest": 7}', encoding="utf-8")
        derive._reached_by.cache_clear()
        assert derive._reached_by() == fresh  # garbled: the probes run again
        monkeypatch.setattr(derive, "__file__", str(tmp_path / "other.py"))
        (tmp_path / "other.py").write_text("# other probes\n", encoding="utf-8")
        assert derive.cache_file() != path  # another source: another file
    finally:
        derive._reached_by.cache_clear()


def test_the_child_records_every_operator_of_every_exercise():
    from course_grading.audit import derive, forbidden

    recorded = forbidden.recorded_ops()
    for function in forbidden._checks():
        for pattern in forbidden.forbidden_ops(function):  # a Python function's: its code records it
            assert any(forbidden.matches(op, [pattern]) for op in recorded) or pattern in derive.PYTHON, (
                function,
                pattern,
            )
