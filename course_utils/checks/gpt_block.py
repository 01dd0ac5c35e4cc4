"""Visible checks for 09_gpt's GPTBlock, and the PyTorch block the GPT's checks build on.

Known weights are loaded by name into the learner's block and copied into PyTorch's equivalent,
``nn.TransformerEncoderLayer`` with ``norm_first=True`` (GPT-2's pre-norm block) under a causal
mask (:class:`TorchBlock`). The cached calls are checked against the uncached sequence, and the
cache itself against PyTorch's own projections of the block's normed input; a wrong output or
cache is compared with the common mistakes (keys and values swapped, the past ignored …) to
name the bug.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._core import Check, generator
from .encoder import EVERYWHERE, EVERYWHERE_OPS
from .torch_parts import (
    ATOL,
    RTOL,
    Parts,
    attend,
    attention_parts,
    computing,
    feed_forward,
    ffn_parts,
    known,
    load,
    near,
    torch_encoder_layer,
)

D, H, FF = 16, 4, 32  # the small sizes every check of 09_gpt uses
BLOCK_NAMES = "ln1, attn, ln2, ffn"


def causal(size: int) -> torch.Tensor:
    return torch.ones(size, size, dtype=torch.bool).tril()


def shifted(t: int, T: int) -> torch.Tensor:
    """(t, T): the last t of T positions, each seeing every earlier position and itself."""
    return torch.ones(t, T, dtype=torch.bool).tril(diagonal=T - t)


# -- PyTorch's equivalents -----------------------------------------------------------------------
def block_parts(d: int = D, d_ff: int = FF) -> Parts:
    return Parts(ln1=nn.LayerNorm(d), attn=attention_parts(d), ln2=nn.LayerNorm(d), ffn=ffn_parts(d, d_ff))


class TorchBlock:
    """PyTorch's pre-norm encoder layer holding a GPTBlock's known weights, and the pieces to
    build the common mistakes from."""

    def __init__(self, parts: Parts, num_heads: int = H, dtype=torch.float32):
        alias = Parts(self_attn=parts.attn, ffn=parts.ffn, norm1=parts.ln1, norm2=parts.ln2)
        self.layer = torch_encoder_layer(alias, num_heads, norm_first=True, dtype=dtype)
        self.post = torch_encoder_layer(alias, num_heads, norm_first=False, dtype=dtype)
        self.heads = num_heads
        self.parts = parts

    def run(self, x, mask, norm=True, residual=True):
        """The block on x (b, T, d) with a course mask (True = may attend); ``norm=False``
        attends over x itself (no ln1), ``residual=False`` drops the residual around it."""
        L = self.layer
        with computing():
            n = L.norm1(x) if norm else x
            h = residual * x + attend(L.self_attn, n, n, mask)
            return h + feed_forward(L, L.norm2(h))

    def new_positions(self, x, t, mask, ffn=True):
        """The last t positions of x when they attend to all of x's normed states under ``mask``
        (t, T): what a cached step computes with that mask."""
        L = self.layer
        with computing():
            new = x[:, -t:]
            h = new + attend(L.self_attn, L.norm1(new), L.norm1(x), mask)
            return h + feed_forward(L, L.norm2(h)) if ffn else h

    def with_past(self, new, past):
        """The block on the new positions ``new`` (b, t, d) attending over a given ``past``
        (K, V) and their own keys and values, causally: a cached step with that past."""
        L, (b, t, d) = self.layer, new.shape
        K, V, other = self.kv(new)
        K, V = torch.cat([past[0], K], 2), torch.cat([past[1], V], 2)
        with computing():
            o = F.scaled_dot_product_attention(other["q"], K, V, attn_mask=shifted(t, K.size(2)))
            h = new + F.linear(
                o.transpose(1, 2).reshape(b, t, d), L.self_attn.out_proj.weight, L.self_attn.out_proj.bias
            )
            return h + feed_forward(L, L.norm2(h))

    def kv(self, x):
        """(K, V) of x: split_heads(k_proj(ln1(x))) and the same with v_proj, (b, H, T, d_head)."""
        L, b, T, d = self.layer, x.size(0), x.size(1), x.size(2)
        w, bias = L.self_attn.in_proj_weight, L.self_attn.in_proj_bias
        with computing():
            h = L.norm1(x)
            k = F.linear(h, w[d : 2 * d], bias[d : 2 * d])
            v = F.linear(h, w[2 * d :], bias[2 * d :])

            def heads(y):
                return y.reshape(b, T, self.heads, d // self.heads).transpose(1, 2)

            unnormed = F.linear(x, w[d : 2 * d], bias[d : 2 * d])
            return heads(k), heads(v), {"q": heads(F.linear(h, w[:d], bias[:d])), "unnormed": heads(unnormed)}


# -- GPTBlock ------------------------------------------------------------------------------------
def pair(c: Check, out, what: str):
    """(output, present) of a block or model call, after the checks every result must pass."""
    if isinstance(out, torch.Tensor):
        c.fail(
            f"{what} returned a single tensor; it should return a pair (output, present), "
            "present being the cache extended by this call's positions."
        )
    c.that(
        isinstance(out, (tuple, list)) and len(out) == 2,
        f"{what} should return a pair "
        f"(output, present), got {type(out).__name__}"
        + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else "")
        + ".",
    )
    return out


def kv_pair(c: Check, present, what: str):
    c.that(
        isinstance(present, (tuple, list))
        and len(present) == 2
        and all(isinstance(p, torch.Tensor) for p in present),
        f"{what}: present should be a pair of tensors (K, V), got {type(present).__name__}.",
    )
    return present


def cache_mistake(c: Check, present, tb: TorchBlock, x, past_len: int, what: str) -> None:
    """Fail naming the mistake when present is a known wrong cache (keys and values swapped,
    the queries, keys of x instead of ln1(x), the cached positions after the new ones)."""
    if not (
        isinstance(present, (tuple, list))
        and len(present) == 2
        and all(isinstance(p, torch.Tensor) for p in present)
    ):
        return
    K, V = present
    want_k, want_v, other = tb.kv(x)
    if K.shape != want_k.shape or V.shape != want_v.shape:
        return
    K, V = K.detach().cpu(), V.detach().cpu()
    if near(K, want_v, 1e-4, 1e-3) and near(V, want_k, 1e-4, 1e-3):
        c.fail(f"{what}: present's K and V are swapped: the pair is (K, V).")
    if near(K, other["q"], 1e-4, 1e-3):
        c.fail(f"{what}: present's K holds the queries; cache the keys (attn.k_proj).")
    if near(K, other["unnormed"], 1e-4, 1e-3):
        c.fail(
            f"{what}: the keys are projections of x itself. They are projections of ln1(x), "
            "the normed input the queries and values are made from too."
        )
    if past_len and near(K, torch.cat([want_k[:, :, past_len:], want_k[:, :, :past_len]], 2), 1e-4, 1e-3):
        c.fail(
            f"{what}: the cached positions come after the new ones in K and V. Keys and "
            "values are kept in the order of their positions: the cached (earlier) positions "
            "first, then this call's. In the wrong order the mask lets each new position "
            "see the wrong keys."
        )


def cache_ok(c: Check, present, tb: TorchBlock, x, what: str, past_len: int = 0) -> None:
    """The block's present against the keys and values of every position of x."""
    K, V = kv_pair(c, present, what)
    want_k, want_v, _ = tb.kv(x)
    b, T, dh = x.size(0), x.size(1), x.size(2) // tb.heads
    shape = (b, tb.heads, T, dh)
    if tuple(K.shape) != shape and past_len and tuple(K.shape) == (b, tb.heads, T - past_len, dh):
        c.fail(
            f"{what}: present holds only this call's {T - past_len} positions. It should be "
            f"the past extended by them, K and V alike, so that it covers all {T} positions."
        )
    c.shape(
        K,
        shape,
        f"{what}: present's K",
        "K and V are (b, num_heads, positions so far, "
        "d_head): the keys after k_proj and split_heads, cached positions first.",
    )
    c.shape(V, shape, f"{what}: present's V")
    cache_mistake(c, present, tb, x, past_len, what)
    c.close(
        K,
        want_k,
        f"{what}: present's K should be split_heads(attn.k_proj(ln1(x))) of every "
        "position so far, the cached ones first.",
        atol=ATOL,
        rtol=RTOL,
    )
    c.close(
        V,
        want_v,
        f"{what}: present's V should be split_heads(attn.v_proj(ln1(x))) of every "
        "position so far, the cached ones first.",
        atol=ATOL,
        rtol=RTOL,
    )


