"""A class graded by `course autograde --jobs 2` inside a memory cgroup (as a JupyterHub pod
is), with one attacker among honest students: a notebook under the size cap whose metadata
parses into gigabytes of Python objects, which balloons the grading process itself (not the
kernel, which has its own sandbox bound). The worker grading it goes over its own memory bound
(``c.Sandbox.grader_memory_mb``) and is killed there; that submission alone is an error row,
flagged; every honest student keeps the grade it earns; the pod's own OOM killer never
had to choose."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_grading.sandbox import bubblewrap
from test_adversarial import FULL, WRONG_ONE_HOT, A, _course, _submit, _variant, balloon

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not bubblewrap.available()[0], reason="needs a working bubblewrap sandbox"),
]

POD_MB = 3072  # the whole grading run, as a pod's memory limit
GRADER_MB = 900  # each grading worker's own bound (not the default: read from nbgrader_config.py)
# the attacker sorts first: while its worker balloons, the other grades, the rest wait in the queue
HONEST = {
    "b_correct": {},
    "c_partial": {"one_hot": WRONG_ONE_HOT},
    "d_correct": {},
    "e_correct": {},
    "f_correct": {},
    "g_partial": {"one_hot": WRONG_ONE_HOT},
}
PARTIAL = {**FULL, "test_one_hot": 0.0}
ATTACKER = "a_balloons_the_grader"


def _pod() -> bubblewrap.Cgroups:
    pod = bubblewrap.Cgroups(
        files={"memory": {"memory.limit_in_bytes": str(POD_MB << 20)}}, prefix="course-test-pod-"
    )
    if not pod.memory:
        pod.remove()
        pytest.skip("no writable memory cgroup here (cgroup v1 memory controller)")
    return pod


def _remove(pod: bubblewrap.Cgroups) -> None:
    """The pod group and whatever groups were left in it (those of a killed worker's sandbox)."""
    path = pod.memory_path
    for child in sorted(path.glob("*/"), key=lambda p: -len(p.parts)):
        if child.is_dir():
            leftover = bubblewrap.Cgroups(files={})
            leftover.paths = [child]
            leftover.remove()
    pod.remove()


def test_a_worker_killed_for_its_memory_costs_only_its_submission(tmp_path):
    pod = _pod()
    try:
        course = _course(tmp_path / "course")
        with open(course / "nbgrader_config.py", "a") as fh:
            fh.write(f"\nc.Sandbox.grader_memory_mb = {GRADER_MB}\n")
            # the bounds on what is parsed of a notebook would refuse it before it is parsed
            # (untrusted.NotebookBounds): lifted, so that the worker's own bound is what stops it
            fh.write("c.NotebookBounds.max_containers = c.NotebookBounds.max_values = 10**8\n")
        source = nbformat.read(str(course / "solutions" / A / f"{A}.ipynb"), 4)
        for student, changes in HONEST.items():
            _submit(course, student, _variant(source, changes, ""))
        _submit(course, ATTACKER, _variant(source, {}, ""))
        path = course / "submitted" / ATTACKER / A / f"{A}.ipynb"
        balloon(path)
        assert path.stat().st_size < 32 * 2**20

        bin_dir = Path(sys.executable).parent
        env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
        done = subprocess.run(
            [
                "sh",
                "-c",
                'echo $$ > "$0/cgroup.procs" && exec "$@"',
                str(pod.memory_path),
                str(bin_dir / "course"),
                "--root",
                str(course),
                "autograde",
                "--jobs",
                "2",
                "--no-report",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        oom = (pod.memory_path / "memory.oom_control").read_text()
        left = [p.name for p in pod.memory_path.iterdir() if p.is_dir()]
        peak_mb = int((pod.memory_path / "memory.max_usage_in_bytes").read_text()) >> 20
    finally:
        _remove(pod)
    assert done.returncode == 1, done.stderr[-3000:]  # one submission could not be graded
    rows = list(csv.DictReader(open(course / "reports" / "grades.csv")))
    scores = {}
    for row in rows:
        if not row["exercise"].startswith("written_"):  # graded by hand: not this test's
            scores.setdefault(row["student"], {})[row["exercise"]] = row["score"] or row["message"]
    expected = {
        s: {k: f"{v:g}" for k, v in (PARTIAL if changes else FULL).items()} for s, changes in HONEST.items()
    }
    assert {s: scores[s] for s in HONEST} == expected, done.stderr[-3000:]
    error = f"the worker grading it went over its memory bound of {GRADER_MB} MB (killed by SIGKILL)"
    assert scores[ATTACKER] == {"": f"grading failed: {error}"}, done.stderr[-3000:]
    flags = list(csv.DictReader(open(course / "reports" / "flags.csv")))
    assert [(f["student"], f["cell"], f["reason"]) for f in flags if f["cell"] == "grader"] == [
        (ATTACKER, "grader", error)
    ]
    # the worker's bound chose; the pod never reached its own limit
    assert peak_mb < POD_MB and "\noom_kill 0" in oom, (peak_mb, oom)
    assert left == []  # no cgroup left behind, not even those of the killed worker's sandbox
