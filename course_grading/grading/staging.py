"""Where a submission is staged: the grader's own copy of ``submitted/<student>/<assignment>/``,
made without following a link (``untrusted.copy_tree``), before nbgrader grades it.

``stage`` copies a submission and says what it left out (a link, a special file, a file over
its cap, a notebook beyond the bounds, a module that would shadow an installed one or one the
assignment ships); a submission whose notebook was left out, or whose folder is a link, is
refused (``SubmissionRefused``, flagged). ``expect_notebooks`` refuses a submission that holds
no notebook of the assignment.
"""

from __future__ import annotations

import os
from pathlib import Path

from nbgrader.coursedir import CourseDirectory

from course_grading import untrusted
from course_grading.course.nbgrader_setup import gradebook
from course_grading.errors import GradingError, SubmissionRefused
from course_grading.grading.red_flags import Flag

FILES_FLAG = "files"  # Flag.where of what is wrong with a submission's files


def stage(
    coursedir: CourseDirectory,
    submitted: Path,
    student: str,
    assignment: str,
    stage: Path,
    bounds: untrusted.NotebookBounds = untrusted.NOTEBOOK_BOUNDS,
) -> list[Flag]:
    """``stage_copy`` of the submission, with the notebooks and modules of the assignment's
    source folder in ``coursedir``."""
    return stage_copy(
        submitted,
        student,
        assignment,
        stage,
        expected_notebooks(coursedir, assignment),
        _provided_modules(source_of(coursedir, assignment)),
        bounds,
    )


def stage_copy(
    submitted: Path,
    student: str,
    assignment: str,
    stage: Path,
    notebooks: list[str],
    provided: frozenset[str] = frozenset(),
    bounds: untrusted.NotebookBounds = untrusted.NOTEBOOK_BOUNDS,
) -> list[Flag]:
    """Copy ``submitted/<student>/<assignment>/`` to ``stage/<student>/<assignment>/``,
    following no symbolic link (``untrusted.copy_tree``); return a flag for each file left
    out (a link, a FIFO or other special file, a file over its size cap, a notebook beyond
    ``bounds``, a module or package that the kernel would import instead of an installed one
    or one of ``provided``, the modules the assignment ships: the kernel runs in this folder,
    which comes before site-packages on its sys.path).

    SubmissionRefused, flagged, when the student's or the assignment's folder is a link (or
    not a folder), or when one of ``notebooks`` (the assignment's notebook file names) was
    left out: nothing of a submission is graded through a link.
    """
    where = f"submitted/{student}"
    if not (untrusted.plain_name(student) and untrusted.plain_name(assignment)):
        raise SubmissionRefused(f"{where}/{assignment} is not a plain folder name: not graded", [])
    try:
        base = untrusted.open_folder(submitted)  # the instructor's own folder
    except OSError as exc:
        raise GradingError(f"cannot read {submitted}: {exc}") from None
    try:
        try:
            student_fd = untrusted.open_folder(student, dir_fd=base, label=where)
        except untrusted.UntrustedFileError as exc:
            raise _refused(f"{exc}: not graded") from None
        try:
            left = untrusted.copy_tree(
                assignment,
                stage / student / assignment,
                dir_fd=student_fd,
                label=f"{where}/{assignment}",
                notebook_bounds=bounds,
            )
        except untrusted.UntrustedFileError as exc:
            raise _refused(f"{exc}: not graded") from None
        finally:
            os.close(student_fd)
    finally:
        os.close(base)
    left += _shadowing(stage / student / assignment, provided)
    flags, refusal = [], ""
    for item in left:
        if item.path in notebooks and not refusal:
            refusal = f"{where}/{assignment}/{item}: not graded"
            flags.append(Flag(FILES_FLAG, refusal))
        else:
            flags.append(Flag(FILES_FLAG, f"{where}/{assignment}/{item}: left out"))
    if refusal:
        raise SubmissionRefused(refusal, flags)
    return flags


def _shadowing(folder: Path, provided: frozenset[str]) -> list[untrusted.LeftOut]:
    """Remove from a staged submission each top-level module or package whose name is an
    importable module or one of ``provided``; what was removed, and why."""
    import importlib.util
    import shutil

    found = []
    for entry in sorted(folder.iterdir()):
        name = _module_name(entry)
        if not name:
            continue
        try:
            importable = name in provided or importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            importable = False
        if importable:
            shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
            found.append(untrusted.LeftOut(entry.name, f"would be imported instead of the module {name!r}"))
    return found


def _module_name(entry: Path) -> str:
    """The module name under which Python could import ``entry`` from its folder, or ''."""
    if entry.is_dir():
        name = entry.name
    elif entry.suffix in (".py", ".pyc", ".pyw", ".so", ".pyd"):
        name = entry.name.split(".", 1)[0]
    else:
        return ""
    return name if name.isidentifier() else ""


def _provided_modules(source: Path) -> frozenset[str]:
    """Module names of the files an assignment ships beside its notebook (building_blocks)."""
    try:
        return frozenset(filter(None, (_module_name(p) for p in source.iterdir() if p.suffix == ".py")))
    except OSError:
        return frozenset()


def _refused(message: str) -> SubmissionRefused:
    return SubmissionRefused(message, [Flag(FILES_FLAG, message)])


def expected_notebooks(coursedir: CourseDirectory, assignment: str) -> list[str]:
    """The file names of the assignment's notebooks: those of its source folder, or, without
    one, those the gradebook knows (which another grader sharing it may be recording at this
    moment, with no notebook yet)."""
    names = sorted(p.name for p in source_of(coursedir, assignment).glob("*.ipynb") if p.is_file())
    if names:
        return names
    with gradebook(coursedir) as gb:
        return sorted(f"{n.name}.ipynb" for n in gb.find_assignment(assignment).notebooks)


def source_of(coursedir: CourseDirectory, assignment: str) -> Path:
    """The assignment's folder in the source folder of ``coursedir``."""
    return Path(coursedir.format_path(coursedir.source_directory, ".", assignment))


def expect_notebooks(coursedir: CourseDirectory, student: str, assignment: str) -> None:
    """GradingError unless the submission holds a notebook of the assignment, by name
    (nbgrader would only say "did you forget to run generate_assignment?")."""
    folder = Path(coursedir.format_path(coursedir.submitted_directory, student, assignment))
    expected = expected_notebooks(coursedir, assignment)
    found = sorted(p.name for p in folder.glob("*.ipynb"))
    if not set(expected) & set(found):
        raise GradingError(
            f"no {' or '.join(expected)} in the submission (found: {', '.join(found) or 'no notebooks'})"
        )
