"""Benchmark the course on this machine (not a test: it measures, it never fails on a slow box).

    python benchmarks/run.py                  # everything, writes benchmarks/results.md + .json
    python benchmarks/run.py --only 03 --no-autograde

For each solution notebook: wall time to execute it top to bottom in a fresh kernel, and the
kernel's peak memory (max RSS). For each assignment: the time to autograde one submission with
`course autograde` (in-process nbgrader API) next to plain `nbgrader autograde` from the CLI,
on the same submission.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
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
    info = {"when": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "platform": platform.platform(), "cpu": cpu, "cores": os.cpu_count(),
            "memory_gb": mem_gb, "python": platform.python_version()}
    try:
        import torch

        from course_utils import get_device
        info["torch"] = torch.__version__
        info["device"] = str(get_device())
        info["torch_threads"] = torch.get_num_threads()
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
    NotebookClient(nb, timeout=600, kernel_name="python3",
                   resources={"metadata": {"path": str(Path(path).parent)}}).execute()
    seconds = time.perf_counter() - start
    errors = sum(1 for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error")
    # The kernel was our child and has exited: RUSAGE_CHILDREN holds its peak RSS (KiB on Linux).
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    peak_mb = peak / 1024 if sys.platform != "darwin" else peak / 2**20
    return {"seconds": round(seconds, 2), "peak_kernel_mb": round(peak_mb), "errors": errors}


def bench_notebook(path: Path) -> dict:
    out = subprocess.run([sys.executable, __file__, "--execute-one", str(path)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_autograde(assignment: str) -> dict:
    """Grade the solution as one student's submission: `course autograde` vs `nbgrader autograde`."""
    from course_utils import grader

    results = {}
    for how in ("course", "nbgrader"):
        with tempfile.TemporaryDirectory() as tmp:
            course = Path(tmp)
            shutil.copy(ROOT / "nbgrader_config.py", course)
            shutil.copytree(ROOT / "solutions" / assignment, course / "solutions" / assignment)
            grader.release(course, [assignment])  # records the assignment in the gradebook
            sub = course / "submitted" / "bench" / assignment
            sub.mkdir(parents=True)
            shutil.copy(course / "solutions" / assignment / f"{assignment}.ipynb", sub)
            env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
                   "MPLBACKEND": "Agg"}
            start = time.perf_counter()
            if how == "course":
                subprocess.run([str(BIN / "course"), "autograde", assignment, "--jobs", "1"],
                               cwd=course, env=env, check=True, capture_output=True)
            else:
                subprocess.run([str(BIN / "nbgrader"), "autograde", assignment, "--force"],
                               cwd=course, env=env, check=True, capture_output=True)
            results[f"{how}_autograde_s"] = round(time.perf_counter() - start, 2)
    return results


def render(info: dict, rows: list[dict]) -> str:
    lines = ["# Benchmark results", "", "Produced by `python benchmarks/run.py` on:", ""]
    lines += [f"- {k}: {v}" for k, v in info.items()]
    lines += ["", "| notebook | execute (s) | peak kernel memory (MB) | errors | "
              "`course autograde` (s) | `nbgrader autograde` (s) | autograde / execute |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        ratio = (f"{r['course_autograde_s'] / r['seconds']:.2f}"
                 if "course_autograde_s" in r else "")
        lines.append(f"| {r['notebook']} | {r['seconds']} | {r['peak_kernel_mb']} | {r['errors']} | "
                     f"{r.get('course_autograde_s', '')} | {r.get('nbgrader_autograde_s', '')} | {ratio} |")
    total = sum(r["seconds"] for r in rows)
    lines += ["", f"All {len(rows)} notebooks executed in {total:.1f} s in total.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="notebook numbers or names, e.g. 01 03_attention")
    ap.add_argument("--no-autograde", action="store_true", help="skip the grading timings")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"),
                    help="results file stem (.md and .json are written)")
    ap.add_argument("--execute-one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.execute_one:
        print(json.dumps(execute_one(args.execute_one)))
        return 0
    os.environ["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    paths = sorted((ROOT / "solutions").glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb"))
    if args.only:
        paths = [p for p in paths if any(p.parent.name.startswith(o) for o in args.only)]
    info, rows = machine(), []
    for path in paths:
        name = path.parent.name
        row = {"notebook": name, **bench_notebook(path)}
        if not args.no_autograde:
            row.update(bench_autograde(name))
        rows.append(row)
        print(json.dumps(row), flush=True)
    report = render(info, rows)
    Path(args.out + ".md").write_text(report)
    Path(args.out + ".json").write_text(json.dumps({"machine": info, "notebooks": rows}, indent=1) + "\n")
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
