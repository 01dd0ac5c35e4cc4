"""The widgets' pictures, headless: ``Picture`` draws the same pixels as matplotlib's savefig,
and every control of every widget changes the picture it sits over (a control that changes
nothing visible looks broken to a learner). How fast they redraw is measured, not tested:
benchmarks/widgets.py."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from PIL import Image

from course_grading.reference import generation as G
from course_grading.reference.attention import causal_mask, scaled_dot_product_attention
from course_grading.reference.decoder import Transformer, make_padding_mask
from course_grading.reference.multi_head import MultiHeadAttention
from course_grading.reference.positional import sinusoidal_positional_encoding
from course_grading.reference.similarity import analogy
from course_utils.widgets import picture

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny models: one thread (conftest)


def _pixels(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"))


def _drawn(rgb: np.ndarray) -> np.ndarray:
    """``rgb`` cropped to its pixels that are not white."""
    mask = (rgb != 255).any(axis=2)
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    return rgb[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]


def _busy_figure(title: str = "weights $\\sqrt{d_k}$ · causal"):
    """Text of every kind the widgets draw: rotated tick labels, arrows "→", mathtext, a
    colour bar, an image, bars, text drawn without antialiasing."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(7, 3.2))
    w = np.random.default_rng(0).dirichlet(np.ones(6), size=5)
    image = ax1.imshow(w, vmin=0, vmax=1)
    ax1.set_xticks(range(6), [f"key{i}" for i in range(6)], rotation=45, ha="right")
    ax1.set_yticks(range(5), [f"<bos> → {i}" for i in range(5)])
    for i in range(5):
        ax1.text(0, i, f"{w[i, 0]:.2f}", ha="center", va="center", fontsize=8)
    fig.colorbar(image, ax=ax1)
    ax2.bar(range(4), [0.1, 0.5, 0.3, 0.1], color="C0", label="your sample_next_token")
    ax2.legend(loc="lower left", bbox_to_anchor=(0, 1), fontsize=8)
    ax2.text(1, 0.4, "plain", antialiased=False)
    ax1.set_title(title)
    return fig


def test_figure_png_draws_the_pixels_savefig_draws():
    fig = _busy_figure()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=200)
    reference = _drawn(_pixels(buf.getvalue()))
    dpi_before = fig.dpi
    first = picture.figure_png(fig, 200)
    again = picture.figure_png(fig, 200)  # every glyph and string now comes from the caches
    assert fig.dpi == dpi_before
    assert first == again
    assert np.array_equal(_drawn(_pixels(first)), reference)
    tight = io.BytesIO()
    fig.savefig(tight, format="png", dpi=200, bbox_inches="tight", pad_inches=0.08)
    (w, h), (tw, th) = picture.png_size(first), picture.png_size(tight.getvalue())
    # the crop is around the ink: never wider than savefig's box around the artists' extents
    assert w <= tw + 2 and h <= th + 2
    plt.close(fig)


def test_the_caches_never_mix_two_figures_up():
    a, b = _busy_figure("first"), _busy_figure("second, with other glyphs: ½ ∞")
    png_a = picture.figure_png(a, 200)
    png_b = picture.figure_png(b, 200)
    assert png_a != png_b
    assert picture.figure_png(a, 200) == png_a
    assert picture.figure_png(a, 100) != png_a  # another size: other glyphs
    assert picture.png_size(picture.figure_png(a, 100))[0] < picture.png_size(png_a)[0]
    plt.close("all")


def test_encode_png_round_trips_rgb_and_rgba():
    rng = np.random.default_rng(1)
    for channels, mode in ((3, "RGB"), (4, "RGBA")):
        pixels = rng.integers(0, 256, size=(7, 11, channels), dtype=np.uint8)
        png = picture.encode_png(pixels)
        with Image.open(io.BytesIO(png)) as img:
            assert img.mode == mode and img.size == (11, 7)
            assert np.array_equal(np.asarray(img), pixels)


def test_a_transparent_figure_keeps_its_alpha():
    fig = _busy_figure()
    fig.patch.set_alpha(0.0)
    with Image.open(io.BytesIO(picture.figure_png(fig, 100))) as img:
        assert img.mode == "RGBA" and img.getextrema()[3][0] == 0
    plt.close(fig)


