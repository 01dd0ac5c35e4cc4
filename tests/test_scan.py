"""The static red-flag scanner: finds cheats, stays quiet on honest notebooks."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbgrader.utils import compute_checksum

from conftest import tiny_notebook
from course_grading.grading.red_flags import scan, visible_part

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("assignment", sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir()))
def test_released_and_solution_notebooks_raise_no_flag(assignment):
    source = ROOT / "solutions" / assignment / f"{assignment}.ipynb"
    assert scan(ROOT / "notebooks" / assignment / f"{assignment}.ipynb", source) == []
    assert scan(source, source) == []


def _reasons(sub, src=None):
    return [f"{f.where}: {f.reason}" for f in scan(sub, src or tiny_notebook())]


@pytest.mark.parametrize(
    "code, why",
    [
        ("np.allclose = lambda *a, **k: True", "comparison"),
        ("torch.allclose = lambda *a: True", "comparison"),
        ("check_double = lambda *a, **k: None", "checks"),
        ("import course_utils.checks._core as c", "checks"),
        ("get_ipython().input_transformers_post.append(f)", "transformer"),
        ("open('../../gradebook.db')", "gradebook"),
        ("import sqlite3", "gradebook"),
        ("import os\nos._exit(0)", "process control"),
        ("signal.signal(signal.SIGINT, signal.SIG_IGN)", "process control"),
        ("import socket", "network"),
        ("import os\nprint(os.listdir('/home'))", "looks through folders"),
        ("from pathlib import Path\nprint(list(Path('.').parent.iterdir()))", "looks through folders"),
        (
            "print(open('../../submitted/ben/03_attention/03_attention.ipynb').read())",
            "looks through folders",
        ),
        ("import glob\nglob.glob('/srv/*')", "looks through folders"),
        ("from course_grading.reference.embeddings import one_hot", "reference"),
        ("exec('x=1')", "dynamic"),
        ("k = get_ipython().kernel\nk.session.send(k.iopub_socket, 'status', {})", "Jupyter messages"),
    ],
)
def test_patterns_in_student_code(code, why):
    nb = tiny_notebook(solution="def double(x):\n    return 2 * x\n" + code + "\n")
    found = _reasons(nb)
    assert any(why in r and r.startswith("double") for r in found), found


def test_metadata_tags_and_test_cells():
    nb = tiny_notebook()
    nb.cells[2].metadata.nbgrader["points"] = 99
    assert any("metadata edited: points" in r for r in _reasons(nb))
    nb = tiny_notebook()
    nb.cells[2].metadata["tags"] = ["skip-execution"]
    assert any("tagged skip-execution" in r for r in _reasons(nb))
    nb = tiny_notebook()
    nb.cells[2].source = "pass"
    nb.cells[2].metadata.nbgrader["checksum"] = compute_checksum(nb.cells[2])
    assert any("test cell edited" in r for r in _reasons(nb))
    nb = tiny_notebook()
    del nb.cells[2]
    assert any("deleted" in r for r in _reasons(nb))
    nb = tiny_notebook()
    nb.cells[2].metadata.nbgrader["checksum"] = "0" * 32
    assert any("checksum" in r for r in _reasons(nb))
    nb = tiny_notebook()
    nb.metadata["kernelspec"] = {"name": "evil"}
    src = tiny_notebook()
    src.metadata["kernelspec"] = {"name": "python3"}
    assert any("kernel changed" in r for r in _reasons(nb, src))


def test_visible_part_drops_the_hidden_region():
    assert visible_part("a\n### BEGIN HIDDEN TESTS\nb\n### END HIDDEN TESTS\n") == "a"


def test_tags_the_source_carries_are_not_flagged_added_ones_are():
    src = tiny_notebook()
    src.cells[1].metadata["tags"] = ["raises-exception"]  # "Run All" keeps going past it
    src.cells[2].metadata["tags"] = ["raises-exception"]
    for cell, cell_id in zip(src.cells, ("intro", "double", "test_double")):
        cell["id"] = cell_id
    assert _reasons(src, src) == []
    sub = nbformat.from_dict(src)
    sub.cells[2].metadata["tags"] = ["raises-exception", "skip-execution"]
    assert _reasons(sub, src) == ["test_double: tagged skip-execution"]
    sub = nbformat.from_dict(src)
    sub.cells[0].metadata["tags"] = ["raises-exception"]  # a cell whose source has no such tag
    added = nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["raises-exception"]})
    added["id"] = "mine"
    sub.cells.append(added)  # a cell the student added
    assert _reasons(sub, src) == ["cell 0: tagged raises-exception", "cell 3: tagged raises-exception"]


# --------------------------------------------------------------------------- linear time
# Every regular expression of the grading side meets text a submission controls (its code, its
# outputs and tracebacks, its names, its JSON). Each must run in time linear in that text: one
# `^\s*` under MULTILINE made 600,000 blank lines take minutes. The patterns are found in the
# source (every re.compile/search/sub/... call), so a new one is timed too.
RE_CALLS = {"compile", "search", "match", "fullmatch", "sub", "subn", "split", "findall", "finditer"}
ANCHORED: set = set()  # ids of the patterns only ever matched at one position (see _grading_patterns)
SIZE = 100_000  # characters of each adversarial text
BOUND = 5.0  # seconds for one pattern on one text: linear takes milliseconds, quadratic minutes


def _grading_patterns() -> dict[str, list]:
    """{file:line of each re call in course_grading: its compiled patterns}; a call whose
    pattern is neither a literal nor a module-level constant fails the test (make it one).
    A module-level pattern that its module only ever calls ``.match``/``.fullmatch`` on (at a
    position its caller chose) is listed in ANCHORED, and timed that way."""
    import ast
    import importlib
    import re

    found, missing = {}, []
    for path in sorted((ROOT / "course_grading").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        assigned = {
            id(node.value): [t.id for t in node.targets if isinstance(t, ast.Name)]
            for node in tree.body
            if isinstance(node, ast.Assign)
        }
        uses: dict[str, set] = {}
        through = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                uses.setdefault(node.value.id, set()).add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in through:
                uses.setdefault(node.id, set()).add(None)  # passed on as it is: used any way
        anchored = {name for name, attrs in uses.items() if attrs and attrs <= {"match", "fullmatch"}}
        for top in tree.body:
            for node in ast.walk(top):
                if not (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "re"
                    and node.func.attr in RE_CALLS
                    and node.args
                ):
                    continue
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                try:
                    pattern = ast.literal_eval(node.args[0])
                    flags = 0
                    if node.func.attr == "compile" and len(node.args) > 1:
                        flags = eval(compile(ast.Expression(node.args[1]), where, "eval"), {"re": re})
                    found[where] = [re.compile(pattern, flags)]
                    names = assigned.get(id(top.value), []) if isinstance(top, ast.Assign) else []
                    if names and top.value is node and set(names) <= anchored:
                        ANCHORED.add(id(found[where][0]))
                    continue
                except ValueError:
                    pass
                names = assigned.get(id(top.value), []) if isinstance(top, ast.Assign) else []
                patterns = _patterns_in([getattr(importlib.import_module(module), n) for n in names])
                if patterns:
                    found[where] = patterns
                else:
                    missing.append(where)
                if isinstance(top, ast.Assign) and top.value is node and names and set(names) <= anchored:
                    ANCHORED.update(id(p) for p in found.get(where, []))
    assert not missing, f"patterns the test cannot reach (make them module-level constants): {missing}"
    return found


def _patterns_in(value) -> list:
    import re

    if isinstance(value, re.Pattern):
        return [value]
    if isinstance(value, (list, tuple)):
        return [p for v in value for p in _patterns_in(v)]
    return []


def _adversarial_texts(pattern) -> dict[str, str]:
    """Texts that make a backtracking pattern slow: long runs of what \\s, \\w, \\d, digits and
    brackets match, line starts, and each word of the pattern repeated, or followed by runs."""
    import re

    texts = {
        "blank lines": "\n" * SIZE,
        "spaces": " " * SIZE,
        "tabs then x": "\t" * SIZE + "x",
        "lines of spaces": (" " * 99 + "\n") * (SIZE // 100),
        "mixed space": " \t\r\n\f\v" * (SIZE // 6),
        "one word": "a" * SIZE,
        "digits": "1" * SIZE + "x",
        "number": "1." + "1" * SIZE + "e",
        "dashes": "-" * SIZE,
        "ansi": "\x1b[" + "0;" * (SIZE // 2),
        "ansi many": "\x1b[1" * (SIZE // 3),
        "brackets": "([{" * (SIZE // 3),
        "quotes": '"' + '\\"' * (SIZE // 2),
        "backslashes": "\\" * SIZE,
        "slashes": "//a:" * (SIZE // 4),
    }
    words = set(
        re.findall(
            r"[A-Za-z_]{2,}",
            pattern.pattern if isinstance(pattern.pattern, str) else pattern.pattern.decode("latin-1"),
        )
    )
    for word in sorted(words):
        texts[f"{word} repeated"] = (word + ". ") * (SIZE // 2 // (len(word) + 2))
        texts[f"{word} then blanks"] = ("\n" + word + " ." + " " * 50) * (SIZE // 2 // (len(word) + 53))
    return texts


def test_every_grading_pattern_runs_in_linear_time():
    import time

    patterns = _grading_patterns()
    assert any("red_flags" in where for where in patterns) and len(patterns) >= 10
    slow = []
    for where, compiled in patterns.items():
        for pattern in compiled:
            for name, text in _adversarial_texts(pattern).items():
                subject = text.encode("latin-1", "replace") if isinstance(pattern.pattern, bytes) else text
                start = time.perf_counter()
                if id(pattern) in ANCHORED:
                    pattern.match(subject)
                else:
                    pattern.sub(subject[:0], subject)  # every match, and every position tried
                took = time.perf_counter() - start
                if took > BOUND:
                    slow.append((where, pattern.pattern[:60], name, round(took, 1)))
    assert not slow, slow


def test_scan_of_hostile_code_and_fields():
    """600,000 blank lines, long lines of spaces, deep brackets: the scan ends in time and
    still finds what it looks for; fields of the wrong type are read, not crashed on."""
    import time

    code = (
        "x = 1\n"
        + "\n" * 600_000
        + (" " * 10_000 + "\n") * 50
        + "(" * 50_000
        + "\n"
        + "check_double = None\n"
    )
    nb = tiny_notebook(solution="def double(x):\n    return 2 * x\n" + code)
    start = time.perf_counter()
    found = _reasons(nb)
    assert time.perf_counter() - start < 30
    assert any("patches the checks" in r for r in found), found
    nb = tiny_notebook()
    nb.cells[1].metadata.nbgrader["grade_id"] = ["not", "a", "string"]
    nb.cells[2].metadata["tags"] = 7
    nb.cells[0]["metadata"] = ["a", "list"]
    nb.cells[0]["source"] = ["a", 1, None]
    nb.cells.append("not a cell")
    nb.metadata["kernelspec"] = ["python3"]
    found = _reasons(nb)
    assert "cell 3: not a notebook cell" in found
    assert any(
        r.startswith("['not', 'a', 'string']: nbgrader cell that is not in the assignment") for r in found
    )
    assert "test_double: test/locked cell deleted" not in found, found  # its cell is there, tagged


def test_scan_reads_a_submitted_file_within_the_notebook_bounds(tmp_path):
    from course_grading.untrusted import UntrustedFileError

    source = tmp_path / "source.ipynb"
    nbformat.write(tiny_notebook(), str(source))
    bomb = tmp_path / "bomb.ipynb"
    bomb.write_text(
        '{"cells": [{"cell_type": "markdown", "source": "", "metadata": {"x": ['
        + "{}," * 2_000_000
        + '{}]}}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
    )
    with pytest.raises(UntrustedFileError, match="holds more than 100000 JSON objects and arrays"):
        scan(bomb, source)
    link = tmp_path / "link.ipynb"
    link.symlink_to(source)
    with pytest.raises(UntrustedFileError, match="symbolic link"):
        scan(link, source)


def test_feedback_line_filter_is_linear_and_finds_every_secret():
    """The feedback's filter of hidden and grading-side lines: the same answers as testing every
    secret against every line, in time linear in the output (10 MB of short lines took minutes)."""
    import random
    import time

    from course_grading.preprocessors.hidden_outputs import MIN_LINE, _LineFilter, grading_lines

    hidden = {"short", "hidden_check(x, y)  # a hidden line"}
    filt = _LineFilter(hidden, grading_lines())
    secrets = [s for s in hidden | grading_lines() if len(s) >= MIN_LINE]
    rng = random.Random(3)
    pool = sorted(secrets)
    for _ in range(300):
        secret = rng.choice(pool)
        a, b = sorted((rng.randrange(len(secret) + 1), rng.randrange(len(secret) + 1)))
        line = (
            "\x1b[31m>>> " * rng.randrange(2) + secret[a : b + rng.randrange(2)] + " tail" * rng.randrange(2)
        )
        plain = line.replace("\x1b[31m", "").strip()
        want = plain == "short" if len(plain) < MIN_LINE else any(s in plain for s in secrets)
        assert filt.quotes(line) == want, line
    output = ("a line of ordinary output, " * 3 + "\n") * 40_000  # 3 MB of short lines
    start = time.perf_counter()
    assert filt.clean(output) == output
    assert filt.clean(output + pool[0] + "\n") == output
    assert time.perf_counter() - start < 30
