"""torch's threads are sized to the CPUs a kernel may really use: its cgroup's CPU quota (v1 and
v2, read from fake cgroup files here) and its affinity mask, one CPU left to the rest."""

from __future__ import annotations

import os

import pytest
import torch

from course_utils import device


def _v2(tmp_path, quotas: dict, path="/kubepods/pod1/box"):
    """A cgroup v2 tree: ``quotas`` maps a folder (relative to the root) to its cpu.max."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc = tmp_path / "cgroup"
    proc.write_text(f"0::{path}\n")
    root = tmp_path / "fs"
    (root / path.strip("/")).mkdir(parents=True)
    for folder, value in quotas.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "cpu.max").write_text(value + "\n")
    return str(proc), str(root)


def _v1(tmp_path, quota: str, period: str = "100000", controllers="cpu,cpuacct", path="/docker/abc"):
    tmp_path.mkdir(parents=True, exist_ok=True)
    proc = tmp_path / "cgroup"
    proc.write_text(f"12:memory:{path}\n4:{controllers}:{path}\n1:name=systemd:{path}\n")
    folder = tmp_path / "fs" / controllers / path.strip("/")
    folder.mkdir(parents=True)
    (folder / "cpu.cfs_quota_us").write_text(quota + "\n")
    (folder / "cpu.cfs_period_us").write_text(period + "\n")
    return str(proc), str(tmp_path / "fs")


def test_cgroup_v2_quota_and_the_tightest_ancestor(tmp_path):
    proc, root = _v2(tmp_path, {"kubepods/pod1/box": "150000 100000"})
    assert device.cgroup_cpu_limit(proc, root) == pytest.approx(1.5)
    proc, root = _v2(
        tmp_path / "b", {"kubepods/pod1/box": "max 100000", "kubepods/pod1": "50000 100000", "": "max 100000"}
    )
    assert device.cgroup_cpu_limit(proc, root) == pytest.approx(0.5)
    proc, root = _v2(tmp_path / "c", {"kubepods/pod1/box": "max 100000"})
    assert device.cgroup_cpu_limit(proc, root) is None


def test_cgroup_v2_inside_a_container_reads_its_own_root(tmp_path):
    # a cgroup namespace shows "/" and mounts the container's own cgroup at the root
    proc, root = _v2(tmp_path, {"": "300000 100000"}, path="/")
    assert device.cgroup_cpu_limit(proc, root) == pytest.approx(3.0)


def test_cgroup_v1_quota(tmp_path):
    proc, root = _v1(tmp_path, "200000")
    assert device.cgroup_cpu_limit(proc, root) == pytest.approx(2.0)
    proc, root = _v1(tmp_path / "b", "-1")
    assert device.cgroup_cpu_limit(proc, root) is None
    proc, root = _v1(tmp_path / "c", "25000", "100000", controllers="cpu")
    assert device.cgroup_cpu_limit(proc, root) == pytest.approx(0.25)


def test_no_cgroup_information_means_no_limit(tmp_path):
    assert device.cgroup_cpu_limit(str(tmp_path / "missing"), str(tmp_path)) is None
    (tmp_path / "cgroup").write_text("0::/x\n")
    (tmp_path / "fs" / "x").mkdir(parents=True)
    (tmp_path / "fs" / "x" / "cpu.max").write_text("garbage\n")
    assert device.cgroup_cpu_limit(str(tmp_path / "cgroup"), str(tmp_path / "fs")) is None


def test_available_cpus_is_the_affinity_capped_by_the_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    proc, root = _v2(tmp_path, {"kubepods/pod1/box": "250000 100000"})
    assert device.available_cpus(proc, root) == 2  # 2.5 CPUs of quota: 2 whole ones
    proc, root = _v2(tmp_path / "b", {"kubepods/pod1/box": "20000 100000"})
    assert device.available_cpus(proc, root) == 1  # a fifth of a CPU still runs one thread
    assert device.available_cpus(str(tmp_path / "none"), str(tmp_path)) == 16
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3}, raising=False)
    proc, root = _v2(tmp_path / "c", {"kubepods/pod1/box": "400000 100000"})
    assert device.available_cpus(proc, root) == 1  # pinned to one CPU, whatever the quota


def test_threads_leave_one_cpu_and_stay_few():
    assert [device.threads_for(n) for n in (1, 2, 3, 4, 8, 64)] == [1, 1, 2, 3, 4, 4]


def test_use_available_cpus_sets_torch_threads(monkeypatch):
    before = torch.get_num_threads()
    try:
        for name in ("COURSE_NUM_THREADS", "OMP_NUM_THREADS", "NBGRADER_EXECUTION", "COURSE_GRADING"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setattr(device, "available_cpus", lambda *a, **k: 4)
        assert device.use_available_cpus() == 3 and torch.get_num_threads() == 3
        monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # one kernel per core already
        assert device.use_available_cpus() == 1 and torch.get_num_threads() == 1
        monkeypatch.setenv("COURSE_NUM_THREADS", "2")  # set by hand: it wins
        assert device.use_available_cpus() == 2 and torch.get_num_threads() == 2
        monkeypatch.delenv("COURSE_NUM_THREADS")
        monkeypatch.setenv("OMP_NUM_THREADS", "1")  # torch read it itself: left alone
        torch.set_num_threads(2)
        assert device.use_available_cpus() == 2
    finally:
        torch.set_num_threads(before)


# --------------------------------------------------------------------------- work on other threads
# A check records what the learner's code calls on the thread that runs the check. Work handed
# to a thread that already exists would go unseen: the check refuses to grade while such a
# thread lives, and says why.

import os as _os
import queue
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from course_utils.checks import _seal, attention, embeddings
from course_utils.checks._core import CheckFailed

THREAD_MESSAGE = "your code runs work on another thread"


def _softmax(x, dim=-1):
    e = torch.exp(x - x.max(dim=dim, keepdim=True).values)
    return e / e.sum(dim=dim, keepdim=True)


@pytest.fixture
def own_threads():
    """The threads alive now are the process's own (as the setup cell makes them)."""
    _seal.own_threads_now()
    yield
    assert not _seal.foreign_threads(), "a test left a thread running"


