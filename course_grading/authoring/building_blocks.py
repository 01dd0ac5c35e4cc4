"""Building blocks: the components of earlier notebooks that a later notebook builds on.

Notebook 06 stacks its encoder on 04's ``MultiHeadAttention`` and 05's ``PositionalEncoding``;
07 and 08 build on the encoder and the whole ``Transformer``; 09 builds its GPT from 04's
attention, 06's ``LayerNorm`` and ``FeedForward``, and samples with 08's ``sample_next_token``. A learner's own earlier work may
be unfinished or wrong, so each such assignment ships a module ``building_blocks.py`` beside
its notebook holding the course's versions of those components, and the notebook imports them
from there (``from building_blocks import MultiHeadAttention``).

The module is rendered from ``course_grading.reference`` by ``course release`` into
``solutions/<assignment>/``; nbgrader then releases it with the notebook and restores the
instructor's copy over whatever a student submits (an nbgrader source file). It only ever holds
components of *earlier* assignments: an assignment's own exercises, and later ones, never
reach students through it.

Which components a release provides is the instructor's choice, in ``nbgrader_config.py``::

    c.BuildingBlocks.provide = {"06_encoder": ["PositionalEncoding"]}

A component the notebook needs but the instructor leaves out becomes a stub that tells the
student to paste their own version in (their earlier exercise). Unlisted assignments keep the
default: everything they need.
"""
from __future__ import annotations

import inspect
import textwrap
from dataclasses import dataclass
from pathlib import Path

from traitlets import Dict
from traitlets.config import Configurable

from course_grading.course.course_dir import Folders

FILE_NAME = "building_blocks.py"


@dataclass(frozen=True)
class Component:
    assignment: str          # the notebook whose exercise (or helper) it is
    module: str              # course_grading.reference.<module>
    needs: tuple[str, ...] = ()  # components its code calls


COMPONENTS: dict[str, Component] = {
    "softmax": Component("03_attention", "attention"),
    "scaled_dot_product_attention": Component("03_attention", "attention", ("softmax",)),
    "causal_mask": Component("03_attention", "attention"),
    "split_heads": Component("04_multi_head_attention", "multi_head"),
    "merge_heads": Component("04_multi_head_attention", "multi_head"),
    "MultiHeadAttention": Component("04_multi_head_attention", "multi_head",
                                    ("split_heads", "merge_heads", "scaled_dot_product_attention")),
    "sinusoidal_positional_encoding": Component("05_positional_encoding", "positional"),
    "PositionalEncoding": Component("05_positional_encoding", "positional",
                                    ("sinusoidal_positional_encoding",)),
    "LayerNorm": Component("06_encoder", "encoder"),
    "FeedForward": Component("06_encoder", "encoder"),
    "residual": Component("06_encoder", "encoder"),
    "EncoderLayer": Component("06_encoder", "encoder", ("MultiHeadAttention", "FeedForward", "LayerNorm",
                                                        "residual")),
    "Encoder": Component("06_encoder", "encoder", ("EncoderLayer", "PositionalEncoding")),
    "DecoderLayer": Component("07_decoder", "decoder", ("MultiHeadAttention", "FeedForward", "LayerNorm",
                                                        "residual")),
    "Decoder": Component("07_decoder", "decoder", ("Encoder", "DecoderLayer")),
    "Transformer": Component("07_decoder", "decoder", ("Encoder", "Decoder")),
    "make_padding_mask": Component("07_decoder", "decoder"),
    "filter_logits": Component("08_generation", "generation"),
    "sample_next_token": Component("08_generation", "generation", ("filter_logits",)),
}

