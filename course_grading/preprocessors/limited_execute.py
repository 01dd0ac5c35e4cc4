"""``LimitedExecute``: nbgrader's Execute with the output, the time and the reach of each
submission bounded, and the hidden tests of each cell run apart from its visible tests.

* **Output.** Every output message the kernel sends is counted at its full size (data,
  metadata, text, ename, evalue, traceback, display updates once per output they update, widget
  messages), per cell (``max_output_bytes``) and per notebook (``max_notebook_output_bytes``).
  Nothing is given back: clearing the output does not let a cell produce more. Past a limit,
  output is dropped with one notice; what decides a score is never dropped: an error is kept
  (cut short), stderr leaves a stderr notice, a result a stub.
* **Memory.** The grader's connection to the kernel takes messages of at most
  ``max_message_bytes`` and holds at most ``queued_messages`` waiting, so a kernel that writes
  without end cannot fill the grader's memory. A message dropped for its size leaves its cell's
  output incomplete: the submission then fails (``OutputLost``), it is not scored on part of it.
* **Time.** Besides nbgrader's per-cell ``Execute.timeout``, a notebook has
  ``max_total_seconds`` from its first cell on: a cell still running when they are spent is
  interrupted, and the cells after it are not run; each gets an error output saying so (a
  grade cell thus scores 0, with that message).
* **Hidden tests.** A cell holding a hidden-test region runs in two requests: its visible part,
  then, only if that part raised nothing, the rest from the hidden-test delimiter on. Between
  them the grader itself puts a marker output (``HIDDEN_MIME``): the kernel cannot move output
  of the hidden part before it (nbclient files output by the request it answers), clearing the
  output keeps it, and display updates reach only outputs of the running request. A cell
  whose parts cannot be run apart runs whole, with the marker first. Feedback drops everything
  from the first marker of a cell on (``HideHiddenOutputs``); a forged marker only drops more.
* **Errors and stderr survive clearing**, so that a cleared output cannot turn a failing cell
  into a passing one; and a grade cell that raised keeps no result output (nbgrader would give
  it the points a result sent before the error claims).
"""
from __future__ import annotations

import math
from time import monotonic

from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Integer

from ..cells import Markers, is_grade

HIDDEN_MIME = "application/vnd.course.hidden-tests+json"
HIDDEN_TEXT = "[course: the hidden tests ran from here on]"
NOT_RUN_TEXT = "[course: the hidden tests did not run]"
BUDGET_ENAME = "TimeBudgetSpent"
MAX_SPLIT_SOURCE = 64 * 2**10  # characters of a test cell parsed to run its hidden part apart
_NOTICE_START = "\n[course: output dropped"
_COUNTED = {"stream", "display_data", "execute_result", "error", "update_display_data",
            "comm_open", "comm_msg"}
_KEPT_ON_CLEAR = ("error",)


class OutputLost(Exception):
    """Output of a cell never reached the grader (dropped for its size or its rate)."""


def hidden_marker(ran: bool = True) -> dict:
    """The output the grader puts where a cell's hidden tests begin (``ran``), or at the end
    of a cell whose hidden tests did not run (its visible part raised, or no time was left)."""
    return new_output("display_data", data={HIDDEN_MIME: {"hidden_tests": ran},
                                            "text/plain": HIDDEN_TEXT if ran else NOT_RUN_TEXT})


def is_hidden_marker(output) -> bool:
    return output.get("output_type") == "display_data" and HIDDEN_MIME in (output.get("data") or {})


def message_size(msg: dict) -> int:
    """The size of a kernel message's content and binary buffers: the length of every key,
    string and number in it (however deeply nested; nothing is copied)."""
    size, stack = 0, [msg.get("content", {}), list(msg.get("buffers") or [])]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            stack.extend(value)
        elif isinstance(value, (str, bytes, bytearray, memoryview)):
            size += len(value)
        else:
            size += 8
    return size


