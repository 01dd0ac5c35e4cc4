"""A real browser: JupyterLab in headless Chromium opens each of the student notebooks with
its exercises filled in with working code, runs it, and then:

- every widget renders, and every one of its controls (a slider moved with the keyboard, a
  menu entry picked, a box ticked, a toggle or button pressed, a text box changed and
  changed back) redraws its picture: a control whose move changes nothing visible fails;
  the training display of 08 says how far its run got;
- no picture on the page, widget or static figure, is drawn below the resolution it is shown
  at (a PNG stretched wider than its pixels is blurry).

The page is 1280 px wide, as a learner's laptop screen. With ``COURSE_SCREENSHOTS=<folder>``
the test also saves a picture of every widget after its interactions, once its kernel is
idle (the picture matches the controls), and of the static figures
listed in ``FIGURES``, and enters each in the folder's MANIFEST.json with the notebook it
shows and the state it was put in (tests/screenshot_manifest.py); docs/screenshots/ is made
that way, with the hub's pictures (tests/test_hub.py), by
``COURSE_SCREENSHOTS=docs/screenshots .venv/bin/python -m pytest -m browser tests/test_browser.py tests/test_hub.py``
(one notebook's: ``-k 09_gpt``); tests/test_screenshots.py fails when one no longer shows
today's notebook.

A half-done notebook, with one exercise buggy and two unwritten, runs to its end with one
clear line for each failure and nothing of the course's internals (with ``COURSE_SCREENSHOTS``
it saves docs/screenshots/learner-*.png); no message in it is broken inside a word.

Needs Debian's chromium (scripts/test.sh installs it when it can). Skipped without it, except in
CI, where a missing browser is a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from jupyter_browser import (
    CHROMIUM,
    FLAGS,
    ROOT,
    control_values,
    course_lab,
    filled_in,
    move_control,
    open_and_run_all,
    other_text,
    require_browser,
    shut_down_kernels,
    wait_for_one_idle_kernel,
    widget_controls,
    words_broken,
)
from screenshot_manifest import save

NOTEBOOKS = sorted(p.parent.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
VIEWPORT = {"width": 1280, "height": 900}
# how many widgets each notebook shows (training display included)
WIDGETS = {
    "01_embeddings": 1,
    "02_cosine_similarity": 2,
    "03_attention": 1,
    "04_multi_head_attention": 1,
    "05_positional_encoding": 1,
    "06_encoder": 1,
    "07_decoder": 1,
    "08_generation": 3,
    "09_gpt": 2,
}
# static figures worth a screenshot: a piece of their cell's first lines (CodeMirror lays out only
# the lines in view, so a long cell's last lines are not on the page) -> file name
FIGURES = {
    "01_embeddings": {"plot_word_projection(projection": "01_countries"},
    "05_positional_encoding": {"clear of the peaks": "05_similarity_legend"},
    "06_encoder": {"def gradient_per_layer": "06_norm_gradients"},
    "07_decoder": {"def masks(src, tgt_in)": "07_loss_title"},
    "08_generation": {"plot_temperatures(z": "08_temperatures"},
}
# more text typed into a widget after its first interaction: (widget, box, text, what to see)
TYPED = {
    "01_embeddings": [(0, "words", "prince princess boy girl uncle aunt brother sister queen", "redraw")],
    "02_cosine_similarity": [(1, "as c is to ?", "xyzzyq", "error")],
    "03_attention": [(0, "sentence", "we sat on the bank of the river zxqwv", "redraw")],
    "04_multi_head_attention": [(0, "sentence", "my dog did not eat because it was full", "query it")],
    "09_gpt": [(0, "prompt", "KING HENRY VI:", "redraw"), (0, "prompt", "Zounds€", "error")],
}
# a slider or toggle set before the picture: (widget, label, value). 07's example 1 is
# "1 8 1", a palindrome, whose reversal looks like no reversal; example 0 is not one. 09's
# stepper samples, so that the picture shows the learner's sampler at work
SET = {"07_decoder": [(0, "example", 0)], "09_gpt": [(0, "greedy/sample", "sample")]}
SHOTS = Path(os.environ["COURSE_SCREENSHOTS"]) if os.environ.get("COURSE_SCREENSHOTS") else None

pytestmark = [pytest.mark.browser, pytest.mark.slow]


# The half-done notebook: softmax written, simple_self_attention raising inside the learner's
# own line, the last two exercises not written yet.
HALF_DONE = "03_attention"
HALF_DONE_CODE = {
    "simple_self_attention": "def simple_self_attention(X):\n"
    "    scores = X @ X.transpose(-2, -1)  # (..., seq, seq)\n"
    "    return softmax(scores) @ X[..., :2, :]\n"
}
HALF_DONE_WRITTEN = ("softmax",)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_browser()
    work = tmp_path_factory.mktemp("lab")
    for name in NOTEBOOKS:
        folder = work / name  # each beside its own building_blocks.py
        folder.mkdir()
        filled_in(name, folder)
    half = work / "half_done"
    half.mkdir()
    filled_in(HALF_DONE, half, written=HALF_DONE_WRITTEN, code=HALF_DONE_CODE, name="half_done")
    with course_lab(work) as (base, token):
        yield base, token


def _run_all(page, base: str, token: str, workspace: str, notebook: str) -> None:
    open_and_run_all(page, base, token, workspace, notebook)


# -- what a widget shows, and how to make it respond ------------------------------------------
VISIBLE_SOURCES = (
    "[...w.querySelectorAll('img')].filter(i => i.offsetParent !== null)"
    ".map(i => i.getAttribute('src')).join('|')"
)


def _pictures(widget) -> str:
    """The sources of the widget's visible pictures, as one string (changes on a redraw)."""
    return widget.evaluate(f"w => {VISIBLE_SOURCES}")


