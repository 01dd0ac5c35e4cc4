"""Checks for 08_generation: greedy_decode, sample_next_token, beam_search.

The decoders are run on :class:`course_utils.toy_task.LookupModel`, a fake encoder-decoder with
looked-up logits, so the right output is known exactly: from the reference decoders, from a
brute-force search over every sequence of a tiny vocabulary, and from sampling statistics
(empirical frequencies over many draws from a seeded generator against the expected
renormalised distribution, with exact checks of which tokens can ever be drawn).
"""
from __future__ import annotations

import itertools
import math

import torch

from ..device import get_device
from course_grading.reference import generation as ref
from ..toy_task import LookupModel
from ._core import Check

_REFERENCE = [
    "course_grading.reference.generation.greedy_decode",
    "course_grading.reference.generation.sample_next_token",
    "course_grading.reference.generation.filter_logits",
    "course_grading.reference.generation.beam_search",
    "course_grading.reference.generation.sample_decode",
]
BOS, EOS = 1, 2


def _devices() -> list[torch.device]:
    extra = get_device()
    return [torch.device("cpu")] + ([extra] if extra.type != "cpu" else [])


def _rows_after_eos_ok(ys: torch.Tensor, eos_id: int) -> bool:
    """Every row that produced eos_id has nothing but eos_id after it."""
    for row in ys.tolist():
        if eos_id in row[1:]:
            first = row.index(eos_id, 1)
            if any(t != eos_id for t in row[first:]):
                return False
    return True


# -- greedy ----------------------------------------------------------------------------------
def _greedy_ok(c: Check, greedy_decode, model, src, max_len, src_mask=None, what=""):
    expected = ref.greedy_decode(model, src, max_len, BOS, EOS, src_mask)
    args = (model, src, max_len, BOS, EOS) + ((src_mask,) if src_mask is not None else ())
    got = c.call(greedy_decode, *args)
    c.that(isinstance(got, torch.Tensor), f"should return a tensor, got {type(got).__name__}.")
    c.that(got.dim() == 2 and got.size(0) == src.size(0),
           f"should return (batch, L) = ({src.size(0)}, L), got shape {tuple(got.shape)}{what}.")
    c.that(got.dtype == torch.long, f"should return token ids (torch.long), got {got.dtype}.")
    c.that(bool((got[:, 0] == BOS).all()), "column 0 should be bos_id for every row: start "
           "ys as a (batch, 1) tensor filled with bos_id.")
    c.that(got.size(1) <= max_len, f"returned length {got.size(1)} > max_len = {max_len}: "
           "max_len counts every column, bos included (stop when L == max_len).")
    c.that(_rows_after_eos_ok(got.cpu(), EOS), "a row goes on with other tokens after its "
           "eos_id: once a row has produced eos_id, append eos_id to it (and only eos_id).")
    if src_mask is not None and not torch.equal(got.cpu(), expected.cpu()):
        unmasked = ref.greedy_decode(model, src, max_len, BOS, EOS)
        if torch.equal(got.cpu(), unmasked.cpu()):
            c.fail(f"wrong tokens{what}: your output is exactly what decoding gives when the "
                   "<pad> positions are NOT masked, so the model read the padding as part of "
                   "the source. The likely cause: src_mask is not passed on to model.encode "
                   "and to model.decode (as its memory_mask).")
    n = min(got.size(1), expected.size(1))
    if not torch.equal(got[:, :n].cpu(), expected[:, :n].cpu()):
        first = (got[:, :n].cpu() != expected[:, :n].cpu()).any(0).nonzero()[0].item()
        c.fail(f"wrong token in column {first}{what}. Each step should take the argmax of the "
               "logits at the LAST position (logits[:, -1]) of model.decode(ys, memory, "
               "causal_mask, src_mask), with memory = model.encode(src, src_mask) computed once.")
    if got.size(1) > expected.size(1):
        c.fail(f"returned length {got.size(1)}, expected {expected.size(1)}{what}: stop as soon "
               "as EVERY row has produced eos_id (or L == max_len), not after a fixed number "
               "of steps.")
    if got.size(1) < expected.size(1):
        c.fail(f"returned length {got.size(1)}, expected {expected.size(1)}{what}: stop only "
               "when every row has produced eos_id (all rows, not any row) or L == max_len.")
    return got


