"""Hidden checks for 08_generation's sample_next_token, and what every hidden check of 08 holds
back from the learner's code (the reference's decoders).

They add, to the visible checks of ``course_utils.checks.sampling``: more temperatures and
nucleus sizes, the order temperature → top-k → top-p on the renormalised distribution (computed
here from the reference), per-row filtering, the generator and the global random state, devices.
``course_grading.checks.generation`` holds the other two checks of 08 and names this one too.
"""

from __future__ import annotations

import torch

from course_grading.reference import generation as ref
from course_utils.checks.kit import Check, generator, torch_equal
from course_utils.checks.sampling import N_DRAWS, sampling_case

from ._device import second_devices

_FORBIDDEN = [
    f"course_grading.reference.generation.{name}"
    for name in ("greedy_decode", "sample_next_token", "filter_logits", "beam_search", "sample_decode")
]


def distribution(logits_row, temperature=1.0, top_k=None, top_p=None) -> torch.Tensor:
    """The renormalised distribution sample_next_token must draw from (float64)."""
    return torch.softmax(ref.filter_logits(logits_row[None].double(), temperature, top_k, top_p), -1)[0]


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
