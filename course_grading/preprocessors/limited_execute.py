"""Over 500 lines: one class, nbgrader's Execute with its bounds, and the docstring specifying them.

``LimitedExecute``: nbgrader's Execute with the output, the time and the reach of each
submission bounded, and the hidden tests of the notebook run after all its cells.

* **Output.** Every message the kernel sends is weighed by the bytes it arrived as (header,
  metadata, content, buffers: data, transient fields and containers included), before it is
  deserialised (``WeighingChannel``). An output counts that weight per cell
  (``max_output_bytes``) and per notebook (``max_notebook_output_bytes``); display updates count
  once per output they update, widget messages count too. Nothing is given back: clearing the
  output does not let a cell produce more. Past a limit, output is dropped with one notice in
  the cell (the instructor sees it in the graded notebook; the grader's log says so); what
  decides a score is never dropped: an error is kept (cut short), stderr leaves a stderr notice,
  a result a stub. A message over what its cell may still produce is read into Python objects
  only if it holds few values (``READ_VALUES``): else it is replaced by a stub of its kind
  without being read (an error stays an error, a stream counts as stderr, a reply as an error),
  and so is any message nested deeper than ``MAX_DEPTH`` levels.
* **Memory.** The grader's connection to the kernel takes messages of at most
  ``max_message_bytes`` and holds at most ``queued_messages`` waiting, so a kernel that writes
  without end cannot fill the grader's memory. A message dropped for its size leaves its cell's
  output incomplete: the submission then fails (``OutputLost``), it is not scored on part of it.
* **Time.** A notebook has ``max_total_seconds`` from its first cell on, hidden tests included;
  each request runs for at most ``Execute.timeout`` or what is left of that budget, whichever is
  less. A cell still running when the budget is spent is interrupted (a kernel that does not
  stop is given ``BUDGET_GRACE`` seconds, then left behind), and what has not run then does not
  run: each such cell gets an error output saying so (``TimeBudgetSpent``), so a grade cell
  scores 0, with that message. A cell interrupted at its own ``Execute.timeout`` gets one
  ``CellTimeoutError`` naming the limit, with the line that was running, in place of the
  ``KeyboardInterrupt`` the interruption raised.
* **Hidden tests.** A cell holding a hidden-test region runs its visible part in place; the
  hidden part, from the hidden-test delimiter on, runs only after every cell of the notebook has
  run, in the cells' order, each as a request of its own, its output attached to its cell after
  a marker output that the grader itself puts there (``HIDDEN_MIME``). So nothing a cell of the
  student prints can depend on what the hidden tests passed the student's code: no cell of
  theirs runs after a hidden input was seen. The hidden part of a cell whose visible part raised
  does not run. The kernel cannot move output of a hidden part before the marker (nbclient
  files output by the request it answers), clearing the output keeps the marker, and display
  updates reach only outputs of the running request. A cell whose parts cannot be run apart
  runs whole at the end, all of its output after the marker. Feedback drops everything from the
  first marker of a cell on (``HideHiddenOutputs``); a forged marker only drops more.
* **Errors and stderr survive clearing**, so that a cleared output cannot turn a failing cell
  into a passing one; and a grade cell that raised keeps no result output (nbgrader would give
  it the points a result sent before the error claims).

How a message is read and weighed lives in ``kernel_messages``; where a cell's hidden part begins, and the
marker before its output, in ``hidden_split``.
"""

from __future__ import annotations

import types
from time import monotonic

from jupyter_core.utils import run_sync
from nbclient.exceptions import CellTimeoutError
from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Integer

from course_grading.authoring.cells import Markers, is_grade

from ..checks import KERNEL_ARGUMENT
from .hidden_split import HIDDEN_MIME, hidden_marker, is_hidden_marker, split_hidden
from .kernel_messages import (
    MAX_DEPTH,
    UNREAD,
    UNREAD_ENAME,
    WEIGHT,
    WeighingChannel,
    json_shape,
    message_size,
    wait_for_ready,
)

