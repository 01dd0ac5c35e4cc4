"""The class report for the instructor: how the class did, exercise by exercise.

    reports/class_report.csv   one row per (assignment, exercise): attempts, passes, pass rate,
                               mean score, and the most common failure messages with counts
                               (plus one row per assignment whose grading broke for someone);
                               a written answer waiting for manual grading is no attempt yet:
                               it is counted in ``awaiting_manual``
    reports/class_report.png   the score histogram and the pass rate of every exercise

``course autograde`` writes it for the submissions it just graded; ``course report`` rebuilds
it from the gradebook (every submission ever autograded, whichever grader did it) and the
failure messages in ``autograded/``. matplotlib is imported only to draw (Agg backend).
"""

from __future__ import annotations

import os
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.api import MissingEntry

from course_grading.course.course import Course
from course_grading.course.nbgrader_setup import course_directory, gradebook
from course_grading.reports.reports_csv import clean, write_rows
from course_grading.reports.results import SubmissionResult, exercise_results, uncomputed

REPORT_CSV = Path("reports") / "class_report.csv"
REPORT_PNG = Path("reports") / "class_report.png"
TOP_FAILURES = 3
GRADING_FAILED = "(grading failed)"
_NO_MESSAGE = "(no message)"
BELOW_FULL_MARKS = "(given less than full marks by hand)"
NOT_GRADED = "not graded: the gradebook has no score for some cells (autograding failed)"


