"""Driving JupyterLab in headless Chromium: what the browser tests share.

Debian's chromium, driven by Python playwright with ``executable_path`` (never ``playwright
install``: it downloads a browser). Without either, a test that needs them is skipped, except
in CI, where a missing browser is a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
# every code cell of the notebook has run: each input prompt shows [n]
ALL_CELLS_RAN = (
    "() => { const p = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]"
    ".map(e => e.textContent.trim());"
    " return p.length > 0 && p.every(t => /^\\[\\d+\\]:$/.test(t)); }"
)


def require_or_skip(missing: str | None) -> None:
    """Skip the test saying what is ``missing``; in CI (``CI`` set), fail instead."""
    if missing:
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)


def require_browser() -> None:
    try:
        import playwright  # noqa: F401 - whether playwright is installed
    except ImportError:
        require_or_skip("playwright is not installed (scripts/setup.sh --test installs it)")
    if not CHROMIUM:
        require_or_skip(
            "no chromium on this machine: install it to run the browser tests "
            "(scripts/setup.sh --test installs it as root)"
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(url: str, token: str | None = None, method: str = "GET", body=None, timeout: float = 10):
    """A JSON request to a Jupyter server or hub REST API (``token`` in the header); the reply."""
    headers = {"Authorization": f"token {token}"} if token else {}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    with urllib.request.urlopen(request, timeout=timeout) as r:
        text = r.read()
    return json.loads(text) if text.strip() else None


def write_instructor_config(folder: Path, course: Path) -> None:
    """The instructor's two Jupyter settings of docs/guides/jupyterhub.md, step 3, in ``folder``
    (their ~/.jupyter): the Formgrader and `course` find ``course``; JupyterHub's framing rule
    relaxed for the Formgrader tab; the Formgrader's Content-Security-Policy extension on."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nbgrader_config.py").write_text(
        "# The Formgrader finds the course wherever the instructor's server starts.\n"
        "c = get_config()  # noqa: F821\n"
        f"load_subconfig({str(course / 'nbgrader_config.py')!r})\n",
        encoding="utf-8",
    )
    (folder / "jupyter_server_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        "# JupyterHub forbids framing a user's pages (frame-ancestors 'none'); the Formgrader tab\n"
        "# frames the instructor's own server\n"
        'c.ServerApp.tornado_settings = {"headers": {"Content-Security-Policy": "frame-ancestors \'self\'"}}\n'
        "# the Formgrader's pages run no script but their own\n"
        'c.ServerApp.jpserver_extensions = {"course_grading.instructor_server": True}\n',
        encoding="utf-8",
    )


@contextlib.contextmanager
def jupyter_server(cmd: list[str], log_path: Path, token: str, port: int, **popen):
    """Start the Jupyter server ``cmd`` (listening on 127.0.0.1:``port``, its output in
    ``log_path``), wait until its API answers, yield its base URL; stop it afterwards."""
    log = open(log_path, "w")  # read it when a test fails
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, **popen)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                api(f"{base}/api/status", token, timeout=20)
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail(f"the Jupyter server did not start within 60 s: see {log_path}")
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


@contextlib.contextmanager
def course_lab(work: Path, token: str = "course-test-token"):
    """JupyterLab serving ``work`` (the notebooks already there), as a learner runs it: no news
    toast over the pictures, one torch thread per kernel (the models are tiny, and on a busy
    machine two threads fighting for two shared cores make 07's training take minutes), the
    inline backend. Yields ``(base_url, token)``."""
    import sys

    # no "get notified about Jupyter news?" toast over the pictures, and no request for it
    settings = work / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True, exist_ok=True)
    (settings / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False})
    )
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "jupyterlab",
        "--no-browser",
        f"--port={port}",
        "--ip=127.0.0.1",
        f"--ServerApp.token={token}",
        f"--ServerApp.root_dir={work}",
        "--ServerApp.open_browser=False",
        "--LabApp.news_url=",
        "--allow-root",
    ]
    # as a learner's: nothing of a grading run this test process may have made before
    grading = ("NBGRADER_EXECUTION", "NBGRADER_VALIDATING", "COURSE_GRADING", "COURSE_SANDBOXED")
    env = {
        **{k: v for k, v in os.environ.items() if k not in grading},
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "JUPYTERLAB_SETTINGS_DIR": str(work / "settings"),
        "OMP_NUM_THREADS": "1",
    }
    with jupyter_server(cmd, work / "jupyterlab.log", token, port, env=env) as base:
        yield base, token


