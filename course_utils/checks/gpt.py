"""Visible checks for 09_gpt: GPTBlock, GPT, generate.

``GPTBlock`` and ``GPT``: known weights loaded by name into the learner's module and copied
into PyTorch's equivalent, ``nn.TransformerEncoderLayer`` with ``norm_first=True`` (GPT-2's
pre-norm block) under a causal mask, which computes what is expected. A pre-norm block attending
over the whole sequence under a causal mask computes, at its last positions, exactly what the
cached computation must give: so the cached calls are checked against the uncached sequence,
and the cache itself against PyTorch's own projections of the block's normed input. Wrong
outputs are compared with the common mistakes (a mask not shifted by the cached positions, the
past ignored, positions restarting at 0 …), built from the same PyTorch parts, to name the bug.

``check_gpt_block`` lives in ``gpt_block`` (with :class:`TorchBlock`, the PyTorch block the
GPT's checks stack), ``check_generate`` in ``gpt_generate`` (it runs on :class:`PrefixLM`, a fake
model); both are named here too, with ``check_gpt``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..language_model import PrefixLM
from ._core import Check, generator
from .encoder import EVERYWHERE, EVERYWHERE_OPS
from .gpt_block import FF, D, H, TorchBlock, block_parts, causal, check_gpt_block, kv_pair, pair
from .gpt_generate import check_generate
from .torch_parts import ATOL, RTOL, Parts, computing, known, load, near

ASSIGNMENT = "09_gpt"
GPT_NAMES = "tok_embedding, pos_embedding, blocks, ln_f, lm_head"


# -- PyTorch's equivalent -----------------------------------------------------------------------
def gpt_parts(vocab: int, d: int, d_ff: int, num_layers: int, max_len: int) -> Parts:
    return Parts(
        tok_embedding=nn.Embedding(vocab, d),
        pos_embedding=nn.Embedding(max_len, d),
        blocks=nn.ModuleList([block_parts(d, d_ff) for _ in range(num_layers)]),
        ln_f=nn.LayerNorm(d),
        lm_head=nn.Linear(d, vocab, bias=False),
    )


# -- GPT -----------------------------------------------------------------------------------------
class TorchGPT:
    """The expected logits of a GPT with known weights, from PyTorch's layers."""

    def __init__(self, parts: Parts, num_heads: int = H, dtype=torch.float32):
        self.parts, self.dtype = parts, dtype
        self.blocks = [TorchBlock(p, num_heads, dtype) for p in parts.blocks]

    def embed(self, ids, positions=None, scale=1.0):
        p = self.parts
        positions = torch.arange(ids.size(1)) if positions is None else positions
        with computing():
            return F.embedding(ids, p.tok_embedding.weight.to(self.dtype)) * scale + F.embedding(
                positions, p.pos_embedding.weight.to(self.dtype)
            )

    def logits(self, x, mask="causal", blocks=None, final_norm=True):
        p = self.parts
        mask = causal(x.size(1)) if mask == "causal" else mask
        for tb in self.blocks if blocks is None else blocks:
            x = tb.run(x, mask)
        with computing():
            if final_norm:
                ln = p.ln_f
                x = F.layer_norm(
                    x, ln.normalized_shape, ln.weight.to(self.dtype), ln.bias.to(self.dtype), ln.eps
                )
            return F.linear(x, p.lm_head.weight.to(self.dtype))

    def unshifted_blocks(self, ids, t_past: int):
        """The logits of the last T - t_past positions when every block's mask is the causal
        mask of the new positions alone, not shifted by the t_past cached ones."""
        T = ids.size(1)
        t = T - t_past
        good = self.embed(ids)  # the cached positions' states stay right, block after block
        new = good[:, t_past:]
        for tb in self.blocks:
            new = tb.new_positions(
                torch.cat([good[:, :t_past], new], 1), t, torch.ones(t, T, dtype=torch.bool).tril()
            )
            good = tb.run(good, causal(T))
        return self.logits(new, blocks=[], mask=None)

    def first_past_everywhere(self, ids, t_past: int):
        """The logits of the new positions when every block is given the first block's past."""
        x = self.embed(ids)
        first = self.blocks[0].kv(x[:, :t_past])[:2]
        new = x[:, t_past:]
        for tb in self.blocks:
            new = tb.with_past(new, first)
        return self.logits(new, blocks=[], mask=None)

    def mistakes(self, ids, t_past: int = 0):
        """(logits of the last positions, message) for the common mistakes."""
        T = ids.size(1)
        x = self.embed(ids)
        restart = torch.cat([torch.arange(t_past), torch.arange(T - t_past)])
        d = x.size(-1)
        out = [
            (
                torch.cat([self.logits(x)[:, :t_past], self.first_past_everywhere(ids, t_past)], 1)
                if t_past and len(self.blocks) > 1
                else None,
                "every block gets the first block's past: block i's cached keys and values are "
                "its own, the i-th entry of past.",
            ),
            (
                torch.cat([self.logits(x)[:, :t_past], self.unshifted_blocks(ids, t_past)], 1)
                if t_past
                else None,
                "your GPT looks right, but its blocks' mask is not shifted by the cached "
                "positions: the new positions see too little. Run check_gpt_block(GPTBlock) "
                "again: it names the block's mistake.",
            ),
            (
                self.logits(self.embed(ids, restart)) if t_past else None,
                "the new positions get position embeddings 0, 1, … again: with a past of t_past "
                "positions, the positions of ids are t_past … t_past + t - 1 (t_past is the number "
                "of cached positions, which the cached keys hold).",
            ),
            (
                self.logits(
                    self.embed(
                        ids,
                        torch.cat(
                            [
                                torch.arange(t_past),
                                torch.arange(len(self.blocks), len(self.blocks) + T - t_past),
                            ]
                        ),
                    )
                )
                if t_past and t_past != len(self.blocks)
                else None,
                f"the new positions start at {len(self.blocks)}, the number of blocks (the length "
                "of past, a list with one (K, V) per block), instead of the number of cached "
                "positions.",
            ),
            (
                self.logits(self.embed(ids, torch.zeros(T, dtype=torch.long))),
                "the position embeddings are missing or all the same: add pos_embedding of "
                "positions t_past … t_past + t - 1.",
            ),
            (
                self.logits(self.embed(ids, scale=d**0.5)),
                "the token embeddings are scaled by "
                "√d_model: that was the sinusoidal encoder's habit; GPT adds learned positions to "
                "the plain token embeddings.",
            ),
            (self.logits(x, mask=None), "the blocks are not causal (each position sees later ones)."),
            (self.logits(x, final_norm=False), "the final LayerNorm ln_f is missing before lm_head."),
            (self.logits(x, blocks=self.blocks[:1]), "only the first block runs."),
            (
                self.logits(x, blocks=self.blocks[-1:]),
                "only the last block runs on the embeddings: feed each block's output to the next.",
            ),
        ]
        return [(None if o is None else o[:, t_past:], m) for o, m in out]


