"""``course export --format moodle``: a file for Moodle's CSV grade import, written by the
rules of the importer's own source (moodle/moodle, ``grade/import/csv/classes/load_data.php``):

* the instructor maps one column to a user field (``username``, ``useremail``, ``useridnumber``,
  ``userid``) and each other column to a grade item, a new grade item, or the feedback of a
  grade item (``feedback_<item id>``);
* a row whose identifier is empty is not skipped: the importer keeps the user of the row
  before it, and gives that student the row's grades. A user it cannot find stops the whole
  import ("usermappingerror");
* a grade is a number, or ``-`` or an empty cell for no grade: but an empty cell mapped to a
  **new** grade item is stored as a grade (``import_new_grade_item`` only skips ``-``), so
  "no grade" is written ``-`` here, which both paths read as none.

So the file holds exactly one identifier column, ``match``: "Username" (the student id,
which is the hub's user name), "Email address" or "ID number" (the roster's, see
``roster``); a student without a value there is left out of the file and named (the command
ends with exit status 1), never written with an empty identifier. With a roster (Moodle's
participants download) only its students are written, and each gradebook student not in it
is named: one unknown user would stop the import. Each assignment has a feedback column
beside it ("<assignment> feedback": the grader's comments on the written answers, and what is
not a grade yet, such as "4 points of written answers to grade by hand"), to map to that
grade item's feedback.
"""

from __future__ import annotations

from course_grading.reports.reports_csv import Literal

NO_GRADE = Literal("-")
# --match: (header, the StudentGrades attribute holding it, Moodle's user field to map it to)
IDENTIFIERS = {
    "username": ("Username", "id", "username"),
    "email": ("Email address", "email", "email address"),
    "idnumber": ("ID number", "id_number", "ID number"),
}
NAME_COLUMNS = ["First name", "Last name"]
FEEDBACK = " feedback"


def moodle_rows(
    maxima: dict[str, float], found: list, match: str = "username"
) -> tuple[list[list], list[str]]:
    """The rows of the Moodle file (identifier first, the names, then each assignment's grade
    and its feedback), and one line per student left out for want of an identifier."""
    header, attribute, _ = IDENTIFIERS[match]
    names = list(maxima)
    rows = [[header, *NAME_COLUMNS] + [c for n in names for c in (n, f"{n}{FEEDBACK}")]]
    left_out = []
    for s in found:
        identifier = getattr(s, attribute).strip()
        if not identifier:
            left_out.append(
                f"{s.id}: no {header.lower()} in the gradebook (import a roster that "
                f"has it, or map by another column with --match): not in the file, "
                f"give its grades in Moodle by hand"
            )
            continue
        row = [identifier, s.first_name, s.last_name]
        for n in names:
            grade = s.grades[n]
            row += [NO_GRADE if grade.grade is None else grade.grade, grade.feedback()]
        rows.append(row)
    return rows, left_out


def only_listed(found: list, roster_path, match: str = "username") -> tuple[list, list[str]]:
    """The students of ``found`` that the LMS's class list at ``roster_path`` names by the
    ``match`` identifier (read as ``course roster import`` reads it; a participants download
    without usernames is read by that identifier's own column), and one line per student of
    the gradebook it lacks."""
    from course_grading.commands.roster import read_roster
    from course_grading.errors import GradingError

    header, attribute, _ = IDENTIFIERS[match]  # RosterEntry and StudentGrades share the names
    try:
        listed = {getattr(e, attribute) for e in read_roster(roster_path).entries} - {None, ""}
    except GradingError:
        if match == "username":
            raise
        listed = {e.id for e in read_roster(roster_path, id_column=header).entries}
    kept = [s for s in found if getattr(s, attribute) in listed]
    missing = [
        f"{s.id}: not in {roster_path} (the LMS would not know them): not in the file"
        for s in found
        if getattr(s, attribute) not in listed
    ]
    return kept, missing
