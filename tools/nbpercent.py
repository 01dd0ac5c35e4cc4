"""Author course notebooks as plain text, and turn them back into text to edit.

The .ipynb files under solutions/ are the sources of truth. This tool is for writing them
comfortably: a "percent" text file whose cell headers carry the nbgrader role.

    # %% [markdown]                  a markdown cell (each line starts with "# ")
    # %%                             an ordinary code cell
    # %% [locked] id=setup           read-only code cell (students can't edit it)
    # %% [solution] id=softmax       an autograded answer cell (### BEGIN/END SOLUTION inside)
    # %% [tests] id=test_softmax points=2   a locked grade cell (### BEGIN/END HIDDEN TESTS inside)
    # %% [question] id=q_sqrt_dk     a read-only markdown cell (a written question)
    # %% [answer] id=written_sqrt_dk points=2   a manually graded markdown answer: the source
                                     holds the model answer and the rubric, which the release
                                     replaces by "YOUR ANSWER HERE"
    # %% tags=raises-exception          any header may end with the cell's tags, comma-separated

    python tools/nbpercent.py to-ipynb src.py solutions/03_attention/03_attention.ipynb
    python tools/nbpercent.py to-py solutions/03_attention/03_attention.ipynb > src.py
    python tools/nbpercent.py insert section.py solutions/03_attention/03_attention.ipynb "## What you built"

``insert`` puts the cells of a percent file (a section: its first cell is a markdown cell
starting with a ``## `` heading) before the first cell whose source starts with the given text;
where the notebook already has a section with that heading, it is replaced instead (up to the
next ``## `` heading), so running it again changes nothing.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from course_grading.authoring.nbformat_tools import normalize, write_notebook

HEADER = re.compile(r"^# %%(?: \[(\w+)\])?(.*)$")


# the nbgrader flags each kind of cell sets; a graded one (grade) has points too
_FLAGS = {
    "solution": {"solution": True},
    "tests": {"grade": True, "locked": True},
    "locked": {"locked": True},
    "question": {"locked": True},
    "answer": {"solution": True, "grade": True},
}


def _nbgrader(kind: str, opts: dict) -> dict | None:
    if kind not in _FLAGS:
        return None
    base = {"schema_version": 3, "grade": False, "solution": False, "locked": False, "task": False}
    meta = {**base, **_FLAGS[kind], "grade_id": opts["id"]}
    if meta["grade"]:
        meta["points"] = float(opts.get("points", 1))
    return meta


def to_notebook(text: str):
    nb = nbformat.v4.new_notebook()
    cells: list[tuple[str, dict, list[str]]] = []
    for line in text.splitlines():
        m = HEADER.match(line)
        if m:
            kind = m.group(1) or "code"
            opts = dict(kv.split("=", 1) for kv in m.group(2).split())
            cells.append((kind, opts, []))
        elif cells:
            cells[-1][2].append(line)
    for kind, opts, lines in cells:
        while lines and not lines[-1].strip():
            lines.pop()
        if kind in ("markdown", "question", "answer"):
            body = "\n".join(re.sub(r"^# ?", "", ln) for ln in lines)
            cell = nbformat.v4.new_markdown_cell(body)
        else:
            cell = nbformat.v4.new_code_cell("\n".join(lines))
        meta = _nbgrader(kind, opts)
        if meta:
            cell.metadata["nbgrader"] = meta
        if opts.get("tags"):
            cell.metadata["tags"] = opts["tags"].split(",")
        nb.cells.append(cell)
    return normalize(nb)


def to_text(nb) -> str:
    out = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        tags = f" tags={','.join(cell.metadata['tags'])}" if cell.metadata.get("tags") else ""
        if cell.cell_type == "markdown":
            if meta.get("grade") and meta.get("solution"):
                out.append(f"# %% [answer] id={meta['grade_id']} points={_points(meta)}" + tags)
            elif meta.get("locked"):
                out.append(f"# %% [question] id={meta['grade_id']}" + tags)
            else:
                out.append("# %% [markdown]" + tags)
            out.extend(("# " + ln).rstrip() for ln in cell.source.splitlines())
        else:
            if meta.get("grade"):
                out.append(f"# %% [tests] id={meta['grade_id']} points={_points(meta)}" + tags)
            elif meta.get("solution"):
                out.append(f"# %% [solution] id={meta['grade_id']}" + tags)
            elif meta.get("locked"):
                out.append(f"# %% [locked] id={meta['grade_id']}" + tags)
            else:
                out.append("# %%" + tags)
            out.extend(cell.source.splitlines())
        out.append("")
    return "\n".join(out)


def _points(meta: dict):
    pts = meta.get("points", 1)
    return int(pts) if float(pts).is_integer() else pts


def _heading(cell) -> str:
    first = cell.source.splitlines()[0] if cell.cell_type == "markdown" and cell.source else ""
    return first if first.startswith("## ") else ""


def insert(nb, section, before: str):
    """``nb`` with the cells of ``section`` (a notebook whose first cell is a ``## `` heading)
    in place of the section of that heading, or else before the first cell starting with
    ``before``; ValueError when neither is found."""
    heading = _heading(section.cells[0]) if section.cells else ""
    if not heading:
        raise ValueError("the section must start with a markdown cell headed '## ...'")
    starts = [i for i, c in enumerate(nb.cells) if _heading(c) == heading]
    if starts:
        start = starts[0]
        end = next((i for i in range(start + 1, len(nb.cells)) if _heading(nb.cells[i])), len(nb.cells))
    else:
        found = [i for i, c in enumerate(nb.cells) if c.source.startswith(before)]
        if not found:
            raise ValueError(f"no cell starts with {before!r}")
        start = end = found[0]
    nb.cells[start:end] = section.cells
    return normalize(nb)


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "insert":
        nb = insert(nbformat.read(argv[2], as_version=4), to_notebook(Path(argv[1]).read_text()), argv[3])
        write_notebook(nb, argv[2])
        return 0
    if len(argv) >= 2 and argv[0] == "to-ipynb":
        nb = to_notebook(Path(argv[1]).read_text())
        dest = Path(argv[2])
        dest.parent.mkdir(parents=True, exist_ok=True)
        write_notebook(nb, dest)
        return 0
    if len(argv) == 2 and argv[0] == "to-py":
        sys.stdout.write(to_text(nbformat.read(argv[1], as_version=4)))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
