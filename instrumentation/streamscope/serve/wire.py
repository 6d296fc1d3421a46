"""The relay's terminal `error` event, written in one place: the relay's own, and the one a resume
sends when the worker that generated the stream is gone."""

from __future__ import annotations

import json

from sse_starlette import ServerSentEvent


def error_event(request_id: str, n: int, code: str, partial: bool) -> ServerSentEvent:
    """`event: error`, id `<request_id>:<n>`, data `{"code", "request_id", "partial"}`."""
    return ServerSentEvent(event="error", id=f"{request_id}:{n}", data=json.dumps({
        "code": code, "request_id": request_id, "partial": partial}))
