"""Building blocks: each release provides the earlier components its notebook builds on, never
its own exercises or later ones, and the instructor chooses which."""

from __future__ import annotations

import pytest
import torch

from conftest import ROOT, make_course, tiny_notebook
from course_grading.authoring import building_blocks as bb
from course_grading.authoring import release
from course_grading.errors import GradingError
from course_grading.reference import decoder, multi_head


def _module(text: str) -> dict:
    namespace: dict = {}
    exec(compile(text, "building_blocks.py", "exec"), namespace)
    return namespace


@pytest.mark.parametrize("assignment", sorted(bb.NEEDED))
def test_committed_blocks_are_rendered_and_only_hold_earlier_components(assignment):
    text = bb.render(assignment, bb.NEEDED[assignment])
    assert (ROOT / "solutions" / assignment / bb.FILE_NAME).read_text() == text
    assert (ROOT / "notebooks" / assignment / bb.FILE_NAME).read_text() == text
    names = _module(text)
    for name in bb.NEEDED[assignment]:
        assert name in names, name
    for name, component in bb.COMPONENTS.items():
        if component.assignment >= assignment:
            assert f"def {name}(" not in text and f"class {name}(" not in text, name


def test_blocks_behave_like_the_reference():
    blocks = _module(bb.render("08_generation", bb.NEEDED["08_generation"]))
    torch.manual_seed(0)
    ours = blocks["Transformer"](11, 13, d_model=16, num_heads=2, d_ff=32, num_layers=1).eval()
    reference = decoder.Transformer(11, 13, d_model=16, num_heads=2, d_ff=32, num_layers=1).eval()
    reference.load_state_dict(ours.state_dict())
    src, tgt = torch.randint(1, 11, (2, 5)), torch.randint(1, 13, (2, 4))
    mask = blocks["causal_mask"](4)
    # exact by design: the same operations on the same inputs in one process
    assert torch.equal(ours(src, tgt, None, mask), reference(src, tgt, None, mask))


def test_an_assignment_never_provides_its_own_or_a_later_exercise():
    with pytest.raises(bb.BuildingBlocksError, match="earlier assignments"):
        bb.render("06_encoder", ["EncoderLayer"])
    with pytest.raises(bb.BuildingBlocksError, match="earlier assignments"):
        bb.render("05_positional_encoding", ["Transformer"])  # and not through its needs either
    with pytest.raises(bb.BuildingBlocksError, match="unknown"):
        bb.render("06_encoder", ["Nonsense"])


def test_a_withheld_block_is_a_stub_that_says_what_to_paste():
    text = bb.render("06_encoder", ["PositionalEncoding", "sinusoidal_positional_encoding"])
    blocks = _module(text)
    assert blocks["PositionalEncoding"](8)(torch.zeros(1, 3, 8)).shape == (1, 3, 8)
    with pytest.raises(NotImplementedError, match="04_multi_head_attention"):
        blocks["MultiHeadAttention"](8, 2)
    assert "def scaled_dot_product_attention(" not in text  # nothing of what was withheld


def test_release_renders_what_the_configuration_provides(tmp_path):
    course = make_course(tmp_path / "course", {"06_encoder": tiny_notebook()})
    config = course / "nbgrader_config.py"
    config.write_text(
        config.read_text() + '\nc.BuildingBlocks.provide = {"06_encoder": ["MultiHeadAttention"]}\n'
    )
    written = release.release(course, check_only=False)
    assert "solutions/06_encoder/building_blocks.py" in written
    assert "notebooks/06_encoder/building_blocks.py" in written
    blocks = _module((course / "notebooks" / "06_encoder" / bb.FILE_NAME).read_text())
    mha = blocks["MultiHeadAttention"](8, 2)
    assert set(mha.state_dict()) == set(multi_head.MultiHeadAttention(8, 2).state_dict())
    with pytest.raises(NotImplementedError):
        blocks["PositionalEncoding"](8)
    assert release.release(course, check_only=True) == []
    config.write_text(config.read_text() + 'c.BuildingBlocks.provide = {"06_encoder": ["Encoder"]}\n')
    with pytest.raises(GradingError, match="earlier assignments"):
        release.release(course)
