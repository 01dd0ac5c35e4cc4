"""The end of term with an LMS: the course's grades into the files Canvas and Moodle write
themselves (``tests/fixtures/lms``), read back by the importers' rules (``canvas_check``,
``moodle_check`` in ``test_roster_exports``), and the class lists they download read as
rosters. A gradebook filled through nbgrader's API: no grading runs (fast)."""

from __future__ import annotations

import csv
import datetime as dt
import re
from pathlib import Path

import pytest

from conftest import ASSIGNMENT
from course_grading.commands import roster
from course_grading.commands.cli import main
from course_grading.course.nbgrader_setup import course_directory, gradebook
from course_grading.errors import GradingError
from course_grading.reports import grade_exports
from course_grading.reports.lms import canvas
from test_roster_exports import _class, _read, _submit, canvas_check, moodle_check
from test_roster_exports import course as _roster_course

course = _roster_course  # the same fixture: a course with one released assignment

FIXTURES = Path(__file__).parent / "fixtures" / "lms"
CANVAS = FIXTURES / "canvas_gradebook_export.csv"
A = ASSIGNMENT
COLUMN = f"{A} (48213)"


def _due(root, when):
    with gradebook(course_directory(root)) as gb:
        gb.update_or_create_assignment(A, duedate=when)


def _rows_by_login(rows):
    header = rows[0]
    return {row[3]: dict(zip(header, row)) for row in rows[2:]}


def test_canvas_round_trip_fills_the_downloaded_gradebook(course, tmp_path, capsys):
    _class(course, tmp_path)  # ada 3 (late, graded by hand), ben waiting, cy nothing submitted
    _submit(course, "dee", 2, written=2)  # graded, but not in Canvas
    out = tmp_path / "upload.csv"
    code = main(
        ["--root", str(course), "export", "--format", "canvas", "--fill", str(CANVAS), "--to", str(out)]
    )
    captured = capsys.readouterr()
    assert code == 1  # dee's grades cannot land: named, not silent
    assert "course: error: dee (dee): a student of the course the Canvas file lacks" in captured.err
    assert "line 6: Fremd, Eve (eve) is not a student of the course: left as Canvas has it" in captured.err
    assert "line 7: Student, Test (Canvas's test student) is not a student of the course" in captured.err
    assert (
        f"ben/{A}: 2 points of written answers to grade by hand: left as Canvas has it (1.00)" in captured.err
    )
    original, filled = _read(CANVAS), _read(out)
    original[0][0] = original[0][0].lstrip("\ufeff")
    # the importer's view: every student found by Canvas's own ID, the points as Canvas had them
    titles, points, grades = canvas_check(filled)
    assert titles == [COLUMN, "Reading quiz (48190)"] and filled[1] == original[1]
    by_login = _rows_by_login(filled)
    assert {k: v["ID"] for k, v in by_login.items()} == {
        "ada": "1001",
        "ben": "1002",
        "cy": "1003",
        "eve": "1005",
        "": "1999",
    }
    assert [by_login[s][COLUMN] for s in ("ada", "ben", "cy", "eve")] == ["3", "1.00", "0", ""]
    # nothing but the course's own column changed: the other assignment, totals, sections
    for before, after in zip(original[2:], filled[2:]):
        assert before[:5] == after[:5] and before[6:] == after[6:]


def test_canvas_round_trip_leaves_not_yet_due_as_no_grade(course, tmp_path, capsys):
    _class(course, tmp_path)
    _due(course, dt.datetime.utcnow() + dt.timedelta(days=7))
    done = canvas.fill(course, CANVAS, tmp_path / "upload.csv")
    assert _rows_by_login(_read(done.path))["cy"][COLUMN] == ""  # not 0: not due yet
    assert any(
        n.startswith(f"cy/{A}: not submitted, due ") and n.endswith("left empty (no grade)")
        for n in done.notes
    )
    _due(course, dt.datetime.utcnow() - dt.timedelta(days=1))
    done = canvas.fill(course, CANVAS, tmp_path / "upload.csv")
    assert _rows_by_login(_read(done.path))["cy"][COLUMN] == "0"  # past the due date: a 0


