"""Visible checks for 08_generation's sample_next_token, and where 08's stored outputs are read.

Sampling is checked by statistics: the empirical frequencies of many draws from a seeded
generator against the expected distribution, stored with the package
(``course_utils/data/expected``): the renormalised distributions a sampler must draw from, and
exactly which tokens can ever be drawn. ``check_greedy_decode`` and ``check_beam_search`` are in
``course_utils.checks.generation``, which names this check too.
"""

from __future__ import annotations

import math

import torch

from ._core import Check, generator, stored, torch_equal

ASSIGNMENT = "08_generation"


def expected(name: str) -> list:
    """A stored expected output as (nested) Python lists."""
    return stored(ASSIGNMENT, name).tolist()


# -- sampling --------------------------------------------------------------------------------
def draw(c: Check, sample_next_token, logits_row, n, seed=0, on=None, **kwargs):
    """n samples from one row of logits, drawn in one call on a (n, V) batch; ``on`` names the
    input in the message when the learner's code raises."""
    logits = logits_row.expand(n, -1).clone()
    args = (sample_next_token, logits)
    kwargs = dict(generator=generator(seed), **kwargs)
    out = c.call_on(on, *args, **kwargs) if on else c.call(*args, **kwargs)
    c.that(isinstance(out, torch.Tensor), f"should return a tensor, got {type(out).__name__}.")
    c.shape(
        out,
        (n,),
        f"the result for logits of shape ({n}, {logits.size(1)})",
        "Return one token id per row: squeeze the last dim of torch.multinomial(probs, 1).",
    )
    c.that(out.dtype == torch.long, f"should return token ids (torch.long), got {out.dtype}.")
    return out


def _freq(samples: torch.Tensor, V: int) -> torch.Tensor:
    return torch.bincount(samples.cpu(), minlength=V).double() / samples.numel()


N_DRAWS = 40_000  # draws per distribution: the standard error of a frequency is at most 0.0025


def sampling_case(
    c: Check, sample_next_token, logits_row, p, what: str, hint: str, seed=0, on=None, **kwargs
):
    """Draw N_DRAWS tokens from ``logits_row`` with ``kwargs``; ``p``: the expected distribution;
    ``on``: what to add to the message when the learner's code raises."""
    V = logits_row.numel()
    p = torch.as_tensor(p, dtype=torch.float64)
    out = draw(c, sample_next_token, logits_row, N_DRAWS, seed=seed, on=on, **kwargs)
    c.that(bool(((out >= 0) & (out < V)).all()), f"sampled ids outside 0..{V - 1} ({what}).")
    f = _freq(out, V)
    support = set((f > 0).nonzero().flatten().tolist())
    allowed = set((p > 0).nonzero().flatten().tolist())
    if not support <= allowed:
        if kwargs.get("top_p") is not None and set(kwargs) == {"top_p"}:
            hint += (
                " Is the decision made in sorted order mapped back to the vocabulary order (e.g. scatter)?"
            )
        c.fail(f"{what}: drew tokens that should have been filtered out. {hint}")
    if allowed - support and bool(p[list(allowed - support)].max() > 0.01):
        c.fail(f"{what}: some tokens that should stay possible were never drawn in {N_DRAWS} draws. {hint}")
    worst = float((f - p).abs().max())
    if worst > 0.013:  # > 5 standard errors
        c.fail(
            f"{what}: the frequencies of {N_DRAWS} draws are off by up to {worst:.3f} from the "
            f"expected distribution. {hint}"
        )


# the visible sampling cases: (logits, keyword arguments)
LOGITS = [1.0, 3.0, -1.0, 2.0, 0.0]
PROBS = [0.15, 0.5, 0.05, 0.3]  # sorted: 0.5, 0.3 | 0.15, 0.05
PROBS_ORDER = [0.4, 0.3, 0.1, 0.1, 0.1]  # top 2 renormalised: 0.571, 0.429
SAMPLING_CASES = {
    "t1": (LOGITS, {}),
    "t0.5": (LOGITS, {"temperature": 0.5}),
    "top_k2": (LOGITS, {"top_k": 2}),
    "top_p0.7": ([math.log(p) for p in PROBS], {"top_p": 0.7}),
    "top_k2_top_p0.5": ([math.log(p) for p in PROBS_ORDER], {"top_k": 2, "top_p": 0.5}),
    "top_k_over_vocab": (LOGITS, {"top_k": 8}),  # more than the 5 tokens: nothing is cut
}


