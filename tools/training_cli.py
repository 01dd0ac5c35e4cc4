"""The command line that the training tools share (``tools/train_toy_model.py``,
``tools/train_gpt.py``): an option a field of the tool's configuration (a dataclass: ``--d-model``
for ``d_model``, of the field's type, its default the field's), then ``--device``,
``--threads``, ``--save`` and ``--out``; and the configuration, device and thread count the
parsed options give."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
from pathlib import Path
from typing import NamedTuple

import torch
from provenance import write_record

from course_utils.device import get_device


def training_parser(description: str, config_cls, checkpoint: Path) -> argparse.ArgumentParser:
    """The tool's parser: the options of ``config_cls`` and of a training run writing
    ``checkpoint``; a tool adds its own."""
    parser = argparse.ArgumentParser(description=description)
    defaults = config_cls()
    for f in dataclasses.fields(config_cls):
        parser.add_argument(
            f"--{f.name.replace('_', '-')}",
            type=type(getattr(defaults, f.name)),
            default=getattr(defaults, f.name),
        )
    parser.add_argument("--device", default=None, help="cpu, cuda, mps (default: get_device())")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="torch CPU threads (0: torch's default); on a busy machine 1 is much faster than 2",
    )
    parser.add_argument("--save", action="store_true", help="write the checkpoint and its JSON")
    parser.add_argument("--out", type=Path, default=checkpoint)
    return parser


def training_run(args: argparse.Namespace, config_cls):
    """(configuration, device) the parsed ``args`` give; torch's CPU threads set as asked."""
    config = config_cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(config_cls)})
    device = torch.device(args.device) if args.device else get_device()
    if args.threads:
        torch.set_num_threads(args.threads)
    return config, device


def config_options(config, train) -> dict:
    """The fields of ``config`` that the training function ``train`` takes (steps, lr, ...)."""
    takes = inspect.signature(train).parameters
    return {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.name in takes}


class Trained(NamedTuple):
    """A finished training run, as a tool reports it and records it (``provenance``)."""

    config: object
    model: object
    history: object
    device: object
    seconds: float

    def finish(self, args, argv, tool: str, reached: str, save, **record) -> None:
        """What a tool does when its training ends: say how the run went (steps, time, where,
        the final loss) and what the model ``reached``; with --save, write the checkpoint
        (``save(path)``) and its record (``provenance``: ``tool`` is the tool's ``__file__``,
        ``record`` what the model reached, by name)."""
        history = self.history
        print(
            f"trained {history.steps} steps in {self.seconds:.1f}s on {self.device} "
            f"({torch.get_num_threads()} threads, load average {os.getloadavg()[0]:.2f}); "
            f"final loss {history.recent_loss(50):.4f}"
        )
        print(reached)
        if args.save:
            write_record(save(args.out), tool, argv, self, **record)


def as_saved(model, fresh):
    """``fresh`` (a new model of ``model``'s kind, on its device) holding ``model``'s weights as
    the checkpoint holds them, rounded to float16; in eval mode."""
    fresh.load_state_dict({k: v.half().float() for k, v in model.state_dict().items()})
    return fresh.eval()