def logits_case(c: Check, got, want, mistakes, what: str, passed=None, atol=ATOL, rtol=RTOL):
    c.that(isinstance(got, torch.Tensor), f"{what}: the logits should be a tensor, got {type(got).__name__}.")
    c.shape(
        got,
        tuple(want.shape),
        f"{what}: the logits",
        "(b, t, vocab_size): one row of logits per new position, from lm_head.",
    )
    if not near(got, want, atol, rtol):
        for candidate, message in mistakes() if callable(mistakes) else mistakes:
            if candidate is not None and near(got, candidate, 1e-4, 1e-3):
                c.fail(f"{what}: {message}")
        with computing():
            if near(got, torch.log_softmax(want, -1), 1e-4, 1e-3) or near(
                got, torch.softmax(want, -1), 1e-4, 1e-3
            ):
                c.fail(f"{what}: these are (log-)probabilities; return the raw logits of lm_head.")
    c.close(
        got,
        want,
        f"{what}: wrong logits. x = tok_embedding(ids) + pos_embedding(positions) "
        "with the positions continuing after the cached ones (as many as a cached key has "
        "positions), then block i with past[i], ln_f, lm_head.",
        atol=atol,
        rtol=rtol,
        passed=passed,
    )


def present_list(c: Check, present, layers: int, what: str):
    c.that(
        isinstance(present, (list, tuple)) and len(present) == layers,
        f"{what}: present "
        f"should be a list with one (K, V) per block ({layers} here), got "
        f"{type(present).__name__}"
        + (f" of length {len(present)}" if isinstance(present, (list, tuple)) else "")
        + ".",
    )
    for kv in present:
        kv_pair(c, kv, what)
    return present


