"""Variants of notebooks 01-04 graded by the real pipeline, as students.

tests/test_graders.py runs every variant's grade cell in-process. Here a handful of them, the
correct implementations taken from public code and the bugs the checks were changed for among
them, are put into submissions (each variant after the solution it replaces, in that solution's
cell) and graded by one `course autograde --no-audit` run over the four assignments: nbgrader,
the sandboxed kernels and the hidden checks imported from course_grading in the hidden part of
each test cell. A correct variant must keep its grade cell's points, a buggy one lose them with
a message that names the bug.
"""

from __future__ import annotations

import csv
import shutil

import nbformat
import pytest

from conftest import ROOT
from course_grading.authoring.nbformat_tools import write_notebook
from course_grading.commands.cli import main
from harness import VARIANTS, load_variants

pytestmark = pytest.mark.slow

# {assignment: {student: {grade_id: (kind, variant, what the message must say if it fails)}}};
# a student's other exercises keep the solution. Later exercises call earlier ones (most_similar
# calls cosine_similarity_matrix, MultiHeadAttention split_heads), so a student's bugs sit where
# nothing that student also submits depends on them.
STUDENTS = {
    "01_embeddings": {
        # (not np.eye(vocab_size)[ids]: correct, but the notebook's 20,000-word demo then
        # allocates 3.2 GB and the kernel dies, which makes the whole submission an error row)
        "correct": {
            "test_one_hot": ("CORRECT", "zeros_and_put_along_axis", None),
            "test_embed": ("CORRECT", "take_axis_0", None),
        },
        "buggy": {
            "test_one_hot": ("BUGGY", "bool_dtype", "should return floats"),
            "test_embed": ("BUGGY", "square_E_transposed_when_square", "rows and columns"),
            "test_encode": ("BUGGY", "numpy_ints_in_list", "plain Python ints"),
        },
    },
    "02_cosine_similarity": {
        "correct": {
            "test_cosine_similarity": ("CORRECT", "warns_and_prints_to_stderr", None),
            "test_most_similar": ("CORRECT", "argpartition_then_sort", None),
        },
        "buggy": {
            "test_cosine_similarity": ("BUGGY", "sum_of_norms", "divided by the SUM of the norms"),
            "test_analogy": ("BUGGY", "excludes_after_top_k", "before taking the top k"),
        },
        "buggy_2": {
            "test_most_similar": ("BUGGY", "excluded_set_to_zero", "0 is not enough"),
            "test_analogy": ("CORRECT", "own_cosine_loop", None),
        },
    },
    "03_attention": {
        "public_code": {
            "test_softmax": ("CORRECT", "computes_in_float32_like_hf_upcast", None),
            "test_scaled_dot_product_attention": ("CORRECT", "float32_sqrt_d_k_tensor", None),
            "test_causal_mask": ("CORRECT", "pytorch_square_subsequent_mask", None),
        },
        "public_code_2": {
            "test_softmax": ("CORRECT", "jax_stop_gradient_max", None),
            "test_scaled_dot_product_attention": ("CORRECT", "hf_eager_attention_softmax_in_float32", None),
            "test_causal_mask": ("CORRECT", "annotated_transformer_subsequent_mask", None),
        },
        "buggy": {
            "test_softmax": ("BUGGY", "one_global_max_for_all_rows", "its own maximum"),
            "test_simple_self_attention": ("BUGGY", "scaled_by_sqrt_d", "has no scaling"),
            "test_scaled_dot_product_attention": (
                "BUGGY",
                "mask_applied_after_softmax",
                "the mask is applied after the softmax",
            ),
            "test_causal_mask": ("BUGGY", "diagonal_excluded", "diagonal is True"),
        },
    },
    "04_multi_head_attention": {
        "annotated": {
            "test_multi_head_attention": ("CORRECT", "annotated_transformer", None),
            "test_split_heads": ("BUGGY", "heads_interleaved", "every h-th feature"),
        },
        "torch_forward": {
            "test_multi_head_attention": ("CORRECT", "pytorch_multi_head_attention_forward", None),
            "test_merge_heads": ("BUGGY", "reshape_without_transpose", "wrong places"),
        },
        "float32_scale": {
            "test_multi_head_attention": ("CORRECT", "scale_kept_as_float32_tensor", None),
            "test_split_heads": ("CORRECT", "unflatten_and_transpose", None),
            "test_merge_heads": ("CORRECT", "cat_of_heads", None),
        },
        "after_dropout": {
            "test_multi_head_attention": ("CORRECT", "returns_weights_after_dropout_like_torch", None)
        },
        "second_dropout": {
            "test_multi_head_attention": (
                "BUGGY",
                "returns_weights_of_a_second_dropout",
                "two different masks",
            )
        },
        "dropout_twice": {"test_multi_head_attention": ("BUGGY", "dropout_applied_twice", "dropout twice")},
        # issue 18, section 3: full marks on the CPU until the hidden checks' second device
        "cpu_scale": {
            "test_multi_head_attention": (
                "BUGGY",
                "scale_is_a_cpu_tensor",
                "torch.Tensor([self.d_head]) ** 0.5`",
            )
        },
    },
}


def _submission(assignment: str, replacements: dict) -> nbformat.NotebookNode:
    """The solution notebook with each variant appended to the solution cell before its grade cell."""
    nb = nbformat.read(str(ROOT / "solutions" / assignment / f"{assignment}.ipynb"), as_version=4)
    variants = load_variants(VARIANTS / f"{assignment}.py")
    last_solution = None
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            last_solution = cell
        elif meta.get("grade") and meta["grade_id"] in replacements:
            kind, name, _ = replacements[meta["grade_id"]]
            last_solution.source += "\n\n" + getattr(variants, kind)[meta["grade_id"]][name].strip() + "\n"
    return nb


def test_variants_graded_by_course_autograde(tmp_path, capsys):
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    for assignment, students in STUDENTS.items():
        shutil.copytree(ROOT / "solutions" / assignment, course / "solutions" / assignment)
        for student, replacements in students.items():
            dest = course / "submitted" / student / assignment
            dest.mkdir(parents=True)
            write_notebook(_submission(assignment, replacements), dest / f"{assignment}.ipynb")

    assert (
        main(["--root", str(course), "autograde", *STUDENTS, "--jobs", "2", "--no-audit", "--no-report"]) == 0
    )
    capsys.readouterr()

    rows = {
        (r["student"], r["assignment"], r["exercise"]): r
        for r in csv.DictReader((course / "reports" / "grades.csv").open())
    }
    wrong = []
    for assignment, students in STUDENTS.items():
        for student, replacements in students.items():
            graded = {k[2]: r for k, r in rows.items() if k[:2] == (student, assignment)}
            assert graded, f"{student}/{assignment} was not graded: {sorted(rows)[:5]}"
            for grade_id, row in graded.items():
                if grade_id.startswith("written_"):  # graded by hand (tests/test_written_answers.py)
                    assert row["message"] == "needs manual grading", row
                    continue
                kind, name, says = replacements.get(grade_id, ("CORRECT", "the solution", None))
                full = float(row["score"]) == float(row["max_score"]) > 0
                if kind == "CORRECT" and not full:
                    wrong.append(f"{assignment}/{grade_id} {name}: lost points: {row['message']}")
                if kind == "BUGGY" and (float(row["score"]) != 0 or says not in row["message"]):
                    wrong.append(
                        f"{assignment}/{grade_id} {name}: scored {row['score']}, "
                        f"message {row['message']!r} (should say {says!r})"
                    )
    assert not wrong, "\n".join(wrong)
