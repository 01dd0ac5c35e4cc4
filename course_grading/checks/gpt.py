"""Hidden checks for 09_gpt: GPTBlock, GPT, generate.

They add, to the visible checks of ``course_utils.checks.gpt``: other sizes (three heads, three
blocks), float64, batches of three, caches cut at other places (after one position, just before
max_len), a past the check builds itself (the contract's layout, not only the learner's own
present), the default sizes, dropout in eval and training mode, devices; for ``generate``: prompts of
different lengths (1, 4 and 8 tokens) in batches, top-p, a real GPT with random weights in
float64 and the trained Shakespeare model, cached against uncached and against the reference.
"""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import nn

from course_grading.reference import gpt as ref
from course_utils.checks.encoder import EVERYWHERE, EVERYWHERE_OPS
from course_utils.checks.gpt import (
    GPT_NAMES,
    PrefixLM,
    TorchGPT,
    gpt_parts,
    logits_case,
    present_list,
    raises_value_error,
)
from course_utils.checks.gpt import check_gpt as visible_check_gpt
from course_utils.checks.gpt import check_gpt_block as visible_check_gpt_block
from course_utils.checks.gpt_block import BLOCK_NAMES, TorchBlock, block_case, block_parts, causal, pair
from course_utils.checks.gpt_generate import GENERATE_CASES, generate_case, generated
from course_utils.checks.gpt_generate import check_generate as visible_check_generate
from course_utils.checks.kit import Check, devices, generator
from course_utils.checks.torch_parts import F64, known, load, near

from ._common import visible_first
from ._device import second_devices

ASSIGNMENT = "09_gpt"
_REF = "course_grading.reference.gpt"
_FORBIDDEN = [f"{_REF}.{name}" for name in ("GPTBlock", "GPT", "generate")] + [
    f"{_REF}.{name}.forward" for name in ("GPTBlock", "GPT")
]


def expected_outputs() -> dict[str, np.ndarray]:
    """The tokens the reference generates in the visible cases (the same cached and uncached)."""
    out = {}
    for name in GENERATE_CASES:
        model, ids, n, kwargs = generate_case(name)
        extra = {"generator": generator(7)} if kwargs.get("temperature") != 0 else {}
        out[f"generate/{name}"] = ref.generate(model, ids, n, **kwargs, **extra).numpy()
    return out


# -- GPTBlock ------------------------------------------------------------------------------------
def check_gpt_block(GPTBlock) -> None:
    visible_first(visible_check_gpt_block, GPTBlock)
    c = Check("GPTBlock", EVERYWHERE + _FORBIDDEN, hidden=True, ops=EVERYWHERE_OPS)
    d, h, d_ff = 24, 3, 40
    parts = known(lambda: block_parts(d, d_ff), seed=190)
    block = c.build(GPTBlock, d, h, d_ff).double()
    load(c, block, parts, BLOCK_NAMES)
    tb = TorchBlock(parts, h, torch.float64)
    x = torch.randn(3, 8, d, generator=generator(191), dtype=torch.float64)
    for t_past in (0, 1, 5, 7):
        K, V, _ = tb.kv(x[:, :t_past])
        past = None if t_past == 0 else (K, V)
        block_case(
            c,
            block,
            tb,
            x,
            t_past,
            past,
            f"three heads, float64, a batch of 3, {8 - t_past} new positions after a past of {t_past}",
        )
    c.ok("three heads, float64, caches cut after 0, 1, 5 and 7 positions")
    dropped = c.build(GPTBlock, d, h, d_ff, dropout=0.2).double()
    load(c, dropped, parts, BLOCK_NAMES)  # load_by_name puts it in eval mode
    block_case(
        c,
        dropped,
        tb,
        x,
        3,
        tuple(tb.kv(x[:, :3])[:2]),
        "dropout=0.2 in eval mode",
        passed="dropout=0.2 changes nothing in eval mode",
    )
    # as 04 teaches: dropout acts in training mode (on the attention weights and the residual
    # branches), and training mode without dropout is the eval computation
    past3 = tuple(tb.kv(x[:, :3])[:2])
    dropped.train()
    with torch.random.fork_rng(devices=[]):
        noisy, _ = pair(
            c, c.call_on("dropout=0.2 in training mode", dropped, x[:, 3:], past3), "GPTBlock(...)(x, past)"
        )
    dropped.eval()
    c.that(
        not near(noisy, tb.run(x, causal(8))[:, 3:], 1e-6, 1e-6),
        "GPTBlock(..., "
        "dropout=0.2) in training mode gives the output without dropout: while training, "
        "the block drops as 04's MultiHeadAttention does (the attention weights) and on its "
        "two residual branches.",
        "dropout=0.2 acts in training mode",
    )
    plain = c.build(GPTBlock, d, h, d_ff).double()
    load(c, plain, parts, BLOCK_NAMES)
    block_case(
        c,
        plain.train(),
        tb,
        x,
        3,
        past3,
        "dropout=0.0 in training mode",
        passed="training mode with dropout=0.0 computes what eval mode does",
    )
    # on a second device: a mask or an index made without device= stays on the CPU and fails
    # there, as on a GPU (float64, a past of 5, 3 new positions)
    past5 = tuple(tb.kv(x[:, :5])[:2])
    want_out, want_present = pair(c, c.call(block, x[:, 5:], past5), "GPTBlock(...)(x, past)")
    for dev in second_devices():
        on = c.build(GPTBlock, d, h, d_ff).double()
        load(c, on, parts, BLOCK_NAMES)
        out, present = pair(
            c, dev.call(c, dev.module(on), *dev.tensor((x[:, 5:], past5))), "GPTBlock(...)(x, past)"
        )
        c.close(out, want_out, f"wrong output on {dev}.", **F64)
        c.close(
            present[0],
            want_present[0],
            f"wrong keys in the present on {dev}.",
            **F64,
            passed=f"runs on {dev}",
        )
    c.done()


