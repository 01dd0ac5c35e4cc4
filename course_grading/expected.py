"""Stored expected outputs for the visible checks, and the record of what produced them.

A visible check (``course_utils.checks``) must hold no solution, so where no PyTorch or NumPy
built-in computes what an exercise should return, it compares with outputs stored in
``course_utils/data/expected/<assignment>.npz``. They are computed here, from the reference
implementations, by the function ``expected_outputs()`` of the assignment's hidden-check
module (``course_grading.checks.<module>``), and written with

    python -m course_grading.expected            # every assignment that is out of date (values
                                                 # within noise are kept; the record is renewed)
    python -m course_grading.expected --check    # exit 1 if a stored file is out of date

Beside them, ``provenance.json`` records, per assignment, every source file of the course that
computing its outputs imports (the reference, the hidden-check module that holds the inputs and
seeds, and what they import), each with the SHA-256 of its text. A stored file is out of date when one of those sources changed, or when the values
computed today differ from the stored ones by more than floating-point noise.

Floats are never compared bit for bit: another CPU, BLAS kernel or thread count changes the
last bits of a matrix product (measured: up to 7.3 float32 steps of the array's largest
magnitude between torch's AVX2 and default kernels). ``STEPS`` of those steps are allowed,
about a fifth of what the visible checks allow (``atol=rtol=1e-5`` in float32). Integer and
boolean arrays (tokens, masks) must be equal. ``tests/test_expected.py`` checks both.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import io
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import numpy as np

import course_utils

FOLDER = Path(course_utils.__file__).resolve().parent / "data" / "expected"
PROVENANCE = FOLDER / "provenance.json"
REPO = FOLDER.parents[2]
PACKAGES = ("course_grading", "course_utils")
STEPS = 32  # floating-point steps (of the array's largest magnitude) a value may move


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


def source_digest(path: Path) -> str:
    """SHA-256 of a source file's text, the same on any machine (line endings folded)."""
    return hashlib.sha256(path.read_bytes().replace(b"\r\n", b"\n")).hexdigest()


def sources_of(make) -> dict[str, str]:
    """{path relative to the repository: digest} of the course's modules that ``make`` needs,
    found by running it in a fresh interpreter (so that nothing this process imported earlier
    counts)."""
    out = subprocess.run(
        [sys.executable, "-m", "course_grading.expected", "--list-sources", make.__module__],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    return json.loads(out.stdout)


def _list_sources(module: str) -> None:
    importlib.import_module(module).expected_outputs()
    files = set()
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if name.split(".")[0] in PACKAGES and path:
            files.add(Path(path).resolve())
    print(json.dumps({p.relative_to(REPO).as_posix(): source_digest(p) for p in sorted(files)}))


def changed_sources(recorded: dict[str, str]) -> list[str]:
    """The recorded sources whose text is not what it was (or that are gone)."""
    return [
        rel
        for rel, digest in sorted(recorded.items())
        if not (REPO / rel).is_file() or source_digest(REPO / rel) != digest
    ]


def value_differences(path: Path, data: bytes) -> list[str]:
    """What differs between the stored file and freshly computed ``data``, beyond noise."""
    if not path.is_file():
        return [f"{path.name} is missing"]
    problems = []
    with np.load(path, allow_pickle=False) as old, np.load(io.BytesIO(data), allow_pickle=False) as new:
        if sorted(old.files) != sorted(new.files):
            return [f"names differ: stored {sorted(old.files)}, computed {sorted(new.files)}"]
        for key in sorted(new.files):
            a, b = old[key], new[key]
            if a.dtype != b.dtype or a.shape != b.shape:
                problems.append(f"{key}: stored {a.dtype}{a.shape}, computed {b.dtype}{b.shape}")
            elif a.dtype.kind in "fc":
                scale = float(np.abs(a).max(initial=0.0)) or 1.0
                bound = STEPS * np.finfo(a.dtype).eps * scale
                worst = float(np.abs(a.astype(np.complex128) - b).max(initial=0.0))
                if not np.array_equal(np.isfinite(a), np.isfinite(b)) or worst > bound:
                    problems.append(f"{key}: differs by {worst:.3g} (noise allowed: {bound:.3g})")
            elif not np.array_equal(a, b):
                problems.append(f"{key}: differs ({int(np.sum(a != b))} of {a.size} entries)")
    return problems


def staleness(assignment: str, make, provenance: dict) -> list[str]:
    """Why ``assignment``'s stored outputs are out of date; empty when they are not."""
    recorded = provenance.get(assignment)
    if not recorded:
        return [f"no record of what produced {assignment}.npz in {PROVENANCE.name}"]
    changed = changed_sources(recorded)
    if changed:
        return ["sources changed since it was written: " + ", ".join(changed)]
    return value_differences(FOLDER / f"{assignment}.npz", render(make))


def load_provenance() -> dict:
    return json.loads(PROVENANCE.read_text()) if PROVENANCE.is_file() else {}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if out of date")
    parser.add_argument("--list-sources", metavar="MODULE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.list_sources:
        _list_sources(args.list_sources)
        return 0
    provenance = load_provenance()
    stale = {}
    for assignment, make in sorted(makers().items()):
        why = staleness(assignment, make, provenance)
        if not why:
            continue
        stale[assignment] = why
        if not args.check:
            path, data = FOLDER / f"{assignment}.npz", render(make)
            if value_differences(path, data):  # else the stored values stand: no churn of bits
                FOLDER.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                print(f"wrote {path} ({why[0]})")
            provenance[assignment] = sources_of(make)
            print(f"recorded the sources of {path.name}")
    if args.check:
        for assignment, why in stale.items():
            print(f"out of date: {assignment}.npz", *why, sep="\n  ")
        return 1 if stale else 0
    PROVENANCE.write_text(json.dumps(dict(sorted(provenance.items())), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
