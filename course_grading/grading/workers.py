"""Worker processes that know which task each of them holds: a death costs only its own task.

``concurrent.futures.ProcessPoolExecutor`` breaks wholesale when one of its workers dies (the
kernel's OOM killer, a signal) and cannot say which task killed it: every task still running
or queued fails with it. ``run`` is the small dispatcher used instead. Each worker is one
``multiprocessing`` process with a pipe of its own; the dispatcher gives a task only to a
worker that is idle, and watches every pipe and every process sentinel
(``multiprocessing.connection.wait``). When a worker ends while it holds a task, that task
alone gets a ``WorkerDied`` outcome (how it ended: signal or exit code), a fresh worker takes
its place, and every other task is graded as if nothing had happened.

Which task killed a worker is never in doubt (one task per worker at a time), but why may be:
a worker killed for going over its own memory bound died of its task, and that task fails at
once; a worker killed from outside (the machine's OOM killer choosing among all processes,
an operator's signal) may have died of another process's doing, so its task is tried again,
once (``retries``), on a fresh worker before it fails.

Each worker's own memory is bounded (``memory_mb``): a memory cgroup of its own where the
machine allows (v1, made beside its sandboxes' cgroups by ``sandbox.bubblewrap.Cgroups``; the
kernel's OOM killer then ends that worker alone), else an ``RLIMIT_DATA`` backstop well above
the bound and the dispatcher's own watch of the worker's resident memory (killed when over it).
The sandboxes a worker starts lift the rlimit and leave its cgroup: the bound is for what the
grading process itself does, the kernels have their own (an unsandboxed kernel, ``--no-sandbox``,
stays within its worker's bound).

Ctrl-C: workers ignore SIGINT (a terminal sends it to the whole process group); the
dispatcher, interrupted, stops them with SIGTERM, which they turn into ``SystemExit`` so
that their clean-up runs (kernels, warm sandboxes), then SIGKILL after a grace period.
"""

from __future__ import annotations

import collections
import multiprocessing
import multiprocessing.connection
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass
from typing import Callable

STOP_GRACE_S = 10  # how long stopped workers get to clean up before SIGKILL
WATCH_S = 0.25  # how often the resident memory of workers without a cgroup is looked at
FAILED_STARTS = 3  # consecutive workers dying before they are ready: no worker can start here


@dataclass(frozen=True)
class WorkerDied:
    """The outcome of a task whose worker ended while it held it (or before any worker could
    start to take it)."""

    exitcode: int | None
    tries: int = 1
    over_memory: bool = False  # it went over its memory bound (``memory_mb``)
    memory_mb: int = 0
    at_start: bool = False  # no worker could start (each died before it was ready)

    def __str__(self) -> str:
        how = ended(self.exitcode)
        if self.at_start:
            return f"no worker could start ({how} before it was ready)"
        if self.over_memory:
            return f"the worker grading it went over its memory bound of {self.memory_mb} MB ({how})"
        again = f", {self.tries} times" if self.tries > 1 else ""
        return f"the worker grading it died ({how}{again})"


@dataclass(frozen=True)
class TaskRaised:
    """The outcome of a task whose function raised, or whose result could not be sent back."""

    message: str

    def __str__(self) -> str:
        return self.message


def ended(exitcode: int | None) -> str:
    """How a process ended, in words: its signal, or its exit code."""
    if exitcode is None:
        return "no exit status"
    if exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exit code {exitcode}"


def start_fork_server(preload: tuple[str, ...]):
    """Workers come from a fresh fork server, never from a fork of the calling process; this
    starts it (once: later calls find it running) and returns its multiprocessing context, or
    None where there is none (workers are then spawned).

    A forked copy of a process that has already run torch (its OpenMP thread pool) can hang
    on its first tensor operation: seen when grading from inside a test run. The server
    imports the modules of ``preload`` once (importing torch runs no operation and starts no
    thread pool), so workers start without importing them again. Starting the server
    returns at once, before it has imported ``preload``: a command that knows it will grade in
    workers starts it first thing, so that those imports run beside its own
    (``cli._start_early``). It is started in ``/`` with no current directory on its path
    (``installed.safe_start``)."""
    if sys.platform != "linux":
        return None
    import multiprocessing.forkserver

    from course_grading.sandbox import installed

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(preload))
    with installed.safe_start():
        multiprocessing.forkserver.ensure_running()
    return context


