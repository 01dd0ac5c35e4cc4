"""The integrity audit: fresh inputs, plain-data outputs, verdicts against the reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from course_grading.audit import trusted as audit
from course_grading.audit.exercises import EXERCISES
from course_grading.sandbox import bubblewrap
from harness import solution_with

ROOT = Path(__file__).resolve().parents[1]


def _verdicts(path, assignment, **kw):
    return {
        v.grade_id: (v.agrees, v.reason)
        for v in audit.audit(
            path, assignment, blocks=ROOT / "solutions" / assignment / "building_blocks.py", **kw
        )
    }


@pytest.mark.parametrize("assignment", sorted(EXERCISES))
def test_solutions_agree(assignment):
    found = _verdicts(
        ROOT / "solutions" / assignment / f"{assignment}.ipynb",
        assignment,
        sandboxed=bubblewrap.available()[0],
    )
    assert found and all(ok for ok, _ in found.values()), found


def test_wrong_dtype_nan_crash_and_patches_disagree(tmp_path):
    path = solution_with(
        tmp_path,
        "03_attention",
        softmax="def softmax(x, dim=-1):\n    return (x.exp() / x.exp().sum(dim, keepdim=True)).double()\n",
        simple_self_attention="def simple_self_attention(X):\n    return X * float('nan')\n",
        causal_mask="def causal_mask(size, device=None):\n    while True:\n        pass\n",
    )
    found = _verdicts(path, "03_attention", timeout=20)
    assert found["test_softmax"] == (
        False,
        "softmax on fresh input 1: dtype torch.float64, expected torch.float32",
    )
    assert "NaN" in found["test_simple_self_attention"][1]
    assert not found["test_causal_mask"][0] and "longer than 5 s" in found["test_causal_mask"][1]
    exits = solution_with(tmp_path, "03_attention", causal_mask="import os\nos._exit(1)\n")
    assert all(not ok and "ended" in why for ok, why in _verdicts(exits, "03_attention").values())


def test_patched_checker_is_flagged_by_review(tmp_path):
    path = solution_with(
        tmp_path,
        "01_embeddings",
        one_hot=(
            "def one_hot(ids, vocab_size):\n    return np.zeros((1,))\ncheck_one_hot = lambda *a, **k: None\n"
        ),
    )
    source = ROOT / "solutions" / "01_embeddings" / "01_embeddings.ipynb"
    flags = audit.review(path, source, "01_embeddings", {"test_one_hot": 2.0, "test_embed": 2.0})
    assert any(f.where == "test_one_hot" and "audit disagrees" in f.reason for f in flags)
    assert any("patches the checks" in f.reason for f in flags)
    # no points given, nothing to flag from the audit
    flags = audit.review(path, source, "01_embeddings", {"test_one_hot": 0.0})
    assert not any("audit" in f.reason for f in flags)


def test_seed_changes_inputs_and_is_never_written(tmp_path):
    import numpy as np

    one = EXERCISES["03_attention"]["test_sdpa" if False else "test_softmax"].inputs(np.random.default_rng(1))
    two = EXERCISES["03_attention"]["test_softmax"].inputs(np.random.default_rng(2))
    assert not np.array_equal(one[0][0][0].array, two[0][0][0].array)
