"""Visible checks for 09_gpt's ``generate``, on :class:`PrefixLM`: a fake model with the GPT
contract whose logits are a fixed function of the whole prefix, whose "cache" carries the tokens
it has seen, and which writes down every call (how many new tokens, how many cached), so that a
wrong use of the cache changes its logits and the record names the mistake. The expected tokens
are stored (``course_utils/data/expected``). ``course_utils.checks.gpt`` holds the other checks
of 09_gpt and names ``check_generate`` too.
"""

from __future__ import annotations

import torch

from ..language_model import PrefixLM
from ._core import Check, generator, stored, torch_equal

ASSIGNMENT = "09_gpt"


GENERATE_CASES = {
    # name: (PrefixLM seed, vocab, prompt rows, max_new_tokens, keyword arguments)
    "greedy": (1, 9, [[3, 1, 4], [1, 5, 9]], 6, {"temperature": 0}),
    "sampled": (2, 9, [[2, 6, 5, 3, 5], [8, 9, 7, 9, 3]], 7, {"temperature": 0.8, "top_k": 5}),
    "one_token_prompt": (3, 7, [[4], [2], [6]], 5, {"temperature": 0}),
}


def generate_case(name: str):
    seed, vocab, rows, n, kwargs = GENERATE_CASES[name]
    return PrefixLM(vocab, seed), torch.tensor(rows), n, dict(kwargs)


def cache_use(c: Check, calls, prompt_len: int, n: int, use_cache: bool, what: str) -> None:
    """Name the mistake from the record of calls (new tokens, cached tokens)."""
    if n == 0:
        return
    most = n + 1 if use_cache else n  # with the cache, a last call that fills it is allowed
    c.that(
        n <= len(calls) <= most,
        f"{what}: the model was called {len(calls)} times for "
        f"max_new_tokens = {n}; call it once per new token.",
    )
    if not use_cache:
        for i, (t, past) in enumerate(calls):
            c.that(
                past == 0,
                f"{what}: with use_cache=False no past is passed: run the whole "
                "sequence (model(ids)) at every step.",
            )
            c.that(
                t == prompt_len + i,
                f"{what}: with use_cache=False step {i} should run the "
                f"whole sequence so far ({prompt_len + i} tokens), ran {t}.",
            )
        return
    t, past = calls[0]
    c.that(
        past == 0 and t == prompt_len,
        f"{what}: the first step should run the whole prompt "
        f"({prompt_len} tokens, no past) to fill the cache; it ran {t} token(s) with "
        f"{past} cached.",
    )
    for i, (t, past) in enumerate(calls[1:], start=1):
        if t > 1:
            c.fail(
                f"{what}: step {i} ran {t} tokens; with the cache each step after the first "
                "feeds only the newest token (ids[:, -1:]) and the past."
            )
        if past == 0:
            c.fail(
                f"{what}: step {i} fed one token without a past: pass the present returned "
                "by the step before as past."
            )
        if past != prompt_len + i - 1:
            c.fail(
                f"{what}: at step {i} the cache held {past} tokens, expected "
                f"{prompt_len + i - 1}: use the present returned by the LAST call as the next "
                "past (it is the cache extended by the token just fed)."
            )


def sampling_mistake(c: Check, generate, model, ids, n, rows, want, what: str, kwargs) -> None:
    """Name the likely cause of wrong sampled tokens: a batch that shares one draw, the argmax
    instead of a draw, or draws that ignore the generator."""
    start = ids.size(1)  # where the new tokens begin
    if (
        len(rows) > 1
        and all(r[start:] == rows[0][start:] for r in rows)
        and any(w[start:] != want[0][start:] for w in want)
    ):
        c.fail(
            f"{what}: every row got the same new tokens. sample_next_token returns one "
            "token per row, shape (b,): each row gets its own token, appended as a column."
        )
    greedy = c.call(generate, model, ids, n, **{**kwargs, "temperature": 0, "generator": None})
    if greedy.cpu().tolist() == rows:
        c.fail(
            f"{what}: at temperature {kwargs.get('temperature')} your tokens are the argmax "
            "ones: only temperature == 0 takes the argmax; any other temperature draws with "
            "sample_next_token, given the temperature, top_k, top_p and the generator."
        )
    hotter = c.call(
        generate,
        model,
        ids,
        n,
        **{**kwargs, "temperature": 1.0, "generator": generator(kwargs["generator"].initial_seed())},
    )
    if hotter.cpu().tolist() == rows:
        c.fail(
            f"{what}: at temperature {kwargs.get('temperature')} and at temperature 1 your "
            "tokens are the same: the temperature never reaches sample_next_token."
        )
    seed = kwargs["generator"].initial_seed()
    again = c.call(generate, model, ids, n, **{**kwargs, "generator": generator(seed)})
    if again.cpu().tolist() != rows:
        c.fail(
            f"{what}: two calls with generators seeded alike gave different tokens: pass "
            "generator=generator on to sample_next_token."
        )


