"""The failures the checks of 03 and 04 were changed for name their bug, not just fail.

tests/test_graders.py requires every buggy variant to fail with some message; here the message
of each of these must say what the bug is (in-process, through tests/harness.py).
"""

from __future__ import annotations

import pytest

from harness import VARIANTS, load_variants, run_grade_cell

NAMED = {
    "03_attention": {
        "test_scaled_dot_product_attention": {
            "mask_applied_after_softmax": "the mask is applied after the softmax",
            "mask_zero_filled_after_softmax": "the mask is applied after the softmax",
            "scaled_by_sqrt_d_v": "divided by √d_v",
            "weights_in_float32": "float64 inputs should give float64 outputs and weights",
            "masked_scores_set_to_zero": "-inf before the softmax",
        },
    },
    "04_multi_head_attention": {
        "test_multi_head_attention": {
            "returns_weights_of_a_second_dropout": "two different masks",
            "dropout_applied_twice": "went through dropout twice",
            "dropout_mask_not_rescaled": "not scaled up by 1 / (1 - p)",
            "dropout_on_the_output": "applied to the output",
            "heads_accumulated_in_a_float32_buffer": "fixed dtype",
            "merge_without_transpose": "puts heads where positions belong",
            "scales_by_d_model": "divided by √d_model",
        },
    },
}


def _cases():
    for assignment, cells in NAMED.items():
        buggy = load_variants(VARIANTS / f"{assignment}.py").BUGGY
        for grade_id, names in cells.items():
            for name, says in names.items():
                yield pytest.param(
                    assignment, grade_id, buggy[grade_id][name], says, id=f"{assignment}-{name}"
                )


@pytest.mark.parametrize("assignment,grade_id,source,says", list(_cases()))
def test_failure_names_the_bug(assignment, grade_id, source, says):
    outcome = run_grade_cell(assignment, grade_id, source)
    assert not outcome.passed
    assert says in outcome.message, outcome.message
