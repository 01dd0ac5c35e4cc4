"""``course roster import CSV``: the class list into the gradebook, so that the Formgrader and
every export show names (without it hub students appear as "None, None").

The CSV is read as nbgrader's ``nbgrader db student import`` reads it: a header row, a column
``id`` (required), and ``first_name``, ``last_name``, ``email`` (each optional; an empty cell is
no value); each row goes to ``Gradebook.update_or_create_student``, nbgrader's own call. The
headers an LMS writes are taken too (``First name``, ``Last Name``, ``Email address``, ``ID``,
``Username``, ``SIS Login ID``: case, spaces and underscores do not matter); where several
could be the id, the login wins (``Username``, ``SIS Login ID`` before a bare ``ID``), or the
column named by ``id_column``. The files instructors download are read as they come:

* Canvas's gradebook export (``Student, ID``, ``SIS User ID``, ``SIS Login ID``, ``Section``,
  then a ``Points Possible`` row): the id is the SIS Login ID (else the SIS User ID; an export
  with neither, as Canvas gives it to a user without SIS permission, is refused: Canvas's own
  numeric ``ID`` is never a student id), the name is split from "Last, First", and the ``ID``
  is kept as the student's LMS id, ``canvas:<ID>`` (``lms_user_id``, which ``course export
  --format canvas --fill`` matches by; ``reports.lms.ids``); the points row and the "Manual Posting" row are nobody, Canvas's test
  student is named in a note and not imported;
* Moodle's participants download: only a participant whose ``Roles`` include Student is
  imported (the others are named in a note); its ``ID number`` is kept as the LMS id (``course
  export --format moodle --match idnumber``); it has a username column only where the site
  shows one: without it, name the id column (``--id-column``).

The import says how many students it added, updated and left unchanged; it names each student
of the gradebook the file lacks (kept: nothing is deleted) and each LMS id it replaced. The
gradebook holds one LMS id per student: Moodle's ID number replaces Canvas's ID, but Canvas's ID
never replaces an ID number (kept, and named: it is what an export by ID number writes).

A roster comes from outside the course (an LMS, a registrar), and students choose their own
display names there: the file is read within a size cap and without following a link
(``untrusted.read_bytes``); an id must be a plain name, the rule of ``untrusted.plain_name``
that ``course autograde`` and ``nbgrader collect`` apply to the folders of submissions (a row
with any other id is refused and named, and nothing of the file is written); names and emails
are written through ``reports_csv.clean`` (control and invisible characters escaped, at most
``MAX_FIELD`` characters). A row names each student once. Every row refused is named (the first
``MAX_NAMED`` in full, then a count), with the student's name where the file has one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from course_grading import untrusted
from course_grading.course.nbgrader_setup import course_directory, gradebook
from course_grading.errors import GradingError
from course_grading.reports.lms import ids
from course_grading.reports.lms.canvas import TEST_STUDENT, posting_cell
from course_grading.reports.reports_csv import clean, read_rows

MAX_ROSTER_BYTES = 8 * 2**20
MAX_FIELD = 200
MAX_NAMED = 10  # a message names this many rows in full, then counts the rest
# nbgrader's column names, and the spellings an LMS export uses for them (compared folded:
# lower case, without spaces, underscores and dashes)
# (the id's spellings in order of preference: a login before an LMS's own numeric id)
COLUMNS = {
    "id": ("username", "sisloginid", "sisuserid", "login", "loginid", "studentid", "userid", "id"),
    "first_name": ("firstname", "givenname", "first"),
    "last_name": ("lastname", "surname", "familyname", "last"),
    "email": ("email", "emailaddress", "mail"),
    "lms_id": ("idnumber",),
    "roles": ("roles",),  # Moodle's participants: only a Student is imported
}
CANVAS_SIS = ("sisloginid", "sisuserid")  # Canvas's columns that may hold the student id
ID_RULE = (
    f"a student id is ASCII letters, digits and . _ - @, not starting with . - or @, at most "
    f"{untrusted.MAX_NAME} characters"
)


@dataclass(frozen=True)
class RosterEntry:
    id: str
    first_name: str | None
    last_name: str | None
    email: str | None
    lms_id: str | None = None  # the LMS's own id of the student (``reports.lms.ids``)

    @property
    def id_number(self) -> str:
        """Moodle's ID number ("" for none, or for Canvas's ID)."""
        return ids.id_number(self.lms_id)

    def fields(self) -> dict[str, str]:
        """The gradebook's fields this row sets (an empty cell leaves its field as it is)."""
        values = (
            ("first_name", self.first_name),
            ("last_name", self.last_name),
            ("email", self.email),
            ("lms_user_id", self.lms_id),
        )
        return {k: v for k, v in values if v is not None}


