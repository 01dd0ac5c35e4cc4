"""LimitedExecute, RequireSetup and HideHiddenOutputs on small notebooks, in a local kernel:
output bounded whatever way it is produced (weighed as it arrived, before it is read), a time
budget per notebook, hidden tests run after every cell (and nothing of theirs in feedback, nor
anything a cell printed that could depend on them), a failed setup cell fails the submission."""

from __future__ import annotations

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from conftest import nbgrader_meta
from course_grading.preprocessors import HideHiddenOutputs, LimitedExecute, RequireSetup, SetupCellFailed
from course_grading.preprocessors.limited_execute import (
    BUDGET_ENAME,
    MAX_DEPTH,
    UNREAD_ENAME,
    OutputLost,
    is_hidden_marker,
    json_shape,
    split_hidden,
)

pytestmark = pytest.mark.slow

CELL_LIMIT, NOTEBOOK_LIMIT = 100_000, 300_000


def run(*sources, grade=(), **limits):
    """Execute a notebook of ``sources`` (those at the indices in ``grade`` as grade cells)."""
    nb = new_notebook(
        cells=[
            new_code_cell(src, metadata=nbgrader_meta(f"c{i}", grade=True, points=1) if i in grade else {})
            for i, src in enumerate(sources)
        ]
    )
    settings = {
        "max_output_bytes": CELL_LIMIT,
        "max_notebook_output_bytes": NOTEBOOK_LIMIT,
        "timeout": 30,
        **limits,
    }
    LimitedExecute(**settings).preprocess(nb, {"metadata": {"path": "."}})
    return nb


def size(nb) -> int:
    return len(nbformat.writes(nb))


