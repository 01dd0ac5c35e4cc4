"""08_generation's shared code: the dates task, tokenisers, reference decoders, training,
the shipped checkpoint, plots and the stepper widget."""

from __future__ import annotations

import itertools
import math

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from course_grading.reference import generation as G
from course_grading.reference.attention import causal_mask
from course_grading.reference.decoder import Transformer, make_padding_mask
from course_utils import training
from course_utils.toy_task import (
    BOS_ID,
    EOS_ID,
    HELD_OUT_DATES,
    PAD_ID,
    LookupModel,
    cardinal,
    make_pairs,
    ordinal,
    source_tokenizer,
    split_dates,
    target_tokenizer,
    year_words,
)

# the learner's components, as 08's building blocks and exercises provide them
MASKS = dict(causal_mask=causal_mask, make_padding_mask=make_padding_mask)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread (conftest)


# -- the task --------------------------------------------------------------------------------
def test_pairs_are_deterministic_and_vary_with_the_seed():
    assert make_pairs(50, seed=3) == make_pairs(50, seed=3)
    assert make_pairs(50, seed=3) != make_pairs(50, seed=4)
    assert make_pairs(20, "test") == make_pairs(20, "test")


def test_held_out_dates_never_appear_in_training():
    train_dates, test_dates = split_dates()
    assert len(test_dates) == HELD_OUT_DATES
    assert not set(train_dates) & set(test_dates)
    train_targets = {t for _, t in make_pairs(20_000, "train")}
    test_targets = {t for _, t in make_pairs(HELD_OUT_DATES, "test")}
    assert len(test_targets) == HELD_OUT_DATES  # each held-out date once
    assert not train_targets & test_targets


def test_surface_forms_and_targets():
    import datetime as dt
    import random

    assert cardinal(42) == "forty-two" and ordinal(23) == "twenty-third" and ordinal(30) == "thirtieth"
    assert year_words(1991, random.Random(0)) == "nineteen ninety-one"
    assert year_words(1905, random.Random(0)) in ("nineteen oh five", "nineteen hundred and five")
    pairs = make_pairs(2_000, seed=1)
    for src, tgt in pairs[:200]:
        dt.date.fromisoformat(tgt)  # a valid ISO date
    assert len({s.split()[0] for s, _ in pairs}) > 20  # many surface forms


def test_tokenisers_round_trip_and_know_every_token():
    src_tok, tgt_tok = source_tokenizer(), target_tokenizer()
    for tok in (src_tok, tgt_tok):
        assert tok.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
        assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (PAD_ID, BOS_ID, EOS_ID, 3)
    for src, tgt in make_pairs(500, seed=2):
        ids = src_tok.encode(src)
        assert src_tok.unk_id not in ids
        assert src_tok.decode(ids) == " ".join(src_tok.tokenize(src))
        t = tgt_tok.encode(tgt, bos=True, eos=True)
        assert t[0] == BOS_ID and t[-1] == EOS_ID and tgt_tok.decode(t) == tgt
    assert src_tok.tokenize("March 23rd, 1991") == ["march", "2", "3", "rd", ",", "1", "9", "9", "1"]
    assert src_tok.encode("zzz") == [src_tok.unk_id]


# -- reference decoders ----------------------------------------------------------------------
def _brute_force(model, src, max_len, lp, V):
    source = tuple(src[0].tolist())
    best, best_score = None, -math.inf
    for n in range(1, max_len):
        for tail in itertools.product(range(V), repeat=n):
            if EOS_ID in tail[:-1] or (tail[-1] != EOS_ID and n < max_len - 1):
                continue
            seq = (BOS_ID,) + tail
            total = sum(
                float(
                    torch.log_softmax(
                        torch.tensor(model.logits_for(source, seq[:i]), dtype=torch.float64), -1
                    )[seq[i]]
                )
                for i in range(1, len(seq))
            )
            if total / n**lp > best_score:
                best, best_score = list(seq), total / n**lp
    return best


