"""Where a course lives and what was submitted to it: plain folder walks
(the ``course`` entry point uses them before anything heavy is loaded: no nbgrader import)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from course_grading.course import config
from course_grading.untrusted import plain_name

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
ROOT_VARIABLE = "COURSE_ROOT"
HOW_TO_NAME = (
    f"name the course with --root DIR (or {ROOT_VARIABLE}=DIR, or "
    "c.CourseDirectory.root in ~/.jupyter/nbgrader_config.py)"
)


class CourseRoot(NamedTuple):
    """A course directory and what named it (for messages)."""

    path: Path
    named_by: str


class RootConfigError(Exception):
    """The instructor's Jupyter configuration, which could name the course, cannot be read."""


def search_root(explicit=None) -> CourseRoot | None:
    """The course directory, by a rule that nothing a submission or a download writes can
    satisfy: ``explicit`` (``--root``), else the ``COURSE_ROOT`` environment variable, else
    ``CourseDirectory.root`` in the nbgrader configuration of Jupyter's configuration folders
    (``~/.jupyter``, the environment's and the system's: the instructor's own, never the
    current directory), else the clone this package was installed from (an editable install)
    when it holds nbgrader_config.py; None when none applies.

    Never the current directory or its parents: a student's submission folder, or a folder of
    downloads, may hold an nbgrader_config.py, and the root's configuration runs as Python.
    Relative paths are taken from the current directory (the instructor's word)."""
    if explicit:
        return CourseRoot(Path(explicit).resolve(), "--root")
    if os.environ.get(ROOT_VARIABLE):
        return CourseRoot(Path(os.environ[ROOT_VARIABLE]).resolve(), ROOT_VARIABLE)
    configured = _jupyter_config_root()
    if configured is not None:
        return configured
    if (PACKAGE_ROOT / "nbgrader_config.py").is_file():
        return CourseRoot(PACKAGE_ROOT, "the installed course")
    return None


def _jupyter_config_root() -> CourseRoot | None:
    """``CourseDirectory.root`` as the first nbgrader configuration file of Jupyter's
    configuration folders that sets it says (the user's folder first, as Jupyter reads them);
    RootConfigError when one of them cannot be read."""
    for path in config.jupyter_config_files():
        try:
            loaded = config.load(path)
        except Exception as exc:  # noqa: BLE001 - whatever the file raised
            raise RootConfigError(f"cannot read {path}: {type(exc).__name__}: {exc}") from None
        root = loaded.get("CourseDirectory", {}).get("root")
        if not (isinstance(root, str) and root):
            continue
        if not os.path.isabs(os.path.expanduser(root)):  # it would follow the current folder
            raise RootConfigError(
                f"CourseDirectory.root in {path} is a relative path ({root}): "
                "a course directory is never taken from the current folder; "
                "make it absolute, or use --root DIR"
            )
        return CourseRoot(Path(os.path.expanduser(root)).resolve(), f"CourseDirectory.root in {path}")
    return None


def course_config_near(folder) -> Path | None:
    """The nbgrader_config.py at or above ``folder``, if any: only to say that it was not
    used (nothing here reads it)."""
    folder = Path(folder).resolve()
    for candidate in (folder, *folder.parents):
        if (candidate / "nbgrader_config.py").is_file():
            return candidate / "nbgrader_config.py"
    return None


def find_submissions(
    submitted: Path, students=None, assignments=None, refused: list | None = None
) -> list[tuple[str, str]]:
    """(student, assignment) for each folder ``submitted/<student>/<assignment>/`` whose
    student folder's name is a valid student id (``untrusted.plain_name``: ASCII letters,
    digits, ``. _ - @``, not starting with ``. - @``, at most MAX_NAME characters). The name of each other student folder (not
    UTF-8: with lone surrogates, as ``os.listdir`` gives it) that holds a chosen assignment, or
    any folder when none is chosen, is appended to ``refused`` when given: it is nobody's id."""
    if not Path(submitted).is_dir():
        return []
    found = []
    for student in sorted(Path(submitted).iterdir()):
        if not (student.is_dir() and _wanted(student.name, students)):
            continue
        chosen = [a.name for a in sorted(student.iterdir()) if a.is_dir() and _wanted(a.name, assignments)]
        if plain_name(student.name):
            found += [(student.name, assignment) for assignment in chosen]
        elif refused is not None and (chosen or not assignments):
            refused.append(student.name)
    return found


def _wanted(name: str, chosen) -> bool:
    return not name.startswith(".") and (not chosen or name in chosen)


# nbgrader's CourseDirectory defaults (tests/test_pipeline.py compares them with nbgrader's own)
FOLDER_DEFAULTS = {
    "source": "source",
    "release": "release",
    "submitted": "submitted",
    "autograded": "autograded",
    "feedback": "feedback",
}


@dataclass(frozen=True)
class Folders:
    """The course's folders as its nbgrader_config.py names them (``CourseDirectory.*_directory``),
    absolute: the one source, so that no step spells "solutions" or "submitted" itself. Built by
    ``course.Course.folders``."""

    root: Path
    source: Path  # the instructor's notebooks (this course: solutions)
    release: Path  # what students get (this course: notebooks)
    submitted: Path
    autograded: Path
    feedback: Path

    @classmethod
    def named(cls, root: Path, section) -> Folders:
        """The folders of the course at ``root`` that a configuration's ``CourseDirectory``
        ``section`` names, nbgrader's defaults for the others."""
        names = {k: section.get(f"{k}_directory", default) for k, default in FOLDER_DEFAULTS.items()}
        return cls(root, **{k: root / v for k, v in names.items()})

    def moved(self, root: Path) -> Folders:
        """These folders, for a course at ``root`` that names them as this one does (``course
        check``'s throw-away course): each folder under this root moves, the others stay."""
        return Folders(
            root,
            **{
                k: root / getattr(self, k).relative_to(self.root)
                if getattr(self, k).is_relative_to(self.root)
                else getattr(self, k)
                for k in FOLDER_DEFAULTS
            },
        )

    def shown(self, folder: Path) -> str:
        """``folder`` as a message names it: from the root when it lies under the root."""
        try:
            return str(folder.relative_to(self.root))
        except ValueError:
            return str(folder)

    def source_of(self, assignment: str) -> Path:
        return self.source / assignment

    def source_notebook(self, assignment: str, name: str | None = None) -> Path:
        return self.source_of(assignment) / (name or f"{assignment}.ipynb")