def _redrew(page, widget, before: str, timeout_ms: int = 30_000) -> bool:
    try:
        page.wait_for_function(
            f"([w, old]) => {{ const now = {VISIBLE_SOURCES}; return now !== old && now !== ''; }}",
            arg=[widget.element_handle(), before],
            timeout=timeout_ms,
        )
        return True
    except Exception:  # playwright's TimeoutError
        return False


def _move_every_control(page, widget, i: int) -> list[str]:
    """Move every usable control of the widget once (a text box or menu there and back), each time
    checking that the picture changed: a control that changes nothing visible looks broken.
    Returns what was done."""
    done = []
    for control in widget_controls(widget):
        if control["disabled"]:  # e.g. 01's runners-up, before notebook 02's analogy
            continue
        # text boxes and menus there and back: the notebook's own state for what follows
        moves = 2 if control["kind"] in ("text", "menu") else 1
        first = control["locator"].input_value() if control["kind"] in ("text", "menu") else None
        texts = (other_text(control["name"], first), first) if control["kind"] == "text" else None
        for move in range(moves):
            before = _pictures(widget)
            if control["kind"] == "menu" and move == 1:
                control["locator"].select_option(first)
            else:
                move_control(page, control, move, texts)
            what = f"{control['kind']} {control['name']!r}"
            assert _redrew(page, widget, before), f"widget {i}: moved {what}, the picture stayed"
        done.append(what)
    return done


def _type_into(page, widget, box: str, text: str, expect: str) -> None:
    """Type ``text`` into the widget's text box labelled ``box`` and check what follows: a
    redraw, an error message in place of the picture, or the query menu still on "it"."""
    before = _pictures(widget)
    field = widget.locator(".widget-text", has=page.locator(f"label:text-is('{box}')"))
    field.locator("input").fill(text)
    field.locator("input").press("Enter")
    if expect == "error":
        page.wait_for_function(
            "w => w.innerText.includes('Error') && ![...w.querySelectorAll('img')]"
            ".some(i => i.offsetParent !== null)",
            arg=widget.element_handle(),
            timeout=30_000,
        )
        return
    assert _redrew(page, widget, before), f"typing into {box!r} did not redraw"
    if expect == "query it":
        # the menu follows the picture in a message of its own: wait for the new sentence's
        # tokens in it, then read which one is chosen
        menu = widget.locator("select").first
        first_word = text.split()[0]
        menu.page.wait_for_function(
            "([s, w]) => s.options.length && s.options[0].text.replace(/\\s/g, ' ') === '0: ' + w",
            arg=[menu.element_handle(), first_word],
            timeout=30_000,
        )
        chosen = menu.evaluate("s => s.selectedOptions[0].text")
        assert chosen.replace("\xa0", " ").endswith(": it"), f"the query moved to {chosen!r}"


