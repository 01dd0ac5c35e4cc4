"""The audit's child run the tests' way: in a fork of the test process (``forked``: the same code
as in the sandbox, on the same fresh inputs, with its hooks armed and its record read from its
pipe as the grader's side reads it), or in this process without a record (``in_process``: the
values alone), hundreds of times in seconds."""

from __future__ import annotations

import os
import signal
import sys
import time
import warnings
from pathlib import Path

from course_grading.audit import channel, child, forbidden

SECONDS = 60


def forked(folder: Path) -> str:
    """``audit(..., runner=forked)``: '' or why the child ended early."""
    import ipywidgets  # noqa: F401 - loaded for real first: the child stubs what is not loaded
    import matplotlib.pyplot  # noqa: F401

    forbidden.recorded_ops()  # looked up once, before the fork, as the warm sandbox does
    read, write = channel.open_pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the test process
        code = 70
        try:
            os.close(read)
            # the real child is a fresh process: an assignment's building_blocks imported (or
            # put on the path) by an earlier test must not stand in for this folder's
            sys.modules.pop("building_blocks", None)
            sys.path[:] = [p for p in sys.path if "solutions" not in Path(p).parts]
            warnings.simplefilter("ignore")  # variants that warn on purpose
            child.stand_in_unaudited()  # as in the sandbox: the checks, plots and widgets
            child.main(str(folder), write)
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    drain = channel.Drain(read)
    deadline, ended = time.monotonic() + SECONDS, ""
    while os.waitpid(pid, os.WNOHANG) == (0, 0):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            ended = f"the audit ran out of time ({SECONDS} s)"
            break
        time.sleep(0.005)
    channel.write_record(folder, drain.finish())
    return ended


def in_process(folder: Path) -> str:
    """``audit(..., runner=in_process)``: the child's code in this process, without its record
    (nothing armed: the values alone are compared), for what only the values must decide."""
    import ipywidgets  # noqa: F401
    import matplotlib.pyplot  # noqa: F401

    sys.modules.pop("building_blocks", None)
    path = sys.path[:]
    sys.path[:] = [p for p in path if "solutions" not in Path(p).parts]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            child.main(str(folder))
    finally:
        sys.path[:] = path
    return ""
