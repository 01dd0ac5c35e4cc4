"""Ungraded self-check questions: multiple choice, offline, every answer explained at once.

The questions are data (``course_utils/data/self_check.json``): for each notebook a list of
``{"question": …, "options": [{"text": …, "correct": true|false, "why": …}, …]}``, exactly one
option correct and every option explained. ``questions(notebook)`` reads them;
``feedback_html(question, chosen)`` says whether a choice is right and explains every option,
the chosen one marked; ``self_check(notebook)`` is the thin ipywidgets front (a choice per
question and a "check" button). Nothing is recorded, sent or graded.
"""

from __future__ import annotations

import html
import json
from functools import lru_cache
from importlib import resources

from ..device import grading


@lru_cache(maxsize=1)
def _all() -> dict:
    return json.loads(
        resources.files("course_utils").joinpath("data/self_check.json").read_text(encoding="utf-8")
    )


def notebooks() -> list[str]:
    """The notebooks that have self-check questions."""
    return sorted(_all())


def questions(notebook: str) -> list[dict]:
    """The self-check questions of ``notebook`` (e.g. "03_attention")."""
    if notebook not in _all():
        raise KeyError(
            f"no self-check questions for {notebook!r}; there are some for {', '.join(notebooks())}"
        )
    return _all()[notebook]


def feedback_html(question: dict, chosen: int | None) -> str:
    """Whether option ``chosen`` (an index, or None for no choice) is right, then every option
    with its explanation: the right one marked ✓, the chosen one marked as such."""
    options = question["options"]
    if chosen is None:
        verdict = "Choose an answer first; here is what each one means."
    elif options[chosen]["correct"]:
        verdict = "<b>Right.</b>"
    else:
        verdict = "<b>Not quite.</b> Read why, then try the reasoning again."
    rows = []
    for i, option in enumerate(options):
        mark = "✓" if option["correct"] else "✗"
        yours = " <i>(your answer)</i>" if i == chosen else ""
        rows.append(
            f"<li>{mark} <b>{html.escape(option['text'])}</b>{yours}: {html.escape(option['why'])}</li>"
        )
    return f"<div>{verdict}<ul style='margin:0.3em 0'>{''.join(rows)}</ul></div>"


def self_check(notebook: str):
    """The questions of ``notebook`` as a widget: pick an answer, press "check", read why each
    answer is right or wrong. Returns the ipywidgets container, or None while grading."""
    if grading():
        return None
    import ipywidgets as W

    boxes, choices, answers = [], [], []
    for n, q in enumerate(questions(notebook), start=1):
        choice = W.RadioButtons(
            options=[(o["text"], i) for i, o in enumerate(q["options"])],
            value=None,
            layout=W.Layout(width="auto"),
        )
        answer = W.HTML()
        choices.append(choice)
        answers.append(answer)
        boxes.append(W.VBox([W.HTML(f"<b>{n}.</b> {html.escape(q['question'])}"), choice, answer]))
    check = W.Button(description="check", button_style="primary")

    def show(_=None):
        for q, choice, answer in zip(questions(notebook), choices, answers):
            answer.value = feedback_html(q, choice.value)

    check.on_click(show)
    ui = W.VBox([W.HTML("<b>Self-check</b> (not graded: nothing is recorded)"), *boxes, check])
    ui.add_class("course-self-check")  # not a picture widget (.course-widget): none to draw
    ui.controls = {"choices": choices, "answers": answers, "check": check}
    return ui


__all__ = ["notebooks", "questions", "feedback_html", "self_check"]
