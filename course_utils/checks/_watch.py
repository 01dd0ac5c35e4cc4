"""The recording on the kernel's own threads (``_seal`` says why).

A profile hook and a torch dispatch mode are installed, before the first cell, on the threads
that run an event loop (IOPub, control, shell channel), on those that relay the output of file
descriptors 1 and 2, and on IPython's history thread, each through what it runs when handed
work. They pass everything
through and report to the check recording at the time (``WATCH.recorder``); whatever would
take them off, start a thread or fork from such a thread is seen as it is called, and
``kernel_threads_unwatched`` then says so for good.
"""

from __future__ import annotations

import os
import sys
import threading
import time

# The record's own references: a learner's change to builtins, operator, types, sys or threading
# cannot blind the look that would find it.
from builtins import dict, frozenset, getattr, isinstance, list  # noqa: A004 - the record binds the builtins it uses

_modules = sys.modules
_get_ident = threading.get_ident
_monotonic, _sleep = time.monotonic, time.sleep
try:
    _clock, _cpu_clock = time.clock_gettime_ns, time.pthread_getcpuclockid
except AttributeError:  # pragma: no cover - not on Linux
    _clock = _cpu_clock = None


def _cpu(ident: int) -> int | None:
    try:
        return _clock(_cpu_clock(ident))
    except (OSError, TypeError, OverflowError):
        return None


# Built-ins that switch a recording off (a profile hook, a torch mode): the watch's and a check's
# (``_recording``).
SWITCHING_OFF = frozenset(
    {
        "setprofile",
        "settrace",
        "setprofile_all_threads",
        "settrace_all_threads",
        "_setprofile",
        "register_callback",
        "set_events",
        "set_local_events",
        "use_tool_id",
        "free_tool_id",
        "_unset_dispatch_mode",
        "_pop_torch_dispatch_mode",
        "_pop_torch_function_stack",
        "_set_torch_function_mode",
        "_push_on_torch_dispatch_stack",
        "_pop_mode",
    }
)
# What would take the recording off a kernel thread, or run work beyond its sight.
UNHOOKING = SWITCHING_OFF | {"start_new_thread", "start_joinable_thread", "fork", "forkpty", "posix_spawn"}


class _Watch:
    """The recording installed on the kernel's own event-loop threads: a profile hook and a
    torch dispatch mode that pass everything through and report to the check recording at the
    time. Whatever would take them off (or start a thread, or fork) from such a thread is seen
    by the hook as it is called, at any time: ``broken`` then says so for good."""

    def __init__(self):
        self.recorder = None  # set by a check while the learner's code runs
        self.threads: dict[int, str] = {}  # ident -> name of the threads it is installed on
        self.broken: str | None = None
        self.hook = self._hook

    def _hook(self, frame, event, arg):
        if event == "c_call" and getattr(arg, "__name__", "") in UNHOOKING and self.broken is None:
            self.broken = f"{arg.__name__} on the kernel's {self.threads.get(_get_ident(), 'own')} thread"
        recorder = self.recorder
        if recorder is not None:
            recorder.observe(frame, event, arg)

    def install(self, name: str, done: threading.Event) -> None:
        """Runs on the kernel thread itself."""
        try:
            if "torch" in _modules:
                mode = _passing_mode(self)
                if mode is not None:
                    mode.__enter__()
            sys.setprofile(self.hook)
            self.threads[_get_ident()] = name
        finally:
            done.set()


def _passing_mode(watch: _Watch):
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:  # pragma: no cover
        return None

    class KernelThreadRecorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            recorder = watch.recorder
            if recorder is not None:
                recorder.observe_op(func)
            return func(*args, **(kwargs or {}))

    return KernelThreadRecorder()


WATCH = _Watch()
WAIT_SECONDS = 10.0


def _kernel_loops(app) -> list:
    """(name, thread, schedule) of the kernel's threads that run an event loop."""
    loops = []
    iopub = getattr(app, "iopub_thread", None)
    if iopub is not None and getattr(iopub, "thread", None) is not None:
        loops.append(("IOPub", iopub.thread, iopub.schedule))
    for attr in ("control_thread", "shell_channel_thread"):
        thread = getattr(app, attr, None)
        loop = getattr(thread, "io_loop", None)
        if thread is not None and loop is not None and thread.is_alive():
            loops.append((thread.name, thread, loop.add_callback))
    return loops


def watch_kernel_threads(app) -> None:
    """Install the recording on the kernel's event-loop threads, through their own loops."""
    for name, thread, schedule in _kernel_loops(app):
        done = threading.Event()
        schedule(lambda name=name, done=done: WATCH.install(name, done))
        if not done.wait(WAIT_SECONDS) or thread.ident not in WATCH.threads:
            WATCH.broken = f"the recording could not be installed on the kernel's {name} thread"


def _quiet_again(thread: threading.Thread, patience: float = 1.0) -> None:
    """Wait until ``thread`` has used no CPU for a few milliseconds (done with what it was
    handed, waiting again)."""
    deadline = _monotonic() + patience
    before = _cpu(thread.ident)
    while _monotonic() < deadline:
        _sleep(0.005)
        now = _cpu(thread.ident)
        if now == before:
            return
        before = now


def watch_relay_threads(streams) -> None:
    """Install the recording on the kernel's threads that relay what is written to the file
    descriptors 1 and 2 (ipykernel's ``OutStream``): each waits for data on its pipe, so it is
    handed one byte, which it passes to the stream's ``write``, here one that installs the
    recording and keeps the byte (its echo goes to /dev/null)."""
    for stream in streams:
        thread = getattr(stream, "watch_fd_thread", None)
        fd = getattr(stream, "_original_stdstream_fd", None)
        space = getattr(stream, "__dict__", None)
        if thread is None or fd is None or not thread.is_alive() or not isinstance(space, dict):
            continue
        done = threading.Event()
        had_write, echo = "write" in space, space.get("_original_stdstream_copy")
        devnull = os.open(os.devnull, os.O_WRONLY)
        space["write"] = lambda data, name=thread.name, done=done: WATCH.install(name, done)
        space["_original_stdstream_copy"] = devnull
        try:
            os.write(fd, b"\n")
            installed = done.wait(WAIT_SECONDS)
            _quiet_again(thread)
        finally:
            if not had_write:
                space.pop("write", None)
            space["_original_stdstream_copy"] = echo
            os.close(devnull)
        if not installed or thread.ident not in WATCH.threads:
            WATCH.broken = f"the recording could not be installed on the kernel's {thread.name} thread"


def watch_history_thread(history) -> None:
    """Install the recording on IPython's thread that saves the history (when there is one):
    it writes the history out when its flag is set, here with a ``writeout_cache`` that
    installs the recording."""
    thread = getattr(history, "save_thread", None)
    space = getattr(history, "__dict__", None)
    if thread is None or not thread.is_alive() or not isinstance(space, dict):
        return
    done = threading.Event()
    space["writeout_cache"] = lambda *args, name=thread.name, done=done: WATCH.install(name, done)
    try:
        thread.save_flag.set()
        installed = done.wait(WAIT_SECONDS)
        _quiet_again(thread)
    finally:
        space.pop("writeout_cache", None)
    if not installed or thread.ident not in WATCH.threads:
        WATCH.broken = f"the recording could not be installed on the kernel's {thread.name} thread"


def kernel_threads_unwatched() -> str | None:
    """Why the kernel's own threads may have run work unseen (None: they cannot have)."""
    return WATCH.broken