def test_picture_shows_the_png_at_half_its_pixels():
    pic = picture.Picture()
    png = pic.show(_busy_figure())
    assert pic.image.value == png and png[:8] == b"\x89PNG\r\n\x1a\n"
    assert pic.image.layout.width == f"{round(picture.png_size(png)[0] / picture.PIXEL_RATIO)}px"


# -- every control changes the picture ------------------------------------------------------
@pytest.fixture(scope="module")
def toy():
    from course_utils import training

    return training.load_toy_model(Transformer, device="cpu")


def _projector():
    from course_utils.widgets.embeddings import embedding_projector

    ui = embedding_projector(
        analogy,
        words="germany berlin italy rome spain madrid",
        a="france",
        b="paris",
        c="japan",
        neighbours=5,
    )
    return ui, {
        "words": "germany berlin italy rome",
        "a": "germany",
        "b": "berlin",
        "c": "italy",
        "neighbours": 6,
    }


def _projector_before_02():
    from course_utils.widgets.embeddings import embedding_projector

    ui = embedding_projector()
    return ui, {"words": "prince princess boy girl", "a": "boy", "b": "prince", "c": "girl"}


def _angles():
    from course_utils.widgets.similarity import angle_explorer

    return angle_explorer(40, 1.0, 2.5), {"angle": 45.0, "len_u": 1.25, "len_v": 2.25}


def _attention():
    from course_utils.widgets.attention import attention_explorer

    ui = attention_explorer(scaled_dot_product_attention, causal_mask)
    return ui, {"scale": 10.0, "causal": True, "sentence": "we sat by the river bank"}


def _heads():
    from course_utils.widgets.multi_head import head_viewer

    return head_viewer(MultiHeadAttention), {
        "head": 1,
        "query": 2,
        "sentence": "my dog did not eat because it was full",
    }


def _positions():
    from course_utils.widgets.positional import positional_explorer

    ui = positional_explorer(sinusoidal_positional_encoding)
    return ui, {"position": 21, "d_model": 102, "positions": 1000}


def _viewer(toy):
    from course_utils.toy_task import encode_pairs, make_pairs
    from course_utils.widgets.transformer import attention_viewer

    model, src_tok, tgt_tok = toy
    src, tgt = encode_pairs(make_pairs(4, "test"), src_tok, tgt_tok)
    tgt_in = tgt[:, :-1]
    ui = attention_viewer(
        model,
        src,
        tgt_in,
        make_padding_mask(src, src_tok.pad_id),
        causal_mask(tgt_in.size(1)),
        src_tokens=[src_tok.tokens(s) for s in src.tolist()],
        tgt_tokens=[tgt_tok.tokens(t) for t in tgt_in.tolist()],
        kind="cross",
        vocab=tgt_tok.itos,
    )
    return ui, {"kind": "decoder self", "layer": 1, "head": 1, "example": 2}


def _stepper(toy):
    from course_utils.toy_task import make_pairs
    from course_utils.widgets.generation import decoding_stepper

    model, src_tok, tgt_tok = toy
    sources = [s for s, _ in make_pairs(3, "test")]
    ui = decoding_stepper(model, sources, causal_mask, G.sample_next_token, src_tok, tgt_tok)
    # first the moves that leave the token and the bars as they were (the confident model
    # samples the token greedy picks; top-k drops a token no draw picked): the picture must
    # still say what changed
    return ui, {
        "mode": "sample",
        "top_k": len(tgt_tok) - 1,
        "top_p": 0.95,
        "temperature": round(1.0 * 10**0.05, 6),
        "next": "click",
        "reset": "click",
        "source": sources[1],
    }


def _gpt_stepper():
    from course_grading.reference.gpt import GPT
    from course_utils.language_model import load_gpt
    from course_utils.widgets.gpt import generation_stepper

    model, tok = load_gpt(GPT, device="cpu")
    ui = generation_stepper(model, tok, G.sample_next_token, draws=200)
    # top-k one below the vocabulary drops a character no draw picked: the picture must still
    # say what it was drawn with
    return ui, {
        "top_k": len(tok) - 1,
        "top_p": 0.9,
        "temperature": round(10**-0.2, 6),
        "mode": "greedy",
        "next": "click",
        "next10": "click",
        "reset": "click",
        "prompt": "JULIET:\\n",
    }


WIDGETS = {
    "projector": _projector,
    "projector before 02": _projector_before_02,
    "angles": _angles,
    "attention": _attention,
    "heads": _heads,
    "positions": _positions,
    "viewer": _viewer,
    "stepper": _stepper,
    "gpt stepper": _gpt_stepper,
}


