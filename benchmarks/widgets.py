"""How fast every widget control answers, in a real browser (not a test: it measures).

    python benchmarks/widgets.py --label before      # all eight notebooks, 5 moves a control
    python benchmarks/widgets.py --label after --only 01 02 --repeats 9

JupyterLab in headless Chromium (Debian's chromium, as tests/test_browser.py) opens each student
notebook with working solutions, runs all its cells, then moves every control of every widget
``--repeats`` times, back and forth. One move's latency runs from the input event (its
``timeStamp``: the key press, the click, the menu pick, Enter in a text box) to the new picture
painted (its img's ``src`` changed, the image decoded, the next frame painted): the kernel's
work, the PNG's trip and the browser's. Writes benchmarks/widget_latency.json (every run
kept under its ``--label``; a new run replaces the one of the same label) and
benchmarks/widget_latency.md (each control's median and 90th percentile, per label, side by
side). The machine's load average is recorded with each run: compare runs made at similar load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from jupyter_browser import (  # noqa: E402 - from tests/, put on the path above
    ARM_JS,
    CHROMIUM,
    FLAGS,
    PAINTED_JS,
    PROBE_JS,
    control_latencies,
    course_lab,
    filled_in,
    open_and_run_all,
    other_text,
    shut_down_kernels,
    widget_controls,
)

NOTEBOOKS = sorted(p.parent.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
VIEWPORT = {"width": 1280, "height": 900}
OUT = ROOT / "benchmarks" / "widget_latency"


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def _press_and_wait(page, widget, button) -> None:
    """Press ``button`` of ``widget`` (untimed) and wait for its new picture."""
    page.evaluate(PROBE_JS)
    page.evaluate(ARM_JS, widget.element_handle())
    button.click()
    try:
        page.wait_for_function(PAINTED_JS, timeout=30_000, polling=20)
    except Exception:  # noqa: BLE001 -- e.g. reset on a fresh stepper draws the same picture
        pass
    page.wait_for_timeout(150)


def measure_notebook(page, base: str, token: str, name: str, repeats: int) -> list[dict]:
    open_and_run_all(page, base, token, name, f"{name}/{name}.ipynb")
    widgets = page.locator(".course-widget")
    page.wait_for_timeout(1000)
    rows = []
    for w in range(widgets.count()):
        widget = widgets.nth(w)
        widget.scroll_into_view_if_needed()
        if not widget.locator("img.course-picture").count():
            continue
        widget.locator("img.course-picture").first.wait_for(timeout=60_000)
        controls = widget_controls(widget)
        buttons = {c["name"]: c["locator"] for c in controls if c["kind"] == "button"}
        for control in controls:
            texts, before_each = None, None
            if control["kind"] == "text":
                first = control["locator"].input_value()
                texts = (other_text(control["name"], first), first)
            step = buttons.get("next token") or buttons.get("next")  # 08's and 09's steppers
            if control["kind"] == "button" and control["name"] == "reset" and step is not None:

                def before_each(i, b=step):  # something to reset
                    _press_and_wait(page, widget, b)
            elif control["kind"] == "button" and "reset" in buttons:

                def before_each(i, b=buttons["reset"], c=control["locator"]):
                    if not c.is_enabled():  # the stepper finished its sentence
                        _press_and_wait(page, widget, b)

            if control["disabled"] and before_each is None:  # e.g. 01's runners-up: no analogy yet
                continue
            started = time.time()
            ms = control_latencies(page, widget, control, repeats, texts=texts, before_each=before_each)
            row = {
                "notebook": name,
                "widget": w,
                "control": control["name"] or control["kind"],
                "kind": control["kind"],
                "ms": [None if m is None else round(m, 1) for m in ms],
                "load": round(os.getloadavg()[0], 1),
            }  # the machine's, as it was measured
            rows.append(row)
            got = [m for m in ms if m is not None]
            print(
                f"{name} widget {w} {row['control']!r:24} "
                + (f"median {statistics.median(got):7.0f} ms" if got else "no picture")
                + f"  ({len(got)}/{len(ms)} moves redrew, {time.time() - started:.0f} s)",
                flush=True,
            )
    return rows


KERNEL = "-kernel-cpu"


def write_markdown(data: dict, path: Path) -> None:
    labels = [label for label in data["runs"] if not label.endswith(KERNEL)]
    keys = []
    for label in labels:
        for r in data["runs"][label]["controls"]:
            key = (r["notebook"], r["widget"], r["control"])
            if key not in keys:
                keys.append(key)
    lines = [
        "# Widget latency: input event to new picture painted",
        "",
        "Made by `python benchmarks/widgets.py --label LABEL` (headless Chromium, JupyterLab, "
        "the solutions filled in). Each cell: median / 90th percentile in ms over the moves "
        "of that control; `—` where a move drew no new picture. Goal: median ≤ 150 ms and "
        "90th percentile ≤ 250 ms for every control.",
        "",
    ]
    for label in labels:
        run = data["runs"][label]
        m = run["machine"]
        loads = [r["load"] for r in run["controls"] if "load" in r]
        seen = (
            f"1-minute load average {min(loads):g} to {max(loads):g} while the controls were moved"
            if loads
            else f"load average before {m['load_before']} and after {m['load_after']}"
        )
        lines.append(
            f"- **{label}**: {run['when']}, {m['cores']} cores, {seen}, "
            f"{run['repeats']} moves a control, {run['commit']}"
        )
    lines += [
        "",
        "| notebook | widget | control | " + " | ".join(labels) + " |",
        "| --- | --- | --- | " + " | ".join("---:" for _ in labels) + " |",
    ]

    def cell(label, key):
        for r in data["runs"][label]["controls"]:
            if (r["notebook"], r["widget"], r["control"]) == key:
                got = [x for x in r["ms"] if x is not None]
                miss = len(r["ms"]) - len(got)
                if not got:
                    return "—"
                text = f"{statistics.median(got):.0f} / {_percentile(got, 0.9):.0f}"
                return text + (f" ({miss} —)" if miss else "")
        return ""

    for key in keys:
        name = key[2].replace("\u200b", "").replace("|", "\\|")  # a table cell of its own
        lines.append(
            f"| {key[0]} | {key[1]} | {name} | " + " | ".join(cell(label, key) for label in labels) + " |"
        )
    lines += [
        "",
        "| all moves | " + " | ".join(labels) + " |",
        "| --- | " + " | ".join("---:" for _ in labels) + " |",
    ]
    for what in (
        "median ms",
        "90th percentile ms",
        "controls with median > 150 ms",
        "controls with 90th percentile > 250 ms",
        "moves without a new picture",
    ):
        row = []
        for label in labels:
            controls = data["runs"][label]["controls"]
            every = [x for r in controls for x in r["ms"] if x is not None]
            per = [[x for x in r["ms"] if x is not None] for r in controls]
            if what == "median ms":
                row.append(f"{statistics.median(every):.0f}" if every else "—")
            elif what == "90th percentile ms":
                row.append(f"{_percentile(every, 0.9):.0f}" if every else "—")
            elif what.startswith("controls with median"):
                row.append(f"{sum(1 for p in per if not p or statistics.median(p) > 150)} of {len(per)}")
            elif what.startswith("controls with 90th"):
                row.append(f"{sum(1 for p in per if not p or _percentile(p, 0.9) > 250)} of {len(per)}")
            else:
                row.append(str(sum(x is None for r in controls for x in r["ms"])))
        lines.append(f"| {what} | " + " | ".join(row) + " |")
    kernel = [label for label in data["runs"] if label.endswith(KERNEL)]
    if kernel:
        lines += [
            "",
            "## The kernel's share: CPU time per redraw, in-process",
            "",
            "Made by `python benchmarks/widgets.py --kernel --label LABEL`: each control set "
            "in Python on a widget built with the course's reference components, CPU ms "
            "(`time.process_time`) from the new value to the new PNG; the first move of each "
            "control (cold caches) not counted. CPU time is far less sensitive to a busy "
            "machine than the browser's wall-clock times above.",
            "",
        ]
        for label in kernel:
            run = data["runs"][label]
            lines.append(
                f"- **{label}**: {run['when']}, load average {run['machine']['load_before']}, "
                f"{run['repeats']} moves a control, {run['commit']}"
            )
        lines += [
            "",
            "| notebook | control | " + " | ".join(kernel) + " |",
            "| --- | --- | " + " | ".join("---:" for _ in kernel) + " |",
        ]
        keys = list(
            dict.fromkeys(
                (r["notebook"], r["control"]) for label in kernel for r in data["runs"][label]["controls"]
            )
        )
        for key in keys:
            cells = []
            for label in kernel:
                got = [
                    r["ms"] for r in data["runs"][label]["controls"] if (r["notebook"], r["control"]) == key
                ]
                cells.append(
                    f"{statistics.median(got[0]):.0f} / {_percentile(got[0], 0.9):.0f}"
                    if got and got[0]
                    else ""
                )
            lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(cells) + " |")
    notes = data.get("notes")
    if notes:
        lines += ["", notes]
    path.write_text("\n".join(lines) + "\n")


# -- the kernel's share, measured in-process: CPU time per redraw ------------------------------
def _kernel_widgets():
    """(notebook, widget factory, {control: [values moved to, in turn]}) for every widget, built
    with the course's reference components in place of the learner's."""
    import inspect

    import torch

    from course_grading.reference import generation as G
    from course_grading.reference.attention import causal_mask, scaled_dot_product_attention
    from course_grading.reference.decoder import Transformer, make_padding_mask
    from course_grading.reference.multi_head import MultiHeadAttention
    from course_grading.reference.positional import sinusoidal_positional_encoding
    from course_grading.reference.similarity import analogy
    from course_utils import training
    from course_utils.toy_task import encode_pairs, make_pairs
    from course_utils.widgets import (
        attention,
        embeddings,
        generation,
        multi_head,
        positional,
        similarity,
        transformer,
    )

    model, src_tok, tgt_tok = training.load_toy_model(Transformer, device="cpu")
    pairs = make_pairs(12, "test")
    src, tgt = encode_pairs(pairs[:4], src_tok, tgt_tok)
    tgt_in = tgt[:, :-1]
    extra = (
        {"vocab": tgt_tok.itos}
        if "vocab" in inspect.signature(transformer.attention_viewer).parameters
        else {}
    )

    def viewer():
        return transformer.attention_viewer(
            model,
            src,
            tgt_in,
            make_padding_mask(src, src_tok.pad_id),
            causal_mask(tgt_in.size(1)),
            src_tokens=[src_tok.tokens(s) for s in src.tolist()],
            tgt_tokens=[tgt_tok.tokens(t) for t in tgt_in.tolist()],
            kind="cross",
            **extra,
        )

    def stepper():
        return generation.decoding_stepper(
            model, [s for s, _ in pairs], causal_mask, G.sample_next_token, src_tok, tgt_tok
        )

    def gpt_stepper():
        from course_grading.reference.gpt import GPT
        from course_utils.language_model import load_gpt
        from course_utils.widgets.gpt import generation_stepper

        gpt, tok = load_gpt(GPT, device="cpu")
        return generation_stepper(gpt, tok, G.sample_next_token)

    torch.set_num_threads(1)
    return [
        (
            "01",
            lambda: embeddings.embedding_projector(),
            {
                "words": [
                    "prince princess boy girl uncle aunt brother sister queen",
                    embeddings.DEFAULT_WORDS,
                ],
                "c": ["girl", "woman"],
            },
        ),
        (
            "02",
            lambda: similarity.angle_explorer(40, 1.0, 2.5),
            {"angle": [45.0, 40.0], "len_u": [1.25, 1.0]},
        ),
        (
            "02",
            lambda: embeddings.embedding_projector(
                analogy,
                words="germany berlin italy rome spain madrid",
                a="france",
                b="paris",
                c="japan",
                neighbours=5,
            ),
            {"neighbours": [6, 5], "c": ["italy", "japan"]},
        ),
        (
            "03",
            lambda: attention.attention_explorer(scaled_dot_product_attention, causal_mask),
            {
                "scale": [10.0, 7.07],
                "causal": [True, False],
                "sentence": ["we sat by the river bank", "we sat on the bank of the river"],
            },
        ),
        (
            "04",
            lambda: multi_head.head_viewer(MultiHeadAttention),
            {
                "head": [1, 2],
                "query": [3, 8],
                "sentence": ["my dog did not eat because it was full", multi_head.DEMO_SENTENCE],
            },
        ),
        (
            "05",
            lambda: positional.positional_explorer(sinusoidal_positional_encoding),
            {"position": [21, 20], "d_model": [102, 100], "positions": [1000, 100]},
        ),
        (
            "06-08",
            viewer,
            {"head": [1, 0], "layer": [1, 0], "example": [1, 0], "kind": ["decoder self", "cross"]},
        ),
        (
            "08",
            stepper,
            {
                "temperature": [1.12, 1.0],
                "top_k": [14, 15],
                "mode": ["sample", "greedy"],
                "next": ["click"],
                "reset": ["click"],
            },
        ),
        (
            "09",
            gpt_stepper,
            {
                "temperature": [0.5, 0.8],
                "top_k": [20, 30],
                "mode": ["greedy", "sample"],
                "next": ["click"],
                "next10": ["click"],
                "reset": ["click"],
            },
        ),
    ]


def kernel_cpu(repeats: int) -> list[dict]:
    """Each control's redraw in this process: CPU milliseconds (``time.process_time``, which a
    busy machine inflates far less than wall time) from setting its value to the new PNG."""
    import matplotlib

    matplotlib.use("module://matplotlib_inline.backend_inline")
    rows = []
    for notebook, make, moves in _kernel_widgets():
        ui = make()
        for control, values in moves.items():
            ms = []
            for i in range(repeats + 1):  # the first move warms the caches: not counted
                value = values[i % len(values)]
                started = time.process_time()
                if value == "click":
                    ui.controls[control].click()
                else:
                    ui.controls[control].value = value
                if i:
                    ms.append(round(1000 * (time.process_time() - started), 1))
            rows.append({"notebook": notebook, "widget": 0, "control": control, "kind": "kernel", "ms": ms})
            print(f"{notebook} {control:12} median {statistics.median(ms):6.0f} ms CPU", flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--label", required=True, help="the run's name in the tables, e.g. before, after")
    ap.add_argument("--only", nargs="*", help="notebook numbers or names, e.g. 01 03_attention")
    ap.add_argument("--repeats", type=int, default=5, help="moves per control (default 5)")
    ap.add_argument("--out", default=str(OUT), help="path stem of the .json and .md written")
    ap.add_argument(
        "--kernel",
        action="store_true",
        help="no browser: each control's redraw in-process, CPU ms (the kernel's share;"
        " written as LABEL-kernel-cpu)",
    )
    args = ap.parse_args()
    if args.kernel:
        return _write(
            args,
            kernel_cpu(args.repeats),
            f"{args.label}-kernel-cpu",
            [],
            [round(x, 2) for x in os.getloadavg()],
        )
    if not CHROMIUM:
        print("no chromium on this machine (scripts/setup.sh --test installs it)", file=sys.stderr)
        return 2
    names = [n for n in NOTEBOOKS if not args.only or any(n.startswith(o) for o in args.only)]
    from playwright.sync_api import sync_playwright

    load_before = [round(x, 2) for x in os.getloadavg()]
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="widget-latency-") as tmp:
        work = Path(tmp)
        for name in names:
            (work / name).mkdir()
            filled_in(name, work / name)
        with course_lab(work) as (base, token), sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            try:
                for name in names:
                    page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
                    try:
                        rows += measure_notebook(page, base, token, name, args.repeats)
                    finally:
                        page.close()
                        shut_down_kernels(base, token)
            finally:
                browser.close()
    return _write(args, rows, args.label, names, load_before)


def _write(args, rows: list[dict], label: str, names: list[str], load_before) -> int:
    out = Path(args.out)
    json_path = out.with_suffix(".json")
    data = json.loads(json_path.read_text()) if json_path.exists() else {"runs": {}}
    import subprocess

    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "course_utils"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    # the kernels import course_utils from wherever this environment finds it (PYTHONPATH may
    # point at another checkout, to measure an older version with this harness)
    found = subprocess.run(
        [sys.executable, "-c", "import course_utils; print(course_utils.__file__)"],
        capture_output=True,
        text=True,
        cwd="/",
    ).stdout.strip()
    origin = Path(found).resolve().parent.parent if found else ROOT
    previous = data["runs"].get(label, {}).get("controls", []) if args.only else []
    kept = [r for r in previous if r["notebook"] not in names]
    data["runs"][label] = {
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": (
            f"commit {commit}" + (" with course_utils changes not committed" if dirty else "")
            if origin == ROOT
            else f"course_utils from {origin}"
        ),
        "repeats": args.repeats,
        "machine": {
            "cores": os.cpu_count(),
            "load_before": load_before,
            "load_after": [round(x, 2) for x in os.getloadavg()],
        },
        "controls": sorted(kept + rows, key=lambda r: (r["notebook"], r["widget"])),
    }
    json_path.write_text(json.dumps(data, indent=1) + "\n")
    write_markdown(data, out.with_suffix(".md"))
    print(f"wrote {json_path} and {out.with_suffix('.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
