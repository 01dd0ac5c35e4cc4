"""``course roster import`` and the LMS exports (``course export --format canvas|moodle|wide``),
on a gradebook filled through nbgrader's API (no grading runs: fast).

Each export is read back by a checker written from the importer's published source, not from
our writer:

* Canvas: instructure/canvas-lms ``app/models/gradebook_importer.rb`` (``header?``,
  ``row_has_student_headers?``, ``update_column_count``, ``check_for_non_student_row``,
  ``process_student``);
* Moodle: moodle/moodle ``grade/import/csv/classes/load_data.php``
  (``map_user_data_with_value``, ``update_grade_item``: a grade is '' or '-' for none, else a
  number, else the import stops with "badgrade"; ``import_new_grade_item``: only '-' is no
  grade for a new grade item; an empty identifier keeps the previous row's user).
"""

from __future__ import annotations

import csv
import re
import warnings

import nbformat
import pytest

from conftest import ASSIGNMENT, make_course, nbgrader_meta, tiny_notebook
from course_grading.authoring import release
from course_grading.commands import roster
from course_grading.commands.cli import main
from course_grading.course.nbgrader_setup import course_directory, gradebook
from course_grading.errors import GradingError
from course_grading.reports import grade_exports

ROSTER = (
    "\ufeffUsername,First name,Last Name,Email address,Section\n"
    "ada,Ada,Lovelace,ada@example.org,A\n"
    'ben,=HYPERLINK("x"),Okafor\u202e,ben@example.org,B\n'
    "cy,,,,\n"
)


def _notebook():
    nb = tiny_notebook()
    nb.cells += [
        nbformat.v4.new_markdown_cell("### Question (2 points, graded by hand)", metadata=nbgrader_meta("q")),
        nbformat.v4.new_markdown_cell(
            "Model answer", metadata=nbgrader_meta("written_q", solution=True, grade=True, points=2)
        ),
    ]
    return nb


@pytest.fixture
def course(tmp_path):
    root = make_course(tmp_path / "course", {ASSIGNMENT: _notebook()})
    release.release(root)  # records the assignment in the gradebook
    return root


def _submit(root, student, test_score, written=None, penalty=0.0, failed=False, regraded=False):
    """A submission as autograde and the Formgrader leave it: the test cell scored (or not,
    when grading ``failed``), the written answer waiting (None) or scored by hand (and taken
    out of the manual grading queue, as the Formgrader does; ``regraded``: put back into it
    by a later autograde of a resubmitted answer, the score given by hand kept)."""
    with gradebook(course_directory(root)) as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's own add_submission
        gb.update_or_create_student(student)
        submission = gb.add_submission(ASSIGNMENT, student)
        for nb in submission.notebooks:
            for grade in nb.grades:
                if grade.name == "test_double":
                    grade.auto_score = None if failed else test_score
                    grade.needs_manual_grade = failed
                elif written is not None:
                    grade.manual_score = written
                    grade.needs_manual_grade = regraded
            nb.late_submission_penalty = penalty
        gb.db.commit()


def canvas_check(rows):
    """The rows as Canvas's gradebook importer reads them: (assignment titles, points, {SIS
    login id: {title: grade}}). Fails where the importer would refuse the file."""
    header = rows[0]
    assert len(header) > 3 and "Student" in header[0] and "ID" in header[1]  # row_has_student_headers?
    student_columns = 3
    if re.search(r"SIS\s+Login\s+ID", header[2]):
        login = 2
        student_columns += 1
    else:
        assert re.search(r"SIS\s+User\s+ID", header[2]) and re.search(r"SIS\s+Login\s+ID", header[3])
        login = 3
        student_columns += 2
    assert "Section" in header[student_columns - 1]  # header?: the last student column
    # strip_non_assignment_columns: Canvas's totals are no assignments
    columns = [
        i
        for i in range(student_columns, len(header))
        if not re.search(
            "Current (Score|Points|Grade)|Final (Score|Points|Grade)|Override (Score|Grade|Status)", header[i]
        )
    ]
    titles = [header[i] for i in columns]
    points, grades = None, {}
    for row in rows[1:]:
        assert len(row) == len(header)
        if "Points Possible" in row[0]:  # check_for_non_student_row
            points = {header[i]: row[i] for i in columns}
            continue
        assert row[1] or row[login], "a student is found by ID, else by SIS id"
        grades[row[login]] = {header[i]: row[i] for i in columns}
        for value in grades[row[login]].values():
            assert value == "" or re.fullmatch(r"\d+(\.\d+)?", value), value
    return titles, points, grades