@pytest.mark.parametrize("name", list(WIDGETS))
def test_every_control_changes_the_picture(name, request):
    make = WIDGETS[name]
    ui, moves = make(request.getfixturevalue("toy")) if name in ("viewer", "stepper") else make()
    controls = ui.controls
    unchanged = []
    for control, value in moves.items():
        before = controls["image"].value
        if value == "click":
            controls[control].click()
        else:
            controls[control].value = value
        assert not controls.get("message") or not controls["message"].value, (
            f"{name}: {control} → {controls['message'].value}"
        )
        if controls["image"].value == before:
            unchanged.append(control)
    assert not unchanged, f"{name}: the picture stayed the same after moving {unchanged}"
    plt.close("all")


def test_the_steppers_greedy_sample_toggle_says_what_it_picked(toy):
    """The confident dates model samples the token greedy picks: the picture must still show
    which way the token was chosen, and that greedy would have picked the same."""
    ui, _ = _stepper(toy)
    greedy = ui.controls["image"].value
    ui.controls["mode"].value = "sample"
    assert ui.controls["image"].value != greedy
    title_greedy, title_sample = _title(toy, False), _title(toy, True)
    assert title_greedy.startswith("greedy: the tallest grey bar")
    assert title_sample.startswith("sampled “") and "greedy would pick it too" in title_sample


def _title(toy, sample: bool) -> str:
    from course_utils.plots.generation import next_token_step, plot_next_token
    from course_utils.toy_task import make_pairs

    model, src_tok, tgt_tok = toy
    step = next_token_step(
        model,
        make_pairs(1, "test")[0][0],
        [tgt_tok.bos_id],
        causal_mask,
        sample_fn=G.sample_next_token,
        sample=sample,
        generator=torch.Generator().manual_seed(0),
        src_tok=src_tok,
        tgt_tok=tgt_tok,
    )
    ax = plot_next_token(step)
    title = ax.get_title()
    plt.close(ax.figure)
    return title


def test_the_decoder_rows_read_input_then_prediction(toy):
    from course_utils.plots.transformer import (
        attention_maps_and_output,
        plot_transformer_attention,
        predicted_tokens,
    )
    from course_utils.toy_task import encode_pairs, make_pairs

    model, src_tok, tgt_tok = toy
    src, tgt = encode_pairs(make_pairs(4, "test"), src_tok, tgt_tok)
    tgt_in = tgt[:, :-1]
    maps, out = attention_maps_and_output(
        model, src, tgt_in, make_padding_mask(src, src_tok.pad_id), causal_mask(tgt_in.size(1))
    )
    n = tgt_in.size(1)
    predicted = predicted_tokens(out, tgt_tok.itos, 4, n)
    assert predicted[2] == [tgt_tok.itos[i] for i in out[2].argmax(-1).tolist()]
    assert predicted_tokens(out, None, 4, n) is None
    assert predicted_tokens(out, tgt_tok.itos[:-1], 4, n) is None  # not its vocabulary
    inputs = tgt_tok.tokens(tgt_in[2].tolist())
    for kind in ("cross", "decoder self"):
        p = plot_transformer_attention(
            maps, kind, 0, 0, 2, src_tok.tokens(src[2].tolist()), inputs, predicted=predicted[2]
        )
        rows = [t.get_text() for t in p.ax.get_yticklabels()]
        assert rows == [f"{a} → {b}" for a, b in zip(inputs, predicted[2])]
        assert p.ax.get_ylabel() == "decoder input → predicted token"
        plt.close(p.fig)
    p = plot_transformer_attention(
        maps, "encoder self", 0, 0, 2, src_tok.tokens(src[2].tolist()), inputs, predicted=predicted[2]
    )
    assert "→" not in "".join(t.get_text() for t in p.ax.get_yticklabels())
    plt.close(p.fig)


def test_update_heads_draws_what_plot_heads_draws():
    from matplotlib.figure import Figure

    from course_utils.plots.multi_head import DEMO_SENTENCE, head_attention, plot_heads, update_heads

    r = head_attention(DEMO_SENTENCE, 5, MultiHeadAttention)
    moved = update_heads(plot_heads(r.weights, r.labels, 0, 8, fig=Figure(figsize=(9.4, 5.8))), 3, 2)
    fresh = plot_heads(r.weights, r.labels, 3, 2, fig=Figure(figsize=(9.4, 5.8)))
    assert np.array_equal(moved.row, fresh.row)
    assert picture.figure_png(moved.fig, 100) == picture.figure_png(fresh.fig, 100)
    with pytest.raises(ValueError, match="query"):
        update_heads(fresh, 0, 99)


