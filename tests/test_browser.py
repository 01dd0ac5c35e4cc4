"""A real browser: JupyterLab in headless Chromium opens a student notebook whose exercises are
filled in with working code, runs it, and the notebook's widget renders and responds to input.

Needs Debian's chromium (scripts/test.sh installs it when it can). Skipped without it, except in
CI, where a missing browser is a failure.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from jupyter_browser import (CHROMIUM, FLAGS, ROOT, api, filled_in, free_port,
                             last_widget_with_picture, require_browser, run_all_cells,
                             shut_down_kernels, some_control_changes_the_picture,
                             wait_for_one_idle_kernel, wait_until_all_cells_ran)

# notebooks whose widget this test drives (the widget is the last one each notebook shows)
NOTEBOOKS = [n for n in ("03_attention", "04_multi_head_attention", "05_positional_encoding",
                         "06_encoder", "07_decoder", "08_generation")
             if (ROOT / "notebooks" / n / f"{n}.ipynb").exists()]

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    require_browser()
    work = tmp_path_factory.mktemp("lab")
    for name in NOTEBOOKS:
        filled_in(name, work)
    port, token = free_port(), "course-test-token"
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
                api(f"{base}/api/status", token)
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
            wait_for_one_idle_kernel(base, token)
            run_all_cells(page)
            wait_until_all_cells_ran(page)
            widget, image = last_widget_with_picture(page)
            before = image.get_attribute("src")
            assert some_control_changes_the_picture(page, widget, image, before), (
                "no slider, menu or checkbox of the widget changed its picture")
            page.screenshot(path=str(tmp_path / f"{assignment}.png"))
        except Exception:
            page.screenshot(path="/tmp/browser-failure.png", full_page=False)
            raise
        finally:
            browser.close()
            shut_down_kernels(base, token)
