"""Reading a kernel's messages for ``LimitedExecute``: each weighed by the bytes it arrived as
before it is deserialised (``read_message``, ``WeighingChannel``), too deep or too large ones
replaced by a stub of their kind without being read, and the kernel client's wait for a kernel
that has just started (``wait_for_ready``).
"""

from __future__ import annotations

import re
from hmac import compare_digest
from queue import Empty
from time import monotonic

from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.session import extract_dates

UNREAD_ENAME = "OutputUnreadable"
HEADER_BYTES = 65_536  # a message's header and parent header, each (a kernel's are ~300 bytes)
MAX_DEPTH = 100  # containers nested in a message's metadata or content, at most
READ_VALUES = 10_000  # values a message over its cell's allowance may hold and still be read
WEIGHT = "course_wire_bytes"  # the bytes a message arrived as (a key of the message dict)
UNREAD = "course_unread"  # why a message was replaced by a stub without being read


def message_size(msg: dict) -> int:
    """The size of a kernel message's content and binary buffers, for a message that did not come
    through a ``WeighingChannel``: every key, string and number, and two bytes per container
    (however deeply nested; nothing is copied)."""
    size, stack = 0, [msg.get("content", {}), list(msg.get("buffers") or [])]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            size += 2
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, (list, tuple)):
            size += 2
            stack.extend(value)
        elif isinstance(value, (str, bytes, bytearray, memoryview)):
            size += len(value) + 2
        else:
            size += 8
    return size


_STRUCTURE = re.compile(rb'["\[\]{},]')
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def json_shape(data: bytes, max_values: int | None = None, max_depth: int = MAX_DEPTH):
    """(values, depth) of the JSON text ``data``, read without building it: containers, strings
    and comma-separated items count as values. None as soon as there are more than
    ``max_values`` values or deeper nesting than ``max_depth``, or a string does not end."""
    values = depth = deepest = pos = 0
    find, string = _STRUCTURE.search, _STRING.match
    while (found := find(data, pos)) is not None:
        char = data[found.start()]
        if char == 0x22:  # '"': skip the whole string
            whole = string(data, found.start())
            if whole is None:
                return None
            pos = whole.end()
            values += 1
        else:
            pos = found.end()
            if char in b"[{":
                depth += 1
                values += 1
                deepest = max(deepest, depth)
                if depth > max_depth:
                    return None
            elif char in b"]}":
                depth -= 1
            else:  # a comma
                values += 1
        if max_values is not None and values > max_values:
            return None
    return values, deepest


def _dropped() -> dict:
    """A message that belongs to no request (nbclient passes over it)."""
    return {
        "header": {"msg_id": "", "msg_type": "course_dropped"},
        "msg_id": "",
        "msg_type": "course_dropped",
        "parent_header": {},
        "metadata": {},
        "content": {},
        "buffers": [],
        WEIGHT: 0,
    }


def _stub_content(msg_type: str, reason: str) -> dict | None:
    """What stands for a message of ``msg_type`` that was not read (None: nothing does)."""
    error = {"ename": UNREAD_ENAME, "evalue": reason, "traceback": [f"{UNREAD_ENAME}: {reason}"]}
    return {
        # only forged messages are unreadable; whether it was stdout or stderr is unknown,
        # so it counts as stderr (nbgrader scores a grade cell with stderr 0)
        "stream": {"name": "stderr", "text": ""},
        "error": error,
        "execute_result": {
            "execution_count": None,
            "metadata": {},
            "data": {"text/plain": f"[course: {reason}]"},
        },
        "display_data": {"data": {}, "metadata": {}, "transient": {}},
        "update_display_data": {"data": {}, "metadata": {}, "transient": {}},
        "comm_open": {},
        "comm_msg": {},
        "execute_input": {},
        "execute_reply": {"status": "error", "execution_count": None, **error},
    }.get(msg_type)