# -- GPT -----------------------------------------------------------------------------------------
def check_gpt(GPT) -> None:
    visible_first(visible_check_gpt, GPT)
    c = Check("GPT", EVERYWHERE + _FORBIDDEN, hidden=True, ops=EVERYWHERE_OPS)
    vocab, d, h, d_ff, layers, max_len = 17, 24, 3, 40, 3, 20
    parts = known(lambda: gpt_parts(vocab, d, d_ff, layers, max_len), seed=192)
    model = c.build(
        GPT, vocab, d_model=d, num_heads=h, d_ff=d_ff, num_layers=layers, max_len=max_len
    ).double()
    load(c, model, parts, GPT_NAMES)
    torch_gpt = TorchGPT(parts, h, torch.float64)
    ids = torch.randint(0, vocab, (3, max_len), generator=generator(193))
    want = torch_gpt.logits(torch_gpt.embed(ids))
    for cut in (1, 7, max_len - 1):
        _, past = pair(c, c.call(model, ids[:, :cut]), "GPT(...)(ids)")
        past = present_list(c, past, layers, f"ids[:, :{cut}]")
        got, present = pair(
            c, c.call_on(f"a past of {cut}", model, ids[:, cut:], past), "GPT(...)(ids, past)"
        )
        logits_case(
            c,
            got,
            want[:, cut:],
            lambda: torch_gpt.mistakes(ids, cut),
            f"three blocks, float64, {max_len - cut} new ids after a past of {cut}",
            **F64,
        )
        present_list(c, present, layers, f"after a past of {cut}")
    c.ok("three blocks, float64, caches cut after 1, 7 and 19 of max_len = 20 positions")
    # a past built by the check, in the contract's layout: (K, V) per block
    x = torch_gpt.embed(ids[:, :6])
    past = []
    for tb in torch_gpt.blocks:
        K, V, _ = tb.kv(x)
        past.append((K, V))
        x = tb.run(x, causal(x.size(1)))
    got, _ = pair(
        c,
        c.call_on("a past of 6 built as the contract says", model, ids[:, 6:9], past),
        "GPT(...)(ids, past)",
    )
    logits_case(
        c,
        got,
        want[:, 6:9],
        lambda: torch_gpt.mistakes(ids[:, :9], 6),
        "3 new ids after a past of 6 given as one (K, V) per block, each (b, num_heads, t_past, d_head)",
        passed="takes a past in the contract's layout",
    )
    raises_value_error(
        c,
        model,
        ids[:, :5],
        pair(c, c.call(model, ids[:, : max_len - 4]), "GPT(...)(ids)")[1],
        what=f"5 new ids after a past of {max_len - 4} with max_len = {max_len}",
    )
    default = c.build(GPT, 50)
    shapes = {name: tuple(p.shape) for name, p in default.named_parameters()}
    for name, shape in (
        ("tok_embedding.weight", (50, 128)),
        ("pos_embedding.weight", (256, 128)),
        ("lm_head.weight", (50, 128)),
        ("blocks.3.ffn.linear1.weight", (512, 128)),
        ("ln_f.weight", (128,)),
    ):
        c.that(
            shapes.get(name) == shape,
            f"GPT(50) with the default sizes (d_model=128, "
            f"num_heads=4, d_ff=512, num_layers=4, max_len=256) should have {name} of shape "
            f"{shape}, got {shapes.get(name)}.",
        )
    c.ok("the default sizes")
    # on a second device: positions made without device= stay on the CPU and fail there
    for dev in second_devices():
        on = c.build(
            GPT, vocab, d_model=d, num_heads=h, d_ff=d_ff, num_layers=layers, max_len=max_len
        ).double()
        load(c, on, parts, GPT_NAMES)
        on = dev.module(on)
        _, past = pair(c, dev.call(c, on, *dev.tensor((ids[:, :4],))), "GPT(...)(ids)")
        got, _ = pair(c, dev.call(c, on, *dev.tensor((ids[:, 4:6], past))), "GPT(...)(ids, past)")
        logits_case(
            c,
            got,
            want[:, 4:6],
            lambda: torch_gpt.mistakes(ids[:, :6], 4),
            f"2 new ids after a past of 4, on {dev}",
            passed=f"runs on {dev}",
            **F64,
        )
    c.done()