def wait_for_one_idle_kernel(server: str, token: str, timeout: float = 60) -> None:
    """A fresh page may start its kernel twice: wait until one kernel is idle and stays so
    (``server``: the Jupyter server's base URL)."""
    deadline, stable, states = time.time() + timeout, 0, []
    while time.time() < deadline:
        sessions = api(f"{server}/api/sessions", token)
        states = [s["kernel"]["execution_state"] for s in sessions if s.get("kernel")]
        stable = stable + 1 if states == ["idle"] else 0
        if stable >= 4:
            return
        time.sleep(0.5)
    pytest.fail(f"the notebook's kernel never settled: {states}")


def shut_down_kernels(server: str, token: str) -> None:
    for session in api(f"{server}/api/sessions", token):
        api(f"{server}/api/sessions/{session['id']}", token, method="DELETE")


def run_all_cells(page) -> None:
    """Run > Run All Cells, from JupyterLab's menu bar."""
    page.click("#jp-menu-panel .lm-MenuBar-itemLabel:text-is('Run')", timeout=10_000)
    page.click("text=Run All Cells", timeout=10_000)


def wait_until_all_cells_ran(page, timeout_ms: int = 240_000) -> None:
    page.wait_for_function(ALL_CELLS_RAN, timeout=timeout_ms)


def last_widget_with_picture(page):
    """The output area of the notebook's last widget that shows controls and a picture."""
    widget = page.locator(".jp-OutputArea-output:has(.jupyter-widgets):has(img)").last
    widget.wait_for(timeout=120_000)
    widget.scroll_into_view_if_needed()
    image = widget.locator("img").first
    image.wait_for(timeout=60_000)
    return widget, image


def _picture_changed(page, image, before: str, timeout_ms: int) -> bool:
    try:
        page.wait_for_function(
            "([el, old]) => el.getAttribute('src') !== old",
            arg=[image.element_handle(), before],
            timeout=timeout_ms,
        )
        return True
    except Exception:  # playwright's TimeoutError
        return False


def some_control_changes_the_picture(page, widget, image, before: str) -> bool:
    """Move sliders, pick menu entries, tick boxes, until the widget redraws its picture."""
    for handle in widget.locator(".noUi-handle").all():
        handle.focus()
        for _ in range(2):
            page.keyboard.press("ArrowRight")
        if _picture_changed(page, image, before, 20_000):
            return True
    for select in widget.locator("select").all():
        if select.locator("option").count() > 1:
            current = select.input_value()
            values = [o.get_attribute("value") for o in select.locator("option").all()]
            select.select_option(next(v for v in values if v != current))
            if _picture_changed(page, image, before, 20_000):
                return True
    for box in widget.locator("input[type=checkbox]").all():
        box.click()
        if _picture_changed(page, image, before, 20_000):
            return True
    return False


def solution_cells(assignment: str) -> dict[str, str]:
    """{grade_id: source} of the solution cells of the instructor's source notebook."""
    source = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    return {
        c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"])
        for c in source["cells"]
        if c.get("metadata", {}).get("nbgrader", {}).get("solution")
    }


def as_typed(source: str) -> str:
    """A worked solution as a student would write it: without the solution markers."""
    return "\n".join(
        line for line in source.splitlines() if "BEGIN SOLUTION" not in line and "END SOLUTION" not in line
    )


