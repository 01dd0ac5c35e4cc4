"""The 08_generation widget: step through decoding one token at a time.

Thin: :func:`course_utils.plots.generation.next_token_step` does the work (one step of the
model, your sampler's answer, the cross-attention), :func:`plot_next_token` and
:func:`plot_attention` draw it; the widget wires buttons and sliders to them.
"""

from __future__ import annotations

import html
from typing import Callable, Sequence

from ..device import grading
from ..plots.attention import plot_attention
from ..plots.generation import next_token_step, plot_next_token


def sampler_knobs(W, vocab_size: int, temperature: float, top: float, label: dict, widths: tuple, **more):
    """The sliders of a sampler (09's widget has them too): the temperature, on a log scale
    from 0.1 to 10**top, starts at ``temperature`` (``more``: its other settings, ``label`` its
    label's style); top-k starts off (the whole vocabulary), top-p at 1. ``widths``: the
    temperature's, the others'."""
    from .picture import slider

    narrow = {"description_width": "45px"}
    temperature = slider(
        W,
        "FloatLogSlider",
        temperature,
        -1,
        top,
        "temperature",
        widths[0],
        base=10,
        step=0.05,
        style=label,
        **more,
    )
    top_k = slider(W, "IntSlider", vocab_size, 1, vocab_size, "top-k", widths[1], style=narrow)
    top_p = slider(W, "FloatSlider", 1.0, 0.05, 1.0, "top-p", widths[1], step=0.05, style=narrow)
    return temperature, top_k, top_p


def greedy_only(state: dict, mode) -> None:
    """The learner's sampler is not written yet: forget it, say so (``state["note"]``) and offer
    greedy decoding only."""
    state["sample_fn"] = None
    state["note"] = "your <code>sample_next_token</code> is not written yet: greedy only"
    with mode.hold_trait_notifications():
        mode.value, mode.disabled = "greedy", True


def stepper_layout(W, top: dict, knobs: tuple, buttons: dict, extra: tuple = ()):
    """A stepper's container (09's widget is one too): ``top`` (what is decoded, by its name),
    the sampler's ``knobs`` (temperature, top_k, top_p) in a row, the ``buttons`` (by name,
    after the ``extra`` widgets) in a row, the status line and the picture. Its ``controls``
    are these by name, the status line and the picture's parts. Returns ``(ui, status,
    picture)``."""
    from .picture import widget_box

    temperature, top_k, top_p = knobs
    rows = [
        *top.values(),
        W.HBox(list(knobs)),
        W.HBox([*extra, *buttons.values()], layout=W.Layout(align_items="center")),
    ]
    return widget_box(W, rows, {**top, "temperature": temperature, "top_k": top_k, "top_p": top_p, **buttons})


def wire_stepper(clicks: dict, text, restart: Callable, knobs: list, draw: Callable) -> None:
    """A stepper's events (09's widget is one too): each button of ``clicks`` runs its handler,
    a new ``text`` runs ``restart``, a change of a sampler's knob runs ``draw``."""
    for button, handler in clicks.items():
        button.on_click(handler)
    text.observe(restart, names="value")
    for control in knobs:
        control.observe(draw, names="value")


