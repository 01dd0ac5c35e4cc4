"""LimitedExecute, RequireSetup and HideHiddenOutputs on small notebooks, in a local kernel:
output bounded whatever way it is produced, a time budget per notebook, hidden tests run apart
from the visible ones (and nothing of theirs in feedback), a failed setup cell fails the
submission."""
from __future__ import annotations

import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from conftest import nbgrader_meta
from course_grading.preprocessors import HideHiddenOutputs, LimitedExecute, RequireSetup, SetupCellFailed
from course_grading.preprocessors.limited_execute import (BUDGET_ENAME, OutputLost, is_hidden_marker,
                                                          split_hidden)

pytestmark = pytest.mark.slow

CELL_LIMIT, NOTEBOOK_LIMIT = 100_000, 300_000


def run(*sources, grade=(), **limits):
    """Execute a notebook of ``sources`` (those at the indices in ``grade`` as grade cells)."""
    nb = new_notebook(cells=[new_code_cell(src, metadata=nbgrader_meta(f"c{i}", grade=True, points=1)
                                           if i in grade else {}) for i, src in enumerate(sources)])
    settings = {"max_output_bytes": CELL_LIMIT, "max_notebook_output_bytes": NOTEBOOK_LIMIT,
                "timeout": 30, **limits}
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
    assert [len(json.dumps(c.outputs)) for c in nb.cells if len(json.dumps(c.outputs)) > CELL_LIMIT + 170_000] == []
    assert "output dropped" in texts(update) and "output dropped" in texts(meta)
    assert [o.output_type for o in result.outputs if o.output_type == "execute_result"] == ["execute_result"]
    assert "output dropped" in texts(printed)  # clearing gave nothing back
    [err] = [o for o in error.outputs if o.output_type == "error"]
    assert err.ename.startswith("EEE") and len(err.ename) <= 200 and len(err.evalue) <= 2000
    # stderr over the limit still leaves stderr behind (nbgrader scores a cell with stderr 0)
    assert any(o.output_type == "stream" and o.name == "stderr" for o in stderr.outputs)


def test_a_message_over_the_limit_is_no_score():
    """A message larger than max_message_bytes never reaches the grader's memory; its cell's
    output is incomplete, so the notebook has no score (an error row), not a silent one."""
    with pytest.raises(OutputLost, match="output of cell 0 did not arrive whole"):
        run("print('z' * 5_000_000)\n", max_message_bytes=2_000_000)


def test_clearing_never_removes_an_error_or_stderr():
    nb = run("import sys\nfrom IPython.display import clear_output\n"
             "print('bad', file=sys.stderr); sys.stderr.flush()\n"
             "ip = get_ipython()\n"
             "ip.events.register('post_run_cell', lambda *a: clear_output())\n"
             "raise ValueError('wrong')\n", "1 + 1\n")
    kinds = [o.output_type for o in nb.cells[0].outputs]
    assert "error" in kinds and any(o.get("name") == "stderr" for o in nb.cells[0].outputs)


def test_a_result_sent_before_an_error_gives_no_points():
    from nbgrader.utils import determine_grade

    nb = run("k = get_ipython().kernel\n"
             "k.session.send(k.iopub_socket, 'execute_result', {'execution_count': 1, 'metadata': {},\n"
             "               'data': {'text/plain': '1.0'}}, parent=k.get_parent('shell'))\n"
             "raise AssertionError('wrong')\n", "1.0\n", grade=(0, 1))
    assert determine_grade(nb.cells[0]) == (0, 1)
    assert determine_grade(nb.cells[1]) == (1.0, 1)  # a cell's own last expression still counts


def test_time_budget_stops_the_notebook():
    nb = run("import time\ntime.sleep(1.5)\n", "time.sleep(1.5)\n", "time.sleep(30)\n", "print('late')\n",
             "assert True\n", grade=(4,), max_total_seconds=4)
    first, second, interrupted, skipped, graded = nb.cells
    assert not [o for o in first.outputs + second.outputs if o.output_type == "error"]
    [err] = [o for o in interrupted.outputs if o.output_type == "error" and o.ename == "CellTimeoutError"]
    assert "time budget of 4 s" in err.evalue
    for cell in (skipped, graded):
        assert [o.ename for o in cell.outputs if o.output_type == "error"] == [BUDGET_ENAME]
        assert "time budget of 4 s" in cell.outputs[0].evalue and "late" not in texts(cell)


HIDDEN = "### BEGIN HIDDEN TESTS\n{}\n### END HIDDEN TESTS\n"


def test_hidden_tests_run_apart_after_a_marker():
    nb = run("def f(x):\n    print('called with', x)\n    return x\n",
             "f(1)\n1 + 1\n" + HIDDEN.format("f(-99)"),
             "raise AssertionError('visible fails')\n" + HIDDEN.format("f(-98)"),
             grade=(1, 2))
    passing, failing = nb.cells[1], nb.cells[2]
    kinds = ["marker" if is_hidden_marker(o) else o.output_type for o in passing.outputs]
    # 1 + 1 is not displayed (as in one request), the cell's last expression f(-99) is
    assert kinds == ["stream", "marker", "stream", "execute_result"]
    assert passing.outputs[0].text == "called with 1\n" and "-99" in passing.outputs[2].text
    assert "-98" not in json.dumps(failing.outputs)  # hidden part not run after a visible failure
    assert is_hidden_marker(failing.outputs[-1]) and failing.outputs[0].output_type == "error"


