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
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
# every code cell of the notebook has run: each input prompt shows [n]
ALL_CELLS_RAN = ("() => { const p = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]"
                 ".map(e => e.textContent.trim());"
                 " return p.length > 0 && p.every(t => /^\\[\\d+\\]:$/.test(t)); }")


def require_or_skip(missing: str | None) -> None:
    """Skip the test saying what is ``missing``; in CI (``CI`` set), fail instead."""
    if missing:
        if os.environ.get("CI"):
            pytest.fail(missing)
        pytest.skip(missing)


def require_browser() -> None:
    try:
        import playwright  # noqa: F401
    except ImportError:
        require_or_skip("playwright is not installed (scripts/setup.sh --test installs it)")
    if not CHROMIUM:
        require_or_skip("no chromium on this machine: install it to run the browser tests "
                        "(scripts/setup.sh --test installs it as root)")


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
    """The instructor's two Jupyter settings of README "Running a class", step 3, in ``folder``
    (their ~/.jupyter): the Formgrader and `course` find ``course``; JupyterHub's framing rule
    relaxed for the Formgrader tab; the Formgrader's Content-Security-Policy extension on."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nbgrader_config.py").write_text(
        "# The Formgrader finds the course wherever the instructor's server starts.\n"
        "c = get_config()  # noqa: F821\n"
        f"load_subconfig({str(course / 'nbgrader_config.py')!r})\n", encoding="utf-8")
    (folder / "jupyter_server_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        "# JupyterHub forbids framing a user's pages (frame-ancestors 'none'); the Formgrader tab\n"
        "# frames the instructor's own server\n"
        "c.ServerApp.tornado_settings = {\"headers\": {\"Content-Security-Policy\": \"frame-ancestors 'self'\"}}\n"
        "# the Formgrader's pages run no script but their own\n"
        "c.ServerApp.jpserver_extensions = {\"course_grading.instructor_server\": True}\n", encoding="utf-8")


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
        page.wait_for_function("([el, old]) => el.getAttribute('src') !== old",
                               arg=[image.element_handle(), before], timeout=timeout_ms)
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
    return {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) for c in source["cells"]
            if c.get("metadata", {}).get("nbgrader", {}).get("solution")}


def as_typed(source: str) -> str:
    """A worked solution as a student would write it: without the solution markers."""
    return "\n".join(line for line in source.splitlines()
                     if "BEGIN SOLUTION" not in line and "END SOLUTION" not in line)


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
