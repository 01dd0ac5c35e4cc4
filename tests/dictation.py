"""The dictation measure: does an exercise's own text, hint or check message give a line of its
solution?

For every graded exercise (a solution cell of `solutions/NN_topic/NN_topic.ipynb`), the code
between ``### BEGIN SOLUTION`` and ``### END SOLUTION`` is cut into lines. A line is compared
with what the learner reads while solving it: the markdown cells just before the solution cell
(the section's prose, the exercise's spec and its hint) and every message of the visible checks
the notebook imports (the string literals of `course_utils/checks/<module>.py` and of the check
modules it imports; an f-string's fields never match).

Both sides are tokenized and normalised: spacing disappears, a bare name is matched up to a
consistent renaming (``q = k @ v`` matches ``a = b @ c`` but not ``a = a @ c``), while
keywords, literals, attribute names (``.tril``), the names of called functions (``softmax(``)
and keyword-argument names (``diagonal=``) stay as they are. A line leaks when the text holds the whole line, or the expression on the right of
its ``=`` or after its ``return``, once it has at least ``MIN_TOKENS`` tokens; or any
``RUN_TOKENS`` consecutive tokens of a longer line (so that ``torch.ones(t, T).tril(diagonal=T -
t)`` in a message leaks ``mask = torch.ones(t, T, dtype=…, device=…).tril(diagonal=T - t)``).
Lines that assign a sub-module in ``__init__`` (``self.ln1 = LayerNorm(d_model)``) are the
contract's names, which the spec must state, and are not counted.

``python tests/dictation.py`` prints every leak and the count.
"""

from __future__ import annotations

import ast
import io
import json
import keyword
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIN_TOKENS = 6  # a line shorter than this (``return x``, ``pass``, ``x = f(y)``) is trivial
RUN_TOKENS = 10  # this many consecutive tokens of a longer line are a leak

TOKEN = re.compile(
    r"""\s*(?:
    (?P<name>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<number>\d+(?:\.\d*)?(?:e-?\d+)?)
  | (?P<string>'[^'\n]*'|"[^"\n]*")
  | (?P<op>\*\*|//|==|!=|<=|>=|->|[-+*/%@=<>()\[\]{},.:;~&|^])
  | (?P<other>\S))""",
    re.X,
)
FIELD = ("field", "\0")  # an f-string's field: matches nothing


@dataclass(frozen=True)
class Leak:
    assignment: str
    exercise: str
    line: str
    where: str  # "text" or "message: <module>"
    shown: str  # the part of the text or message that holds it

    def __str__(self) -> str:
        return (
            f"{self.assignment}/{self.exercise}: the solution line `{self.line}` is given by "
            f"the {self.where}: …{self.shown}…"
        )


def lex(text: str) -> list[tuple[str, str, int, int]]:
    """(kind, value, start, end) of every token of text, prose or code."""
    out, pos = [], 0
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            break
        kind = m.lastgroup
        value, start = m.group(kind), m.start(kind)
        if kind == "name" and keyword.iskeyword(value):
            kind = "keyword"
        out.append((kind, value, start, m.end()))
        pos = m.end()
    return out


def normal(tokens) -> list[tuple[str, str]]:
    """Kinds and values, with bare names marked for renaming (attribute and keyword-argument
    names, and keywords, stay literal)."""
    out = []
    for i, (kind, value, *_rest) in enumerate(tokens):
        if kind == "name":
            after_dot = i > 0 and tokens[i - 1][1] == "."
            kwarg = i + 1 < len(tokens) and tokens[i + 1][1] == "=" and i > 0 and tokens[i - 1][1] in "(,"
            called = i + 1 < len(tokens) and tokens[i + 1][1] == "("
            out.append(("lit", value) if after_dot or kwarg or called else ("name", value))
        elif kind == "field":
            out.append(FIELD)
        else:
            out.append(("lit", value))
    return out


def run_length(a, b) -> int:
    """How many tokens of a and b agree from the start, bare names up to one renaming."""
    fwd, back, n = {}, {}, 0
    for (ka, va), (kb, vb) in zip(a, b):
        if ka != kb or FIELD in ((ka, va), (kb, vb)):
            break
        if ka == "name":
            if fwd.setdefault(va, vb) != vb or back.setdefault(vb, va) != va:
                break
        elif va != vb:
            break
        n += 1
    return n


def found(fragment, text) -> int | None:
    """Where in text (a token index) ``fragment`` leaks, or None."""
    need = len(fragment)
    for i in range(len(text)):
        for j in range(max(1, need - RUN_TOKENS + 1) if need > RUN_TOKENS else 1):
            if run_length(fragment[j:], text[i:]) >= min(need, RUN_TOKENS):
                return i
    return None


