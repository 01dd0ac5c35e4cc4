"""``course status``: where a self-learner stands, notebook by notebook and exercise by
exercise, from their own notebooks and the full hidden tests.

Each exercise is ✔ (its grade cell gets full marks from the hidden tests), ✘ (it does not: the
check's message says why) or not started (its solution cell is still the release's stub, or
its code still raises ``NotImplementedError``). A notebook is graded by ``course check``'s
machinery (``check.check``: a throw-away course directory, the sandbox, the hidden tests);
one whose every solution cell is still the release's is not started, and is not graded at all.

What has not changed is not graded again: a notebook's result is cached under a key made of
what grading reads of the notebook (each cell's type, source, nbgrader metadata and tags: a
notebook that was only run, with new outputs and execution counts, is the same notebook) and
the course version (``ledger.course_version``: the installed course, its configuration and the
assignment's solutions), in ``$XDG_CACHE_HOME/attention-course/status``
(``~/.cache/...`` by default). A run where nothing changed reads the cache only; a changed
notebook costs one ``course check`` of it.

Milestones, as TinyTorch's ``tito`` shows them: what the learner can do once every exercise of
some notebooks passes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

from course_grading.course.course import Course
from course_grading.errors import GradingError
from course_grading.grading import ledger
from course_grading.reports.reports_csv import clean
from course_grading.reports.results import ExerciseResult, SubmissionResult

PASSED, FAILED, NOT_STARTED = "passed", "failed", "not started"
WRITTEN = "written"  # a written answer, answered: graded by hand, never by the tests
MARKS = {PASSED: "✔", FAILED: "✘", NOT_STARTED: "·", WRITTEN: "✎"}
CACHE_FORMAT = 3  # 2: written answers kept apart (manual, pending); 3: keyed by what is graded
NOT_IMPLEMENTED = "not implemented yet"

# (what you can do then, the notebooks whose exercises must all pass); a milestone naming a
# notebook the course does not have is left out
MILESTONES = (
    ("Word vectors: look words up and find their neighbours", ("01_embeddings", "02_cosine_similarity")),
    (
        "Attention: tokens that look at each other, one head and many",
        ("03_attention", "04_multi_head_attention"),
    ),
    ("The encoder: positions, layer norm, a stack of layers", ("05_positional_encoding", "06_encoder")),
    ("A whole transformer: encoder and decoder", ("07_decoder",)),
    ("Generation: your transformer writes dates", ("08_generation",)),
    ("A GPT of your own, with its KV cache", ("09_gpt",)),
)


@dataclass
class ExerciseStatus:
    name: str  # the exercise (its solution cell's grade id), or a grade cell's id
    state: str  # PASSED, FAILED or NOT_STARTED
    score: float = 0.0
    max_score: float = 0.0
    message: str = ""
    manual: bool = False  # a written answer: graded by hand, in no count or total here


@dataclass
class NotebookStatus:
    assignment: str
    path: Path
    exercises: list[ExerciseStatus] = field(default_factory=list)
    error: str = ""  # the notebook could not be graded
    cached: bool = False
    graded: bool = False  # graded by this run

    @property
    def tested(self) -> list[ExerciseStatus]:
        """The exercises the tests grade (not the written answers)."""
        return [e for e in self.exercises if not e.manual]

    @property
    def state(self) -> str:
        states = {e.state for e in self.tested}
        if self.error:
            return FAILED
        if not self.tested or states == {NOT_STARTED}:
            return NOT_STARTED
        return PASSED if states == {PASSED} else FAILED

    def count(self, state: str) -> int:
        return sum(e.state == state for e in self.tested)


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "attention-course" / "status"


def notebook_path(folder: Path, assignment: str) -> Path:
    """``folder/NN_topic/NN_topic.ipynb`` (the course's layout), else ``folder/NN_topic.ipynb``
    where only that one is there (notebooks downloaded into one folder)."""
    nested, flat = folder / assignment / f"{assignment}.ipynb", folder / f"{assignment}.ipynb"
    if not (nested.exists() or nested.is_symlink()) and (flat.exists() or flat.is_symlink()):
        return flat
    return nested


def status(course, folder=None, sandboxed=True, use_cache=True, on_grading=None) -> list[NotebookStatus]:
    """The status of every notebook of the ``course`` (a ``Course``, or its root; ``folder``,
    default its release folder, ``notebooks/``, holds the learner's ``NN_topic/NN_topic.ipynb``).
    ``on_grading(assignment)`` is called before a notebook is graded (it takes seconds; cached
    ones take none)."""
    course = Course.of(course)
    folder = Path(folder) if folder else course.folders.release
    return [
        notebook_status(
            course, assignment, notebook_path(folder, assignment), sandboxed, use_cache, on_grading
        )
        for assignment in course.source_assignments()
    ]


def notebook_status(
    course, assignment: str, path: Path, sandboxed=True, use_cache=True, on_grading=None
) -> NotebookStatus:
    from course_grading.commands.check import load_submission, read_submission

    course = Course.of(course)
    found = NotebookStatus(assignment, path)
    stubs, order = _release_stubs(course, assignment)
    if not path.is_file() and not path.is_symlink():
        found.exercises = [ExerciseStatus(name, NOT_STARTED) for name in order]
        return found
    try:
        data = read_submission(path)
        nb = load_submission(path, data)
        cells = _solution_sources(nb)
    except GradingError as exc:
        found.error = str(exc)
        return found
    untouched = {name for name in order if name in stubs and cells.get(name) == stubs[name]}
    if order and untouched == set(order):  # nothing written yet: nothing to grade
        found.exercises = [ExerciseStatus(name, NOT_STARTED) for name in order]
        return found
    key = hashlib.sha256(
        f"{CACHE_FORMAT}\0{sandboxed}\0{ledger.course_version(course, assignment)}\0".encode()
        + _graded_part(nb)
    ).hexdigest()
    result = _read_cache(key) if use_cache else None
    found.cached = result is not None
    if result is None:
        if on_grading is not None:
            on_grading(assignment)
        result = _grade(course, path, sandboxed)
        found.graded = True
        if not result.error:
            _write_cache(key, result)
    found.error = result.error
    found.exercises = [_exercise(e, untouched) for e in result.exercises]
    return found


def _graded_part(nb) -> bytes:
    """What grading reads of a notebook: each cell's type, source, nbgrader metadata and tags
    (not its outputs, execution count or other metadata, which running it changes)."""
    from course_grading.authoring.cells import meta, text

    part = []
    for cell in nb.get("cells") or []:
        if not isinstance(cell, dict):
            part.append(repr(cell))
            continue
        metadata = cell.get("metadata") if isinstance(cell.get("metadata"), dict) else {}
        part.append([str(cell.get("cell_type")), text(cell.get("source")), meta(cell), metadata.get("tags")])
    return json.dumps(part, sort_keys=True, default=repr).encode("utf-8", "surrogatepass")


def _grade(course: Course, path: Path, sandboxed: bool) -> SubmissionResult:
    from course_grading.commands.check import check

    try:
        return check(path, course, sandboxed=sandboxed, audit=False)
    except GradingError as exc:
        return SubmissionResult("you", "", error=str(exc))


def _exercise(graded: ExerciseResult, untouched: set[str]) -> ExerciseStatus:
    """A grade cell's result as an exercise's status (``test_softmax`` grades ``softmax``)."""
    name = graded.grade_id[len("test_") :] if graded.grade_id.startswith("test_") else graded.grade_id
    if graded.manual:  # answered (it waits for a hand) or left as released
        return ExerciseStatus(
            graded.grade_id, WRITTEN if graded.pending else NOT_STARTED, 0.0, graded.max_score, manual=True
        )
    if graded.passed:
        state = PASSED
    elif name in untouched or NOT_IMPLEMENTED in graded.message:
        state = NOT_STARTED
    else:
        state = FAILED
    return ExerciseStatus(name, state, graded.score, graded.max_score, graded.message)


def _solution_sources(nb) -> dict[str, str]:
    """The source of each code solution cell (an exercise; not a written answer), by its grade
    id (a learner's: strings only)."""
    from course_grading.authoring import cells

    found = {}
    for cell in nb.cells:
        meta = cells.meta(cell) if isinstance(cell, dict) else {}
        gid = meta.get("grade_id") if isinstance(meta, dict) else None
        if (
            isinstance(meta, dict)
            and meta.get("solution")
            and isinstance(gid, str)
            and cell.get("cell_type") == "code"
        ):
            found[gid] = cells.text(cell.get("source", ""))
    return found


_STUBS: dict = {}


def _release_stubs(course: Course, assignment: str) -> tuple[dict[str, str], list[str]]:
    """What the release's solution cells hold (nbgrader's ClearSolutions run on the source, in
    memory), by grade id, and the exercises in order. ({}, order) where it cannot be made: every
    notebook is then graded to tell."""
    from course_grading.authoring.nbformat_tools import read_notebook

    source_path = course.folders.source_notebook(assignment)
    stamp = (str(source_path), ledger.course_version(course, assignment))
    if stamp in _STUBS:
        return _STUBS[stamp]
    try:
        source = read_notebook(source_path)
    except (OSError, ValueError):
        return {}, []
    order = list(_solution_sources(source))
    try:
        from nbgrader.preprocessors import ClearSolutions

        released, _ = ClearSolutions(config=course.config_copy()).preprocess(copy.deepcopy(source), {})
        _STUBS[stamp] = (_solution_sources(released), order)
    except Exception:  # noqa: BLE001 - only an optimisation: grade instead
        _STUBS[stamp] = ({}, order)
    return _STUBS[stamp]


def _read_cache(key: str) -> SubmissionResult | None:
    try:
        data = json.loads((cache_folder() / f"{key}.json").read_text(encoding="utf-8"))
        if data.get("format") != CACHE_FORMAT:
            return None
        return SubmissionResult(
            "you",
            str(data["assignment"]),
            [
                ExerciseResult(str(g), float(s), float(m), str(msg), bool(manual), bool(pending))
                for g, s, m, msg, manual, pending in data["exercises"]
            ],
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_cache(key: str, result: SubmissionResult) -> None:
    folder = cache_folder()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{key}.{os.getpid()}.tmp"
        tmp.write_text(
            json.dumps(
                {
                    "format": CACHE_FORMAT,
                    "assignment": result.assignment,
                    "exercises": [
                        [e.grade_id, e.score, e.max_score, e.message, e.manual, e.pending]
                        for e in result.exercises
                    ],
                }
            ),
            encoding="utf-8",
        )
        os.replace(tmp, folder / f"{key}.json")
    except OSError:
        pass  # no cache: the next run grades again


# --------------------------------------------------------------------------- showing it


def milestones(found: list[NotebookStatus]) -> list[tuple[str, tuple[str, ...], int, int]]:
    """(milestone, its notebooks, exercises passed, exercises in all) for each milestone whose
    notebooks the course has; reached when the two numbers are equal."""
    by_name = {n.assignment: n for n in found}
    shown = []
    for title, needs in MILESTONES:
        if all(a in by_name for a in needs):
            exercises = [e for a in needs for e in by_name[a].tested]
            passed = 0 if any(by_name[a].error for a in needs) else sum(e.state == PASSED for e in exercises)
            shown.append((title, needs, passed, len(exercises)))
    return shown


def next_step(found: list[NotebookStatus]) -> str:
    """The first exercise, in course order, that does not pass yet ('' when none)."""
    for nb in found:
        if nb.error:
            return f"{nb.assignment}: make it gradable again"
        for e in nb.tested:
            if e.state != PASSED:
                return f"{nb.assignment}, {e.name}"
    return ""


def format_status(found: list[NotebookStatus], width: int = 100) -> str:
    """Every notebook and exercise (a failure with its whole message), then the totals, the
    next exercise to work on and the milestones."""
    lines = []
    name_width = max((len(e.name) for n in found for e in n.exercises), default=10)
    for nb in found:
        total = sum(e.max_score for e in nb.tested)
        score = sum(e.score for e in nb.tested)
        if nb.error:
            summary = f"{MARKS[FAILED]} could not be graded: {clean(nb.error, 300)}"
        elif nb.state == NOT_STARTED:
            summary = f"{MARKS[NOT_STARTED]} not started"
        else:
            summary = f"{MARKS[nb.state]} {nb.count(PASSED)} of {len(nb.tested)} exercises" + (
                f", {score:g}/{total:g} points" if total else ""
            )
            written = [e for e in nb.exercises if e.manual]
            if written:
                summary += (
                    f"; written answers: {sum(e.state == WRITTEN for e in written)} of "
                    f"{len(written)} answered (graded by hand)"
                )
        lines.append(f"{nb.assignment:<26} {summary}")
        if nb.error or nb.state == NOT_STARTED:
            continue
        for e in nb.exercises:
            if e.manual:
                what = (
                    "written: graded by hand (`course check` shows a model answer)"
                    if e.state == WRITTEN
                    else "not answered yet: graded by hand"
                )
                lines.append(f"  {MARKS[e.state]} {e.name:<{name_width}}  {what}")
                continue
            what = "not started" if e.state == NOT_STARTED else f"{e.score:g}/{e.max_score:g}"
            lines.append(f"  {MARKS[e.state]} {e.name:<{name_width}}  {what}")
            if e.state == FAILED and e.message:  # the whole message: its end is usually the hint
                lines.append(
                    textwrap.fill(
                        clean(e.message),
                        width=max(40, width - 2),
                        initial_indent="      ",
                        subsequent_indent="      ",
                        break_on_hyphens=False,
                    )
                )
    exercises = [e for n in found for e in n.tested]
    lines.append("")
    lines.append(
        f"{sum(e.state == PASSED for e in exercises)} of {len(exercises)} exercises pass, "
        f"{sum(e.state == FAILED for e in exercises)} fail, "
        f"{sum(e.state == NOT_STARTED for e in exercises)} not started"
    )
    step = next_step(found)
    if step:
        lines.append(f"next: {step}")
    shown = milestones(found)
    if shown:
        lines.append("milestones:")
        for title, needs, passed, total in shown:
            where = "reached" if passed == total else f"{passed} of {total} exercises"
            lines.append(f"  {'★' if passed == total else '☆'} {title}: {where} ({', '.join(needs)})")
    return "\n".join(lines)


def timed_status(course, folder=None, sandboxed=True, use_cache=True, on_grading=None):
    """``status`` and the seconds it took."""
    start = time.monotonic()
    found = status(course, folder, sandboxed, use_cache, on_grading)
    return found, time.monotonic() - start
