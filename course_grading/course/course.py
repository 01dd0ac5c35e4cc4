"""The course a command works on, as one value: ``Course``.

A command builds it once where it starts (``commands.cli.find_course``: ``--root``,
``COURSE_ROOT``, the instructor's Jupyter configuration or the installed clone,
``course_dir.search_root``'s rule) and hands it down; a grading run is a ``Course`` plus that run's flags
(``nbgrader_setup.GradingRun``). It holds:

* the root, and its ``nbgrader_config.py`` loaded once (``config``; nothing else in the
  package executes that file: ``config.load`` is its one reader);
* the folders (``folders``: ``CourseDirectory``'s ``*_directory`` traits, absolute paths;
  nothing else joins a course folder's name to the root);
* the gradebook URL (``db_url``), the sandbox settings (``sandbox_settings``) and the notebook
  bounds (``notebook_bounds``).

Loading is lazy and cheap: importing this module loads no nbgrader, and a command that never
asks for the configuration never reads it. A ``Course`` pickles with its configuration, so a
grading worker receives the configuration its command read.
"""

from __future__ import annotations

import copy
from pathlib import Path

from course_grading.course import config as course_config
from course_grading.course.course_dir import Folders
from course_grading.errors import GradingError
from course_grading.untrusted import NotebookBounds

CONFIG_FILE = course_config.CONFIG_FILES[0]


class Course:
    """One course directory and what its configuration says (see the module's docstring)."""

    def __init__(self, root):
        self.root = Path(root).resolve()
        self._config = None
        self._sandbox: dict = {}

    @classmethod
    def of(cls, course) -> Course:
        """``course`` itself when it is a Course, else the course at that path."""
        return course if isinstance(course, Course) else cls(course)

    def __repr__(self) -> str:
        return f"Course({str(self.root)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Course) and other.root == self.root

    def __hash__(self) -> int:
        return hash(self.root)

    # ------------------------------------------------------------------ configuration

    @property
    def config_file(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def config(self):
        """The traitlets config of the course's ``nbgrader_config.py``, read once (GradingError
        when the root has none). Shared: copy it (``config_copy``) before changing it."""
        if self._config is None:
            if not self.config_file.is_file():
                raise GradingError(f"{self.root} is not a course directory: it has no {CONFIG_FILE}")
            self._config = course_config.load(self.config_file)
        return self._config

    def config_copy(self):
        """A copy of ``config`` that its user may change (nbgrader's objects set traits)."""
        return copy.deepcopy(self.config)

    # ------------------------------------------------------------------ what it says

    @property
    def folders(self) -> Folders:
        """The course's folders as its configuration names them; nbgrader's defaults (its
        ``CourseDirectory``) where it does not. A root without a configuration has the defaults."""
        section = self.config.CourseDirectory if self.config_file.is_file() else {}
        return Folders.named(self.root, section)

    @property
    def db_url(self) -> str:
        """The gradebook: ``CourseDirectory.db_url`` of the configuration, else nbgrader's
        default, ``sqlite:///<root>/gradebook.db``."""
        return self.config.CourseDirectory.get("db_url") or f"sqlite:///{self.root / 'gradebook.db'}"

    @property
    def notebook_bounds(self) -> NotebookBounds:
        """What the grader parses of a notebook someone else wrote (``c.NotebookBounds``)."""
        return NotebookBounds.from_config(self.config)

    def sandbox_settings(self, *roots):
        """The settings every sandbox of this course is started with, hiding ``roots`` too
        (``sandbox.settings.course_settings``)."""
        from course_grading.sandbox.settings import course_settings

        if roots not in self._sandbox:
            self._sandbox[roots] = course_settings(self.config, self.root, *roots)
        return self._sandbox[roots]

    def markers(self):
        """The solution and hidden-test markers of the course's source notebooks."""
        from course_grading.authoring.cells import Markers

        return Markers.from_config(self.config)

    def source_assignments(self) -> list[str]:
        """Names of the assignments in the source folder (folders holding a notebook)."""
        source = self.folders.source
        if not source.is_dir():
            return []
        return sorted(d.name for d in source.iterdir() if d.is_dir() and any(d.glob("*.ipynb")))

    def select_assignments(self, requested) -> list[str]:
        """``requested`` (all of them when empty), after checking each is in the source folder."""
        known = self.source_assignments()
        unknown = [a for a in requested or [] if a not in known]
        if unknown:
            raise GradingError(
                f"unknown assignment {unknown[0]!r} ({self.folders.source.name}/ has: "
                f"{', '.join(known) or 'none'})"
            )
        return list(requested) if requested else known


__all__ = ["Course", "Folders"]