def test_hidden_part_cannot_reach_the_visible_output():
    nb = run("from IPython.display import display, update_display, clear_output\n"
             "h = display('visible', display_id='v')\n",
             "display('visible too', display_id='w')\n" + HIDDEN.format(
                 "update_display('SECRET-1', display_id='w'); update_display('SECRET-2', display_id='v')\n"
                 "clear_output()\nprint('SECRET-3')"),
             grade=(1,))
    assert nb.cells[0].outputs[0].data["text/plain"] == "'visible'"
    cell = nb.cells[1]
    marker = next(i for i, o in enumerate(cell.outputs) if is_hidden_marker(o))
    assert "SECRET" not in json.dumps(cell.outputs[:marker])
    assert "SECRET-3" in json.dumps(cell.outputs[marker:])


def test_split_hidden():
    assert split_hidden("check(f)\n") is None
    assert split_hidden("check(f)\n### BEGIN HIDDEN TESTS\ncheck(f, hidden=True)\n### END HIDDEN TESTS\n") == (
        "check(f)\npass\n", "### BEGIN HIDDEN TESTS\ncheck(f, hidden=True)\n### END HIDDEN TESTS\n")
    inside = "if True:\n    check(f)\n    ### BEGIN HIDDEN TESTS\n    check(f, 1)\n    ### END HIDDEN TESTS\n"
    assert split_hidden(inside) == (None, inside)
    magic = "%%capture\ncheck(f)\n### BEGIN HIDDEN TESTS\ncheck(f, 1)\n"
    assert split_hidden(magic) == (None, magic)


def test_feedback_keeps_the_visible_part_only():
    nb = run("import os\ndef f(x):\n    print('called with', x)\n    return x\n"
             "print('DECOY')\n",
             # the student forges a marker in the visible part: it only hides more
             "f(1)\n" + HIDDEN.format("f(-99)\nos.write(1, b'FD-WRITE\\n')\nraise ValueError('leak -99')"),
             "from IPython.display import display\nf(2)\n"
             "display({'application/vnd.course.hidden-tests+json': {}, 'text/plain': 'x'}, raw=True)\n"
             "print('AFTER FORGED')\n" + HIDDEN.format("f(-98)"),
             grade=(1, 2))
    out, _ = HideHiddenOutputs().preprocess(nb, {})
    shown = json.dumps([c.outputs for c in out.cells])
    assert "called with 1" in shown and "called with 2" in shown
    for secret in ("-99", "-98", "FD-WRITE", "leak", "AFTER FORGED", "BEGIN HIDDEN"):
        assert secret not in shown, secret
    assert "hidden tests ran here" in shown


def test_feedback_drops_quoted_hidden_and_grading_lines():
    import inspect

    from course_grading import untrusted
    nb = new_notebook(cells=[new_code_cell("x", metadata=nbgrader_meta("t", grade=True, points=1))])
    source = inspect.getsource(untrusted.copy_tree)
    nb.cells[0].source = "check(x)\n### BEGIN HIDDEN TESTS\nassert secret_function(x) == 12345678\n### END HIDDEN TESTS\n"
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text=source + "\nmine\n"),
                           nbformat.v4.new_output("error", ename="E", evalue="x",
                                                  traceback=["---> 3 assert secret_function(x) == 12345678"]),
                           nbformat.v4.new_output("display_data", data={"image/png": "AAAA", "text/plain": "fig"}),
                           nbformat.v4.new_output("stream", name="stdout", text="[marker absent]\n")]
    nb.cells[0].outputs.insert(3, nbformat.v4.new_output(
        "display_data", data={"application/vnd.course.hidden-tests+json": {"hidden_tests": True}}))
    out, _ = HideHiddenOutputs().preprocess(nb, {})
    shown = json.dumps(out.cells[0].outputs)
    assert "mine" in shown and "image/png" not in shown and "fig" in shown
    assert "secret_function" not in shown and "untrusted.copy_tree" not in shown
    assert "fd = open_folder(source, dir_fd=dir_fd, label=label)" not in shown
    assert "[marker absent]" not in shown


def test_cell_with_hidden_tests_and_no_marker_shows_nothing():
    nb = new_notebook(cells=[new_code_cell("check(x)\n### BEGIN HIDDEN TESTS\ncheck(x, 1)\n### END HIDDEN TESTS\n",
                                           metadata=nbgrader_meta("t", grade=True, points=1))])
    nb.cells[0].outputs = [nbformat.v4.new_output("stream", name="stdout", text="hidden input 42\n")]
    out, _ = HideHiddenOutputs().preprocess(nb, {})
    assert "42" not in json.dumps(out.cells[0].outputs)


def test_failed_setup_cell_fails_the_submission():
    setup = {"nbgrader": {**nbgrader_meta("setup")["nbgrader"], "locked": True}}
    nb = new_notebook(cells=[new_code_cell("import no_such_module_here\n", metadata=setup),
                             new_code_cell("assert True\n", metadata=nbgrader_meta("t", grade=True, points=1))])
    LimitedExecute(timeout=30).preprocess(nb, {"metadata": {"path": "."}})
    with pytest.raises(SetupCellFailed, match="setup cell 'setup' failed .*ModuleNotFoundError"):
        RequireSetup().preprocess(nb, {})
    nb.cells[0].outputs = []
    assert RequireSetup().preprocess(nb, {})[0] is nb
