"""The 09_gpt widget: generate one character at a time with the cache, and watch where it looks.

Thin: :mod:`course_utils.plots.gpt` does the work (``start`` runs the prompt once, ``advance``
feeds one character with the cache, ``sampler_share`` asks your sampler, the plots draw); the
widget wires a text box, the sampler's knobs and buttons to them. A knob only redraws: the model
runs once per character written.
"""

from __future__ import annotations

import html
from typing import Callable

from ..device import grading
from ..plots.gpt import advance, plot_generation, sampler_share, start
from .generation import greedy_only, sampler_knobs, stepper_layout, wire_stepper


def generation_stepper(
    model,
    tokenizer,
    sample_fn: Callable | None = None,
    prompt: str = "ROMEO:\n",
    seed: int = 0,
    draws: int = 2000,
):
    """Generate from ``model`` (09's GPT) one character at a time.

    ``sample_fn`` is your ``sample_next_token``: in "sample" mode it draws the next character
    and, from ``draws`` draws, the blue bars. "next" writes one character, "next 10" ten; the
    heatmap shows, for each block, where the newest character attended. Returns the
    ipywidgets container, or None while grading.
    """
    if grading():
        return None
    import ipywidgets as W
    import torch

    label = {"description_width": "90px"}
    text = W.Text(
        prompt.replace("\n", "\\n"),
        description="prompt",
        style=label,
        continuous_update=False,
        layout=W.Layout(width="420px"),
    )
    temperature, top_k, top_p = sampler_knobs(
        W, len(tokenizer), 0.8, 0.5, label, ("340px", "260px"), readout_format=".2f"
    )
    mode = W.ToggleButtons(
        options=["greedy", "sample"], value="sample" if sample_fn else "greedy", layout=W.Layout(width="auto")
    )
    mode.style.button_width = "80px"
    one = W.Button(description="next", button_style="primary", layout=W.Layout(width="90px"))
    ten = W.Button(description="next 10", layout=W.Layout(width="90px"))
    reset = W.Button(description="reset", layout=W.Layout(width="80px"))
    ui, status, picture = stepper_layout(
        W,
        {"prompt": text},
        (temperature, top_k, top_p),
        {"mode": mode, "next": one, "next10": ten, "reset": reset},
    )
    limit = getattr(model, "max_len", None) or model.pos_embedding.num_embeddings  # positions
    box = {
        "state": None,
        "gen": torch.Generator().manual_seed(seed),
        "sample_fn": sample_fn,
        "note": "" if sample_fn else "sampling needs your <code>sample_next_token</code>",
    }
    if sample_fn is None:
        mode.disabled = True

    def knobs():
        return {"temperature": temperature.value, "top_k": top_k.value, "top_p": top_p.value}

    def choose(state):
        """The next character: the argmax, or one draw of your sampler."""
        if mode.value == "sample" and box["sample_fn"] is not None:
            row = torch.as_tensor(state.logits, dtype=torch.float32)[None]
            return int(box["sample_fn"](row, generator=box["gen"], **knobs())[0])
        return int(state.logits.argmax())

    def restart(*_):
        try:
            ids = tokenizer.encode(text.value.replace("\\n", "\n") or "\n")
            box["state"] = start(model, ids[-(limit - 1) :])
            box["heatmap"] = None  # another text: draw its heatmap
            box["gen"] = torch.Generator().manual_seed(seed)
        except Exception as exc:  # an unknown character, or a bug in the learner's model
            status.value = ""
            picture.fail(exc)
            return
        draw()

    def draw(*_):
        state = box["state"]
        if state is None:
            return
        share = None
        if box["sample_fn"] is not None:
            try:
                share = sampler_share(
                    state.logits, box["sample_fn"], draws, torch.Generator().manual_seed(seed + 1), **knobs()
                )
            except NotImplementedError:
                greedy_only(box, mode)
            except Exception as exc:
                status.value = ""
                picture.fail(exc)
                return
        full = len(state.ids) >= limit
        one.disabled = ten.disabled = full
        written = tokenizer.decode(state.ids)
        note = f" &nbsp; <small>{box['note']}</small>" if box["note"] else ""
        end = " &nbsp; <small>(max_len reached: reset)</small>" if full else ""
        status.value = (
            "<pre style='margin:0;white-space:pre-wrap;max-height:7em;"
            f"overflow:auto'>{html.escape(written[-400:])}</pre>{note}{end}"
        )
        k = "off (the whole vocabulary)" if top_k.value >= len(tokenizer) else top_k.value
        knob_text = (
            f"T {temperature.value:.2f}, top-k {k}, top-p {top_p.value:.2f}"
            if mode.value == "sample"
            else "not used now: greedy takes the tallest grey bar"
        )
        new_text = box.get("heatmap") != len(state.ids)  # a character written, or a new prompt
        # one figure outside pyplot, kept for every redraw (never shown by the notebook's
        # inline backend under the widget): the bars change in place, the heatmap only when
        # a character is written
        box["fig"] = plot_generation(
            state, tokenizer.itos, share, knob_text, fig=box.get("fig"), heatmap=new_text
        )
        if new_text:
            box["heatmap"] = len(state.ids)
            box["drawn"] = box.get("drawn", 0) + 1
        # the heatmap is drawn once per character written; a knob redraws only the bars
        picture.show(box["fig"], close=False, dynamic=box["fig"].axes[:1], static_key=box["drawn"])
        ui.result = {"state": state, "share": share, "knobs": knob_text}

    def write(n):
        state = box["state"]
        if state is None:
            return
        try:
            for _ in range(n):
                if len(state.ids) >= limit:
                    break
                advance(model, state, choose(state))
        except Exception as exc:
            status.value = ""
            picture.fail(exc)
            return
        draw()

    wire_stepper(
        {one: lambda _: write(1), ten: lambda _: write(10), reset: restart},
        text,
        restart,
        [temperature, top_k, top_p, mode],
        draw,
    )
    restart()
    return ui