def run(
    function: Callable,
    tasks: list[tuple],
    jobs: int,
    on_result: Callable,
    *,
    context=None,
    initializer: Callable | None = None,
    initargs: tuple = (),
    memory_mb: int = 0,
    retries: int = 1,
) -> None:
    """Call ``function(*task)`` for every task in ``jobs`` worker processes (made by
    ``context``, each running ``initializer(*initargs)`` first), and ``on_result(index,
    outcome)`` here as each ends: the function's return value, ``TaskRaised`` or
    ``WorkerDied``. Every task gets exactly one outcome; the call returns when all have."""
    context = context or multiprocessing.get_context()
    pending = collections.deque(range(len(tasks)))
    tries = collections.Counter()
    workers: list[_Worker] = []
    failed_starts = 0
    busy = lambda: sum(w.task is not None for w in workers)  # noqa: E731 - a one-line helper of this loop
    try:
        while pending or busy():
            while len(workers) < min(jobs, len(pending) + busy()):
                workers.append(_Worker(context, function, initializer, initargs, memory_mb))
            for worker in workers:
                if worker.ready and worker.task is None and pending:
                    worker.give(pending.popleft(), tasks)
            watching = [w for w in workers if w.watch_rss]
            ready = multiprocessing.connection.wait(
                [w.conn for w in workers] + [w.process.sentinel for w in workers],
                timeout=WATCH_S if watching else None,
            )
            for worker in watching:
                worker.check_memory()
            for worker in list(workers):
                if worker.conn not in ready and worker.process.sentinel not in ready:
                    continue
                was_ready = worker.ready
                for index, outcome in worker.receive():
                    on_result(index, outcome)
                if worker.ready and not was_ready:
                    failed_starts = 0  # workers can start here
                if worker.alive():
                    continue
                workers.remove(worker)
                exitcode, over_memory = worker.close()
                if not worker.ready:
                    failed_starts += 1
                    if failed_starts >= FAILED_STARTS:  # nothing can run: each task says why
                        while pending:
                            on_result(pending.popleft(), WorkerDied(exitcode, at_start=True))
                    continue
                if worker.task is None:
                    continue
                index = worker.task
                tries[index] += 1
                if over_memory or tries[index] > retries:
                    on_result(index, WorkerDied(exitcode, tries[index], over_memory, memory_mb))
                else:
                    pending.appendleft(index)  # on another worker, before the others
    finally:
        _stop(workers)


def _stop(workers: list["_Worker"]) -> None:
    """End every worker: idle ones are told to stop, busy ones get SIGTERM (their clean-up
    runs), any still there after ``STOP_GRACE_S`` gets SIGKILL; their cgroups are removed."""
    for worker in workers:
        worker.stop()
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and any(w.process.is_alive() for w in workers):
        multiprocessing.connection.wait(
            [w.process.sentinel for w in workers if w.process.is_alive()], timeout=1
        )
        for worker in workers:  # again: a SystemExit raised where Python ignores it (a
            if worker.task is not None:  # finalizer, a weakref callback) is lost
                worker.terminate()
    for worker in workers:
        if worker.process.is_alive():
            worker.process.kill()
            worker.process.join(5)
        worker.close()