def texts(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_every_kind_of_output_counts():
    nb = run(
        # a display updated over and over: each update replaces the data of every output it reaches
        "from IPython.display import display, update_display\n"
        "for i in range(20):\n    display('x', display_id='d')\n"
        "for i in range(200):\n    update_display('y' * 50_000, display_id='d')\n",
        # metadata of a display, and results
        "from IPython.display import display\n"
        "for i in range(50):\n    display({'text/plain': 'm'}, metadata={'big': 'z' * 50_000}, raw=True)\n",
        "'r' * 5_000_000\n",
        # printing and clearing without end
        "from IPython.display import clear_output\n"
        "for i in range(100):\n    print('p' * 50_000)\n    clear_output(wait=i % 2 == 0)\n",
        # a huge exception: it decides the score, so it stays, cut short
        "raise type('E' * 1_000_000, (Exception,), {})('v' * 1_000_000)\n",
        "import sys\nfor i in range(100):\n    print('e' * 50_000, file=sys.stderr)\n",
        # error messages sent by hand, many of them
        "k = get_ipython().kernel\nfor i in range(300):\n"
        "    k.session.send(k.iopub_socket, 'error', {'ename': 'E', 'evalue': 'v' * 2000,\n"
        "                   'traceback': ['t' * 4000] * 40}, parent=k.get_parent('shell'))\n",
    )
    assert size(nb) < NOTEBOOK_LIMIT + 100_000, size(nb)
    update, meta, result, printed, error, stderr, forged = nb.cells
    assert 1 <= len([o for o in forged.outputs if o.output_type == "error"]) <= 10
    # each cell within its limit, but for one error kept past it (cut short: at most ~170 KB)
    assert [
        len(json.dumps(c.outputs)) for c in nb.cells if len(json.dumps(c.outputs)) > CELL_LIMIT + 170_000
    ] == []
    assert "output dropped" in texts(update) and "output dropped" in texts(meta)
    assert [o.output_type for o in result.outputs if o.output_type == "execute_result"] == ["execute_result"]
    assert "output dropped" in texts(printed)  # clearing gave nothing back
    [err] = [o for o in error.outputs if o.output_type == "error"]
    assert err.ename.startswith("EEE") and len(err.ename) <= 200 and len(err.evalue) <= 2000
    # stderr over the limit still leaves stderr behind (nbgrader scores a cell with stderr 0)
    assert any(o.output_type == "stream" and o.name == "stderr" for o in stderr.outputs)


def test_output_is_weighed_as_it_arrived_before_it_is_read():
    """A display whose metadata holds millions of empty lists weighs what it weighs on the wire:
    over the limit, it is never read into Python objects (the grader's memory stays small) and
    a notice stands for it; so does a message nested too deep, however small. A forged error
    or stream too large to read still costs a grade cell its points."""
    import tracemalloc

    from nbgrader.utils import determine_grade

    tracemalloc.start()
    try:
        nb = run(
            "from IPython.display import display\n"
            "for _ in range(2):\n    display({'text/plain': 'x'}, metadata={'m': [[]] * 4_000_000}, raw=True)\n",
            "deep = []\nfor _ in range(2 * %d):\n    deep = [deep]\n"
            "display({'text/plain': 'deep'}, metadata={'m': deep}, raw=True)\nprint('after')\n" % MAX_DEPTH,
            "k = get_ipython().kernel\n"
            "k.session.send(k.iopub_socket, 'error', {'ename': 'E', 'evalue': 'v', 'traceback': [[]] * 100_000},\n"
            "               parent=k.get_parent('shell'))\n",
            "k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'x', 'more': [[]] * 100_000},\n"
            "               parent=k.get_parent('shell'))\n",
            grade=(2, 3),
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 120 * 2**20, peak  # two 16 MB messages arrived; read, they would take ~500 MB
    assert size(nb) < 50_000
    flood, deep, error, stream = nb.cells
    assert "output dropped: a message of 16" in texts(flood) and "too large to read" in texts(flood)
    assert not [o for o in flood.outputs if o.output_type == "display_data"]
    assert f"nested deeper than {MAX_DEPTH} levels" in texts(deep) and "after" in texts(deep)
    assert [o.ename for o in error.outputs if o.output_type == "error"] == [UNREAD_ENAME]
    assert any(o.output_type == "stream" and o.name == "stderr" for o in stream.outputs)
    assert determine_grade(error)[0] == 0 and determine_grade(stream)[0] == 0


def test_json_shape():
    assert json_shape(b'{"a": [1, 2, {"b": "[[[,,,"}], "c": "\\"[", "d": []}') == (
        14,
        3,
    )  # 4 containers, 6 strings, 4 commas
    assert json_shape(b"[" * 5 + b"]" * 5, max_depth=4) is None
    assert json_shape(b"[" + b"[]," * 100 + b"[]]", max_values=50) is None
    assert json_shape(b'{"a": "no end}') is None


def test_a_message_over_the_limit_is_no_score():
    """A message larger than max_message_bytes never reaches the grader's memory; its cell's
    output is incomplete, so the notebook has no score (an error row), not a silent one."""
    with pytest.raises(OutputLost, match="output of cell 0 did not arrive whole"):
        run("print('z' * 5_000_000)\n", max_message_bytes=2_000_000)


def test_clearing_never_removes_an_error_or_stderr():
    nb = run(
        "import sys\nfrom IPython.display import clear_output\n"
        "print('bad', file=sys.stderr); sys.stderr.flush()\n"
        "ip = get_ipython()\n"
        "ip.events.register('post_run_cell', lambda *a: clear_output())\n"
        "raise ValueError('wrong')\n",
        "1 + 1\n",
    )
    kinds = [o.output_type for o in nb.cells[0].outputs]
    assert "error" in kinds and any(o.get("name") == "stderr" for o in nb.cells[0].outputs)


def test_a_result_sent_before_an_error_gives_no_points():
    from nbgrader.utils import determine_grade

    nb = run(
        "k = get_ipython().kernel\n"
        "k.session.send(k.iopub_socket, 'execute_result', {'execution_count': 1, 'metadata': {},\n"
        "               'data': {'text/plain': '1.0'}}, parent=k.get_parent('shell'))\n"
        "raise AssertionError('wrong')\n",
        "1.0\n",
        grade=(0, 1),
    )
    assert determine_grade(nb.cells[0]) == (0, 1)
    assert determine_grade(nb.cells[1]) == (1.0, 1)  # a cell's own last expression still counts


def test_time_budget_stops_the_notebook():
    nb = run(
        "import time\ntime.sleep(1.5)\n",
        "time.sleep(1.5)\n",
        "time.sleep(30)\n",
        "print('late')\n",
        "assert True\n",
        grade=(4,),
        max_total_seconds=4,
    )
    first, second, interrupted, skipped, graded = nb.cells
    assert not [o for o in first.outputs + second.outputs if o.output_type == "error"]
    [err] = [o for o in interrupted.outputs if o.output_type == "error" and o.ename == "CellTimeoutError"]
    assert "time budget of 4 s" in err.evalue
    for cell in (skipped, graded):
        assert [o.ename for o in cell.outputs if o.output_type == "error"] == [BUDGET_ENAME]
        assert "time budget of 4 s" in cell.outputs[0].evalue and "late" not in texts(cell)


def test_time_budget_covers_the_hidden_tests_and_says_why():
    """Each request runs for what is left of the budget at most; the hidden tests, run last,
    count too: a cell cut while they ran, and one whose hidden tests had no time left, score 0
    and say why where feedback shows it."""
    from nbgrader.utils import determine_grade

    slow = "import time\ndef slow():\n    time.sleep(2.5)\n"
    nb = run(
        slow,
        "slow()\n" + HIDDEN.format("slow()"),
        "slow()\n" + HIDDEN.format("slow()"),
        grade=(1, 2),
        max_total_seconds=6,
    )
    cut, starved = nb.cells[1], nb.cells[2]
    assert [determine_grade(c)[0] for c in (cut, starved)] == [0, 0]
    shown, _ = HideHiddenOutputs().preprocess(nb, {})
    for cell, why in ((cut, "was spent while this cell's hidden tests ran"), (starved, "did not run")):
        [err] = [o for o in cell.outputs if o.output_type == "error"]
        assert err.ename == BUDGET_ENAME and "time budget of 6 s" in err.evalue and why in err.evalue
    # with time enough, the same notebook scores full marks
    nb = run(
        slow,
        "slow()\n" + HIDDEN.format("slow()"),
        "slow()\n" + HIDDEN.format("slow()"),
        grade=(1, 2),
        max_total_seconds=20,
    )
    assert [determine_grade(c)[0] for c in nb.cells[1:]] == [1.0, 1.0]


def test_a_cell_that_will_not_stop_at_the_budget_scores_zero():
    """Interrupted at the end of the budget, a cell that catches the interrupt and goes on is
    left behind after BUDGET_GRACE: it and what follows score 0 with the reason, no output is
    said to be lost, and the notebook does not wait for it."""
    from time import monotonic

    from nbgrader.utils import determine_grade

    started = monotonic()
    nb = run(
        "import time\ntry:\n    time.sleep(30)\nexcept KeyboardInterrupt:\n    time.sleep(60)\n",
        "assert True\n",
        grade=(0, 1),
        max_total_seconds=3,
    )
    assert monotonic() - started < 30  # generous: it would take 60 s more if it waited
    for cell in nb.cells:
        assert determine_grade(cell)[0] == 0
        assert [o.ename for o in cell.outputs if o.output_type == "error"] == [BUDGET_ENAME]
        assert "time budget of 3 s" in cell.outputs[-1].evalue


def test_a_cell_past_its_own_limit_says_so_not_keyboardinterrupt():
    """A graded cell that loops past Execute.timeout is interrupted: it scores 0 with one error
    that names the limit (what grades.csv and the class report show) and the line that was
    running, not the KeyboardInterrupt the interruption raised; the next cells still run."""
    from nbgrader.utils import determine_grade

    nb = run("def f():\n    while True:\n        pass\n", "f()\n", "x = 1\nx\n", grade=(1,), timeout=3)
    looped = nb.cells[1]
    assert determine_grade(looped)[0] == 0
    [err] = [o for o in looped.outputs if o.output_type == "error"]
    assert err.ename == "CellTimeoutError" and "ran past its limit of 3 s" in err.evalue, err
    assert any("while True" in line or "pass" in line for line in err.traceback[:-1]), err.traceback
    assert nb.cells[2].outputs[0].data["text/plain"] == "1"


HIDDEN = "### BEGIN HIDDEN TESTS\n{}\n### END HIDDEN TESTS\n"


def test_hidden_tests_run_apart_after_a_marker():
    nb = run(
        "def f(x):\n    print('called with', x)\n    return x\n",
        "f(1)\n1 + 1\n" + HIDDEN.format("f(-99)"),
        "raise AssertionError('visible fails')\n" + HIDDEN.format("f(-98)"),
        grade=(1, 2),
    )
    passing, failing = nb.cells[1], nb.cells[2]
    kinds = ["marker" if is_hidden_marker(o) else o.output_type for o in passing.outputs]
    # 1 + 1 is not displayed (as in one request), the cell's last expression f(-99) is
    assert kinds == ["stream", "marker", "stream", "execute_result"]
    assert passing.outputs[0].text == "called with 1\n" and "-99" in passing.outputs[2].text
    assert "-98" not in json.dumps(failing.outputs)  # hidden part not run after a visible failure
    assert is_hidden_marker(failing.outputs[-1]) and failing.outputs[0].output_type == "error"


def test_hidden_part_cannot_reach_the_visible_output():
    nb = run(
        "from IPython.display import display, update_display, clear_output\n"
        "h = display('visible', display_id='v')\n",
        "display('visible too', display_id='w')\n"
        + HIDDEN.format(
            "update_display('SECRET-1', display_id='w'); update_display('SECRET-2', display_id='v')\n"
            "clear_output()\nprint('SECRET-3')"
        ),
        grade=(1,),
    )
    assert nb.cells[0].outputs[0].data["text/plain"] == "'visible'"
    cell = nb.cells[1]
    marker = next(i for i, o in enumerate(cell.outputs) if is_hidden_marker(o))
    assert "SECRET" not in json.dumps(cell.outputs[:marker])
    assert "SECRET-3" in json.dumps(cell.outputs[marker:])


def test_split_hidden():
    assert split_hidden("check(f)\n") is None
    assert split_hidden(
        "check(f)\n### BEGIN HIDDEN TESTS\ncheck(f, hidden=True)\n### END HIDDEN TESTS\n"
    ) == ("check(f)\npass\n", "### BEGIN HIDDEN TESTS\ncheck(f, hidden=True)\n### END HIDDEN TESTS\n")
    inside = "if True:\n    check(f)\n    ### BEGIN HIDDEN TESTS\n    check(f, 1)\n    ### END HIDDEN TESTS\n"
    assert split_hidden(inside) == (None, inside)
    magic = "%%capture\ncheck(f)\n### BEGIN HIDDEN TESTS\ncheck(f, 1)\n"
    assert split_hidden(magic) == (None, magic)


def test_feedback_keeps_the_visible_part_only():
    nb = run(
        "import os\ndef f(x):\n    print('called with', x)\n    return x\nprint('DECOY')\n",
        # the student forges a marker in the visible part: it only hides more
        "f(1)\n" + HIDDEN.format("f(-99)\nos.write(1, b'FD-WRITE\\n')\nraise ValueError('leak -99')"),
        "from IPython.display import display\nf(2)\n"
        "display({'application/vnd.course.hidden-tests+json': {}, 'text/plain': 'x'}, raw=True)\n"
        "print('AFTER FORGED')\n" + HIDDEN.format("f(-98)"),
        grade=(1, 2),
    )
    out, _ = HideHiddenOutputs().preprocess(nb, {})
    shown = json.dumps([c.outputs for c in out.cells])
    assert "called with 1" in shown and "called with 2" in shown
    for secret in ("-99", "-98", "FD-WRITE", "leak", "AFTER FORGED", "BEGIN HIDDEN"):
        assert secret not in shown, secret
    assert "hidden tests ran here" in shown


def test_no_later_cell_sees_what_the_hidden_tests_passed(tmp_path):
    """The student's function keeps its inputs (a global list, a file, an attribute, an object
    whose __del__ prints them) and later cells show them: they ran before any hidden test, so
    feedback shows the visible inputs only; the hidden part still sees everything."""
    keep = (
        f"SEEN_FILE = {str(tmp_path / 'seen.txt')!r}\nSEEN = []\n"
        "class Tell:\n    def __del__(self):\n        print('DEL', SEEN)\n"
        "def f(x):\n    global tell\n    SEEN.append(x)\n    f.seen = list(SEEN)\n    tell = Tell()\n"
        "    with open(SEEN_FILE, 'a') as fh:\n        fh.write(f'{x}\\n')\n    return x\n"
    )
    nb = run(
        keep,
        "assert f('visible-1') == 'visible-1'\n" + HIDDEN.format("assert f('SECRET-A') == 'SECRET-A'"),
        "print('LIST', SEEN)\nprint('FILE', open(SEEN_FILE).read())\nf('visible-2')\n",
        "from IPython.display import display\n"
        "display({'text/html': f'<b>{f.seen}</b>', 'text/plain': f'ATTR {f.seen}'}, raw=True)\n",
        "assert f('visible-3')\n" + HIDDEN.format("assert f('SECRET-B')\nprint('HIDDEN SAW', SEEN)"),
        grade=(1, 4),
    )
    assert "SECRET-A" in json.dumps(nb.cells[4].outputs)  # the hidden part ran last, after all
    out, _ = HideHiddenOutputs().preprocess(nb, {})
    shown = json.dumps([c.outputs for c in out.cells])
    assert "SECRET" not in shown and "HIDDEN SAW" not in shown
    assert "LIST ['visible-1']" in shown and "FILE visible-1" in shown and "DEL" in shown
    assert "ATTR ['visible-1', 'visible-2']" in shown


def test_feedback_drops_quoted_hidden_and_grading_lines():
    import inspect

    from course_grading import untrusted

    nb = new_notebook(cells=[new_code_cell("x", metadata=nbgrader_meta("t", grade=True, points=1))])
    source = inspect.getsource(untrusted.copy_tree)
    nb.cells[
        0
    ].source = (
        "check(x)\n### BEGIN HIDDEN TESTS\nassert secret_function(x) == 12345678\n### END HIDDEN TESTS\n"
    )
    nb.cells[0].outputs = [
        nbformat.v4.new_output("stream", name="stdout", text=source + "\nmine\n"),
        nbformat.v4.new_output(
            "error", ename="E", evalue="x", traceback=["---> 3 assert secret_function(x) == 12345678"]
        ),
        nbformat.v4.new_output("display_data", data={"image/png": "AAAA", "text/plain": "fig"}),
        nbformat.v4.new_output("stream", name="stdout", text="[marker absent]\n"),
    ]
    nb.cells[0].outputs.insert(
        3,
        nbformat.v4.new_output(
            "display_data", data={"application/vnd.course.hidden-tests+json": {"hidden_tests": True}}
        ),
    )
    out, _ = HideHiddenOutputs().preprocess(nb, {})
    shown = json.dumps(out.cells[0].outputs)
    assert "mine" in shown and "image/png" not in shown and "fig" in shown
    assert "secret_function" not in shown and "untrusted.copy_tree" not in shown
    assert "fd = open_folder(source, dir_fd=dir_fd, label=label)" not in shown
    assert "[marker absent]" not in shown


def test_cell_with_hidden_tests_and_no_marker_shows_nothing():
    nb = new_notebook(
        cells=[
            new_code_cell(
                "check(x)\n### BEGIN HIDDEN TESTS\ncheck(x, 1)\n### END HIDDEN TESTS\n",
                metadata=nbgrader_meta("t", grade=True, points=1),
            )
        ]
    )
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="hidden input 42\n")]
    out, _ = HideHiddenOutputs().preprocess(nb, {})
    assert "42" not in json.dumps(out.cells[0].outputs)


