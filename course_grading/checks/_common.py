"""What every hidden check shares."""
from __future__ import annotations

import contextlib
import io


def visible_first(check, fn) -> None:
    """Run the visible check ``check`` on ``fn`` again, quietly, so that the hidden half grades
    on its own: the visible call in a test cell goes through the notebook's namespace, where a
    submission can replace it; this one comes from the package. Its failure is the grade cell's
    failure, with the visible check's own message."""
    with contextlib.redirect_stdout(io.StringIO()):
        check(fn)
