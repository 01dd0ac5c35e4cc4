"""The expected outputs stored for the visible checks are what the reference computes: their
sources are unchanged since they were written, and their values agree up to floating-point
noise (never bit for bit: another CPU may round the last bits differently)."""

from __future__ import annotations

import io

import numpy as np
import pytest

from course_grading import expected

FIX = "run python -m course_grading.expected"


@pytest.mark.parametrize("assignment", sorted(expected.makers()))
def test_stored_expected_outputs_match_the_reference(assignment):
    why = expected.staleness(assignment, expected.makers()[assignment], expected.load_provenance())
    assert not why, f"{assignment}.npz is out of date ({'; '.join(why)}): {FIX}"


def _stored_and_nudged(tmp_path, steps):
    """A copy of 04's stored file with one float moved by ``steps`` float32 steps of its array's
    largest magnitude, and the untouched computed bytes."""
    make = expected.makers()["04_multi_head_attention"]
    data = expected.render(make)
    with np.load(io.BytesIO(data)) as npz:
        arrays = {k: npz[k] for k in npz.files}
    key = next(k for k, v in arrays.items() if v.dtype == np.float32)
    a = arrays[key].copy()
    a.flat[0] += steps * np.finfo(np.float32).eps * np.abs(a).max()
    arrays[key] = a
    path = tmp_path / "04.npz"
    np.savez(path, **arrays)
    return path, data, key


def test_float_noise_is_not_staleness(tmp_path):
    path, data, _ = _stored_and_nudged(tmp_path, 8)  # measured: 7.3 steps between CPU kernels
    assert expected.value_differences(path, data) == []


def test_a_real_change_is_staleness(tmp_path):
    path, data, key = _stored_and_nudged(tmp_path, 400)  # still under the visible checks' 1e-5
    (problem,) = expected.value_differences(path, data)
    assert problem.startswith(f"{key}: differs by")


def test_tokens_and_masks_must_be_equal(tmp_path):
    data = expected.render(lambda: {"ids": np.array([1, 2, 3])})
    path = tmp_path / "ids.npz"
    np.savez(path, ids=np.array([1, 2, 4]))
    assert expected.value_differences(path, data) == ["ids: differs (1 of 3 entries)"]


def test_a_changed_source_is_named(tmp_path, monkeypatch):
    recorded = expected.load_provenance()["09_gpt"]
    assert "course_grading/reference/gpt.py" in recorded  # the reference it comes from
    assert "course_grading/checks/gpt.py" in recorded  # its inputs and seeds
    edited = dict(recorded, **{"course_grading/reference/gpt.py": "0" * 64})
    assert expected.changed_sources(edited) == ["course_grading/reference/gpt.py"]


def test_digests_ignore_line_endings(tmp_path):
    unix, windows = tmp_path / "a.py", tmp_path / "b.py"
    unix.write_bytes(b"x = 1\ny = 2\n")
    windows.write_bytes(b"x = 1\r\ny = 2\r\n")
    assert expected.source_digest(unix) == expected.source_digest(windows)
