"""The student side: built by `course build-student` and installed into a fresh virtual
environment that has nothing of the instructor side, it holds no solution and no hidden check,
every released notebook runs there (blank, and filled in with the solutions), and the checks
still catch forbidden calls."""

from __future__ import annotations

import ast
import concurrent.futures
import json
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT
from course_grading.authoring import student_side
from course_grading.course.course import Course
from course_grading.errors import GradingError

pytestmark = pytest.mark.slow

ASSIGNMENTS = Course(ROOT).source_assignments()


@pytest.fixture(scope="module")
def student(tmp_path_factory) -> dict:
    """The built student side and a fresh venv with its wheel installed (third-party packages
    are taken from the course's environment by a .pth line, the course's own code is not)."""
    base = tmp_path_factory.mktemp("student")
    out = base / "side"
    built = student_side.build(ROOT, out)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "course-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(built["wheel"])],
        check=True,
        timeout=300,
    )
    return {"out": out, "wheel": built["wheel"], "python": python, "site": site}


def _run(python: Path, code: str, cwd: Path | None = None, timeout: int = 600) -> str:
    # never the repository's root as the current folder: `python -c` would import from it
    done = subprocess.run(
        [str(python), "-c", code],
        capture_output=True,
        text=True,
        cwd=cwd or python.parent,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "MPLBACKEND": "Agg", "HOME": str(cwd or python.parent)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_installed_course_is_the_learner_side_alone(student):
    out = _run(
        student["python"],
        "import importlib.util, course_utils\n"
        "print(course_utils.__file__)\n"
        "print(importlib.util.find_spec('course_grading'))",
    )
    installed, grading = out.splitlines()
    assert installed.startswith(str(student["site"])) and grading == "None"
    with zipfile.ZipFile(student["wheel"]) as wheel:
        tops = {name.split("/")[0] for name in wheel.namelist()}
    assert tops == {"course_utils", student["wheel"].name.split("-py3")[0] + ".dist-info"}


def _functions(source: str) -> dict[str, str]:
    """{name: AST dump of the body} of every function in ``source``."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = ast.dump(ast.Module(body=node.body, type_ignores=[]))
    return found


def test_no_solution_and_no_hidden_check_in_any_installed_file_or_release(student):
    secrets = student_side.course_secrets(ROOT)
    every_secret = set().union(*secrets.values())
    installed = sorted((student["site"] / "course_utils").rglob("*.py"))
    assert len(installed) > 20
    grading = {}
    for module in sorted((ROOT / "course_grading").glob("*/*.py")):
        if module.parent.name in ("checks", "reference"):
            grading.update(
                {
                    f"{module.parent.name}/{module.stem}.{name}": body
                    for name, body in _functions(module.read_text()).items()
                }
            )
    hidden_bodies = {body: name for name, body in grading.items() if len(body) > 200}
    for path in installed:
        text = path.read_text()
        for line in text.splitlines():
            assert line.strip() not in every_secret, f"{path}: a solution line {line.strip()!r}"
        tree = ast.parse(text)
        assert not any(
            isinstance(n, (ast.Import, ast.ImportFrom)) and "course_grading" in ast.dump(n)
            for n in ast.walk(tree)
        ), f"{path} imports the instructor side"
        for name, body in _functions(text).items():
            assert body not in hidden_bodies, f"{path}: {name} is {hidden_bodies[body]} of the grading side"
    released = sorted(p for p in (student["out"] / "notebooks").rglob("*") if p.is_file())
    assert {p.parent.name for p in released} == set(ASSIGNMENTS)
    for path in released:
        text = path.read_text()
        assert "course_grading" not in text and "HIDDEN TESTS" not in text and "BEGIN SOLUTION" not in text, (
            path
        )
    assert student_side.release_leaks(ROOT, secrets) == []


def test_build_refuses_a_learner_side_that_would_leak(tmp_path, monkeypatch):
    files = dict(student_side.learner_files())
    files["course_utils/extra.py"] = b"from course_grading.reference.attention import softmax\n"
    monkeypatch.setattr(student_side, "learner_files", lambda: files)
    with pytest.raises(GradingError, match="would leak: course_utils/extra.py: imports the instructor side"):
        student_side.build(ROOT, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(GradingError, match="not an empty folder"):
        student_side.build(ROOT, tmp_path / "full")
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


RUNNER = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    import nbformat
    from nbclient import NotebookClient
    path = Path(sys.argv[1])
    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    report = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        errors = [(o["ename"], o["evalue"]) for o in cell.outputs if o["output_type"] == "error"]
        widgets = any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in cell.outputs)
        report.append({"grade": bool(meta.get("grade")), "id": meta.get("grade_id"), "errors": errors,
                       "widgets": widgets})
    print(json.dumps(report))
""")