# what other modules import from here
__all__ = [
    "BUDGET_ENAME",
    "HIDDEN_MIME",
    "MAX_DEPTH",
    "UNREAD_ENAME",
    "UNREAD_MESSAGES",
    "LimitedExecute",
    "OutputLost",
    "is_hidden_marker",
    "json_shape",
    "split_hidden",
    "wait_for_ready",
]

BUDGET_ENAME = "TimeBudgetSpent"
_NOTICE_START = "\n[course: output dropped"
_COUNTED = {
    "stream",
    "display_data",
    "execute_result",
    "error",
    "update_display_data",
    "comm_open",
    "comm_msg",
}
_KEPT_ON_CLEAR = ("error",)

BUDGET_GRACE = 1  # seconds a kernel interrupted at the end of the time budget has to stop
# What the kernel sent that was never read (UNREAD), "cell N: why", for the grader of this
# process to flag: kept here, in the grader's memory, where nothing the student wrote can add
# to it or take from it (a notice in the notebook could be forged or printed over).
UNREAD_MESSAGES: list[str] = []


class OutputLost(Exception):
    """Output of a cell never reached the grader (dropped for its size or its rate)."""


class LimitedExecute(Execute):
    """nbgrader's Execute with bounded output and time, and hidden tests run after every cell
    (see the module docstring)."""

    max_output_bytes = Integer(1_000_000, help="output one cell may produce in all (bytes)").tag(config=True)
    max_notebook_output_bytes = Integer(
        10_000_000, help="output one notebook may produce in all (bytes)"
    ).tag(config=True)
    max_total_seconds = Integer(
        180,
        help="seconds one notebook's cells may run in all, hidden tests included (0: no "
        "limit); each request runs for at most Execute.timeout",
    ).tag(config=True)

    max_message_bytes = Integer(
        64_000_000,
        help="largest message taken from the kernel (bytes); a larger one is "
        "dropped, and its cell's score cannot be computed",
    ).tag(config=True)
    queued_messages = Integer(
        4,
        help="messages from the kernel held waiting for the grader at most (the kernel "
        "holds more, then drops them)",
    ).tag(config=True)

    _CELL_NOTICE = _NOTICE_START + ": this cell's output is over {} bytes]\n"
    _NOTEBOOK_NOTICE = _NOTICE_START + ": this notebook's output is over {} bytes]\n"
    _UNREAD_NOTICE = _NOTICE_START + ": {}]\n"

    # --------------------------------------------------------------------------- per notebook

    def preprocess(self, nb, resources=None, km=None):
        self._used_cell: dict[int, int] = {}
        self._used_notebook = 0
        self._noticed: set[tuple[int, str]] = set()
        self._deadline: float | None = None
        self._cut = False  # the time budget ran out while a request ran
        self._timed_out: int | None = None  # the limit a request ran past (Execute.timeout)
        self._part_start = 0  # first output index of the request now running
        self._prefix: list | None = None  # outputs to put back before the hidden part's own
        self._cell_index_now: int | None = None
        self._deferred: list[tuple[int, str]] = []  # (cell index, hidden part) to run at the end
        self._markers = Markers.from_config(self.config)
        return super().preprocess(nb, resources, km)

    # --------------------------------------------------------------------------- the kernel

    async def async_start_new_kernel(self, **kwargs):
        """nbclient's, with the checks' extension loaded before the notebook's first cell
        (``course_grading.checks._common``) when the notebook uses the course's checks (its
        setup and test cells, restored from the gradebook, name them): what they rely on is
        recorded then."""
        uses_checks = any(
            name in str(cell.get("source", ""))
            for cell in self.nb.cells
            for name in ("course_utils", "course_grading")
        )
        if uses_checks and KERNEL_ARGUMENT not in self.extra_arguments:
            self.extra_arguments = [*self.extra_arguments, KERNEL_ARGUMENT]
        return await super().async_start_new_kernel(**kwargs)

    start_new_kernel = run_sync(async_start_new_kernel)

    def preprocess_cell(self, cell, resources, index):
        result = super().preprocess_cell(cell, resources, index)
        if index == len(self.nb.cells) - 1:
            run_sync(self._run_deferred)()
        return result

    # --------------------------------------------------------------------------- the channels

    async def async_start_new_kernel_client(self):
        """nbclient's, with the client's sockets in a context of their own that takes messages
        of at most ``max_message_bytes`` and holds at most ``queued_messages`` (what waits for
        the grader is bounded, however fast and however much the kernel writes), and its
        shell and IOPub channels weighing each message before reading it."""
        import zmq
        import zmq.asyncio

        context = zmq.asyncio.Context()
        context.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        context.setsockopt(zmq.RCVHWM, self.queued_messages)
        make_client = self.km.client
        channel = type("WeighingChannel", (WeighingChannel,), {"allowance": staticmethod(self._allowance)})

        def client(**kw):
            kc = make_client(context=context, shell_channel_class=channel, iopub_channel_class=channel, **kw)
            kc._created_context = True  # destroyed with the client
            kc.wait_for_ready = types.MethodType(wait_for_ready, kc)
            return kc

        self.km.client = client
        try:
            return await super().async_start_new_kernel_client()
        finally:
            del self.km.client  # the class's method again

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def _allowance(self, msg_type: str) -> int:
        """Bytes a message of ``msg_type`` may weigh and be read whatever it holds: for output,
        what the running cell and the notebook may still produce; for anything else (replies,
        statuses), as much as one cell's output."""
        if msg_type not in _COUNTED or self._cell_index_now is None:
            return self.max_output_bytes
        return max(
            0,
            min(
                self.max_output_bytes - self._used_cell.get(self._cell_index_now, 0),
                self.max_notebook_output_bytes - self._used_notebook,
            ),
        )

    # --------------------------------------------------------------------------- time

    def _seconds_left(self) -> float | None:
        if self._deadline is None:
            return None
        return self._deadline - monotonic()

    def _spent(self, margin: float = 0.0) -> bool:
        left = self._seconds_left()
        return left is not None and left <= margin

    def _get_timeout(self, cell):
        timeout = super()._get_timeout(cell)
        left = self._seconds_left()
        if left is None:
            return timeout
        left = max(0.1, left)
        return left if timeout is None else min(timeout, left)

    async def _async_handle_timeout(self, timeout, cell=None):
        if self._spent(margin=0.1):  # interrupted at the end of the budget (the poll may wake a
            # millisecond early): a short wait for its output
            self._cut = True
            self.iopub_timeout = min(self.iopub_timeout, BUDGET_GRACE)
        else:  # at the cell's own limit
            self._timed_out = timeout
        return await super()._async_handle_timeout(timeout, cell)

    def _budget_error(self, evalue: str) -> dict:
        return new_output("error", ename=BUDGET_ENAME, evalue=evalue, traceback=[f"{BUDGET_ENAME}: {evalue}"])

    def _budget_text(self) -> str:
        return f"the notebook's time budget of {self.max_total_seconds} s (LimitedExecute.max_total_seconds)"

    # --------------------------------------------------------------------------- cells

    async def async_execute_cell(self, cell, cell_index, execution_count=None, store_history=True):
        if cell.cell_type != "code" or not cell.source.strip():
            return await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        if self._deadline is None and self.max_total_seconds > 0:
            self._deadline = monotonic() + self.max_total_seconds
        # hidden tests are the instructor's, in grade cells (nbgrader restores their source):
        # a student's own cell is never split (nor parsed here: IPython's transformer took
        # seconds for a few hundred magics), it runs whole and feedback withholds its output
        parts = split_hidden(cell.source, self._markers) if is_grade(cell) else None
        if self._cut or self._spent():
            cell.outputs = [self._budget_error(f"not run: {self._budget_text()} was spent before this cell")]
            cell.outputs += [hidden_marker(ran=False)] if parts is not None else []
            cell.execution_count = None
            self.nb["cells"][cell_index] = cell
            return cell
        original = cell.source
        try:
            if parts is None:
                await self._request(cell, cell_index, original, execution_count, store_history)
            elif parts[0] is None:  # cannot be run apart: whole, at the end
                cell.outputs, cell.execution_count = [], None
                self._deferred.append((cell_index, original))
            else:
                visible, hidden = parts
                await self._request(cell, cell_index, visible, execution_count, store_history)
                if not any(o.get("output_type") == "error" for o in cell.outputs):
                    self._deferred.append((cell_index, hidden))
        finally:
            cell.source = original
        if parts is not None and not any(index == cell_index for index, _ in self._deferred):
            cell.outputs.append(hidden_marker(ran=False))
        return cell

    execute_cell = run_sync(async_execute_cell)

    async def _run_deferred(self):
        """The hidden parts, in the cells' order, each after its cell's output and a marker."""
        deferred, self._deferred = self._deferred, []
        for cell_index, hidden in deferred:
            cell = self.nb.cells[cell_index]
            if self._cut or self._spent():
                cell.outputs.append(
                    self._budget_error(
                        f"the hidden tests did not run: {self._budget_text()} was spent before them"
                    )
                )
                cell.outputs.append(hidden_marker(ran=False))
                continue
            original = cell.source
            try:
                await self._request(
                    cell, cell_index, hidden, None, True, prefix=[*cell.outputs, hidden_marker()]
                )
            finally:
                cell.source = original
            if self._cut:  # say why where feedback shows it: before the marker
                at = next(i for i, o in enumerate(cell.outputs) if is_hidden_marker(o))
                cell.outputs.insert(
                    at,
                    self._budget_error(
                        f"interrupted: {self._budget_text()} was spent while this cell's hidden tests ran"
                    ),
                )
                self._settle(cell)

    async def _request(self, cell, cell_index, source, execution_count, store_history, prefix=None):
        """One request running ``source`` for ``cell``; ``prefix`` (outputs) is put before the
        outputs it produces."""
        cell.source = source
        self._prefix = prefix
        self._timed_out = None
        self._part_start = len(prefix or [])
        self._cell_index_now = cell_index
        iopub_timeout = self.iopub_timeout
        try:
            await super().async_execute_cell(cell, cell_index, execution_count, store_history)
        except CellTimeoutError as exc:
            if "IOPub" not in str(exc):
                raise
            if not self._cut:
                raise OutputLost(
                    f"the output of cell {cell_index} did not arrive whole (a message over "
                    f"{self.max_message_bytes} bytes, or output sent faster than it was read): "
                    "its score cannot be computed"
                ) from None
            # interrupted at the end of the budget and still running: nothing runs after it
            if not any(o.get("output_type") == "error" for o in cell.outputs):
                cell.outputs.append(self._budget_error(""))
            self.nb["cells"][cell_index] = cell
        finally:
            self.iopub_timeout = iopub_timeout
            if self._prefix is not None:  # no message came at all
                cell.outputs[:0] = self._prefix
                self._prefix = None
        self._settle(cell)

    def _settle(self, cell):
        """After a request: a grade cell that raised keeps no result; an interruption at the end
        of the budget, or at a cell's own limit, says so."""
        limit, self._timed_out = self._timed_out, None
        if limit is not None and not self._cut:
            _name_timeout(cell, limit)
        if is_grade(cell) and any(o.get("output_type") == "error" for o in cell.outputs):
            # a cell that raised never displayed its last expression: a result before the
            # error was sent by the code it ran, and nbgrader would score the cell by it
            cell.outputs = [o for o in cell.outputs if o.get("output_type") != "execute_result"]
        if self._cut:
            for output in cell.outputs:
                if (
                    output.get("output_type") == "error"
                    and output.get("ename") in ("CellTimeoutError", BUDGET_ENAME)
                    and not output.get("evalue")
                ):
                    output["evalue"] = f"interrupted: {self._budget_text()} was spent"

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
        size = msg[WEIGHT] if WEIGHT in msg else message_size(msg)
        display_id = ((msg.get("content") or {}).get("transient") or {}).get("display_id")
        if display_id and msg_type in ("display_data", "execute_result", "update_display_data"):
            targets = len(self._display_targets(display_id, cell_index))  # outputs it rewrites
            size *= targets + (msg_type != "update_display_data")
        cell_used = self._used_cell.get(cell_index, 0) + size
        notebook_used = self._used_notebook + size
        unread = msg.get(UNREAD)
        if (
            not unread
            and cell_used <= self.max_output_bytes
            and notebook_used <= self.max_notebook_output_bytes
        ):
            self._used_cell[cell_index] = cell_used
            self._used_notebook = notebook_used
            return msg
        which = "unread" if unread else "cell" if cell_used > self.max_output_bytes else "notebook"
        self._notice(cell, cell_index, which, detail=unread)
        content = msg.get("content") or {}
        kinds = {o.get("output_type") for o in cell.outputs}
        if msg_type == "error":  # the first one is kept (cut short): it decides the score
            return msg if "error" not in kinds else None
        if msg_type == "stream" and content.get("name") == "stderr":
            self._notice(cell, cell_index, which, stream="stderr", detail=unread)
        elif msg_type == "execute_result" and "execute_result" not in kinds:  # a stub of the first
            return dict(
                msg,
                content={
                    "execution_count": content.get("execution_count"),
                    "metadata": {},
                    "data": {"text/plain": str((content.get("data") or {}).get("text/plain", ""))[:200]},
                },
            )
        return None

    def _notice(self, cell, cell_index, which, stream="stdout", detail=None):
        if (cell_index, stream) in self._noticed:
            return
        self._noticed.add((cell_index, stream))
        if which == "unread":
            text = self._UNREAD_NOTICE.format(detail)
        else:
            limit = self.max_output_bytes if which == "cell" else self.max_notebook_output_bytes
            text = (self._CELL_NOTICE if which == "cell" else self._NOTEBOOK_NOTICE).format(limit)
        self.log.warning("cell %s: %s", cell_index, text.strip())
        if which == "unread" and len(UNREAD_MESSAGES) < 100:
            UNREAD_MESSAGES.append(f"cell {cell_index}: {detail}")
        cell.outputs.append(new_output("stream", name=stream, text=text))

    def _display_targets(self, display_id, cell_index) -> list[int]:
        """The outputs of the running request that a display update of ``display_id`` reaches."""
        return [
            i
            for i in (self._display_id_map.get(display_id) or {}).get(cell_index, [])
            if i >= self._part_start
        ]

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
    return (
        output.get("output_type") in _KEPT_ON_CLEAR
        or is_hidden_marker(output)
        or (stream and output.get("name") == "stderr")
        or (stream and str(output.get("text", "")).startswith(_NOTICE_START))
    )


