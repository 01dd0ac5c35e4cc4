"""What each subcommand of the ``course`` command does, given its parsed arguments and the
``Course`` (``cli`` parses, finds the course, and calls one of these). Each imports what it
needs when it runs, so that starting the command stays quick.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from course_grading.course.course import Course

FIRST_NOTEBOOK = "notebooks/01_embeddings/01_embeddings.ipynb"
EXPORT_CSV = Path("reports") / "export.csv"
GRADES_CSV = Path("reports") / "grades.csv"


class UsageError(Exception):
    """Bad input found before any grading module is loaded (no course directory, ...)."""


def _one_line(exc: BaseException) -> str:
    """An error as one line: its lines joined, at most 1000 characters, every control or
    invisible character escaped (``reports_csv.clean``: an error may quote what a student
    named or wrote, and the instructor's terminal must not obey it)."""
    from course_grading.reports.reports_csv import clean

    text = " ".join(ln.strip() for ln in str(exc).splitlines() if ln.strip()) or type(exc).__name__
    text = clean(text, len(text))
    return text if len(text) <= 1000 else text[:999] + "…"


def cmd_start(args, course: Course) -> int:
    """JupyterLab at the course root, on the first notebook when it exists."""
    command = [_jupyter(), "lab", f"--ServerApp.root_dir={course.root}"]
    if (course.root / FIRST_NOTEBOOK).is_file():
        command.append(FIRST_NOTEBOOK)
    if args.no_browser:
        command.append("--no-browser")
    if args.port:
        command.append(f"--port={args.port}")
    if getattr(os, "geteuid", lambda: -1)() == 0:
        command.append("--allow-root")
    return subprocess.call(command, cwd=course.root)


def _jupyter() -> str:
    """The ``jupyter`` next to this Python (the course's environment), else the one on PATH."""
    beside = Path(sys.executable).with_name("jupyter")
    found = str(beside) if beside.is_file() else shutil.which("jupyter")
    if not found:
        raise UsageError("jupyter is not installed in this environment (run scripts/setup.sh)")
    return found


def cmd_check(args, course: Course) -> int:
    """PASS/FAIL per exercise and the total; exit 0 only if everything passes."""
    from course_grading.commands.check import check
    from course_grading.reports.results import format_flags

    result = check(args.path, course, sandboxed=not args.no_sandbox)
    if result.error:
        print(f"course: error: grading failed: {_one_line(result.error)}", file=sys.stderr)
        return 1
    width = max((len(e.grade_id) for e in result.exercises), default=0)
    for e in result.exercises:
        if e.manual:
            _print_written(e, width)
            continue
        print(f"{'PASS' if e.passed else 'FAIL'}  {e.grade_id.ljust(width)}  {e.score:g}/{e.max_score:g}")
        if not e.passed and e.message:  # the whole message: its end is usually the hint
            print(_indented(e.message))
    written = [e for e in result.exercises if e.manual]
    auto = [e for e in result.exercises if not e.manual]
    print(
        f"total  {sum(e.score for e in auto):g}/{sum(e.max_score for e in auto):g}"
        + (
            f" (tests); written answers, graded by hand: {sum(e.max_score for e in written):g} points"
            if written
            else ""
        )
    )
    answers = _model_answers(course, result.assignment) if any(e.pending for e in written) else {}
    for e in written:
        if e.pending and answers.get(e.grade_id):
            print(f"\nModel answer for {e.grade_id}, to compare with yours:")
            print("\n".join(_indented(para) for para in answers[e.grade_id].split("\n\n")))
    if result.flags:
        print(format_flags([result]))
    return 0 if all(e.passed or e.pending for e in result.exercises) else 1


def _indented(text: str) -> str:
    return textwrap.fill(
        text, width=96, initial_indent="      ", subsequent_indent="      ", break_on_hyphens=False
    )


def _print_written(e, width: int) -> None:
    """A written answer in ``course check``: graded by hand, so no PASS or FAIL; one left
    as released is still to write."""
    if e.pending:
        print(
            f"HAND  {e.grade_id.ljust(width)}  ?/{e.max_score:g}  written answer, graded by hand "
            "(an instructor scores it; the model answer is below)"
        )
    else:
        print(
            f"TODO  {e.grade_id.ljust(width)}  0/{e.max_score:g}  written answer, graded by hand: "
            "not answered yet (write it in the cell under the question)"
        )


def _model_answers(course: Course, assignment: str) -> dict[str, str]:
    from course_grading.commands.check import model_answers

    return model_answers(course, assignment)


def cmd_status(args, course: Course) -> int:
    """Every notebook and exercise: ✔ / ✘ / not started; exit 1 only when one could not be graded."""
    from course_grading.commands.status import format_status, timed_status

    def grading(assignment: str) -> None:
        print(f"grading {assignment} …", file=sys.stderr, flush=True)

    found, seconds = timed_status(
        course, args.notebooks, sandboxed=not args.no_sandbox, use_cache=not args.no_cache, on_grading=grading
    )
    print(format_status(found, width=shutil.get_terminal_size((100, 24)).columns))
    graded = sum(n.graded for n in found)
    print(
        f"({graded} notebook{'s' * (graded != 1)} graded, {sum(n.cached for n in found)} unchanged "
        f"since the last run, in {seconds:.1f} s)"
    )
    return 1 if any(n.error for n in found) else 0


def cmd_doctor(args, course: Course) -> int:
    """One line per thing the course needs; exit 1 when one is FAIL."""
    from course_grading.commands.doctor import FAIL, diagnose, format_lines

    lines = diagnose(test=args.test)
    if args.instructor:
        from course_grading.commands.doctor_instructor import diagnose as instructor_lines

        lines += instructor_lines(course.root)
    text = format_lines(lines, quiet=args.quiet)
    if text:
        print(text)
    failed = sum(line.status == FAIL for line in lines)
    if failed or not args.quiet:
        print(
            f"{failed} problem{'s' * (failed != 1)} found"
            if failed
            else "everything the course needs is here"
        )
    if args.start:
        return 1 if any(line.status == FAIL and line.blocks_start for line in lines) else 0
    return 1 if failed else 0


def cmd_release(args, course: Course) -> int:
    """Write the changed release files, or with --check list them and exit 1."""
    from course_grading.authoring.release import release

    changed = release(course, args.assignments or None, check_only=args.check)
    if args.check and changed:
        print("notebooks/ is out of date (run `course release`):")
        print("\n".join(f"  {path}" for path in changed))
        return 1
    for path in changed:
        print(f"wrote {path}")
    if not changed:
        print("notebooks/ is up to date")
    return 0


def cmd_autograde(args, course: Course) -> int:
    """The score table and CSV; exit 1 only if grading broke for some submission."""
    from course_grading.grading.autograde import Interrupted, autograde
    from course_grading.reports import class_report
    from course_grading.reports import results as out

    try:
        results = autograde(
            course,
            students=args.student,
            assignments=args.assignments or None,
            jobs=args.jobs,
            db_url=args.db,
            sandboxed=not args.no_sandbox,
            audit=not args.no_audit,
            resume=args.resume,
        )
    except Interrupted as stop:
        print(
            f"course: interrupted after {stop.graded} of {stop.total} submissions; the same "
            "command with --resume grades the rest (a grade that still stands is kept, an "
            "error row is tried again)",
            file=sys.stderr,
        )
        return 130
    print(out.format_table(results))
    # a run that graded part of the class keeps the class's reports whole (the rest from the
    # gradebook); a file of its own (--csv) holds what this run graded, nothing a grader beside it
    # is writing at the same time
    partial = (args.student or args.assignments) and not args.csv
    reported = class_report.whole_class(results, course, db_url=args.db) if partial else results
    csv_path = out.write_csv(reported, args.csv or course.root / GRADES_CSV)
    print(f"\ngrades: {csv_path}")
    if not args.no_audit or any(r.flags for r in results):  # files left out are flagged anyway
        flags = out.format_flags(results)
        print(f"\n{flags}" if flags else "\nno red flags" + " in this run" * bool(partial))
        graded = {(r.student, r.assignment) for r in results}
        before = sum(1 for r in reported if r.flags and (r.student, r.assignment) not in graded)
        if partial and before:  # the class's file keeps them: say so, not only this run's
            print(f"{before} other submission{'s' * (before != 1)} of the class flagged before")
        print(f"flags: {out.write_flags_csv(reported, csv_path.parent / out.FLAGS_CSV.name)}")
    if not args.no_report:
        print("class report: {}, {}".format(*class_report.write_report(reported, course.root)))
    broken = [r for r in results if r.error]
    for r in broken:
        print(
            f"course: error: grading failed for {r.student}/{r.assignment}: {_one_line(r.error)}",
            file=sys.stderr,
        )
    return 1 if broken else 0


def cmd_feedback(args, course: Course) -> int:
    """One HTML file per autograded submission; exit 1 when some submission got none (one
    line each on stderr)."""
    from course_grading.reports.feedback import FeedbackIncomplete, feedback

    try:
        pages, problems = feedback(course, args.assignments or None, args.student, db_url=args.db), []
    except FeedbackIncomplete as exc:
        pages, problems = exc.pages, exc.problems
    for path in pages:
        print(path.relative_to(course.root))
    from course_grading.reports.feedback import awaiting_manual

    for note in awaiting_manual(course, args.assignments or None, args.student, db_url=args.db):
        print(f"course: note: {note}", file=sys.stderr)
    for problem in problems:
        print(f"course: error: {_one_line(problem)}", file=sys.stderr)
    return 1 if problems else 0


def cmd_export(args, course: Course) -> int:
    """nbgrader's CSV export (one row per student and assignment), or an LMS's import file.
    An option the chosen format would not use is a usage error, never ignored."""
    if args.fill and args.format != "canvas":
        raise UsageError("--fill takes a gradebook downloaded from Canvas: use it with --format canvas")
    if args.fill and args.roster:
        raise UsageError(
            "--roster does not go with --fill: the Canvas file is the class list (its students are filled)"
        )
    if args.match and args.format != "moodle":
        raise UsageError("--match chooses the identifier column of --format moodle only")
    default = EXPORT_CSV if args.format == "nbgrader" else Path("reports") / f"{args.format}.csv"
    to = args.to or course.root / default
    if args.fill:
        from course_grading.reports.lms.canvas import fill

        done = fill(course, args.fill, to, db_url=args.db)
    else:
        from course_grading.reports.grade_exports import export

        done = export(
            course, to, args.format, db_url=args.db, match=args.match or "username", roster=args.roster
        )
    print(done.path)
    for note in done.notes:
        print(f"course: note: {_one_line(note)}", file=sys.stderr)
    for problem in done.problems:
        print(f"course: error: {_one_line(problem)}", file=sys.stderr)
    return 1 if done.problems else 0


def cmd_roster_import(args, course: Course) -> int:
    """Students' names and emails into the gradebook (nbgrader's update_or_create_student)."""
    from course_grading.commands.roster import import_roster

    done = import_roster(course, args.csv, db_url=args.db, id_column=args.id_column)
    print(done.summary(args.csv))
    for note in done.notes:
        print(f"course: note: {_one_line(note)}", file=sys.stderr)
    return 0


def cmd_report(args, course: Course) -> int:
    """The class report of every autograded submission in the gradebook."""
    from course_grading.reports import class_report

    results = class_report.gradebook_results(course, args.assignments or None, db_url=args.db)
    if not results:
        raise UsageError("no autograded submissions in the gradebook: run `course autograde` first")
    for path in class_report.write_report(results, course.root):
        print(path)
    return 0


def cmd_build_student(args, course: Course) -> int:
    """Build the student side into OUT after checking that nothing in it would leak."""
    from course_grading.authoring.student_side import build

    built = build(course, args.out, force=args.force)
    for what, path in built.items():
        print(f"{what}: {path}")
    return 0
