"""One course value (``course_grading.course.course.Course``): the course's configuration has
one reader and its folders one source, and a grading run carries the configuration its
command read to the workers."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

from conftest import ASSIGNMENT, make_course, tiny_notebook
from course_grading.course.course import Course
from course_grading.course.nbgrader_setup import GradingRun

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("course_grading", "course_utils")
COURSE_PACKAGE = ROOT / "course_grading" / "course"
CONFIG_READERS = {"PyFileConfigLoader", "JSONFileConfigLoader", "load_config_file", "load_config"}
FOLDER_NAMES = {"source", "release", "submitted", "autograded", "feedback", "solutions", "notebooks"}


def _modules():
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if not path.is_relative_to(COURSE_PACKAGE):
                yield path, ast.parse(path.read_text(encoding="utf-8"))


def _name(node) -> str:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def test_no_module_outside_the_course_reads_a_configuration_file():
    """Only ``course_grading.course`` executes nbgrader_config.py (traitlets' loaders, a
    ``load_config_file``, or ``exec`` of the file)."""
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            named = (
                isinstance(node, (ast.Name, ast.Attribute))
                and _name(node) in CONFIG_READERS
                or isinstance(node, ast.alias)
                and node.name.rsplit(".", 1)[-1] in CONFIG_READERS
            )
            executed = (
                isinstance(node, ast.Call)
                and _name(node.func) in ("exec", "runpy", "run_path")
                and "nbgrader_config" in ast.unparse(node)
            )
            if named or executed:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []


def test_no_module_outside_the_course_joins_a_course_folder_by_hand():
    """No ``root / "submitted"``, ``root / where.source`` or ``root / coursedir.autograded_directory``
    outside ``course_grading.course``: a course folder comes from ``Course.folders`` (or from an
    nbgrader CourseDirectory's ``format_path``), absolute. The one exception is the layout of the
    student bundle that ``course build-student`` writes (its own ``notebooks/``)."""
    found = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
                continue
            right = node.right
            spelled = isinstance(right, ast.Constant) and right.value in FOLDER_NAMES
            attribute = isinstance(right, ast.Attribute) and (
                right.attr in FOLDER_NAMES - {"solutions", "notebooks"} or right.attr.endswith("_directory")
            )
            if spelled or attribute:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)}")
    assert [
        f for f in found if not f.startswith("course_grading/authoring/student_side.py") or "out /" not in f
    ] == []


def test_the_configuration_is_read_once_and_travels_with_a_grading_run(tmp_path, monkeypatch):
    course_root = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    with open(course_root / "nbgrader_config.py", "a") as fh:
        fh.write('\nc.CourseDirectory.submitted_directory = "handed_in"\nc.NotebookBounds.max_cells = 77\n')
    from course_grading.course import config as course_config

    reads = []
    load = course_config.load
    monkeypatch.setattr(course_config, "load", lambda path: reads.append(path) or load(path))
    course = Course(course_root)
    where = course.folders
    assert where.submitted == course_root.resolve() / "handed_in"
    assert course.notebook_bounds.max_cells == 77
    assert course.db_url == f"sqlite:///{course_root.resolve() / 'gradebook.db'}"
    assert course.select_assignments([]) == [ASSIGNMENT]
    assert len(reads) == 1

    run = pickle.loads(pickle.dumps(GradingRun(course, submitted=str(where.submitted))))
    assert run.course.folders == where and len(reads) == 1  # the worker's copy reads nothing
    coursedir = run.course_directory(student_id="ann", assignment_id=ASSIGNMENT)
    assert (
        Path(coursedir.format_path(coursedir.submitted_directory, "ann", ASSIGNMENT))
        == where.submitted / "ann" / ASSIGNMENT
    )
    assert course.config.CourseDirectory.submitted_directory == "handed_in"  # copied, not changed
    assert len(reads) == 1


def test_a_throw_away_course_keeps_the_course_folder_names(tmp_path):
    """``course check`` grades in a temporary folder laid out as the course is."""
    course_root = make_course(tmp_path / "course", {ASSIGNMENT: tiny_notebook()})
    with open(course_root / "nbgrader_config.py", "a") as fh:
        fh.write('\nc.CourseDirectory.source_directory = "instructor"\n')
    scratch = Course(course_root).folders.moved(tmp_path / "scratch")
    assert (scratch.root, scratch.source, scratch.submitted) == (
        tmp_path / "scratch",
        tmp_path / "scratch" / "instructor",
        tmp_path / "scratch" / "submitted",
    )