def moodle_check(rows, identifier, new_items=True):
    """{identifier value: {column: grade}} as Moodle's CSV grade import maps the file, the
    ``identifier`` column mapped to a user field, each "... feedback" column to its item's
    feedback and every other column to a grade item (``new_items``: a new one, where only '-'
    is no grade and an empty cell is stored); fails where it would stop ("badgrade") or give
    a row's grades to the user of the row before (an empty identifier)."""
    header = [h.strip() for h in rows[0]]  # trim_headers
    key = header.index(identifier)
    grades = {}
    for row in rows[1:]:
        if len(row) <= 1:
            continue
        assert row[key].strip(), "an empty identifier: Moodle gives the row to the previous user"
        values = {}
        for column, value in zip(header, row):
            if column in (identifier, "First name", "Last name", "Username", "Email address", "ID number"):
                continue
            value = value.strip()
            if column.endswith(" feedback"):
                values[column] = value
                continue
            assert value in ("", "-") or re.fullmatch(r"-?\d+(\.\d+)?", value), f"badgrade: {value!r}"
            assert not (new_items and value == ""), (
                "an empty cell, mapped to a new grade item, is stored as a grade"
            )
            values[column] = None if value in ("", "-") else float(value)
        grades[row[key]] = values
    return grades


def _read(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))


def test_roster_import_names_students_as_nbgrader_does(course, tmp_path, capsys):
    path = tmp_path / "roster.csv"
    path.write_text(ROSTER, encoding="utf-8")
    _submit(course, "ada", 2)
    assert main(["--root", str(course), "roster", "import", str(path)]) == 0
    assert capsys.readouterr().out.strip() == f"3 students in {path}: 2 added, 1 updated, 0 unchanged"
    with gradebook(course_directory(course)) as gb:
        found = {s.id: (s.first_name, s.last_name, s.email) for s in gb.students}
    assert found == {
        "ada": ("Ada", "Lovelace", "ada@example.org"),
        "ben": ('=HYPERLINK("x")', "Okafor\\u202e", "ben@example.org"),
        "cy": (None, None, None),
    }
    # again, with a field left empty: what the gradebook holds stays
    path.write_text("id,first_name,last_name,email\nada,,Byron,\n", encoding="utf-8")
    done = roster.import_roster(course, path)
    assert (done.added, done.updated, done.unchanged) == ([], ["ada"], [])
    # ben and cy are not in this file: named, kept
    assert done.notes == [
        f"2 students of the gradebook not in {path}, kept "
        "(`nbgrader db student remove ID` for one who left the course): ben, cy"
    ]
    with gradebook(course_directory(course)) as gb:
        ada = gb.find_student("ada")
        assert (ada.first_name, ada.last_name, ada.email) == ("Ada", "Byron", "ada@example.org")


@pytest.mark.parametrize(
    "text,says",
    [
        ("name,email\nada,a@x\n", "no id column"),
        ("id,first_name\nada,A\n../evil,B\n", "line 3 (B): '../evil' is not a valid student id"),
        ("id,first_name\nada,A\n,B\n", "line 3 (B): an empty id is not a valid student id"),
        ("id\nada\nada\n", "line 3: ada is listed twice (first on line 2)"),
        ("id\nada\n@ben\n", "line 3: '@ben' is not a valid student id"),  # a spreadsheet formula
        ("id\nada\n-1\n", "line 3: '-1' is not a valid student id"),
    ],
)
def test_a_roster_with_a_bad_row_imports_nothing(course, tmp_path, text, says):
    path = tmp_path / "roster.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(GradingError, match=re.escape(says)):
        roster.import_roster(course, path)
    with gradebook(course_directory(course)) as gb:
        assert gb.students == []


