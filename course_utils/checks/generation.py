"""Visible checks for 08_generation: greedy_decode, sample_next_token, beam_search.

The decoders run on :class:`course_utils.toy_task.LookupModel`, a fake encoder-decoder with
looked-up logits that behaves like a two-layer decoder towards its ``tgt_mask`` (without the
causal mask, every position after the first reads other logits). What each case should give is
stored (``course_utils/data/expected``): the decoded tokens, and the best sequences of a
brute-force search over every sequence of a tiny vocabulary. ``check_sample_next_token`` is in
``course_utils.checks.sampling`` (checked by statistics, on draws from a seeded generator) and is
named here too.
"""

from __future__ import annotations

import math

import torch

from ..toy_task import LookupModel
from ._core import Check
from .sampling import check_sample_next_token, expected

BOS, EOS = 1, 2
LAYERS = 2  # the LookupModels answer to tgt_mask like a decoder of two layers


def _rows_after_eos_ok(ys: torch.Tensor, eos_id: int) -> bool:
    """Every row that produced eos_id has nothing but eos_id after it."""
    for row in ys.tolist():
        if eos_id in row[1:]:
            first = row.index(eos_id, 1)
            if any(t != eos_id for t in row[first:]):
                return False
    return True


# -- greedy ----------------------------------------------------------------------------------
def greedy_ok(
    c: Check, greedy_decode, model, src, max_len, want, src_mask=None, what="", unmasked=None, uncausal=None
):
    """The learner's greedy decoding against ``want`` (lists); ``unmasked``/``uncausal``: what
    decoding gives without the src_mask / without the causal mask, to name those mistakes."""
    args = (model, src, max_len, BOS, EOS) + ((src_mask,) if src_mask is not None else ())
    got = c.call(greedy_decode, *args)
    c.that(isinstance(got, torch.Tensor), f"should return a tensor, got {type(got).__name__}.")
    c.that(
        got.dim() == 2 and got.size(0) == src.size(0),
        f"should return (batch, L) = ({src.size(0)}, L), got shape {tuple(got.shape)}{what}.",
    )
    c.that(got.dtype == torch.long, f"should return token ids (torch.long), got {got.dtype}.")
    c.that(
        bool((got[:, 0] == BOS).all()),
        "column 0 should be bos_id for every row: start ys as a (batch, 1) tensor filled with bos_id.",
    )
    c.that(
        got.size(1) <= max_len,
        f"returned length {got.size(1)} > max_len = {max_len}: "
        "max_len counts every column, bos included (stop when L == max_len).",
    )
    c.that(
        _rows_after_eos_ok(got.cpu(), EOS),
        "a row goes on with other tokens after its "
        "eos_id: once a row has produced eos_id, append eos_id to it (and only eos_id).",
    )
    rows = got.cpu().tolist()
    if rows == want:
        return got
    if uncausal is not None and rows == uncausal:
        c.fail(
            f"wrong tokens{what}: your output is exactly what decoding gives when "
            "model.decode gets no causal mask. A decoder of two or more layers needs it "
            "even though only the last position is read: at every step its tgt_mask is a "
            "causal mask as long as ys is then, on the source's device."
        )
    if unmasked is not None and rows == unmasked:
        c.fail(
            f"wrong tokens{what}: your output is exactly what decoding gives when the "
            "<pad> positions are NOT masked, so the model read the padding as part of "
            "the source. The likely cause: src_mask is not passed on to model.encode "
            "and to model.decode (as its memory_mask)."
        )
    n = min(len(rows[0]), len(want[0]))
    wrong = [j for j in range(n) if any(r[j] != w[j] for r, w in zip(rows, want))]
    if wrong:
        c.fail(
            f"wrong token in column {wrong[0]}{what}. Each step should take the argmax of the "
            "logits at the LAST position of decoding all of ys so far against the memory "
            "(the source encoded once, with its mask), under a causal mask as long as ys; "
            "the causal mask is True where attention is allowed (on and below the "
            "diagonal)."
        )
    if len(rows[0]) > len(want[0]):
        c.fail(
            f"returned length {len(rows[0])}, expected {len(want[0])}{what}: stop as soon "
            "as EVERY row has produced eos_id (or L == max_len), not after a fixed number "
            "of steps."
        )
    c.fail(
        f"returned length {len(rows[0])}, expected {len(want[0])}{what}: stop only "
        "when every row has produced eos_id (all rows, not any row) or L == max_len."
    )