class _Worker:
    """One worker process, its pipe, its memory bound and the task it holds."""

    def __init__(self, context, function, initializer, initargs, memory_mb: int):
        self.memory_mb = memory_mb
        self.group = _memory_group(memory_mb)
        self.watch_rss = bool(memory_mb) and self.group is None
        self.over_memory = False
        self.ready = False
        self.task: int | None = None
        self.conn, child = context.Pipe()
        spec = {
            "cgroup": str(self.group.memory_path) if self.group else None,
            "data_bytes": _backstop_mb(memory_mb) << 20 if self.watch_rss else 0,
        }
        self.process = context.Process(
            target=_worker_main,
            name="course-grading-worker",
            args=(child, function, initializer, initargs, spec),
        )
        try:
            self.process.start()
        except BaseException:
            self.conn.close()
            if self.group:
                self.group.remove()
            raise
        finally:
            child.close()

    def give(self, index: int, tasks: list[tuple]) -> None:
        self.task = index
        try:
            self.conn.send((index, tasks[index]))
        except OSError:  # it died meanwhile: its sentinel says so next
            pass

    def receive(self) -> list[tuple[int, object]]:
        """What the worker has sent: readiness, and outcomes of the task it held."""
        done = []
        try:
            while self.conn.poll():
                message = self.conn.recv()
                if message == "ready":
                    self.ready = True
                else:
                    index, outcome = message
                    if index == self.task:
                        self.task = None
                        done.append((index, outcome))
        except (EOFError, OSError):
            pass  # it ended: ``alive`` says so
        return done

    def alive(self) -> bool:
        if self.process.is_alive():
            return True
        self.process.join()
        return False

    def check_memory(self) -> None:
        """Without a cgroup: kill the worker when its resident memory is over its bound."""
        if self.task is None or self.over_memory:
            return
        if _resident_mb(self.process.pid) > self.memory_mb:
            self.over_memory = True
            try:
                self.process.kill()
            except OSError:
                pass

    def stop(self) -> None:
        if self.task is None and self.process.is_alive():
            try:
                self.conn.send(None)
                return
            except OSError:
                pass
        self.task = self.task if self.task is not None else -1  # busy now: stopped by signal
        self.terminate()

    def terminate(self) -> None:
        if self.process.is_alive():
            try:
                self.process.terminate()
            except OSError:
                pass

    def close(self) -> tuple[int | None, bool]:
        """Its exit code and whether it went over its memory bound; its pipe and cgroup gone
        (what it left in its cgroup is killed)."""
        from course_grading.sandbox.bubblewrap import Cgroups

        self.process.join(0)
        over = self.over_memory or (self.group is not None and self.group.oom_kills() > 0)
        if self.group is not None:
            self.group.remove()
            self.group = None
        if self.process.exitcode is not None:  # ended: what its sandboxes left (it was killed)
            Cgroups.left_by(self.process.pid).remove()
        self.conn.close()
        return self.process.exitcode, over


def _memory_group(memory_mb: int):
    """A fresh memory cgroup bounding one worker to ``memory_mb``, or None (no bound asked
    for, or none can be made here)."""
    if not memory_mb:
        return None
    from course_grading.sandbox.bubblewrap import GRADER_GROUP, Cgroups

    group = Cgroups(files={"memory": {"memory.limit_in_bytes": str(memory_mb << 20)}}, prefix=GRADER_GROUP)
    if group.memory:
        return group
    group.remove()
    return None


def _backstop_mb(memory_mb: int) -> int:
    """Without a cgroup, ``RLIMIT_DATA`` stops what the watch of resident memory is too slow
    to see (an allocation at once); above the bound, as it counts what is not resident too."""
    return 2 * memory_mb + 1024


def _resident_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0.0


def _worker_main(conn, function, initializer, initargs, spec: dict) -> None:
    """A worker: its memory bound, its start-up, then tasks until told to stop."""
    signal.signal(signal.SIGINT, _ignore)  # a Python handler: the kernels it execs get the default
    signal.signal(signal.SIGTERM, _exit)
    sys.unraisablehook = _quiet_stop(sys.unraisablehook)
    if spec.get("cgroup"):
        with open(os.path.join(spec["cgroup"], "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    if spec.get("data_bytes"):  # the soft limit: the sandboxes it starts lift it again
        resource.setrlimit(
            resource.RLIMIT_DATA, (spec["data_bytes"], resource.getrlimit(resource.RLIMIT_DATA)[1])
        )
    if initializer is not None:
        initializer(*initargs)
    conn.send("ready")
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the dispatcher is gone
        if message is None:
            return
        index, args = message
        try:
            outcome = function(*args)
        except Exception as exc:  # noqa: BLE001 - the task's outcome, not the worker's end
            outcome = TaskRaised(f"{type(exc).__name__}: {exc}"[:2000])
        try:
            conn.send((index, outcome))
        except (EOFError, OSError):
            return
        except Exception as exc:  # noqa: BLE001 - an outcome that cannot be pickled
            why = f"its result could not be sent back: {type(exc).__name__}: {exc}"
            conn.send((index, TaskRaised(why[:2000])))  # nothing of the first was sent


def _ignore(signum, frame) -> None:
    pass


def _exit(signum, frame) -> None:
    raise SystemExit(128 + signum)


def _quiet_stop(hook):
    """A stop (``_exit``) raised where Python ignores exceptions (a finalizer, a weakref
    callback) is lost, and sent again by the dispatcher: nothing to report."""

    def quiet(unraisable):
        if not isinstance(unraisable.exc_value, SystemExit):
            hook(unraisable)

    return quiet