def test_update_attention_draws_what_plot_attention_draws():
    from matplotlib.figure import Figure

    from course_utils.plots.attention import plot_attention, update_attention

    rng = np.random.default_rng(3)
    a, b = rng.dirichlet(np.ones(5), size=4), rng.dirichlet(np.ones(5) * 0.2, size=4)
    rows, cols = ["<bos> → 1", "1 → 2", "2 → 3", "3 → <eos>"], list("abcde")

    def fresh(w, title):
        return plot_attention(w, rows, cols, ax=Figure(figsize=(4.5, 3.5)).add_subplot(), title=title)

    moved = update_attention(fresh(a, "layer 0"), b, "layer 1")
    assert np.array_equal(moved.weights, b)
    assert picture.figure_png(moved.fig, 100) == picture.figure_png(fresh(b, "layer 1").fig, 100)
    with pytest.raises(ValueError, match="shape"):
        update_attention(moved, b[:, :3])


def test_what_sticks_out_of_the_figure_is_drawn_as_savefig_draws_it():
    """Long row labels left of a heatmap lie outside the figure: savefig's tight box takes them
    in, and so must the widget's picture (the figure grows to hold them)."""
    from matplotlib.figure import Figure

    from course_utils.plots.attention import plot_attention

    w = np.random.default_rng(4).dirichlet(np.ones(4), size=3)
    rows = ["<bos> → <eos> and a long way further", "2 → 0", "0 → <eos>"]

    def make():
        return plot_attention(w, rows, list("abcd"), ax=Figure(figsize=(3, 3)).add_subplot()).fig

    tight = io.BytesIO()
    make().savefig(tight, format="png", dpi=100, bbox_inches="tight", pad_inches=0.08)
    fig = make()
    png = picture.figure_png(fig, 100)
    assert np.array_equal(_drawn(_pixels(png)), _drawn(_pixels(tight.getvalue())))
    assert fig.get_size_inches()[0] > 3  # grown, so the next redraw fits at once
    assert picture.figure_png(fig, 100) == png


# -- a kept figure that draws only what a control changed draws what a fresh figure draws ------
def _same_pixels(got: bytes, fresh: bytes, what: str) -> None:
    a, b = _pixels(got), _pixels(fresh)
    assert a.shape == b.shape, f"{what}: {a.shape} against a fresh figure's {b.shape}"
    assert np.array_equal(a, b), f"{what}: {(a != b).any(axis=2).sum()} pixels differ"


def test_figure_png_draws_only_the_dynamic_artists_over_the_kept_rest():
    fig = _busy_figure()
    ax1, ax2 = fig.axes[:2]  # the heatmap, the bars (then the colour bar)
    (line,) = ax2.plot([0, 3], [0.1, 0.4], color="C3", lw=3)
    dynamic = [line, ax1.title]
    picture.figure_png(fig, 100, dynamic=dynamic)
    kept = fig._course_static
    # (inside the axes: a spine drawn over the line's end would be a static artist drawn after
    # a dynamic one, which figure_png's caller must list as dynamic too)
    for k, (y, title) in enumerate([(0.45, "moved"), (0.15, "moved again: ½")]):
        line.set_ydata([0.2, y])
        ax1.title.set_text(title)
        png = picture.figure_png(fig, 100, dynamic=dynamic)
        assert fig._course_static is kept  # the rest was not drawn again
        _same_pixels(png, picture.figure_png(fig, 100), f"move {k}")
    ax2.set_title("a static artist changed")  # so the rest changed: a new static_key
    png = picture.figure_png(fig, 100, dynamic=dynamic, static_key=1)
    assert fig._course_static is not kept
    _same_pixels(png, picture.figure_png(fig, 100), "new static_key")
    other = [ax2]  # other dynamic artists: the rest is drawn again
    _same_pixels(
        picture.figure_png(fig, 100, dynamic=other, static_key=1),
        picture.figure_png(fig, 100),
        "other dynamic artists",
    )
    plt.close(fig)


