"""``course export --format canvas --fill DOWNLOADED.csv``: the gradebook CSV an instructor
downloads from Canvas (*Grades* → *Export*), filled with the course's grades, to upload back
(*Grades* → *Import*).

The file keeps everything Canvas wrote: its header, its student columns (``Student, ID, SIS
User ID, SIS Login ID, Section``, and ``Integration ID`` or ``Root Account`` where present), its
``Points Possible`` row as Canvas wrote it (a changed cell there would change the assignment's
points: ``process_pp`` in instructure/canvas-lms ``app/models/gradebook_importer.rb``), its
"Manual Posting" row, its total columns, and every cell of every column the course does not
fill. Canvas then finds each student by its own ``ID`` column and each assignment by the
``(id)`` in the column's title (``parse_assignments``), so nothing depends on a title or a
name matching.

What is filled: for each course assignment, the one column whose title is the assignment's
name followed by Canvas's ``(id)`` (or without it), or, where the course's configuration maps
the assignment to its Canvas id (``c.LMS.canvas_assignment_ids = {"03_attention": 48213}`` in
``nbgrader_config.py``: an assignment titled otherwise in Canvas), the column of that id; and for each student row the course knows
(its ``SIS Login ID``, else its ``SIS User ID``, is the course's student id, i.e. the hub's
user name; or its ``ID`` is the Canvas id a roster import recorded). A grade that is not known
yet (written answers waiting, grading failed, not submitted before the due date) keeps the
cell as Canvas had it, so the import sees no change there; never a 0. A cell Canvas holds
that is not a number (``EX``: excused; a letter grade, complete/incomplete) is kept, with a
note; a number of Canvas's that differs from the course's grade is replaced, with a note
naming both.

Named, never silent (``Filled.problems``, exit status 1): every student of the course the file
lacks, every course assignment without a column, a column Canvas marks read only; noted
(``Filled.notes``): every student row of the file the course does not know (left as it was,
Canvas's test student included), every grade left as it was, points that differ (the grades
are then scaled to Canvas's points, each student's fraction of them kept).
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from traitlets import Dict
from traitlets.config import Configurable

from course_grading.errors import GradingError
from course_grading.reports.grade_exports import collect
from course_grading.reports.reports_csv import clean, read_rows

MAX_DOWNLOAD_BYTES = 32 * 2**20
POINTS_ROW = "Points Possible"
TEST_STUDENT = "Student, Test"  # the student Canvas adds for "Student View": no login
EXCUSED = "EX"  # Canvas's gradebook: the student is excused from the assignment
# Canvas's own columns that are no assignment (gradebook_importer.rb NON_ASSIGNMENT_COLUMN_HEADERS,
# "Unposted ..." included by the same search)
NOT_ASSIGNMENTS = re.compile(
    r"Current Score|Current Points|Current Grade|Final Score|Final Points|"
    r"Final Grade|Override Score|Override Grade|Override Status"
)
STUDENT_COLUMNS = (
    "Student",
    "ID",
    "SIS User ID",
    "SIS Login ID",
    "Integration ID",
    "Root Account",
    "Section",
)


def title_and_id(header: str) -> tuple[str, str | None]:
    """A column's title and Canvas's assignment id: ``"03_attention (12345)"`` gives
    ``("03_attention", "12345")``, a title without ``(id)`` gives ``(title, None)``. Parsed
    from the end, without a pattern (a header is the file's: linear in its length)."""
    text = header.strip()
    opening = text.rfind("(")
    if text.endswith(")") and opening >= 0 and text[opening + 1 : -1].isdecimal():
        return text[:opening].strip(), text[opening + 1 : -1]
    return text, None


def posting_cell(cell: str) -> bool:
    """A cell of Canvas's posting row ("Manual Posting", "Muted") or an empty one."""
    text = cell.strip().lower()
    return text in ("", "muted") or text.startswith("manual posting")


@dataclass
class Filled:
    path: Path
    notes: list = field(default_factory=list)
    problems: list = field(default_factory=list)


@dataclass
class Download:
    """A Canvas gradebook export, as read: its rows, delimiter, and where its columns are."""

    rows: list
    delimiter: str
    login: int | None  # SIS Login ID
    sis_user: int | None  # SIS User ID
    first_assignment: int  # the first column after the student columns


def read_download(path) -> Download:
    """The Canvas gradebook export at ``path`` (bounded, no link followed); GradingError when
    it is not one (Canvas's own test: the header's first cell holds "Student", its second "ID")."""
    rows, delimiter = read_rows(path, MAX_DOWNLOAD_BYTES, fix="download the gradebook from Canvas again")
    header = rows[0] if rows else []
    if not (len(header) > 3 and "Student" in header[0] and "ID" in header[1]):
        raise GradingError(
            f"{path} is not a Canvas gradebook export (its header starts "
            f"{', '.join(map(clean, header[:3])) or 'with nothing'}; Canvas's starts "
            "Student, ID): download it from Canvas, Grades → Export"
        )
    names = [h.strip() for h in header]
    student_end = max((i for i, h in enumerate(names[:8]) if h in STUDENT_COLUMNS), default=1) + 1
    return Download(rows, delimiter, _index(names, "SIS Login ID"), _index(names, "SIS User ID"), student_end)


def _index(names: list[str], wanted: str) -> int | None:
    return names.index(wanted) if wanted in names else None


class LMS(Configurable):
    """What the exports need to know of the course's LMS (nbgrader_config.py)."""

    canvas_assignment_ids = Dict(
        help="assignment -> its Canvas assignment id (the number in its Canvas address), e.g. "
        '{"03_attention": 48213}: the Canvas export titles its column "03_attention (48213)", '
        "which Canvas matches to that assignment, whatever its title there"
    ).tag(config=True)


def canvas_ids(course) -> dict[str, str]:
    """{course assignment: Canvas assignment id} of ``c.LMS.canvas_assignment_ids`` in the
    course's nbgrader_config.py ({} without it)."""
    from traitlets import TraitError

    from course_grading.course.course import Course

    try:
        mapping = LMS(config=Course.of(course).config).canvas_assignment_ids
    except TraitError:
        raise GradingError("c.LMS.canvas_assignment_ids must map assignment names to Canvas ids") from None
    return {str(k): str(v) for k, v in mapping.items()}


def assignment_columns(
    download: Download, assignments: list[str], ids: dict[str, str] | None = None
) -> tuple[dict[str, int], list[str]]:
    """{course assignment: its column}, and one problem per assignment with none or with more
    than one: the column of its Canvas id where ``ids`` maps it, else a title, with or
    without Canvas's "(id)", equal to the assignment's name."""
    ids = ids or {}
    by_id = {v: k for k, v in ids.items() if k in assignments}
    found: dict[str, list[int]] = {a: [] for a in assignments}
    for index, title in enumerate(download.rows[0][download.first_assignment :], download.first_assignment):
        if NOT_ASSIGNMENTS.search(title):
            continue
        name, canvas_id = title_and_id(title)
        if canvas_id is not None and canvas_id in by_id:
            found[by_id[canvas_id]].append(index)
        elif name in found and name not in ids:
            found[name].append(index)
    columns, problems = {}, []
    for name, indices in found.items():
        if len(indices) == 1:
            columns[name] = indices[0]
        elif not indices:
            problems.append(
                f"{name}: no column in the Canvas file (create the assignment in Canvas, "
                "named as in the course, and download the gradebook again): its grades are not in it"
            )
        else:
            problems.append(f"{name}: {len(indices)} columns in the Canvas file have its title: none filled")
    return columns, problems


def fill(course, download_path, out, db_url=None) -> Filled:
    """Fill the Canvas gradebook export at ``download_path`` with the course's grades; write
    it to ``out`` (the download itself is never changed)."""
    download = read_download(download_path)
    maxima, found = collect(course, db_url=db_url)
    columns, problems = assignment_columns(download, list(maxima), canvas_ids(course))
    by_id = {s.id: s for s in found}
    by_folded = {s.id.casefold(): s for s in found}
    by_canvas = {s.canvas_id: s for s in found if s.canvas_id}
    notes, matched = [], set()
    points = next((list(r) for r in download.rows[1:] if r and POINTS_ROW in r[0]), None)
    scale = _points(points, columns, maxima, problems, notes) if points else {}
    rows = [list(download.rows[0])]
    for number, row in enumerate(download.rows[1:], start=2):
        row = list(row) + [""] * (len(rows[0]) - len(row))
        if POINTS_ROW in row[0]:
            pass
        elif all(posting_cell(cell) for cell in row):
            pass
        else:
            student = _student(row, download, by_id, by_folded, by_canvas)
            if student is None:
                notes.append(
                    f"line {number}: {_who(row, download)} is not a student of the course: left as Canvas has it"
                )
            elif student.id in matched:
                problems.append(f"line {number}: {student.id} is in the Canvas file twice: filled once")
            else:
                matched.add(student.id)
                notes += _fill_row(row, student, columns, scale)
        rows.append(row)
    problems += [
        f"{s.id} ({clean(s.display_name)}): a student of the course the Canvas file lacks "
        "(not enrolled in Canvas, or another login there): grades not in the file"
        for s in found
        if s.id not in matched
    ]
    path = Path(out).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as fh:
        csv.writer(fh, delimiter=download.delimiter).writerows(rows)
    return Filled(path, notes, problems)


def _login(row: list, download: Download) -> str:
    for index in (download.login, download.sis_user):
        if index is not None and row[index].strip():
            return row[index].strip()
    return ""


def _who(row: list, download: Download) -> str:
    """A row's student as a note names them: "Last, First (login)"."""
    login = _login(row, download)
    if login:
        return f"{clean(row[0])} ({clean(login)})"
    return f"{clean(row[0])} (Canvas's test student)" if row[0].strip() == TEST_STUDENT else clean(row[0])


def _student(row, download: Download, by_id: dict, by_folded: dict, by_canvas: dict):
    """The course's student of a Canvas row: by SIS Login ID, else SIS User ID (exactly, then
    ignoring case), else by the Canvas ID a roster import recorded."""
    for index in (download.login, download.sis_user):
        if index is not None and row[index].strip():
            value = row[index].strip()
            if value in by_id or value.casefold() in by_folded:
                return by_id.get(value) or by_folded[value.casefold()]
    return by_canvas.get(row[1].strip()) if row[1].strip() else None


def _fill_row(row: list, student, columns: dict[str, int], scale: dict[str, float]) -> list[str]:
    """Write the student's known grades into ``row`` (scaled to Canvas's points where
    ``scale`` says); a note per grade left as it was, and per number of Canvas's that the
    course's grade replaces."""
    notes = []
    for name, index in columns.items():
        grade, had = student.grades[name], row[index].strip()
        where = f"{student.id}/{name}"
        if grade.grade is None:
            notes.append(
                f"{where}: {grade.why_blank}: left "
                + (f"as Canvas has it ({clean(had)})" if had else "empty (no grade)")
            )
            continue
        written = round(grade.grade * scale.get(name, 1.0), 2)
        new = f"{written:g}"
        try:
            old = float(had) if had else None
        except ValueError:  # EX (excused), or a letter, complete/incomplete, a percentage
            what = "excused" if had.upper() == EXCUSED else "not a number of points"
            notes.append(
                f"{where}: Canvas has {clean(had)} ({what}): kept; the course's grade, {new}, not written"
            )
            continue
        if old is not None and abs(old - written) > 1e-9:
            notes.append(f"{where}: Canvas has {clean(had)}, the course {new}: replaced by {new}")
        row[index] = new
    return notes


def _points(
    row: list, columns: dict[str, int], maxima: dict[str, float], problems: list, notes: list
) -> dict:
    """Canvas's Points Possible row, kept as it is. Where Canvas has an assignment out of other
    points than the course, its grades are scaled to Canvas's (the fraction of the points kept:
    9.5 of the course's 12 is 7.92 of Canvas's 10, never 9.5 of 10), with a note; {assignment:
    factor} for those. A problem where Canvas marks the column read only (it imports nothing
    there) or has it out of no points."""
    scale = {}
    for name, index in columns.items():
        cell = row[index].strip() if index < len(row) else ""
        if re.search(r"read\s+only", cell):
            problems.append(f"{name}: Canvas marks its column read only: Canvas imports none of its grades")
            continue
        try:
            points = float(cell)
        except ValueError:
            continue
        if abs(points - maxima[name]) <= 1e-9 or maxima[name] <= 0:
            continue
        if points <= 0:
            problems.append(
                f"{name}: Canvas has it out of {points:g} points, the course out of {maxima[name]:g}: "
                "set its points in Canvas; the course's points are written"
            )
            continue
        scale[name] = points / maxima[name]
        notes.append(
            f"{name}: Canvas has it out of {points:g} points, the course out of {maxima[name]:g}: "
            f"grades scaled to Canvas's {points:g} (each student's fraction of the points kept)"
        )
    return scale
