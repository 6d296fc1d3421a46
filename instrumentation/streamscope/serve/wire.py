"""What the relay, its response and a resume share, written in one place: how an event is framed
on the wire, the keep-alive comment, the terminal `error` event (the relay's own, and the one a
resume sends when the worker that generated the stream is gone), and how long either waits for a
provider connection to close."""

from __future__ import annotations

import json
import re

CLOSE_WAIT = 1.0
"""Seconds the relay waits for the provider connection to close when the browser has left."""
KEEP_ALIVE = b": keep-alive\r\n\r\n"
"""The comment sent on a quiet connection (a browser ignores it; proxies see the connection live)."""
LINE_BREAK = re.compile(r"\r\n|\r|\n")
"""What is removed from an event's id and name (a line break would end the field)."""


class Terminal(bytes):
    """A framed event that ends the stream (`done` or `error`): a resume buffer marks it so."""

    __slots__ = ()


def framed(event_id: str, head: str, text: str) -> bytes:
    """One event: `id`, the `event:` line (`head`, from `event_line`), and one `data` line, the
    JSON `text` (which has no line break), each line ended by CRLF as the SSE standard allows."""
    return f"id: {event_id}\r\n{head}data: {text}\r\n\r\n".encode()


def event_line(name: str) -> str:
    return f"event: {LINE_BREAK.sub('', name)}\r\n"


def terminal(request_id: str, n: int, name: str, data: dict[str, object]) -> Terminal:
    """The stream's last event, `<name>` with id `<request_id>:<n>`."""
    return Terminal(framed(f"{LINE_BREAK.sub('', request_id)}:{n}", event_line(name), json.dumps(data)))


def error_event(request_id: str, n: int, code: str, partial: bool) -> Terminal:
    """`event: error`, id `<request_id>:<n>`, data `{"code", "request_id", "partial"}`."""
    return terminal(request_id, n, "error", {"code": code, "request_id": request_id, "partial": partial})