def read_message(session, frames: list, allowance) -> dict:
    """The message of ``frames`` (a kernel message after its identities), weighed before it is
    read: ``allowance(msg_type)`` says how many bytes it may weigh and still be read whatever
    it holds; heavier, it is read only if it holds at most READ_VALUES values. Deeper nesting
    than MAX_DEPTH, or too many values, and it is replaced by a stub of its kind (``UNREAD``
    says why); a message whose header cannot be read belongs to no request."""
    if len(frames) < 5 or any(
        len(f) > HEADER_BYTES or json_shape(f, HEADER_BYTES) is None for f in frames[1:3]
    ):
        return _dropped()
    if session.auth is not None and not compare_digest(bytes(frames[0]), session.sign(frames[1:5])):
        return _dropped()
    try:
        header, parent = session.unpack(frames[1]), session.unpack(frames[2])
    except (ValueError, TypeError, RecursionError):
        return _dropped()
    if not (
        isinstance(header, dict) and isinstance(parent, dict) and isinstance(header.get("msg_type"), str)
    ):
        return _dropped()
    msg_type, weight = header["msg_type"], sum(len(f) for f in frames[1:])
    limit = None if weight <= allowance(msg_type) else READ_VALUES
    if all(json_shape(f, limit) is not None for f in frames[3:5]):
        try:
            msg = session.deserialize(frames)
        except (ValueError, TypeError, RecursionError):
            msg = None
        if msg is not None and isinstance(msg.get("content"), dict) and isinstance(msg.get("metadata"), dict):
            msg[WEIGHT] = weight
            return msg
        reason = f"a message of {weight} bytes that could not be read"
    elif limit is None:
        reason = f"a message of {weight} bytes nested deeper than {MAX_DEPTH} levels"
    else:
        reason = (
            f"a message of {weight} bytes, over what this cell may still produce and too "
            f"large to read (over {READ_VALUES} values or {MAX_DEPTH} levels deep)"
        )
    content = _stub_content(msg_type, reason)
    if content is None:
        return _dropped()
    header, parent = extract_dates(header), extract_dates(parent)
    return {
        "header": header,
        "msg_id": header.get("msg_id"),
        "msg_type": msg_type,
        "parent_header": parent,
        "metadata": {},
        "content": content,
        "buffers": [],
        WEIGHT: weight,
        UNREAD: reason,
    }


class WeighingChannel(AsyncZMQSocketChannel):
    """jupyter_client's channel, reading each message through ``read_message`` (weighed by
    the bytes it arrived as before it is deserialised); ``allowance`` is set on a subclass."""

    allowance = None

    async def _recv(self, **kwargs):
        frames = await self.socket.recv_multipart(**kwargs)
        _, frames = self.session.feed_identities(frames)
        return read_message(self.session, frames, type(self).allowance)


async def wait_for_ready(kc, timeout: float | None = None) -> None:
    """jupyter_client's ``wait_for_ready`` for a client of a kernel started by its manager:
    kernel_info requests until the reply comes and IOPub is seen to be connected (a message
    on it), or the kernel dies, or ``timeout`` passes. What IOPub then holds is read without
    waiting for more: jupyter_client's own version ends by waiting until IOPub has been quiet
    for 0.2 s, a pause at every submission's start with nothing to wait for (nbclient reads
    only the messages that answer its own requests)."""
    deadline = None if timeout is None else monotonic() + timeout
    while True:
        kc.kernel_info()
        try:
            msg = await kc.shell_channel.get_msg(timeout=1)
        except Empty:
            pass
        else:
            if msg["msg_type"] == "kernel_info_reply":
                try:
                    await kc.iopub_channel.get_msg(timeout=0.2)
                except Empty:
                    pass
                else:
                    kc._handle_kernel_info_reply(msg)
                    break
        if not await kc._async_is_alive():
            raise RuntimeError("Kernel died before replying to kernel_info")
        if deadline is not None and monotonic() > deadline:
            raise RuntimeError(f"Kernel didn't respond in {timeout:.0f} seconds")
    while True:
        try:
            await kc.iopub_channel.get_msg(timeout=0)
        except Empty:
            return