def solution_lines(source: str) -> list[tuple[str, list]]:
    """(line, its normalised fragments) of the non-trivial lines between the solution markers."""
    body, inside, in_init = [], False, False
    for line in source.splitlines():
        stripped = line.strip()
        if stripped.startswith("def "):
            in_init = stripped.startswith("def __init__")
        if stripped == "### BEGIN SOLUTION":
            inside = True
        elif stripped == "### END SOLUTION":
            inside = False
        elif inside and stripped and not stripped.startswith("#"):
            if not (in_init and re.match(r"self\.\w+\s*=", stripped)):
                body.append(stripped)
    out = []
    for line in body:
        code = _code_tokens(line)
        if code is None:
            continue
        fragments = [code]
        values = [v for _, v in code]
        if "=" in values and values.index("=") < len(values) - 1 and "(" not in values[: values.index("=")]:
            fragments.append(code[values.index("=") + 1 :])  # the right-hand side
        if values[:1] == ["return"]:
            fragments.append(code[1:])
        fragments = [f for f in fragments if _telling(f)]
        if fragments:
            out.append((line.split("  #")[0], fragments))
    return out


def _telling(fragment) -> bool:
    """Long enough to be a line of the solution rather than a shape every call has: at least
    MIN_TOKENS tokens, and a literal name or number among them (``x.mean(dim=-1)``) unless it
    is long (``f(a, b)`` alone is any call)."""
    words = [v for k, v in fragment if k == "lit" and (v[0].isalnum() or v[0] == "_")]
    return len(fragment) >= MIN_TOKENS and (bool(words) or len(fragment) >= 9)


def _code_tokens(line: str):
    """A line's tokens by Python's tokenizer, comments dropped (None for a line it refuses)."""
    try:
        raw = list(tokenize.generate_tokens(io.StringIO(line + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    toks = []
    for t in raw:
        if t.type == tokenize.NAME:
            toks.append(("keyword" if keyword.iskeyword(t.string) else "name", t.string))
        elif t.type in (tokenize.OP, tokenize.NUMBER, tokenize.STRING):
            toks.append(("op" if t.type == tokenize.OP else "literal", t.string))
    return normal(toks)


def _string_pieces(node) -> list | None:
    """The tokens of a string literal, an f-string's fields as FIELD."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [(k, v) for k, v, *_ in lex(node.value)]
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out += [(k, v) for k, v, *_ in lex(part.value)]
            else:
                out.append(FIELD)
        return out
    return None


def check_modules(assignment: str) -> list[Path]:
    """The visible-check modules a notebook imports, and the check modules they import."""
    setup = _notebook(assignment)["cells"][1]
    names = re.findall(r"course_utils\.checks\.(\w+)", "".join(setup["source"]))
    seen: list[Path] = []
    while names:
        path = ROOT / "course_utils" / "checks" / f"{names.pop()}.py"
        if path in seen or not path.exists():
            continue
        seen.append(path)
        names += [
            n for n in re.findall(r"^from \.(\w+) import", path.read_text(), re.M) if not n.startswith("_")
        ]
    return seen


def messages(path: Path) -> list[tuple[str, list]]:
    """(literal as written, normalised tokens) of every string literal of a check module."""
    tree = ast.parse(path.read_text())
    out, skip = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
        if isinstance(node, ast.Expr):  # a docstring, not a message
            skip.add(id(node.value))
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        pieces = _string_pieces(node)
        if pieces:
            out.append((ast.get_source_segment(path.read_text(), node) or "", normal(pieces)))
    return out


def _notebook(assignment: str) -> dict:
    return json.loads((ROOT / "solutions" / assignment / f"{assignment}.ipynb").read_text())


def exercises(assignment: str):
    """(grade_id, solution source, the markdown just before it) of every graded exercise."""
    cells, prose = _notebook(assignment)["cells"], []
    for cell in cells:
        source = "".join(cell["source"])
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "markdown":
            prose.append(source)
            continue
        if meta.get("solution") and not meta.get("grade"):
            yield meta["grade_id"], source, "\n\n".join(prose)
        prose = []


def assignments() -> list[str]:
    return sorted(p.name for p in (ROOT / "solutions").iterdir() if p.name[:2].isdigit())


def _shown(tokens, i: int, width: int = 70) -> str:
    text = " ".join(v for _, v, *_ in tokens[max(0, i - 3) : i + 14])
    return text[:width]


def leaks(assignment: str) -> list[Leak]:
    sources = [
        (f"message in {p.relative_to(ROOT)}", toks, lit)
        for p in check_modules(assignment)
        for lit, toks in messages(p)
    ]
    out = []
    for grade_id, source, prose in exercises(assignment):
        raw = lex(prose)
        text = normal([(k, v) for k, v, *_ in raw])
        for line, fragments in solution_lines(source):
            hit = next(((f, i) for f in fragments if (i := found(f, text)) is not None), None)
            if hit:
                out.append(Leak(assignment, grade_id, line, "exercise's text or hint", _shown(raw, hit[1])))
                continue
            for where, toks, literal in sources:
                if any(found(f, toks) is not None for f in fragments):
                    out.append(Leak(assignment, grade_id, line, where, literal[:90]))
                    break
    return out


if __name__ == "__main__":
    every = [leak for a in (sys.argv[1:] or assignments()) for leak in leaks(a)]
    for leak in every:
        print(leak)
    print(f"{len(every)} solution lines given by a text, hint or message")