def check_greedy_decode(greedy_decode, hidden: bool = False) -> None:
    c = Check("greedy_decode", _REFERENCE, hidden)
    src = torch.tensor([[5, 6, 7, 3], [4, 4, 5, 6], [7, 3, 3, 5]])
    scripts = {(5, 6, 7, 3): [4, 5, 6, EOS], (4, 4, 5, 6): [6, 6, EOS],
               (7, 3, 3, 5): [5, 4, 5, 6, 4, EOS]}
    model = LookupModel(8, seed=1, scripts=scripts, eos_id=EOS)
    got = _greedy_ok(c, greedy_decode, model, src, 10, what=" (3 rows that end after 4, 3 and "
                     "6 tokens, max_len = 10)")
    c.ok("follows the argmax, shape (batch, L), starts with bos_id")
    c.ok("stops when every row has produced eos_id and pads finished rows with eos_id")
    model = LookupModel(8, seed=2, eos_id=EOS, eos_bias=-10.0)  # never says eos
    got = _greedy_ok(c, greedy_decode, model, src[:2], 6, what=" (rows that never produce "
                     "eos_id, max_len = 6)")
    c.that(got.size(1) == 6, "", "stops at L == max_len when no row ends")
    src = torch.tensor([[5, 6, 7, 0, 0], [4, 4, 5, 6, 3]])  # row 0 padded with two <pad> = 0
    scripts = {(5, 6, 7): [3, 4, EOS], (4, 4, 5, 6, 3): [6, EOS]}
    model = LookupModel(8, seed=3, scripts=scripts, eos_id=EOS)
    mask = (src != 0)[:, None, None, :]  # (b, 1, 1, s) True = a real token
    _greedy_ok(c, greedy_decode, model, src, 8, mask, what=" (a batch whose first source is "
               "padded, with its src_mask)")
    c.ok("uses src_mask: a padded source decodes like the unpadded one")
    if hidden:
        for seed in range(4):
            model = LookupModel(7, seed=10 + seed, eos_id=EOS, eos_bias=1.0)
            g = torch.Generator().manual_seed(seed)
            src = torch.randint(3, 7, (5, 4), generator=g)
            _greedy_ok(c, greedy_decode, model, src, 9, what=f" (random model {seed})")
        c.ok("matches on four random models with a batch of 5")
        for seed in range(2):
            g = torch.Generator().manual_seed(20 + seed)
            src = torch.randint(3, 7, (4, 6), generator=g)
            lengths = torch.tensor([6, 3, 5, 2])
            src[torch.arange(6)[None, :] >= lengths[:, None]] = 0  # pad the ends of the rows
            model = LookupModel(7, seed=30 + seed, eos_id=EOS, eos_bias=1.0)
            _greedy_ok(c, greedy_decode, model, src, 9, (src != 0)[:, None, None, :],
                       what=f" (random model {seed}, a batch of 4 padded sources)")
        c.ok("padded batches of random models")
        model = LookupModel(6, seed=4, eos_id=EOS, eos_bias=0.5)
        _greedy_ok(c, greedy_decode, model, torch.tensor([[3, 4, 5]]), 7, what=" (batch of 1)")
        _greedy_ok(c, greedy_decode, model, torch.tensor([[3, 4, 5]]), 1, what=" (max_len = 1)")
        c.ok("a batch of one, and max_len = 1 (just bos)")
        src = torch.tensor([[5, 6, 7, 0, 0], [4, 4, 5, 6, 3]])
        mask = (src != 0)[:, None, None, :]
        for dev in _devices()[1:]:
            model = LookupModel(8, seed=3, scripts=scripts, eos_id=EOS, device=dev)
            out = _greedy_ok(c, greedy_decode, model, src.to(dev), 8, mask.to(dev),
                             what=f" on {dev.type}")
            c.that(out.device.type == dev.type, f"the result should stay on {dev.type}: create "
                   "ys on src.device.", f"runs on {dev.type}")
    c.done()


