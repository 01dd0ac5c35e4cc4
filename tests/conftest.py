"""Shared test set-up: headless matplotlib, tests run as "not grading", and a tiny nbgrader
course in a temporary folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import nbformat
import pytest

from course_grading.authoring.nbformat_tools import write_notebook

os.environ.setdefault("MPLBACKEND", "Agg")  # before anything imports pyplot

# A widget freezes the collector's view of a learner's kernel once (picture.settle_garbage_
# collector); in the test process that would keep cyclic garbage of every earlier test
# (kernels, event loops, sockets). A test in its own process checks it.
from course_utils.widgets import picture as _picture

_picture._SETTLED = True

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _not_grading(monkeypatch):
    """Widgets hide while nbgrader grades; tests see them unless a test says otherwise."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("COURSE_GRADING", raising=False)
    yield
    import sys

    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


@pytest.fixture(autouse=True, scope="module")
def _no_warm_sandbox_outlives_its_module():
    """A warm sandbox a test module started (an audit, a command run in this process) is this
    process's child: the checks of a later module would see it as a process the learner started.
    What an earlier module left running for good (the grading workers' fork server) is taken as
    this process's own when a module starts, as a notebook's setup cell takes the kernel's: which
    modules ran before in this process must not change a check's verdict."""
    import sys

    if "course_utils.checks.kit" in sys.modules:
        sys.modules["course_utils.checks.kit"].own_threads_now()
    yield
    warm = sys.modules.get("course_grading.sandbox.warm")
    if warm is not None:
        warm.stop_warm()
    # an audit child run in this process stands in for what it does not audit (plots, widgets):
    # the next module imports the real ones again
    for name in [n for n, m in sys.modules.items() if type(m).__name__ == "Anything"]:
        del sys.modules[name]


ASSIGNMENT = "01_tiny"

SOLUTION_CELL = '''def double(x):
    """Twice x."""
    ### BEGIN SOLUTION
    result_value = x + x
    return result_value
    ### END SOLUTION
'''

TEST_CELL = """assert double(2) == 4, "double(2) should be 4"
### BEGIN HIDDEN TESTS
assert double(-21) == -42, "hidden: double(-21) should be -42"
### END HIDDEN TESTS
"""


def nbgrader_meta(grade_id: str, *, solution=False, grade=False, points=None) -> dict:
    """nbgrader cell metadata (schema 3) for a solution, grade or locked cell."""
    meta = {
        "schema_version": 3,
        "grade": grade,
        "solution": solution,
        "locked": not solution,
        "task": False,
        "grade_id": grade_id,
    }
    if grade:
        meta["points"] = points
    return {"nbgrader": meta}


def tiny_notebook(solution=SOLUTION_CELL, test=TEST_CELL, points=2):
    """A solution notebook: a markdown cell, one solution cell and one graded test cell."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Tiny\nWrite `double`."),
        nbformat.v4.new_code_cell(solution, metadata=nbgrader_meta("double", solution=True)),
        nbformat.v4.new_code_cell(test, metadata=nbgrader_meta("test_double", grade=True, points=points)),
    ]
    return nb


def make_course(root: Path, notebooks: dict) -> Path:
    """A course at ``root``: the real nbgrader_config.py and ``{assignment: notebook}`` sources."""
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "nbgrader_config.py", root / "nbgrader_config.py")
    for assignment, nb in notebooks.items():
        folder = root / "solutions" / assignment
        folder.mkdir(parents=True, exist_ok=True)
        write_notebook(nb, folder / f"{assignment}.ipynb")
    return root


@pytest.fixture
def tiny_course(tmp_path) -> Path:
    """A course with one assignment, ``01_tiny``, not yet released."""
    return make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})


@pytest.fixture(scope="module")
def one_torch_thread():
    """For a module of tiny models: one torch thread is faster, and immune to a busy machine's
    cores; the number before is restored, and the module's figures closed, after it."""
    import matplotlib.pyplot as plt
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    plt.close("all")


# -- the suite in parts (scripts/test.sh runs several at once) ----------------------------------

# Seconds of each test file that takes 5 s or more, summed from `bash scripts/test.sh
# --durations=0` (setup, call and teardown) in a fresh clone on an idle 2-core machine, three
# parts at once; every other file counts a tenth of a second a test. Only the balance of the
# parts depends on them: measure again when a file grows or shrinks by much.
COST = {
    "test_browser.py": 254,
    "test_graders.py": 253,
    "test_hub.py": 197,
    "test_adversarial.py": 183,
    "test_audit_variants.py": 173,
    "test_any_cpu.py": 166,
    "test_doctor_fixes.py": 178,
    "test_warm.py": 134,
    "test_instructor_browser.py": 113,
    "test_autograde_variants_05_08.py": 110,
    "test_student_side.py": 96,
    "test_pipeline.py": 55,
    "test_grading_parity.py": 53,
    "test_autograde_course.py": 52,
    "test_course_root.py": 49,
    "test_limited_execute.py": 44,
    "test_launch.py": 40,
    "test_postgres.py": 38,
    "test_progress_resume.py": 38,
    "test_autograde_variants_01_04.py": 36,
    "test_exchange.py": 31,
    "test_worker_death.py": 29,
    "test_visible_checks_catch_the_bugs.py": 28,
    "test_audit_evidence.py": 25,
    "test_widget_pictures.py": 25,
    "test_audit.py": 24,
    "test_audit_memory.py": 22,
    "test_failure_messages.py": 21,
    "test_written_answers.py": 20,
    "test_doctor.py": 19,
    "test_run_all.py": 18,
    "test_message_specificity.py": 17,
    "test_dictation.py": 14,
    "test_lms_exports.py": 11,
    "test_cli.py": 9,
    "test_scan.py": 9,
    "test_generation.py": 7,
    "test_learner_side_01_04.py": 7,
    "test_sandbox.py": 7,
    "test_status.py": 7,
    "test_visible_checks_03_04_06.py": 7,
    "test_course_utils.py": 6,
}


def pytest_addoption(parser):
    parser.addoption(
        "--part",
        default=None,
        metavar="K/N",
        help="run the K-th of N parts of the selected tests, each test file whole in one part, "
        "the same files on every machine (scripts/test.sh runs parts 1/2 and 2/2 at once)",
    )


def parts(files: dict[str, int], count: int) -> dict[str, int]:
    """Each file (name -> number of its tests) to one of ``count`` parts: the costliest first,
    each to the part with the least so far. The same files give the same parts everywhere."""
    cost = {name: COST.get(name, tests / 10) for name, tests in files.items()}
    load, out = [0.0] * count, {}
    for name in sorted(cost, key=lambda n: (-cost[n], n)):
        out[name] = load.index(min(load))
        load[out[name]] += cost[name]
    return out


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(session, config, items):
    part = config.getoption("part")
    if not part:
        return
    k, _, n = part.partition("/")
    if not (k.isdigit() and n.isdigit() and 1 <= int(k) <= int(n)):
        raise pytest.UsageError(f"--part takes K/N with 1 <= K <= N, not {part!r}")
    files: dict[str, int] = {}
    for item in items:
        files[item.path.name] = files.get(item.path.name, 0) + 1
    mine = parts(files, int(n))
    kept = [item for item in items if mine[item.path.name] == int(k) - 1]
    config.hook.pytest_deselected(items=[item for item in items if mine[item.path.name] != int(k) - 1])
    items[:] = kept