@pytest.mark.parametrize("seed,lp", [(0, 1.0), (1, 0.0), (2, 0.5), (3, 2.0)])
def test_wide_beam_equals_brute_force(seed, lp):
    model = LookupModel(4, seed=seed, eos_id=EOS_ID, eos_bias=0.5, scale=2.0)
    src = torch.tensor([[3, 4]])
    got = G.beam_search(model, src, 4**4, 5, BOS_ID, EOS_ID, lp).tolist()
    assert got == _brute_force(model, src, 5, lp, 4)


def test_the_checks_brute_force_cases_discriminate_length_normalisation():
    """Some brute-force case of the visible beam check has a different winner without the
    normalisation, so a search that forgets it fails."""
    src = torch.tensor([[3, 4, 5]])
    differs = [
        _brute_force(m, src, 5, 1.0, 4) != _brute_force(m, src, 5, 0.0, 4)
        for m in (LookupModel(4, seed=s, eos_id=EOS_ID, eos_bias=0.5, scale=2.0) for s in (0, 3))
    ]
    assert any(differs)


@pytest.mark.parametrize("seed", range(5))
def test_beam_size_one_is_greedy(seed):
    model = LookupModel(7, seed=seed, eos_id=EOS_ID, eos_bias=1.0)
    src = torch.tensor([[3, 4, 5]])
    assert (
        G.beam_search(model, src, 1, 9, BOS_ID, EOS_ID).tolist()
        == G.greedy_decode(model, src, 9, BOS_ID, EOS_ID)[0].tolist()
    )


def test_greedy_stops_and_pads_with_eos():
    scripts = {(5, 6): [4, EOS_ID], (6, 5): [4, 5, 6, EOS_ID]}
    model = LookupModel(8, seed=0, scripts=scripts, eos_id=EOS_ID)
    ys = G.greedy_decode(model, torch.tensor([[5, 6], [6, 5]]), 10, BOS_ID, EOS_ID)
    assert ys.tolist() == [[1, 4, 2, 2, 2], [1, 4, 5, 6, 2]]
    never = LookupModel(8, seed=0, eos_id=EOS_ID, eos_bias=-50.0)
    assert G.greedy_decode(never, torch.tensor([[5, 6]]), 6, BOS_ID, EOS_ID).shape == (1, 6)


def test_sampling_filters_and_frequencies():
    probs = torch.tensor([0.15, 0.5, 0.05, 0.3])
    kept = torch.softmax(G.filter_logits(probs.log()[None], top_p=0.7), -1)[0]
    assert torch.allclose(kept, torch.tensor([0.0, 0.625, 0.0, 0.375]))
    kept = torch.softmax(G.filter_logits(probs.log()[None], top_k=3), -1)[0]
    assert kept[2] == 0 and torch.isclose(kept.sum(), torch.tensor(1.0))
    z = torch.tensor([1.0, 2.0, 0.0])
    assert torch.allclose(
        torch.softmax(G.filter_logits(z[None], temperature=0.5), -1)[0], torch.softmax(z * 2, -1)
    )
    g = torch.Generator().manual_seed(0)
    draws = G.sample_next_token(z.expand(30_000, -1), temperature=2.0, generator=g)
    freq = torch.bincount(draws, minlength=3).double() / draws.numel()
    assert torch.allclose(freq, torch.softmax(z.double() / 2, -1), atol=0.015)
    a = G.sample_next_token(z.expand(5, -1), generator=torch.Generator().manual_seed(1))
    b = G.sample_next_token(z.expand(5, -1), generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and a.dtype == torch.long and a.shape == (5,)


# -- training and the checkpoint -------------------------------------------------------------
def test_checkpoint_is_small_loads_and_translates_held_out_dates():
    assert training.CHECKPOINT.stat().st_size < 3_000_000
    info = training.describe_checkpoint()
    assert info["held_out_exact_match_greedy"] >= 0.99
    model, src_tok, tgt_tok = training.load_toy_model(Transformer, device="cpu")
    assert not model.training
    assert (
        training.exact_match(
            model,
            make_pairs(200, "test", seed=5),
            decode=G.greedy_decode,
            make_padding_mask=make_padding_mask,
        )
        >= 0.99
    )


def test_training_runs_and_the_loss_falls():
    model = training.build_model(Transformer, training.ToyConfig(d_model=32, d_ff=64, num_layers=1))
    history = training.train(
        model, make_pairs(1_000), **MASKS, steps=40, batch_size=32, warmup=5, device="cpu", show="quiet"
    )
    assert history.steps == 40 and not model.training
    assert history.summary().startswith("all 40 steps in ")
    first, last = sum(history.losses[:5]) / 5, sum(history.losses[-5:]) / 5
    assert last < 0.8 * first
    assert history.lrs[4] == pytest.approx(training.lr_at(4, 3e-3, 5, 40))


def test_lr_schedule_warms_up_then_decays():
    lrs = [training.lr_at(s, 1.0, 10, 100) for s in range(100)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:])) and lrs[-1] < 0.1


