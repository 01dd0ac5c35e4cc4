"""What notebooks 03, 04 and 06 promise the learner, checked where the learner sees it.

* The visible half of each grade cell (what the learner runs before submitting) catches every
  buggy variant of tests/variants/ that the hidden half catches, except the few listed in
  ``HIDDEN_ONLY`` with the reason the learner's side cannot see them. A mistake that a hint
  invites (04: dropout on what notebook 03's function returns, instead of on the weights that
  multiply V) must cost the learner a failed visible check, not hidden points.
* Every exercise of 03, 04 and 06 carries a difficulty and time line in one format.
* 04 §6 runs the learner's MultiHeadAttention with MiniLM's trained weights
  (``course_utils.minilm.load_minilm_attention``): the same model as 06's, layer for layer.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import traceback

import pytest

from harness import ROOT, VARIANTS, Outcome, cells, load_variants, use_building_blocks

ASSIGNMENTS = ("03_attention", "04_multi_head_attention", "06_encoder")

# (assignment, grade cell, buggy variant): why only the hidden half can catch it
HIDDEN_ONLY = {
    (
        "03_attention",
        "test_causal_mask",
        "ignores_device",
    ): "needs a second device; the learner's machine may have only the CPU",
    (
        "04_multi_head_attention",
        "test_split_heads",
        "imports_the_reference",
    ): "the learner side cannot name the instructor's reference (course_grading)",
    (
        "04_multi_head_attention",
        "test_merge_heads",
        "calls_the_reference",
    ): "the learner side cannot name the instructor's reference (course_grading)",
    (
        "04_multi_head_attention",
        "test_multi_head_attention",
        "subclasses_the_reference",
    ): "the learner side cannot name the instructor's reference (course_grading)",
    (
        "06_encoder",
        "test_layer_norm",
        "wraps_reference",
    ): "the learner side cannot name the instructor's reference (course_grading)",
    (
        "04_multi_head_attention",
        "test_merge_heads",
        "hard_coded_d_model_12",
    ): "every stored merge_heads output has d_model = 12; another size needs an output stored "
    "by course_grading/checks/multi_head.py (expected_outputs)",
}

HIDDEN = re.compile(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS", re.S)


def run_visible_half(assignment: str, grade_id: str, replacement: str) -> Outcome:
    """Setup and solution cells, then ``replacement``, then the grade cell without its hidden
    part: what the learner sees when running the test cell."""
    c = cells(assignment)
    visible = HIDDEN.sub("", c["grades"][grade_id])
    assert "hidden" not in visible.lower(), visible
    ns: dict = {"__name__": "__main__"}
    use_building_blocks(assignment)
    for src in c["setup"] + list(c["solutions"].values()):
        exec(compile(src, f"<{assignment}>", "exec"), ns)
    exec(compile(replacement, "<variant>", "exec"), ns)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            exec(compile(visible, f"<{grade_id} visible>", "exec"), ns)
    except BaseException as exc:  # noqa: BLE001 - a check may raise anything
        return Outcome(False, traceback.format_exception_only(type(exc), exc)[-1].strip())
    if err.getvalue():
        return Outcome(False, "stderr: " + err.getvalue().strip()[:300])
    return Outcome(True, "")


def _buggy():
    """Every buggy variant but those right on the CPU (``RIGHT_ON_THE_CPU``: a device bug shows
    on the hidden checks' second device, which the learner's side does not have)."""
    for assignment in ASSIGNMENTS:
        variants = load_variants(VARIANTS / f"{assignment}.py")
        on_a_device = getattr(variants, "RIGHT_ON_THE_CPU", {})
        for grade_id, found in variants.BUGGY.items():
            for name, src in found.items():
                if name in on_a_device.get(grade_id, ()):
                    continue
                yield pytest.param(assignment, grade_id, name, src, id=f"{assignment}-{grade_id}-{name}")


@pytest.mark.parametrize("assignment,grade_id,name,src", list(_buggy()))
def test_the_visible_checks_catch_what_the_hidden_ones_catch(assignment, grade_id, name, src):
    outcome = run_visible_half(assignment, grade_id, src)
    if (assignment, grade_id, name) in HIDDEN_ONLY:
        assert outcome.passed, (
            f"{name} now fails the visible check ({outcome.message}): take it off HIDDEN_ONLY"
        )
    else:
        assert not outcome.passed, (
            f"the visible half of {grade_id} passes the buggy variant {name}: the learner "
            "would see all visible checks pass and lose hidden points"
        )
        assert outcome.message


def test_the_mistake_the_hint_invited_is_named_by_the_visible_check():
    """04's old hint ("attend, dropout, merge") led to dropout on 03's output: the visible check
    fails it and says where dropout belongs."""
    src = load_variants(VARIANTS / "04_multi_head_attention.py").BUGGY["test_multi_head_attention"][
        "dropout_on_the_attention_output"
    ]
    outcome = run_visible_half("04_multi_head_attention", "test_multi_head_attention", src)
    assert not outcome.passed
    assert "attention weights" in outcome.message and "training mode" in outcome.message, outcome.message


DIFFICULTY = re.compile(r"^Difficulty: [●○]{5} · about \d+ minutes$")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_exercise_has_a_difficulty_and_time_line(assignment):
    for folder in ("solutions", "notebooks"):
        nb = json.loads((ROOT / folder / assignment / f"{assignment}.ipynb").read_text())
        headed = 0
        for cell in nb["cells"]:
            text = "".join(cell["source"])
            if cell["cell_type"] != "markdown" or "### Exercise" not in text:
                continue
            for part in text.split("### Exercise")[1:]:
                headed += 1
                lines = [line for line in part.splitlines()[1:] if line.strip()]
                assert lines and DIFFICULTY.match(lines[0]), (
                    f"{folder}/{assignment}: exercise{part.splitlines()[0]} should be followed "
                    f"by a line like 'Difficulty: ●●○○○ · about 10 minutes', got {lines[:1]}"
                )
                filled = lines[0].split()[1]
                assert filled == "●" * filled.count("●") + "○" * filled.count("○")
        assert headed == len(cells(assignment)["grades"]), f"{folder}/{assignment}"


def test_minilm_attention_from_a_multi_head_attention_is_the_whole_model():
    torch = pytest.importorskip("torch")
    from course_grading.reference.encoder import EncoderLayer, LayerNorm
    from course_grading.reference.multi_head import MultiHeadAttention
    from course_utils import minilm

    if not minilm.minilm_available():
        pytest.skip("the MiniLM weights are not installed")
    text = "the animal did not cross the street because it was too tired"
    attention_only = minilm.load_minilm_attention(MultiHeadAttention)
    whole = minilm.load_minilm(EncoderLayer, LayerNorm)
    ids, mask = whole.tokenizer(text)
    with torch.no_grad():
        assert torch.allclose(attention_only(ids, mask), whole(ids, mask), atol=1e-4)
    tokens, weights = minilm.attention_weights(attention_only, text)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and "animal" in tokens
    assert tuple(weights.shape) == (minilm.NUM_LAYERS, minilm.NUM_HEADS, len(tokens), len(tokens))
    assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5)
    _, same = minilm.attention_weights(whole, text)  # the weights 06's layers return
    assert torch.allclose(weights, same, atol=1e-5)


def test_the_model_is_read_tensor_by_tensor_into_its_parameters():
    """load_minilm reads each tensor from the file straight into its parameter (04 and 06 load
    MiniLM; a copy of all its weights beside the model cost their kernels ~90 MB at the peak)."""
    torch = pytest.importorskip("torch")
    from course_utils import minilm

    if not minilm.minilm_available():
        pytest.skip("the MiniLM weights are not installed")
    path = minilm.model_dir() / "model.safetensors"
    lazy, eager = minilm.SafetensorsFile(path), minilm.read_safetensors(path)
    assert set(lazy.header) == set(eager)
    for name in (
        "embeddings.position_ids",
        "encoder.layer.2.attention.self.key.weight",
        "encoder.layer.5.output.LayerNorm.bias",
    ):
        assert (lazy[name] == eager[name]).all() and lazy[name].dtype == eager[name].dtype
        if eager[name].dtype.kind == "f":
            param = torch.empty(eager[name].shape)
            lazy.read_into(name, param)
            assert torch.equal(param, torch.from_numpy(eager[name]))
