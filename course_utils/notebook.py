"""What every notebook's setup cell calls: ``setup_notebook(seed=0)``.

It seeds Python, NumPy and torch, sizes torch's threads to the CPUs the kernel may really use
(``course_utils.device``), and makes a cell that calls an exercise the learner has not written
yet say so in one line ("this cell needs `softmax`, exercise 1 above — not written yet")
instead of showing a ``NotImplementedError`` traceback; a later cell that needs a variable such
a cell stopped before defining says that too. Together with the ``raises-exception`` tag that
the cells running the learner's code carry, "Run All" goes through the whole notebook:
everything that depends only on finished exercises runs, the rest says what it waits for.

Nothing here changes a grade: the cell still ends in an error, as before, only its message is
shorter.

``wrapped`` lays out every message a learner reads in a cell's error output (these notes and
the checks' ``CheckFailed``) as lines broken between words: JupyterLab shows error output with
``word-break: break-all``, so a long line would otherwise be cut wherever the pane ends,
inside a word ("`r eturn").
"""

from __future__ import annotations

import ast
import re

from .device import seed_everything, use_available_cpus

# The graded exercises of each notebook, by their number in it (the contract's names).
EXERCISES = {
    "encode": 1,
    "one_hot": 2,
    "embed": 3,
    "cosine_similarity": 1,
    "cosine_similarity_matrix": 2,
    "most_similar": 3,
    "analogy": 4,
    "softmax": 1,
    "simple_self_attention": 2,
    "scaled_dot_product_attention": 3,
    "causal_mask": 4,
    "split_heads": 1,
    "merge_heads": 2,
    "MultiHeadAttention": 3,
    "sinusoidal_positional_encoding": 1,
    "PositionalEncoding": 2,
    "LayerNorm": 1,
    "FeedForward": 2,
    "EncoderLayer": 3,
    "Encoder": 4,
    "DecoderLayer": 1,
    "Decoder": 2,
    "make_padding_mask": 3,
    "Transformer": 4,
    "greedy_decode": 1,
    "sample_next_token": 2,
    "beam_search": 3,
    "GPTBlock": 1,
    "GPT": 2,
    "generate": 3,
}


# A message's lines: short enough for the narrowest place a learner reads them, an output
# of nbgrader's feedback page (about 76 characters of monospace; a notebook pane beside
# JupyterLab's file browser at 1280 px holds about 105).
WIDTH = 72
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# a word: a run of non-blanks, with any `code span` in it kept whole, blanks included
_WORD = re.compile(r"(?:[^\s`]*`[^`\n]*`)+[^\s`]*|\S+")


def wrapped(text: str, width: int = WIDTH) -> list[str]:
    """``text`` as lines of at most ``width`` visible characters (colour codes take none),
    broken only between words; a `code span` stays whole, and a word longer than ``width``
    gets a line of its own. Its own line breaks are kept; runs of blanks become one."""
    lines = []
    for paragraph in text.split("\n"):
        line, size = "", 0
        for word in _WORD.findall(paragraph):
            n = len(_ANSI.sub("", word))
            if line and size + 1 + n > width:
                lines.append(line)
                line, size = word, n
            else:
                line, size = (f"{line} {word}", size + 1 + n) if line else (word, n)
        lines.append(line)
    return lines


def setup_notebook(seed: int = 0) -> None:
    """Seed everything, size torch's threads, and explain unwritten exercises in one line."""
    from .checks import kit

    kit.own_threads_now()  # outside grading: the threads alive now are the kernel's own
    seed_everything(seed)
    use_available_cpus()
    explain_missing_exercises()


def missing_exercise(tb) -> str | None:
    """The exercise whose unwritten body raised, from a ``NotImplementedError``'s traceback:
    the innermost frame that is an exercise function, or a method of an exercise class."""
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    for frame in reversed(frames):
        name = frame.f_code.co_name
        if name in EXERCISES:
            return name
        owner = type(frame.f_locals.get("self", None)).__name__
        if owner in EXERCISES:
            return owner
    return None


def note(exercise: str) -> str:
    """The one line shown instead of a ``NotImplementedError``'s traceback."""
    return (
        f"\x1b[1mthis cell needs `{exercise}`, exercise {EXERCISES[exercise]} above — "
        "not written yet\x1b[0m (write it, then run this cell again)"
    )


def cell_that_binds(history: list, name: str, before: int | None = None) -> int | None:
    """The execution count of the latest cell in ``history`` (IPython's ``In``), before cell
    ``before`` (the one running), that assigns, defines or imports ``name`` at its top level;
    None if none does."""
    last = len(history) - 1 if before is None else min(before - 1, len(history) - 1)
    for count in range(last, 0, -1):
        try:
            tree = ast.parse(history[count])
        except (SyntaxError, ValueError, TypeError):
            continue
        if name in _top_level_names(tree):
            return count
    return None


def _top_level_names(node) -> set[str]:
    """Names a cell binds in the notebook's namespace (not inside its functions or classes)."""
    found = set()
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Name) and not isinstance(child.ctx, ast.Load):
            found.add(child.id)
        elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.add(child.name)
            continue
        elif isinstance(child, (ast.Import, ast.ImportFrom)):
            found |= {(a.asname or a.name).split(".")[0] for a in child.names}
        elif isinstance(child, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        found |= _top_level_names(child)
    return found


def _handler(shell, etype, value, tb, tb_offset=None):
    """IPython calls this for a NotImplementedError or a NameError: an exercise's stub, or a
    name that an earlier cell stopped before defining, becomes one line; anything else gets
    the usual traceback. What it shows is the cell's error output (the cell still fails)."""
    stb = None
    if issubclass(etype, NotImplementedError):
        exercise = missing_exercise(tb)
        stb = wrapped(note(exercise)) if exercise else None
    elif not issubclass(etype, UnboundLocalError) and getattr(value, "name", None):
        count = cell_that_binds(
            shell.user_ns.get("In", []), value.name, before=getattr(shell, "execution_count", None)
        )
        if count is not None:
            stb = wrapped(
                f"\x1b[1mthis cell needs `{value.name}`, which cell [{count}] above "
                "stopped before defining\x1b[0m (once that cell runs to the end, run "
                "this one again)"
            )
    if stb is None:
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return None
    shell._showtraceback(etype, value, stb)  # how IPython (and ipykernel) show an error
    return stb


def explain_missing_exercises() -> bool:
    """In IPython, show a call to an unwritten exercise (and a name that a cell stopped before
    defining) as one line; returns whether it could (False outside IPython)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc((NotImplementedError, NameError), _handler)
    return True
