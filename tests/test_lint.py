"""The tree is ruff-clean under the rules pyproject.toml sets, and laid out as ``ruff format``
lays it out (``scripts/test.sh`` runs the same two checks before the tests)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff(*args: str) -> subprocess.CompletedProcess:
    ruff = Path(sys.executable).with_name("ruff")
    ruff = str(ruff) if ruff.is_file() else shutil.which("ruff")
    if ruff is None:
        pytest.skip("ruff is not installed (scripts/setup.sh --test installs it)")
    return subprocess.run(
        [ruff, *args, "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_ruff_finds_nothing():
    done = _ruff("check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_tree_is_formatted():
    done = _ruff("format", "--check")
    assert done.returncode == 0, done.stdout + done.stderr