def _cut_error(msg: dict) -> dict:
    """An error message with its name, value and traceback cut short."""
    return dict(msg, content=_cut_error_content(msg.get("content") or {}))


def _name_timeout(cell, limit: int) -> None:
    """A cell interrupted at its limit: one error that says so (``CellTimeoutError``, with the
    interrupted traceback, which shows the line that was running), not the KeyboardInterrupt
    the interruption raised in the kernel."""
    said = f"interrupted: this cell ran past its limit of {limit:g} s (Execute.timeout)"
    raised = [
        o for o in cell.outputs if o.get("output_type") == "error" and o.get("ename") == "KeyboardInterrupt"
    ]
    where = list(raised[0].get("traceback", []))[:-1] if raised else []
    cell.outputs = [o for o in cell.outputs if not any(o is r for r in raised)]
    for output in cell.outputs:
        if output.get("output_type") == "error" and output.get("ename") == "CellTimeoutError":
            output["evalue"], output["traceback"] = said, [*where, f"CellTimeoutError: {said}"]
            return
    cell.outputs.append(new_output("error", ename="CellTimeoutError", evalue=said, traceback=[*where, said]))


def _cut_error_content(content: dict) -> dict:
    traceback = content.get("traceback") or []
    return {
        **content,
        "ename": str(content.get("ename", ""))[:200],
        "evalue": str(content.get("evalue", ""))[:2000],
        "traceback": [str(t)[:4000] for t in (traceback if isinstance(traceback, list) else [])[-40:]],
    }