# -- sampling --------------------------------------------------------------------------------
def _draw(c: Check, sample_next_token, logits_row, n, seed=0, **kwargs):
    """n samples from one row of logits, drawn in one call on a (n, V) batch."""
    logits = logits_row.expand(n, -1).clone()
    g = torch.Generator().manual_seed(seed)
    out = c.call(sample_next_token, logits, generator=g, **kwargs)
    c.that(isinstance(out, torch.Tensor), f"should return a tensor, got {type(out).__name__}.")
    c.shape(out, (n,), f"the result for logits of shape ({n}, {logits.size(1)})",
            "Return one token id per row: squeeze the last dim of torch.multinomial(probs, 1).")
    c.that(out.dtype == torch.long, f"should return token ids (torch.long), got {out.dtype}.")
    return out


def _freq(samples: torch.Tensor, V: int) -> torch.Tensor:
    return torch.bincount(samples.cpu(), minlength=V).double() / samples.numel()


def _expected(logits_row, temperature=1.0, top_k=None, top_p=None) -> torch.Tensor:
    return torch.softmax(ref.filter_logits(logits_row[None].double(), temperature, top_k,
                                           top_p), -1)[0]


_N = 40_000  # draws per distribution: the standard error of a frequency is at most 0.0025


def _sampling_case(c: Check, sample_next_token, logits_row, what: str, hint: str, seed=0,
                   **kwargs):
    V = logits_row.numel()
    p = _expected(logits_row, **kwargs)
    out = _draw(c, sample_next_token, logits_row, _N, seed=seed, **kwargs)
    c.that(bool(((out >= 0) & (out < V)).all()), f"sampled ids outside 0..{V - 1} ({what}).")
    f = _freq(out, V)
    support, allowed = set((f > 0).nonzero().flatten().tolist()), set(
        (p > 0).nonzero().flatten().tolist())
    if not support <= allowed:
        if kwargs.get("top_p") is not None:
            hint += (" Is the decision made in sorted order mapped back to the vocabulary order "
                     "(e.g. scatter)?")
        c.fail(f"{what}: drew tokens that should have been filtered out. {hint}")
    if allowed - support and bool(p[list(allowed - support)].max() > 0.01):
        c.fail(f"{what}: some tokens that should stay possible were never drawn in {_N} "
               f"draws. {hint}")
    worst = float((f - p).abs().max())
    if worst > 0.013:  # > 5 standard errors
        c.fail(f"{what}: the frequencies of {_N} draws are off by up to {worst:.3f} from the "
               f"expected distribution. {hint}")


