"""What the checks rely on, taken before the learner's code can change it, and the proof, at
every check, that it is still in place.

A check decides with library functions (``torch.equal``, ``np.allclose``, a tensor's ``==``,
``.all()``, ``.item()``) that the learner's code could reach and replace: ``import torch as t;
t.equal = lambda *a: True``, ``vars(torch)['equal'] = ...``, ``np.testing.assert_allclose =
...``, a function's ``__code__`` swapped, ``torch.Tensor.__eq__`` patched, a torch function mode
left entered. :func:`take` records, once per process and as early as possible, every function,
class and module of the namespaces the checks use (and of the checks themselves); :func:`changed`
names the first of them that is no longer what was recorded. Under grading the kernel takes
the record before the notebook's first cell (``course_grading.checks._common`` is loaded as a
kernel extension, and the warm sandbox has imported all of this before it forks the kernel);
elsewhere it is taken when the checks are first imported (the setup cell), and a library's
namespaces once it is imported (a NumPy-only notebook does not pay for importing torch).

The same goes for threads. What a check records while the learner's code runs (the names and
the torch operators it calls) is seen on the thread that runs the check; work handed to another
thread that already exists (a thread pool, a ``threading.Timer``, a thread started by an
imported module) would not be. :func:`foreign_threads` names every live Python thread other
than the one running the check and the kernel's own (recorded when the kernel started, or,
outside grading, when the setup cell ran); a check refuses to grade while there is one. The
kernel's threads that run an event loop (IOPub, control, shell channel) could be handed work
too: :func:`watch_kernel_threads` installs the recording on them, through their own loops,
before the first cell; whatever would take it off again is seen by the recording itself as it
is called, and every later check refuses to grade.

How a namespace is recorded and compared is ``_record``'s; the watch on the kernel's threads is
``_watch``'s. This module says what is recorded and when, and holds the threads' record.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
import types

# The record's own references: a learner's change to builtins, operator, types, sys or threading
# cannot blind the look that would find it.
from builtins import any, dict, getattr, id, len, list, set, sorted, tuple, type  # noqa: A004 - the record binds the builtins it uses

from . import _record, _watch
from ._record import _LIBRARY_ROOTS, _names_only, _Seal
from ._watch import WATCH, _cpu, watch_history_thread, watch_kernel_threads, watch_relay_threads

_ModuleType = types.ModuleType
_modules = sys.modules
_current_frames = sys._current_frames
_enumerate_threads = threading.enumerate
_get_ident = threading.get_ident
_monotonic, _sleep = time.monotonic, time.sleep
_getpid, _listdir, _os_open, _os_read, _os_close = os.getpid, os.listdir, os.open, os.read, os.close


# The namespaces the checks (visible and hidden) and what they call use. Each is recorded with
# its functions, classes and modules; the classes defined in them with their whole __dict__.
LIBRARY_MODULES = (
    "torch",
    "torch.nn",
    "torch.nn.functional",
    "torch.nn.init",
    "torch.linalg",
    "torch.random",
    "torch.functional",
    "torch._tensor",
    "torch.overrides",
    "torch.autograd",
    "torch.autograd.grad_mode",
    "torch.utils._python_dispatch",
    "torch.nn.modules.module",
    "torch.nn.parameter",
    "torch._C._nn",
    "torch.testing",
    "numpy",
    "numpy.linalg",
    "numpy.testing",
    "numpy.random",
    "numpy.lib",
    "numpy._core.numeric",
    "numpy._core.fromnumeric",
    "numpy._core.multiarray",
    "numpy._core.umath",
    "numpy._core._methods",
    "numpy._core.numerictypes",
    "numpy._core.shape_base",
    "numpy._core.function_base",
    "numpy._core._ufunc_config",
    "numpy.lib._function_base_impl",
    "numpy.lib._arraysetops_impl",
    "numpy.lib._npyio_impl",
    "numpy.lib._shape_base_impl",
    "numpy.lib._twodim_base_impl",
    "numpy.linalg._linalg",
    "numpy.testing._private.utils",
    "math",
    "operator",
    "functools",
    "contextlib",
    "io",
    "os",
    "time",
    "threading",
    "_thread",
    "inspect",
    "types",
    "traceback",
    "importlib",
    "copy",
    # what the kernel's own threads that run no event loop call (work handed to them by
    # replacing what they call would run beyond the recording's sight)
    "ipykernel.iostream",
    "ipykernel.parentpoller",
    "ipykernel.heartbeat",
    "IPython.core.history",
    "zmq.utils.garbage",
)
# The course's own checks: every value, containers by their contents too.
COURSE_PACKAGES = ("course_utils.checks",)
# The seal's own modules: their tools are recorded, not their state (it changes as they work).
_TOOLS_ONLY = (__name__, _record.__name__, _watch.__name__)


_SEAL: _Seal | None = None
_LOCK = threading.RLock()


def take() -> None:
    """Record the namespaces (once per process: the first record of each is the one that
    counts). A library not imported yet is recorded once it is (a NumPy-only notebook does not
    pay for importing torch); a grading kernel imports them all first (``load_libraries``)."""
    global _SEAL
    with _LOCK:
        if _SEAL is None:
            seal = _Seal()
            seal.add_builtins()
            _SEAL = seal
            _take_threads()
        _protect_late(_SEAL)


def load_libraries() -> None:
    """Import the libraries the checks use, and what torch imports the first time a check
    records its operators, so that all of it is recorded before any learner code runs."""
    for root in _LIBRARY_ROOTS:
        importlib.import_module(root)
    take()


def _protect_late(seal: _Seal) -> None:
    """Record the library namespaces and the checks' modules imported since (each once it has
    finished importing)."""
    if len(_modules) == seal.modules_seen and not seal.pending:
        return
    seal.pending = False
    roots = {name.split(".")[0] for name in LIBRARY_MODULES}
    for root in sorted(roots, key=lambda r: (r != "torch", r)):
        if root in _modules and root not in seal.modules:
            if root == "torch":
                _warm_torch()  # what it wraps the first time a check records: before the record
                seal.retake_standard_library()  # importing torch changes some (inspect.getfile)
            for name in LIBRARY_MODULES:
                if name.split(".")[0] == root:
                    if name not in _modules:
                        try:
                            importlib.import_module(name)
                        except ImportError:
                            continue
                    seal.add_module(name)
    _protect_course_modules(seal)
    seal.modules_seen = len(_modules)


def original(module: str, name: str):
    """``module.name`` as recorded (recording ``module`` now if it had not been imported)."""
    take()
    record = _SEAL.by_label.get(module)
    if record is None or name not in record.entries:
        raise LookupError(f"{module}.{name} was not recorded")
    return record.entries[name][0]


def _warm_torch() -> None:
    """What torch imports (and wraps) the first time an operator runs under a dispatch mode, as
    every recording check does: done before the record, so that it is part of it."""
    try:
        import torch
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:  # pragma: no cover
        return

    class _Warm(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    with _Warm():
        torch.zeros(1).add(1)


def protect(*modules: _ModuleType) -> None:
    """Record these modules too (the hidden checks, when the kernel loads them at its start):
    every value they hold, containers by their contents."""
    take()
    with _LOCK:
        for module in modules:
            _SEAL.add_module(module.__name__, everything=module.__name__ not in _TOOLS_ONLY)


def _protect_course_modules(seal: _Seal) -> None:
    for name, module in list(_modules.items()):
        if type(name) is not str:  # not a module's name (changed() says so): never compared
            continue
        if (
            module is None
            or id(module) in seal.covered
            or not any(name == p or name.startswith(p + ".") for p in COURSE_PACKAGES)
        ):
            continue
        if getattr(getattr(module, "__spec__", None), "_initializing", False):
            seal.pending = True
            continue
        seal.add_module(name, everything=name not in _TOOLS_ONLY)  # the seal's: its tools


def _module_names_only() -> bool:
    """Whether every key of ``sys.modules`` is a ``str`` (no subclass), looked at without
    hashing or comparing any of them: a key of a class of the learner's would run its
    ``__eq__`` or ``__hash__`` in any lookup that meets it, the checks' own included (``"torch"
    in sys.modules``), outside any recording."""
    try:
        return _names_only(_modules)
    except RuntimeError:  # it changed size while looked at: another thread
        return False


def changed() -> str | None:
    """What is no longer as recorded (``"torch.equal is not what it was"``), or a torch mode
    left entered; None when all is in place. ``sys.modules`` first, before any lookup in it."""
    if not _module_names_only():
        return "sys.modules (a key that is not a module's name was added) is not what it was"
    take()
    found = _SEAL.first_change()
    if found:
        return found
    torch = _modules.get("torch")
    if torch is not None:
        if torch._C._len_torch_function_stack():
            return "a torch function mode was left entered"
        if torch._C._len_torch_dispatch_stack():
            return "a torch dispatch mode was left entered"
        if not torch._C._is_torch_function_enabled():
            return "torch functions were switched off (DisableTorchFunction)"
    return None


# --------------------------------------------------------------------------- threads

_OWN_THREADS: dict[int, str] = {}
_KERNEL_THREADS_FIXED = False
_LATE: list = []  # the kernel's own threads started after the record (its parent poller)
_IDLE: dict[int, str] = {}  # the kernel's threads that run Python code only when handed work


def idle_threads_now(settle: float = 0.001, patience: float = 0.25) -> dict[int, int | None]:
    """CPU time of each of the kernel's idle threads, taken once they are quiet (two looks
    ``settle`` seconds apart agree; at most ``patience`` seconds of waiting)."""
    if not _IDLE:
        return {}
    deadline = _monotonic() + patience
    now = {ident: _cpu(ident) for ident in _IDLE}
    while True:
        _sleep(settle)
        again = {ident: _cpu(ident) for ident in _IDLE}
        if again == now or _monotonic() > deadline:
            return again
        now = again


def ran_meanwhile(before: dict[int, int | None]) -> list[str]:
    """The kernel's idle threads that ran since ``before`` (from :func:`idle_threads_now`)."""
    return [_IDLE[ident] for ident, cpu in before.items() if _cpu(ident) != cpu]


