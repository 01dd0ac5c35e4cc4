"""The ``course`` command: open the course, and run its nbgrader pipeline.

    course start [--no-browser] [--port N]      JupyterLab on the first notebook
    course check PATH                           grade your own notebook (hidden tests included)
    course release [ASSIGNMENT ...] [--check]   solutions/ -> notebooks/
    course autograde [ASSIGNMENT ...] [--student S ...] [--jobs N] [--csv PATH] [--db URL] [--no-report]
    course feedback [ASSIGNMENT ...] [--student S ...] [--db URL]
    course export [--to PATH] [--db URL]
    course report [ASSIGNMENT ...] [--db URL]   class report: reports/class_report.csv and .png

Bad input ends with one line ``course: error: ...`` on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

from . import grader, report
from .course_dir import search_root

FIRST_NOTEBOOK = "notebooks/01_embeddings/01_embeddings.ipynb"
EXPORT_CSV = Path("reports") / "export.csv"
NO_SANDBOX_HELP = ("run student code WITHOUT the bubblewrap sandbox (it can then read and "
                   "change the gradebook); a warning says so")
DB_HELP = ("gradebook database URL, e.g. postgresql://user@host/grades (default: "
           "CourseDirectory.db_url in nbgrader_config.py, else sqlite:///<root>/gradebook.db)")


def main(argv=None) -> int:
    """Run the ``course`` command with ``argv`` (default: sys.argv[1:]); return the exit status."""
    args = build_parser().parse_args(argv)
    verbose = getattr(args, "verbose", False)
    handler = _log_to_stderr() if verbose else None
    try:
        with warnings.catch_warnings():
            if not verbose:
                warnings.simplefilter("ignore")
            return args.run(args, find_root(getattr(args, "root", None)))
    except (grader.GradingError, OSError) as exc:
        print(f"course: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("course: interrupted", file=sys.stderr)
        return 130
    finally:
        if handler:
            grader.LOG.removeHandler(handler)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each subcommand stores its function as ``run``."""
    # Accepted before or after the subcommand; SUPPRESS keeps a subparser from resetting them.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="show nbgrader's log")
    common.add_argument("--root", default=argparse.SUPPRESS,
                        help="course directory (default: the one holding the current directory, "
                             "else this installation's)")
    parser = argparse.ArgumentParser(prog="course", description=__doc__.splitlines()[0],
                                     parents=[common])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    start = sub.add_parser("start", parents=[common], help="open the course in JupyterLab")
    start.add_argument("--no-browser", action="store_true", help="do not open a browser")
    start.add_argument("--port", type=_positive_int, help="port for JupyterLab")
    start.set_defaults(run=cmd_start)

    check = sub.add_parser("check", parents=[common], help="grade your notebook with the hidden tests")
    check.add_argument("path", help="your notebook (or the folder holding it)")
    check.add_argument("--no-sandbox", action="store_true", help=NO_SANDBOX_HELP)
    check.set_defaults(run=cmd_check)

    release = sub.add_parser("release", parents=[common], help="regenerate notebooks/ from solutions/")
    release.add_argument("assignments", nargs="*", metavar="ASSIGNMENT")
    release.add_argument("--check", action="store_true",
                         help="write nothing; exit 1 if notebooks/ is out of date")
    release.set_defaults(run=cmd_release)

    autograde = sub.add_parser("autograde", parents=[common], help="grade submitted/ in parallel")
    autograde.add_argument("assignments", nargs="*", metavar="ASSIGNMENT")
    autograde.add_argument("--student", nargs="+", action="extend", metavar="S", help="only these students")
    autograde.add_argument("--jobs", type=_positive_int, help="worker processes (default: CPU count)")
    autograde.add_argument("--csv", help=f"grades file (default: {grader.GRADES_CSV})")
    autograde.add_argument("--db", help=DB_HELP)
    autograde.add_argument("--no-report", action="store_true",
                           help="skip the class report (one job per submission: run `course report` at the end)")
    autograde.add_argument("--no-sandbox", action="store_true", help=NO_SANDBOX_HELP)
    autograde.add_argument("--no-audit", action="store_true",
                           help="skip the integrity audit and the red-flag scan")
    autograde.set_defaults(run=cmd_autograde)

    feedback = sub.add_parser("feedback", parents=[common], help="HTML feedback into feedback/")
    feedback.add_argument("assignments", nargs="*", metavar="ASSIGNMENT")
    feedback.add_argument("--student", nargs="+", action="extend", metavar="S", help="only these students")
    feedback.add_argument("--db", help=DB_HELP)
    feedback.set_defaults(run=cmd_feedback)

    export = sub.add_parser("export", parents=[common], help="nbgrader's CSV export of the gradebook")
    export.add_argument("--to", help=f"CSV file (default: {EXPORT_CSV})")
    export.add_argument("--db", help=DB_HELP)
    export.set_defaults(run=cmd_export)

    class_report = sub.add_parser("report", parents=[common],
                                  help="class report from the gradebook: pass rates, scores, failures")
    class_report.add_argument("assignments", nargs="*", metavar="ASSIGNMENT")
    class_report.add_argument("--db", help=DB_HELP)
    class_report.set_defaults(run=cmd_report)
    return parser


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return int(text)


