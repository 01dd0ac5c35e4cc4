"""Visible checks for 04_multi_head_attention's split_heads and merge_heads, and what every check
of 04 shares: the built-ins they forbid, the stored inputs and a float comparison.

``split_heads`` and ``merge_heads`` are compared with their outputs on small known inputs,
stored with the package (``course_utils/data/expected/04_multi_head_attention.npz``); a wrong
output is compared with the usual reshapes (no transpose, interleaved features …) to name the
mistake. ``check_multi_head_attention`` is in ``course_utils.checks.multi_head``, which names
these two checks too.
"""

from __future__ import annotations

import torch

from ..forbidden import MHA_BUILTINS, MHA_OPS
from ._core import Check, _allclose, stored, to_numpy

ASSIGNMENT = "04_multi_head_attention"


def near(a, b, atol=1e-4, rtol=1e-3) -> bool:
    a, b = to_numpy(a), to_numpy(b)
    return a.shape == b.shape and bool(_allclose(a, b, atol=atol, rtol=rtol))


def _stored_tensor(name: str) -> torch.Tensor:
    return torch.from_numpy(stored(ASSIGNMENT, name))


# -- split_heads / merge_heads ------------------------------------------------------------------


def split_candidates(x, h):
    """What the usual mistakes in split_heads give, with the message that names each."""
    b, s, d = x.shape
    return [
        (
            x.reshape(b, h, s, d // h),
            "the shape is right but the values are in the wrong places: reshaping (b, s, d_model) "
            "directly into (b, h, s, d_head) cuts the flattened tokens-and-features into h pieces, "
            "so a 'head' mixes several positions. Cut the feature axis into heads first, then move "
            "the head axis in front of the sequence axis.",
        ),
        (
            x.reshape(b, s, d // h, h).permute(0, 3, 1, 2),
            "head 0 should get features 0 … d_head-1 of every token (a contiguous block); yours "
            "gets every h-th feature. Split the feature axis as (num_heads, d_head), in that order.",
        ),
    ]


def check_split_heads(split_heads) -> None:
    c = Check("split_heads", MHA_BUILTINS, ops=MHA_OPS)
    x = torch.arange(2 * 5 * 12, dtype=torch.float32).view(2, 5, 12)  # entry = its flat index
    out = c.call(split_heads, x, 3)
    c.that(isinstance(out, torch.Tensor), f"should return a tensor, got {type(out).__name__}.")
    hint = {
        (2, 5, 3, 4): "You split the features into (h, d_head) but the head axis must come "
        "before the sequence axis: (b, h, s, d_head).",
        (6, 5, 4): "Keep batch and heads as two separate axes: (b, h, s, d_head).",
        (2, 3, 4, 5): "The last two axes are swapped: (b, h, s, d_head), not (b, h, d_head, s).",
    }
    c.shape(
        out,
        (2, 3, 5, 4),
        "split_heads(x, 3) for x of shape (2, 5, 12)",
        hint.get(tuple(out.shape), "Expected (batch, num_heads, seq, d_model // num_heads)."),
    )
    if not near(out, _stored_tensor("split_x_3"), 0, 0):
        for cand, message in split_candidates(x, 3):
            if near(out, cand, 0, 0):
                c.fail(message)
        c.fail(
            "the values are in the wrong places: out[b, h, t] should be token t's features "
            "h*d_head … (h+1)*d_head - 1. Try it on torch.arange(24.).view(1, 2, 12)."
        )
    c.ok("(2, 5, 12) → (2, 3, 5, 4), head h holds features h*d_head … (h+1)*d_head - 1")
    y = torch.arange(2 * 6 * 12, dtype=torch.float32).view(2, 6, 12)
    got = c.call_on("x of shape (2, 6, 12) and num_heads=4", split_heads, y, 4)
    c.shape(
        got,
        (2, 4, 6, 3),
        "split_heads(y, 4) for y of shape (2, 6, 12)",
        "Read b, s, d_model from x.shape and use num_heads; don't hard-code sizes.",
    )
    c.close(
        got,
        _stored_tensor("split_y_4"),
        "wrong values for 4 heads of 3 features.",
        atol=0,
        rtol=0,
        passed="(2, 6, 12) with 4 heads → (2, 4, 6, 3)",
    )
    got = c.call_on("a float64 x", split_heads, x.double(), 3)
    c.that(
        got.dtype == torch.float64,
        f"a float64 input should stay float64, got {got.dtype}: "
        "split_heads only moves numbers around (no .float()).",
        "keeps float64",
    )
    xg = x.clone().requires_grad_(True)
    got = c.call_on("an x that requires grad", split_heads, xg, 3)
    c.that(
        got.requires_grad,
        "the result does not require grad although x does: use tensor "
        "operations only (view/reshape/transpose), no .detach(), .numpy() or .data.",
        "gradients can flow back",
    )
    c.done()


def merge_candidates(x):
    """What the usual mistakes in merge_heads give, with the message that names each."""
    b, h, s, dh = x.shape
    return [
        (
            x.reshape(b, s, h * dh),
            "the shape is right but the values are in the wrong places: flattening (b, h, s, d_head) "
            "as it is puts heads where positions belong. Bring the sequence axis back next to the "
            "batch axis first (the inverse of the transpose in split_heads), then flatten.",
        ),
        (
            x.permute(0, 2, 3, 1).reshape(b, s, h * dh),
            "the heads come out interleaved feature by feature: token t's output should be head 0's "
            "d_head numbers, then head 1's, and so on (the inverse of split_heads).",
        ),
    ]


def check_merge_heads(merge_heads) -> None:
    c = Check("merge_heads", MHA_BUILTINS, ops=MHA_OPS)
    x = torch.arange(2 * 3 * 5 * 4, dtype=torch.float32).view(2, 3, 5, 4)  # (b, h, s, d_head)
    out = c.call(merge_heads, x)
    c.that(isinstance(out, torch.Tensor), f"should return a tensor, got {type(out).__name__}.")
    hint = {
        (2, 5, 3, 4): "Flatten the (h, d_head) axes into one d_model axis.",
        (10, 12): "Keep the batch axis: (b, s, h * d_head).",
    }
    c.shape(
        out,
        (2, 5, 12),
        "merge_heads(x) for x of shape (2, 3, 5, 4)",
        hint.get(tuple(out.shape), "Expected (batch, seq, num_heads * d_head)."),
    )
    if not near(out, _stored_tensor("merge_x"), 0, 0):
        for cand, message in merge_candidates(x):
            if near(out, cand, 0, 0):
                c.fail(message)
        c.fail("the values are in the wrong places: merge_heads should undo split_heads exactly.")
    c.ok("(2, 3, 5, 4) → (2, 5, 12), heads side by side")
    y = torch.arange(2 * 6 * 12, dtype=torch.float32).view(2, 6, 12)
    c.close(
        c.call(merge_heads, _stored_tensor("split_y_4")),
        y,
        "merge_heads(split_heads(y, 4)) should give y back.",
        atol=0,
        rtol=0,
        passed="merge_heads(split_heads(y, h)) == y",
    )
    c.done()


__all__ = ["check_split_heads", "check_merge_heads"]
