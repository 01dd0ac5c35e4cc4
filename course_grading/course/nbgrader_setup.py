"""nbgrader set-up shared by every pipeline step: a ``Course``'s CourseDirectory and gradebook,
a grading run (``GradingRun``), running a converter in-process, generating an assignment.

Every step takes the ``Course`` (or its root, the folder holding ``nbgrader_config.py``), so
tests can run the pipeline on a small course in a temporary folder. nbgrader's log goes to the
``course_grading.nbgrader`` logger, which prints nothing unless a handler is added
(``course -v``).
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook
from nbgrader.converters import Autograde, GenerateAssignment
from nbgrader.coursedir import CourseDirectory
from nbgrader.preprocessors import SaveCells
from sqlalchemy.exc import SQLAlchemyError

from course_grading.course.course import Course
from course_grading.errors import from_converter, gradebook_error
from course_grading.grading.nbgrader_patches import record_failures
from course_grading.preprocessors import ExplainUndefinedNames, LimitedExecute, RequireSetup, SanitizeNotebook
from course_grading.sandbox import bubblewrap

LOG = logging.getLogger("course_grading.nbgrader")
LOG.setLevel(logging.INFO)
LOG.propagate = False
LOG.addHandler(logging.NullHandler())


# --------------------------------------------------------------------------- configuration


@dataclass(frozen=True)
class GradingRun:
    """What one grading run is: a ``Course`` and that run's flags: which submissions, which
    gradebook, and how they are treated. One typed value that travels unchanged to every
    worker (picklable, the course's configuration with it).

    ``course`` configures nbgrader (the instructor's, trusted); ``root`` is the folder graded
    in when it is not the course's own (``course check``'s throw-away course); ``db_url`` None
    is the course's gradebook.
    """

    course: Course
    submitted: str
    root: str | None = None
    db_url: str | None = None
    sandbox: bool = False
    audit: bool = False

    @property
    def graded(self) -> Course:
        """The course whose folders are graded in: the course, or the throw-away one at ``root``."""
        return self.course if self.root is None else Course(self.root)

    def course_directory(self, **traits) -> CourseDirectory:
        """The CourseDirectory of this run; ``traits``: nbgrader's (student_id, assignment_id,
        a staged ``submitted_directory``, ...)."""
        traits.setdefault("submitted_directory", self.submitted)
        return course_directory(
            self.course, root=self.root, db_url=self.db_url, sandbox=self.sandbox, **traits
        )


def course_directory(
    course, *, root=None, db_url: str | None = None, sandbox: bool = False, **traits
) -> CourseDirectory:
    """A CourseDirectory configured from ``course``'s configuration (a ``Course``, or its
    root), for the course folders at ``root`` (default the course's own), with ``db_url`` when
    given (else the configuration's, which follows ``root``). ``sandbox=True`` runs every
    grading kernel in bubblewrap with the course folders hidden. ``traits`` set nbgrader's own
    traits (student_id, assignment_id, release_directory, ...)."""
    course = Course.of(course)
    config = course.config_copy()
    if "extra_arguments" not in config.Execute:  # the kernel's own log warnings stay quiet
        config.Execute.extra_arguments = ["--IPKernelApp.log_level=ERROR"]
    if "autograde_preprocessors" not in config.Autograde:  # as nbgrader_config.py sets them
        config.Autograde.autograde_preprocessors = autograde_preprocessors()
    config.Autograde.autograde_preprocessors = sanitized_last(config.Autograde.autograde_preprocessors)
    coursedir = CourseDirectory(config=config, log=LOG)
    coursedir.root = str(Path(root if root is not None else course.root).resolve())
    if sandbox:
        bubblewrap.configure(config, coursedir.root, course.root)
    if db_url:
        coursedir.db_url = db_url
    for name, value in traits.items():
        setattr(coursedir, name, value)
    return coursedir


def autograde_preprocessors() -> list:
    """nbgrader's autograde steps with Execute replaced by LimitedExecute, then RequireSetup
    and ExplainUndefinedNames (what nbgrader_config.py configures)."""
    default = Autograde.class_traits()["autograde_preprocessors"].default()
    steps = []
    for step in default:
        steps += (
            [LimitedExecute, RequireSetup, ExplainUndefinedNames] if step.__name__ == "Execute" else [step]
        )
    return sanitized_last(steps)


def sanitized_last(steps: list) -> list:
    """``steps`` (classes or dotted names) with SanitizeNotebook last: what autograded/ holds
    is inert in any page that shows it, whatever nbgrader_config.py lists."""
    from traitlets.utils.importstring import import_item

    kept = [s for s in steps if (import_item(s) if isinstance(s, str) else s) is not SanitizeNotebook]
    return [*kept, SanitizeNotebook]


def gradebook(coursedir: CourseDirectory) -> Gradebook:
    """The gradebook of ``coursedir``; GradebookError (one line) when it cannot be opened."""
    try:
        return Gradebook(coursedir.db_url, coursedir.course_id)
    except SQLAlchemyError as exc:
        raise gradebook_error(coursedir.db_url, exc) from None


# --------------------------------------------------------------------------- running nbgrader


def run_converter(converter) -> None:
    """Start an nbgrader converter, keeping its log; raise a typed GradingError if it fails:
    GradebookBusy (another grader at the same rows: retry), GradebookError, NbgraderFailure
    (``cause``: what nbgrader caught inside; its log is kept, never parsed)."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    LOG.addHandler(handler)
    recorded: list[BaseException] = []
    record_failures(converter, recorded)
    try:
        converter.start()
    except Exception as exc:
        raise from_converter(
            converter.coursedir.db_url, recorded[-1] if recorded else None, exc, buffer.getvalue()
        ) from exc
    finally:
        LOG.removeHandler(handler)


def generate(
    course, assignment: str, release_dir, record=True, *, root=None, db_url: str | None = None
) -> None:
    """nbgrader generate_assignment of one assignment into ``release_dir``. With ``record``
    it also records the assignment (its cells, hidden tests included) in the gradebook, which
    autograde needs; without, no gradebook is opened (SaveCells only writes to it)."""
    coursedir = course_directory(
        course, root=root, db_url=db_url, release_directory=str(release_dir), assignment_id=assignment
    )
    converter = GenerateAssignment(coursedir=coursedir, config=coursedir.config, log=LOG)
    converter.force = True
    converter.create_assignment = True
    if not record:
        converter.no_database = True
        converter.preprocessors = [p for p in converter.preprocessors if p is not SaveCells]
    run_converter(converter)