def test_failed_setup_cell_fails_the_submission():
    setup = {"nbgrader": {**nbgrader_meta("setup")["nbgrader"], "locked": True}}
    nb = new_notebook(
        cells=[
            new_code_cell("import no_such_module_here\n", metadata=setup),
            new_code_cell("assert True\n", metadata=nbgrader_meta("t", grade=True, points=1)),
        ]
    )
    LimitedExecute(timeout=30).preprocess(nb, {"metadata": {"path": "."}})
    with pytest.raises(SetupCellFailed, match="setup cell 'setup' failed .*ModuleNotFoundError"):
        RequireSetup().preprocess(nb, {})
    nb.cells[0].outputs = []
    assert RequireSetup().preprocess(nb, {})[0] is nb


class _Channel:
    """A channel that holds ``queued`` messages and records each wait it is asked for."""

    def __init__(self, queued=()):
        self.queued, self.waits = list(queued), []

    async def get_msg(self, timeout=None):
        from queue import Empty

        self.waits.append(timeout)
        if not self.queued:
            raise Empty
        return self.queued.pop(0)


class _Client:
    def __init__(self, replies, iopub):
        self.shell_channel, self.iopub_channel = _Channel(replies), _Channel(iopub)
        self.requests, self.info = 0, None

    def kernel_info(self):
        self.requests += 1

    def _handle_kernel_info_reply(self, msg):
        self.info = msg

    async def _async_is_alive(self):
        return True