@torch.no_grad()
def first_position(model, ids, n: int) -> list:
    """The greedy tokens of a loop that reads the first position's logits of each cached call."""
    logits, past = model(ids)
    for _ in range(n):
        ids = torch.cat([ids, logits[:, 0].argmax(-1, keepdim=True)], 1)
        logits, past = model(ids[:, -1:], past)
    return ids.tolist()


def generated(c: Check, generate, model, ids, n, want, what: str, **kwargs):
    model.calls.clear()
    before = ids.clone()
    got = c.call_on(what, generate, model, ids, n, **kwargs)
    c.that(isinstance(got, torch.Tensor), f"{what}: should return a tensor, got {type(got).__name__}.")
    c.that(
        torch_equal(ids, before),
        f"{what}: generate changed the ids it was given; build a new tensor (torch.cat) instead.",
    )
    c.shape(
        got,
        (ids.size(0), ids.size(1) + n),
        f"{what}: the result",
        "It is the prompt followed by max_new_tokens new tokens: (b, t + max_new_tokens).",
    )
    c.that(got.dtype == torch.long, f"{what}: should return token ids (torch.long), got {got.dtype}.")
    c.that(
        torch_equal(got[:, : ids.size(1)].cpu(), ids.cpu()),
        f"{what}: the result should start with the prompt itself.",
    )
    cache_use(c, list(model.calls), ids.size(1), n, kwargs.get("use_cache", True), what)
    rows = got.cpu().tolist()
    if rows != want and kwargs.get("temperature", 1.0) != 0 and kwargs.get("generator") is not None:
        sampling_mistake(c, generate, model, ids, n, rows, want, what, kwargs)
    if rows != want and kwargs.get("temperature") == 0 and rows == first_position(model, ids, n):
        c.fail(
            f"{what}: your tokens are those predicted by the FIRST position's logits of each "
            "call. The logits of position i predict the token after position i: the next "
            "token comes from the last position's."
        )
    if rows != want:
        wrong = next(j for j in range(len(rows[0])) if any(r[j] != w[j] for r, w in zip(rows, want)))
        how = (
            "the argmax of the LAST position's logits"
            if kwargs.get("temperature") == 0
            else "a draw of sample_next_token from the LAST position's logits"
        )
        c.fail(
            f"{what}: wrong token in column {wrong}. Each step appends {how}"
            + (
                "; the temperature, top_k and top_p go to sample_next_token as they are."
                if kwargs.get("temperature") != 0
                else "."
            )
        )
    return got


def check_generate(generate) -> None:
    c = Check("generate")
    for name, passed in (
        ("greedy", "temperature 0: the argmax, cached and uncached"),
        (
            "sampled",
            "sampling with sample_next_token and the generator, cached and uncached give the same tokens",
        ),
        ("one_token_prompt", "a prompt of one token, a batch of 3"),
    ):
        model, ids, n, kwargs = generate_case(name)
        want = stored(ASSIGNMENT, f"generate/{name}").tolist()
        for use_cache in (True, False):
            extra = {"generator": generator(7)} if kwargs.get("temperature") != 0 else {}
            generated(
                c,
                generate,
                model,
                ids,
                n,
                want,
                f"{name.replace('_', ' ')}, use_cache={use_cache}",
                use_cache=use_cache,
                **kwargs,
                **extra,
            )
        c.ok(passed)
    model, ids, _, kwargs = generate_case("greedy")
    generated(c, generate, model, ids, 0, ids.tolist(), "max_new_tokens = 0", **kwargs)
    c.ok("the first step runs the whole prompt, then one token and the cache per step")
    c.done()