def test_a_thread_pool_started_before_the_check(own_threads):
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        pool.submit(lambda: None).result()  # its worker thread exists from here on

        def softmax(x, dim=-1):  # torch.softmax, forbidden, on the pool's thread
            return pool.submit(torch.softmax, x, dim).result()

        with pytest.raises(CheckFailed, match=THREAD_MESSAGE):
            attention.check_softmax(softmax)
        with pytest.raises(CheckFailed, match=THREAD_MESSAGE):  # even when correct
            attention.check_softmax(lambda x, dim=-1: pool.submit(_softmax, x, dim).result())
    finally:
        pool.shutdown()
    attention.check_softmax(_softmax)  # no thread left: graded again


def test_a_timer_started_before_the_check(own_threads):
    work = queue.Queue()

    def serve():
        while (job := work.get()) is not None:
            fn, args, box, done = job
            box.append(fn(*args))
            done.set()

    timer = threading.Timer(0.0, serve)
    timer.start()
    try:

        def one_hot(ids, vocab_size):
            box, done = [], threading.Event()
            work.put(
                (
                    lambda i, v: torch.nn.functional.one_hot(torch.as_tensor(i), v).double().numpy(),
                    (ids, vocab_size),
                    box,
                    done,
                )
            )
            done.wait()
            return box[0]

        with pytest.raises(CheckFailed, match=THREAD_MESSAGE) as info:
            embeddings.check_one_hot(one_hot)
        assert "Thread" in str(info.value)  # names the thread
    finally:
        work.put(None)
        timer.join()


def test_a_process_forked_before_the_check(own_threads):
    """The process sibling of the pool and the timer: a child forked in an earlier cell that
    computes whatever it is sent (here the forbidden F.one_hot) through a pipe. Nothing of it
    runs in this process, so no recording sees it: the check refuses while it lives."""
    import pickle

    jobs_r, jobs_w = _os.pipe()
    back_r, back_w = _os.pipe()
    child = _os.fork()
    if child == 0:  # the helper: no pytest, no check, only the pipe
        try:
            _os.close(jobs_w)
            reader = _os.fdopen(jobs_r, "rb")
            while True:
                try:
                    ids, vocab_size = pickle.load(reader)
                except EOFError:
                    break
                out = torch.nn.functional.one_hot(torch.as_tensor(ids), vocab_size).double().numpy()
                _os.write(back_w, pickle.dumps(out))
        finally:
            _os._exit(0)
    _os.close(jobs_r)
    _os.close(back_w)
    answers = _os.fdopen(back_r, "rb")
    try:

        def one_hot(ids, vocab_size):
            _os.write(jobs_w, pickle.dumps((ids, vocab_size)))
            return pickle.load(answers)

        with pytest.raises(CheckFailed, match="your code started another process") as info:
            embeddings.check_one_hot(one_hot)
        assert f"process {child}" in str(info.value)
        assert one_hot(np.array([1, 0]), 2).tolist() == [[0, 1], [1, 0]]  # it did the work
    finally:
        _os.close(jobs_w)
        _os.waitpid(child, 0)
        answers.close()
    assert not _seal.foreign_processes()
    embeddings.check_one_hot(lambda ids, v: (np.asarray(ids)[..., None] == np.arange(v)).astype(float))