def test_a_time_budget_fits_the_run_to_the_machine(monkeypatch):
    """The run times its first steps and plans the rest to fit the budget, schedule included,
    and says how far it got."""
    clock = {"t": 0.0}
    real_loss = training.teacher_forcing_loss

    def slow_loss(*args, **kwargs):  # each step takes 0.1 s of the fake clock
        clock["t"] += 0.1
        return real_loss(*args, **kwargs)

    monkeypatch.setattr(training.time, "perf_counter", lambda: clock["t"])
    monkeypatch.setattr(training, "teacher_forcing_loss", slow_loss)
    model = training.build_model(Transformer, training.ToyConfig(d_model=32, d_ff=64, num_layers=1))
    history = training.train(
        model,
        make_pairs(500),
        **MASKS,
        steps=900,
        batch_size=16,
        warmup=90,
        device="cpu",
        show="quiet",
        time_budget=2.0,
    )
    assert history.requested == 900 and history.planned == 20  # 2 s at 0.1 s a step
    assert history.steps == 20 and history.seconds == pytest.approx(2.0)
    assert history.lrs[1] > history.lrs[0] and history.lrs[-1] < 0.1 * max(history.lrs)
    assert history.budget == 2.0 and history.time_limit == pytest.approx(3.0)
    # a planned run reads as planned, not as an early stop (the budget is a target, not a limit)
    summary = history.summary()
    assert summary.startswith("20 steps in 2.0 s on cpu, loss ")
    assert summary.endswith(
        "(planned: what the pace of its first steps fits in a budget of about 2 s; the full run is 900)"
    )
    slow = training.History(
        losses=[1.0] * 15, seconds=3.0, requested=900, planned=20, budget=2.0, time_limit=3.0
    )
    assert slow.summary() == (
        "15 steps in 3.0 s on cpu, loss 1.000 (stopped at the 3 s time "
        "limit, 15 of the 20 steps planned; the full run is 900)"
    )


def test_teacher_forcing_ignores_padding():
    model = training.build_model(Transformer, training.ToyConfig(d_model=32, d_ff=64, num_layers=1))
    src_tok, tgt_tok = source_tokenizer(), target_tokenizer()
    from course_utils.toy_task import encode_pairs

    pairs = make_pairs(4)
    src, tgt = encode_pairs(pairs, src_tok, tgt_tok)
    wide_src = torch.cat([src, torch.zeros(4, 3, dtype=torch.long)], 1)  # extra padding
    wide_tgt = torch.cat([tgt, torch.zeros(4, 2, dtype=torch.long)], 1)
    a = training.teacher_forcing_loss(model, src, tgt, PAD_ID, causal_mask, make_padding_mask)
    b = training.teacher_forcing_loss(model, wide_src, wide_tgt, PAD_ID, causal_mask, make_padding_mask)
    assert torch.isclose(a, b, atol=1e-5)


def test_text_progress_prints_to_stdout_only(capsys):
    model = training.build_model(Transformer, training.ToyConfig(d_model=32, d_ff=64, num_layers=1))
    training.train(model, make_pairs(200), **MASKS, steps=3, batch_size=16, device="cpu", show="text")
    out = capsys.readouterr()
    assert "step 3/3" in out.out and out.err == ""


# -- plots and widget ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained():
    return training.load_toy_model(Transformer, device="cpu")