@dataclass
class Roster:
    entries: list[RosterEntry]
    notes: list[str] = field(default_factory=list)  # who of the file is not imported, and why


@dataclass
class Imported:
    """What ``import_roster`` did: the ids added, updated and unchanged, and its notes."""

    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def summary(self, path) -> str:
        total = len(self.added) + len(self.updated) + len(self.unchanged)
        return (
            f"{count(total, 'student')} in {path}: {len(self.added)} added, {len(self.updated)} updated, "
            f"{len(self.unchanged)} unchanged"
        )


def count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless one: "1 row", "2 rows"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def named(items: list[str], separator: str = "; ") -> str:
    """The first MAX_NAMED of ``items`` in full, then how many more."""
    more = f" (and {len(items) - MAX_NAMED} more)" if len(items) > MAX_NAMED else ""
    return separator.join(items[:MAX_NAMED]) + more


def _fold(header: str) -> str:
    return "".join(ch for ch in header.strip().lower() if ch not in " _-")


def _shown_header(header: list[str]) -> str:
    return ", ".join(map(clean, header[:8]))


def _columns(header: list[str], id_column: str | None = None) -> dict[str, int]:
    """{column: index in the file}, each by its most preferred spelling; GradingError without
    an id column, or where the only one is Canvas's own numeric ID."""
    folded = [_fold(name) for name in header]
    found: dict[str, int] = {}
    for column, spellings in COLUMNS.items():
        index = next((folded.index(s) for s in spellings if s in folded), None)
        if index is not None:
            found[column] = index
    canvas = canvas_gradebook(header)
    if canvas:
        found["lms_id"] = 1  # Canvas's own numeric ID: kept, never the student id
        found.pop("id", None)
        sis = next((folded.index(s) for s in CANVAS_SIS if s in folded), None)
        if sis is not None:
            found["id"] = sis
    if id_column is not None:
        if _fold(id_column) not in folded:
            raise GradingError(
                f"the roster has no column {clean(id_column)!r} (its header: {_shown_header(header)})"
            )
        found["id"] = folded.index(_fold(id_column))
    if canvas and found.get("id", 1) == 1:
        raise GradingError(
            "the roster is a Canvas gradebook export without a SIS Login ID or SIS User ID column "
            f"(its header: {_shown_header(header)}), and Canvas's own ID is no student id: export "
            "the gradebook as a Canvas user allowed to see SIS data (an admin can grant "
            '"SIS Data - read"), or import a CSV with an id column (the hub user names)'
        )
    if "id" not in found:
        raise GradingError(
            f"the roster has no id column (its header: {_shown_header(header)}); "
            "name one id, first_name, last_name, email, or say which column is the "
            "student id (the hub user name) with --id-column"
        )
    return found


def canvas_gradebook(header: list[str]) -> bool:
    """Whether a header is Canvas's gradebook export's (Canvas's own test,
    ``row_has_student_headers?``: more than 3 columns, "Student" in the first, the second "ID")."""
    return len(header) > 3 and "Student" in header[0] and _fold(header[1]) == "id"


def _not_a_row_of_students(row: list[str], canvas: bool) -> bool:
    """Canvas's rows that are nobody: Points Possible, the posting row."""
    return canvas and bool(row) and ("Points Possible" in row[0] or all(posting_cell(c) for c in row))


def _a_student(roles: str | None) -> bool:
    """Whether Moodle's ``Roles`` cell ("Student", "Non-editing teacher, Student") has Student."""
    return any(role.strip().casefold() == "student" for role in (roles or "").split(","))


