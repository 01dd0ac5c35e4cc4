"""The message-specificity measure: does the visible check name a buggy variant's bug?

Every buggy variant of `tests/variants/` that the visible half of its grade cell can see (not
one reaching for `course_grading`, not one listed in ``RIGHT_ON_THE_CPU``) is run against the
visible check alone, as a learner runs it. Its message is **generic** when it is a check's
fallback, the one said when nothing more particular was recognised: ``Check.close``'s
"values are off (largest difference …)", or generate's "wrong token in column …". Anything
else names a cause: a shape, a dtype, a crash on the learner's own line, a mistake the check
compared against. A fallback said for a case built for one bug can name it: ``NAMES_THE_BUG``
holds the words that do, for those variants.

``python tests/specificity.py [NN_topic …]`` prints every generic message and the count.
"""

from __future__ import annotations

import contextlib
import io
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import VARIANTS, load_variants, run_grade_cell  # noqa: E402

FALLBACKS = ("values are off (largest difference", "wrong token in column")


def visible_cases(assignments=None):
    """(assignment, grade_id, name, source) of every buggy variant the visible check can see."""
    for path in sorted(VARIANTS.glob("[0-9]*.py")):
        if assignments and path.stem not in assignments:
            continue
        module = load_variants(path)
        on_a_device = getattr(module, "RIGHT_ON_THE_CPU", {})
        for grade_id, found in module.BUGGY.items():
            for name, source in found.items():
                if "course_grading" not in source and name not in on_a_device.get(grade_id, ()):
                    yield path.stem, grade_id, name, source


def generic(message: str) -> bool:
    return any(f in message for f in FALLBACKS)


# a case built for one bug, whose fallback message names it
NAMES_THE_BUG = {
    ("01_embeddings", "square_E_transposed_when_square"): "rows and columns are easy to confuse",
    ("02_cosine_similarity", "absolute_value"): "keeps its sign",
    ("03_attention", "hard_coded_dim_1"): "not always the last axis",
    ("03_attention", "ignores_dim_always_last"): "not always the last axis",
    ("03_attention", "sums_over_everything"): "its sum over that dim",
    ("03_attention", "softmax_over_queries"): "softmax over the keys",
    ("06_encoder", "eps_ignored"): "keep the eps argument",
}


def specific(assignment: str, name: str, message: str) -> bool:
    if not message:
        return False
    says = NAMES_THE_BUG.get((assignment, name))
    return not generic(message) or (says is not None and says in message)


def measure(assignments=None):
    """{(assignment, grade_id, name): message} of the variants whose message is generic, and
    the number of variants measured."""
    out, count = {}, 0
    for assignment, grade_id, name, source in visible_cases(assignments):
        with contextlib.redirect_stdout(io.StringIO()):  # the setup cell's banner
            outcome = run_grade_cell(assignment, grade_id, source, visible_only=True)
        count += 1
        if not specific(assignment, name, outcome.message):
            out[assignment, grade_id, name] = outcome.message or "(passed the visible check)"
    return out, count


if __name__ == "__main__":
    found, count = measure(sys.argv[1:] or None)
    for (assignment, grade_id, name), message in sorted(found.items()):
        print(f"{assignment}/{grade_id}/{name}: {message[:160]}")
    print(f"{len(found)} of {count} buggy variants get a generic message (or none)")