GREEDY_CASES = {
    # name: (LookupModel arguments, source rows, max_len, padded)
    "scripted": (
        dict(
            vocab_size=8,
            seed=1,
            scripts={
                (5, 6, 7, 3): [4, 5, 6, EOS],
                (4, 4, 5, 6): [6, 6, EOS],
                (7, 3, 3, 5): [5, 4, 5, 6, 4, EOS],
            },
        ),
        [[5, 6, 7, 3], [4, 4, 5, 6], [7, 3, 3, 5]],
        10,
        False,
    ),
    "never_ends": (dict(vocab_size=8, seed=2, eos_bias=-10.0), [[5, 6, 7, 3], [4, 4, 5, 6]], 6, False),
    "padded": (
        dict(vocab_size=8, seed=3, scripts={(5, 6, 7): [3, 4, EOS], (4, 4, 5, 6, 3): [6, EOS]}),
        [[5, 6, 7, 0, 0], [4, 4, 5, 6, 3]],
        8,
        True,
    ),
}


def greedy_case(name: str):
    """(model, src, max_len, src_mask) of a visible greedy case."""
    kwargs, rows, max_len, padded = GREEDY_CASES[name]
    model = LookupModel(eos_id=EOS, layers=LAYERS, **kwargs)
    src = torch.tensor(rows)
    return model, src, max_len, (src != 0)[:, None, None, :] if padded else None


def check_greedy_decode(greedy_decode) -> None:
    c = Check("greedy_decode")
    model, src, max_len, mask = greedy_case("scripted")
    greedy_ok(
        c,
        greedy_decode,
        model,
        src,
        max_len,
        expected("greedy/scripted"),
        what=" (3 rows that end after 4, 3 and 6 tokens, max_len = 10)",
        uncausal=expected("greedy/scripted/uncausal"),
    )
    c.ok("follows the argmax, shape (batch, L), starts with bos_id")
    c.ok("stops when every row has produced eos_id and pads finished rows with eos_id")
    model, src, max_len, mask = greedy_case("never_ends")
    got = greedy_ok(
        c,
        greedy_decode,
        model,
        src,
        max_len,
        expected("greedy/never_ends"),
        what=" (rows that never produce eos_id, max_len = 6)",
        uncausal=expected("greedy/never_ends/uncausal"),
    )
    c.that(got.size(1) == 6, "", "stops at L == max_len when no row ends")
    model, src, max_len, mask = greedy_case("padded")
    greedy_ok(
        c,
        greedy_decode,
        model,
        src,
        max_len,
        expected("greedy/padded"),
        mask,
        what=" (a batch whose first source is padded, with its src_mask)",
        unmasked=expected("greedy/padded/unmasked"),
        uncausal=expected("greedy/padded/uncausal"),
    )
    c.ok("uses src_mask: a padded source decodes like the unpadded one")
    c.ok("passes the causal mask to the decoder at every step")
    c.done()


# -- beam search -----------------------------------------------------------------------------
def beam(c: Check, beam_search, model, src, beam_size, max_len, length_penalty=None, what=None):
    """The learner's beam search result as a list, after the checks every result must pass.
    ``what`` names the input in the message when the learner's code raises."""
    kw = {} if length_penalty is None else {"length_penalty": length_penalty}
    args = (beam_search, model, src, beam_size, max_len, BOS, EOS)
    got = c.call_on(what, *args, **kw) if what else c.call(*args, **kw)
    c.that(isinstance(got, torch.Tensor), f"should return a tensor, got {type(got).__name__}.")
    c.that(
        got.dim() == 1,
        f"should return ONE sequence of shape (L,), got shape "
        f"{tuple(got.shape)}: drop the batch dimension of the winner.",
    )
    c.that(got.dtype == torch.long, f"should return token ids (torch.long), got {got.dtype}.")
    c.that(got.numel() >= 1 and int(got[0]) == BOS, "the sequence should start with bos_id.")
    c.that(
        got.numel() <= max_len,
        f"returned {got.numel()} tokens, more than max_len = {max_len} (bos included).",
    )
    seq = got.cpu().tolist()
    c.that(
        EOS not in seq[1:-1],
        f"the returned sequence {seq} goes on after eos_id: a "
        "hypothesis that ends in eos_id is finished. It leaves the beam, is set aside among "
        "the finished hypotheses and is never extended again.",
    )
    return seq