def test_every_bad_row_is_named_with_the_students_name(course, tmp_path, capsys):
    path = tmp_path / "roster.csv"
    path.write_text(
        "id,first_name,last_name,email\nhal,Hal,Ab,hal@x\nJohn Smith,John,Smith,j@x\nhal,Hal,Ab2,hal2@x\n",
        encoding="utf-8",
    )
    assert main(["--root", str(course), "roster", "import", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("course: error: roster not imported, 2 rows to fix: ")
    assert "line 3 (John Smith): 'John Smith' is not a valid student id; " in err
    assert "line 4 (Hal Ab2): hal is listed twice (first on line 2)" in err
    # many: the first ones in full, then a count, on one line
    path.write_text("id\n" + "".join(f"-{n}\n" for n in range(15)), encoding="utf-8")
    with pytest.raises(GradingError) as raised:
        roster.import_roster(course, path)
    message = str(raised.value)
    assert "line 11: '-9' is not" in message and "line 12" not in message and "(and 5 more)" in message
    with gradebook(course_directory(course)) as gb:
        assert gb.students == []


def test_a_huge_field_is_one_error_line(course, tmp_path, capsys):
    path = tmp_path / "roster.csv"
    path.write_text("id,first_name\nada," + "A" * 300_000 + "\n", encoding="utf-8")
    assert main(["--root", str(course), "roster", "import", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("course: error: roster not imported: ")
    assert "line 2" in err and "field larger than field limit" in err and "Traceback" not in err


def test_roster_is_read_as_untrusted(course, tmp_path):
    target = tmp_path / "real.csv"
    target.write_text("id\nada\n")
    link = tmp_path / "roster.csv"
    link.symlink_to(target)
    with pytest.raises(GradingError, match="not imported"):
        roster.import_roster(course, link)


def _class(course, tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text(ROSTER, encoding="utf-8")
    roster.import_roster(course, path)
    _submit(course, "ada", 2, written=1.5, penalty=0.5)  # graded by hand, late
    _submit(course, "ben", 1)  # written answer waiting
    # cy submitted nothing


def test_canvas_export_follows_the_importers_rules(course, tmp_path, capsys):
    _class(course, tmp_path)
    assert main(["--root", str(course), "export", "--format", "canvas", "--to", str(tmp_path / "c.csv")]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == str(tmp_path / "c.csv")
    assert (
        err.strip()
        == f"course: note: ben/{ASSIGNMENT}: left blank, 2 points of written answers to grade by hand"
    )
    rows = _read(tmp_path / "c.csv")
    titles, points, grades = canvas_check(rows)
    assert titles == [ASSIGNMENT] and points == {ASSIGNMENT: "4"}
    assert grades == {"ada": {ASSIGNMENT: "3"}, "ben": {ASSIGNMENT: ""}, "cy": {ASSIGNMENT: "0"}}
    names = {row[3]: row[0] for row in rows[2:]}
    assert names == {"ada": "Lovelace, Ada", "ben": 'Okafor\\u202e, =HYPERLINK("x")', "cy": "cy"}


def test_moodle_export_follows_the_importers_rules(course, tmp_path):
    _class(course, tmp_path)
    done = grade_exports.export(course, tmp_path / "m.csv", "moodle")
    rows = _read(done.path)
    a, fb = ASSIGNMENT, f"{ASSIGNMENT} feedback"
    assert rows[0] == ["Username", "First name", "Last name", a, fb]
    assert moodle_check(rows, "Username") == {
        "ada": {a: 3.0, fb: "late penalty 0.5"},
        "ben": {a: None, fb: "no grade yet: 2 points of written answers to grade by hand"},
        "cy": {a: 0.0, fb: ""},
    }
    assert next(r for r in rows if r[0] == "ben")[3] == "-"  # never an empty cell: a new item stores it
    assert len(done.notes) == 1 and done.problems == []
    ben = next(r for r in rows if r[0] == "ben")
    assert ben[1:3] == ['\'=HYPERLINK("x")', "Okafor\\u202e"]  # a name is never a formula


def test_moodle_by_email_never_writes_an_empty_identifier(course, tmp_path, capsys):
    _class(course, tmp_path)  # cy has no email
    assert (
        main(
            [
                "--root",
                str(course),
                "export",
                "--format",
                "moodle",
                "--match",
                "email",
                "--to",
                str(tmp_path / "m.csv"),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert "course: error: cy: no email address in the gradebook" in err
    rows = _read(tmp_path / "m.csv")
    assert rows[0][0] == "Email address"
    assert set(moodle_check(rows, "Email address")) == {"ada@example.org", "ben@example.org"}


def test_wide_export_has_penalties_and_manual_points(course, tmp_path):
    _class(course, tmp_path)
    _submit(course, "dee", 2, failed=True)
    done = grade_exports.export(course, tmp_path / "w.csv", "wide")
    path, notes = done.path, done.notes
    rows = {r["student_id"]: r for r in csv.DictReader(open(path, newline="", encoding="utf-8"))}
    a = ASSIGNMENT
    assert list(rows["ada"]) == [
        "student_id",
        "last_name",
        "first_name",
        "email",
        a,
        f"{a} late_penalty",
        f"{a} manual_points",
        f"{a} awaiting_manual",
        "total",
        "total_awaiting_manual",
        "max_total",
        "note",
    ]
    assert [rows["ada"][k] for k in (a, f"{a} late_penalty", f"{a} manual_points", "total", "note")] == [
        "3",
        "0.5",
        "1.5",
        "3",
        "",
    ]
    # ben: 1 autograded point, 2 waiting: a partial total of 1, not 0
    assert [
        rows["ben"][k] for k in (a, f"{a} awaiting_manual", "total", "total_awaiting_manual", "note")
    ] == [
        "",
        "2",
        "1",
        "2",
        f"partial total: 2 points wait for grading by hand; "
        f"{a}: 2 points of written answers to grade by hand",
    ]
    assert [rows["cy"][k] for k in (a, "total", "note")] == ["0", "0", f"{a}: not submitted"]
    # dee: autograding failed: no point is known, none waits for grading by hand
    assert [
        rows["dee"][k] for k in (a, f"{a} awaiting_manual", "total", "total_awaiting_manual", "note")
    ] == [
        "",
        "0",
        "0",
        "0",
        f"{a}: grading failed: an autograded cell has no score",
    ]
    assert notes == [
        f"ben/{a}: left blank, 2 points of written answers to grade by hand",
        f"dee/{a}: left blank, grading failed: an autograded cell has no score",
    ]
