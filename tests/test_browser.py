"""A real browser: JupyterLab in headless Chromium opens a student notebook whose exercises are
filled in with working code, runs it, and the notebook's widget renders and responds to input.

Needs Debian's chromium (scripts/test.sh installs it when it can). Skipped without it, except in
CI, where a missing browser is a failure.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
# notebooks whose widget this test drives (the widget is the last one each notebook shows)
NOTEBOOKS = [n for n in ("03_attention", "04_multi_head_attention", "05_positional_encoding",
                         "06_encoder", "07_decoder", "08_generation")
             if (ROOT / "notebooks" / n / f"{n}.ipynb").exists()]

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _require_browser():
    try:
        import playwright  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("playwright is not installed (scripts/setup.sh --test installs it)")
        pytest.skip("playwright is not installed")
    if not CHROMIUM:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (scripts/setup.sh --test installs it as root)")
        pytest.skip("no chromium on this machine: install it to run the browser test")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _filled_in(assignment: str, dest: Path) -> Path:
    """The student release with every solution cell replaced by the working solution."""
    release = json.loads((ROOT / "notebooks" / assignment / f"{assignment}.ipynb").read_text())
    source = json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text())
    answers = {c["metadata"]["nbgrader"]["grade_id"]: c["source"] for c in source["cells"]
               if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    for cell in release["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and meta.get("grade_id") in answers:
            cell["source"] = answers[meta["grade_id"]]
    path = dest / f"{assignment}.ipynb"
    path.write_text(json.dumps(release))
    for extra in (ROOT / "notebooks" / assignment).iterdir():  # what the release ships beside it
        if extra.is_file() and extra.suffix != ".ipynb":
            shutil.copy(extra, dest / extra.name)
    return path


def _get(url: str):
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    _require_browser()
    work = tmp_path_factory.mktemp("lab")
    for name in NOTEBOOKS:
        _filled_in(name, work)
    port, token = _free_port(), "course-test-token"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
           f"--ServerApp.token={token}", f"--ServerApp.root_dir={work}",
           "--ServerApp.open_browser=False", "--LabApp.news_url=", "--allow-root"]
    env = {**os.environ, "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
    log = open(work / "jupyterlab.log", "w")  # read it when a test here fails
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                _get(f"{base}/api/status?token={token}")
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("JupyterLab did not start within 60 s")
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _wait_for_one_idle_kernel(base: str, token: str, timeout: float = 60) -> None:
    """A fresh page may start its kernel twice: wait until one kernel is idle and stays so."""
    deadline, stable = time.time() + timeout, 0
    while time.time() < deadline:
        sessions = _get(f"{base}/api/sessions?token={token}")
        states = [s["kernel"]["execution_state"] for s in sessions if s.get("kernel")]
        stable = stable + 1 if states == ["idle"] else 0
        if stable >= 4:
            return
        time.sleep(0.5)
    pytest.fail(f"the notebook's kernel never settled: {states}")


def _picture_changed(page, image, before: str, timeout_ms: int) -> bool:
    try:
        page.wait_for_function("([el, old]) => el.getAttribute('src') !== old",
                               arg=[image.element_handle(), before], timeout=timeout_ms)
        return True
    except Exception:  # playwright's TimeoutError
        return False


def _some_control_changes_the_picture(page, widget, image, before: str) -> bool:
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


def _shut_down_kernels(base: str, token: str) -> None:
    for session in _get(f"{base}/api/sessions?token={token}"):
        req = urllib.request.Request(f"{base}/api/sessions/{session['id']}?token={token}",
                                     method="DELETE")
        urllib.request.urlopen(req, timeout=10).close()


@pytest.mark.parametrize("assignment", NOTEBOOKS)
def test_widget_renders_and_responds_in_jupyterlab(lab, assignment, tmp_path):
    from playwright.sync_api import sync_playwright

    base, token = lab
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            # a workspace of its own, so no tab of an earlier notebook is restored
            page.goto(f"{base}/lab/workspaces/{assignment}/tree/{assignment}.ipynb?reset&token={token}")
            page.wait_for_selector(".jp-Notebook", timeout=60_000)
            _wait_for_one_idle_kernel(base, token)
            page.click("text=Run", timeout=10_000)  # the Run menu
            page.click("text=Run All Cells", timeout=10_000)
            page.wait_for_function(  # every code cell has run: each prompt shows [n]
                "() => { const p = [...document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')]"
                ".map(e => e.textContent.trim());"
                " return p.length > 0 && p.every(t => /^\\[\\d+\\]:$/.test(t)); }",
                timeout=240_000)
            # the output area of the notebook's last widget: controls and a picture
            widget = page.locator(".jp-OutputArea-output:has(.jupyter-widgets):has(img)").last
            widget.wait_for(timeout=120_000)
            widget.scroll_into_view_if_needed()
            image = widget.locator("img").first
            image.wait_for(timeout=60_000)
            before = image.get_attribute("src")
            assert _some_control_changes_the_picture(page, widget, image, before), (
                "no slider, menu or checkbox of the widget changed its picture")
            page.screenshot(path=str(tmp_path / f"{assignment}.png"))
        except Exception:
            page.screenshot(path="/tmp/browser-failure.png", full_page=False)
            raise
        finally:
            browser.close()
            _shut_down_kernels(base, token)
