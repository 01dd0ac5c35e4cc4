"""nbgrader's own code is changed in one module (``course_grading.grading.nbgrader_patches``),
for the versions it was tested with; the packaging pins that range; commands that need no
nbgrader do not load it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from course_grading.grading import nbgrader_patches

ROOT = Path(__file__).resolve().parents[1]
PATCHES = ROOT / "course_grading" / "grading" / "nbgrader_patches.py"


def test_an_untested_nbgrader_is_refused_with_one_line():
    nbgrader_patches.check_version("0.9.6")
    nbgrader_patches.check_version("0.9.9")
    for version in ("0.9.5", "0.10.0", "1.0.0a1"):
        with pytest.raises(
            nbgrader_patches.UntestedNbgrader, match=rf"nbgrader {re.escape(version)} is installed"
        ):
            nbgrader_patches.check_version(version)


def test_the_packaging_pins_the_tested_range():
    low, high = (".".join(map(str, v)) for v in nbgrader_patches.TESTED)
    wanted = f"nbgrader>={low},<{high.removesuffix('.0')}"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert wanted in project["dependencies"]
    assert f"- {wanted}" in (ROOT / "environment.yml").read_text(encoding="utf-8")


def test_no_other_module_assigns_into_nbgrader():
    """An assignment to an attribute of an nbgrader module (``nbgrader.api.x = ...``,
    ``common.jsonschema = ...`` after ``from nbgrader... import common``) only in the patches."""
    found = []
    for path in sorted((ROOT / "course_grading").rglob("*.py")):
        if path == PATCHES:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        from_nbgrader = {
            a.asname or a.name
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("nbgrader")
            for a in n.names
        }
        for node in ast.walk(tree):
            for target in getattr(node, "targets", []) if isinstance(node, ast.Assign) else []:
                if isinstance(target, ast.Attribute):
                    base = ast.unparse(target.value)
                    if base.startswith("nbgrader") or base.split(".")[0] in from_nbgrader:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(target)}")
    assert found == []


def test_status_loads_no_nbgrader_to_start():
    code = (
        "import sys, course_grading.commands.status, course_grading.commands.cli\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'nbgrader'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_nbgrader_execution_is_unset_again_when_a_notebook_fails(monkeypatch):
    """nbgrader's own setenv leaves NBGRADER_EXECUTION set when the block raises: a Jupyter
    server the same process starts later would hide every widget, as under grading."""
    import os

    import nbgrader.utils

    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setenv("NBGRADER_VALIDATING", "before")
    with (
        pytest.raises(RuntimeError),
        nbgrader.utils.setenv(NBGRADER_EXECUTION="autograde", NBGRADER_VALIDATING="1"),
    ):
        assert os.environ["NBGRADER_EXECUTION"] == "autograde"
        raise RuntimeError("a cell timed out")
    assert "NBGRADER_EXECUTION" not in os.environ
    assert os.environ["NBGRADER_VALIDATING"] == "before"