def _fresh_attention(ui):
    from matplotlib.figure import Figure

    from course_utils.plots.attention import plot_sentence_attention, sentence_attention, sentence_figsize

    c = ui.controls
    r = sentence_attention(
        c["sentence"].value, scaled_dot_product_attention, c["scale"].value, c["causal"].value, causal_mask
    )
    return plot_sentence_attention(r, fig=Figure(figsize=sentence_figsize(len(r.tokens)))).fig


def _fresh_heads(ui):
    from matplotlib.figure import Figure

    from course_utils.plots.multi_head import head_attention, plot_heads

    c = ui.controls
    r = head_attention(c["sentence"].value, 5, MultiHeadAttention)
    return plot_heads(
        r.weights, r.labels, c["head"].value, c["query"].value, fig=Figure(figsize=(9.4, 5.8))
    ).fig


def _fresh_positions(ui):
    from matplotlib.figure import Figure

    from course_utils.plots.positional import plot_explorer

    c = ui.controls
    return plot_explorer(
        sinusoidal_positional_encoding,
        c["d_model"].value,
        c["position"].value,
        c["positions"].value,
        fig=Figure(figsize=(9.6, 4.2)),
    ).fig


def _fresh_gpt(ui, tok):
    from course_utils.plots.gpt import plot_generation

    r = ui.result
    return plot_generation(r["state"], tok.itos, r["share"], r["knobs"])


KEPT_MOVES = {
    "attention": [
        ("scale", 10.0),
        ("scale", 7.07),
        ("causal", True),
        ("scale", 1.0),
        ("causal", False),
        ("sentence", "we sat by the river bank"),
        ("scale", 100.0),
        ("causal", True),
        ("sentence", "xyzzy the cat"),
        ("scale", 3.0),
        # a new sentence in the kept figure of each mask setting: fewer tokens, more,
        # one, more than are numbered (12), as many with other words, unknown words
        ("causal", False),
        ("sentence", "the river bank"),
        ("sentence", "we sat on the bank of the river after the long walk home"),
        ("causal", True),
        ("sentence", "bank"),
        ("causal", False),
        ("sentence", "one two three four five six seven eight nine ten eleven twelve thirteen fourteen"),
        ("sentence", "a b c d e f g h i j k l m n"),
        ("causal", True),
        ("sentence", "qzxv the plorf sat"),
        ("scale", 20.0),
        ("causal", False),
        ("sentence", "we sat on the bank of the river"),
    ],
    "heads": [
        ("head", 1),
        ("query", 3),
        ("sentence", "my dog did not eat because it was full"),
        ("head", 4),
        ("sentence", "a b"),
        ("query", 1),
        (
            "sentence",
            "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen",
        ),
        ("query", 14),
    ],
    "positions": [
        ("position", 21),
        ("d_model", 102),
        ("position", 0),
        ("positions", 1000),
        ("position", 999),
        ("positions", 100),
        ("position", 3),
        ("d_model", 256),
    ],
    "gpt stepper": [
        ("temperature", 0.5),
        ("next10", "click"),
        ("top_k", 20),
        ("next", "click"),
        ("mode", "greedy"),
        ("next10", "click"),
        ("top_p", 0.5),
        ("mode", "sample"),
        ("reset", "click"),
        ("prompt", "JULIET:\\n"),
        ("next10", "click"),
    ],
}


@pytest.mark.parametrize("name", list(KEPT_MOVES))
def test_a_kept_figure_draws_what_a_fresh_one_draws(name):
    """The widgets redraw kept figures, drawing only what a control changed over the rest:
    after every move the picture is the one a fresh figure of that state draws."""
    if name == "gpt stepper":
        from course_grading.reference.gpt import GPT
        from course_utils.language_model import load_gpt
        from course_utils.widgets.gpt import generation_stepper

        model, tok = load_gpt(GPT, device="cpu")
        ui = generation_stepper(model, tok, G.sample_next_token, draws=200)

        def fresh(ui):
            return _fresh_gpt(ui, tok)
    else:
        ui = WIDGETS[name]()[0]
        fresh = {"attention": _fresh_attention, "heads": _fresh_heads, "positions": _fresh_positions}[name]
    controls = ui.controls
    for control, value in KEPT_MOVES[name]:
        if value == "click":
            controls[control].click()
        else:
            controls[control].value = value
        assert not controls["message"].value, f"{control} → {controls['message'].value}"
        _same_pixels(
            controls["image"].value,
            picture.figure_png(fresh(ui), picture.DISPLAY_DPI * picture.PIXEL_RATIO),
            f"{name}: {control} = {value}",
        )
    plt.close("all")