# -- generate ------------------------------------------------------------------------------------
def random_gpt(seed: int, vocab: int = 13) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = ref.GPT(vocab, d_model=24, num_heads=3, d_ff=40, num_layers=3, max_len=32)
    return model.double().eval()


def _vs_reference(c: Check, generate, model, ids, n, what, **kwargs):
    seed = kwargs.pop("seed", None)

    def extra():
        return {} if seed is None else {"generator": generator(seed)}

    want = ref.generate(model, ids, n, use_cache=False, **kwargs, **extra()).tolist()
    for use_cache in (True, False):
        if hasattr(model, "calls"):
            generated(
                c,
                generate,
                model,
                ids,
                n,
                want,
                f"{what}, use_cache={use_cache}",
                use_cache=use_cache,
                **kwargs,
                **extra(),
            )
            continue
        got = c.call_on(
            f"{what}, use_cache={use_cache}",
            generate,
            model,
            ids,
            n,
            use_cache=use_cache,
            **kwargs,
            **extra(),
        )
        c.that(
            isinstance(got, torch.Tensor) and tuple(got.shape) == (ids.size(0), ids.size(1) + n),
            f"{what}, use_cache={use_cache}: the result should be (b, t + max_new_tokens).",
        )
        c.that(
            got.cpu().tolist() == want,
            f"{what}, use_cache={use_cache}: the tokens differ "
            "from the reference's. With the cache: the first step runs the whole prompt, "
            "each later step ids[:, -1:] with the present of the step before as past; each "
            "step appends sample_next_token(logits[:, -1], ...) (the argmax at "
            "temperature 0).",
        )


def check_generate(generate) -> None:
    visible_first(visible_check_generate, generate)
    c = Check("generate", [f"{_REF}.generate"], hidden=True)
    vs_reference = functools.partial(_vs_reference, c, generate)
    for seed, prompt_len in ((11, 1), (12, 4), (13, 8)):
        model = PrefixLM(10, seed)
        ids = torch.randint(0, 10, (3, prompt_len), generator=generator(seed))
        what = f"a fake model, prompts of {prompt_len} token(s)"
        vs_reference(model, ids, 6, f"{what}, a batch of 3, greedy", temperature=0)
        vs_reference(
            model, ids, 6, f"{what}, temperature 1.3, top_p 0.8", temperature=1.3, top_p=0.8, seed=seed
        )
    c.ok("prompts of 1, 4 and 8 tokens in batches of 3, greedy and top-p sampling")
    for seed in (21, 22):
        model = random_gpt(seed)
        ids = torch.randint(0, 13, (2, 5), generator=generator(seed))
        what = f"a GPT with 3 blocks, random weights {seed}, float64"
        vs_reference(model, ids, 12, f"{what}, greedy", temperature=0)
        vs_reference(model, ids, 12, f"{what}, temperature 1, top_k 6", temperature=1.0, top_k=6, seed=seed)
    c.ok("a real GPT (random weights): cached and uncached give the reference's tokens")
    from course_utils.language_model import load_gpt

    model, tok = load_gpt(ref.GPT, device="cpu")
    ids = torch.tensor([tok.encode("ROMEO:\n"), tok.encode("JULIET:")])
    shakespeare = "the trained Shakespeare model, temperature 0.8"
    vs_reference(model.double(), ids, 20, shakespeare, temperature=0.8, seed=5)
    c.ok("the trained Shakespeare model, cached and uncached")
    model, ids, n, kwargs = generate_case("greedy")
    for dev in devices()[1:]:
        on = PrefixLM(9, 1, device=dev)
        got = c.call(generate, on, ids.to(dev), n, **kwargs)
        c.that(got.device.type == dev.type, f"the result should stay on {dev.type}.", f"runs on {dev.type}")
    c.done()