class LimitedExecute(Execute):
    """nbgrader's Execute with bounded output and time, and hidden tests run apart (see the
    module docstring)."""

    max_output_bytes = Integer(1_000_000, help="output one cell may produce in all (bytes)").tag(config=True)
    max_notebook_output_bytes = Integer(
        10_000_000, help="output one notebook may produce in all (bytes)").tag(config=True)
    max_total_seconds = Integer(
        180, help="seconds one notebook's cells may run in all (0: no limit); the per-cell limit "
                  "is Execute.timeout").tag(config=True)

    max_message_bytes = Integer(
        64_000_000, help="largest message taken from the kernel (bytes); a larger one is "
                         "dropped, and its cell's score cannot be computed").tag(config=True)
    queued_messages = Integer(
        4, help="messages from the kernel held waiting for the grader at most (the kernel "
                "holds more, then drops them)").tag(config=True)

    _CELL_NOTICE = _NOTICE_START + ": this cell's output is over {} bytes]\n"
    _NOTEBOOK_NOTICE = _NOTICE_START + ": this notebook's output is over {} bytes]\n"

    # --------------------------------------------------------------------------- per notebook

    def preprocess(self, nb, resources=None, km=None):
        self._used_cell: dict[int, int] = {}
        self._used_notebook = 0
        self._noticed: set[tuple[int, str]] = set()
        self._deadline: float | None = None
        self._part_start = 0          # first output index of the request now running
        self._prefix: list | None = None  # outputs to put back before the hidden part's own
        self._cell_index_now: int | None = None
        self._markers = Markers.from_config(self.config)
        return super().preprocess(nb, resources, km)

    # --------------------------------------------------------------------------- the channels

    async def async_start_new_kernel_client(self):
        """nbclient's, with the client's sockets in a context of their own that takes messages
        of at most ``max_message_bytes`` and holds at most ``queued_messages``: what waits for
        the grader is bounded, however fast and however much the kernel writes."""
        import zmq
        import zmq.asyncio

        context = zmq.asyncio.Context()
        context.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        context.setsockopt(zmq.RCVHWM, self.queued_messages)
        make_client = self.km.client

        def client(**kw):
            kc = make_client(context=context, **kw)
            kc._created_context = True  # destroyed with the client
            return kc
        self.km.client = client
        try:
            return await super().async_start_new_kernel_client()
        finally:
            del self.km.client  # the class's method again

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    # --------------------------------------------------------------------------- time

    def _seconds_left(self) -> float | None:
        if self._deadline is None:
            return None
        return self._deadline - monotonic()

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        left = self._seconds_left()
        if left is None:
            return timeout
        left = max(1, math.ceil(left))
        return left if timeout is None else min(timeout, left)

    def _budget_message(self) -> str:
        return (f"not run: the notebook's time budget of {self.max_total_seconds} s "
                "(LimitedExecute.max_total_seconds) was spent before this cell")

    # --------------------------------------------------------------------------- cells

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        if cell.cell_type != "code" or not cell.source.strip():
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        if self._deadline is None and self.max_total_seconds > 0:
            self._deadline = monotonic() + self.max_total_seconds
        left = self._seconds_left()
        # hidden tests are the instructor's, in grade cells (nbgrader restores their source):
        # a student's own cell is never split (nor parsed here: IPython's transformer took
        # seconds for a few hundred magics), it runs whole and feedback withholds its output
        parts = split_hidden(cell.source, self._markers) if is_grade(cell) else None
        if left is not None and left <= 0:
            cell.outputs = [new_output("error", ename=BUDGET_ENAME, evalue=self._budget_message(),
                                       traceback=[f"{BUDGET_ENAME}: {self._budget_message()}"])]
            cell.outputs += [hidden_marker(ran=False)] if parts is not None else []
            cell.execution_count = None
            self.nb["cells"][cell_index] = cell
            return cell
        original = cell.source
        try:
            if parts is None:
                await self._run(cell, cell_index, execution_count, store_history)
            else:
                await self._run_apart(cell, cell_index, parts, execution_count, store_history)
        except CellTimeoutError as exc:
            if "IOPub" not in str(exc):
                raise
            raise OutputLost(f"the output of cell {cell_index} did not arrive whole (a message over "
                             f"{self.max_message_bytes} bytes, or output sent faster than it was read): "
                             "its score cannot be computed") from None
        finally:
            cell.source = original
        if parts is not None and not any(is_hidden_marker(o) for o in cell.outputs):
            cell.outputs.append(hidden_marker(ran=False))
        if is_grade(cell) and any(o.get("output_type") == "error" for o in cell.outputs):
            # a cell that raised never displayed its last expression: a result before the
            # error was sent by the code it ran, and nbgrader would score the cell by it
            cell.outputs = [o for o in cell.outputs if o.get("output_type") != "execute_result"]
        left = self._seconds_left()
        if left is not None and left <= 0:  # interrupted because the budget ran out
            for output in cell.outputs:
                if output.get("output_type") == "error" and output.get("ename") == "CellTimeoutError":
                    output["evalue"] = ("interrupted: the notebook's time budget of "
                                        f"{self.max_total_seconds} s (LimitedExecute.max_total_seconds) was spent")
        return cell

    execute_cell = run_sync(async_execute_cell)

    async def _run(self, cell, cell_index, execution_count, store_history, prefix=None):
        """One request; ``prefix`` (outputs) is put before the outputs it produces."""
        self._prefix = prefix
        self._part_start = len(prefix or [])
        try:
            await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        finally:
            if self._prefix is not None:  # no message came at all
                cell.outputs[:0] = self._prefix
                self._prefix = None

    async def _run_apart(self, cell, cell_index, parts, execution_count, store_history):
        visible, hidden = parts
        if visible is None:  # cannot be run apart: whole, everything after the marker
            await self._run(cell, cell_index, execution_count, store_history, prefix=[hidden_marker()])
            return
        cell.source = visible
        await self._run(cell, cell_index, execution_count, store_history)
        raised = any(o.get("output_type") == "error" for o in cell.outputs)
        left = self._seconds_left()
        if raised or (left is not None and left <= 0):
            return
        cell.source = hidden
        await self._run(cell, cell_index, execution_count, store_history,
                        prefix=[*cell.outputs, hidden_marker()])

    # --------------------------------------------------------------------------- messages

    def on_cell_executed(self, **kwargs):
        """nbgrader adds the reply's error to the cell when no error output has its name: the
        reply is cut short as the error message was, so the two match (and nothing uncut is
        added)."""
        reply = kwargs.get("execute_reply") or {}
        if (reply.get("content") or {}).get("status") == "error":
            reply["content"] = _cut_error_content(reply["content"])
        return super().on_cell_executed(**kwargs)

    def process_message(self, msg, cell, cell_index):
        self._cell_index_now = cell_index
        if self._prefix is not None:  # the first message of a request that continues a cell
            cell.outputs[:0] = self._prefix
            self._prefix = None
        msg_type = msg.get("msg_type")
        if msg_type in _COUNTED:
            msg = self._within_limits(msg, cell, cell_index)
            if msg is None:
                return None
        return super().process_message(msg, cell, cell_index)

    def _within_limits(self, msg, cell, cell_index):
        """``msg`` if it fits in what the cell and the notebook may still produce (counted),
        a cut-short copy where dropping it would change the score, else None."""
        msg_type = msg["msg_type"]
        if msg_type == "error":
            msg = _cut_error(msg)
        size = message_size(msg)
        display_id = ((msg.get("content") or {}).get("transient") or {}).get("display_id")
        if display_id and msg_type in ("display_data", "execute_result", "update_display_data"):
            targets = len(self._display_targets(display_id, cell_index))  # outputs it rewrites
            size *= targets + (msg_type != "update_display_data")
        cell_used = self._used_cell.get(cell_index, 0) + size
        notebook_used = self._used_notebook + size
        if cell_used <= self.max_output_bytes and notebook_used <= self.max_notebook_output_bytes:
            self._used_cell[cell_index] = cell_used
            self._used_notebook = notebook_used
            return msg
        which = "cell" if cell_used > self.max_output_bytes else "notebook"
        self._notice(cell, cell_index, which)
        content = msg.get("content") or {}
        kinds = {o.get("output_type") for o in cell.outputs}
        if msg_type == "error":  # the first one is kept (cut short): it decides the score
            return msg if "error" not in kinds else None
        if msg_type == "stream" and content.get("name") == "stderr":
            self._notice(cell, cell_index, which, stream="stderr")
        elif msg_type == "execute_result" and "execute_result" not in kinds:  # a stub of the first
            return dict(msg, content={"execution_count": content.get("execution_count"), "metadata": {},
                                      "data": {"text/plain": str((content.get("data") or {}).get(
                                          "text/plain", ""))[:200]}})
        return None

    def _notice(self, cell, cell_index, which, stream="stdout"):
        if (cell_index, stream) in self._noticed:
            return
        self._noticed.add((cell_index, stream))
        limit = self.max_output_bytes if which == "cell" else self.max_notebook_output_bytes
        text = (self._CELL_NOTICE if which == "cell" else self._NOTEBOOK_NOTICE).format(limit)
        cell.outputs.append(new_output("stream", name=stream, text=text))

    def _display_targets(self, display_id, cell_index) -> list[int]:
        """The outputs of the running request that a display update of ``display_id`` reaches."""
        return [i for i in (self._display_id_map.get(display_id) or {}).get(cell_index, [])
                if i >= self._part_start]

    def _update_display_id(self, display_id, msg):
        """Display updates reach only outputs of the request that is running: never another
        cell's, never the visible tests' from the hidden tests."""
        saved = self._display_id_map.get(display_id)
        if not saved:
            return
        index = self._cell_index_now
        self._display_id_map[display_id] = {index: [i for i in saved.get(index, []) if i >= self._part_start]}
        try:
            super()._update_display_id(display_id, msg)
        finally:
            self._display_id_map[display_id] = saved

    def clear_output(self, outs, msg, cell_index):
        """nbclient's clear_output, keeping errors, stderr and hidden-test markers."""
        hooked = self.output_hook_stack[msg["parent_header"].get("msg_id")]
        if hooked or (msg.get("content") or {}).get("wait"):
            return super().clear_output(outs, msg, cell_index)
        self._clear(outs, cell_index)
        return None

    def output(self, outs, msg, display_id, cell_index):
        if self.clear_before_next_output and not self.output_hook_stack[msg["parent_header"].get("msg_id")]:
            self._clear(outs, cell_index)  # the delayed clear of clear_output(wait=True)
            self.clear_before_next_output = False
        return super().output(outs, msg, display_id, cell_index)

    def _clear(self, outs, cell_index):
        outs[:] = [o for o in outs if _kept_on_clear(o)]
        self.clear_display_id_mapping(cell_index)
        self._part_start = len(outs)