def _log_to_stderr() -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("[nbgrader] %(levelname)s %(message)s"))
    grader.LOG.addHandler(handler)
    return handler


def find_root(explicit=None) -> Path:
    """The course directory: ``explicit``, else the nearest folder above the current directory
    holding nbgrader_config.py, else the directory this package was installed from."""
    root = search_root(explicit)
    if root is None:
        raise grader.GradingError("not inside a course directory (no nbgrader_config.py found); use --root")
    if not (root / "nbgrader_config.py").is_file():
        raise grader.GradingError(f"{root} is not a course directory: it has no nbgrader_config.py")
    return root


# --------------------------------------------------------------------------- commands

def cmd_start(args, root: Path) -> int:
    """JupyterLab at the course root, on the first notebook when it exists."""
    command = [_jupyter(), "lab", f"--ServerApp.root_dir={root}"]
    if (root / FIRST_NOTEBOOK).is_file():
        command.append(FIRST_NOTEBOOK)
    if args.no_browser:
        command.append("--no-browser")
    if args.port:
        command.append(f"--port={args.port}")
    if getattr(os, "geteuid", lambda: -1)() == 0:
        command.append("--allow-root")
    return subprocess.call(command, cwd=root)


def _jupyter() -> str:
    """The ``jupyter`` next to this Python (the course's environment), else the one on PATH."""
    beside = Path(sys.executable).with_name("jupyter")
    found = str(beside) if beside.is_file() else shutil.which("jupyter")
    if not found:
        raise grader.GradingError("jupyter is not installed in this environment (run scripts/setup.sh)")
    return found


def cmd_check(args, root: Path) -> int:
    """PASS/FAIL per exercise and the total; exit 0 only if everything passes."""
    result = grader.check(args.path, root, sandboxed=not args.no_sandbox)
    if result.error:
        print(f"course: error: grading failed: {result.error}", file=sys.stderr)
        return 1
    width = max((len(e.grade_id) for e in result.exercises), default=0)
    for e in result.exercises:
        print(f"{'PASS' if e.passed else 'FAIL'}  {e.grade_id.ljust(width)}  {e.score:g}/{e.max_score:g}")
        if not e.passed and e.message:  # the whole message: its end is usually the hint
            print(textwrap.fill(e.message, width=96, initial_indent="      ",
                                subsequent_indent="      ", break_on_hyphens=False))
    print(f"total  {result.score:g}/{result.max_score:g}")
    if result.flags:
        print(grader.format_flags([result]))
    return 0 if all(e.passed for e in result.exercises) else 1


def cmd_release(args, root: Path) -> int:
    """Write the changed release files, or with --check list them and exit 1."""
    changed = grader.release(root, args.assignments or None, check_only=args.check)
    if args.check and changed:
        print("notebooks/ is out of date (run `course release`):")
        print("\n".join(f"  {path}" for path in changed))
        return 1
    for path in changed:
        print(f"wrote {path}")
    if not changed:
        print("notebooks/ is up to date")
    return 0


def cmd_autograde(args, root: Path) -> int:
    """The score table and CSV; exit 1 only if grading broke for some submission."""
    results = grader.autograde(root, students=args.student, assignments=args.assignments or None,
                               jobs=args.jobs, db_url=args.db, sandboxed=not args.no_sandbox,
                               audit=not args.no_audit)
    print(grader.format_table(results))
    csv_path = grader.write_csv(results, args.csv or root / grader.GRADES_CSV)
    print(f"\ngrades: {csv_path}")
    if not args.no_audit:
        flags = grader.format_flags(results)
        print(f"\n{flags}" if flags else "\nno red flags")
        print(f"flags: {grader.write_flags_csv(results, csv_path.parent / grader.FLAGS_CSV.name)}")
    if not args.no_report:
        print("class report: {}, {}".format(*report.write_report(results, root)))
    broken = [r for r in results if r.error]
    for r in broken:
        print(f"course: error: grading failed for {r.student}/{r.assignment}: {r.error}", file=sys.stderr)
    return 1 if broken else 0


def cmd_feedback(args, root: Path) -> int:
    """One HTML file per autograded submission."""
    for path in grader.feedback(root, args.assignments or None, args.student, db_url=args.db):
        print(path.relative_to(root))
    return 0


def cmd_export(args, root: Path) -> int:
    """nbgrader's CSV export (one row per student and assignment)."""
    print(grader.export(root, args.to or root / EXPORT_CSV, db_url=args.db))
    return 0


def cmd_report(args, root: Path) -> int:
    """The class report of every autograded submission in the gradebook."""
    results = report.gradebook_results(root, args.assignments or None, db_url=args.db)
    if not results:
        raise grader.GradingError("no autograded submissions in the gradebook: run `course autograde` first")
    for path in report.write_report(results, root):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
