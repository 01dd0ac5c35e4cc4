"""``LimitedExecute``: nbgrader's Execute with the output of each cell bounded."""
from __future__ import annotations

from nbformat.v4 import new_output
from nbgrader.preprocessors import Execute
from traitlets import Integer


class LimitedExecute(Execute):
    """nbgrader's Execute, keeping at most ``max_output_bytes`` of output per cell: a cell that
    prints without end costs its own points, not the grader's memory."""

    max_output_bytes = Integer(1_000_000, help="output kept per cell (bytes)").tag(config=True)
    _TRUNCATED = "\n[course: output truncated, over {} bytes]\n"

    def output(self, outs, msg, display_id, cell_index):
        content = msg.get("content", {})
        if msg.get("msg_type") == "error":
            content["evalue"] = str(content.get("evalue", ""))[:2000]
            content["traceback"] = [str(t)[:4000] for t in content.get("traceback", [])[-40:]]
            return super().output(outs, msg, display_id, cell_index)
        used = self._output_used if hasattr(self, "_output_used") else {}
        self._output_used = used
        size = sum(len(str(v)) for v in (content.get("data") or {}).values()) + len(str(content.get("text", "")))
        before = used.get(cell_index, 0)
        used[cell_index] = before + size
        if used[cell_index] <= self.max_output_bytes:
            return super().output(outs, msg, display_id, cell_index)
        if before <= self.max_output_bytes:
            outs.append(new_output("stream", name="stdout",
                                   text=self._TRUNCATED.format(self.max_output_bytes)))
        return None