def block_mistakes(tb: TorchBlock, x, t: int):
    """Outputs of the last t positions of x for the common mistakes of a cached step."""
    T = x.size(1)
    with computing():
        return [
            (
                tb.new_positions(x, t, torch.ones(t, T, dtype=torch.bool).tril()),
                "the new positions see too little: the mask is not shifted by the cached positions. "
                "New position i sits at T - t + i and sees every cached position and the new ones "
                "up to itself: its row of the mask is row T - t + i of a causal mask of size T. "
                "The new positions' rows are the LAST t rows of that mask, not its first t.",
            ),
            (
                tb.new_positions(x, t, torch.ones(t, T, dtype=torch.bool)) if t > 1 else None,
                "the new positions attend to later new positions: with a cache, the new "
                "positions still need a causal mask among themselves (their rows of a causal mask "
                "of size T = cached + new).",
            ),
            (
                tb.run(x[:, -t:], causal(t)),
                "the past is ignored: the new positions attend only "
                "to each other. They should attend over the cached keys and values too, which "
                "come first in K and V (the positions dim).",
            ),
            (
                tb.new_positions(x, t, shifted(t, T), ffn=False),
                "the feed-forward half is missing: x = x + ffn(ln2(x)) after the attention.",
            ),
        ]


def block_case(c: Check, block, tb: TorchBlock, x, t_past: int, past, what: str, passed: str | None = None):
    """The learner's block on x[:, t_past:] with ``past``: output and present."""
    T = x.size(1)
    new = x[:, t_past:]
    args = (new,) if past is None else (new, past)
    out, present = pair(
        c, c.call_on(what, block, *args), f"GPTBlock(...)(x{'' if past is None else ', past'})"
    )
    want = tb.run(x, causal(T))[:, t_past:]
    c.shape(out, tuple(want.shape), f"{what}: the output", "It has the shape of x.")
    if not near(out, want, ATOL, RTOL):
        with computing():
            post = tb.post(x, src_mask=~causal(T))[:, t_past:]
            no_mask = tb.run(x, None)[:, t_past:]
            L = tb.layer
            h = L.norm1(x + attend(L.self_attn, x, x, causal(T)))
            half_post = (h + feed_forward(L, L.norm2(h)))[:, t_past:]
        norm_after = (
            "GPT-2's block is pre-norm: each sub-layer reads the normed x, and its "
            "output is added to x itself, unnormed."
        )
        mistakes = [
            (post, f"this is post-norm (norm(x + attn(x))); {norm_after}"),
            (
                half_post,
                "the attention half is post-norm: ln1 is applied to the sum "
                f"x + attn(x) instead of to the attention's input. {norm_after}",
            ),
            (
                no_mask,
                "the attention is not causal: position i must not see the "
                "positions after it. (A mask made for one new token, the last row of a "
                "causal mask, lets every position of a longer input see everything.)",
            ),
            (
                tb.run(x, causal(T), norm=False)[:, t_past:],
                "the attention reads x "
                "itself: ln1 comes first, and the queries, keys and values are projections "
                "of ln1(x).",
            ),
            (
                tb.run(x, causal(T), residual=False)[:, t_past:],
                "the residual connection around the attention is missing: x = x + attn(ln1(x)).",
            ),
        ]
        if t_past:
            mistakes = block_mistakes(tb, x, T - t_past) + mistakes
        for candidate, message in mistakes:
            if candidate is not None and near(out, candidate, 1e-4, 1e-3):
                c.fail(f"{what}: {message}")
        cache_mistake(c, present, tb, x, t_past, what)  # a wrong cache explains a wrong output
    c.close(
        out,
        want,
        f"{what}: wrong output. x = x + attn(ln1(x)) with a causal mask over "
        "the cached and new positions, then x = x + ffn(ln2(x)).",
        atol=ATOL,
        rtol=RTOL,
        passed=passed,
    )
    cache_ok(c, present, tb, x, what, t_past)
    return out, present


