"""What a training tool writes beside the checkpoint it saved: ``<checkpoint>.json``, the
command, the configuration, what the model reached, and the machine and versions it ran on,
with the checkpoint's size and sha256 (``tools/train_toy_model.py``, ``tools/train_gpt.py``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import sys
from pathlib import Path

import torch


def write_record(path: Path, tool: str, argv, run, **reached) -> dict:
    """Write and return the record of the checkpoint at ``path``, saved by the tool at ``tool``
    (its ``__file__``) run with ``argv`` (None: this process's arguments) after the training
    ``run`` (``training_cli.Trained``); ``reached``: what the model reached, in the order given."""
    config, model, history, device, train_seconds = run
    tool = Path(tool).name
    info = {
        "command": f"python tools/{tool} " + " ".join(sys.argv[1:] if argv is None else argv),
        "config": dataclasses.asdict(config),
        **reached,
        "train_seconds": round(train_seconds, 1),
        "steps": history.steps,
        "final_loss": round(history.recent_loss(50), 4),
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "parameters": sum(p.numel() for p in model.parameters()),
        "bytes": path.stat().st_size,
        "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
    }
    path.with_suffix(".json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"wrote {path} ({info['bytes']:,} bytes) and {path.with_suffix('.json').name}")
    return info
