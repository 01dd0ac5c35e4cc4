"""Benchmark the course on this machine (not a test: it measures, it never fails on a slow box).

    python benchmarks/run.py                  # everything below; writes benchmarks/results.md + .json
    python benchmarks/run.py --busy 2         # the same, each notebook also run beside 2 busy processes
    python benchmarks/run.py --only 03 --no-autograde
    python benchmarks/run.py --class-size 40  # class throughput only; writes class_results.md + .json

For each solution notebook: wall time to execute it top to bottom in a fresh kernel, and the
kernel's peak memory (max RSS). With --busy N, also the wall time of the same execution while
N synthetic processes keep N cores busy (a shared JupyterHub node, a neighbour's training), and
the ratio busy / idle; with --repeat R each time is the best of R runs, which keeps a spike of
load from elsewhere out of the numbers. For each assignment: the time to autograde one submission with
`course autograde` (sandboxed kernel and integrity audit included, as instructors run it) next
to plain `nbgrader autograde` from the CLI, on the same submission. Then the time and held-out
accuracy of training notebook 08's model from scratch; for 09, the KV cache's speed-up that the
notebook measures. With --class-size: N submissions of
notebook 03 graded by `course autograde` and by serial `nbgrader autograde`, scores compared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def machine() -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        mem_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        pass
    info = {
        "when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "python": platform.python_version(),
    }
    try:
        import torch

        from course_utils import get_device

        info["torch"] = torch.__version__
        info["device"] = str(get_device())
        from course_utils.device import available_cpus, threads_for

        info["torch_threads"] = torch.get_num_threads()  # torch's own default
        info["usable_cpus"] = available_cpus()  # affinity mask and cgroup CPU quota
        info["kernel_torch_threads"] = int(
            os.environ.get("COURSE_NUM_THREADS") or threads_for(info["usable_cpus"])
        )
    except ImportError:
        pass
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    return info


def execute_one(path: str) -> dict:
    """Run in a child process: execute the notebook, report time and the kernel's peak RSS."""
    import nbformat
    from nbclient import NotebookClient

    os.environ["MPLBACKEND"] = "Agg"
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(Path(path).parent)}}
    ).execute()
    seconds = time.perf_counter() - start
    errors = sum(1 for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error")
    # The kernel was our child and has exited: RUSAGE_CHILDREN holds its peak RSS (KiB on Linux).
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    peak_mb = peak / 1024 if sys.platform != "darwin" else peak / 2**20
    slowest, index = max((_cell_seconds(c), i) for i, c in enumerate(nb.cells))
    row = {
        "seconds": round(seconds, 2),
        "peak_kernel_mb": round(peak_mb),
        "errors": errors,
        "slowest_cell": index,
        "slowest_cell_s": round(slowest, 2),
    }
    for cell in nb.cells:  # 09 measures its KV cache on the machine it runs on: keep what it said
        for out in cell.get("outputs", []):
            found = CACHE_LINE.search(out.get("text", "") if isinstance(out.get("text"), str) else "")
            if found:
                row["cache"] = {
                    "tokens": int(found.group(1)),
                    "with_cache_tok_s": float(found.group(2).replace(",", "")),
                    "without_cache_tok_s": float(found.group(3).replace(",", "")),
                    "speedup": float(found.group(4)),
                }
    return row


# the line notebook 09 prints after timing generation with and without the KV cache
CACHE_LINE = re.compile(
    r"(\d+) tokens: ([\d,.]+) tokens/s with the cache, ([\d,.]+) without: ([\d.]+)x faster"
)


def _cell_seconds(cell) -> float:
    """How long a cell ran, from the timestamps nbclient records (0 for markdown)."""
    from datetime import datetime

    timing = cell.get("metadata", {}).get("execution", {})
    try:
        start = datetime.fromisoformat(timing["iopub.status.busy"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00"))
    except (KeyError, ValueError):
        return 0.0
    return (end - start).total_seconds()


def bench_notebook(path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--execute-one", str(path)], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


BUSY_LOOP = "while True: pass"  # one core's worth of pure-Python work, until killed


def busy_processes(n: int) -> list[subprocess.Popen]:
    """``n`` processes that each keep one core busy (stop them with ``stop``)."""
    return [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in range(n)]


def stop(processes: list[subprocess.Popen]) -> None:
    for proc in processes:
        proc.kill()
    for proc in processes:
        proc.wait()


def bench_notebook_loads(path: Path, busy: int, repeat: int = 1) -> dict:
    """Execute ``path`` on the machine as it is, then beside ``busy`` busy processes; the best
    of ``repeat`` runs each. Returns the idle row with busy_seconds and busy_ratio added."""
    runs = [bench_notebook(path) for _ in range(repeat)]
    row = min(runs, key=lambda r: r["seconds"])
    row["peak_kernel_mb"] = max(r["peak_kernel_mb"] for r in runs)
    if busy:
        loaded = []
        for _ in range(repeat):
            load = busy_processes(busy)
            try:
                time.sleep(0.5)  # let them get going
                loaded.append(bench_notebook(path))
            finally:
                stop(load)
        best = min(loaded, key=lambda r: r["seconds"])
        row.update(
            busy_seconds=best["seconds"],
            busy_ratio=round(best["seconds"] / row["seconds"], 2),
            busy_peak_kernel_mb=max(r["peak_kernel_mb"] for r in loaded),
            busy_errors=best["errors"],
        )
    return row


def bench_autograde(assignment: str) -> dict:
    """Grade the solution as one student's submission: `course autograde` vs `nbgrader autograde`."""
    from course_grading.authoring import release as course_release

    results = {}
    for how in ("course", "nbgrader"):
        with tempfile.TemporaryDirectory() as tmp:
            course = Path(tmp)
            shutil.copy(ROOT / "nbgrader_config.py", course)
            shutil.copytree(ROOT / "solutions" / assignment, course / "solutions" / assignment)
            course_release.release(course, [assignment])  # records the assignment in the gradebook
            sub = course / "submitted" / "bench" / assignment
            sub.mkdir(parents=True)
            shutil.copy(course / "solutions" / assignment / f"{assignment}.ipynb", sub)
            env = {
                **os.environ,
                "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                "MPLBACKEND": "Agg",
            }
            start = time.perf_counter()
            if how == "course":
                subprocess.run(
                    [str(BIN / "course"), "--root", str(course), "autograde", assignment, "--jobs", "1"],
                    cwd=course,
                    env=env,
                    check=True,
                    capture_output=True,
                )
            else:
                subprocess.run(
                    [str(BIN / "nbgrader"), "autograde", assignment, "--force"],
                    cwd=course,
                    env=env,
                    check=True,
                    capture_output=True,
                )
            results[f"{how}_autograde_s"] = round(time.perf_counter() - start, 2)
    return results


# --------------------------------------------------------------------------- class throughput

CLASS_ASSIGNMENT = "03_attention"
# Cycled over the students: most submit working code, some hand in the blank release, some
# solve only the first exercises, some have a classic bug.
CLASS_MIX = ("solution", "solution", "blank", "partial", "solution", "buggy", "partial", "blank")
# Other mixes, to check that a throughput claim does not rest on one (--mix NAME)
MIXES = {"course": CLASS_MIX, "thirds": ("solution", "blank", "partial")}
GRADERS = ("course", "course_no_audit", "course_bare", "nbgrader")
BUGGY_VARIANT = ("test_softmax", "no_max_subtraction")


def _strip_markers(source: str) -> str:
    return "\n".join(
        ln for ln in source.splitlines() if "BEGIN SOLUTION" not in ln and "END SOLUTION" not in ln
    )


def student_notebook(root: Path, assignment: str, kind: str):
    """A student's submission built from the released notebook: ``solution`` (every exercise
    solved), ``blank`` (the release as is), ``partial`` (the first half solved) or ``buggy``
    (solved, but one function replaced by a known-wrong variant from tests/variants/)."""
    import nbformat

    release = nbformat.read(str(root / "notebooks" / assignment / f"{assignment}.ipynb"), 4)
    solution = nbformat.read(str(root / "solutions" / assignment / f"{assignment}.ipynb"), 4)
    answers = {
        c.metadata["nbgrader"]["grade_id"]: _strip_markers(c.source)
        for c in solution.cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    cells = [c for c in release.cells if c.metadata.get("nbgrader", {}).get("solution")]
    solved = {"solution": len(cells), "buggy": len(cells), "partial": len(cells) // 2, "blank": 0}[kind]
    for cell in cells[:solved]:
        cell.source = answers[cell.metadata["nbgrader"]["grade_id"]]
    if kind == "buggy":
        cells[0].source = _buggy_source(ROOT, assignment) or cells[0].source
    return release


def _buggy_source(root: Path, assignment: str):
    import importlib.util

    path = root / "tests" / "variants" / f"{assignment}.py"
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(f"variants_{assignment}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    test, name = BUGGY_VARIANT
    return module.BUGGY.get(test, {}).get(name)


def make_class_course(course: Path, assignment: str, size: int, mix=CLASS_MIX) -> list[str]:
    """A course at ``course`` with ``assignment`` recorded and ``size`` submissions, of the
    kinds in ``mix`` in turn; returns the student ids."""
    import nbformat

    from course_grading.authoring import release as course_release

    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(
        ROOT / "solutions" / assignment,
        course / "solutions" / assignment,
        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__"),
    )
    course_release.release(course, [assignment])  # writes notebooks/ and records the assignment
    students = []
    for i in range(size):
        kind = mix[i % len(mix)]
        student = f"s{i:03d}_{kind}"
        folder = course / "submitted" / student / assignment
        folder.mkdir(parents=True)
        nbformat.write(student_notebook(course, assignment, kind), str(folder / f"{assignment}.ipynb"))
        students.append(student)
    return students


def gradebook_scores(course: Path, assignment: str, db_url=None) -> dict:
    """{(student, grade cell): score} for every graded cell of ``assignment`` in the gradebook."""
    from nbgrader.api import Gradebook

    url = db_url or f"sqlite:///{course / 'gradebook.db'}"
    scores = {}
    with Gradebook(url, "attention-course") as gb:
        for submission in gb.find_assignment(assignment).submissions:
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    scores[(submission.student.id, grade.name)] = (
                        float(grade.score or 0),
                        float(grade.max_score),
                        bool(grade.needs_manual_grade),
                    )
    return scores


class TreeCpu:
    """CPU seconds of a command's whole process tree (kernels, sandboxes, workers and the
    processes they leave to init included), where the machine lets this process make a cgroup
    v1 ``cpuacct`` group; else None. ``rusage`` of children undercounts: a command that ends
    with ``os._exit`` leaves processes it never waited for."""

    BASE = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self, name: str):
        self.group = None
        try:
            group = self.BASE / f"course-bench-{os.getpid()}-{name}"
            group.mkdir(exist_ok=True)
            (group / "cpuacct.usage").write_text("0")
            self.group = group
        except OSError:
            pass

    def wrap(self, command: list[str]) -> list[str]:
        """``command`` made to join the group before it runs (nothing it forks escapes)."""
        if self.group is None:
            return command
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.group / "cgroup.procs"), *command]

    def seconds(self) -> float | None:
        """Once the command has ended (its processes left in the group are waited for, 10 s)."""
        if self.group is None:
            return None
        try:
            deadline = time.monotonic() + 10
            while (self.group / "cgroup.procs").read_text().split() and time.monotonic() < deadline:
                time.sleep(0.1)
            return round(int((self.group / "cpuacct.usage").read_text()) / 1e9, 1)
        except OSError:
            return None
        finally:
            try:
                self.group.rmdir()
            except OSError:
                pass


def _run_measured(command: list[str], cwd: Path, env: dict, name: str):
    """(completed process, wall seconds, CPU seconds of its whole tree or None)."""
    cpu = TreeCpu(name)
    start = time.perf_counter()
    done = subprocess.run(cpu.wrap(command), cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    return done, wall, cpu.seconds()


def bench_class(
    size: int, assignment: str = CLASS_ASSIGNMENT, jobs=None, mix=CLASS_MIX, graders=GRADERS
) -> dict:
    """`course autograde` vs serial `nbgrader autograde` on the same ``size`` submissions of
    the kinds in ``mix``, taken in turn; ``graders`` picks the rows (nbgrader's always runs)."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", "MPLBACKEND": "Agg"}
    timings, scores, cpu = {}, {}, {}
    course_cmd = [str(BIN / "course"), "autograde", assignment] + (["--jobs", str(jobs)] if jobs else [])
    commands = {
        "course": course_cmd,
        "course_no_audit": course_cmd + ["--no-audit"],
        "course_bare": course_cmd + ["--no-sandbox", "--no-audit"],
        "nbgrader": [str(BIN / "nbgrader"), "autograde", assignment, "--force"],
    }
    commands = {how: command for how, command in commands.items() if how in graders or how == "nbgrader"}
    with tempfile.TemporaryDirectory(prefix="class-bench-") as tmp:
        for how, command in commands.items():
            course = Path(tmp) / how
            course.mkdir()
            make_class_course(course, assignment, size, mix)
            done, timings[how], cpu[how] = _run_measured(
                command, course, {**env, "COURSE_ROOT": str(course)}, how
            )
            if done.returncode != 0:
                raise SystemExit(
                    f"{' '.join(command[:2])} failed ({done.returncode}):\n{done.stderr[-3000:]}"
                )
            scores[how] = gradebook_scores(course, assignment)
            print(
                f"{how}: {size} submissions in {timings[how]:.1f} s"
                + (f" ({cpu[how]} CPU-s)" if cpu[how] is not None else ""),
                flush=True,
            )
    cells = {name for _, name in scores["nbgrader"]}
    for how in commands:
        mismatches = sorted(
            k
            for k in scores[how].keys() | scores["nbgrader"].keys()
            if scores[how].get(k) != scores["nbgrader"].get(k)
        )
        if mismatches or len(scores[how]) != size * len(cells):
            raise SystemExit(f"scores differ between {how} and nbgrader autograde: {mismatches[:10]}")
    per_min = {how: round(60 * size / t, 2) for how, t in timings.items()}
    return {
        "assignment": assignment,
        "class_size": size,
        "jobs": jobs or os.cpu_count(),
        "mix": {k: sum(1 for i in range(size) if mix[i % len(mix)] == k) for k in set(mix)},
        "course_autograde_s": round(timings["course"], 1),
        "nbgrader_autograde_s": round(timings["nbgrader"], 1),
        "course_per_min": per_min["course"],
        "nbgrader_per_min": per_min["nbgrader"],
        "ratio": round(timings["nbgrader"] / timings["course"], 2),
        "cpu_s": cpu,  # CPU seconds of each command's whole process tree (None: not measurable here)
        "course_no_audit_s": round(timings["course_no_audit"], 1) if "course_no_audit" in timings else None,
        "course_bare_s": round(timings["course_bare"], 1) if "course_bare" in timings else None,
        "safety_overhead": (
            round(timings["course"] / timings["course_bare"] - 1, 3) if "course_bare" in timings else None
        ),
        "total_score": sum(v[0] for v in scores["course"].values()),
        "grade_cells_compared": len(scores["course"]),
        "identical": True,
    }


def render_class(info: dict, row: dict, command: str = "") -> str:
    size = row["class_size"]
    lines = [
        "# Class throughput",
        "",
        f"Produced by `python benchmarks/run.py --class-size {size}{command}` on:",
        "",
    ]
    lines += [f"- {k}: {v}" for k, v in info.items()]
    lines += [
        "",
        f"{size} submissions of {row['assignment']} ({', '.join(f'{v} {k}' for k, v in sorted(row['mix'].items()))}):",
        "",
        "| grader | wall time (s) | submissions / minute |",
        "| --- | ---: | ---: |",
        f"| `course autograde` ({row['jobs']} jobs) | {row['course_autograde_s']} | {row['course_per_min']} |",
    ]
    for key, label in (
        ("course_no_audit_s", "`course autograde --no-audit`"),
        ("course_bare_s", "`course autograde --no-sandbox --no-audit`"),
    ):
        if row.get(key):
            lines.append(f"| {label} | {row[key]} | {60 * size / row[key]:.2f} |")
    lines += [
        f"| `nbgrader autograde` (serial CLI) | {row['nbgrader_autograde_s']} | {row['nbgrader_per_min']} |",
        "",
        f"Throughput ratio (`course autograde` / `nbgrader autograde`): {row['ratio']}x. Scores "
        f"identical to nbgrader's in all {row['grade_cells_compared']} (student, grade cell) pairs, "
        f"for every `course autograde` row (total {row['total_score']:g} points).",
        "",
    ]
    cpu = row.get("cpu_s") or {}
    if cpu.get("course") and cpu.get("nbgrader"):
        lines += [
            f"CPU time of each command's whole process tree: `course autograde` {cpu['course']} s, "
            f"`nbgrader autograde` {cpu['nbgrader']} s ({cpu['nbgrader'] / cpu['course']:.2f}x "
            "as much); the wall-time ratio is higher because the course's workers use every core.",
            "",
        ]
    if row.get("safety_overhead") is not None:
        lines += [
            f"Sandbox and audit together vs neither: {row['safety_overhead']:+.1%} wall time "
            "(sandboxed kernels are forked from the warm sandbox; unsandboxed ones start cold).",
            "",
        ]
    return "\n".join(lines)


def bench_training() -> dict:
    """Train notebook 08's toy Transformer from scratch (`tools/train_toy_model.py`, nothing saved)."""
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "train_toy_model.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    wall = time.perf_counter() - start
    trained = re.search(r"trained (\d+) steps in ([\d.]+)s on (\S+) \((\d+) threads", out)
    accuracy = re.search(r"held-out exact match .*?: ([\d.]+) float32", out)
    return {
        "steps": int(trained.group(1)),
        "train_s": float(trained.group(2)),
        "device": trained.group(3),
        "threads": int(trained.group(4)),
        "held_out_exact_match": float(accuracy.group(1)),
        "wall_s": round(wall, 1),
    }


# What a notebook may cost a learner: seconds to run it all, the kernel's memory, and how much
# slower it may get when the cores are shared (busy / idle).
TARGET_SECONDS = {"08_generation": 30.0, "09_gpt": 30.0}
DEFAULT_TARGET_SECONDS = 20.0
TARGET_MB = 600
TARGET_BUSY_RATIO = 2.0


def within_targets(row: dict) -> list[str]:
    """What a notebook's row misses of the targets (empty: all met)."""
    missed = []
    limit = TARGET_SECONDS.get(row["notebook"], DEFAULT_TARGET_SECONDS)
    if row["seconds"] > limit:
        missed.append(f"{row['seconds']} s > {limit:g} s")
    if max(row["peak_kernel_mb"], row.get("busy_peak_kernel_mb", 0)) > TARGET_MB:
        missed.append(f"peak memory > {TARGET_MB} MB")
    if row.get("busy_ratio", 0) > TARGET_BUSY_RATIO:
        missed.append(f"busy / idle {row['busy_ratio']} > {TARGET_BUSY_RATIO:g}")
    return missed


def render(info: dict, rows: list[dict], training: dict | None = None, busy: int = 0) -> str:
    command = "python benchmarks/run.py" + (f" --busy {busy}" if busy else "")
    lines = ["# Benchmark results", "", f"Produced by `{command}` on:", ""]
    lines += [f"- {k}: {v}" for k, v in info.items()]
    busy_head = f" with {busy} busy processes (s) | busy / idle |" if busy else ""
    lines += [
        "",
        "| notebook | execute (s) | slowest cell (s) | peak kernel memory (MB) | errors |"
        + busy_head
        + " `course autograde` (s) | `nbgrader autograde` (s) | autograde / execute |",
        "| --- | ---: | ---: | ---: | ---: |" + (" ---: | ---: |" if busy else "") + " ---: | ---: | ---: |",
    ]
    for r in rows:
        ratio = f"{r['course_autograde_s'] / r['seconds']:.2f}" if "course_autograde_s" in r else ""
        loaded = f" {r.get('busy_seconds', '')} | {r.get('busy_ratio', '')} |" if busy else ""
        slowest = f"{r['slowest_cell_s']} (cell {r['slowest_cell']})" if "slowest_cell" in r else ""
        lines.append(
            f"| {r['notebook']} | {r['seconds']} | {slowest} | {r['peak_kernel_mb']} | {r['errors']} |{loaded} "
            f"{r.get('course_autograde_s', '')} | {r.get('nbgrader_autograde_s', '')} | {ratio} |"
        )
    total = sum(r["seconds"] for r in rows)
    lines += ["", f"All {len(rows)} notebooks executed in {total:.1f} s in total.", ""]
    missed = {r["notebook"]: within_targets(r) for r in rows}
    verdict = "; ".join(f"{n}: {', '.join(m)}" for n, m in missed.items() if m) or "all met"
    lines += [
        f"Targets (each notebook at most {DEFAULT_TARGET_SECONDS:g} s, 08 and 09 at most "
        f"{TARGET_SECONDS['08_generation']:g} s, at most {TARGET_MB} MB of kernel memory"
        + (f", at most {TARGET_BUSY_RATIO:g} times slower beside {busy} busy processes" if busy else "")
        + f"): {verdict}.",
        "",
    ]
    for r in rows:
        if r.get("cache"):
            k = r["cache"]
            lines += [
                f"KV cache ({r['notebook']}, generating {k['tokens']} tokens with the shipped "
                f"model, as the notebook measures it): {k['with_cache_tok_s']:,.0f} tokens/s "
                f"with the cache, {k['without_cache_tok_s']:,.0f} without: "
                f"{k['speedup']:.1f}x.",
                "",
            ]
    if training:
        lines += [
            "Training notebook 08's model from scratch (`python tools/train_toy_model.py`): "
            f"{training['steps']} steps in {training['train_s']} s on {training['device']} "
            f"({training['threads']} threads), held-out exact match "
            f"{training['held_out_exact_match']:.2%} (whole command {training['wall_s']} s).",
            "",
        ]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="notebook numbers or names, e.g. 01 03_attention")
    ap.add_argument("--no-autograde", action="store_true", help="skip the grading timings")
    ap.add_argument("--no-train", action="store_true", help="skip training the toy model of 08")
    ap.add_argument(
        "--out",
        default=str(ROOT / "benchmarks" / "results"),
        help="results file stem (.md and .json are written)",
    )
    ap.add_argument(
        "--class-size",
        type=int,
        nargs="?",
        const=40,
        metavar="N",
        help="only the class throughput benchmark, with N submissions (default 40)",
    )
    ap.add_argument(
        "--mix",
        choices=sorted(MIXES),
        default="course",
        help="the submissions of --class-size: 'course' (mostly solved, some blank, partial "
        "and buggy) or 'thirds' (a third each solved, blank and half-done)",
    )
    ap.add_argument(
        "--graders",
        nargs="*",
        choices=GRADERS,
        default=list(GRADERS),
        help="which graders --class-size times (nbgrader's serial run always)",
    )
    ap.add_argument(
        "--jobs", type=int, help="`course autograde --jobs` for --class-size (default: one per core)"
    )
    ap.add_argument(
        "--busy",
        type=int,
        nargs="?",
        const=2,
        default=0,
        metavar="N",
        help="also execute each notebook beside N busy processes (default 2)",
    )
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="R",
        help="the best of R executions of each notebook (idle and busy)",
    )
    ap.add_argument("--execute-one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.execute_one:
        print(json.dumps(execute_one(args.execute_one)))
        return 0
    os.environ["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    if args.class_size:
        info = machine()
        row = bench_class(args.class_size, jobs=args.jobs, mix=MIXES[args.mix], graders=args.graders)
        info["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        stem = (
            str(ROOT / "benchmarks" / "class_results") + ("" if args.mix == "course" else f"_{args.mix}")
            if args.out == ap.get_default("out")
            else args.out
        )
        command = (f" --mix {args.mix}" if args.mix != "course" else "") + (
            f" --graders {' '.join(args.graders)}" if list(args.graders) != list(GRADERS) else ""
        )
        report = render_class(info, row, command)
        Path(stem + ".md").write_text(report)
        Path(stem + ".json").write_text(json.dumps({"machine": info, "class": row}, indent=1) + "\n")
        print(report)
        return 0
    paths = sorted((ROOT / "solutions").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
    if args.only:
        paths = [p for p in paths if any(p.parent.name.startswith(o) for o in args.only)]
    info, rows = machine(), []
    for path in paths:
        name = path.parent.name
        row = {"notebook": name, **bench_notebook_loads(path, args.busy, max(1, args.repeat))}
        if not args.no_autograde:
            row.update(bench_autograde(name))
        rows.append(row)
        print(json.dumps(row), flush=True)
    training = None if args.no_train or args.only else bench_training()
    info["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    report = render(info, rows, training, busy=args.busy)
    Path(args.out + ".md").write_text(report)
    Path(args.out + ".json").write_text(
        json.dumps({"machine": info, "notebooks": rows, "training": training}, indent=1) + "\n"
    )
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
