"""The ``course`` command's entry point: when the command will grade a single submission in
this process (``course check``, or ``course autograde`` of one submission or with ``--jobs 1``),
the warm sandbox starts first, so that its imports (torch, IPython, ...) run on another core
while this process imports nbgrader (about 1.4 s), and a thread imports what this process
will need once the kernel has run. Then ``course_utils.cli`` takes over; nothing here
decides anything for it, and any doubt means no early start.
"""
from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from .course_dir import find_submissions, search_root

def main() -> int:
    try:
        warm = _start_early(sys.argv[1:])
    except Exception:  # noqa: BLE001 - an early start is only ever an optimisation
        warm = False
    from .cli import main as cli_main
    if warm:  # after the import above, which it would slow down (one GIL)
        threading.Thread(target=_import_trusted_side, daemon=True).start()
    code = cli_main()
    _exit_now(code)
    return code


def _exit_now(code: int) -> None:
    """End without the interpreter's teardown of torch, matplotlib and nbgrader (0.8 s here).
    Everything the command wrote is closed by then; the sandbox and the logs are closed and
    the streams flushed first."""
    import logging

    from . import sandbox

    sandbox.stop_warm()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _command(argv: list[str]) -> str | None:
    """The subcommand: the first word that is neither an option nor --root's value."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--root":
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _value(argv: list[str], option: str) -> str | None:
    for i, arg in enumerate(argv):
        if arg == option and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    return None


def _single_submission(argv: list[str], root: Path) -> bool:
    """``course autograde`` arguments that grade in this process: --jobs 1, or one submission."""
    if _value(argv, "--jobs") == "1":
        return True
    words = [a for a in argv[argv.index("autograde") + 1:]]
    students, assignments, skip = [], [], False
    mode = "assignments"
    for word in words:
        if skip:
            skip = False
            continue
        if word in ("--jobs", "--csv", "--db", "--root"):
            skip = True
        elif word == "--student":
            mode = "students"
        elif word.startswith("-"):
            mode = "other"
        elif mode == "students":
            students.append(word)
        elif mode == "assignments":
            assignments.append(word)
    return len(find_submissions(root / "submitted", students, assignments)) == 1


def _start_early(argv: list[str]) -> bool:
    """Start the warm sandbox when the command will grade one submission here; whether it did."""
    command = _command(argv)
    if command not in ("check", "autograde") or "--no-sandbox" in argv or os.environ.get("COURSE_NO_WARM"):
        return False
    root = search_root(_value(argv, "--root"))
    if root is None or not (root / "nbgrader_config.py").is_file():
        return False
    if command == "autograde" and not _single_submission(argv, root):
        return False
    from . import sandbox

    sandbox.hide(root)
    return sandbox.start_warm() is not None


def _import_trusted_side() -> None:
    """What this process needs after the kernel has run: torch and the reference
    implementations (the audit compares with them), matplotlib (the class report). Imported
    while this process only waits for the sandbox."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
        import course_utils.reference.generation  # noqa: F401 - torch and the references
        import course_utils.audit  # noqa: F401
    except Exception:  # noqa: BLE001
        pass