def test_a_kernel_is_ready_without_a_pause_for_iopub_to_fall_quiet():
    """Waiting for a grading kernel: its kernel_info reply, and IOPub seen to be connected;
    then what IOPub holds is read without waiting for more. jupyter_client's own version ends
    by waiting until IOPub has been quiet for 0.2 s: a pause at every submission's start
    (about 4 s of a class of 40 on 2 cores), with nothing to wait for."""
    import asyncio

    from course_grading.preprocessors.limited_execute import wait_for_ready

    reply = {"msg_type": "kernel_info_reply", "content": {}}
    status = [{"msg_type": "status"} for _ in range(3)]
    kc = _Client([{"msg_type": "other_reply"}, reply], status)
    asyncio.run(wait_for_ready(kc, timeout=5))
    assert kc.info is reply and kc.requests == 2
    assert kc.iopub_channel.queued == []  # everything queued was read
    assert kc.iopub_channel.waits[-1] == 0 and max(kc.iopub_channel.waits[1:]) == 0

    dead = _Client([], [])
    dead._async_is_alive = lambda: asyncio.sleep(0, result=False)
    with pytest.raises(RuntimeError, match="died before replying"):
        asyncio.run(wait_for_ready(dead, timeout=5))


def test_the_grading_client_uses_that_wait(monkeypatch):
    """The kernel client LimitedExecute makes waits that way (a real kernel: then the first
    cell runs and its output is read)."""
    from course_grading.preprocessors import limited_execute

    used = []

    async def recording(kc, timeout=None):
        used.append(kc)
        return await wait(kc, timeout)

    wait = limited_execute.wait_for_ready
    monkeypatch.setattr(limited_execute, "wait_for_ready", recording)
    nb = run("print('ready')")
    assert len(used) == 1
    assert texts(nb.cells[0]) == "ready\n"
