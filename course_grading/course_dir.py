"""Where a course lives and what was submitted to it: plain folder walks, no nbgrader import
(the ``course`` entry point uses them before anything heavy is loaded)."""
from __future__ import annotations

from pathlib import Path

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


def find_submissions(submitted: Path, students=None, assignments=None) -> list[tuple[str, str]]:
    """(student, assignment) for each folder ``submitted/<student>/<assignment>/``."""
    if not Path(submitted).is_dir():
        return []
    return [(s.name, a.name)
            for s in sorted(Path(submitted).iterdir()) if s.is_dir() and _wanted(s.name, students)
            for a in sorted(s.iterdir()) if a.is_dir() and _wanted(a.name, assignments)]


def _wanted(name: str, chosen) -> bool:
    return not name.startswith(".") and (not chosen or name in chosen)