def _kept_on_clear(output) -> bool:
    stream = output.get("output_type") == "stream"
    return (output.get("output_type") in _KEPT_ON_CLEAR or is_hidden_marker(output)
            or (stream and output.get("name") == "stderr")
            or (stream and str(output.get("text", "")).startswith(_NOTICE_START)))


def _cut_error(msg: dict) -> dict:
    """An error message with its name, value and traceback cut short."""
    return dict(msg, content=_cut_error_content(msg.get("content") or {}))


def _cut_error_content(content: dict) -> dict:
    traceback = content.get("traceback") or []
    return {**content, "ename": str(content.get("ename", ""))[:200],
            "evalue": str(content.get("evalue", ""))[:2000],
            "traceback": [str(t)[:4000] for t in (traceback if isinstance(traceback, list) else [])[-40:]]}


def split_hidden(source: str, markers: Markers = Markers()):
    """How a cell holding a hidden-test region runs: None when it holds none; else (visible,
    hidden): the lines before the first hidden-test delimiter (a final ``pass`` keeps their last
    expression from being displayed, as in one request) and the lines from it on, or (None,
    source) when they cannot be run apart (the delimiter is indented or inside an unfinished
    statement, a cell magic, a part that does not parse)."""
    if markers.begin_hidden not in source:
        return None
    if len(source) > MAX_SPLIT_SOURCE:  # no test cell is that long: not parsed, run whole
        return None, source
    lines = source.splitlines(keepends=True)
    at = next((i for i, line in enumerate(lines) if markers.begin_hidden in line), None)
    if at is None:
        return None
    visible, hidden = "".join(lines[:at]), "".join(lines[at:])
    if (lines[at][:1].isspace() or source.lstrip().startswith("%%")
            or not (_complete(visible) and _complete(hidden))):
        return None, source
    if not visible.strip():
        return "pass\n", hidden
    return visible.rstrip("\n") + "\npass\n", hidden


def _complete(code: str) -> bool:
    """Whether ``code`` is whole statements, as IPython would run it (magics included)."""
    from IPython.core.inputtransformer2 import TransformerManager

    try:
        compile(TransformerManager().transform_cell(code), "<cell>", "exec")
    except (SyntaxError, ValueError, RuntimeError, MemoryError):  # RuntimeError: recursion, or
        return False  # IPython's "input transformation still changing after 500 iterations"
    return True