UNDERSAMPLED_JS = """() => [...document.querySelectorAll('.jp-OutputArea-output img')]
    .filter(i => i.offsetParent !== null && i.clientWidth > 0)
    .filter(i => i.naturalWidth + 1 < i.clientWidth * window.devicePixelRatio)
    .map(i => `${i.naturalWidth}px drawn, shown ${i.clientWidth}px wide`)"""
COUNT_IMAGES_JS = """() => [...document.querySelectorAll('.jp-OutputArea-output img')]
    .filter(i => i.offsetParent !== null && i.clientWidth > 0).length"""


def _save(locator, name: str, assignment: str, state: dict) -> None:
    """A screenshot of ``locator``, a part of the page of notebook ``assignment``."""
    if SHOTS is not None:
        locator.scroll_into_view_if_needed()
    save(
        lambda path: locator.screenshot(path=path), name, f"notebooks/{assignment}/{assignment}.ipynb", state
    )


def _set(page, widget, label: str, value) -> None:
    """Set the slider labelled ``label`` to ``value`` with the keyboard (a redraw per step), or
    press the toggle's button ``value``."""
    control = next(c for c in widget_controls(widget) if c["name"] == label)
    handle = control["locator"]
    if control["kind"] == "toggle":
        button = handle.locator("button", has_text=value).first
        if "mod-active" not in (button.get_attribute("class") or ""):
            before = _pictures(widget)
            button.click()
            assert _redrew(page, widget, before), f"pressed {value!r}, the picture stayed"
        return
    for _ in range(50):
        now = float(handle.get_attribute("aria-valuenow"))
        if now == value:
            return
        before = _pictures(widget)
        handle.focus()
        page.keyboard.press("ArrowRight" if now < value else "ArrowLeft")
        assert _redrew(page, widget, before), f"moved slider {label!r}, the picture stayed"
    raise AssertionError(f"slider {label!r} never reached {value}")


@pytest.mark.parametrize("assignment", NOTEBOOKS)
def test_notebook_widgets_render_respond_and_are_sharp(lab, assignment):
    from playwright.sync_api import sync_playwright

    base, token = lab
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
        try:
            _run_all(page, base, token, assignment, f"{assignment}/{assignment}.ipynb")
            errors = page.locator(
                ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] :text('Traceback')"
            )
            assert errors.count() == 0, errors.first.inner_text()[:2000]
            widgets = page.locator(".course-widget")
            expected = WIDGETS.get(assignment, 1)
            page.wait_for_function(
                f"() => document.querySelectorAll('.course-widget').length >= {expected}", timeout=60_000
            )
            assert widgets.count() == expected, f"{widgets.count()} widgets, {expected} expected"
            done = []
            for i in range(expected):
                widget = widgets.nth(i)
                widget.scroll_into_view_if_needed()
                widget.locator("img.course-picture").first.wait_for(timeout=60_000)
                before = _pictures(widget)
                assert before, f"widget {i} shows no picture"
                moved = _move_every_control(page, widget, i)
                if not moved:  # the training display: it only reports
                    report = widget.inner_text()
                    assert "steps" in report and " s on " in report, report
                    done.append("training display: " + report.strip().splitlines()[-1])
                else:
                    done.append(f"widget {i}: {len(moved)} controls moved, each redrew ({', '.join(moved)})")
                state = {}
                for _, label, value in (t for t in SET.get(assignment, []) if t[0] == i):
                    _set(page, widget, label, value)
                    done.append(f"widget {i}: {label!r} set to {value}")
                nxt = widget.locator("button.jupyter-button", has_text="next token")
                if nxt.count() and nxt.first.is_enabled():  # the stepper: a few tokens written
                    state["next token pressed"] = 3
                    for _ in range(3):
                        before = _pictures(widget)
                        nxt.first.click()
                        assert _redrew(page, widget, before)
                typed = [t for t in TYPED.get(assignment, []) if t[0] == i]
                for _, box, text, expect in (t for t in typed if t[3] != "error"):
                    _type_into(page, widget, box, text, expect)
                    done.append(f"widget {i}: typed into {box!r}, {expect}")
                wait_for_one_idle_kernel(base, token)  # the picture matches the controls
                if SHOTS is not None:
                    state = {"controls": control_values(widget), **state}
                _save(widget, f"{assignment[:2]}_widget_{i}", assignment, state)
                for _, box, text, expect in (t for t in typed if t[3] == "error"):
                    _type_into(page, widget, box, text, expect)
                    done.append(f"widget {i}: typed into {box!r}, the picture gave way to the error")
                    _save(
                        widget,
                        f"{assignment[:2]}_widget_{i}_error",
                        assignment,
                        {"controls": control_values(widget)} if SHOTS else {},
                    )
            for snippet, name in FIGURES.get(assignment, {}).items():
                cell = page.locator(".jp-CodeCell", has_text=snippet).first
                _save(
                    cell.locator(".jp-OutputArea-output img").first,
                    name,
                    assignment,
                    {"figure of the cell with": snippet},
                )
            page.wait_for_timeout(500)  # let the last pictures load before measuring them
            assert page.evaluate(COUNT_IMAGES_JS) >= expected
            blurry = page.evaluate(UNDERSAMPLED_JS)
            assert not blurry, f"pictures drawn below their displayed resolution: {blurry}"
            print(f"{assignment}: " + "; ".join(done))
        except Exception:
            page.screenshot(path=f"/tmp/browser-failure-{assignment}.png", full_page=False)
            raise
        finally:
            browser.close()
            shut_down_kernels(base, token)


