"""Where a class run is, as it goes: a progress bar with its rate and ETA on a terminal
(tqdm), plain greppable lines otherwise.

On a terminal the bar stays on one line (``grading  45%|████▌     | 18/40 [00:41 elapsed,
ETA 00:50, 2.28s/submission]``) with the last submission graded after it; an error row is
also written above the bar, on a line of its own, so that none scrolls away. When the output
is not a terminal (a log file, a pipe, a batch job) there is no bar, only one line per
submission, as before::

    [18/40] ada 03_attention 8/8
    [19/40] ben 03_attention ERROR no 03_attention.ipynb in the submission (found: no notebooks)

Submissions a resumed run takes from an earlier one (``course autograde --resume``) count
as done from the start: the bar starts there, and its rate and ETA count only what this run
grades. The ETA says ``?`` until one round of the workers has finished (``workers`` results,
at least two), and is then the pace since the first result came, not since the start: the
first result carries the workers' start-up (their fork server, the first kernel), and the
next ones come from all the workers at once, so a rate taken from the first alone (20 s for
1 of 20, 6:23 left) was several times the real one. Every text a student could choose goes
through ``reports_csv.clean`` first.
"""

from __future__ import annotations

import os
import sys
import time

from course_grading.reports.reports_csv import clean

BAR_FORMAT = (
    "{desc} {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} "
    "[{elapsed} elapsed, ETA {remaining}, {rate_fmt}]{postfix}"
)
UNIT = "submission"


def outcome(result) -> str:
    """A result in a few words: its score, or ERROR and why."""
    if result.error:
        return f"ERROR {clean(result.error)}"
    return f"{result.score:g}/{result.max_score:g}"


def is_terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _size(stream) -> tuple[int, int]:
    try:
        return tuple(os.get_terminal_size(stream.fileno()))
    except (AttributeError, ValueError, OSError):
        return 0, 0


class Progress:
    """Reports each finished submission of ``total`` (of which ``already`` were done before
    this run started) to ``stream`` (default: stderr): a bar when ``stream`` is a terminal,
    else one ``[n/N] student assignment outcome`` line each. ``close`` ends the bar."""

    def __init__(self, total: int, stream=None, already: int = 0, desc: str = "grading", workers: int = 1):
        self.stream = stream if stream is not None else sys.stderr
        self.total = total
        self.count = already
        self.bar = None
        self.pace = Pace(workers)
        if is_terminal(self.stream):
            # a terminal not sized yet (a fresh pty) says 0 x 0, where tqdm would draw nothing
            known = min(_size(self.stream)) > 0
            self.bar = _bar_class()(
                total=total,
                initial=already,
                desc=desc,
                unit=UNIT,
                file=self.stream,
                bar_format=BAR_FORMAT,
                dynamic_ncols=known,
                ncols=None if known else 100,
                nrows=None if known else 24,
                leave=True,
            )
            self.bar.pace = self.pace

    def done(self, result) -> None:
        """One more submission finished (a SubmissionResult)."""
        self.count += 1
        self.pace.done()
        who = f"{clean(result.student)} {clean(result.assignment)}"
        if self.bar is None:
            print(f"[{self.count}/{self.total}] {who} {outcome(result)}", file=self.stream, flush=True)
            return
        if result.error:
            self.bar.write(f"{who} {outcome(result)}", file=self.stream)
        self.bar.set_postfix_str(f"{who} {outcome(result)[:60]}", refresh=False)
        self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Pace:
    """Submissions per second of this run, once known: None until ``max(2, workers)`` results
    came, then the count after the first result over the time since it came."""

    def __init__(self, workers: int = 1, clock=time.monotonic):
        self.warm_up = max(2, workers)
        self.clock = clock
        self.first = None  # when the first result came
        self.count = 0

    def done(self) -> None:
        self.count += 1
        if self.first is None:
            self.first = self.clock()

    @property
    def rate(self) -> float | None:
        if self.count < self.warm_up:
            return None
        seconds = self.clock() - self.first
        return (self.count - 1) / seconds if seconds > 0 else None


def _bar_class():
    """tqdm, its rate (and so its ETA) taken from ``Pace``: 0 (shown as ``?``) until known."""
    from tqdm import tqdm

    class Bar(tqdm):
        pace = None

        @property
        def format_dict(self):
            found = super().format_dict
            found["rate"] = (self.pace.rate if self.pace is not None else None) or 0
            return found

    return Bar