def decoding_stepper(
    model,
    sources: Sequence[str],
    causal_mask: Callable,
    sample_fn: Callable | None = None,
    src_tok=None,
    tgt_tok=None,
    max_len: int = 12,
    seed: int = 0,
):
    """Step through decoding ``sources`` (a list of source sentences) with ``model``.

    ``causal_mask`` is 03's (the decoder's self-attention mask) and ``sample_fn`` your
    ``sample_next_token``: it draws the token in "sample" mode and, from many draws, the blue
    bars (what temperature, top-k and top-p leave); until it is written, only greedy decoding
    is offered. "next token" appends the greedy (or sampled) choice, "reset" starts again from
    <bos>; the heatmap shows the cross-attention row of every token written so far. Returns
    the ipywidgets container, or None while grading.
    """
    if grading():
        return None
    import ipywidgets as W
    import matplotlib.pyplot as plt
    import torch

    from ..toy_task import source_tokenizer, target_tokenizer

    src_tok, tgt_tok = src_tok or source_tokenizer(), tgt_tok or target_tokenizer()
    label = {"description_width": "100px"}  # wide enough for "temperature" in full
    source = W.Dropdown(
        options=list(sources), description="source", style=label, layout=W.Layout(width="560px")
    )
    temperature, top_k, top_p = sampler_knobs(W, len(tgt_tok), 1.0, 1, label, ("360px", "270px"))
    # the label "pick" is a widget of its own: as the menu's description it takes a line
    pick = W.Label("pick", layout=W.Layout(width="100px", justify_content="flex-end", margin="0 8px 0 0"))
    mode = W.ToggleButtons(options=["greedy", "sample"], layout=W.Layout(width="auto"))
    mode.style.button_width = "80px"
    step_btn = W.Button(
        description="next token", button_style="primary", layout=W.Layout(width="120px", margin="0 0 0 16px")
    )
    reset_btn = W.Button(description="reset", layout=W.Layout(width="80px"))
    ui, status, picture = stepper_layout(
        W,
        {"source": source},
        (temperature, top_k, top_p),
        {"mode": mode, "next": step_btn, "reset": reset_btn},
        extra=(pick,),
    )
    state = {
        "prefix": [tgt_tok.bos_id],
        "gen": torch.Generator().manual_seed(seed),
        "sample_fn": sample_fn,
        "note": "",
    }
    if sample_fn is None:
        mode.disabled = True
        state["note"] = "sampling needs your <code>sample_next_token</code> (exercise 2)"

    def current():
        device = next(model.parameters()).device
        if state["gen"].device != device:
            state["gen"] = torch.Generator(device=device).manual_seed(seed)
        args = (
            model,
            source.value,
            state["prefix"],
            causal_mask,
            temperature.value,
            top_k.value,
            top_p.value,
        )
        try:
            return next_token_step(
                *args,
                state["sample_fn"],
                mode.value == "sample",
                state["gen"],
                src_tok=src_tok,
                tgt_tok=tgt_tok,
            )
        except NotImplementedError:  # sample_next_token is not written yet: greedy only
            greedy_only(state, mode)
            return next_token_step(*args, None, False, src_tok=src_tok, tgt_tok=tgt_tok)

    def draw(*_):
        try:
            step = state["step"] = current()
        except Exception as exc:  # a bug in the learner's sampler
            status.value = ""
            picture.fail(exc)
            return
        done = state["prefix"][-1] == tgt_tok.eos_id or len(state["prefix"]) >= max_len
        step_btn.disabled = done
        written = tgt_tok.decode(state["prefix"]) or "∅"
        nxt = "(finished)" if done else f"next: <b>{html.escape(tgt_tok.itos[step.chosen])}</b>"
        note = f" &nbsp; <small>{state['note']}</small>" if state["note"] else ""
        status.value = f"written so far: <code>{html.escape(written)}</code> &nbsp; {nxt}{note}"
        # fixed places, in inches: room for the legend and title above the bars and for the
        # longest row label ("<bos> → <eos>") left of the heatmap (tight_layout would measure
        # every label on each redraw: a quarter of its time); the picture is cropped anyway
        fig = plt.figure(figsize=(9.6, 4.1))
        ax1 = fig.add_axes((0.6 / 9.6, 1.05 / 4.1, 4.2 / 9.6, 2.1 / 4.1))
        ax2 = fig.add_axes((6.3 / 9.6, 1.05 / 4.1, 3.2 / 9.6, 2.1 / 4.1))
        plot_next_token(step, ax=ax1)
        # row i reads token i of what is written and predicts token i + 1: the last row is
        # the step being chosen now
        ids = state["prefix"] + [step.chosen]
        rows = [f"{tgt_tok.itos[a]} → {tgt_tok.itos[b]}" for a, b in zip(ids, ids[1:])]
        attn = step.attention if not done else step.attention[:-1]
        rows = rows if not done else rows[:-1]
        if len(rows):
            plot_attention(
                attn,
                rows,
                step.src_tokens,
                ax=ax2,
                annotate=False,
                colorbar=False,
                title="cross-attention (last layer, mean of heads)",
            )
            ax2.set_ylabel("decoder input → predicted token")
            ax2.title.set_fontsize(10)
        else:
            ax2.set_axis_off()
        picture.show(fig)

    def on_step(_):
        state["prefix"].append(state["step"].chosen)  # the choice shown, not a fresh draw
        draw()

    def on_reset(*_):
        state["prefix"] = [tgt_tok.bos_id]
        state["gen"] = torch.Generator(device=state["gen"].device).manual_seed(seed)
        draw()

    wire_stepper(
        {step_btn: on_step, reset_btn: on_reset}, source, on_reset, [temperature, top_k, top_p, mode], draw
    )
    draw()
    return ui
