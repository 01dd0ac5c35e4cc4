"""``course autograde``: every submission graded by nbgrader, in parallel, sandboxed, audited.

``autograde`` records what the gradebook lacks (the assignments, generated from solutions/ into a
temporary folder; the students: ``recorded``), then grades ``submitted/<student>/<assignment>/``
in worker processes, one submission each at a time. A broken submission becomes an error row; the others
go on. With ``audit`` each result also carries the red-flag scanner's findings and the
integrity audit's disagreements (``audit.trusted.review``).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

from nbgrader.converters import Autograde
from nbgrader.coursedir import CourseDirectory

from course_grading import untrusted
from course_grading.audit.trusted import review
from course_grading.course.course import Course
from course_grading.course.course_dir import find_submissions
from course_grading.course.nbgrader_setup import LOG, GradingRun, run_converter
from course_grading.errors import GradingError, SubmissionRefused, retriable, short
from course_grading.grading import hand_grades, ledger, nbgrader_patches, staging, workers
from course_grading.grading.progress import Progress
from course_grading.grading.recorded import LOCK_RETRIES, already_graded, how, prepare_gradebook
from course_grading.grading.red_flags import Flag, scan
from course_grading.preprocessors.limited_execute import UNREAD_MESSAGES
from course_grading.reports.results import SubmissionResult, exercise_results
from course_grading.sandbox import bubblewrap, installed, warm
from course_grading.sandbox.settings import Settings

OUTPUT_FLAG = "outputs"  # Flag.where of kernel messages built to cost the grader (LimitedExecute)
INVALID_ID = (
    f"not a valid student id: submitted/{{}} (a student id is ASCII letters, digits and "
    f". _ - @, not starting with . - or @, at most {untrusted.MAX_NAME} characters): not graded"
)
WORKER_FLAG = "grader"  # Flag.where of a submission whose grading worker died


class Interrupted(KeyboardInterrupt):
    """A class run stopped (Ctrl-C, SIGTERM) before every submission was graded: ``graded``
    of ``total`` are graded and recorded (``ledger``), and ``--resume`` grades the rest."""

    def __init__(self, graded: int, total: int):
        super().__init__(f"{graded} of {total} submissions graded")
        self.graded, self.total = graded, total


def autograde(
    course,
    submitted_dir=None,
    students=None,
    assignments=None,
    jobs=None,
    progress=True,
    db_url=None,
    sandboxed=True,
    audit=True,
    resume=False,
) -> list[SubmissionResult]:
    """Grade every submission ``submitted/<student>/<assignment>/`` (optionally filtered).

    The gradebook learns missing assignments from ``solutions/`` (``notebooks/`` is never
    touched) and the students; then ``jobs`` worker processes (default: one per CPU) grade one
    submission each. A broken submission becomes a result with ``error`` set; the rest go on.
    ``course``: a ``Course`` (or its root). Results are sorted by student and assignment.
    ``db_url`` (default: the course's gradebook, ``Course.db_url``) may name a shared PostgreSQL
    gradebook, which several graders can fill at once.

    With ``sandboxed`` every kernel runs in bubblewrap (where it is missing: GradingError, saying
    how to fix it; only ``sandboxed=False`` grades unsandboxed, after a loud warning); with ``audit`` each result carries ``flags``:
    red flags of the scanner and exercises whose points the integrity audit denies.

    Each graded submission is recorded as it comes (``ledger``). With ``resume`` a submission
    whose record still stands (the same files, course version and gradebook, and the
    gradebook still holding its scores) is not graded again: its recorded result is returned.
    Interrupted (KeyboardInterrupt, which the ``course`` command also makes of SIGTERM), it
    raises ``Interrupted``, saying how many were graded.
    """
    course = Course.of(course)
    installed.verify()
    submitted = Path(submitted_dir).resolve() if submitted_dir else course.folders.submitted
    course.select_assignments(assignments)
    refused: list[str] = []
    pairs = find_submissions(submitted, students, assignments, refused)
    invalid = [
        SubmissionResult(untrusted.shown_name(name), "", error=INVALID_ID.format(untrusted.shown_name(name)))
        for name in refused
    ]  # never recorded in the gradebook
    if not pairs:
        if invalid:
            return invalid
        which = " of " + ", ".join(map(repr, students)) if students else ""
        which += " for " + ", ".join(assignments) if assignments else ""
        raise GradingError(f"no submissions{which} to grade under {submitted}")
    known = set(course.source_assignments())
    run = GradingRun(
        course,
        submitted=str(submitted),
        db_url=db_url,
        sandbox=sandbox_available(sandboxed, refuse=True),
        audit=audit,
    )
    tasks = [(run, student, assignment, assignment in known) for student, assignment in pairs]
    earlier: list[SubmissionResult] = []
    if resume:
        earlier, tasks = already_graded(run, tasks)
        if progress and earlier:
            print(
                f"resuming: {len(earlier)} of {len(earlier) + len(tasks)} submissions already "
                f"graded (unchanged since), {len(tasks)} to grade",
                file=sys.stderr,
                flush=True,
            )
        if not tasks:
            return sorted(earlier + invalid, key=lambda r: (r.student, r.assignment))
        pairs = [(t[1], t[2]) for t in tasks]
    for _, student, assignment, _ in tasks:  # graded again: done only once it is, again
        ledger.forget(course.root, student, assignment)
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    warm_here = run.sandbox and jobs == 1
    settings = course.sandbox_settings()
    if warm_here:  # its imports overlap with the gradebook's set-up below
        warm.ensure_warm(settings)
    try:
        prepare_gradebook(run, sorted({a for _, a in pairs} & known), sorted({s for s, _ in pairs}))
        results = _grade_all(
            tasks,
            jobs,
            progress,
            settings if run.sandbox else None,
            settings.grader_memory_mb,
            already=len(earlier),
            ledger_root=course.root,
        )
    finally:
        if warm_here:
            warm.stop_warm()
    return sorted(earlier + results + invalid, key=lambda r: (r.student, r.assignment))


def _grade_all(
    tasks: list[tuple],
    jobs: int,
    progress: bool,
    sandbox: Settings | None = None,
    memory_mb: int = 0,
    *,
    already: int = 0,
    ledger_root=None,
) -> list[SubmissionResult]:
    """Run ``_grade_task`` over ``tasks``, in ``jobs`` worker processes when more than one
    (each starts its warm sandbox with ``sandbox`` settings as soon as it exists, when given; each
    bounded to ``memory_mb`` of its own, when given). A worker that dies costs only the
    submission it held: an error row, flagged (``workers``); the others go on, on a fresh one.

    With ``progress`` each result is shown as it comes (``progress.Progress``: a bar on a
    terminal, a line each otherwise; ``already`` of the whole run were done before); with
    ``ledger_root`` it is recorded there (``ledger.write``). Interrupted: ``Interrupted``."""
    jobs = max(1, min(jobs, len(tasks)))
    results = []
    shown = Progress(already + len(tasks), already=already, workers=jobs) if progress else None
    stop = _Stop()
    unrecorded: list = []

    def done(result: SubmissionResult) -> None:
        if stop.requested:  # graded while the run was being stopped: maybe cut short, not kept
            raise KeyboardInterrupt
        results.append(result)
        if ledger_root is not None:
            try:
                ledger.write(ledger_root, result)
            except OSError as exc:  # grading goes on; only --resume would grade it again
                if not unrecorded:
                    print(
                        f"course: warning: cannot record what was graded ({exc}): --resume will "
                        "grade it again",
                        file=sys.stderr,
                        flush=True,
                    )
                unrecorded.append(result)
        if shown is not None:
            shown.done(result)

    try:
        with stop:
            _dispatch(tasks, jobs, done, sandbox, memory_mb)
    except KeyboardInterrupt:
        raise Interrupted(already + len(results), already + len(tasks)) from None
    finally:
        if shown is not None:
            shown.close()
    return results


class _Stop:
    """While a class run is dispatched (in the main thread): SIGINT and SIGTERM both stop it
    with KeyboardInterrupt, and say so (``requested``) even where something below catches the
    exception (a kernel interrupted with the grader makes a cell fail, not the grading: that
    submission's result is not kept). The handlers before are restored after."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self):
        self.requested = False
        self.before: dict = {}

    def _handle(self, signum, frame) -> None:
        self.requested = True
        raise KeyboardInterrupt

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                self.before[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.before.items():
            signal.signal(signum, handler)


def _dispatch(tasks: list[tuple], jobs: int, done, sandbox: Settings | None, memory_mb: int) -> None:
    """``done(result)`` for each task, graded here (one job) or by ``workers``."""
    if jobs == 1:
        for task in tasks:
            done(_grade_task(*task))
        return

    def finished(index: int, outcome) -> None:
        done(outcome if isinstance(outcome, SubmissionResult) else _worker_failed(tasks[index], outcome))

    context = start_fork_server()
    workers.run(
        _grade_task,
        tasks,
        jobs,
        finished,
        context=context,
        initializer=_start_worker,
        initargs=(_kernel_threads(jobs), sandbox, _warnings_ignored()),
        memory_mb=memory_mb,
    )


def _worker_failed(task: tuple, outcome) -> SubmissionResult:
    """The error row of a submission whose worker died while grading it (flagged: the
    instructor looks at what it does), or whose grading raised past ``_grade_task``."""
    _, student, assignment, _ = task
    if isinstance(outcome, workers.WorkerDied):
        return SubmissionResult(
            student, assignment, error=str(outcome), flags=[Flag(WORKER_FLAG, str(outcome))]
        )
    return SubmissionResult(student, assignment, error=short(str(outcome)))


def _warnings_ignored() -> bool:
    """Whether this process ignores every warning (the ``course`` command does, unless -v):
    a filter that ignores every warning is among the filters. Not only the first one: the
    libraries the command imports after setting it (nbgrader, NumPy) put their own, narrower
    filters in front of it, and the workers then printed nbgrader's SQLAlchemy warnings into
    the instructor's terminal."""
    import warnings

    return any(
        action == "ignore" and message is None and category is Warning and module is None
        for action, message, category, module, _ in warnings.filters
    )


def _start_worker(env: dict[str, str], sandbox: Settings | None, quiet: bool = False) -> None:
    """A grading worker: its kernels' environment, and its warm sandbox, started at once
    (closed when the worker ends). ``quiet``: it ignores warnings, as its dispatcher does
    (nbgrader's SQLAlchemy warnings would break the progress bar's line)."""
    os.environ.pop("PYTHONSAFEPATH", None)  # the fork server's own; unsandboxed kernels need their folder
    os.environ.update(env)
    nbgrader_patches.share_engines()
    nbgrader_patches.validate_schema_once()
    if quiet:
        import warnings

        warnings.simplefilter("ignore")
    if sandbox is not None:
        try:
            warm.ensure_warm(sandbox)
        except Exception:  # noqa: BLE001 - only an early start: the first kernel starts it else
            pass
        multiprocessing.util.Finalize(None, warm.stop_warm, exitpriority=10)


def _kernel_threads(jobs: int) -> dict[str, str]:
    """Share the cores between the parallel kernels: each gets cores // jobs math threads.

    Without this every kernel's torch starts one thread per core, and ``jobs`` kernels on the
    same cores fight over them (much slower than one thread each). An explicit
    ``OMP_NUM_THREADS`` in the environment wins. Set in each worker, so its kernels inherit it.
    """
    if "OMP_NUM_THREADS" in os.environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // jobs))}


# What the workers' fork server imports once for all of them: this module, and torch, which the
# audit's reference implementations import in every worker otherwise (about 1 s of CPU each)
WORKER_PRELOAD = (__name__, "torch")


def start_fork_server():
    """The multiprocessing context the workers come from, its server started (None where
    there is no fork server: workers are then spawned). See ``workers.start_fork_server``."""
    return workers.start_fork_server(WORKER_PRELOAD)


def _grade_task(run: GradingRun, student: str, assignment: str, known: bool) -> SubmissionResult:
    """Grade one submission (in a worker process); any failure becomes an error result."""
    if not known:
        where = run.course.folders
        return SubmissionResult(
            student, assignment, error=f"no assignment {assignment!r} in {where.shown(where.source)}/"
        )
    try:
        installed.verify()  # a worker that imported another copy of the course grades nothing
        return grade_submission(run, student, assignment)
    except Exception as exc:  # noqa: BLE001 - keep grading the others, whatever this one did
        return SubmissionResult(student, assignment, error=short(f"{type(exc).__name__}: {exc}"))


def _scan_only(
    folder: Path,
    coursedir: CourseDirectory,
    assignment: str,
    bounds: untrusted.NotebookBounds = untrusted.NOTEBOOK_BOUNDS,
) -> list:
    """The scanner's red flags of a submission whose grading failed (nothing of it runs)."""
    flags = []
    try:
        for path, source in _with_sources(folder, coursedir, assignment):
            flags += scan(path, source, bounds)
    except Exception:  # noqa: BLE001 - an unreadable notebook: the error row says enough
        return flags
    return flags


def sandbox_available(sandboxed: bool, refuse: bool = False) -> bool:
    """Whether kernels run sandboxed: asked for, and bubblewrap works here (a loud warning on
    stderr when it does not). With ``refuse`` (grading a class), a sandbox asked for that does
    not run here is an error that says how to fix it, never a warning."""
    ok, why = bubblewrap.available() if sandboxed else (False, "--no-sandbox")
    if not ok and sandboxed and refuse:
        raise GradingError(bubblewrap.UNSANDBOXED_REFUSAL.format(why=why, fix=bubblewrap.fix()))
    if not ok:
        fix = bubblewrap.fix() if sandboxed else "grade without --no-sandbox"
        print(bubblewrap.UNSANDBOXED_WARNING.format(why=why, fix=fix), file=sys.stderr, flush=True)
    return ok


def grade_submission(run: GradingRun, student: str, assignment: str) -> SubmissionResult:
    """nbgrader autograde of one (student, assignment), from a copy of its folder that follows
    no link (``staging.stage``), retried while SQLite is locked; then, when ``run`` asks
    for an audit, its red flags and audit disagreements.

    A submission that cannot be graded becomes a result with ``error`` set, flagged with what
    the scanner finds in it when audited; files left out of the copy are flagged in any case.
    """
    coursedir = run.course_directory(student_id=student, assignment_id=assignment)
    submitted = Path(coursedir.submitted_directory)
    bounds = run.course.notebook_bounds
    with tempfile.TemporaryDirectory(prefix="course-submission-") as stage:
        flags: list = []
        try:
            flags = staging.stage(coursedir, submitted, student, assignment, Path(stage), bounds)
            key = ledger.submission_key(
                run.graded, assignment, Path(stage) / student / assignment, coursedir.db_url, how(run)
            )
            coursedir.submitted_directory = stage
            UNREAD_MESSAGES.clear()
            result = _autograde(coursedir, student, assignment)
            result.key = key
            flags += [
                Flag(OUTPUT_FLAG, f"output the grader would not read ({why})") for why in UNREAD_MESSAGES
            ]
        except SubmissionRefused as exc:
            flags = exc.flags
            result = SubmissionResult(student, assignment, error=str(exc))
        except GradingError as exc:
            result = SubmissionResult(student, assignment, error=str(exc))
        except Exception as exc:  # noqa: BLE001 - keep grading the others, whatever this one did
            result = SubmissionResult(student, assignment, error=short(f"{type(exc).__name__}: {exc}"))
        folder = Path(stage) / student / assignment
        if result.error:
            result.flags = flags + (_scan_only(folder, coursedir, assignment, bounds) if run.audit else [])
        else:
            result.flags = flags + (_review(coursedir, result, run.sandbox) if run.audit else [])
    return result


def _autograde(coursedir: CourseDirectory, student: str, assignment: str) -> SubmissionResult:
    """nbgrader's Autograde of the (staged) submission, retried while SQLite is locked, and
    the scores it recorded."""
    staging.expect_notebooks(coursedir, student, assignment)
    written = hand_grades.answers(coursedir, student, assignment)  # before autograde replaces them
    for attempt in range(LOCK_RETRIES):
        converter = Autograde(coursedir=coursedir, config=coursedir.config, log=LOG)
        converter.force = True
        converter.create_student = True
        try:
            run_converter(converter)
            break
        except GradingError as exc:
            if not retriable(exc) or attempt == LOCK_RETRIES - 1:
                raise
            time.sleep(0.5 * (attempt + 1))
    hand_grades.keep_graded(coursedir, student, assignment, written)
    return SubmissionResult(student, assignment, exercise_results(coursedir, student, assignment))


def _review(coursedir: CourseDirectory, result: SubmissionResult, sandboxed: bool) -> list:
    """Scanner flags and audit disagreements of each notebook of a graded submission."""
    flags = []
    folder = Path(coursedir.format_path(coursedir.submitted_directory, result.student, result.assignment))
    scores = {e.grade_id: e.score for e in result.exercises}
    settings = Settings.from_config(coursedir.config)  # the kernels' own (nbgrader_setup.configure)
    bounds = untrusted.NotebookBounds.from_config(coursedir.config)
    for path, source in _with_sources(folder, coursedir, result.assignment):
        flags += review(
            path, source, result.assignment, scores, sandboxed=sandboxed, settings=settings, bounds=bounds
        )
    return flags


def _with_sources(folder: Path, coursedir: CourseDirectory, assignment: str) -> list[tuple[Path, Path]]:
    """Each submitted notebook of ``folder`` with its source in the course's source folder."""
    source = staging.source_of(coursedir, assignment)
    pairs = [(path, source / path.name) for path in sorted(folder.glob("*.ipynb"))]
    return [(path, source) for path, source in pairs if source.is_file()]
