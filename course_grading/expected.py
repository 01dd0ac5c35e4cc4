"""Stored expected outputs for the visible checks.

A visible check (``course_utils.checks``) must hold no solution, so where no PyTorch or NumPy
built-in computes what an exercise should return, it compares with outputs stored in
``course_utils/data/expected/<assignment>.npz``. They are computed here, from the reference
implementations, by the function ``expected_outputs()`` of the assignment's hidden-check
module (``course_grading.checks.<module>``), and written with

    python -m course_grading.expected            # every assignment
    python -m course_grading.expected --check    # exit 1 if a stored file is out of date

``tests/test_expected.py`` recomputes them, so they cannot drift from the reference.
"""
from __future__ import annotations

import argparse
import importlib
import io
import pkgutil
import sys
from pathlib import Path

import numpy as np

import course_utils

FOLDER = Path(course_utils.__file__).resolve().parent / "data" / "expected"


def makers() -> dict[str, object]:
    """{assignment: expected_outputs function} of every hidden-check module that has one."""
    import course_grading.checks as checks

    found = {}
    for info in pkgutil.iter_modules(checks.__path__, checks.__name__ + "."):
        module = importlib.import_module(info.name)
        make = getattr(module, "expected_outputs", None)
        if make is not None:
            found[module.ASSIGNMENT] = make
    return found


def render(make) -> bytes:
    """The .npz bytes of ``make()`` (sorted keys, no pickle, deterministic)."""
    arrays = {k: np.asarray(v) for k, v in sorted(make().items())}
    for name, value in arrays.items():
        if value.dtype == object:
            raise TypeError(f"expected output {name!r} is not a plain array")
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def _same(path: Path, data: bytes) -> bool:
    if not path.is_file():
        return False
    with np.load(path, allow_pickle=False) as old, np.load(io.BytesIO(data), allow_pickle=False) as new:
        return sorted(old.files) == sorted(new.files) and all(
            old[k].dtype == new[k].dtype and np.array_equal(old[k], new[k]) for k in new.files)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if out of date")
    args = parser.parse_args(argv)
    stale = []
    for assignment, make in sorted(makers().items()):
        path, data = FOLDER / f"{assignment}.npz", render(make)
        if _same(path, data):
            continue
        stale.append(path)
        if not args.check:
            FOLDER.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"wrote {path}")
    if args.check and stale:
        print("out of date:", *stale, sep="\n  ")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