def _live_threads() -> dict[int, str]:
    """ident -> name of every thread that runs Python code now, or that threading knows."""
    found = {t.ident: t.name for t in _enumerate_threads() if t.ident is not None}
    for ident in _current_frames():
        found.setdefault(ident, f"thread {ident}")
    return found


def _take_threads() -> None:
    _OWN_THREADS.clear()
    _OWN_THREADS.update(_live_threads())
    _OWN_PROCESSES.clear()
    _OWN_PROCESSES.update(_descendants())


# The same for processes: work handed to a process forked before the check (through a pipe, a
# socket, shared memory) runs beyond any recording of this one. A check refuses to grade while
# a process descended from the kernel lives that was not there when the threads were taken.
_OWN_PROCESSES: set[int] = set()
PR_SET_CHILD_SUBREAPER = 36


def _descendants() -> dict[int, str]:
    """pid -> name of every live (not zombie) process descended from this one, read from /proc
    (nothing where there is none)."""
    me = _getpid()
    try:
        entries = _listdir("/proc")
    except OSError:
        return {}
    parents: dict[int, tuple[int, str]] = {}
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            fd = _os_open(f"/proc/{entry}/stat", os.O_RDONLY)
            try:
                data = _os_read(fd, 4096)
            finally:
                _os_close(fd)
        except OSError:  # ended meanwhile
            continue
        close = data.rfind(b")")
        fields = data[close + 2 :].split()
        if close < 0 or len(fields) < 2 or fields[0] in (b"Z", b"X"):
            continue
        parents[int(entry)] = (int(fields[1]), data[data.find(b"(") + 1 : close].decode("utf-8", "replace"))
    found: dict[int, str] = {}
    frontier = {me}
    while frontier:
        frontier = {pid for pid, (ppid, _) in parents.items() if ppid in frontier and pid not in found}
        for pid in frontier:
            found[pid] = parents[pid][1]
    return found


