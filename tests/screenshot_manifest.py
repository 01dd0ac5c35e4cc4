"""What each picture in docs/screenshots/ was taken from: ``MANIFEST.json`` beside them.

For every PNG it holds the notebook shown (its path and a hash of its cells), the state the
widget or notebook was put in before the picture (the controls' values, what was typed or
written), the test that took it (its pytest node id) and the PNG's own sha256. The browser
tests save each picture with ``save``, which squeezes it to a small PNG and writes its entry
(``record``), when ``COURSE_SCREENSHOTS`` names the folder; tests/test_screenshots.py
compares the entries with today's notebooks and files (``problems``), so a picture of a
notebook that has changed since fails the suite with the command that retakes it.

A notebook's hash covers what a reader sees of it: each cell's type and source, line endings
made ``\\n``; not its outputs, metadata, ids or execution counts, so the same notebook has the
same hash on any machine and after any run.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "docs" / "screenshots"
MANIFEST = "MANIFEST.json"
# the one command that takes every picture; a node id (or -k) after it retakes some
COMMAND = (
    "COURSE_SCREENSHOTS=docs/screenshots .venv/bin/python -m pytest -m browser "
    "tests/test_browser.py tests/test_hub.py"
)


def _text(source) -> str:
    text = "".join(source) if isinstance(source, list) else str(source)
    return text.replace("\r\n", "\n").replace("\r", "\n")


def notebook_hash(path: Path) -> str:
    """sha256 of the notebook's cells: type and source of each, in order."""
    cells = json.loads(Path(path).read_text(encoding="utf-8"))["cells"]
    content = json.dumps(
        [[c.get("cell_type"), _text(c.get("source", ""))] for c in cells], ensure_ascii=False
    )
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def file_hash(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read(folder: Path = FOLDER) -> dict:
    path = Path(folder) / MANIFEST
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def record(png: Path, notebook: str, state: dict) -> dict:
    """Enter the picture just saved at ``png`` in the manifest of its folder: taken from
    ``notebook`` (a path from the repository's root) in ``state``, by the running test."""
    png = Path(png)
    node = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    entry = {
        "notebook": notebook,
        "notebook_sha256": notebook_hash(ROOT / notebook),
        "state": state,
        "taken_by": node,
        "png_sha256": file_hash(png),
    }
    entries = read(png.parent)
    entries[png.name] = entry
    path = png.parent / MANIFEST
    partial = path.with_suffix(".json.partial")
    partial.write_text(
        json.dumps(dict(sorted(entries.items())), indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    partial.replace(path)
    return entry


def save(shoot, name: str, notebook: str, state: dict) -> Path | None:
    """Under the folder COURSE_SCREENSHOTS names (nothing without it): ``shoot(path)`` takes
    the picture ``name``.png, squeezed here to 256 colours and entered in the folder's
    manifest as taken from ``notebook`` (a path from the repository's root) in ``state``."""
    if not os.environ.get("COURSE_SCREENSHOTS"):
        return None
    folder = Path(os.environ["COURSE_SCREENSHOTS"])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    shoot(str(path))
    from PIL import Image

    with Image.open(path) as img:
        small = img.convert("RGB").quantize(
            colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE
        )
    small.save(path, optimize=True)
    record(path, notebook, state)
    return path


def retake(nodes) -> str:
    """The command that retakes the pictures taken by the tests ``nodes``."""
    return " ".join([COMMAND.split(" tests/")[0], *(f"'{n}'" for n in sorted(set(nodes)))])


def problems(folder: Path = FOLDER) -> list[tuple[str, str | None]]:
    """What is wrong with the pictures in ``folder`` against today's notebooks, each with the
    node id of the test that retakes it (None: none known): a picture without an entry, an
    entry without a picture, a picture changed after it was taken, a picture whose notebook
    has changed since."""
    folder = Path(folder)
    entries = read(folder)
    pngs = {p.name for p in folder.glob("*.png")}
    found = [(f"{name}: no entry in {MANIFEST}", None) for name in sorted(pngs - set(entries))]
    found += [
        (
            f"{name}: in {MANIFEST}, but there is no such file (retake it, or drop its entry)",
            entries[name].get("taken_by"),
        )
        for name in sorted(set(entries) - pngs)
    ]
    for name in sorted(pngs & set(entries)):
        entry = entries[name]
        notebook = ROOT / entry["notebook"]
        if file_hash(folder / name) != entry["png_sha256"]:
            found.append(
                (
                    f"{name}: not the picture the test took (its sha256 is not the one in {MANIFEST})",
                    entry["taken_by"],
                )
            )
        elif not notebook.exists():
            found.append((f"{name}: taken from {entry['notebook']}, which is gone", None))
        elif notebook_hash(notebook) != entry["notebook_sha256"]:
            found.append(
                (f"{name}: {entry['notebook']} has changed since the picture was taken", entry["taken_by"])
            )
    return found