def test_cross_attention_and_plots(trained):
    import matplotlib.pyplot as plt

    from course_utils.plots import generation as P

    model, src_tok, tgt_tok = trained
    text, target = make_pairs(1, "test")[0]
    ids = tgt_tok.encode(target, bos=True, eos=True)
    w = P.cross_attention(model, text, ids, causal_mask, src_tok)
    assert w.shape == (2, 4, len(ids) - 1, len(src_tok.tokenize(text)))
    assert torch.allclose(w.sum(-1), torch.ones(()), atol=1e-5)
    plot = P.plot_cross_attention(w, src_tok.tokenize(text), tgt_tok.tokens(ids[1:]))
    assert plot.weights.shape == (len(ids) - 1, len(src_tok.tokenize(text)))
    ax2, probs = P.plot_temperatures([1.0, 0.0, -1.0], "abc", (0.5, 2.0))
    assert probs.shape == (2, 3) and probs[0, 0] > probs[1, 0]
    plt.close("all")


def test_next_token_step_shows_what_the_learners_sampler_does(trained):
    from course_utils.plots import generation as P

    model, src_tok, tgt_tok = trained
    text = make_pairs(1, "test")[0][0]
    calls = []

    def mine(logits, temperature=1.0, top_k=None, top_p=None, generator=None):
        calls.append((tuple(logits.shape), temperature, top_k, top_p))
        return G.sample_next_token(logits, temperature, top_k, top_p, generator)

    step = P.next_token_step(
        model, text, [BOS_ID], causal_mask, temperature=0.5, top_k=3, sample_fn=mine, draws=2000
    )
    assert calls == [((2000, len(tgt_tok)), 0.5, 3, None)]  # the bars: 2,000 draws at once
    assert step.chosen == int(step.probs.argmax()) and (step.filtered > 0).sum() <= 3
    assert abs(step.filtered.sum() - 1) < 1e-9 and step.attention.shape[0] == 1
    # the share of the draws follows the filtered distribution
    logits = torch.log(torch.as_tensor(step.probs))
    top3 = torch.topk(logits, 3)
    expected = torch.zeros_like(logits).scatter(0, top3.indices, torch.softmax(top3.values / 0.5, 0))
    assert torch.allclose(torch.as_tensor(step.filtered), expected, atol=0.05)
    again = P.next_token_step(
        model, text, [BOS_ID], causal_mask, temperature=0.5, top_k=3, sample_fn=mine, draws=2000
    )
    assert (again.filtered == step.filtered).all()  # a fixed seed: the bars hold still
    g = torch.Generator().manual_seed(1)
    drawn = P.next_token_step(
        model, text, [BOS_ID], causal_mask, temperature=5.0, sample_fn=mine, sample=True, generator=g
    )
    assert calls[-1] == ((1, len(tgt_tok)), 5.0, None, None)
    assert 0 <= drawn.chosen < len(tgt_tok)
    greedy = P.next_token_step(model, text, [BOS_ID], causal_mask)
    assert greedy.filtered is None and greedy.chosen == step.chosen
    with pytest.raises(ValueError, match="sample_fn"):
        P.next_token_step(model, text, [BOS_ID], causal_mask, sample=True)


def test_plot_next_token_keeps_its_legend_off_the_bars(trained):
    import matplotlib.pyplot as plt

    from course_utils.plots import generation as P

    model, src_tok, tgt_tok = trained
    text = make_pairs(1, "test")[0][0]
    step = P.next_token_step(model, text, [BOS_ID], causal_mask, sample_fn=G.sample_next_token)
    ax = P.plot_next_token(step)
    ax.figure.canvas.draw()
    renderer = ax.figure.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    assert legend.y0 >= ax.get_window_extent(renderer).y1 - 1  # above the axes
    assert ax.title.get_window_extent(renderer).y0 >= legend.y1 - 1  # the title above it
    ax2, _ = P.plot_temperatures([3.0, 0.0, -1.0], "abc", (0.5, 1.0, 2.0))
    ax2.set_title("softmax(z / T)")
    ax2.figure.canvas.draw()
    renderer = ax2.figure.canvas.get_renderer()
    legend = ax2.get_legend().get_window_extent(renderer)
    assert legend.x0 >= ax2.get_window_extent(renderer).x1 - 1  # beside the axes
    assert not legend.overlaps(ax2.title.get_window_extent(renderer))
    plt.close("all")


