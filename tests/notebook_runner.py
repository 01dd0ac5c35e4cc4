"""Execute a notebook in a real Jupyter kernel (the same way nbgrader does) and collect errors."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


@dataclass
class CellError:
    index: int
    grade_id: str | None
    ename: str
    evalue: str


def execute(path: Path, allow_errors: bool = False, timeout: int = 120):
    """Run ``path`` top to bottom in a fresh python3 kernel; return (notebook, errors)."""
    nb = nbformat.read(path, as_version=4)
    env_backend = os.environ.get("MPLBACKEND")
    os.environ["MPLBACKEND"] = "Agg"  # the kernel inherits it: no GUI backend in tests
    try:
        client = NotebookClient(nb, timeout=timeout, kernel_name="python3", allow_errors=allow_errors,
                                resources={"metadata": {"path": str(path.parent)}})
        client.execute()
    finally:
        if env_backend is None:
            os.environ.pop("MPLBACKEND", None)
        else:
            os.environ["MPLBACKEND"] = env_backend
    errors = []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                meta = cell.metadata.get("nbgrader", {})
                errors.append(CellError(i, meta.get("grade_id"), out["ename"], out["evalue"]))
    return nb, errors


def notebooks(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