def _execute(student: dict, notebook: Path) -> list[dict]:
    return json.loads(
        _run(
            student["python"], RUNNER.replace("sys.argv[1]", repr(str(notebook))), cwd=notebook.parent
        ).splitlines()[-1]
    )


def _fill_in(release: Path, assignment: str) -> None:
    """Replace each solution cell of the released notebook by the instructor's solution."""
    source = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    answers = {
        c["metadata"]["nbgrader"]["grade_id"]: c["source"]
        for c in source["cells"]
        if c.get("metadata", {}).get("nbgrader", {}).get("solution")
    }
    nb = json.loads(release.read_text())
    for cell in nb["cells"]:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.get("metadata", {}).get("nbgrader", {}).get("solution") and gid in answers:
            cell["source"] = answers[gid]
    release.write_text(json.dumps(nb))


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_released_notebooks_run_on_the_student_side(student, assignment, tmp_path):
    import shutil

    folder = tmp_path / assignment
    shutil.copytree(student["out"] / "notebooks" / assignment, folder)
    notebook = folder / f"{assignment}.ipynb"
    filled_folder = tmp_path / "filled"
    shutil.copytree(folder, filled_folder)
    filled_notebook = filled_folder / notebook.name
    _fill_in(filled_notebook, assignment)
    # both at once: each kernel uses one thread on a 2-core machine
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        blank, filled = pool.map(lambda nb: _execute(student, nb), (notebook, filled_notebook))
    grade_cells = [c for c in blank if c["grade"]]
    assert grade_cells
    for cell in grade_cells:
        assert cell["errors"], f"{cell['id']} passed on the blank release"
        ename, evalue = cell["errors"][0]
        assert ename == "CheckFailed" and "not implemented yet" in evalue, (cell["id"], ename, evalue)
    for cell in blank:
        for ename, evalue in cell["errors"]:
            assert ename in ("CheckFailed", "NotImplementedError"), (cell["id"], ename, evalue)
    failures = [(c["id"], c["errors"]) for c in filled if c["errors"]]
    assert failures == [], failures
    assert any(c["widgets"] for c in filled), f"{assignment}: no widget was built"


def test_forbidden_calls_are_still_caught_on_the_student_side(student, tmp_path):
    out = _run(
        student["python"],
        textwrap.dedent("""
        import functools, torch
        from course_utils.checks.attention import check_softmax
        from course_utils.checks.embeddings import check_one_hot
        cheats = {
            "softmax": lambda x, dim=-1: torch._softmax(x, dim, False),
            "partial": functools.partial(torch.softmax),
            "one_hot": lambda ids, v: torch.nn.functional.one_hot(torch.as_tensor(ids), v).double().numpy(),
        }
        for name, fn in cheats.items():
            check = check_one_hot if name == "one_hot" else check_softmax
            try:
                check(fn)
                print(name, "PASSED")
            except AssertionError as exc:
                print(name, "caught" if "the very thing" in str(exc) else f"other: {exc}")
    """),
        cwd=tmp_path,
    )
    assert out.split() == ["softmax", "caught", "partial", "caught", "one_hot", "caught"], out