def test_stepper_widget_steps_and_resets(trained, monkeypatch):
    import matplotlib.pyplot as plt

    from course_utils.widgets.generation import decoding_stepper

    model, src_tok, tgt_tok = trained
    sources = [s for s, _ in make_pairs(3, "test")]
    box = decoding_stepper(model, sources, causal_mask, G.sample_next_token, src_tok, tgt_tok)
    c = box.controls
    for _ in range(12):
        c["next"].click()
    assert "(finished)" in c["status"].value and c["next"].disabled
    c["reset"].click()
    assert "∅" in c["status"].value and not c["next"].disabled
    first = c["image"].value
    c["temperature"].value = 5.0
    assert c["image"].value != first
    c["mode"].value = "sample"
    c["next"].click()
    assert "∅" not in c["status"].value
    plt.close("all")


def test_stepper_offers_greedy_only_until_the_sampler_is_written(trained):
    import matplotlib.pyplot as plt

    from course_utils.widgets.generation import decoding_stepper

    model, src_tok, tgt_tok = trained
    sources = [s for s, _ in make_pairs(2, "test")]

    def not_yet(*args, **kwargs):
        raise NotImplementedError()

    for fn, why in ((not_yet, "not written yet"), (None, "exercise 2")):
        box = decoding_stepper(model, sources, causal_mask, fn, src_tok, tgt_tok)
        c = box.controls
        assert c["mode"].disabled and c["mode"].value == "greedy" and why in c["status"].value
        assert c["image"].value and not c["message"].value
        c["next"].click()
        assert "∅" not in c["status"].value
    plt.close("all")


def test_widget_and_training_are_silent_under_grading(trained, monkeypatch, capsys):
    from course_utils.widgets.generation import decoding_stepper

    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    assert decoding_stepper(trained[0], ["march 3, 1999"], causal_mask) is None
    model = training.build_model(Transformer, training.ToyConfig(d_model=32, d_ff=64, num_layers=1))
    training.train(model, make_pairs(100), **MASKS, steps=2, batch_size=16, device="cpu")
    out = capsys.readouterr()
    assert out.out == "" and out.err == ""


# -- the decoding checks' models -------------------------------------------------------------
def _causal(t):
    return torch.ones(t, t, dtype=torch.bool).tril()


def test_lookup_model_with_layers_answers_to_the_causal_mask():
    src = torch.tensor([[5, 6, 7], [4, 4, 5]])
    ys = torch.tensor([[1, 3, 4, 5], [1, 6, 6, 2]])
    plain = LookupModel(8, seed=1, eos_id=EOS_ID)
    want = plain.decode(ys, plain.encode(src), _causal(4))
    assert torch.equal(plain.decode(ys, plain.encode(src)), want)  # default: the mask is ignored
    for layers in (1, 2, 3):
        m = LookupModel(8, seed=1, eos_id=EOS_ID, layers=layers)
        memory = m.encode(src)
        for mask in (_causal(4), _causal(4)[None], _causal(4)[None, None], _causal(4).expand(2, 1, 4, 4)):
            assert torch.equal(m.decode(ys, memory, mask), want)  # any broadcastable causal mask
        free = m.decode(ys, memory)  # no mask: every position sees every other
        # one layer: the last position reads exactly its prefix, as in a real one-layer decoder
        assert torch.equal(free[:, -1], want[:, -1]) == (layers == 1)
        for j in range(3):
            assert not torch.equal(free[:, j], want[:, j])
        assert torch.equal(m.decode(ys[:, :1], memory)[:, 0], want[:, 0])  # one position: no mask needed
        assert not torch.equal(m.decode(ys, memory, _causal(4).T)[:, 1:], want[:, 1:])
        with pytest.raises(TypeError, match="bool"):
            m.decode(ys, memory, torch.zeros(4, 4))


