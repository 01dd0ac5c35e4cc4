"""Install metadata: pip and conda users get the same dependencies; data ships with the package."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
CONDA_TO_PYPI = {"pytorch": "torch"}
NOT_A_DEPENDENCY = {"python", "pip"}


def _split(req: str) -> tuple[str, str]:
    m = re.match(r"^\s*([A-Za-z0-9_.\-]+)\s*(.*)$", req)
    return m.group(1).lower().replace("_", "-"), m.group(2).replace(" ", "")


def _conda_dependencies() -> dict[str, str]:
    deps = {}
    in_deps = False
    for line in (ROOT / "environment.yml").read_text().splitlines():
        if line.startswith("dependencies:"):
            in_deps = True
            continue
        m = re.match(r"^  - ([^\s].*)$", line)
        if in_deps and m and not m.group(1).startswith("pip:"):
            name, spec = _split(m.group(1))
            if name not in NOT_A_DEPENDENCY:
                deps[CONDA_TO_PYPI.get(name, name)] = spec
    return deps


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pip_deps = dict(_split(r) for r in project["dependencies"])
    assert _conda_dependencies() == pip_deps


def test_design_card_packages_are_dependencies():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = {_split(r)[0] for r in project["dependencies"]}
    assert {"jupyterlab", "numpy", "torch", "matplotlib", "nbgrader", "ipywidgets"} <= names


def test_pinned_versions_satisfy_the_declared_ranges():
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = [r for group in project.get("optional-dependencies", {}).values() for r in group]
    declared = {
        Requirement(r).name.lower(): Requirement(r).specifier for r in [*project["dependencies"], *extras]
    }
    for line in (ROOT / "scripts" / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        name, version = line.split("==")
        if name.lower() in declared:
            assert version in declared[name.lower()], (
                f"{line} is outside pyproject's {declared[name.lower()]}"
            )


def test_glove_data_ships_with_its_provenance():
    data = ROOT / "course_utils" / "data"
    assert (data / "glove.6B.50d.top20k.npz").stat().st_size > 1_000_000
    provenance = (data / "PROVENANCE.md").read_text()
    assert "PDDL" in provenance and "sha256" in provenance


def test_grading_output_is_git_ignored():
    ignored = (ROOT / ".gitignore").read_text().split()
    for entry in ("submitted/", "autograded/", "feedback/", "gradebook.db"):
        assert entry in ignored


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/test.sh" in readme and "bash scripts/start.sh" in readme
    assert re.search(r"^exec bash scripts/test\.sh\s*$", ci, re.M)
