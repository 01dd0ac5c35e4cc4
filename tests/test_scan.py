"""The static red-flag scanner: finds cheats, stays quiet on honest notebooks."""
from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbgrader.utils import compute_checksum

from conftest import tiny_notebook
from course_grading.red_flags import scan, visible_part

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("assignment", sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir()))
def test_released_and_solution_notebooks_raise_no_flag(assignment):
    source = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    assert scan(ROOT / "notebooks" / assignment / f"{assignment}.ipynb", source) == []
    assert scan(source, source) == []


def _reasons(sub, src=None):
    return [f"{f.where}: {f.reason}" for f in scan(sub, src or tiny_notebook())]


@pytest.mark.parametrize("code, why", [
    ("np.allclose = lambda *a, **k: True", "comparison"),
    ("torch.allclose = lambda *a: True", "comparison"),
    ("check_double = lambda *a, **k: None", "checks"),
    ("import course_utils.checks._core as c", "checks"),
    ("get_ipython().input_transformers_post.append(f)", "transformer"),
    ("open('../../gradebook.db')", "gradebook"),
    ("import sqlite3", "gradebook"),
    ("import os\nos._exit(0)", "process control"),
    ("signal.signal(signal.SIGINT, signal.SIG_IGN)", "process control"),
    ("import socket", "network"),
    ("from course_grading.reference.embeddings import one_hot", "reference"),
    ("exec('x=1')", "dynamic"),
    ("k = get_ipython().kernel\nk.session.send(k.iopub_socket, 'status', {})", "Jupyter messages"),
])
def test_patterns_in_student_code(code, why):
    nb = tiny_notebook(solution="def double(x):\n    return 2 * x\n" + code + "\n")
    found = _reasons(nb)
    assert any(why in r and r.startswith("double") for r in found), found


def test_metadata_tags_and_test_cells():
    nb = tiny_notebook()
    nb.cells[2].metadata.nbgrader["points"] = 99
    assert any("metadata edited: points" in r for r in _reasons(nb))
    nb = tiny_notebook()
    nb.cells[2].metadata["tags"] = ["skip-execution"]
    assert any("tagged skip-execution" in r for r in _reasons(nb))
    nb = tiny_notebook()
    nb.cells[2].source = "pass"
    nb.cells[2].metadata.nbgrader["checksum"] = compute_checksum(nb.cells[2])
    assert any("test cell edited" in r for r in _reasons(nb))
    nb = tiny_notebook()
    del nb.cells[2]
    assert any("deleted" in r for r in _reasons(nb))
    nb = tiny_notebook()
    nb.cells[2].metadata.nbgrader["checksum"] = "0" * 32
    assert any("checksum" in r for r in _reasons(nb))
    nb = tiny_notebook()
    nb.metadata["kernelspec"] = {"name": "evil"}
    src = tiny_notebook()
    src.metadata["kernelspec"] = {"name": "python3"}
    assert any("kernel changed" in r for r in _reasons(nb, src))


def test_visible_part_drops_the_hidden_region():
    assert visible_part("a\n### BEGIN HIDDEN TESTS\nb\n### END HIDDEN TESTS\n") == "a"


def test_tags_the_source_carries_are_not_flagged_added_ones_are():
    src = tiny_notebook()
    src.cells[1].metadata["tags"] = ["raises-exception"]  # "Run All" keeps going past it
    src.cells[2].metadata["tags"] = ["raises-exception"]
    for cell, cell_id in zip(src.cells, ("intro", "double", "test_double")):
        cell["id"] = cell_id
    assert _reasons(src, src) == []
    sub = nbformat.from_dict(src)
    sub.cells[2].metadata["tags"] = ["raises-exception", "skip-execution"]
    assert _reasons(sub, src) == ["test_double: tagged skip-execution"]
    sub = nbformat.from_dict(src)
    sub.cells[0].metadata["tags"] = ["raises-exception"]  # a cell whose source has no such tag
    added = nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["raises-exception"]})
    added["id"] = "mine"
    sub.cells.append(added)  # a cell the student added
    assert _reasons(sub, src) == ["cell 0: tagged raises-exception", "cell 3: tagged raises-exception"]