def raises_value_error(c: Check, fn, *args, what: str) -> None:
    c.raises_value_error(
        what,
        fn,
        *args,
        wrong="the positions would pass max_len",
        instead="check the number of positions (cached + new) first and raise a ValueError "
        "with a clear message (an index error from pos_embedding says nothing about max_len).",
        accepted="the model has no position embedding beyond max_len. Raise a "
        "ValueError when cached + new positions > max_len.",
    )


GPT_SIZES = dict(vocab=11, layers=2, max_len=12)


def check_gpt(GPT) -> None:
    c = Check("GPT", EVERYWHERE, ops=EVERYWHERE_OPS)
    V, L, M = GPT_SIZES["vocab"], GPT_SIZES["layers"], GPT_SIZES["max_len"]
    model = c.build(GPT, V, d_model=D, num_heads=H, d_ff=FF, num_layers=L, max_len=M)
    head = getattr(model, "lm_head", None)
    c.that(
        isinstance(head, nn.Linear) and head.bias is None,
        "the model needs lm_head = nn.Linear(d_model, vocab_size, bias=False).",
    )
    pos = getattr(model, "pos_embedding", None)
    c.that(
        isinstance(pos, nn.Embedding) and pos.num_embeddings == M,
        "the model needs "
        "pos_embedding = nn.Embedding(max_len, d_model): learned positions, one row per "
        "position up to max_len.",
    )
    parts = known(lambda: gpt_parts(V, D, FF, L, M), seed=92)
    load(c, model, parts, GPT_NAMES)
    ref = TorchGPT(parts)
    ids = torch.randint(0, V, (2, 9), generator=generator(93))
    want = ref.logits(ref.embed(ids))
    logits, present = pair(c, c.call_on("ids (2, 9), no past", model, ids), "GPT(...)(ids)")
    logits_case(
        c,
        logits,
        want,
        lambda: ref.mistakes(ids),
        "ids (2, 9), no past",
        passed="tok_embedding + pos_embedding, the blocks, ln_f, lm_head",
    )
    present = present_list(c, present, L, "ids (2, 9)")
    c.that(
        tuple(present[0][0].shape) == (2, H, 9, D // H),
        f"present's K of the first block has "
        f"shape {tuple(present[0][0].shape)}, expected (2, {H}, 9, {D // H}).",
        "present: one (K, V) per block",
    )
    _, first = pair(c, c.call(model, ids[:, :5]), "GPT(...)(ids)")
    first = present_list(c, first, L, "ids[:, :5]")
    got, present = pair(
        c, c.call_on("4 new ids after a past of 5", model, ids[:, 5:], first), "GPT(...)(ids, past)"
    )
    logits_case(
        c,
        got,
        want[:, 5:],
        lambda: ref.mistakes(ids, 5),
        "4 new ids after a past of 5",
        passed="with a past: the positions continue after the cached ones",
    )
    present_list(c, present, L, "4 new ids after a past of 5")
    c.that(
        present[0][0].size(2) == 9,
        "present after a past of 5 and 4 new ids should cover 9 "
        f"positions, covers {present[0][0].size(2)}: each block's present extends its past.",
    )
    past = None
    for i in range(9):
        got, past = pair(c, c.call(model, ids[:, i : i + 1], past), "GPT(...)(ids, past)")
        logits_case(
            c,
            got,
            want[:, i : i + 1],
            lambda: ref.mistakes(ids[:, : i + 1], i),
            f"id {i} fed alone with the present of the step before",
        )
        past = present_list(c, past, L, f"step {i}")
    c.ok("one id at a time with the cache gives the whole sequence's logits")
    raises_value_error(
        c, model, torch.zeros(1, M + 1, dtype=torch.long), what=f"ids of length {M + 1} with max_len = {M}"
    )
    _, past = pair(c, c.call(model, torch.zeros(1, M - 2, dtype=torch.long)), "GPT(...)(ids)")
    raises_value_error(
        c,
        model,
        torch.zeros(1, 3, dtype=torch.long),
        past,
        what=f"3 new ids after a past of {M - 2} with max_len = {M}",
    )
    c.ok("a ValueError when the positions would pass max_len, the cached ones included")
    c.done()


__all__ = ["check_gpt_block", "check_gpt", "check_generate", "PrefixLM"]