def test_the_attention_viewer_draws_what_a_fresh_figure_draws(toy):
    from matplotlib.figure import Figure

    from course_utils.plots.transformer import (
        attention_maps_and_output,
        plot_transformer_attention,
        predicted_tokens,
    )
    from course_utils.toy_task import encode_pairs, make_pairs

    model, src_tok, tgt_tok = toy
    ui, _ = _viewer(toy)
    src, tgt = encode_pairs(make_pairs(4, "test"), src_tok, tgt_tok)
    tgt_in = tgt[:, :-1]
    maps, out = attention_maps_and_output(
        model, src, tgt_in, make_padding_mask(src, src_tok.pad_id), causal_mask(tgt_in.size(1))
    )
    predicted = predicted_tokens(out, tgt_tok.itos, 4, tgt_in.size(1))
    c = ui.controls
    for control, value in [
        ("layer", 1),
        ("head", 1),
        ("example", 2),
        ("kind", "decoder self"),
        ("example", 1),
        ("kind", "cross"),
        ("layer", 0),
        ("kind", "encoder self"),
        ("head", 0),
    ]:
        c[control].value = value
        kind, e = c["kind"].value, c["example"].value
        q, k = maps[kind][0].shape[2:]
        side = max(3.0, 0.55 * max(q, k) + 1.5)
        fig = Figure(figsize=(side + 1.6, side + 0.4))
        fig.subplots_adjust(left=1.5 / (side + 1.6), bottom=1.0 / (side + 0.4))
        plot = plot_transformer_attention(
            maps,
            kind,
            c["layer"].value,
            c["head"].value,
            e,
            src_tok.tokens(src[e].tolist()),
            tgt_tok.tokens(tgt_in[e].tolist()),
            ax=fig.add_subplot(),
            predicted=predicted[e],
        )
        _same_pixels(c["image"].value, picture.figure_png(plot.fig, 200), f"{control} = {value}")


def test_a_kept_figure_with_something_sticking_out_grows_once_and_then_draws_only_the_dynamic():
    """Long row labels stick out of a kept figure: the first redraw grows it (as savefig's box
    would hold them), and the next ones draw the pixels of a full draw of the grown figure."""
    from matplotlib.figure import Figure

    from course_utils.plots.attention import attention_artists, plot_attention, update_attention

    rng = np.random.default_rng(5)
    rows = ["<bos> → <eos> and a long way further", "2 → 0", "0 → <eos>"]
    plot = plot_attention(
        rng.dirichlet(np.ones(4), size=3), rows, list("abcd"), ax=Figure(figsize=(3, 3)).add_subplot()
    )
    first = picture.figure_png(plot.fig, 100, dynamic=attention_artists(plot))
    grown = tuple(plot.fig.get_size_inches())
    assert grown[0] > 3
    _same_pixels(first, picture.figure_png(plot.fig, 100), "grown")
    plot = update_attention(plot, rng.dirichlet(np.ones(4), size=3), "another head")
    kept = picture.figure_png(plot.fig, 100, dynamic=attention_artists(plot))
    assert tuple(plot.fig.get_size_inches()) == grown
    _same_pixels(kept, picture.figure_png(plot.fig, 100), "kept")


def test_the_first_widget_takes_the_kernels_objects_out_of_full_collections():
    """In a fresh process (as a kernel is): making the first Picture collects once and
    freezes what is alive, so a later full collection walks only what came after (a full
    walk of a kernel's objects took 0.2-0.35 s, on a random move of a control); the second
    Picture changes nothing."""
    import subprocess
    import sys

    code = (
        "import gc, torch, matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot\n"
        "from course_utils.widgets.picture import Picture\n"
        "assert gc.get_freeze_count() == 0\n"
        "Picture()\nfrozen = gc.get_freeze_count()\nPicture()\n"
        "assert gc.get_freeze_count() == frozen > 100_000, (frozen, gc.get_freeze_count())\n"
        "junk = [[] for _ in range(1000)]\nfor a, b in zip(junk, junk[1:]): a.append(b); b.append(a)\n"
        "del junk, a, b\nassert gc.collect() >= 1000  # what came later is collected as before\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
