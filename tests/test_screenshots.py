"""The pictures in docs/screenshots/ show today's course: each has an entry in MANIFEST.json,
made by the browser test that took it, and the notebook it was taken from has not changed
since (tests/screenshot_manifest.py). Fast: it reads files and hashes them, no browser."""

from __future__ import annotations

import json
import shutil

from screenshot_manifest import COMMAND, FOLDER, MANIFEST, ROOT, notebook_hash, problems, read, record, retake


def test_every_screenshot_shows_todays_notebook():
    found = problems()
    nodes = sorted({node for _, node in found if node})
    command = retake(nodes) if nodes else COMMAND
    assert not found, (
        "docs/screenshots/ no longer shows today's course:\n  "
        + "\n  ".join(text for text, _ in found)
        + "\nRetake them (in a browser: Debian's chromium, see "
        f"docs/screenshots/README.md):\n  {command}\nAll of them: {COMMAND}\n"
        "One notebook's: the same with -k and its name, e.g. -k 09_gpt"
    )


def test_every_entry_says_what_it_was_taken_from():
    for name, entry in read().items():
        assert (ROOT / entry["notebook"]).suffix == ".ipynb", name
        assert isinstance(entry["state"], dict), name
        assert entry["taken_by"].startswith("tests/test_") and "::" in entry["taken_by"], name
        assert len(entry["png_sha256"]) == len(entry["notebook_sha256"]) == 64, name


def test_a_changed_notebook_a_stray_picture_and_a_lost_one_are_each_named(tmp_path, monkeypatch):
    """On a copy: each kind of problem is found and named, with the test that retakes it."""
    notebook = tmp_path / "notebooks" / "03_x" / "03_x.ipynb"
    notebook.parent.mkdir(parents=True)
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": ["# Title\r\n", "text"]},
        {"cell_type": "code", "metadata": {}, "source": "x = 1", "outputs": [], "execution_count": None},
    ]
    notebook.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    monkeypatch.setattr("screenshot_manifest.ROOT", tmp_path)
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_browser.py::test_w[03_x] (call)")
    shots = tmp_path / "shots"
    shots.mkdir()
    for name in ("a.png", "b.png"):
        shutil.copy(next(FOLDER.glob("*.png")), shots / name)
        record(shots / name, "notebooks/03_x/03_x.ipynb", {"example": 2})
    assert problems(shots) == []
    assert read(shots)["a.png"]["taken_by"] == "tests/test_browser.py::test_w[03_x]"

    # outputs, execution counts, metadata and line endings are not the notebook's content
    cells[0]["source"] = "# Title\ntext"
    cells[1].update(
        outputs=[{"output_type": "stream", "name": "stdout", "text": "1"}],
        execution_count=3,
        metadata={"tags": ["x"]},
    )
    notebook.write_text(
        json.dumps({"cells": cells, "metadata": {"kernelspec": {}}, "nbformat": 4, "nbformat_minor": 5})
    )
    assert problems(shots) == []

    cells[0]["source"] = "# Title\nnew text"  # the prose changed
    notebook.write_text(json.dumps({"cells": cells}))
    shutil.copy(shots / "a.png", shots / "c.png")  # a picture nobody recorded
    (shots / "b.png").unlink()  # a recorded picture lost
    found = dict(problems(shots))
    assert found == {
        "c.png: no entry in MANIFEST.json": None,
        "b.png: in MANIFEST.json, but there is no such file (retake it, or drop its entry)": "tests/test_browser.py::test_w[03_x]",
        "a.png: notebooks/03_x/03_x.ipynb has changed since the picture was taken": "tests/test_browser.py::test_w[03_x]",
    }
    assert retake(set(found.values()) - {None}) == (
        "COURSE_SCREENSHOTS=docs/screenshots .venv/bin/python -m pytest -m browser "
        "'tests/test_browser.py::test_w[03_x]'"
    )
    (shots / "a.png").write_bytes(b"not the picture")
    assert [t for t, _ in problems(shots)][-1].startswith("a.png: not the picture the test took")
    assert notebook_hash(notebook) != read(shots)["a.png"]["notebook_sha256"]
    assert MANIFEST == "MANIFEST.json"