def beam_matches(c: Check, got, want, what: str, uncausal=None, message: str = "") -> None:
    """Fail unless ``got == want``, naming a missing causal mask when ``got == uncausal``."""
    if got == want:
        return
    if uncausal is not None and got == uncausal:
        c.fail(
            f"{what}: your result is exactly what the search gives when model.decode gets "
            "no causal mask. Pass causal_mask(L) as tgt_mask at every step: a decoder of two "
            "or more layers needs it even though only the last position is read."
        )
    c.fail(
        f"{what}: "
        + (
            message
            or (
                f"expected a different sequence (of length {len(want)}, you returned {len(got)}). Each "
                "step keeps the beam_size best extensions of the LIVE hypotheses by total "
                "log-probability; an extension ending in eos_id is finished and leaves the beam (it is "
                "not extended again and does not take a place in the next step's beam); the final "
                "choice divides each total by n ** length_penalty."
            )
        )
    )


def length_normalisation_hint(c: Check, got, want, raw, with_bos, lp) -> None:
    """Fail with a named cause when a wide beam's wrong winner is the raw or bos-counted best."""
    if got == want:
        return
    raw, with_bos = got == raw, lp != 0 and got == with_bos
    if not (raw or with_bos):
        return
    if raw and with_bos:
        looks = (
            "the best by RAW total log-probability (not length-normalised), or the best "
            "normalised with n counting <bos> too: both give this sequence here"
        )
    elif raw:
        looks = "the best by RAW total log-probability: it was not length-normalised"
    else:
        looks = "the best normalised with n counting <bos> too (n one too large)"
    c.fail(
        f"with length_penalty = {lp} and a beam wide enough to keep every hypothesis, your "
        f"result {got} looks like {looks}. The winner asked for is the best by total "
        "log-prob / n ** length_penalty, with n = the tokens after <bos> (<eos> included)."
    )


_NO = -30.0
BEAM_TABLES = {
    # greedy's myopia: "3" looks best now, but every continuation after it is uncertain
    "myopia": {
        (BOS,): [-9, -9, -9, 1.0, 0.8],
        (BOS, 3): [-9, -9, 0.1, 0.0, 0.05],
        (BOS, 4): [-9, -9, -9, 3.0, -9],
        (BOS, 3, 3): [-9, -9, 5, -9, -9],
        (BOS, 3, 4): [-9, -9, 5, -9, -9],
        (BOS, 4, 3): [-9, -9, 5, -9, -9],
    },
    # "<bos> <eos>" is the best first step; once it is finished, both places of the beam must
    # go to live hypotheses, which find "<bos> 3 5 <eos>" (a better per-token score)
    "refill": {
        (BOS,): [_NO, _NO, math.log(0.5), math.log(0.3), math.log(0.2), _NO],
        (BOS, 3): [_NO, _NO, _NO, _NO, math.log(0.55), math.log(0.45)],
        (BOS, 3, 4): [_NO, _NO, math.log(0.6), math.log(0.4), _NO, _NO],
        (BOS, 3, 5): [_NO, _NO, 0.0, _NO, _NO, _NO],
    },
}
BEAM_SRC = [[3, 4, 5]]
WIDE = [(79, 1.0), (3, 1.0)]  # (seed, length_penalty) of the brute-forced models; 79: raw,
#                               bos-counted and right give 3 different winners
RANDOM_BEAMS = [(6, 2.5, 2, 7), (102, 1.0, 3, 8)]  # (seed, eos_bias, beam_size, max_len)