def test_canvas_fill_matches_by_recorded_canvas_id_and_names_missing_columns(course, tmp_path):
    _class(course, tmp_path)
    renamed = tmp_path / "renamed.csv"  # Canvas's column renamed: no course assignment has a column
    renamed.write_text(
        CANVAS.read_text(encoding="utf-8-sig").replace(COLUMN, "Attention (48213)"), encoding="utf-8"
    )
    done = canvas.fill(course, renamed, tmp_path / "upload.csv")
    assert any(p.startswith(f"{A}: no column in the Canvas file") for p in done.problems)
    # a login Canvas spells otherwise: found by the Canvas ID the roster import recorded
    relogged = tmp_path / "relogged.csv"
    relogged.write_text(
        CANVAS.read_text(encoding="utf-8-sig").replace(",S1001,ada,", ",S1001,a.lovelace,"), encoding="utf-8"
    )
    with gradebook(course_directory(course)) as gb:  # a Moodle ID number that is a number: not Canvas's
        gb.update_or_create_student("ada", lms_user_id="1001")
    done = canvas.fill(course, relogged, tmp_path / "upload.csv")
    assert _rows_by_login(_read(done.path))["a.lovelace"][COLUMN] == ""
    assert any(p.startswith("ada ") for p in done.problems)
    with gradebook(course_directory(course)) as gb:
        gb.update_or_create_student("ada", lms_user_id="canvas:1001")
    done = canvas.fill(course, relogged, tmp_path / "upload.csv")
    assert _rows_by_login(_read(done.path))["a.lovelace"][COLUMN] == "3"
    assert not any(p.startswith("ada ") for p in done.problems)


def test_canvas_fill_refuses_a_file_that_is_not_canvas_s(course, tmp_path):
    path = tmp_path / "other.csv"
    path.write_text("Username,First name\nada,Ada\n")
    with pytest.raises(GradingError, match="not a Canvas gradebook export"):
        canvas.fill(course, path, tmp_path / "upload.csv")
    assert not (tmp_path / "upload.csv").exists()


