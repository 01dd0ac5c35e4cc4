"""A decoding stepper: write a translation one token at a time and watch each choice.

Thin: :func:`course_utils.plots.generation.next_token_step` does the work (one step of the
model, the filters, the choice, the cross-attention), :func:`plot_next_token` and
:func:`plot_attention` draw it; the widget wires buttons and sliders to them.
"""
from __future__ import annotations

from typing import Sequence

from ..device import grading
from ..plots.attention import plot_attention
from ..plots.generation import next_token_step, plot_next_token


def decoding_stepper(model, sources: Sequence[str], src_tok=None, tgt_tok=None,
                     max_len: int = 12, seed: int = 0):
    """Step through decoding ``sources`` (a list of source sentences) with ``model``.

    "next token" appends the greedy (or sampled) choice, "reset" starts again from <bos>.
    Temperature, top-k and top-p reshape the bars on the right of each step; the heatmap shows
    the cross-attention row of every token written so far. Returns the ipywidgets container,
    or None while grading.
    """
    if grading():
        return None
    import ipywidgets as widgets
    import matplotlib.pyplot as plt
    import torch
    from IPython.display import display

    from ..toy_task import source_tokenizer, target_tokenizer

    src_tok, tgt_tok = src_tok or source_tokenizer(), tgt_tok or target_tokenizer()
    source = widgets.Dropdown(options=list(sources), description="source",
                              layout=widgets.Layout(width="520px"))
    temperature = widgets.FloatLogSlider(1.0, base=10, min=-1, max=1, step=0.05,
                                         description="temperature")
    top_k = widgets.IntSlider(len(tgt_tok), 1, len(tgt_tok), description="top-k")
    top_p = widgets.FloatSlider(1.0, min=0.05, max=1.0, step=0.05, description="top-p")
    mode = widgets.ToggleButtons(options=["greedy", "sample"], description="pick")
    step_btn = widgets.Button(description="next token", button_style="primary")
    reset_btn = widgets.Button(description="reset")
    status = widgets.HTML()
    out = widgets.Output()
    state = {"prefix": [tgt_tok.bos_id], "gen": torch.Generator().manual_seed(seed)}

    def current():
        return next_token_step(model, source.value, state["prefix"], temperature.value,
                               top_k.value, top_p.value, mode.value == "sample", state["gen"],
                               src_tok, tgt_tok)

    def draw(*_):
        step = state["step"] = current()
        done = state["prefix"][-1] == tgt_tok.eos_id or len(state["prefix"]) >= max_len
        step_btn.disabled = done
        written = tgt_tok.decode(state["prefix"]) or "∅"
        nxt = "(finished)" if done else f"next: <b>{tgt_tok.itos[step.chosen]}</b>"
        status.value = f"written so far: <code>{written}</code> &nbsp; {nxt}"
        with out:
            out.clear_output(wait=True)
            fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 3.6),
                                           gridspec_kw={"width_ratios": [1.1, 1]})
            plot_next_token(step, ax=ax1)
            rows = [tgt_tok.itos[t] for t in state["prefix"][1:]] + [
                "?" if done else f"→{tgt_tok.itos[step.chosen]}"]
            attn = step.attention if not done else step.attention[:-1]
            rows = rows if not done else rows[:-1]
            if len(rows):
                plot_attention(attn, rows, step.src_tokens, ax=ax2, annotate=False,
                               colorbar=False, title="cross-attention (last layer, mean of heads)")
            fig.tight_layout()
            display(fig)
            plt.close(fig)

    def on_step(_):
        state["prefix"].append(state["step"].chosen)  # the choice shown, not a fresh draw
        draw()

    def on_reset(*_):
        state["prefix"] = [tgt_tok.bos_id]
        state["gen"] = torch.Generator().manual_seed(seed)
        draw()

    step_btn.on_click(on_step)
    reset_btn.on_click(on_reset)
    source.observe(on_reset, names="value")
    for control in (temperature, top_k, top_p, mode):
        control.observe(draw, names="value")
    draw()
    return widgets.VBox([source, widgets.HBox([temperature, top_k, top_p]),
                         widgets.HBox([mode, step_btn, reset_btn]), status, out])