def test_half_done_notebook_runs_to_the_end_with_one_line_per_failure(lab):
    """Run All on 03 with softmax written, simple_self_attention raising in the learner's own
    line and the last two exercises unwritten: every cell runs; the failing test shows the
    check's message with that line, the cells that need unwritten exercises say which; each
    message's lines break between words, never inside one."""
    from playwright.sync_api import sync_playwright

    base, token = lab
    state = {
        "exercises written": [*HALF_DONE_WRITTEN, *HALF_DONE_CODE],
        "their code": HALF_DONE_CODE,
        "then": "Run All Cells",
    }
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            _run_all(page, base, token, "half-done", "half_done/half_done.ipynb")
            outputs = page.locator(".jp-OutputArea-output")
            # textContent: cells scrolled out of view are not laid out, so have no innerText
            texts = [t.strip() for t in outputs.evaluate_all("els => els.map(e => e.textContent)")]
            failed = [t for t in texts if t.startswith("CheckFailed")]
            assert [t.split()[1].rstrip(":") for t in failed] == [
                "simple_self_attention",
                "scaled_dot_product_attention",
                "causal_mask",
            ], failed
            raised = " ".join(failed[0].split())  # its lines broken between words
            assert raised.startswith("CheckFailed: simple_self_attention raised RuntimeError: ")
            assert raised.endswith("in line `return softmax(scores) @ X[..., :2, :]`")
            assert "`return softmax(scores) @ X[..., :2, :]`" in failed[0]  # one line, whole
            assert "Traceback" not in raised
            assert "not implemented yet" in failed[1] and "not implemented yet" in failed[2]
            notes = [" ".join(t.split()) for t in texts if t.startswith("this cell needs")]
            assert any(
                t.startswith(
                    "this cell needs `scaled_dot_product_attention`, exercise 3 above — not written yet"
                )
                for t in notes
            ), notes
            assert any("`causal_mask`, exercise 4 above" in t for t in notes), notes
            for internal in ("_core.py", "Check.close", "site-packages", "course_utils"):
                assert not any(internal in t for t in texts), internal
            # what the learner sees: the failing check below its cell, then a note further down
            news = page.locator(".jp-toast-button", has_text="No")
            if news.count():  # JupyterLab's question about news: not part of the course
                news.first.click()
            check = outputs.filter(has_text="CheckFailed: simple_self_attention").first
            check.evaluate("e => e.scrollIntoView({block: 'center'})")
            assert not words_broken(check), words_broken(check)
            notebook = f"notebooks/{HALF_DONE}/{HALF_DONE}.ipynb"
            save(lambda path: page.screenshot(path=path), "learner-failing-check", notebook, state)
            note = outputs.filter(has_text="this cell needs `causal_mask`").first
            note.evaluate("e => e.scrollIntoView({block: 'center'})")
            assert not words_broken(note), words_broken(note)
            save(lambda path: page.screenshot(path=path), "learner-run-all-half-done", notebook, state)
        except Exception:
            page.screenshot(path="/tmp/browser-failure-half-done.png", full_page=False)
            raise
        finally:
            browser.close()
            shut_down_kernels(base, token)