def filled_in(assignment: str, dest: Path, written=None, code=None, name=None) -> Path:
    """The student release with its solution cells replaced by the working solution (only
    those whose grade ids are in ``written``, when given) or by ``code`` ({grade_id: source}),
    saved as ``dest/<name or assignment>.ipynb`` with whatever the release ships beside it."""
    release = json.loads((ROOT / "notebooks" / assignment / f"{assignment}.ipynb").read_text())
    answers = {k: v for k, v in solution_cells(assignment).items() if written is None or k in written}
    answers.update(code or {})
    for cell in release["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in answers:
            cell["source"] = answers[meta["grade_id"]]
    path = dest / f"{name or assignment}.ipynb"
    path.write_text(json.dumps(release))
    for extra in (ROOT / "notebooks" / assignment).iterdir():  # what the release ships beside it
        if extra.is_file() and extra.suffix != ".ipynb":
            shutil.copy(extra, dest / extra.name)
    return path


def open_and_run_all(
    page, base: str, token: str, workspace: str, notebook: str, timeout_ms: int = 420_000
) -> None:
    """Open ``notebook`` in a workspace of its own (no tab of an earlier notebook restored) and
    run all its cells, to the last one."""
    page.goto(f"{base}/lab/workspaces/{workspace}/tree/{notebook}?reset&token={token}")
    page.wait_for_selector(".jp-Notebook", timeout=60_000)
    wait_for_one_idle_kernel(base, token)
    page.click("text=Run", timeout=10_000)  # the Run menu
    page.click("text=Run All Cells", timeout=10_000)
    page.wait_for_function(ALL_CELLS_RAN, timeout=timeout_ms)  # each prompt shows [n]


# The words of an element's text that the page lays out across two lines: each word (a run of
# non-blanks inside one text node) whose range has boxes on more than one line.
BROKEN_WORDS_JS = """e => {
  const broken = [], walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const m of node.data.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const tops = new Set([...range.getClientRects()].filter(r => r.width > 0)
                           .map(r => Math.round(r.top)));
      if (tops.size > 1) broken.push(m[0]);
    }
  }
  return broken;
}"""


def words_broken(locator) -> list[str]:
    """The words of ``locator``'s text that are split across lines where it is shown."""
    return locator.evaluate(BROKEN_WORDS_JS)


# -- every control of a widget, and how long its picture takes to answer ----------------------
# The page keeps one probe: ``arm(widget)`` forgets the last measurement and waits for the next
# input event (its timeStamp is t0) and the next new picture inside ``widget``: when an img's
# src changes, the image is decoded, and the frame after it is painted (an animation frame,
# then a task: the paint has happened by then), that time is t1.
PROBE_JS = """() => {
  if (window.__courseProbe) return;
  const probe = window.__courseProbe = {widget: null, t0: null, t1: null, seen: 0};
  for (const type of ['keydown', 'pointerdown', 'mousedown', 'input', 'change']) {
    document.addEventListener(type, e => {
      if (probe.widget && probe.t0 === null && probe.widget.contains(e.target)) probe.t0 = e.timeStamp;
    }, true);
  }
  probe.observer = new MutationObserver(records => {
    for (const r of records) {
      const img = r.target;
      if (img.tagName !== 'IMG' || probe.t0 === null || probe.t1 !== null) continue;
      const t = probe.seen += 1;
      (img.decode ? img.decode() : Promise.resolve()).catch(() => {}).then(() => {
        requestAnimationFrame(() => setTimeout(() => {
          if (probe.t1 === null && probe.seen === t) probe.t1 = performance.now();
        }, 0));
      });
    }
  });
}"""
ARM_JS = """w => { const p = window.__courseProbe; p.observer.disconnect();
  p.widget = w; p.t0 = null; p.t1 = null;
  p.observer.observe(w, {subtree: true, attributes: true, attributeFilter: ['src']}); }"""
PAINTED_JS = "() => window.__courseProbe.t1 !== null"
LATENCY_JS = "() => { const p = window.__courseProbe; return p.t1 - p.t0; }"


def widget_controls(widget) -> list[dict]:
    """Every control of one ``.course-widget``: ``{"kind", "name", "locator", "disabled"}``,
    kind one of slider, menu, checkbox, toggle, button, text; name its label as shown;
    disabled whether it can be used now."""
    found = []

    def label_of(el) -> str:
        return el.evaluate(
            "e => (e.closest('.widget-inline-hbox, .widget-hbox, .jupyter-widgets')"
            "?.querySelector('.widget-label')?.textContent || '').trim()"
        )

    for slider in widget.locator(".widget-slider, .jupyter-widget-slider").all():
        handle = slider.locator(".noUi-handle")
        if handle.count():
            found.append(
                {
                    "kind": "slider",
                    "name": label_of(handle.first),
                    "locator": handle.first,
                    "disabled": handle.first.evaluate(
                        "h => h.closest('.noUi-target').hasAttribute('disabled')"
                    ),
                }
            )
    for select in widget.locator("select").all():
        found.append(
            {
                "kind": "menu",
                "name": label_of(select),
                "locator": select,
                "disabled": not select.is_enabled() or select.locator("option").count() < 2,
            }
        )
    for box in widget.locator("input[type=checkbox]").all():
        name = box.evaluate("b => (b.closest('.widget-checkbox')?.textContent || '').trim()")
        found.append({"kind": "checkbox", "name": name, "locator": box, "disabled": not box.is_enabled()})
    for group in widget.locator(".widget-toggle-buttons").all():
        names = "/".join(b.inner_text().strip() for b in group.locator("button").all())
        found.append(
            {
                "kind": "toggle",
                "name": names,
                "locator": group,
                "disabled": not group.locator("button").first.is_enabled(),
            }
        )
    for button in widget.locator("button.jupyter-button").all():
        if button.evaluate("b => !!b.closest('.widget-toggle-buttons')"):
            continue
        found.append(
            {
                "kind": "button",
                "name": button.inner_text().strip(),
                "locator": button,
                "disabled": not button.is_enabled(),
            }
        )
    for text in widget.locator(".widget-text input[type=text]").all():
        found.append(
            {"kind": "text", "name": label_of(text), "locator": text, "disabled": not text.is_enabled()}
        )
    return found


def control_values(widget) -> dict[str, object]:
    """What each control of ``widget`` is set to, by its label: a slider's value as its readout
    shows it, a menu's entry, a box's tick, a toggle's pressed button, a text box's text
    (plain buttons hold nothing)."""
    values = {}
    for control in widget_controls(widget):
        kind, loc, name = control["kind"], control["locator"], control["name"]
        if kind == "slider":
            value = loc.evaluate(
                "h => { const w = h.closest('.widget-slider, .jupyter-widget-slider');"
                " const r = w && w.querySelector('.widget-readout');"
                " return r ? r.textContent.trim() : h.getAttribute('aria-valuenow'); }"
            )
        elif kind == "menu":
            value = loc.evaluate("s => s.selectedOptions[0] ? s.selectedOptions[0].text : ''")
        elif kind == "checkbox":
            value = loc.is_checked()
        elif kind == "toggle":
            value = loc.locator("button.mod-active").first.inner_text().strip()
        elif kind == "text":
            value = loc.input_value()
        else:
            continue
        name = name.replace("\u200b", "").strip() or kind  # a checkbox's label starts with one
        values[name] = value.replace("\xa0", " ") if isinstance(value, str) else value
    return values


# a text box's other value (the first is what the notebook opened with) that keeps the
# picture drawable; boxes not listed get " the" appended
OTHER_TEXT = {
    "a": {"man": "boy", "france": "germany"},
    "is to b": {"king": "prince", "paris": "berlin"},
    "as c is to ?": {"woman": "girl", "japan": "italy"},
}


def other_text(name: str, value: str) -> str:
    """Another value for the text box labelled ``name`` that now holds ``value``."""
    return OTHER_TEXT.get(name, {}).get(value, value + " the")


def move_control(page, control: dict, i: int, texts: tuple[str, str] | None = None) -> None:
    """Move ``control`` once; even and odd ``i`` move it back and forth (a slider right / left,
    or away from the end it sits at; another menu entry; the other toggle button; one text /
    the other)."""
    kind, loc = control["kind"], control["locator"]
    if kind == "slider":
        now, low, high = loc.evaluate(
            "h => ['aria-valuenow', 'aria-valuemin', 'aria-valuemax'].map(a => parseFloat(h.getAttribute(a)))"
        )
        right = now <= low or (now < high and i % 2 == 0)  # at an end: the only way it moves
        loc.focus()
        page.keyboard.press("ArrowRight" if right else "ArrowLeft")
    elif kind == "menu":
        values = [o.get_attribute("value") for o in loc.locator("option").all()]
        current = loc.input_value()
        loc.select_option(next(v for v in values if v != current))
    elif kind == "checkbox":
        loc.click()
    elif kind == "toggle":
        loc.locator("button:not(.mod-active)").first.click()
    elif kind == "button":
        loc.click()
    elif kind == "text":
        loc.fill(texts[i % 2])
        loc.press("Enter")


def control_latencies(
    page, widget, control: dict, repeats: int, texts=None, before_each=None, timeout_ms: int = 30_000
) -> list[float | None]:
    """Move ``control`` of ``widget`` ``repeats`` times; for each move, the milliseconds from
    the input event to the new picture painted (None: no new picture within ``timeout_ms``).
    ``before_each(i)`` runs before move i (e.g. to reset a stepper) and is not timed."""
    page.evaluate(PROBE_JS)
    handle = widget.element_handle()
    out = []
    for i in range(repeats):
        if before_each is not None:
            before_each(i)
        if control["kind"] == "text":  # the keystrokes filling the box are not the event
            control["locator"].fill(texts[i % 2])
        page.evaluate(ARM_JS, handle)
        if control["kind"] == "text":
            control["locator"].press("Enter")
        else:
            move_control(page, control, i, texts)
        try:
            page.wait_for_function(PAINTED_JS, timeout=timeout_ms, polling=20)
            out.append(float(page.evaluate(LATENCY_JS)))
        except Exception:  # playwright's TimeoutError: the picture never changed
            out.append(None)
        page.wait_for_timeout(150)  # let the kernel settle before the next move
    return out
