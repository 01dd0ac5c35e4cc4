"""``course roster import CSV``: the class list into the gradebook, so that the Formgrader and
every export show names (without it hub students appear as "None, None").

The CSV is read as nbgrader's ``nbgrader db student import`` reads it: a header row, a column
``id`` (required), and ``first_name``, ``last_name``, ``email`` (each optional; an empty cell is
no value); each row goes to ``Gradebook.update_or_create_student``, nbgrader's own call. The
headers an LMS writes are taken too (``First name``, ``Last Name``, ``Email address``, ``ID``,
``Username``, ``SIS Login ID``: case, spaces and underscores do not matter); where several
could be the id, the login wins (``Username``, ``SIS Login ID`` before a bare ``ID``), or the
column named by ``id_column``. The files instructors download are read as they come:

* Canvas's gradebook export (``Student, ID, SIS User ID, SIS Login ID, Section``, then a
  ``Points Possible`` row): the id is the SIS Login ID, the name is split from "Last, First",
  Canvas's own numeric ``ID`` is kept as the student's LMS id (``lms_user_id``, which
  ``course export --format canvas --fill`` matches by); the points row, the "Manual Posting"
  row and Canvas's test student are no students;
* Moodle's participants download: its ``ID number`` is kept as the LMS id (``course export
  --format moodle --match idnumber``); it has a username column only where the site shows
  one: without it, name the id column (``--id-column``).

A roster comes from outside the course (an LMS, a registrar), and students choose their own
display names there: the file is read within a size cap and without following a link
(``untrusted.read_bytes``); an id must be a plain name, the rule of ``untrusted.plain_name``
that ``course autograde`` and ``nbgrader collect`` apply to the folders of submissions (a row
with any other id is refused and named, and nothing of the file is written); names and emails
are written through ``reports_csv.clean`` (control and invisible characters escaped, at most
``MAX_FIELD`` characters). A row names each student once.
"""

from __future__ import annotations

from dataclasses import dataclass

from course_grading import untrusted
from course_grading.course.nbgrader_setup import course_directory, gradebook
from course_grading.errors import GradingError
from course_grading.reports.lms.canvas import posting_cell
from course_grading.reports.reports_csv import clean, read_rows

MAX_ROSTER_BYTES = 8 * 2**20
MAX_FIELD = 200
# nbgrader's column names, and the spellings an LMS export uses for them (compared folded:
# lower case, without spaces, underscores and dashes)
# (the id's spellings in order of preference: a login before an LMS's own numeric id)
COLUMNS = {
    "id": ("username", "sisloginid", "login", "loginid", "studentid", "userid", "id"),
    "first_name": ("firstname", "givenname", "first"),
    "last_name": ("lastname", "surname", "familyname", "last"),
    "email": ("email", "emailaddress", "mail"),
    "lms_id": ("idnumber",),
}
CANVAS_TEST_STUDENT = "Student, Test"


@dataclass(frozen=True)
class RosterEntry:
    id: str
    first_name: str | None
    last_name: str | None
    email: str | None
    lms_id: str | None = None  # the LMS's own id of the student (Canvas's ID, Moodle's ID number)


def _fold(header: str) -> str:
    return "".join(ch for ch in header.strip().lower() if ch not in " _-")


def _columns(header: list[str], id_column: str | None = None) -> dict[str, int]:
    """{column: index in the file}, each by its most preferred spelling; GradingError without
    an id column."""
    folded = [_fold(name) for name in header]
    found: dict[str, int] = {}
    for column, spellings in COLUMNS.items():
        index = next((folded.index(s) for s in spellings if s in folded), None)
        if index is not None:
            found[column] = index
    if canvas_gradebook(header) and "id" in found:
        found["lms_id"] = folded.index("id")  # Canvas's own numeric id, never the student id
    if id_column is not None:
        if _fold(id_column) not in folded:
            raise GradingError(
                f"the roster has no column {clean(id_column)!r} (its header: "
                f"{', '.join(map(clean, header[:8]))})"
            )
        found["id"] = folded.index(_fold(id_column))
    if "id" not in found:
        raise GradingError(
            f"the roster has no id column (its header: {', '.join(map(clean, header[:8]))}); "
            "name one id, first_name, last_name, email, or say which column is the "
            "student id (the hub user name) with --id-column"
        )
    return found


def canvas_gradebook(header: list[str]) -> bool:
    """Whether a header is Canvas's gradebook export's (Student, ID, ..., SIS Login ID)."""
    return (
        len(header) > 3
        and "Student" in header[0]
        and _fold(header[1]) == "id"
        and "sisloginid" in (_fold(h) for h in header)
    )


def _not_a_student(row: list[str], canvas: bool) -> bool:
    """Canvas's rows that are no student: Points Possible, the posting row, its test student."""
    return (
        canvas
        and bool(row)
        and (
            "Points Possible" in row[0]
            or row[0].strip() == CANVAS_TEST_STUDENT
            or all(posting_cell(c) for c in row)
        )
    )


def read_roster(path, id_column: str | None = None) -> list[RosterEntry]:
    """The rows of roster CSV file ``path``; GradingError (nothing imported) naming each row
    whose id is not a plain name, is empty, or repeats an earlier row's."""
    rows, _ = read_rows(
        path, MAX_ROSTER_BYTES, fix="save the roster as CSV UTF-8", what="roster not imported"
    )
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if not rows:
        raise GradingError(f"{path} is empty")
    columns = _columns(rows[0], id_column)
    canvas = canvas_gradebook(rows[0])
    entries, problems, seen = [], [], set()
    for line, row in enumerate(rows[1:], start=2):
        if _not_a_student(row, canvas):
            continue

        def cell(column):
            index = columns.get(column)
            value = row[index].strip() if index is not None and index < len(row) else ""
            return clean(value, MAX_FIELD) if value else None

        student = row[columns["id"]].strip() if columns["id"] < len(row) else ""
        if not untrusted.plain_name(student):
            shown = untrusted.shown_name(student) if student else "an empty id"
            problems.append(
                f"line {line}: {shown} is not a valid student id (ASCII letters, "
                f"digits and . _ - @, not starting with . - or @, at most "
                f"{untrusted.MAX_NAME} characters)"
            )
            continue
        if student in seen:
            problems.append(f"line {line}: {student} is listed twice")
            continue
        seen.add(student)
        first, last = cell("first_name"), cell("last_name")
        if canvas and first is None and last is None:  # Canvas's "Student": "Last, First"
            last, _, first = row[0].strip().partition(", ") if row[0].strip() else ("", "", "")
            first, last = (clean(first, MAX_FIELD) or None), (clean(last, MAX_FIELD) or None)
        entries.append(RosterEntry(student, first, last, cell("email"), cell("lms_id")))
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise GradingError(f"roster not imported: {problems[0]}{more}")
    return entries


def import_roster(course, path, db_url=None, id_column: str | None = None) -> list[RosterEntry]:
    """Create or update a gradebook student for each row of roster ``path`` (nbgrader's
    ``update_or_create_student``); a cell left empty leaves that field as it is. Returns the
    rows imported."""
    entries = read_roster(path, id_column)
    coursedir = course_directory(course, db_url=db_url)
    with gradebook(coursedir) as gb:
        for entry in entries:
            fields = {
                k: v
                for k, v in (
                    ("first_name", entry.first_name),
                    ("last_name", entry.last_name),
                    ("email", entry.email),
                    ("lms_user_id", entry.lms_id),
                )
                if v is not None
            }
            gb.update_or_create_student(entry.id, **fields)
    return entries
