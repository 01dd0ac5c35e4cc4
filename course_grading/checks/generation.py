"""Hidden checks for 08_generation: greedy_decode, sample_next_token, beam_search.

They add, to the visible checks of ``course_utils.checks.generation``: random LookupModels
(which, like a two-layer decoder, give other logits when the causal mask is missing), real
encoder-decoders (the reference Transformer with three layers and random weights, in float64 so
that no argmax hangs on rounding, and the trained dates model), padded batches, a batch of one
and max_len = 1; for sampling, more temperatures and nucleus sizes, the order temperature →
top-k → top-p on the renormalised distribution, per-row filtering, the generator and the global
random state; for beam search, many random models, length penalties against a brute-force
search, devices.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from course_grading.reference import generation as ref
from course_grading.reference.decoder import Transformer, make_padding_mask
from course_utils.checks.generation import (
    BEAM_SRC,
    BOS,
    EOS,
    GREEDY_CASES,
    LAYERS,
    RANDOM_BEAMS,
    WIDE,
    beam,
    beam_matches,
    greedy_case,
    greedy_ok,
    length_normalisation_hint,
    random_model,
    table_model,
    wide_model,
)
from course_utils.checks.kit import Check, generator, torch_equal
from course_utils.checks.sampling import N_DRAWS, SAMPLING_CASES, sampling_case, sampling_logits
from course_utils.toy_task import LookupModel, pad_batch, source_tokenizer, to_words

from ._device import second_devices

ASSIGNMENT = "08_generation"
_FORBIDDEN = [
    f"course_grading.reference.generation.{name}"
    for name in ("greedy_decode", "sample_next_token", "filter_logits", "beam_search", "sample_decode")
]


class WithoutCausalMask:
    """``model`` as a decoder that forgot the causal mask sees it: tgt_mask is dropped."""

    def __init__(self, model):
        self.model = model

    def encode(self, src, src_mask=None):
        return self.model.encode(src, src_mask)

    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        return self.model.decode(tgt, memory, None, memory_mask)


def _lists(t: torch.Tensor) -> list:
    return t.cpu().tolist()


def greedy_expected(model, src, max_len, src_mask=None) -> dict:
    """The reference's decoding of ``src``, and what it gives without src_mask and without the
    causal mask."""
    out = {
        "want": _lists(ref.greedy_decode(model, src, max_len, BOS, EOS, src_mask)),
        "uncausal": _lists(ref.greedy_decode(WithoutCausalMask(model), src, max_len, BOS, EOS, src_mask)),
    }
    if src_mask is not None:
        out["unmasked"] = _lists(ref.greedy_decode(model, src, max_len, BOS, EOS))
    return out


def brute_force(model, src, max_len, length_penalty, vocab_size, count_bos: bool = False) -> list[int]:
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
    return best


def distribution(logits_row, temperature=1.0, top_k=None, top_p=None) -> torch.Tensor:
    """The renormalised distribution sample_next_token must draw from (float64)."""
    return torch.softmax(ref.filter_logits(logits_row[None].double(), temperature, top_k, top_p), -1)[0]


def expected_outputs() -> dict[str, np.ndarray]:
    """What the visible checks compare with: decoded tokens, brute-force winners, distributions."""
    out = {}
    for name in GREEDY_CASES:
        model, src, max_len, mask = greedy_case(name)
        for key, value in greedy_expected(model, src, max_len, mask).items():
            out[f"greedy/{name}" + ("" if key == "want" else f"/{key}")] = np.array(value)
    for name in SAMPLING_CASES:
        logits, kwargs = sampling_logits(name)
        out[f"sample/{name}"] = distribution(logits, **kwargs).numpy()
    src = torch.tensor(BEAM_SRC)
    model = table_model("myopia")
    out["beam/myopia/greedy"] = np.array(_lists(ref.greedy_decode(model, src, 6, BOS, EOS)[0]))
    out["beam/myopia/greedy/uncausal"] = np.array(
        _lists(ref.greedy_decode(WithoutCausalMask(model), src, 6, BOS, EOS)[0])
    )
    out["beam/myopia/uncausal"] = np.array(
        _lists(ref.beam_search(WithoutCausalMask(model), src, 2, 6, BOS, EOS))
    )
    for seed, lp in WIDE:
        model = wide_model(seed)
        out[f"beam/wide{seed}"] = np.array(brute_force(model, src, 5, lp, 4))
        out[f"beam/wide{seed}/raw"] = np.array(brute_force(model, src, 5, 0.0, 4))
        out[f"beam/wide{seed}/with_bos"] = np.array(brute_force(model, src, 5, lp, 4, True))
    for seed, bias, k, max_len in RANDOM_BEAMS:
        model = random_model(seed, bias)
        out[f"beam/random{seed}"] = np.array(_lists(ref.beam_search(model, src, k, max_len, BOS, EOS)))
        out[f"beam/random{seed}/uncausal"] = np.array(
            _lists(ref.beam_search(WithoutCausalMask(model), src, k, max_len, BOS, EOS))
        )
    return out


# -- real encoder-decoders -----------------------------------------------------------------------
GREEDY_TRANSFORMERS = [(1, 41), (2, 42)]  # (weights seed, sources seed)
BEAM_TRANSFORMERS = [(3, 51), (2, 54)]  # cases where the causal mask changes the winner


def deep_transformer(seed: int, layers: int = 3) -> Transformer:
    """The reference encoder-decoder with ``layers`` layers and random weights, float64."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Transformer(12, 9, d_model=16, num_heads=4, d_ff=32, num_layers=layers)
    return model.double().eval()


def trained_model():
    """The trained dates model in the reference Transformer, float64, and a padded batch of
    dates in words."""
    import datetime
    import random

    from course_utils.training import load_toy_model

    model, _, _ = load_toy_model(Transformer, device="cpu")
    words = random.Random(8)
    dates = [datetime.date(1931, 5, 17), datetime.date(2004, 11, 3), datetime.date(1968, 2, 29)]
    src = pad_batch([source_tokenizer().encode(to_words(d, words)) for d in dates])
    return model.double(), src


# -- greedy --------------------------------------------------------------------------------------
def _greedy_vs_reference(c: Check, greedy_decode, model, src, max_len, mask=None, what=""):
    e = greedy_expected(model, src, max_len, mask)
    return greedy_ok(
        c,
        greedy_decode,
        model,
        src,
        max_len,
        e["want"],
        mask,
        what,
        unmasked=e.get("unmasked"),
        uncausal=e["uncausal"],
    )


def check_greedy_decode(greedy_decode) -> None:
    c = Check("greedy_decode", _FORBIDDEN, hidden=True)
    for seed in range(4):
        model = LookupModel(7, seed=10 + seed, eos_id=EOS, eos_bias=1.0, layers=LAYERS)
        src = torch.randint(3, 7, (5, 4), generator=generator(seed))
        _greedy_vs_reference(c, greedy_decode, model, src, 9, what=f" (random model {seed})")
    c.ok("matches on four random models with a batch of 5")
    for seed in range(2):
        src = torch.randint(3, 7, (4, 6), generator=generator(20 + seed))
        lengths = torch.tensor([6, 3, 5, 2])
        src[torch.arange(6)[None, :] >= lengths[:, None]] = 0  # pad the ends of the rows
        model = LookupModel(7, seed=30 + seed, eos_id=EOS, eos_bias=1.0, layers=LAYERS)
        _greedy_vs_reference(
            c,
            greedy_decode,
            model,
            src,
            9,
            (src != 0)[:, None, None, :],
            what=f" (random model {seed}, a batch of 4 padded sources)",
        )
    c.ok("padded batches of random models")
    model = LookupModel(6, seed=4, eos_id=EOS, eos_bias=0.5, layers=LAYERS)
    _greedy_vs_reference(c, greedy_decode, model, torch.tensor([[3, 4, 5]]), 7, what=" (batch of 1)")
    _greedy_vs_reference(c, greedy_decode, model, torch.tensor([[3, 4, 5]]), 1, what=" (max_len = 1)")
    c.ok("a batch of one, and max_len = 1 (just bos)")
    for seed, source_seed in GREEDY_TRANSFORMERS:
        model = deep_transformer(seed)
        src = torch.randint(3, 12, (4, 6), generator=generator(source_seed))
        src[1:, 4:] = 0
        _greedy_vs_reference(
            c,
            greedy_decode,
            model,
            src,
            9,
            make_padding_mask(src, 0),
            what=f" (a Transformer with 3 layers, random weights {seed})",
        )
    model, src = trained_model()
    _greedy_vs_reference(
        c,
        greedy_decode,
        model,
        src,
        12,
        make_padding_mask(src, 0),
        what=" (the trained dates model, three dates in words)",
    )
    c.ok("real encoder-decoders: three layers with random weights, and the trained dates model")
    # on a second device, with a real encoder-decoder there: ys, the causal mask and anything
    # else made inside without device= stay on the CPU and fail there, as on a GPU
    src = torch.randint(3, 12, (3, 6), generator=generator(43))
    src[1:, 4:] = 0
    mask = make_padding_mask(src, 0)
    for dev in second_devices():
        model = deep_transformer(1, layers=2)
        want = _lists(ref.greedy_decode(model, src, 8, BOS, EOS, mask))
        got = dev.call(
            c, greedy_decode, dev.module(model), *dev.tensor((src,)), 8, BOS, EOS, dev.tensor(mask)
        )
        c.that(
            isinstance(got, torch.Tensor) and _lists(got) == want,
            f"wrong tokens on {dev} (the same model and source give the right ones on the CPU).",
            f"runs on {dev}",
        )
    c.done()


# -- sampling ------------------------------------------------------------------------------------
def _case(c, sample_next_token, logits, what, hint, seed=0, **kwargs):
    sampling_case(
        c, sample_next_token, logits, distribution(logits, **kwargs), what, hint, seed=seed, **kwargs
    )


def check_sample_next_token(sample_next_token) -> None:
    c = Check("sample_next_token", _FORBIDDEN, hidden=True)
    logits = torch.tensor([1.0, 3.0, -1.0, 2.0, 0.0])
    probs = torch.tensor([0.15, 0.5, 0.05, 0.3])
    _case(
        c,
        sample_next_token,
        logits,
        "temperature 2",
        "Divide the logits by the temperature (T > 1 flattens).",
        temperature=2.0,
    )
    _case(
        c,
        sample_next_token,
        logits,
        "temperature 0.5 with top_k = 3",
        "Apply the temperature, then keep the top k.",
        seed=1,
        temperature=0.5,
        top_k=3,
    )
    _case(
        c,
        sample_next_token,
        probs.log(),
        "top_p = 0.4 (the most likely token alone already reaches it)",
        "The set is just the most likely token when its probability alone reaches top_p.",
        seed=2,
        top_p=0.4,
    )
    _case(
        c,
        sample_next_token,
        probs.log(),
        "top_p = 0.9",
        "Keep tokens in order of probability until the mass reaches top_p.",
        seed=3,
        top_p=0.9,
    )
    _case(
        c,
        sample_next_token,
        probs.log(),
        "top_p = 1.0",
        "With top_p = 1 every token stays possible.",
        seed=4,
        top_p=1.0,
    )
    _case(
        c,
        sample_next_token,
        logits,
        "top_k = 5 (the whole vocabulary)",
        "top_k >= vocab keeps everything.",
        seed=5,
        top_k=5,
    )
    _case(
        c,
        sample_next_token,
        logits,
        "top_k = 3 and top_p = 0.8",
        "top_k first, then top_p on what is left.",
        seed=6,
        top_k=3,
        top_p=0.8,
    )
    masked = torch.tensor([2.0, float("-inf"), 1.0, float("-inf"), 0.5])
    _case(
        c,
        sample_next_token,
        masked,
        "logits with -inf entries",
        "A logit of -inf has probability 0 and must never be drawn.",
        seed=7,
        top_p=0.95,
    )
    c.ok("temperature 2, top_k with temperature, several top_p, -inf logits")
    # the order: temperature, then top_k, then top_p on the renormalised distribution
    _case(
        c,
        sample_next_token,
        torch.tensor([0.5, 0.3, 0.15, 0.05]).log(),
        "temperature 0.5 then top_p = 0.6 over probabilities (0.5, 0.3, 0.15, 0.05)",
        "Divide by the "
        "temperature FIRST and choose the nucleus on the sharpened distribution (0.5 becomes "
        "0.69, which alone reaches 0.6); the nucleus of the unscaled distribution holds two "
        "tokens.",
        seed=11,
        temperature=0.5,
        top_p=0.6,
    )
    _case(
        c,
        sample_next_token,
        torch.tensor([0.35, 0.25, 0.2, 0.1, 0.1]).log(),
        "top_k = 3 then top_p = 0.7 over probabilities (0.35, 0.25, 0.2, 0.1, 0.1)",
        "top_p acts on the "
        "distribution RENORMALISED over the top_k tokens (0.44, 0.31, 0.25: two tokens reach "
        "0.7), after top_k, not before it and not on the probabilities before renormalising.",
        seed=12,
        top_k=3,
        top_p=0.7,
    )
    c.ok("temperature, then top_k, then top_p on the renormalised distribution")
    # different rows, different distributions: filters work per row
    rows = torch.stack([probs.log(), probs.flip(0).log(), torch.tensor([0.6, 0.2, 0.1, 0.1]).log()])
    batch = rows.repeat_interleave(N_DRAWS // 4, dim=0)  # (3 * N/4, 4)
    for kw, hint in (
        ({"top_k": 2}, "top_k must pick the k highest of EACH row (topk or sort along dim=-1)."),
        (
            {"top_p": 0.7},
            "top_p must be computed for EACH row: sort, cumsum "
            "and mask along dim=-1, then put the mask back in vocabulary order.",
        ),
    ):
        out = c.call(sample_next_token, batch, generator=generator(8), **kw)
        c.shape(out, (batch.size(0),), "the result for a batch of different rows")
        for r in range(3):
            part = out[r * (N_DRAWS // 4) : (r + 1) * (N_DRAWS // 4)]
            allowed = distribution(rows[r], **kw) > 0
            c.that(
                bool(allowed[part.cpu()].all()),
                f"with {kw}, a row drew a token outside its own allowed set. {hint}",
            )
    c.ok("filters each row of a batch separately")
    x = torch.randn(6, 9, generator=generator(9))
    a = c.call(sample_next_token, x, 0.8, 4, 0.9, generator(5))
    b = c.call(sample_next_token, x, 0.8, 4, 0.9, generator(5))
    c.that(
        torch_equal(a, b),
        "two calls with generators seeded alike gave different "
        "tokens: pass generator=generator to torch.multinomial.",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(123)
        want = torch.rand(3)
        torch.manual_seed(123)
        c.call(sample_next_token, x, generator=generator(5))
        untouched = torch_equal(torch.rand(3), want)
    c.that(
        untouched,
        "sampling consumed the global random state: draw with the generator you "
        "are given (torch.multinomial(..., generator=...)).",
        "reproducible with a seeded generator, global RNG untouched",
    )
    before = x.clone()
    c.call(sample_next_token, x, 0.5, 3, 0.8, generator(1))
    c.that(
        torch_equal(x, before),
        "sample_next_token changed the logits it was given (an in-place /= or masked_fill_): work on a copy.",
        "leaves its input unchanged",
    )
    _case(
        c,
        sample_next_token,
        probs.log().double(),
        "float64 logits, top_p = 0.7",
        "Float64 logits should work too.",
        seed=10,
        top_p=0.7,
    )
    # on a second device (drawing from the global generator: a CPU generator cannot draw
    # there), temperature, top-k and top-p together: a token among each row's top 4
    top4 = x.topk(4, dim=-1).indices
    for dev in second_devices():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            got = dev.call(c, sample_next_token, dev.tensor(x), 0.8, 4, 0.9)
        c.that(
            isinstance(got, torch.Tensor)
            and tuple(got.shape) == tuple(x.shape[:1])
            and bool((top4 == got[:, None]).any(-1).all()),
            f"on {dev} with top_k=4 the "
            f"tokens should be ({x.shape[0]},) ids among each row's 4 highest logits.",
            f"runs on {dev}",
        )
    c.done()


# -- beam search ---------------------------------------------------------------------------------
def _beam_vs_reference(c: Check, beam_search, model, src, beam_size, max_len, length_penalty=1.0, what=""):
    got = beam(c, beam_search, model, src, beam_size, max_len, length_penalty)
    want = _lists(ref.beam_search(model, src, beam_size, max_len, BOS, EOS, length_penalty))
    uncausal = _lists(
        ref.beam_search(WithoutCausalMask(model), src, beam_size, max_len, BOS, EOS, length_penalty)
    )
    beam_matches(c, got, want, what, uncausal)


def check_beam_search(beam_search) -> None:
    c = Check("beam_search", _FORBIDDEN, hidden=True)
    src = torch.tensor(BEAM_SRC)
    for seed in range(8):
        model = LookupModel(6, seed=100 + seed, eos_id=EOS, eos_bias=1.0, layers=LAYERS)
        _beam_vs_reference(
            c, beam_search, model, src, 1 + seed % 4, 8, what=f"beam_size {1 + seed % 4}, random model {seed}"
        )
    c.ok("matches on eight random models, beam sizes 1-4")
    for seed, lp in ((11, 0.0), (12, 0.5), (13, 2.0)):
        model = wide_model(seed)
        want = brute_force(model, src, 5, lp, 4)
        got = beam(c, beam_search, model, src, 4**4, 5, lp)
        length_normalisation_hint(
            c, got, want, brute_force(model, src, 5, 0.0, 4), brute_force(model, src, 5, lp, 4, True), lp
        )
        c.that(
            got == want,
            f"with length_penalty = {lp} and a beam wide enough to keep "
            "everything, the best by total log-prob / n ** length_penalty should win.",
        )
    c.ok("length_penalty 0, 0.5 and 2 against brute force")
    model = LookupModel(5, seed=21, eos_id=EOS, eos_bias=-20.0, layers=LAYERS)  # never ends
    got = beam(c, beam_search, model, src, 3, 6)
    c.that(
        len(got) == 6,
        "when no hypothesis ever ends, the search should stop at length "
        "max_len and return the best live hypothesis.",
        "stops at max_len",
    )
    for seed in (31, 32, 33):
        model = LookupModel(7, seed=seed, eos_id=EOS, eos_bias=2.5, layers=LAYERS)
        _beam_vs_reference(
            c, beam_search, model, src, 3, 9, 1.0, what=f"beam_size 3, eos likely (model {seed})"
        )
    c.ok("many finished hypotheses: the beam refills with live ones")
    for seed, source_seed in BEAM_TRANSFORMERS:
        model = deep_transformer(seed)
        one = torch.randint(3, 12, (1, 5), generator=generator(source_seed))
        _beam_vs_reference(
            c,
            beam_search,
            model,
            one,
            3,
            8,
            0.7,
            what=f"beam_size 3, a Transformer with 3 layers, random weights {seed}",
        )
    model, srcs = trained_model()
    one = srcs[:1, : int((srcs[0] != 0).sum())]
    _beam_vs_reference(c, beam_search, model, one, 3, 12, what="beam_size 3, the trained dates model")
    c.ok("real encoder-decoders: three layers with random weights, and the trained dates model")
    # on a second device, with a real encoder-decoder there (as greedy_decode's)
    one = torch.randint(3, 12, (1, 5), generator=generator(55))
    for dev in second_devices():
        model = deep_transformer(3, layers=2)
        want = _lists(ref.beam_search(model, one, 3, 7, BOS, EOS, 0.7))
        got = dev.call(c, beam_search, dev.module(model), dev.tensor(one), 3, 7, BOS, EOS, 0.7)
        c.that(
            isinstance(got, torch.Tensor) and _lists(got) == want,
            f"wrong result on {dev} (the same model and source give the right one on the CPU).",
            f"runs on {dev}",
        )
    c.done()
