"""``RefuseLinks``: plain ``nbgrader autograde`` grades nothing of a submission through a link.

nbgrader reads the submitted notebook and copies the submission's other files following
symbolic links: a notebook that links to the solutions, or a student folder that links to
another student's, would be graded as this student's work. First in
``Autograde.sanitize_preprocessors``, before any of the student's code runs, this raises
``LinkedSubmission`` when the student's folder, the assignment's folder or anything in it is a
symbolic link or not a regular file or folder: nbgrader then reports the submission as failed
and records no score. (``course autograde`` grades a copy that follows no link and leaves such
files out instead; this finds nothing there.)
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from nbgrader.preprocessors import NbGraderPreprocessor

from ..untrusted import SKIPPED, what_is


class LinkedSubmission(Exception):
    """A submission holding a symbolic link or a special file: not graded."""


class RefuseLinks(NbGraderPreprocessor):
    """Raise LinkedSubmission when the submission being sanitized holds a link (see above)."""

    def preprocess(self, nb, resources):
        folder = (resources.get("metadata") or {}).get("path")
        if folder:
            problem = linked(Path(folder))
            if problem:
                raise LinkedSubmission(f"{problem}: not graded")
        return nb, resources


def linked(folder: Path) -> str:
    """'' when ``folder`` (a submission's) and its parent (the student's) are real folders
    holding only regular files and folders, else what is not ("<path> is a symbolic link")."""
    for path in (folder.parent, folder):
        mode = os.lstat(path).st_mode
        if not stat.S_ISDIR(mode):
            return f"{path} is {what_is(mode)}"
    for top, dirs, files in os.walk(folder):  # os.walk does not follow links to folders
        dirs[:] = [d for d in dirs if d not in SKIPPED]
        for name in dirs + files:
            mode = os.lstat(os.path.join(top, name)).st_mode
            if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                return f"{os.path.join(top, name)} is {what_is(mode)}"
    return ""
