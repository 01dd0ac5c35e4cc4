"""Hidden checks for 08_generation: greedy_decode, sample_next_token, beam_search.

They add, to the visible checks of ``course_utils.checks.generation``: random LookupModels
(which, like a two-layer decoder, give other logits when the causal mask is missing), real
encoder-decoders (the reference Transformer with three layers and random weights, in float64 so
that no argmax hangs on rounding, and the trained dates model), padded batches, a batch of one
and max_len = 1; for beam search, many random models, length penalties against a brute-force
search, devices. ``check_sample_next_token`` is in ``course_grading.checks.sampling`` and is named
here too.
"""

from __future__ import annotations

import functools
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
from course_utils.checks.kit import Check, generator
from course_utils.checks.sampling import SAMPLING_CASES, sampling_logits
from course_utils.toy_task import LookupModel, pad_batch, source_tokenizer, to_words

from ._device import second_devices
from .sampling import _FORBIDDEN, check_sample_next_token, distribution

ASSIGNMENT = "08_generation"


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
    vs_reference = functools.partial(_beam_vs_reference, c, beam_search)
    for seed in range(8):
        model = LookupModel(6, seed=100 + seed, eos_id=EOS, eos_bias=1.0, layers=LAYERS)
        vs_reference(model, src, 1 + seed % 4, 8, what=f"beam_size {1 + seed % 4}, random model {seed}")
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
        vs_reference(model, src, 3, 9, 1.0, what=f"beam_size 3, eos likely (model {seed})")
    c.ok("many finished hypotheses: the beam refills with live ones")
    for seed, source_seed in BEAM_TRANSFORMERS:
        model = deep_transformer(seed)
        one = torch.randint(3, 12, (1, 5), generator=generator(source_seed))
        vs_reference(
            model, one, 3, 8, 0.7, what=f"beam_size 3, a Transformer with 3 layers, random weights {seed}"
        )
    model, srcs = trained_model()
    one = srcs[:1, : int((srcs[0] != 0).sum())]
    vs_reference(model, one, 3, 12, what="beam_size 3, the trained dates model")
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


__all__ = ["check_greedy_decode", "check_sample_next_token", "check_beam_search"]
