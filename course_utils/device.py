"""Device choice, seeding and thread count, the same on a laptop, a JupyterHub pod and a GPU box."""

from __future__ import annotations

import math
import os
import random
import sys
from pathlib import Path

import numpy as np


def get_device(prefer: str | None = None):
    """The best device here: CUDA, then Apple's MPS, then the CPU.

    ``prefer`` (or the ``COURSE_DEVICE`` environment variable) forces one, e.g. ``"cpu"``.
    """
    import torch

    choice = prefer or os.environ.get("COURSE_DEVICE")
    if choice:
        return torch.device(choice)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and torch (every device) so a notebook gives the same numbers twice.

    torch is seeded when it has been imported: the NumPy-only notebooks don't pay for loading
    it, and a notebook that uses torch imports it before calling this.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)  # seeds CUDA and MPS generators too


def grading() -> bool:
    """True while nbgrader executes a notebook (autograde or validate).

    Widgets and other heavy, purely visual work check this and stay out of the grader's way.
    """
    return bool(os.environ.get("NBGRADER_EXECUTION")) or os.environ.get("COURSE_GRADING") == "1"


# --------------------------------------------------------------------------- how many threads

# The course's tensors are small (d_model <= 384): past a few threads torch only adds
# synchronisation, so a kernel never takes more than this many, however big the machine.
MAX_THREADS = 4


def cgroup_cpu_limit(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup"):
    """The CPU quota of this process's cgroup (and its ancestors) in CPUs, e.g. 1.5; None if
    there is none. Reads cgroup v2 (``cpu.max``) and v1 (``cpu.cfs_quota_us`` and
    ``cpu.cfs_period_us``), as a container or a JupyterHub pod with a CPU limit sets them."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if controllers == "":  # cgroup v2: "0::/path"
            folders = [Path(root)]
            files = ("cpu.max",)
        elif "cpu" in controllers.split(","):  # cgroup v1: "4:cpu,cpuacct:/path"
            folders = [Path(root) / controllers, Path(root) / "cpu,cpuacct", Path(root) / "cpu"]
            files = ("cpu.cfs_quota_us", "cpu.cfs_period_us")
        else:
            continue
        for base in folders:
            if base.is_dir():
                limits += _quotas(base, path.strip(), files)
                break
    return min(limits) if limits else None


def _quotas(base: Path, path: str, files: tuple) -> list:
    """The quotas (in CPUs) set on ``base/path`` and on each of its parents up to ``base``."""
    found = []
    parts = [p for p in path.split("/") if p and p != ".."]
    for depth in range(len(parts), -1, -1):
        folder = base.joinpath(*parts[:depth])
        try:
            if files == ("cpu.max",):
                quota, period = (folder / "cpu.max").read_text().split()[:2]
            else:
                quota, period = ((folder / name).read_text().strip() for name in files)
            if quota not in ("max", "-1") and float(period) > 0 and float(quota) > 0:
                found.append(float(quota) / float(period))
        except (OSError, ValueError):
            continue
    return found


def available_cpus(proc_cgroup: str = "/proc/self/cgroup", root: str = "/sys/fs/cgroup") -> int:
    """How many CPUs this process may really use: the CPUs it may run on (its affinity mask),
    capped by its cgroup's CPU quota (rounded down, at least 1)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS, Windows
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit(proc_cgroup, root)
    if limit is not None:
        cpus = min(cpus, max(1, math.floor(limit)))
    return max(1, cpus)


def threads_for(cpus: int) -> int:
    """The torch threads for a kernel that may use ``cpus`` CPUs: one CPU is left to the rest
    of the machine (the Jupyter server, the browser, other kernels), at least 1, at most
    ``MAX_THREADS``. An operation split over threads waits for the slowest one, and a thread
    that shares its core with a busy process is slow: on 2 shared cores, notebook 07's
    training took 4-9 s with one thread and 20-150 s with two."""
    return max(1, min(cpus - 1, MAX_THREADS))


def use_available_cpus() -> int | None:
    """Size torch's threads to the CPUs this process may really use; return how many.

    ``COURSE_NUM_THREADS`` (or ``OMP_NUM_THREADS``, which torch reads itself) set by hand wins.
    While a notebook is graded, every kernel gets one thread: the grader already runs one
    kernel per core. Nothing happens (None) when torch has not been imported.
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    wanted = os.environ.get("COURSE_NUM_THREADS")
    if wanted and wanted.strip().isdigit() and int(wanted) > 0:
        threads = int(wanted)
    elif os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    elif grading():
        threads = 1
    else:
        threads = threads_for(available_cpus())
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads
