"""Train notebook 09's character-level GPT on the course's Shakespeare and (optionally) write the
shipped checkpoint.

    python tools/train_gpt.py                 # train, evaluate, print; writes nothing
    python tools/train_gpt.py --save          # ... and write course_utils/data/shakespeare_gpt.{pt,json}

The run is deterministic on the CPU for a given seed and thread count. Defaults are
course_utils.language_model.GPTConfig; the model is the course's reference GPT.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from training_cli import Trained, as_saved, config_options, training_parser, training_run  # noqa: E402 - tools/, this script's folder

from course_grading.reference.gpt import GPT, generate
from course_utils.language_model import (
    CHECKPOINT,
    CharTokenizer,
    GPTConfig,
    build_gpt,
    load_text,
    perplexity,
    save_gpt,
    split,
    train_lm,
)


def main(argv=None) -> int:
    args = training_parser(__doc__.splitlines()[0], GPTConfig, CHECKPOINT).parse_args(argv)
    config, device = training_run(args, GPTConfig)

    text = load_text()
    tok = CharTokenizer(text)
    train_ids, val_ids = split(tok.encode(text))
    model = build_gpt(GPT, config, len(tok))
    t0 = time.perf_counter()
    options = config_options(config, train_lm)
    history = train_lm(model, train_ids, **options, device=device, show="text", redraw_every=20.0)
    train_seconds = time.perf_counter() - t0
    model.float().eval()
    ppl = perplexity(model, val_ids.to(device), config.block)
    ppl_train = perplexity(model, train_ids.to(device), config.block)
    half = as_saved(model, build_gpt(GPT, config, len(tok)).to(device))
    ppl_half = perplexity(half, val_ids.to(device), config.block)
    reached = (
        f"perplexity per character: held-out {ppl:.3f} (float16 weights {ppl_half:.3f}), "
        f"training text {ppl_train:.3f}"
    )
    Trained(config, model, history, device, train_seconds).finish(
        args,
        argv,
        __file__,
        reached,
        lambda out: save_gpt(model, config, tok, out),
        vocab_size=len(tok),
        held_out_perplexity=round(ppl_half, 3),
        train_perplexity=round(ppl_train, 3),
        held_out_characters=len(val_ids),
    )
    prompt = torch.tensor([tok.encode("ROMEO:\n")], device=device)
    sample = generate(
        half,
        prompt,
        config.max_len - prompt.size(1),
        temperature=0.8,
        generator=torch.Generator(device=device).manual_seed(0),
    )
    print("sample:\n" + tok.decode(sample[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
