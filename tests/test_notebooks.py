"""Every notebook runs: solutions pass all their tests, releases fail only where work is missing,
and the committed releases are exactly what `course release` generates, with nothing leaked."""
from __future__ import annotations

import json

import pytest

from notebook_runner import ROOT, execute, notebooks

SOLUTIONS = notebooks("solutions")
RELEASES = notebooks("notebooks")
MARKERS = ("BEGIN SOLUTION", "END SOLUTION", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


def _name(p):
    return p.parent.name


def test_every_solution_has_a_release():
    assert SOLUTIONS, "no solution notebooks found"
    assert [_name(p) for p in SOLUTIONS] == [_name(p) for p in RELEASES]


@pytest.mark.slow
@pytest.mark.parametrize("path", SOLUTIONS, ids=_name)
def test_solution_notebook_runs_and_passes_all_tests(path):
    _, errors = execute(path)
    assert not errors, f"errors in {path.name}: {errors}"


@pytest.mark.slow
@pytest.mark.parametrize("path", RELEASES, ids=_name)
def test_released_notebook_fails_only_on_unimplemented_exercises(path):
    nb, errors = execute(path, allow_errors=True)
    unexpected = [e for e in errors
                  if e.ename != "NotImplementedError" and "not implemented yet" not in e.evalue]
    assert not unexpected, f"cells that fail for another reason than missing work: {unexpected}"
    graded = {c.metadata["nbgrader"]["grade_id"] for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade")}
    failed = {e.grade_id for e in errors if e.grade_id}
    assert failed == graded, f"grade cells that pass with no work done: {sorted(graded - failed)}"


@pytest.mark.parametrize("path", RELEASES, ids=_name)
def test_release_has_no_solution_or_hidden_test_text(path):
    text = path.read_text()
    for marker in MARKERS:
        assert marker not in text
    solution = (ROOT / "solutions" / _name(path) / path.name).read_text()
    hidden = []
    for cell in json.loads(solution)["cells"]:
        src = "".join(cell["source"])
        for start, end in (("### BEGIN SOLUTION", "### END SOLUTION"),
                           ("### BEGIN HIDDEN TESTS", "### END HIDDEN TESTS")):
            while start in src:
                head, _, rest = src.partition(start)
                body, _, src = rest.partition(end)
                hidden += [ln.strip() for ln in body.splitlines() if len(ln.strip()) > 12]
    released_lines = {ln.strip() for c in json.loads(text)["cells"] for ln in "".join(c["source"]).splitlines()}
    leaked = [ln for ln in hidden if ln in released_lines and not ln.startswith("#")]
    assert not leaked, f"solution or hidden-test lines in the student notebook: {leaked[:5]}"


@pytest.mark.parametrize("path", SOLUTIONS + RELEASES, ids=lambda p: f"{p.parts[-3]}-{_name(p)}")
def test_committed_notebooks_carry_no_outputs_or_machine_metadata(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None
        assert set(cell.get("metadata", {})) <= {"nbgrader", "tags"}
    assert set(nb["metadata"]) <= {"kernelspec", "language_info"}