def sampling_logits(name: str) -> tuple[torch.Tensor, dict]:
    logits, kwargs = SAMPLING_CASES[name]
    return torch.tensor(logits), dict(kwargs)


def check_sample_next_token(sample_next_token) -> None:
    c = Check("sample_next_token")
    out = c.call(sample_next_token, torch.zeros(4, 6), generator=generator(0))
    c.that(isinstance(out, torch.Tensor), f"should return a tensor, got {type(out).__name__}.")
    c.shape(
        out,
        (4,),
        "the result for logits of shape (4, 6)",
        "One token id per row: squeeze the last dim of torch.multinomial(probs, 1).",
    )
    c.that(
        out.dtype == torch.long,
        f"should return token ids (torch.long), got {out.dtype}.",
        "one token id per row",
    )
    for name, what, hint, passed in (
        (
            "t1",
            "temperature 1",
            "Sample from softmax(logits) with torch.multinomial.",
            "frequencies match softmax(logits) at temperature 1",
        ),
        (
            "t0.5",
            "temperature 0.5",
            "Divide the logits by the temperature (T < 1 sharpens), do not multiply.",
            "temperature divides the logits",
        ),
        (
            "top_k2",
            "top_k = 2",
            "Keep the k HIGHEST logits (set the others to -inf), then renormalise.",
            "top_k keeps the k most likely tokens",
        ),
        (
            "top_p0.7",
            "top_p = 0.7 over probabilities (0.15, 0.5, 0.05, 0.3)",
            "Sort by probability, keep tokens until the kept mass reaches top_p, and keep the "
            "token that crosses top_p too (0.5 alone is below 0.7, so 0.3 stays).",
            "top_p keeps the smallest set that reaches p, crossing token included",
        ),
        (
            "top_k2_top_p0.5",
            "top_k = 2 then top_p = 0.5 over probabilities (0.4, 0.3, 0.1, 0.1, 0.1)",
            "The order is temperature, then top_k, then top_p on the distribution "
            "RENORMALISED over the top_k tokens: here 0.4 / 0.7 = 0.57 already reaches 0.5, so "
            "only the first token stays. Keeping two means top_p was computed before top_k, or "
            "on probabilities not renormalised after it.",
            "top_p acts on the distribution renormalised after top_k",
        ),
    ):
        logits, kwargs = sampling_logits(name)
        sampling_case(c, sample_next_token, logits, expected(f"sample/{name}"), what, hint, **kwargs)
        c.ok(passed)
    logits, kwargs = sampling_logits("top_k_over_vocab")
    what = f"top_k = {kwargs['top_k']} with a vocabulary of {logits.numel()} tokens"
    rule = "A top_k as large as the vocabulary or larger keeps every token: there is nothing to cut."
    sampling_case(
        c,
        sample_next_token,
        logits,
        expected("sample/top_k_over_vocab"),
        what,
        rule,
        on=f"{what}. {rule} torch.topk refuses a k larger than the row",
        **kwargs,
    )
    c.ok("top_k larger than the vocabulary keeps every token")
    logits = torch.randn(16, 8, generator=generator(5))
    before = logits.clone()
    draws = [c.call(sample_next_token, logits, 0.7, 5, 0.9, generator(11)) for _ in range(2)]
    c.that(
        torch_equal(logits, before),
        "sample_next_token changed the logits it was given (an "
        "in-place operation on them): the caller's logits must stay as they were.",
        "leaves the caller's logits unchanged",
    )
    c.that(
        torch_equal(draws[0], draws[1]),
        "two calls with generators seeded alike drew "
        "different tokens: every random draw must come from the generator given.",
        "draws from the generator given: the same seed, the same tokens",
    )
    c.done()


__all__ = ["check_sample_next_token"]
