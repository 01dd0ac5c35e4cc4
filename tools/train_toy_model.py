"""Train the dates Transformer from scratch and (optionally) write the shipped checkpoint.

    python tools/train_toy_model.py                 # train, evaluate, print; writes nothing
    python tools/train_toy_model.py --save          # ... and write course_utils/data/dates_transformer.{pt,json}

The run is deterministic on the CPU for a given seed and thread count (torch's CPU kernels are);
on a GPU the numbers may differ in the last digits. Defaults are course_utils.training.ToyConfig.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from training_cli import Trained, as_saved, config_options, training_parser, training_run  # noqa: E402 - tools/, this script's folder

from course_grading.reference.attention import causal_mask
from course_grading.reference.decoder import Transformer, make_padding_mask
from course_grading.reference.generation import greedy_decode
from course_utils.toy_task import HELD_OUT_DATES, make_pairs
from course_utils.training import CHECKPOINT, ToyConfig, build_model, exact_match, save_checkpoint, train


def main(argv=None) -> int:
    p = training_parser(__doc__.splitlines()[0], ToyConfig, CHECKPOINT)
    p.add_argument("--eval", type=int, default=HELD_OUT_DATES, help="held-out pairs to score")
    args = p.parse_args(argv)
    config, device = training_run(args, ToyConfig)

    t0 = time.perf_counter()
    pairs = make_pairs(config.train_pairs, "train", seed=config.seed)
    model = build_model(Transformer, config)
    masks = dict(causal_mask=causal_mask, make_padding_mask=make_padding_mask)
    options = config_options(config, train)
    history = train(model, pairs, **masks, **options, device=device, show="text", redraw_every=10.0)
    train_seconds = time.perf_counter() - t0  # data generation + training
    test = make_pairs(args.eval, "test", seed=0)
    model.float()
    acc = exact_match(model, test, decode=greedy_decode, make_padding_mask=make_padding_mask)
    half = as_saved(model, build_model(Transformer, config).to(device))
    acc_half = exact_match(half, test, decode=greedy_decode, make_padding_mask=make_padding_mask)
    reached = (
        f"held-out exact match (greedy, {len(test)} dates never seen in training): "
        f"{acc:.4f} float32, {acc_half:.4f} float16 weights"
    )
    record = dict(held_out_exact_match_greedy=round(acc_half, 4), held_out_pairs=len(test))
    run = Trained(config, model, history, device, train_seconds)
    run.finish(args, argv, __file__, reached, lambda out: save_checkpoint(model, config, out), **record)
    return 0


if __name__ == "__main__":
    sys.exit(main())
