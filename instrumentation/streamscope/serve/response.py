"""The relay's response: sse-starlette's `EventSourceResponse`, with its send timeout kept by one
timer per response instead of one per send.

sse-starlette bounds each send with `anyio.move_on_after(send_timeout)`: a cancel scope entered and
left, and a timer armed and cancelled, for every event sent, a third of what the relay adds per
event. Here a send only notes when the connection last moved (a clock read), and one timer per
response looks every quarter of `send_timeout`: a send still waiting `send_timeout` seconds after
the connection last moved (the browser stopped reading, its buffers and ours are full) cuts the
response, within a quarter of the timeout more. A slow browser that keeps reading is never cut.

A cut ends the response as a browser leaving does: the body generator is closed (the relay closes
the provider connection and writes its record), and the ASGI app returns with the response
unfinished, so the server closes the connection (uvicorn logs one line saying so; sse-starlette's
own timeout raises `SendTimeoutError` into the server instead, which logs it with a traceback).

Taken where sse-starlette sends through `_send_with_timeout(send, message)` (from 3.4.10); on older
releases their own per-send timeout runs, with the same effect for the browser.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from typing import Any

import anyio
from sse_starlette import EventSourceResponse
from starlette.types import Message, Receive, Scope, Send


def _known_form() -> bool:
    own = getattr(EventSourceResponse, "_send_with_timeout", None)
    try:
        return own is not None and list(inspect.signature(own).parameters) == ["self", "send", "message"]
    except (TypeError, ValueError):
        return False


WATCHED = _known_form()
"""Whether the installed sse-starlette sends through the one method this class takes over."""


class RelayResponse(EventSourceResponse):
    """`EventSourceResponse` with `send_timeout` watched once per response (see the module)."""

    def __init__(self, content: Any, *, send_timeout: float | None, **options: Any) -> None:
        super().__init__(content, send_timeout=None if WATCHED else send_timeout, **options)
        self._limit = send_timeout if WATCHED else None
        self._sending = 0
        """Sends in flight (a keep-alive can be sent while an event is)."""
        self._moved = 0.0
        """`time.monotonic()` when the connection last moved: a send began or one returned."""
        self._scope: anyio.CancelScope | None = None
        self._timer: asyncio.TimerHandle | None = None

    if WATCHED:
        async def _send_with_timeout(self, send: Send, message: Message) -> None:
            self._sending += 1
            self._moved = time.monotonic()
            try:
                await send(message)
            except BaseException:
                self._send_interrupted = True  # as sse-starlette's own: no closing send follows
                raise
            finally:
                self._sending -= 1
                if self._sending:
                    self._moved = time.monotonic()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self._limit is None:
            await super().__call__(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        with anyio.CancelScope() as self._scope:
            self._timer = loop.call_later(self._limit / 4, self._look, loop)
            try:
                await super().__call__(scope, receive, send)
            finally:
                self._timer.cancel()

    def _look(self, loop: asyncio.AbstractEventLoop) -> None:
        """Every quarter of the timeout: cut a response whose send has waited the whole of it."""
        if self._limit is None or self._scope is None:
            return
        if self._sending and time.monotonic() - self._moved >= self._limit:
            self._scope.cancel()
            return
        self._timer = loop.call_later(self._limit / 4, self._look, loop)
