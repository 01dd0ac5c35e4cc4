"""The tree is ruff-clean under the rules pyproject.toml sets (``scripts/test.sh`` runs the
same check before the tests)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    ruff = Path(sys.executable).with_name("ruff")
    ruff = str(ruff) if ruff.is_file() else shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (scripts/setup.sh --test installs it)")
    done = subprocess.run(
        [ruff, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
