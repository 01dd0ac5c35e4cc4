"""Where a course lives and what was submitted to it: plain folder walks, no nbgrader import
(the ``course`` entry point uses them before anything heavy is loaded)."""
from __future__ import annotations

from pathlib import Path

from .untrusted import plain_name

PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def search_root(explicit=None) -> Path | None:
    """``explicit`` (resolved), else the nearest folder at or above the current directory
    holding nbgrader_config.py, else the directory this package was installed from when it
    holds one; None when there is no such folder."""
    if explicit:
        return Path(explicit).resolve()
    cwd = Path.cwd().resolve()
    for folder in (cwd, *cwd.parents, PACKAGE_ROOT):
        if (folder / "nbgrader_config.py").is_file():
            return folder
    return None


def find_submissions(submitted: Path, students=None, assignments=None,
                     refused: list | None = None) -> list[tuple[str, str]]:
    """(student, assignment) for each folder ``submitted/<student>/<assignment>/`` whose
    student folder's name is a valid student id (``untrusted.plain_name``: ASCII letters,
    digits, ``. _ - @``, at most 128 characters). The name of each other student folder (not
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