def foreign_processes() -> list[str]:
    """The live processes descended from this one that were not there when its own threads
    were taken ("process 123 (python)")."""
    return sorted(
        f"process {pid} ({name})" for pid, name in _descendants().items() if pid not in _OWN_PROCESSES
    )


def _adopt_orphans() -> None:
    """Under grading: become the subreaper of what this kernel starts (Linux), so that a process
    forked twice, whose parent ended, is still this kernel's descendant and seen."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def own_threads_now() -> None:
    """Outside grading (the learner's Jupyter, tests run in one process): the threads alive when
    the setup cell runs are the kernel's own. Under grading they were fixed at the kernel's
    start, before any cell, and stay so."""
    if not _KERNEL_THREADS_FIXED:
        take()
        if "zmq" in _modules:  # in a kernel: what it would start later is started now
            _zmq_garbage_collector()
        _take_threads()


def foreign_threads() -> list[str]:
    """Names of the live Python threads that are neither the one asking nor the kernel's own."""
    me = _get_ident()
    for thread in list(_LATE):
        if thread.ident is not None:  # started since: its first ident is the one that counts
            _OWN_THREADS.setdefault(thread.ident, thread.name)
            _LATE.remove(thread)
    found = [
        (ident, name) for ident, name in _live_threads().items() if ident != me and ident not in _OWN_THREADS
    ]
    if found and not _KERNEL_THREADS_FIXED:
        # outside grading (the learner's Jupyter, tests in one process), a library's own
        # machinery started since the setup cell (IPython's history, pyzmq's collector) is let be
        threads = {t.ident: t for t in _enumerate_threads()}
        found = [(ident, name) for ident, name in found if not _library_thread(threads.get(ident))]
    return sorted(name for _, name in found)


# Threads that run whatever they are handed: never a library's own machinery.
_GENERIC = (
    "concurrent" + os.sep + "futures",
    os.sep + "threading.py",
    os.sep + "asyncio" + os.sep,
    os.sep + "multiprocessing" + os.sep,
    os.sep + "sched.py",
    os.sep + "socketserver.py",
    os.sep + "queue.py",
)
_LIBRARY_FOLDERS = tuple(
    {
        os.path.dirname(os.__file__) + os.sep,
        os.path.dirname(os.path.dirname(os.path.dirname(threading.__file__))) + os.sep,
    }
    | {
        os.path.dirname(os.path.dirname(getattr(_modules.get(m), "__file__", "") or "")) + os.sep
        for m in ("IPython", "zmq", "ipykernel", "torch", "numpy")
        if getattr(_modules.get(m), "__file__", None)
    }
)


def _library_thread(thread) -> bool:
    """Whether ``thread`` runs a library's own code (its ``run``, or its target), not a pool,
    a timer or a loop that runs what it is handed, nor the learner's code."""
    if thread is None:
        return False
    code = getattr(getattr(type(thread), "run", None), "__code__", None)
    if code is threading.Thread.run.__code__:
        target = getattr(thread, "_target", None)
        code = getattr(getattr(target, "__func__", target), "__code__", None)
    if code is None:
        return False
    filename = code.co_filename
    return (
        any(filename.startswith(folder) for folder in _LIBRARY_FOLDERS)
        and "site-packages" in filename
        and not any(part in filename for part in _GENERIC)
    )


def kernel_started(app=None) -> None:
    """Under grading, before the notebook's first cell: record everything and the kernel's own
    threads, and watch those that run an event loop."""
    global _KERNEL_THREADS_FIXED
    take()
    if _SEAL is not None:
        _SEAL.at_kernel_start = True
    collector = _zmq_garbage_collector()
    _adopt_orphans()
    _take_threads()
    _KERNEL_THREADS_FIXED = True
    if app is None:
        return
    poller = getattr(app, "poller", None)
    if poller is not None and poller.ident is None:
        _LATE.append(poller)  # the kernel starts it after loading its extensions
    with _LOCK:
        for label, obj in (("the kernel's parent poller", poller), ("zmq's garbage collector", collector)):
            if obj is not None:
                _SEAL.add_object(label, obj)
    watch_kernel_threads(app)
    watch_relay_threads((sys.stdout, sys.stderr))
    watch_history_thread(getattr(getattr(app, "shell", None), "history_manager", None))
    # any other thread of the kernel's that runs Python code (none, in the kernels the course
    # knows): idle unless handed something, a check sees whether it ran while the learner's
    # code did.
    # not these: a C loop; a sleep-and-look loop; one woken by zmq whenever it has sent a large
    # output (possibly while a check runs), that only frees what was sent
    pure = {id(getattr(app, "heartbeat", None)), id(poller), id(getattr(collector, "thread", None))}
    _IDLE.clear()
    for thread in _enumerate_threads():
        if (
            thread.ident in _OWN_THREADS
            and thread.ident not in WATCH.threads
            and thread is not threading.main_thread()
            and id(thread) not in pure
        ):
            _IDLE[thread.ident] = thread.name


def _zmq_garbage_collector():
    """pyzmq's garbage collector, started now: it starts its thread the first time the kernel
    sends a large output without copying it, else in the middle of the notebook."""
    try:
        from zmq.utils.garbage import gc
    except ImportError:  # pragma: no cover - a kernel has pyzmq
        return None
    if not gc.is_alive():
        gc.start()
    return gc
