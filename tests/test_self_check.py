"""The ungraded self-check questions: well-formed data, feedback that explains every answer,
and a widget whose "check" shows it (course_utils/widgets/self_check.py)."""

from __future__ import annotations

import pytest

from conftest import ROOT
from course_utils.widgets import self_check as sc


def test_every_notebook_has_questions():
    folders = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.name[:2].isdigit())
    assert sc.notebooks() == folders


@pytest.mark.parametrize("notebook", sc.notebooks())
def test_each_question_has_one_right_answer_and_every_answer_explained(notebook):
    for q in sc.questions(notebook):
        assert q["question"].strip()
        assert len(q["options"]) >= 3
        assert sum(o["correct"] for o in q["options"]) == 1, q["question"]
        assert all(o["text"].strip() and len(o["why"]) > 20 for o in q["options"]), q["question"]


def test_the_right_answer_is_not_always_in_the_same_place():
    """Where the right option sits varies, within each notebook and across the course: a learner
    who has noticed "always the first" must still have to think."""
    places = {
        nb: [[o["correct"] for o in q["options"]].index(True) for q in sc.questions(nb)]
        for nb in sc.notebooks()
    }
    for notebook, where in places.items():
        assert len(where) < 2 or len(set(where)) > 1, (
            f"{notebook}: the right answer is option {where[0] + 1} of every question"
        )
    every = [i for where in places.values() for i in where]
    assert max(every.count(i) for i in set(every)) <= len(every) / 2, places


def test_feedback_marks_the_choice_and_explains_all():
    q = {
        "question": "?",
        "options": [
            {"text": "a <b>", "correct": False, "why": "because a"},
            {"text": "b", "correct": True, "why": "because b"},
        ],
    }
    wrong = sc.feedback_html(q, 0)
    assert "Not quite" in wrong and "because a" in wrong and "because b" in wrong
    assert "(your answer)" in wrong.split("because a")[0] and "a &lt;b&gt;" in wrong  # escaped
    right = sc.feedback_html(q, 1)
    assert "Right" in right and right.count("(your answer)") == 1
    assert "Choose an answer" in sc.feedback_html(q, None)
    with pytest.raises(KeyError, match="no self-check questions"):
        sc.questions("99_nothing")


def test_the_widget_explains_every_answer_on_check(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.delenv("COURSE_GRADING", raising=False)
    ui = sc.self_check("03_attention")
    choices, answers = ui.controls["choices"], ui.controls["answers"]
    assert len(choices) == len(sc.questions("03_attention")) and all(a.value == "" for a in answers)
    choices[0].value = 1
    ui.controls["check"].click()
    assert "(your answer)" in answers[0].value and "Choose an answer" in answers[1].value
    for q, a in zip(sc.questions("03_attention"), answers):
        assert all(o["why"][:30].replace("'", "&#x27;") in a.value for o in q["options"])
