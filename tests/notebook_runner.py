"""The course's notebooks, in order: ``notebooks("solutions")`` or ``notebooks("notebooks")``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def notebooks(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