def table_model(name: str) -> LookupModel:
    table = BEAM_TABLES[name]
    return LookupModel(len(next(iter(table.values()))), table=table, eos_id=EOS, layers=LAYERS)


def wide_model(seed: int) -> LookupModel:
    """A model small enough (4 tokens, max_len 5) to brute-force every sequence."""
    return LookupModel(4, seed=seed, eos_id=EOS, eos_bias=0.5, scale=2.0, layers=LAYERS)


def random_model(seed: int, eos_bias: float, vocab_size: int = 6) -> LookupModel:
    return LookupModel(vocab_size, seed=seed, eos_id=EOS, eos_bias=eos_bias, layers=LAYERS)


def check_beam_search(beam_search) -> None:
    c = Check("beam_search")
    src = torch.tensor(BEAM_SRC)
    model = table_model("myopia")
    got = beam(c, beam_search, model, src, 1, 6)
    beam_matches(
        c,
        got,
        expected("beam/myopia/greedy"),
        "beam_size = 1",
        expected("beam/myopia/greedy/uncausal"),
        "with beam_size = 1, beam search should "
        "give exactly greedy decoding's sequence: keep the single best extension each "
        "step.",
    )
    c.ok("beam_size = 1 equals greedy decoding")
    got = beam(c, beam_search, model, src, 2, 6)
    beam_matches(
        c,
        got,
        [BOS, 4, 3, EOS],
        "beam_size = 2",
        expected("beam/myopia/uncausal"),
        "on a model where the first token that looks best leads nowhere certain, the "
        "search should find the sequence with the higher total log-probability: rank "
        "extensions by the SUM of log-probs so far, not by the last token's.",
    )
    c.ok("beam_size = 2 beats greedy's myopia")
    for seed, lp in WIDE:
        got = beam(
            c,
            beam_search,
            wide_model(seed),
            src,
            4**4,
            5,
            lp,
            what=f"beam_size = {4**4}, more than the 4 extensions of the first step: "
            "never ask for more candidates than there are",
        )
        want = expected(f"beam/wide{seed}")
        length_normalisation_hint(
            c, got, want, expected(f"beam/wide{seed}/raw"), expected(f"beam/wide{seed}/with_bos"), lp
        )
        c.that(
            got == want,
            "with a beam wide enough to keep every hypothesis, beam search "
            "should return the best of all sequences (ended by eos_id or cut at max_len) by "
            "total log-prob / n ** length_penalty: check the scores and the stopping rule.",
        )
    c.ok("a beam wide enough to keep everything finds the brute-force optimum (length-normalised)")
    got = beam(c, beam_search, table_model("refill"), src, 2, 6)
    want = [BOS, 3, 5, EOS]
    if got == [BOS, EOS]:
        c.fail(
            f"beam_size = 2 on a model whose best first step is <bos> <eos>: expected {want}, "
            f"you returned {got}. A hypothesis ending in eos_id is finished: it leaves the "
            "beam (set aside with the finished ones, never extended, taking no place in the "
            "next step's beam), and all beam_size places go to extensions of the live "
            "hypotheses. Does a finished hypothesis keep its place in your beam?"
        )
    c.that(
        got == want,
        f"beam_size = 2 on a model whose best first step is <bos> <eos>: "
        f"expected {want}, you returned {got}. Each step keeps the beam_size best "
        "extensions of ALL the live hypotheses together, by total log-probability; those "
        "ending in eos_id leave the beam; the final choice is among finished and live, by "
        "total / n ** length_penalty.",
        "finished hypotheses leave the beam and the beam refills from the live ones",
    )
    for seed, bias, k, max_len in RANDOM_BEAMS:
        got = beam(c, beam_search, random_model(seed, bias), src, k, max_len)
        beam_matches(
            c,
            got,
            expected(f"beam/random{seed}"),
            f"beam_size {k}, model {seed}",
            expected(f"beam/random{seed}/uncausal"),
        )
    c.ok("matches on two random models (beam sizes 2 and 3)")
    c.done()


__all__ = ["check_greedy_decode", "check_sample_next_token", "check_beam_search"]