def check_sample_next_token(sample_next_token, hidden: bool = False) -> None:
    c = Check("sample_next_token", _REFERENCE, hidden)
    logits = torch.tensor([1.0, 3.0, -1.0, 2.0, 0.0])
    out = c.call(sample_next_token, torch.zeros(4, 6), generator=torch.Generator().manual_seed(0))
    c.that(isinstance(out, torch.Tensor), f"should return a tensor, got {type(out).__name__}.")
    c.shape(out, (4,), "the result for logits of shape (4, 6)",
            "One token id per row: squeeze the last dim of torch.multinomial(probs, 1).")
    c.that(out.dtype == torch.long, f"should return token ids (torch.long), got {out.dtype}.",
           "one token id per row")
    _sampling_case(c, sample_next_token, logits, "temperature 1",
                   "Sample from softmax(logits) with torch.multinomial.")
    c.ok("frequencies match softmax(logits) at temperature 1")
    _sampling_case(c, sample_next_token, logits, "temperature 0.5",
                   "Divide the logits by the temperature (T < 1 sharpens), do not multiply.",
                   temperature=0.5)
    c.ok("temperature divides the logits")
    _sampling_case(c, sample_next_token, logits, "top_k = 2",
                   "Keep the k HIGHEST logits (set the others to -inf), then renormalise.",
                   top_k=2)
    c.ok("top_k keeps the k most likely tokens")
    probs = torch.tensor([0.15, 0.5, 0.05, 0.3])  # sorted: 0.5, 0.3 | 0.15, 0.05
    _sampling_case(c, sample_next_token, probs.log(), "top_p = 0.7 over probabilities "
                   "(0.15, 0.5, 0.05, 0.3)",
                   "Sort by probability, keep tokens until the kept mass reaches top_p, and keep "
                   "the token that crosses top_p too (0.5 alone is below 0.7, so 0.3 stays).",
                   top_p=0.7)
    c.ok("top_p keeps the smallest set that reaches p, crossing token included")
    if hidden:
        _sampling_case(c, sample_next_token, logits, "temperature 2",
                       "Divide the logits by the temperature (T > 1 flattens).", temperature=2.0)
        _sampling_case(c, sample_next_token, logits, "temperature 0.5 with top_k = 3",
                       "Apply the temperature, then keep the top k.", seed=1, temperature=0.5,
                       top_k=3)
        _sampling_case(c, sample_next_token, probs.log(), "top_p = 0.4 (the most likely token "
                       "alone already reaches it)", "The set is just the most likely token "
                       "when its probability alone reaches top_p.", seed=2, top_p=0.4)
        _sampling_case(c, sample_next_token, probs.log(), "top_p = 0.9",
                       "Keep tokens in order of probability until the mass reaches top_p.",
                       seed=3, top_p=0.9)
        _sampling_case(c, sample_next_token, probs.log(), "top_p = 1.0",
                       "With top_p = 1 every token stays possible.", seed=4, top_p=1.0)
        _sampling_case(c, sample_next_token, logits, "top_k = 5 (the whole vocabulary)",
                       "top_k >= vocab keeps everything.", seed=5, top_k=5)
        _sampling_case(c, sample_next_token, logits, "top_k = 3 and top_p = 0.8",
                       "top_k first, then top_p on what is left.", seed=6, top_k=3, top_p=0.8)
        masked = torch.tensor([2.0, float("-inf"), 1.0, float("-inf"), 0.5])
        _sampling_case(c, sample_next_token, masked, "logits with -inf entries",
                       "A logit of -inf has probability 0 and must never be drawn.", seed=7,
                       top_p=0.95)
        c.ok("temperature 2, top_k with temperature, several top_p, -inf logits")
        # different rows, different distributions: filters work per row
        rows = torch.stack([probs.log(), probs.flip(0).log(), torch.tensor([0.6, 0.2, 0.1, 0.1]).log()])
        batch = rows.repeat_interleave(_N // 4, dim=0)  # (3 * N/4, 4)
        for kw, hint in (({"top_k": 2}, "top_k must pick the k highest of EACH row (topk or sort "
                          "along dim=-1)."),
                         ({"top_p": 0.7}, "top_p must be computed for EACH row: sort, cumsum "
                          "and mask along dim=-1, then put the mask back in vocabulary order.")):
            out = c.call(sample_next_token, batch, generator=torch.Generator().manual_seed(8), **kw)
            c.shape(out, (batch.size(0),), "the result for a batch of different rows")
            for r in range(3):
                part = out[r * (_N // 4):(r + 1) * (_N // 4)]
                allowed = _expected(rows[r], **kw) > 0
                c.that(bool(allowed[part.cpu()].all()), f"with {kw}, a row drew a token outside "
                       f"its own allowed set. {hint}")
        c.ok("filters each row of a batch separately")
        x = torch.randn(6, 9, generator=torch.Generator().manual_seed(9))
        a = c.call(sample_next_token, x, 0.8, 4, 0.9, torch.Generator().manual_seed(5))
        b = c.call(sample_next_token, x, 0.8, 4, 0.9, torch.Generator().manual_seed(5))
        c.that(torch.equal(a, b), "two calls with generators seeded alike gave different "
               "tokens: pass generator=generator to torch.multinomial.")
        torch.manual_seed(123)
        want = torch.rand(3)
        torch.manual_seed(123)
        c.call(sample_next_token, x, generator=torch.Generator().manual_seed(5))
        c.that(torch.equal(torch.rand(3), want), "sampling consumed the global random state: "
               "draw with the generator you are given (torch.multinomial(..., generator=...)).",
               "reproducible with a seeded generator, global RNG untouched")
        before = x.clone()
        c.call(sample_next_token, x, 0.5, 3, 0.8, torch.Generator().manual_seed(1))
        c.that(torch.equal(x, before), "sample_next_token changed the logits it was given "
               "(an in-place /= or masked_fill_): work on a copy.", "leaves its input unchanged")
        x64 = probs.log().double()
        _sampling_case(c, sample_next_token, x64, "float64 logits, top_p = 0.7",
                       "Float64 logits should work too.", seed=10, top_p=0.7)
        for dev in _devices()[1:]:
            out = c.call(sample_next_token, x.to(dev), 0.8, 4, 0.9,
                         torch.Generator(device=dev).manual_seed(0))
            c.that(out.device.type == dev.type, f"the result should stay on {dev.type}.",
                   f"runs on {dev.type}")
    c.done()


# -- beam search -----------------------------------------------------------------------------
def _brute_force(model, src, max_len, length_penalty, vocab_size,
                 count_bos: bool = False) -> tuple[list[int], float]:
    """The best of ALL sequences: ended by eos (anywhere) or cut at max_len, by the same score.

    ``count_bos`` divides by (n + 1) ** length_penalty instead: the classic off-by-one."""
    source = tuple(src[0].tolist())
    best, best_score = None, -math.inf
    for n in range(1, max_len):
        for tail in itertools.product(range(vocab_size), repeat=n):
            if EOS in tail[:-1] or (tail[-1] != EOS and n < max_len - 1):
                continue
            seq, total = (BOS,) + tail, 0.0
            for i in range(1, len(seq)):
                lg = torch.tensor(model.logits_for(source, seq[:i]), dtype=torch.float64)
                total += float(torch.log_softmax(lg, -1)[seq[i]])
            score = total / (n + count_bos) ** length_penalty
            if score > best_score:
                best, best_score = list(seq), score
    return best, best_score


def _beam(c: Check, beam_search, model, src, beam_size, max_len, length_penalty=None):
    kw = {} if length_penalty is None else {"length_penalty": length_penalty}
    got = c.call(beam_search, model, src, beam_size, max_len, BOS, EOS, **kw)
    c.that(isinstance(got, torch.Tensor), f"should return a tensor, got {type(got).__name__}.")
    c.that(got.dim() == 1, f"should return ONE sequence of shape (L,), got shape "
           f"{tuple(got.shape)}: drop the batch dimension of the winner.")
    c.that(got.dtype == torch.long, f"should return token ids (torch.long), got {got.dtype}.")
    c.that(got.numel() >= 1 and int(got[0]) == BOS, "the sequence should start with bos_id.")
    c.that(got.numel() <= max_len, f"returned {got.numel()} tokens, more than max_len = "
           f"{max_len} (bos included).")
    seq = got.cpu().tolist()
    c.that(EOS not in seq[1:-1], f"the returned sequence {seq} goes on after eos_id: a "
           "hypothesis that ends in eos_id is finished. It leaves the beam, is set aside among "
           "the finished hypotheses and is never extended again.")
    return seq


def _beam_vs_reference(c: Check, beam_search, model, src, beam_size, max_len,
                       length_penalty=1.0, what=""):
    got = _beam(c, beam_search, model, src, beam_size, max_len, length_penalty)
    want = ref.beam_search(model, src, beam_size, max_len, BOS, EOS, length_penalty).tolist()
    if got == want:
        return
    c.fail(f"{what}: expected a different sequence (of length {len(want)}, you returned "
           f"{len(got)}). Each step keeps the beam_size best extensions of the LIVE hypotheses "
           "by total log-probability; an extension ending in eos_id is finished and leaves the "
           "beam (it is not extended again and does not take a place in the next step's beam); "
           "the final choice divides each total by n ** length_penalty.")


def _length_normalisation_hint(c: Check, model, src, got, want, lp) -> None:
    """Fail with a named cause when a wide beam's wrong winner is the raw or bos-counted best."""
    if got == want:
        return
    raw = got == _brute_force(model, src, 5, 0.0, 4)[0]
    with_bos = lp != 0 and got == _brute_force(model, src, 5, lp, 4, count_bos=True)[0]
    if not (raw or with_bos):
        return
    if raw and with_bos:
        looks = ("the best by RAW total log-probability (not length-normalised), or the best "
                 "normalised with n counting <bos> too: both give this sequence here")
    elif raw:
        looks = "the best by RAW total log-probability: it was not length-normalised"
    else:
        looks = "the best normalised with n counting <bos> too (n one too large)"
    c.fail(f"with length_penalty = {lp} and a beam wide enough to keep every hypothesis, your "
           f"result {got} looks like {looks}. The winner asked for is the best by total "
           "log-prob / n ** length_penalty, with n = the tokens after <bos> (<eos> included).")


def check_beam_search(beam_search, hidden: bool = False) -> None:
    c = Check("beam_search", _REFERENCE, hidden)
    src = torch.tensor([[3, 4, 5]])
    # greedy's myopia: "3" looks best now, but every continuation after it is uncertain
    table = {(BOS,): [-9, -9, -9, 1.0, 0.8],
             (BOS, 3): [-9, -9, 0.1, 0.0, 0.05], (BOS, 4): [-9, -9, -9, 3.0, -9],
             (BOS, 3, 3): [-9, -9, 5, -9, -9], (BOS, 3, 4): [-9, -9, 5, -9, -9],
             (BOS, 4, 3): [-9, -9, 5, -9, -9]}
    model = LookupModel(5, table=table, eos_id=EOS)
    greedy = ref.greedy_decode(model, src, 6, BOS, EOS)[0].tolist()
    got = _beam(c, beam_search, model, src, 1, 6)
    c.that(got == greedy, "with beam_size = 1, beam search should give exactly greedy "
           "decoding's sequence: keep the single best extension each step.",
           "beam_size = 1 equals greedy decoding")
    got = _beam(c, beam_search, model, src, 2, 6)
    c.that(got == [BOS, 4, 3, EOS], "with beam_size = 2 on a model where the first token that "
           "looks best leads nowhere certain, the search should find the sequence with the "
           "higher total log-probability: rank extensions by the SUM of log-probs so far, "
           "not by the last token's.", "beam_size = 2 beats greedy's myopia")
    for seed, lp in ((79, 1.0), (3, 1.0)):  # 79: raw, bos-counted, right: 3 winners
        model = LookupModel(4, seed=seed, eos_id=EOS, eos_bias=0.5, scale=2.0)
        want, _ = _brute_force(model, src, 5, lp, 4)
        got = _beam(c, beam_search, model, src, 4 ** 4, 5, lp)
        _length_normalisation_hint(c, model, src, got, want, lp)
        c.that(got == want, "with a beam wide enough to keep every hypothesis, beam search "
               "should return the best of all sequences (ended by eos_id or cut at max_len) by "
               "total log-prob / n ** length_penalty: check the scores and the stopping rule.")
    c.ok("a beam wide enough to keep everything finds the brute-force optimum "
         "(length-normalised)")
    # "<bos> <eos>" is the best first step; once it is finished, both places of the beam must
    # go to live hypotheses, which find "<bos> 3 5 <eos>" (a better per-token score)
    lg, no = math.log, -30.0
    table = {(BOS,): [no, no, lg(0.5), lg(0.3), lg(0.2), no],
             (BOS, 3): [no, no, no, no, lg(0.55), lg(0.45)],
             (BOS, 3, 4): [no, no, lg(0.6), lg(0.4), no, no],
             (BOS, 3, 5): [no, no, 0.0, no, no, no]}
    model = LookupModel(6, table=table, eos_id=EOS)
    got = _beam(c, beam_search, model, src, 2, 6)
    want = [BOS, 3, 5, EOS]
    if got == [BOS, EOS]:
        c.fail(f"beam_size = 2 on a model whose best first step is <bos> <eos>: expected {want}, "
               f"you returned {got}. A hypothesis ending in eos_id is finished: it leaves the "
               "beam (set aside with the finished ones, never extended, taking no place in the "
               "next step's beam), and all beam_size places go to extensions of the live "
               "hypotheses. Does a finished hypothesis keep its place in your beam?")
    c.that(got == want, f"beam_size = 2 on a model whose best first step is <bos> <eos>: "
           f"expected {want}, you returned {got}. Each step keeps the beam_size best "
           "extensions of ALL the live hypotheses together, by total log-probability; those "
           "ending in eos_id leave the beam; the final choice is among finished and live, by "
           "total / n ** length_penalty.", "finished hypotheses leave the beam and the beam "
           "refills from the live ones")
    for seed, bias, k, max_len in ((6, 2.5, 2, 7), (102, 1.0, 3, 8)):
        model = LookupModel(6, seed=seed, eos_id=EOS, eos_bias=bias)
        _beam_vs_reference(c, beam_search, model, src, k, max_len,
                           what=f"beam_size {k}, model {seed}")
    c.ok("matches the reference on two random models (beam sizes 2 and 3)")
    if hidden:
        for seed in range(8):
            model = LookupModel(6, seed=100 + seed, eos_id=EOS, eos_bias=1.0)
            _beam_vs_reference(c, beam_search, model, src, 1 + seed % 4, 8,
                               what=f"beam_size {1 + seed % 4}, random model {seed}")
        c.ok("matches on eight random models, beam sizes 1-4")
        for seed, lp in ((11, 0.0), (12, 0.5), (13, 2.0)):
            model = LookupModel(4, seed=seed, eos_id=EOS, eos_bias=0.5, scale=2.0)
            want, _ = _brute_force(model, src, 5, lp, 4)
            got = _beam(c, beam_search, model, src, 4 ** 4, 5, lp)
            _length_normalisation_hint(c, model, src, got, want, lp)
            c.that(got == want, f"with length_penalty = {lp} and a beam wide enough to keep "
                   "everything, the best by total log-prob / n ** length_penalty should win.")
        c.ok("length_penalty 0, 0.5 and 2 against brute force")
        model = LookupModel(5, seed=21, eos_id=EOS, eos_bias=-20.0)  # never ends
        got = _beam(c, beam_search, model, src, 3, 6)
        c.that(len(got) == 6, "when no hypothesis ever ends, the search should stop at length "
               "max_len and return the best live hypothesis.", "stops at max_len")
        for seed in (31, 32, 33):
            model = LookupModel(7, seed=seed, eos_id=EOS, eos_bias=2.5)
            _beam_vs_reference(c, beam_search, model, src, 3, 9, 1.0,
                               what=f"beam_size 3, eos likely (model {seed})")
        c.ok("many finished hypotheses: the beam refills with live ones")
        for dev in _devices()[1:]:
            model = LookupModel(6, seed=4, eos_id=EOS, eos_bias=1.5, device=dev)
            got = c.call(beam_search, model, src.to(dev), 2, 7, BOS, EOS)
            want = ref.beam_search(model, src, 2, 7, BOS, EOS)
            c.that(torch.equal(got.cpu(), want), f"wrong result on {dev.type}.",
                   f"runs on {dev.type}")
    c.done()
