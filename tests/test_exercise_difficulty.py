"""Every exercise says how hard it is and how long it takes, in one format across the course
(ARENA's convention): ``Difficulty: ●●○○○ · about 10 minutes``, in the exercise's own cell,
after its ``### Exercise N`` heading."""

from __future__ import annotations

import re

import nbformat
import pytest

from conftest import ROOT

NOTEBOOKS = sorted(p.name for p in (ROOT / "solutions").iterdir() if (p / f"{p.name}.ipynb").is_file())
HEADING = re.compile(r"^### Exercise (\d+) — `(\w+)`", re.M)
LINE = re.compile(r"^Difficulty: (●{1,5})(○{0,4}) · about (\d+) minutes$")


def _markdown(name):
    nb = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "markdown"]


def _difficulty_lines(text):
    return [ln for ln in text.splitlines() if ln.lstrip().lower().startswith("difficulty")]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_every_exercise_has_one_difficulty_line_in_the_course_format(name):
    cells = _markdown(name)
    exercises = 0
    for text in cells:
        lines = _difficulty_lines(text)
        for line in lines:
            m = LINE.match(line)
            assert m, f"{name}: {line!r} is not in the format 'Difficulty: ●●○○○ · about 10 minutes'"
            assert len(m.group(1)) + len(m.group(2)) == 5 and int(m.group(3)) > 0, (name, line)
        headings = list(HEADING.finditer(text))
        if not headings:
            assert not lines, f"{name}: a difficulty line outside an exercise's cell: {lines}"
            continue
        assert len(headings) == 1, f"{name}: one exercise per markdown cell"
        exercises += 1
        after = text[headings[0].end() :]
        assert len(lines) == 1 and lines[0] in after.splitlines(), (
            f"{name}, exercise {headings[0].group(1)} (`{headings[0].group(2)}`): "
            f"want one difficulty line after the heading, found {lines}"
        )
    assert exercises, f"{name}: no exercise headings found"


def test_the_format_rejects_near_misses():
    assert LINE.match("Difficulty: ●●○○○ · about 10 minutes")
    assert LINE.match("Difficulty: ●●●●● · about 45 minutes")
    for wrong in (
        "Difficulty: ●●○○ · about 10 minutes",  # four dots
        "Difficulty: ●○●○○ · about 10 minutes",  # not filled from the left
        "Difficulty: 2/5 · about 10 minutes",
        "**Difficulty:** ●●○○○ · about 10 minutes",
        "Difficulty: ●●○○○ - about 10 minutes",
        "Difficulty: ●●○○○ · 10 minutes",
    ):
        m = LINE.match(wrong)
        assert not (m and len(m.group(1)) + len(m.group(2)) == 5), wrong
