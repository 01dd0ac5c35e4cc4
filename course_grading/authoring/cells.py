"""The vocabulary of a course notebook's cells: their roles and their marked regions.

A source notebook (``solutions/NN_topic/NN_topic.ipynb``) has nbgrader cells of three roles:

* the **setup** cell: locked, ``grade_id`` "setup" (or starting with it), the first code cell;
* **solution** cells: the student's answer goes between the solution delimiters;
* **grade** (test) cells: locked, worth points; their hidden tests sit between the hidden-test
  delimiters and never reach students.

Code cells that run the learner's code (solution and grade cells, and every cell that uses a
name they define, directly or through an earlier such cell) carry the ``raises-exception`` tag
(``KEEP_GOING``), so that "Run All" goes on past an unfinished exercise.

The delimiters are nbgrader's own settings (``ClearSolutions.begin_solution_delimeter`` and
friends, spelled as nbgrader spells them), read from the course's configuration when one is
given, else nbgrader's defaults. Everything that reads cells (release's leak check, the red-flag
scanner, the feedback scrubber, the audit, the tests) uses this module.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

# JupyterLab (and nbclient) go on with "Run All" past an error in a cell tagged so: the cells
# that run the learner's code carry it, so one unfinished exercise does not stop the notebook.
# It changes nothing in grading (nbgrader runs every cell, errors or not).
KEEP_GOING = "raises-exception"


@dataclass(frozen=True)
class Markers:
    """The four region delimiters (a line holding one opens or closes a region)."""

    begin_solution: str = "BEGIN SOLUTION"
    end_solution: str = "END SOLUTION"
    begin_hidden: str = "BEGIN HIDDEN TESTS"
    end_hidden: str = "END HIDDEN TESTS"

    @classmethod
    def from_config(cls, config=None) -> "Markers":
        """The delimiters of an nbgrader traitlets ``config`` (missing ones: nbgrader's defaults)."""
        if config is None:
            return cls()
        solutions = config.get("ClearSolutions", {})
        hidden = config.get("ClearHiddenTests", {})
        return cls(
            solutions.get("begin_solution_delimeter", cls.begin_solution),
            solutions.get("end_solution_delimeter", cls.end_solution),
            hidden.get("begin_test_delimeter", cls.begin_hidden),
            hidden.get("end_test_delimeter", cls.end_hidden),
        )

    @property
    def all(self) -> tuple[str, str, str, str]:
        return (self.begin_solution, self.end_solution, self.begin_hidden, self.end_hidden)

    def opens(self, line: str) -> bool:
        return self.begin_solution in line or self.begin_hidden in line

    def closes(self, line: str) -> bool:
        return self.end_solution in line or self.end_hidden in line


DEFAULT = Markers()


def text(value) -> str:
    """A notebook string field, whether stored as one string or as a list of lines."""
    if value is None:
        return ""
    return "".join(value) if isinstance(value, list) else str(value)


def meta(cell) -> dict:
    """A cell's nbgrader metadata ({} for an ordinary cell, or for metadata that is not a
    mapping: a submission's fields hold whatever its author wrote)."""
    metadata = cell.get("metadata")
    found = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return found if isinstance(found, dict) else {}


def grade_id(cell) -> str | None:
    return meta(cell).get("grade_id")


def is_code(cell) -> bool:
    return cell.get("cell_type") == "code"


def is_setup(cell) -> bool:
    """The locked setup cell: imports, seeding and the checks a notebook uses."""
    gid = grade_id(cell)
    return (
        is_code(cell) and bool(meta(cell).get("locked")) and isinstance(gid, str) and gid.startswith("setup")
    )


def is_solution(cell) -> bool:
    return bool(meta(cell).get("solution"))


def is_grade(cell) -> bool:
    """A test cell worth points (autograded)."""
    return is_code(cell) and bool(meta(cell).get("grade"))


def setup_and_solution_sources(nb) -> list[tuple[str, str]]:
    """(grade_id, source) of the setup cell(s) and the solution code cells, in notebook order:
    what a graded function needs to be defined, without the tests and the demonstrations."""
    return [
        (str(grade_id(c)), text(c.get("source")))
        for c in nb.cells
        if is_code(c) and (is_setup(c) or is_solution(c))
    ]


def hidden_lines(source: str, markers: Markers = DEFAULT) -> set[str]:
    """Stripped lines of a cell's hidden-test regions, the delimiter lines included."""
    hidden, inside = set(), False
    for line in source.splitlines():
        inside = inside or markers.begin_hidden in line
        if inside and line.strip():
            hidden.add(line.strip())
        inside = inside and markers.end_hidden not in line
    return hidden


def visible_part(source: str, markers: Markers = DEFAULT) -> str:
    """A test cell's source without its hidden region (as nbgrader releases it), blank lines
    and trailing spaces dropped."""
    kept, inside = [], False
    for line in source.splitlines():
        if markers.begin_hidden in line:
            inside = True
        elif markers.end_hidden in line:
            inside = False
        elif not inside:
            kept.append(line.rstrip())
    return "\n".join(ln for ln in kept if ln.strip())


def secret_regions(cell, markers: Markers = DEFAULT) -> tuple[list[str], list[str]]:
    """(lines inside a solution or hidden-test region, lines outside) of one cell. A solution
    cell without delimiters is a region as a whole."""
    lines = text(cell.get("source")).splitlines()
    inside = is_solution(cell) and not any(
        m in ln for ln in lines for m in (markers.begin_solution, markers.end_solution)
    )
    secret, public = [], []
    for line in lines:
        if markers.opens(line):
            inside = True
        elif markers.closes(line):
            inside = False
        else:
            (secret if inside else public).append(line)
    return secret, public


def runs_learner_code(nb) -> list[bool]:
    """For each cell of ``nb``: does it run the learner's code? True for solution and grade
    cells, and for code cells that use a name bound by such a cell, directly or through an
    earlier cell that does (a variable computed with the learner's function); never for the
    setup cell. Names are read from the code (nothing runs); a cell that does not parse counts
    as running learner code."""
    tainted: set[str] = set()
    found = []
    for cell in nb.cells:
        if not is_code(cell) or is_setup(cell):
            found.append(False)
            continue
        used, bound = _names(text(cell.get("source")))
        runs = is_solution(cell) or is_grade(cell) or used is None or bool(used & tainted)
        if runs:
            tainted |= bound or set()
        else:
            tainted -= bound  # rebound from values that do not depend on the learner
        found.append(runs)
    return found


def _names(source: str) -> tuple[set[str] | None, set[str] | None]:
    """(names a cell reads before binding them, names it binds); (None, None) if it does not
    parse. Read in evaluation order: ``x = f(x)`` reads ``x``; ``x = 1`` then ``print(x)`` does
    not read a value from an earlier cell."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None, None
    order = _Order()
    order.visit(tree)
    used, bound = set(), set()
    for name, stores in order.events:
        if not stores and name not in bound:
            used.add(name)
        if stores:
            bound.add(name)
    return used, bound


class _Order(ast.NodeVisitor):
    """The names a piece of code reads and binds, as (name, binds) in evaluation order."""

    def __init__(self):
        self.events: list[tuple[str, bool]] = []

    def visit_Name(self, node):
        self.events.append((node.id, not isinstance(node.ctx, ast.Load)))

    def visit_Assign(self, node):
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self.visit(node.value)
        self.visit(node.target)

    def visit_AugAssign(self, node):
        self.visit(node.value)
        if isinstance(node.target, ast.Name):
            self.events.append((node.target.id, False))
        self.visit(node.target)

    def visit_For(self, node):
        self.visit(node.iter)
        self.visit(node.target)
        for child in node.body + node.orelse:
            self.visit(child)

    def _comprehension(self, node, *results):
        for generator in node.generators:
            self.visit(generator)
        for result in results:
            self.visit(result)

    def visit_ListComp(self, node):
        self._comprehension(node, node.elt)

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node):
        self._comprehension(node, node.key, node.value)

    def visit_comprehension(self, node):
        self.visit(node.iter)
        self.visit(node.target)
        for condition in node.ifs:
            self.visit(condition)

    def _binds(self, node):
        self.generic_visit(node)  # decorators, defaults and the body: read when it runs
        self.events.append((node.name, True))

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _binds

    def visit_Import(self, node):
        self.events += [((a.asname or a.name).split(".")[0], True) for a in node.names]

    visit_ImportFrom = visit_Import
