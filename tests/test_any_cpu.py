"""The verdicts do not depend on the CPU's kernels or on torch's thread count.

Another CPU, another BLAS kernel or another number of threads changes the last bits of a
matrix product. This test runs the checks whose verdicts rest on computed floats again, in a
fresh interpreter that uses torch's plain (non-vectorised) kernels on one thread, the settings
furthest from this machine's: the stored expected outputs still match the reference, every
solution and correct variant still passes, and every buggy variant the visible checks must
catch still fails. (The whole suite under such settings: ``ATEN_CPU_CAPABILITY=default
OMP_NUM_THREADS=1 bash scripts/test.sh``.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OTHER_CPU = {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "1"}
CHECKS = [
    "tests/test_expected.py",
    "tests/test_graders.py::test_solution_passes_every_grade_cell",
    "tests/test_graders.py::test_alternative_correct_variant_keeps_full_marks",
    "tests/test_visible_checks_catch_the_bugs.py",
]
RUN = (
    "import sys, torch, pytest\n"
    "assert torch.backends.cpu.get_cpu_capability() == 'DEFAULT', torch.backends.cpu.get_cpu_capability()\n"
    "assert torch.get_num_threads() == 1, torch.get_num_threads()\n"
    "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', *sys.argv[1:]]))\n"
)


@pytest.mark.slow
def test_verdicts_hold_with_plain_kernels_on_one_thread():
    env = {**os.environ, **OTHER_CPU}
    run = subprocess.run(
        [sys.executable, "-c", RUN, *CHECKS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900
    )
    assert run.returncode == 0, f"under {OTHER_CPU}:\n{run.stdout[-6000:]}\n{run.stderr[-2000:]}"
