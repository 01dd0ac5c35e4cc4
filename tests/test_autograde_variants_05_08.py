"""Through the real grading pipeline: correct and buggy implementations of 05-09, taken from
tests/variants/, graded as students of one `course autograde --no-audit` run (sandboxed warm
kernels, nbgrader, the gradebook): a correct one keeps full marks, a buggy one loses the points
of its exercise with a message.

Each student is the solution notebook with one variant pasted in a new cell right after the
exercise's solution cell, as a student would have written it there.
"""

from __future__ import annotations

import csv
import shutil

import nbformat
import pytest

from conftest import ROOT
from course_grading.audit.exercises import EXERCISES
from course_grading.commands.cli import main
from harness import VARIANTS, load_variants

pytestmark = pytest.mark.slow

# (assignment, grade cell, variant, kind): a handful of the variants behind each fix
CASES = [
    ("05_positional_encoding", "test_positional_encoding", "annotated_transformer", "CORRECT"),
    ("05_positional_encoding", "test_positional_encoding", "float64_numpy_buffer", "BUGGY"),
    ("06_encoder", "test_encoder", "annotated_transformer_float32_table", "CORRECT"),
    ("06_encoder", "test_encoder", "exact_table_in_the_input_dtype", "CORRECT"),
    ("06_encoder", "test_layer_norm", "default_eps_1e-6", "BUGGY"),
    ("07_decoder", "test_transformer", "annotated_transformer_float32_tables", "CORRECT"),
    ("07_decoder", "test_decoder", "annotated_transformer_float32_table", "CORRECT"),
    ("07_decoder", "test_transformer", "generator_with_log_softmax", "BUGGY"),
    ("08_generation", "test_greedy_decode", "pytorch_tutorial_one_sentence_at_a_time", "CORRECT"),
    ("08_generation", "test_greedy_decode", "no_causal_mask", "BUGGY"),
    ("08_generation", "test_greedy_decode", "causal_mask_made_on_the_cpu", "BUGGY"),
    ("08_generation", "test_sample_next_token", "hugging_face_logits_warpers", "CORRECT"),
    ("08_generation", "test_sample_next_token", "top_p_before_top_k", "BUGGY"),
    ("08_generation", "test_beam_search", "no_causal_mask", "BUGGY"),
    ("09_gpt", "test_generate", "rasbt_llms_from_scratch_generate_cached", "CORRECT"),
    ("09_gpt", "test_gpt_block", "mask_not_shifted_by_the_cache", "BUGGY"),
]


def _student(assignment: str, grade_id: str, source: str) -> nbformat.NotebookNode:
    """The solution notebook with ``source`` in a new cell after the exercise's solution."""
    nb = nbformat.read(str(ROOT / "solutions" / assignment / f"{assignment}.ipynb"), 4)
    name = EXERCISES[assignment][grade_id].function
    index = next(
        i
        for i, cell in enumerate(nb.cells)
        if cell.metadata.get("nbgrader", {}).get("solution")
        and (f"def {name}(" in cell.source or f"class {name}(" in cell.source)
    )
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source))
    return nb


def test_variants_keep_or_lose_their_points_through_course_autograde(tmp_path, capsys):
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions", course / "solutions")
    students = {}
    for n, (assignment, grade_id, variant, kind) in enumerate(CASES):
        source = getattr(load_variants(VARIANTS / f"{assignment}.py"), kind)[grade_id][variant]
        student = f"s{n:02d}_{kind.lower()}"
        folder = course / "submitted" / student / assignment
        folder.mkdir(parents=True)
        nbformat.write(_student(assignment, grade_id, source), str(folder / f"{assignment}.ipynb"))
        students[(student, assignment)] = (grade_id, variant, kind)

    main(["--root", str(course), "autograde", *sorted({c[0] for c in CASES}), "--no-audit", "--jobs", "2"])
    capsys.readouterr()

    rows = list(csv.DictReader((course / "reports" / "grades.csv").open()))
    graded = {}
    for row in rows:
        graded.setdefault((row["student"], row["assignment"]), {})[row["exercise"]] = row
    assert set(graded) == set(students)
    for key, (grade_id, variant, kind) in students.items():
        # the written answers are graded by hand (tests/test_written_answers.py)
        rows = {k: r for k, r in graded[key].items() if not k.startswith("written_")}
        if kind == "CORRECT":  # full marks everywhere
            for row in rows.values():
                assert float(row["score"]) == float(row["max_score"]) > 0, (key, variant, row)
        else:  # its exercise scores zero and says why (later exercises built on it may follow)
            row = rows[grade_id]
            assert float(row["score"]) == 0 and row["message"], (key, variant, row)
            first = next(iter(rows.values()))
            if first["exercise"] != grade_id:  # what comes before it is untouched
                assert float(first["score"]) == float(first["max_score"]), (key, variant, first)
