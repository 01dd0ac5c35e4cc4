"""09_gpt's shared code: the text and its tokenizer, training and perplexity, the shipped
checkpoint, the reference's cache, the attention plots, the cache's size and the stepper widget."""

from __future__ import annotations

import hashlib
import math

import pytest
import torch

from course_grading.reference import gpt as ref
from course_utils import language_model as lm
from course_utils.plots import gpt as plots


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    model, tok = lm.load_gpt(ref.GPT, device="cpu")
    return model, tok


def _small(seed=0, **sizes):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        kw = dict(d_model=16, num_heads=4, d_ff=32, num_layers=2, max_len=24)
        return ref.GPT(11, **{**kw, **sizes}).double().eval()


def test_text_tokenizer_and_split():
    text = lm.load_text()
    tok = lm.CharTokenizer(text)
    assert len(text) > 250_000 and len(tok) == len(set(text))
    assert tok.decode(tok.encode("ROMEO:\nO, she doth teach")) == "ROMEO:\nO, she doth teach"
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.encode("café")
    train, val = lm.split(tok.encode(text))
    assert len(train) + len(val) == len(text) and len(val) == len(text) - int(len(text) * 0.9)
    assert tok.decode(val[:50]) == text[len(train) : len(train) + 50]  # the END of the text


def test_windows_are_the_shifted_target():
    data = torch.arange(100)
    x, y = lm.windows(data, 8, 5, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 8) and torch.equal(y, x + 1)


def test_reference_cache_gives_the_uncached_logits_and_tokens():
    model = _small()
    ids = torch.randint(0, 11, (3, 10), generator=torch.Generator().manual_seed(1))
    whole, present = model(ids)
    logits, past = model(ids[:, :4])
    parts = [logits]
    for i in range(4, 10):
        logits, past = model(ids[:, i : i + 1], past)
        parts.append(logits)
    assert torch.allclose(torch.cat(parts, 1), whole, atol=1e-10)
    assert all(torch.allclose(a, b) for (a, b), (c, d) in zip(past, present) for a, b in ((a, c), (b, d)))
    for kwargs in ({"temperature": 0}, {"temperature": 1.2, "top_k": 5}, {"top_p": 0.7}):
        a, b = (
            ref.generate(
                model, ids[:, :3], 12, use_cache=use, generator=torch.Generator().manual_seed(3), **kwargs
            )
            for use in (True, False)
        )
        assert torch.equal(a, b), kwargs
    with pytest.raises(ValueError, match="max_len"):
        model(ids[:, :5], model(torch.zeros(3, 20, dtype=torch.long))[1])


def test_new_token_attention_matches_the_full_sequence_and_the_cache_size():
    model = _small(2)
    ids = torch.randint(0, 11, (1, 9), generator=torch.Generator().manual_seed(4))
    _, present, full = plots.cached_step(model, ids)
    assert len(full) == 2 and full[0].shape == (1, 4, 9, 9)
    for w in full:
        assert torch.allclose(w.sum(-1), torch.ones(1, 4, 9, dtype=w.dtype))
        assert float(w.triu(diagonal=1).abs().max()) == 0.0  # causal
    _, past, _ = plots.cached_step(model, ids[:, :6])
    _, _, new = plots.cached_step(model, ids[:, 6:], past)
    for w_new, w_full in zip(new, full):
        assert w_new.shape == (1, 4, 3, 9) and torch.allclose(w_new, w_full[:, :, 6:], atol=1e-10)
    assert plots.cache_bytes(present) == plots.cache_formula(2, 4, 4, 9, 8) == 2 * 2 * 4 * 4 * 9 * 8


def test_training_lowers_the_loss_and_perplexity_of_a_blank_model_is_the_vocabulary():
    model = _small(5).float()
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every character equally likely
    data = torch.randint(0, 11, (400,), generator=torch.Generator().manual_seed(5))
    assert math.isclose(lm.perplexity(model, data, block=16), 11, rel_tol=1e-5)
    text = torch.tensor([i % 7 for i in range(600)])  # a pattern a tiny model learns at once
    history = lm.train_lm(
        model, text, steps=30, block=16, batch_size=8, lr=2e-2, warmup=3, device="cpu", show="quiet"
    )
    assert history.steps == 30 and sum(history.losses[-5:]) < 0.5 * sum(history.losses[:5])
    assert lm.perplexity(model, text, block=16) < 2


def test_shipped_checkpoint_is_described_and_reads_like_its_text(trained):
    model, tok = trained
    info = lm.describe_gpt()
    blob = lm.CHECKPOINT.read_bytes()
    assert info["sha256"] == hashlib.sha256(blob).hexdigest() and info["bytes"] == len(blob)
    assert info["parameters"] == sum(p.numel() for p in model.parameters())
    text = lm.load_text()
    _, val = lm.split(tok.encode(text))
    counts = torch.bincount(val, minlength=len(tok)).double() + 1
    unigram = math.exp(-(counts / counts.sum()).log()[val].mean().item())
    ppl = lm.perplexity(model, val)
    assert ppl < 0.4 * unigram and abs(ppl - info["held_out_perplexity"]) < 0.05
    out = ref.generate(model, torch.tensor([tok.encode("ROMEO:\n")]), 120, temperature=0, generator=None)
    words = tok.decode(out[0]).split()
    assert (
        sum(
            w.strip(",.:;!?'").lower()
            in {"the", "and", "i", "to", "of", "my", "a", "you", "that", "is", "in", "not", "me", "with"}
            for w in words
        )
        >= 5
    ), words


def test_stepper_widget_writes_and_resets(trained):
    import matplotlib.pyplot as plt

    from course_grading.reference.generation import sample_next_token
    from course_utils.widgets.gpt import generation_stepper

    model, tok = trained
    box = generation_stepper(model, tok, sample_next_token, prompt="ROMEO:\n")
    c = box.controls
    first = c["image"].value
    assert first and "ROMEO:" in c["status"].value
    c["next10"].click()
    c["next"].click()
    written = c["status"].value
    assert c["image"].value != first and len(written) > len("ROMEO:") + 11
    c["temperature"].value = 0.3
    c["mode"].value = "greedy"
    c["reset"].click()
    assert "ROMEO:" in c["status"].value and c["status"].value != written
    c["prompt"].value = "Zounds€"
    assert "not in the vocabulary" in c["message"].value
    plt.close("all")


def test_widget_is_silent_under_grading(trained, monkeypatch):
    from course_utils.widgets.gpt import generation_stepper

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert generation_stepper(trained[0], trained[1]) is None


def test_the_configurations_defaults_are_the_shipped_checkpoints():
    """ToyConfig() and GPTConfig() are the runs behind the shipped checkpoints, as their
    docstrings say: the JSON written beside each checkpoint records the same fields."""
    import dataclasses
    import json

    from course_utils import language_model, training

    for config, checkpoint in (
        (training.ToyConfig(), training.CHECKPOINT),
        (language_model.GPTConfig(), language_model.CHECKPOINT),
    ):
        recorded = json.loads(checkpoint.with_suffix(".json").read_text())["config"]
        assert dataclasses.asdict(config) == recorded, type(config).__name__