def test_a_thread_started_during_the_call(own_threads):
    def softmax(x, dim=-1):
        box = []
        thread = threading.Thread(target=lambda: box.append(torch.softmax(x, dim)))
        thread.start()
        thread.join()
        return box[0]

    with pytest.raises(CheckFailed, match=THREAD_MESSAGE + r" \(a thread it started\)"):
        attention.check_softmax(softmax)


class _Loop(threading.Thread):
    """A stand-in for one of the kernel's event-loop threads (IOPub, control): runs what it is
    handed, as ``IOPubThread.schedule`` does."""

    def __init__(self):
        super().__init__(daemon=True, name="Loop")
        self.jobs = queue.Queue()

    def run(self):
        while (job := self.jobs.get()) is not None:
            job()

    def schedule(self, job):
        self.jobs.put(job)


@pytest.fixture
def kernel_loop():
    """A watched kernel thread, as the kernel's extension installs it before the first cell."""
    loop = _Loop()
    loop.start()
    _seal.own_threads_now()
    done = threading.Event()
    loop.schedule(lambda: _seal.WATCH.install("Loop", done))
    assert done.wait(10)
    yield loop
    loop.schedule(lambda: sys.setprofile(None))
    loop.schedule(None)
    loop.join()
    _seal.WATCH.threads.pop(loop.ident, None)
    _seal.WATCH.broken = None


def _on(loop, fn, *args):
    box, done = [], threading.Event()
    loop.schedule(lambda: (box.append(fn(*args)), done.set()))
    done.wait(10)
    return box[0]


def test_work_handed_to_a_watched_kernel_thread_is_recorded(kernel_loop):
    with pytest.raises(CheckFailed, match="calls torch.*softmax, the very thing"):
        attention.check_softmax(lambda x, dim=-1: _on(kernel_loop, torch.softmax, x, dim))

    def via_cross_entropy(x, dim=-1):  # reaches aten's _log_softmax from C++ only
        loss = torch.nn.functional.cross_entropy(
            x.reshape(-1, x.shape[-1]), torch.zeros(1, dtype=torch.long).expand(x.numel() // x.shape[-1])
        )
        return _softmax(x, dim) + 0 * loss

    with pytest.raises(CheckFailed, match="calls torch operator _log_softmax"):
        attention.check_softmax(lambda x, dim=-1: _on(kernel_loop, via_cross_entropy, x, dim))
    attention.check_softmax(lambda x, dim=-1: _on(kernel_loop, _softmax, x, dim))  # allowed work passes


def test_taking_the_recording_off_a_kernel_thread_is_seen(kernel_loop):
    kernel_loop.schedule(lambda: sys.setprofile(None))  # between checks, in a cell of its own
    _on(kernel_loop, lambda: None)
    with pytest.raises(CheckFailed, match=THREAD_MESSAGE + r" \(setprofile on the kernel's Loop thread\)"):
        attention.check_softmax(_softmax)


def test_a_kernel_thread_without_a_loop_that_ran_during_the_call(own_threads, monkeypatch):
    """Like the kernel's threads that relay file descriptors 1 and 2: idle until handed
    something, and then running Python code beyond the recording's sight."""
    read, write = _os.pipe()
    box = []

    def relay():
        while data := _os.read(read, 100):
            box.append(torch.softmax(torch.tensor([float(len(data))]), 0))

    thread = threading.Thread(target=relay, daemon=True)
    thread.start()
    _seal.own_threads_now()
    monkeypatch.setitem(_seal._IDLE, thread.ident, "relay")
    try:

        def softmax(x, dim=-1):
            _os.write(write, b"work")
            while not box:
                pass
            return _softmax(x, dim)

        with pytest.raises(CheckFailed, match=THREAD_MESSAGE + r" \(relay\)"):
            attention.check_softmax(softmax)
    finally:
        _os.close(write)
        thread.join(10)
        _os.close(read)
    attention.check_softmax(_softmax)
