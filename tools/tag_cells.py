"""Tag the cells that run the learner's code with ``raises-exception``, so "Run All" keeps going.

    python tools/tag_cells.py solutions/*/*.ipynb     # then: course release

JupyterLab's "Run All" (and nbclient) stops at the first cell that raises, unless that cell is
tagged ``raises-exception``. A learner who has written two exercises of four should still see
everything that depends only on those two. So every solution and grade cell, and every cell
that uses a name they define (directly or through an earlier such cell), gets the tag; it is
removed from the others. ``course_grading.authoring.cells.runs_learner_code`` decides, and
``tests/test_run_all.py`` checks that every source notebook is tagged that way. Grading is not
affected: nbgrader runs every cell whatever its tags, and scores a failing test cell 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from course_grading.authoring.cells import KEEP_GOING, runs_learner_code
from course_grading.authoring.nbformat_tools import read_notebook, write_notebook


def tag(nb) -> int:
    """Set or clear the tag on every cell of ``nb``; return how many cells changed."""
    changed = 0
    for cell, runs in zip(nb.cells, runs_learner_code(nb)):
        tags = list(cell.metadata.get("tags", []))
        if runs and KEEP_GOING not in tags:
            tags.append(KEEP_GOING)
        elif not runs and KEEP_GOING in tags:
            tags.remove(KEEP_GOING)
        else:
            continue
        changed += 1
        if tags:
            cell.metadata["tags"] = tags
        else:
            cell.metadata.pop("tags", None)
    return changed


def main(paths: list[str]) -> int:
    if not paths:
        print(__doc__, file=sys.stderr)
        return 2
    for path in paths:
        nb = read_notebook(path)
        changed = tag(nb)
        if changed:
            write_notebook(nb, path)
        print(f"{path}: {changed} cell(s) retagged")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