def check_gpt_block(GPTBlock) -> None:
    c = Check("GPTBlock", EVERYWHERE, ops=EVERYWHERE_OPS)
    block = c.build(GPTBlock, D, H, FF)
    for name in ("ln1", "attn", "ln2", "ffn"):
        c.that(
            isinstance(getattr(block, name, None), nn.Module),
            f"GPTBlock needs a sub-module "
            f"named {name} ({BLOCK_NAMES}: LayerNorm, MultiHeadAttention, LayerNorm, "
            "FeedForward).",
        )
    parts = known(block_parts, seed=90)
    load(c, block, parts, BLOCK_NAMES)
    tb = TorchBlock(parts)
    x = torch.randn(2, 7, D, generator=generator(91))
    block_case(
        c,
        block,
        tb,
        x,
        0,
        None,
        "a (2, 7, 16) input, no past",
        passed="pre-norm, causal: x + attn(ln1(x)), then + ffn(ln2(x))",
    )
    c.ok("present = (K, V) of every position, (b, num_heads, t, d_head)")
    K, V, _ = tb.kv(x[:, :4])
    block_case(
        c,
        block,
        tb,
        x,
        4,
        (K, V),
        "3 new positions after a past of 4",
        passed="with a past: the new positions see the cached ones, causally among "
        "themselves, and present is the past extended",
    )
    past = None
    for i in range(7):  # one position at a time, each step with the learner's own present
        _, past = block_case(
            c,
            block,
            tb,
            x[:, : i + 1],
            i,
            past,
            f"position {i} fed alone with the present of the step before",
        )
    c.ok(
        "one position at a time, each step's present as the next step's past, gives the "
        "whole sequence's output"
    )
    c.done()


__all__ = ["check_gpt_block"]
