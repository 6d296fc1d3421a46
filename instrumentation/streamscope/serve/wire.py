"""What the relay and a resume share, written in one place: the terminal `error` event (the relay's
own, and the one a resume sends when the worker that generated the stream is gone), and how long
either waits for a provider connection to close."""

from __future__ import annotations

import json

from sse_starlette import ServerSentEvent

CLOSE_WAIT = 1.0
"""Seconds the relay waits for the provider connection to close when the browser has left."""


def error_event(request_id: str, n: int, code: str, partial: bool) -> ServerSentEvent:
    """`event: error`, id `<request_id>:<n>`, data `{"code", "request_id", "partial"}`."""
    return ServerSentEvent(event="error", id=f"{request_id}:{n}", data=json.dumps({
        "code": code, "request_id": request_id, "partial": partial}))