def test_a_huge_field_in_a_canvas_download_is_one_error_line(course, tmp_path, capsys):
    path = tmp_path / "huge.csv"
    path.write_text(CANVAS.read_text(encoding="utf-8-sig").replace("Lovelace", "x" * 300_000, 1))
    out = tmp_path / "upload.csv"
    code = main(
        ["--root", str(course), "export", "--format", "canvas", "--fill", str(path), "--to", str(out)]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("course: error: not read: ")
    assert "field larger than field limit" in err and not out.exists()


def test_a_canvas_gradebook_export_reads_as_a_roster(course):
    read = roster.read_roster(CANVAS)
    entries = read.entries
    assert [(e.id, e.first_name, e.last_name, e.lms_id) for e in entries] == [
        ("ada", "Ada", "Lovelace", "canvas:1001"),
        ("ben", "Ben", "Okafor", "canvas:1002"),
        ("cy", None, "Cy", "canvas:1003"),
        ("eve", "Eve", "Fremd", "canvas:1005"),
    ]  # no "Points Possible", no numeric-id student, no test student
    assert read.notes == [f"1 of {CANVAS} not imported, not a student: Student, Test (Canvas's test student)"]
    roster.import_roster(course, CANVAS)
    with gradebook(course_directory(course)) as gb:
        assert sorted(s.id for s in gb.students) == ["ada", "ben", "cy", "eve"]
        assert gb.find_student("ben").lms_user_id == "canvas:1002"


def test_moodle_participants_read_as_a_roster(course, tmp_path):
    with pytest.raises(GradingError, match="--id-column"):  # no username shown: not guessed
        roster.read_roster(FIXTURES / "moodle_participants.csv")
    entries = roster.read_roster(FIXTURES / "moodle_participants_with_username.csv").entries
    assert [(e.id, e.lms_id, e.email) for e in entries] == [
        ("ada", "S1001", "ada@example.org"),
        ("ben", "S1002", "ben@example.org"),
        ("cy", "S1003", None),
    ]
    by_number = roster.read_roster(FIXTURES / "moodle_participants.csv", id_column="ID number").entries
    assert [e.id for e in by_number] == ["S1001", "S1002", "S1003"]


def test_moodle_participants_import_only_students_and_name_the_others(course, capsys):
    """A teacher of the participants list is no student: not imported (so no "not submitted"
    row in every export), and named."""
    participants = FIXTURES / "moodle_participants_with_username.csv"
    assert main(["--root", str(course), "roster", "import", str(participants)]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == f"3 students in {participants}: 3 added, 0 updated, 0 unchanged"
    assert captured.err == (
        f"course: note: 1 of {participants} not imported, not a student: Grace Hopper (Non-editing teacher)\n"
    )
    with gradebook(course_directory(course)) as gb:
        assert sorted(s.id for s in gb.students) == ["ada", "ben", "cy"]


@pytest.mark.parametrize("points_row", [True, False])
def test_a_canvas_export_without_sis_columns_is_refused(course, tmp_path, capsys, points_row):
    """Canvas's gradebook export as a user without SIS permission: Canvas's own ID is never
    taken as a student id; one error says what the file lacks and how to get it."""
    path = tmp_path / "canvas.csv"
    lines = (FIXTURES / "canvas_gradebook_export_no_sis.csv").read_text(encoding="utf-8").splitlines(True)
    path.write_text("".join(lines if points_row else lines[:1] + lines[2:]), encoding="utf-8")
    for extra in ([], ["--id-column", "ID"]):
        assert main(["--root", str(course), "roster", "import", str(path), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(
            "course: error: the roster is a Canvas gradebook export without a SIS Login ID or SIS User ID column"
        )
        assert "Canvas's own ID is no student id" in err and err.count("\n") == 1
    with gradebook(course_directory(course)) as gb:
        assert gb.students == []


def test_a_canvas_row_without_a_login_is_named(course, tmp_path):
    text = CANVAS.read_text(encoding="utf-8-sig")
    path = tmp_path / "canvas.csv"
    path.write_text(text.replace(",S1002,ben,", ",S1002,,"), encoding="utf-8")
    with pytest.raises(
        GradingError, match=re.escape("line 4 (Okafor, Ben): an empty SIS Login ID is not a valid")
    ):
        roster.read_roster(path)
    # a Canvas export with SIS User ID and no SIS Login ID: the SIS User ID is the id
    path.write_text(text.replace("SIS Login ID,", "Integration ID,"), encoding="utf-8")
    assert [e.id for e in roster.read_roster(path).entries] == ["S1001", "S1002", "S1003", "S1005"]


def test_canvas_and_moodle_ids_are_kept_apart(course, tmp_path, capsys):
    """Canvas's ID and Moodle's ID number share nbgrader's one lms_user_id: Canvas's is tagged,
    never replaces an ID number, and a Moodle export by ID number never writes it."""
    participants = FIXTURES / "moodle_participants_with_username.csv"
    roster.import_roster(course, CANVAS)
    _submit(course, "ada", 2)
    done = grade_exports.export(course, tmp_path / "m.csv", "moodle", match="idnumber")
    assert [r[0] for r in _read(done.path)] == ["ID number"]  # no Canvas ID as an ID number
    assert sorted(p.split(":")[0] for p in done.problems) == ["ada", "ben", "cy", "eve"]
    done = roster.import_roster(course, participants)  # Moodle's ID number replaces Canvas's ID
    assert done.notes[1] == (
        "3 LMS ids replaced: ada canvas:1001 → S1001, ben canvas:1002 → S1002, cy canvas:1003 → S1003"
    )
    assert main(["--root", str(course), "roster", "import", str(CANVAS)]) == 0  # and stays
    captured = capsys.readouterr()
    assert captured.out.strip() == f"4 students in {CANVAS}: 0 added, 0 updated, 4 unchanged"
    assert (
        "course: note: Canvas's ID not recorded for 3 students with a Moodle ID number, kept" in captured.err
    )
    assert captured.err.rstrip().endswith("ada (S1001), ben (S1002), cy (S1003)")
    rows = _read(grade_exports.export(course, tmp_path / "m.csv", "moodle", match="idnumber").path)
    assert sorted(r[0] for r in rows[1:]) == ["S1001", "S1002", "S1003"]


def test_moodle_round_trip_by_id_number_only_for_its_participants(course, tmp_path, capsys):
    _class(course, tmp_path)
    _submit(course, "dee", 2, written=2)  # in the gradebook, not a Moodle participant
    participants = FIXTURES / "moodle_participants_with_username.csv"
    roster.import_roster(course, participants)  # records each ID number
    out = tmp_path / "moodle.csv"
    code = main(
        [
            "--root",
            str(course),
            "export",
            "--format",
            "moodle",
            "--match",
            "idnumber",
            "--roster",
            str(participants),
            "--to",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1 and f"course: error: dee: not in {participants}" in err
    rows = _read(out)
    assert rows[0][:3] == ["ID number", "First name", "Last name"]
    grades = moodle_check(rows, "ID number")
    assert {k: v[A] for k, v in grades.items()} == {"S1001": 3.0, "S1002": None, "S1003": 0.0}
    # every identifier is one Moodle's participants list has
    with open(participants, newline="", encoding="utf-8") as fh:
        known = {r["ID number"] for r in csv.DictReader(fh)}
    assert set(grades) <= known


def test_moodle_feedback_carries_the_graders_comments(course, tmp_path):
    _class(course, tmp_path)
    with gradebook(course_directory(course)) as gb:
        comment = gb.find_comment("written_q", "01_tiny", A, "ada")
        comment.manual_comment = "Right idea; the scaling by 1/sqrt(d) is missing."
        gb.db.commit()
    rows = _read(grade_exports.export(course, tmp_path / "m.csv", "moodle").path)
    ada = moodle_check(rows, "Username")["ada"]
    assert ada[f"{A} feedback"] == (
        "written_q: Right idea; the scaling by 1/sqrt(d) is missing.; late penalty 0.5"
    )


def test_no_grade_yet_is_not_zero_in_any_format(course, tmp_path):
    _class(course, tmp_path)
    _due(course, dt.datetime.utcnow() + dt.timedelta(days=7))
    canvas_rows = _read(grade_exports.export(course, tmp_path / "c.csv", "canvas").path)
    assert canvas_check(canvas_rows)[2]["cy"] == {A: ""}
    moodle_rows = _read(grade_exports.export(course, tmp_path / "m.csv", "moodle").path)
    assert next(r for r in moodle_rows if r[0] == "cy")[3] == "-"
    wide = grade_exports.export(course, tmp_path / "w.csv", "wide")
    cy = {r["student_id"]: r for r in csv.DictReader(open(wide.path, newline="", encoding="utf-8"))}["cy"]
    assert cy[A] == "" and "not submitted, due" in cy["note"]


def test_configured_canvas_ids_name_the_columns(course, tmp_path):
    """``c.LMS.canvas_assignment_ids``: the new file's column is "name (id)" (Canvas matches the
    id), and a downloaded gradebook's column is found by its id whatever its title."""
    _class(course, tmp_path)
    with (course / "nbgrader_config.py").open("a", encoding="utf-8") as config:
        config.write(f"\nc.LMS.canvas_assignment_ids = {{{A!r}: 48213}}\n")
    titles, _, grades = canvas_check(_read(grade_exports.export(course, tmp_path / "c.csv", "canvas").path))
    assert titles == [COLUMN] and grades["ada"] == {COLUMN: "3"}
    renamed = tmp_path / "renamed.csv"
    renamed.write_text(
        CANVAS.read_text(encoding="utf-8-sig").replace(COLUMN, "Attention (48213)"), encoding="utf-8"
    )
    done = canvas.fill(course, renamed, tmp_path / "upload.csv")
    assert not any(p.startswith(A) for p in done.problems)
    assert _rows_by_login(_read(done.path))["ada"]["Attention (48213)"] == "3"


def test_moodle_participants_without_usernames_select_by_id_number(course, tmp_path):
    """Moodle's participants download on a site that shows no username: the students are
    picked by the identifier the file is matched by (ID number), recorded by a roster import."""
    _class(course, tmp_path)
    with gradebook(course_directory(course)) as gb:
        for student, number in (("ada", "S1001"), ("ben", "S1002")):
            gb.update_or_create_student(student, lms_user_id=number)
    done = grade_exports.export(
        course, tmp_path / "m.csv", "moodle", match="idnumber", roster=FIXTURES / "moodle_participants.csv"
    )
    grades = moodle_check(_read(done.path), "ID number")
    assert {k: v[A] for k, v in grades.items()} == {"S1001": 3.0, "S1002": None}
    assert [p.split(":")[0] for p in done.problems] == ["cy"]  # no ID number recorded: named


def test_moodle_round_trip_by_email_against_its_own_grade_export(course, tmp_path):
    """The Moodle grade export as the class list: only the users Moodle listed are written,
    matched by email, each grade a number or '-'."""
    _class(course, tmp_path)  # cy has no email, and is not in Moodle's export either
    moodle_export = FIXTURES / "moodle_grades_export.csv"
    done = grade_exports.export(course, tmp_path / "m.csv", "moodle", match="email", roster=moodle_export)
    grades = moodle_check(_read(done.path), "Email address")
    assert {k: v[A] for k, v in grades.items()} == {"ada@example.org": 3.0, "ben@example.org": None}
    assert [p.split(":")[0] for p in done.problems] == ["cy"]
    with open(moodle_export, newline="", encoding="utf-8") as fh:
        assert set(grades) <= {r["Email address"] for r in csv.DictReader(fh)}
