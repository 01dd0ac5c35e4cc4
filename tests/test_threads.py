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
    proc, root = _v2(tmp_path / "b", {"kubepods/pod1/box": "max 100000", "kubepods/pod1": "50000 100000",
                                      "": "max 100000"})
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