# What each notebook imports from its building_blocks.py.
NEEDED: dict[str, tuple[str, ...]] = {
    "04_multi_head_attention": ("scaled_dot_product_attention", "causal_mask"),
    "05_positional_encoding": ("scaled_dot_product_attention", "MultiHeadAttention"),
    "06_encoder": ("MultiHeadAttention", "PositionalEncoding", "sinusoidal_positional_encoding"),
    "07_decoder": ("causal_mask", "MultiHeadAttention", "PositionalEncoding", "LayerNorm",
                   "FeedForward", "Encoder"),
    "08_generation": ("causal_mask", "make_padding_mask", "Transformer"),
    "09_gpt": ("scaled_dot_product_attention", "split_heads", "merge_heads", "MultiHeadAttention",
               "LayerNorm", "FeedForward", "sample_next_token"),
}

_HEADER = '''"""{intro}

Provided with the assignment by `course release`. Grading always uses the instructor's copy of
this file, so editing it changes nothing in your grade.
"""
import math

import torch
from torch import nn
'''

_STUB = '''

class {name}:  # withheld by your instructor: use your own
    """Paste your own `{name}` from {origin} here (replacing this class)."""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError("{name} is not provided with this assignment: paste your own "
                                  "version from {origin} into building_blocks.py")
'''


class BuildingBlocks(Configurable):
    """Which earlier components each assignment's release provides (nbgrader_config.py)."""

    provide = Dict(help="assignment -> names of the components its building_blocks.py provides "
                        "(default: every component the notebook needs)").tag(config=True)

    def provided(self, assignment: str) -> tuple[str, ...]:
        if assignment in self.provide:
            return tuple(self.provide[assignment])
        return NEEDED.get(assignment, ())


class BuildingBlocksError(ValueError):
    """A configuration that would provide an assignment's own (or a later) exercise, or an
    unknown component."""


def _closure(names) -> list[str]:
    """``names`` and everything they need, dependencies first, in a stable order."""
    ordered: list[str] = []

    def visit(name: str) -> None:
        if name in ordered:
            return
        for need in COMPONENTS[name].needs:
            visit(need)
        ordered.append(name)

    for name in names:
        visit(name)
    return ordered


def render(assignment: str, provided) -> str | None:
    """The text of ``building_blocks.py`` for ``assignment`` (None when it needs none)."""
    needed = NEEDED.get(assignment, ())
    unknown = [n for n in provided if n not in COMPONENTS]
    if unknown:
        raise BuildingBlocksError(f"{assignment}: unknown building block {unknown[0]!r} "
                                  f"(known: {', '.join(COMPONENTS)})")
    if not needed and not provided:
        return None
    chosen = _closure(provided)
    late = [n for n in chosen if COMPONENTS[n].assignment >= assignment]
    if late:
        raise BuildingBlocksError(
            f"{assignment} cannot provide {late[0]} ({COMPONENTS[late[0]].assignment}): a release "
            "only provides components of earlier assignments")
    import importlib

    parts, origins = [], []
    for name in chosen:
        component = COMPONENTS[name]
        module = importlib.import_module(f"course_grading.reference.{component.module}")
        parts.append(inspect.getsource(getattr(module, name)).rstrip())
        if name in needed or name in provided:
            origins.append(f"{name} from {component.assignment}")
    stubs = [_STUB.format(name=name, origin=COMPONENTS[name].assignment)
             for name in needed if name not in chosen]
    intro = textwrap.fill(f"Building blocks for {assignment}: the course's own versions of components "
                          f"that earlier notebooks had you build ({', '.join(origins) or 'none'}), so "
                          "that this notebook works whatever state your earlier work is in.", 96)
    text = _HEADER.format(intro=intro) + "\n\n"
    text += "\n\n\n".join(parts) + "\n" + "".join(stubs)
    return text


def source_file(where: Folders, assignment: str) -> Path:
    return where.source_of(assignment) / FILE_NAME


def expected_files(where: Folders, assignment: str, config=None) -> dict[Path, bytes]:
    """{path of solutions/<assignment>/building_blocks.py (``where``: the course's folders):
    its bytes} ({} when none is needed)."""
    text = render(assignment, BuildingBlocks(config=config).provided(assignment))
    return {} if text is None else {source_file(where, assignment): text.encode("utf-8")}