@dataclass
class ExerciseStats:
    """One exercise across the class."""

    assignment: str
    exercise: str
    max_score: float = 0.0
    scores: list[float] = field(default_factory=list)
    failures: Counter = field(default_factory=Counter)
    awaiting_manual: int = 0  # written answers not graded by hand yet (in no score)

    @property
    def attempts(self) -> int:
        return len(self.scores)

    @property
    def passed(self) -> int:
        return sum(s >= self.max_score for s in self.scores)

    @property
    def pass_rate(self) -> float:
        return self.passed / self.attempts if self.attempts else 0.0

    @property
    def mean_score(self) -> float:
        return sum(self.scores) / self.attempts if self.attempts else 0.0

    def common_failures(self, n: int = TOP_FAILURES) -> list[tuple[str, int]]:
        """The ``n`` most frequent failure messages, most frequent first (ties: alphabetical)."""
        return sorted(self.failures.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def exercise_stats(results: list[SubmissionResult]) -> list[ExerciseStats]:
    """Per-exercise statistics, in assignment order then notebook order of the exercises.

    A submission whose grading broke counts in its assignment's ``(grading failed)`` row, with
    its error as the message, and not in the exercises' attempts.
    """
    stats: dict[tuple[str, str], ExerciseStats] = {}
    broken: dict[str, ExerciseStats] = {}
    for r in sorted(results, key=lambda r: r.assignment):
        if r.error:
            row = broken.setdefault(r.assignment, ExerciseStats(r.assignment, GRADING_FAILED))
            row.scores.append(0.0)
            row.failures[r.error] += 1
            continue
        for e in r.exercises:
            row = stats.setdefault((r.assignment, e.grade_id), ExerciseStats(r.assignment, e.grade_id))
            row.max_score = max(row.max_score, e.max_score)
            if e.pending:
                row.awaiting_manual += 1
                continue
            row.scores.append(e.score)
            if not e.passed:  # a written answer's message is the instructor's comment to one student
                row.failures[BELOW_FULL_MARKS if e.manual else e.message or _NO_MESSAGE] += 1
    rows = list(stats.values())
    for assignment, row in broken.items():
        last = max((i for i, s in enumerate(rows) if s.assignment == assignment), default=len(rows) - 1)
        rows.insert(last + 1, row)
    return rows


def write_csv(stats: list[ExerciseStats], path) -> Path:
    """The class report as CSV, one row per exercise (see the module docstring)."""
    header = ["assignment", "exercise", "attempts", "passed", "pass_rate", "mean_score", "max_score"]
    for i in range(1, TOP_FAILURES + 1):
        header += [f"failure_{i}", f"failure_{i}_count"]
    header.append("awaiting_manual")
    rows = [header]
    for s in stats:
        failed_grading = s.exercise == GRADING_FAILED
        row = [
            s.assignment,
            s.exercise,
            s.attempts,
            "" if failed_grading else s.passed,
            "" if failed_grading else f"{s.pass_rate:.3f}",
            "" if failed_grading else f"{s.mean_score:.3g}",
            "" if failed_grading else f"{s.max_score:g}",
        ]
        failures = s.common_failures()
        for i in range(TOP_FAILURES):
            row += list(failures[i]) if i < len(failures) else ["", ""]
        rows.append(row + ["" if failed_grading else s.awaiting_manual])
    return write_rows(path, rows, atomic=True)


def _partial(path: Path) -> Path:
    """A file beside ``path`` to write first and then move over it: graders that share a
    course folder (one job per submission) never leave a half-written report."""
    return path.with_name(f".{path.name}.{os.getpid()}.partial{path.suffix}")


def plot(results: list[SubmissionResult], stats: list[ExerciseStats], path) -> Path:
    """Score histogram (percent of the maximum, per submission; one colour per assignment)
    next to horizontal pass-rate bars for every exercise, labelled ``passed/attempts``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a score is a percentage of what has been graded: written answers waiting for the
    # instructor count in neither the score nor the maximum
    graded = [r for r in results if not r.error and r.max_score - r.pending_points > 0]
    assignments = sorted({r.assignment for r in graded})
    bars = [s for s in stats if s.exercise != GRADING_FAILED]
    height = max(4.0, 1.2 + 0.32 * len(bars))
    fig, (hist, rates) = plt.subplots(1, 2, figsize=(13, height), gridspec_kw={"width_ratios": [1, 1.25]})

    bins = [i * 10 for i in range(11)]
    data = [[_percent(r) for r in graded if r.assignment == a] for a in assignments]
    if data:
        hist.hist(data, bins=bins, stacked=True, label=[_label(a) for a in assignments], edgecolor="white")
        if len(assignments) > 1:
            hist.legend(fontsize=8, loc="upper left")
    hist.set_xlim(0, 100)
    hist.set_xticks(bins)
    hist.set_xlabel("score (% of the points graded)")
    hist.set_ylabel("submissions")
    broken = len(results) - len([r for r in results if not r.error])
    note = f", {broken} failed to grade" if broken else ""
    waiting = sum(1 for r in graded if r.pending_points)
    note += f", {waiting} with answers to grade by hand" if waiting else ""
    hist.set_title(f"Scores: {len(graded)} submissions{note}")
    if graded:
        mean = sum(map(_percent, graded)) / len(graded)
        hist.axvline(mean, color="black", linestyle="--", linewidth=1)
        hist.annotate(
            f"mean {mean:.0f}%",
            (mean, 1),
            xycoords=("data", "axes fraction"),
            xytext=(3, -12),
            textcoords="offset points",
            fontsize=8,
        )
    hist.yaxis.get_major_locator().set_params(integer=True)

    labels = [_label(f"{s.assignment}: {s.exercise}" if len(assignments) > 1 else s.exercise) for s in bars]
    y = list(range(len(bars)))
    colours = [_rate_colour(s.pass_rate) for s in bars]
    rates.barh(y, [100 * s.pass_rate for s in bars], color=colours)
    rates.set_yticks(y)
    rates.set_yticklabels(labels, fontsize=9)
    rates.invert_yaxis()
    rates.set_xlim(0, 115)
    rates.set_xticks([0, 20, 40, 60, 80, 100])
    rates.set_xlabel("pass rate (%)")
    rates.set_title("Pass rate per exercise")
    for yi, s in zip(y, bars):
        rates.text(100 * s.pass_rate + 1.5, yi, f"{s.passed}/{s.attempts}", va="center", fontsize=8)
    for axis in (hist, rates):
        axis.spines[["top", "right"]].set_visible(False)
    fig.suptitle(_label(f"Class report: {', '.join(assignments) or 'nothing graded'}"), fontsize=12)
    fig.tight_layout()
    partial = _partial(path)
    fig.savefig(partial, dpi=110)
    plt.close(fig)
    os.replace(partial, path)
    return path


def _percent(r: SubmissionResult) -> float:
    """A submission's score in percent of the points graded so far."""
    return 100 * r.score / (r.max_score - r.pending_points)


def _label(text: str) -> str:
    """``text`` for a label of the picture: ``reports_csv.clean``, short, its compatibility
    forms folded (a full-width sign is drawn as its ASCII one, which the font has), and no ``$``
    that matplotlib would read as the start of a formula."""
    return unicodedata.normalize("NFKC", clean(text, 120)).replace("$", r"\$")


def _rate_colour(rate: float) -> str:
    return "#2e7d32" if rate >= 0.8 else "#f9a825" if rate >= 0.5 else "#c62828"


def write_report(results: list[SubmissionResult], root, csv_path=None, png_path=None) -> tuple[Path, Path]:
    """Write the class report of ``results``; return the CSV and PNG paths."""
    root = Path(root)
    stats = exercise_stats(results)
    return (
        write_csv(stats, csv_path or root / REPORT_CSV),
        plot(results, stats, png_path or root / REPORT_PNG),
    )


def gradebook_results(course, assignments=None, db_url=None) -> list[SubmissionResult]:
    """Every autograded submission in the gradebook, with the failure messages of the
    autograded notebooks that are on this machine (none where another machine graded). A
    submission whose last grading failed (its failure record, ``ledger.failure``: the
    gradebook holds an earlier grade, or none) is an error row with that error; so is one
    with a cell that has no score (its autograding failed)."""
    from course_grading.grading import ledger

    coursedir = course_directory(course, db_url=db_url)
    with gradebook(coursedir) as gb:
        chosen = [a for a in gb.assignments if not assignments or a.name in assignments]
        broken = {(s.student.id, a.name): uncomputed(s) for a in chosen for s in a.submissions}
    names = {a.name for a in chosen}
    failed = {k: v for k, v in ledger.failures(Course.of(course).root).items() if k[1] in names}
    results = []
    for student, assignment in sorted(set(broken) | set(failed)):
        if (student, assignment) in failed:
            error = failed[(student, assignment)]
        elif broken[(student, assignment)]:
            error = NOT_GRADED
        else:
            try:
                exercises = exercise_results(coursedir, student, assignment)
            except MissingEntry:
                error = "not graded"
            else:
                results.append(SubmissionResult(student, assignment, exercises))
                continue
        results.append(SubmissionResult(student, assignment, error=error))
    return results


def whole_class(graded: list[SubmissionResult], course, db_url=None) -> list[SubmissionResult]:
    """What a run that graded only some submissions (one student, one assignment) reports:
    every submission of the gradebook, those of ``graded`` as this run graded them (its error
    rows included), the others as the gradebook holds them, with the flags their last grading
    recorded (``ledger``). So ``grades.csv`` and the class report stay the class's."""
    from course_grading.grading import ledger

    now = {(r.student, r.assignment): r for r in graded}
    merged = dict(now)
    course = Course.of(course)
    for r in gradebook_results(course, db_url=db_url):
        if (r.student, r.assignment) not in now:
            recorded = ledger.read(course.root, r.student, r.assignment)
            r.flags = recorded.flags if recorded is not None else []
            merged[(r.student, r.assignment)] = r
    return sorted(merged.values(), key=lambda r: (r.student, r.assignment))
