"""The documentation: generated references match the code, the site builds with warnings as
errors (a broken link or anchor fails), and README.md stays a landing page whose links resolve."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README_LIMIT = 10_000  # bytes


def _generator():
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "tools" / "docs_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_references_match_the_code():
    stale = _generator().stale_pages()
    assert not stale, f"{', '.join(stale)} out of date: run `python tools/docs_reference.py`"


def test_command_reference_has_every_command_with_an_example():
    from course_grading.commands.cli import build_parser

    page = (ROOT / "docs" / "reference" / "commands.md").read_text(encoding="utf-8")
    names = [name for name, _, _ in _generator()._subcommands(build_parser())]
    assert {"check", "autograde", "export", "roster import", "build-student"} <= set(names)
    for name in names:
        section = page.split(f"## `course {name}`\n", 1)[1].split("\n## ", 1)[0]
        assert "Example:" in section and f"course {name}" in section.split("Example:", 1)[1], name


def test_config_reference_lists_every_course_setting():
    page = (ROOT / "docs" / "reference" / "config.md").read_text(encoding="utf-8")
    sections = {s.split("`", 2)[1]: s for s in page.split("\n### ")[1:]}
    for setting in (
        "c.Sandbox.memory_mb",
        "c.Sandbox.grader_memory_mb",
        "c.LimitedExecute.max_total_seconds",
        "c.SanitizeNotebook.max_rendered_chars",
        "c.BuildingBlocks.provide",
        "c.NotebookBounds.max_cells",
    ):
        owner, name = setting.rsplit(".", 1)
        assert f"| `{name}` |" in sections[owner], setting
    for setting in ("c.Execute.timeout", "c.ExchangeFactory.collect"):  # what nbgrader_config.py sets
        assert setting in sections, setting
    assert "CPU seconds of each sandboxed process." in page  # a help= string, word for word


def test_site_builds_with_warnings_as_errors(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("material") is None:
        pytest.skip("mkdocs and mkdocs-material are not installed: `bash scripts/setup.sh --test`")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "reference" / "config" / "index.html").exists()
    assert "Where things live" in (tmp_path / "contributing" / "index.html").read_text(encoding="utf-8")


def test_readme_is_a_landing_page():
    readme = ROOT / "README.md"
    assert readme.stat().st_size < README_LIMIT, (
        f"README.md is {readme.stat().st_size} bytes: keep it under {README_LIMIT}, the rest goes to docs/"
    )
    text = readme.read_text(encoding="utf-8")
    for reader in ("### Students", "### Self-learners", "### Instructors", "### Contributors"):
        assert reader in text, reader


def test_readme_links_resolve():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    relative = [link for link in links if not re.match(r"[a-z]+:", link) and not link.startswith("#")]
    assert len(relative) >= 10, relative
    missing = [link for link in relative if not (ROOT / link.split("#")[0]).exists()]
    assert not missing, f"README.md links to what does not exist: {missing}"


def test_hub_guide_gives_the_instructor_settings_the_tests_use(tmp_path):
    """Step 3 of the JupyterHub guide: the settings an instructor copies are those the hub and
    Formgrader tests run with."""
    from jupyter_browser import write_instructor_config

    write_instructor_config(tmp_path, ROOT)
    guide = (ROOT / "docs" / "guides" / "jupyterhub.md").read_text(encoding="utf-8")
    settings = [
        line
        for name in ("nbgrader_config.py", "jupyter_server_config.py")
        for line in (tmp_path / name).read_text(encoding="utf-8").splitlines()
        if line.startswith(("c.", "load_subconfig("))
    ]
    assert len(settings) == 3
    for line in settings:
        if line.startswith("load_subconfig("):
            assert 'load_subconfig("/home/instructor/attention-course/nbgrader_config.py")' in guide
        else:
            assert line in guide, line