def test_the_decoding_checks_models_need_the_causal_mask():
    """Every model the greedy and beam checks decode with gives other tokens to a decoder that
    forgets the causal mask (so such a decoder cannot pass), and the expected outputs stored
    for the visible checks say so."""
    from course_grading.checks import generation as hidden
    from course_grading.reference.decoder import make_padding_mask
    from course_utils.checks import generation as visible

    stored = hidden.expected_outputs()
    for name in visible.GREEDY_CASES:
        assert stored[f"greedy/{name}"].tolist() != stored[f"greedy/{name}/uncausal"].tolist()
    assert stored["beam/myopia/greedy"].tolist() != stored["beam/myopia/greedy/uncausal"].tolist()
    for seed, *_ in visible.RANDOM_BEAMS:
        assert stored[f"beam/random{seed}"].tolist() != stored[f"beam/random{seed}/uncausal"].tolist()
    for seed, source_seed in hidden.GREEDY_TRANSFORMERS:
        model = hidden.deep_transformer(seed)
        src = torch.randint(3, 12, (4, 6), generator=torch.Generator().manual_seed(source_seed))
        src[1:, 4:] = 0
        mask = make_padding_mask(src, 0)
        assert not torch.equal(
            G.greedy_decode(model, src, 9, BOS_ID, EOS_ID, mask),
            G.greedy_decode(hidden.WithoutCausalMask(model), src, 9, BOS_ID, EOS_ID, mask),
        )
    for seed, source_seed in hidden.BEAM_TRANSFORMERS:
        model = hidden.deep_transformer(seed)
        one = torch.randint(3, 12, (1, 5), generator=torch.Generator().manual_seed(source_seed))
        assert not torch.equal(
            G.beam_search(model, one, 3, 8, BOS_ID, EOS_ID, 0.7),
            G.beam_search(hidden.WithoutCausalMask(model), one, 3, 8, BOS_ID, EOS_ID, 0.7),
        )


class _Jittered:
    """A model whose logits move by up to ``size``: rounding of that order must not matter."""

    def __init__(self, model, size, seed):
        self.model, self.size = model, size
        self.g = torch.Generator().manual_seed(seed)

    def encode(self, src, src_mask=None):
        return self.model.encode(src, src_mask)

    def decode(self, tgt, memory, tgt_mask=None, memory_mask=None):
        out = self.model.decode(tgt, memory, tgt_mask, memory_mask)
        return out + self.size * (2 * torch.rand(out.shape, generator=self.g, dtype=out.dtype) - 1)


def test_no_decision_of_the_real_models_hangs_on_rounding():
    """The hidden checks compare token for token on real encoder-decoders: a correct decoder
    that batches differently (or decodes one row at a time) computes logits that differ in the
    last bits, so no argmax or beam choice of those cases may be closer than that."""
    from course_grading.checks import generation as hidden
    from course_grading.reference.decoder import make_padding_mask

    cases = []
    for (seed, source_seed), (beam_seed, beam_source) in zip(
        hidden.GREEDY_TRANSFORMERS, hidden.BEAM_TRANSFORMERS
    ):
        src = torch.randint(3, 12, (4, 6), generator=torch.Generator().manual_seed(source_seed))
        src[1:, 4:] = 0
        one = torch.randint(3, 12, (1, 5), generator=torch.Generator().manual_seed(beam_source))
        cases.append((hidden.deep_transformer(seed), src, 9, None, 8, 0.7))
        cases.append((hidden.deep_transformer(beam_seed), None, 9, one, 8, 0.7))
    model, src = hidden.trained_model()
    cases.append((model, src, 12, src[:1, : int((src[0] != 0).sum())], 12, 1.0))
    for model, src, max_len, one, beam_len, lp in cases:
        for seed in range(3):
            jittered = _Jittered(model, 1e-9, seed)
            if src is not None:
                mask = make_padding_mask(src, 0)
                assert torch.equal(
                    G.greedy_decode(jittered, src, max_len, BOS_ID, EOS_ID, mask),
                    G.greedy_decode(model, src, max_len, BOS_ID, EOS_ID, mask),
                )
            if one is not None:
                assert torch.equal(
                    G.beam_search(jittered, one, 3, beam_len, BOS_ID, EOS_ID, lp),
                    G.beam_search(model, one, 3, beam_len, BOS_ID, EOS_ID, lp),
                )
