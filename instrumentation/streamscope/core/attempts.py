"""A framework's retry of a streamed call that just failed, recognised so that its span links to
the attempt before it.

Frameworks retry streamed calls themselves (the OpenAI Agents SDK's retry settings, LiteLLM's
`num_retries`, a tenacity decorator): each attempt is a call of its own, with a span of its own.
An attempt is taken for another try of the same logical call when it is opened on the same client,
in the same thread or task, under the same parent span, with the same request (provider, model,
server, route, token limit, prompt size), within `WINDOW` seconds after such a call ended with a failure code (not a
normal end, not a caller that left). Its span then links to that attempt's span and says which
attempt it is (`streamscope.attempt`, from 2). streamscope's own retry line is left out: it says
its attempts itself (`streamscope.attempts`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from opentelemetry.trace import get_current_span

from .attributes import ATTEMPT

if TYPE_CHECKING:
    from opentelemetry.trace import SpanContext

    from .calls import Call
    from .record import RequestInfo

WINDOW = 120.0
"""Seconds after a failed attempt within which the next one is taken for a retry of it."""
MAX_KEPT = 1024
"""Failed attempts remembered at most (the oldest go first)."""

Key = tuple[Any, ...]


def key_of(request: RequestInfo, parent_span_id: int, client: object) -> Key:
    """What makes two attempts one logical call: the request, its parent span, the client that
    sent it (a framework retries on the client it has), and the thread or task that did."""
    return (request.provider, request.model, request.server_address, request.server_port, request.route,
            request.max_tokens, request.prompt_chars, parent_span_id, _token(client), _sender())


_TOKEN = "_streamscope_attempts"


def _token(client: object) -> object:
    """A token of the client's own, kept in its `__dict__`: a key holds it (never the client), so
    no later client can take its place the way a reused `id()` would."""
    found = getattr(client, "__dict__", None)
    if not isinstance(found, dict):
        return None
    token = found.get(_TOKEN)
    if token is None:
        token = found[_TOKEN] = object()
    return token


def _sender() -> int:
    """The task sending (where an event loop runs here), else the thread."""
    loop = asyncio._get_running_loop()
    task = asyncio.current_task(loop) if loop is not None else None
    return id(task) if task is not None else threading.get_ident()


class Attempts:
    """The failed attempts of the last `WINDOW` seconds, by `key_of`. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failed: OrderedDict[Key, tuple[SpanContext, int, float]] = OrderedDict()

    def link(self, call: Call, request: RequestInfo, client: object) -> None:
        """A call just opened on `client`: where it retries an attempt that failed, it is linked to
        that attempt and numbered (`call.attempt`, noted on its span)."""
        key = key_of(request, get_current_span().get_span_context().span_id, client)
        found = self.opened(key, time.monotonic())
        call.attempt = (key, None, 1) if found is None else (key, found[0], found[1])
        if found is not None:
            call.note(ATTEMPT, found[1])

    def opened(self, key: Key, now: float) -> tuple[SpanContext, int] | None:
        """A call opened: the attempt it retries (its span context) and its own number, or None."""
        with self._lock:
            found = self._failed.pop(key, None)
        if found is None or now - found[2] > WINDOW:
            return None
        return found[0], found[1] + 1

    def failed(self, key: Key, context: SpanContext, attempt: int, now: float) -> None:
        """A call (attempt number `attempt`) ended with a failure: another try may follow."""
        with self._lock:
            self._failed[key] = (context, attempt, now)
            self._failed.move_to_end(key)
            while len(self._failed) > MAX_KEPT:
                self._failed.popitem(last=False)
