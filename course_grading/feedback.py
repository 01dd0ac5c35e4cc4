"""``course feedback`` and ``course export``: HTML feedback for students (hidden tests and the
hidden lines quoted in tracebacks removed), and nbgrader's CSV export of the gradebook."""
from __future__ import annotations

from pathlib import Path

from nbgrader.converters import GenerateFeedback
from nbgrader.plugins import CsvExportPlugin

from .course_dir import find_submissions
from .nbgrader_setup import LOG, GradingError, course_directory, db_override, gradebook, run_converter
from .preprocessors import ScrubHiddenTracebacks


def feedback(root, assignments=None, students=None, db_url=None) -> list[Path]:
    """nbgrader generate_feedback for the autograded submissions; returns the HTML files."""
    root = Path(root).resolve()
    pairs = find_submissions(root / "autograded", students, assignments)
    if not pairs:
        raise GradingError(f"nothing autograded under {root / 'autograded'}: run `course autograde` first")
    for student, assignment in pairs:
        coursedir = course_directory(root, student_id=student, assignment_id=assignment,
                                     **db_override(db_url))
        converter = GenerateFeedback(coursedir=coursedir, config=coursedir.config, log=LOG)
        if ScrubHiddenTracebacks not in converter.preprocessors:  # nbgrader_config.py lists it first
            converter.preprocessors = [ScrubHiddenTracebacks, *converter.preprocessors]
        converter.force = True
        run_converter(converter)
    return sorted(p for student, assignment in pairs
                  for p in (root / "feedback" / student / assignment).glob("*.html"))


def export(root, path, assignments=None, students=None, db_url=None) -> Path:
    """nbgrader's CSV export of the gradebook (one row per student and assignment) to ``path``."""
    coursedir = course_directory(Path(root).resolve(), **db_override(db_url))
    path = Path(path).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    plugin = CsvExportPlugin(config=coursedir.config, log=LOG)
    plugin.to = str(path)
    plugin.assignment = list(assignments or [])
    plugin.student = list(students or [])
    with gradebook(coursedir) as gb:
        plugin.export(gb)
    return path
