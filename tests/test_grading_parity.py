"""`course autograde` (parallel workers) gives exactly the grades of serial `nbgrader autograde`.

A few submissions of the real 03_attention (a full solution, the blank release, half solved,
and one with a classic softmax bug) are graded in two copies of one course: by `course
autograde --jobs 2` and by nbgrader's own command. Every (student, grade cell) must get the same
score, maximum and needs-manual-grade flag. The class-size throughput benchmark
(`python benchmarks/run.py --class-size 40`) makes the same check on a whole class.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from course_grading.commands.cli import main

pytestmark = pytest.mark.slow

ASSIGNMENT = "03_attention"
BIN = Path(sys.executable).parent
KINDS = ("solution", "blank", "partial", "buggy")


def _benchmark_module():
    spec = importlib.util.spec_from_file_location("course_benchmark", ROOT / "benchmarks" / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_course_autograde_equals_serial_nbgrader(tmp_path, capsys):
    bench = _benchmark_module()
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "MPLBACKEND": "Agg"}
    parallel, serial = tmp_path / "parallel", tmp_path / "serial"
    for course in (parallel, serial):
        course.mkdir()
        students = bench.make_class_course(course, ASSIGNMENT, len(KINDS), mix=KINDS)

    assert main(["--root", str(parallel), "autograde", ASSIGNMENT, "--jobs", "2"]) == 0
    capsys.readouterr()
    done = subprocess.run(
        [str(BIN / "nbgrader"), "autograde", ASSIGNMENT, "--force"],
        cwd=serial,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]

    ours, theirs = (bench.gradebook_scores(c, ASSIGNMENT) for c in (parallel, serial))
    cells = [
        "test_softmax",
        "test_simple_self_attention",
        "test_scaled_dot_product_attention",
        "test_causal_mask",
    ]
    assert sorted(k for k in ours if not k[1].startswith("written_")) == sorted(
        (s, c) for s in students for c in cells
    )
    assert ours == theirs  # the written answers too
    totals = {s.split("_", 1)[1]: sum(ours[(s, c)][0] for c in cells) for s in students}
    assert totals["solution"] == 8 and totals["blank"] == 0
    assert 0 < totals["partial"] < 8 and totals["buggy"] < 8
