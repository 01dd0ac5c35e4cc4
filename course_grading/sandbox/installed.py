"""Grading imports the installed course only.

A Python process puts its current directory on ``sys.path`` in several ways (``python -m``,
``python -c``, which is how multiprocessing starts its fork server, IPython's kernels); run
from a folder that holds a ``course_utils/`` (an older copy of the course, or a student's
submission) it would import that instead of the installed package, and grade with it. So:

* ``safe_path`` drops '', relative entries and the current directory from a ``sys.path``;
* ``safe_start`` is what a helper process (the fork server) is started within: that path, no
  current directory on its own path (``PYTHONSAFEPATH``), the root folder as its directory;
* ``verify`` compares the course packages this process has imported with the installed
  distribution's; ``ImportMismatch`` (an error row for the submission) when they differ.

The sandboxed processes import from ``python -I`` (no such entries) and add a kernel's own
folder after the installed packages (``warm_server``).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

DISTRIBUTION = "attention-course"
PACKAGES = ("course_utils", "course_grading")


class ImportMismatch(RuntimeError):
    """This process imports a copy of the course other than the installed one."""


@functools.lru_cache(maxsize=1)
def installed_locations() -> dict[str, Path] | None:
    """Where the installed distribution keeps each course package (an editable install: in
    its project folder); None when the course is not installed as a distribution."""
    from importlib import metadata

    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    try:
        direct = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        direct = {}
    if direct.get("dir_info", {}).get("editable") and str(direct.get("url", "")).startswith("file:"):
        project = Path(unquote(urlparse(direct["url"]).path))
        return {name: (project / name).resolve() for name in PACKAGES}
    return {name: Path(str(dist.locate_file(name))).resolve() for name in PACKAGES}


def verify() -> None:
    """ImportMismatch unless every course package imported here is the installed one."""
    expected = installed_locations()
    if expected is None:
        return
    for name in PACKAGES:
        module = sys.modules.get(name)
        if module is None:
            continue
        if getattr(module, "__file__", None):
            found = {Path(module.__file__).resolve().parent}
        else:  # a namespace package: every folder it would import from
            found = {Path(p).resolve() for p in getattr(module, "__path__", []) if os.path.isdir(p)}
        if found != {expected[name]}:
            where = ", ".join(sorted(str(f) for f in found))
            raise ImportMismatch(
                f"this grader imports {name} from {where}, not the installed "
                f"course ({expected[name]}): grading stopped (start it from "
                "another folder, or reinstall the course)"
            )


def safe_path(entries, cwd: str | None = None) -> list[str]:
    """``entries`` (a sys.path) without '', relative entries and the current directory."""
    here = os.path.realpath(cwd or os.getcwd())
    return [p for p in entries if p and os.path.isabs(p) and os.path.realpath(p) != here]


@contextlib.contextmanager
def safe_start():
    """Within it, a process started by this one (multiprocessing's fork server) puts no
    current directory on its path and starts in ``/``; sys.path and the rest are restored."""
    saved_path, saved_cwd = list(sys.path), os.getcwd()
    saved_env = os.environ.get("PYTHONSAFEPATH")
    sys.path[:] = safe_path(sys.path, saved_cwd)
    os.environ["PYTHONSAFEPATH"] = "1"
    os.chdir("/")
    try:
        yield
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        if saved_env is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = saved_env
