"""The grading workers' dispatcher (course_grading/grading/workers.py), in-process and cheap: a worker
that dies costs only the task it held, whether it dies of that task, at start-up, or over its
memory bound; the others are done on fresh workers; an interrupt stops every worker."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path

import pytest

from course_grading.grading import workers
from course_grading.sandbox import bubblewrap

CONTEXT = multiprocessing.get_context("forkserver")
MB = 2**20


def square(x, kill=False):
    if kill:
        os.kill(os.getpid(), signal.SIGKILL)
    return x * x, os.getpid()


def raises(x):
    raise ValueError(f"bad {x}")


def unpicklable(x):
    return lambda: x


def balloon(x, megabytes=0):
    """Holds ``megabytes`` of resident memory (written, so resident), for a while."""
    held = [b"\1" * MB for _ in range(megabytes)]
    if megabytes:
        time.sleep(5)
    return x + len(held)


def resident(x):
    return workers._resident_mb(os.getpid())


def own_cgroups(x):
    return x, bubblewrap._cgroup_base("memory"), Path("/proc/self/cgroup").read_text()


def die_first_time(marker):
    """A start-up that dies (the first worker to start only)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os._exit(7)


def die_always():
    os.kill(os.getpid(), signal.SIGKILL)


def _run(function, tasks, jobs=2, **kwargs) -> dict:
    outcomes = {}

    def on_result(index, outcome):
        assert index not in outcomes, "one outcome per task"
        outcomes[index] = outcome

    workers.run(function, tasks, jobs, on_result, context=CONTEXT, **kwargs)
    assert sorted(outcomes) == list(range(len(tasks)))
    return outcomes


def test_a_task_that_kills_its_worker_costs_only_itself():
    tasks = [(i, i == 3) for i in range(12)]
    outcomes = _run(square, tasks)
    died = outcomes[3]
    assert isinstance(died, workers.WorkerDied), died
    assert died.exitcode == -signal.SIGKILL and died.tries == 2 and not died.over_memory
    assert "killed by SIGKILL" in str(died) and "2 times" in str(died)
    # the pool went on: every other task, before and after it, done
    assert all(outcomes[i][0] == i * i for i in range(12) if i != 3)


def test_no_retry_means_one_try():
    outcomes = _run(square, [(1, True), (2, False)], retries=0)
    assert outcomes[0].tries == 1 and outcomes[1][0] == 4


def test_a_worker_that_dies_at_start_up_is_replaced(tmp_path):
    outcomes = _run(
        square, [(i,) for i in range(6)], initializer=die_first_time, initargs=(str(tmp_path / "started"),)
    )
    assert [outcomes[i][0] for i in range(6)] == [i * i for i in range(6)]


def test_no_worker_can_start_every_task_says_so():
    outcomes = _run(square, [(i,) for i in range(4)], initializer=die_always)
    assert all(isinstance(o, workers.WorkerDied) and o.at_start for o in outcomes.values())
    assert "no worker could start (killed by SIGKILL" in str(outcomes[0])


def test_what_a_task_raises_is_its_outcome():
    outcomes = _run(raises, [(1,), (2,)])
    assert [str(outcomes[i]) for i in range(2)] == ["ValueError: bad 1", "ValueError: bad 2"]
    outcome = _run(unpicklable, [(1,)], jobs=1)[0]
    assert isinstance(outcome, workers.TaskRaised) and "could not be sent back" in str(outcome)


def _memory_cgroups() -> bool:
    return bubblewrap._cgroup_base("memory") is not None


@pytest.mark.parametrize("bound", ["cgroup", "watch"])
def test_a_task_over_the_memory_bound_fails_alone(bound, monkeypatch):
    if bound == "cgroup" and not _memory_cgroups():
        pytest.skip("no writable memory cgroup here")
    if bound == "watch":
        monkeypatch.setattr(workers, "_memory_group", lambda memory_mb: None)
    # the bound: 150 MB above what a worker holds when it starts (the fork server's imports, torch
    # among them, are resident in every worker it forks, and a watch of resident memory counts them)
    bound = int(max(_run(resident, [(0,), (1,)]).values())) + 150
    tasks = [(i, 400 if i == 2 else 0) for i in range(5)]
    outcomes = _run(balloon, tasks, memory_mb=bound)
    died = outcomes[2]
    assert isinstance(died, workers.WorkerDied) and died.over_memory and died.tries == 1, died
    assert str(died) == f"the worker grading it went over its memory bound of {bound} MB (killed by SIGKILL)"
    assert [outcomes[i] for i in (0, 1, 3, 4)] == [0, 1, 3, 4]


def test_a_worker_in_its_memory_cgroup_makes_its_sandboxes_beside_it():
    if not _memory_cgroups():
        pytest.skip("no writable memory cgroup here")
    base = bubblewrap._cgroup_base("memory")
    before = set(base.iterdir())
    _, seen, groups = _run(own_cgroups, [(1,)], jobs=1, memory_mb=500)[0]
    own = next(line.split(":", 2)[2] for line in groups.splitlines() if ":memory:" in line)
    assert Path(own).name.startswith(bubblewrap.GRADER_GROUP)  # the worker is in its group
    assert seen == base  # a sandbox it starts is bounded beside it (memory_mb), not within
    assert set(base.iterdir()) == before  # its group is gone with it


def test_an_interrupt_stops_every_worker(tmp_path):
    """Ctrl-C in the dispatcher (here: raised by the first result) stops the busy workers
    too, with SIGTERM, and returns."""

    def on_result(index, outcome):
        raise KeyboardInterrupt

    tasks = [(str(tmp_path), 0), (str(tmp_path), 1)]
    with pytest.raises(KeyboardInterrupt):
        workers.run(_first_quick, tasks, 2, on_result, context=CONTEXT, memory_mb=500)
    pids = [int(p.stem) for p in tmp_path.glob("*.pid")]
    assert len(pids) == 2
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def _first_quick(folder, x):
    Path(folder, f"{os.getpid()}.pid").write_text(str(x))
    if x == 0:
        for _ in range(600):  # until the other worker is busy too
            if len(list(Path(folder).glob("*.pid"))) == 2:
                break
            time.sleep(0.1)
        return x
    time.sleep(120)
    return x