def read_roster(path, id_column: str | None = None) -> Roster:
    """The students of roster CSV file ``path``, and a note naming who of it is no student
    (Moodle's Roles without Student, Canvas's test student); GradingError (nothing imported)
    naming each row whose id is not a plain name, is empty, or repeats an earlier row's."""
    rows, _ = read_rows(
        path, MAX_ROSTER_BYTES, fix="save the roster as CSV UTF-8", what="roster not imported"
    )
    rows = [row for row in rows if any(cell.strip() for cell in row)]
    if not rows:
        raise GradingError(f"{path} is empty")
    header = rows[0]
    columns = _columns(header, id_column)
    canvas = canvas_gradebook(header)
    entries, problems, others, seen, bad_id = [], [], [], {}, False
    for line, row in enumerate(rows[1:], start=2):
        if _not_a_row_of_students(row, canvas):
            continue

        def cell(column):
            index = columns.get(column)
            value = row[index].strip() if index is not None and index < len(row) else ""
            return clean(value, MAX_FIELD) if value else None

        first, last = cell("first_name"), cell("last_name")
        shown = " ".join(n for n in (first, last) if n)
        if canvas:  # Canvas's "Student": "Last, First"
            shown = clean(row[0].strip(), MAX_FIELD)
            if first is None and last is None and shown:
                last, _, first = shown.partition(", ")
                first, last = first or None, last or None
        who = f" ({shown})" if shown else ""
        if canvas and row[0].strip() == TEST_STUDENT:
            others.append(f"{shown} (Canvas's test student)")
            continue
        if "roles" in columns and not _a_student(cell("roles")):
            others.append(f"{shown or '(no name)'} ({cell('roles') or 'no role'})")
            continue
        student = row[columns["id"]].strip() if columns["id"] < len(row) else ""
        if not untrusted.plain_name(student):
            bad_id = True
            what = untrusted.shown_name(student) if student else f"an empty {clean(header[columns['id']])}"
            problems.append(f"line {line}{who}: {what} is not a valid student id")
        elif student in seen:
            problems.append(f"line {line}{who}: {student} is listed twice (first on line {seen[student]})")
        else:
            seen[student] = line
            lms_id = cell("lms_id")
            if canvas and lms_id:
                lms_id = ids.canvas_tagged(lms_id)
            entries.append(RosterEntry(student, first, last, cell("email"), lms_id))
    if problems:
        rule = f" ({ID_RULE})" if bad_id else ""
        raise GradingError(
            f"roster not imported, {count(len(problems), 'row')} to fix: {named(problems)}{rule}"
        )
    notes = []
    if others:
        notes.append(f"{len(others)} of {path} not imported, not a student: {named(others, ', ')}")
    return Roster(entries, notes)


def import_roster(course, path, db_url=None, id_column: str | None = None) -> Imported:
    """Create or update a gradebook student for each row of roster ``path`` (nbgrader's
    ``update_or_create_student``); a cell left empty leaves that field as it is. Says which
    students were added, updated or unchanged, and notes each gradebook student the file lacks
    (kept) and each LMS id replaced or kept: a Canvas ID never replaces a Moodle ID number."""
    roster = read_roster(path, id_column)
    done = Imported(notes=list(roster.notes))
    replaced, kept = [], []
    coursedir = course_directory(course, db_url=db_url)
    with gradebook(coursedir) as gb:
        before = {s.id: s for s in gb.students}
        for entry in roster.entries:
            fields = entry.fields()
            old = before.get(entry.id)
            if old is not None and _keeps_id_number(old.lms_user_id, fields.get("lms_user_id")):
                kept.append(f"{entry.id} ({clean(old.lms_user_id)})")
                del fields["lms_user_id"]
            if old is None:
                done.added.append(entry.id)
            elif all(getattr(old, k) == v for k, v in fields.items()):
                done.unchanged.append(entry.id)
            else:
                done.updated.append(entry.id)
                if old.lms_user_id and fields.get("lms_user_id", old.lms_user_id) != old.lms_user_id:
                    replaced.append(f"{entry.id} {clean(old.lms_user_id)} → {fields['lms_user_id']}")
            gb.update_or_create_student(entry.id, **fields)
        absent = sorted(set(before) - {e.id for e in roster.entries})
    if replaced:
        done.notes.append(f"{count(len(replaced), 'LMS id')} replaced: {named(replaced, ', ')}")
    if kept:
        done.notes.append(
            f"Canvas's ID not recorded for {count(len(kept), 'student')} with a Moodle ID number, kept "
            "(the gradebook holds one LMS id per student; `course export --format moodle --match idnumber` "
            f"writes it, Canvas's file is matched by SIS Login ID): {named(kept, ', ')}"
        )
    if absent:
        done.notes.append(
            f"{count(len(absent), 'student')} of the gradebook not in {path}, kept (`nbgrader db student "
            f"remove ID` for one who left the course): {named(absent, ', ')}"
        )
    return done


def _keeps_id_number(old: str | None, new: str | None) -> bool:
    """Whether the gradebook's LMS id ``old`` is a Moodle ID number that Canvas's ID ``new``
    would replace (kept: an ID number recorded before Canvas's IDs were tagged is Canvas's own)."""
    return bool(new and ids.canvas_id(new) and ids.id_number(old) and old != ids.canvas_id(new))
