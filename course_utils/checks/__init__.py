"""The checks behind the notebooks' test cells.

Each exercise has one function here, e.g. ``checks.attention.check_softmax(softmax)``. The
visible test cell calls it plainly; the hidden part of the same cell calls it with
``hidden=True``, which adds the cases that catch the common mistakes. A failing check raises
:class:`CheckFailed` with a message that says what went wrong and the likely cause, never the
answer. Checks print a ✓ line for each thing that passed.
"""

from ._core import CheckFailed

__all__ = ["CheckFailed"]
