"""The relay's response: the events already framed, sent as Server-Sent Events, at a few hundred
bytes of its own per open stream.

A worker holds thousands of these at once, so each holds little: the body is read and sent in the
request's own task; one task waits for the browser to leave (the ASGI `receive`); one timer per
response, re-armed only when it fires, sends the `: keep-alive` comment after `ping` seconds with
nothing sent, and cuts a send still waiting `send_timeout` seconds after the connection last moved
(the browser stopped reading: its buffers and ours are full). A send only notes the time (a clock
read); a slow browser that keeps reading is never cut.

A browser leaving, or a cut, ends the response the same way: the request's task is cancelled where
it waits (for the next event, or in a send), the body generator is closed (the relay closes the
provider connection and writes its record), and the ASGI app returns with the response unfinished,
so the server closes the connection (after a cut uvicorn logs one line saying so). A server that
shuts down gracefully lets the open streams run to their terminal event, within its own
graceful-shutdown timeout (`--timeout-graceful-shutdown`, gunicorn's `graceful_timeout`); when that
ends them, the relay closes the provider connection as for a browser that left.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

import anyio
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from .wire import KEEP_ALIVE

_SOON = 0.01
"""The shortest wait between two looks (s)."""
_IDLE_LOOK = 3600.0
"""How long the timer sleeps when neither a keep-alive nor a cut can come due."""
CLOSE_BODY = 1.0
"""Seconds the response waits for its body generator to close (the provider connection with it)."""


class RelayResponse(Response):
    """An SSE response over an async iterator of framed events (`bytes`; see the module)."""

    media_type = "text/event-stream"

    def __init__(self, content: AsyncIterator[bytes], *, headers: Mapping[str, str], ping: float,
                 send_timeout: float | None, closed: Callable[[], Awaitable[None]] | None = None) -> None:
        self.body_iterator = content
        self._closed = closed
        """Run once the body is closed: what the body's own ending does, for a body that never began
        (closing a generator that never ran runs none of its code)."""
        self.status_code = 200
        self.background = None
        self.init_headers({"Cache-Control": "no-store", **headers, "Connection": "keep-alive",
                           "X-Accel-Buffering": "no"})
        self._ping = ping
        self._limit = send_timeout
        self._sending = 0
        """Sends in flight (a keep-alive can be sent while an event is)."""
        self._moved = 0.0
        """`time.monotonic()` when the connection last moved: a send began or one returned."""
        self._ended_by: str | None = None
        """Why this response cancelled its own task: `gone` (the browser left) or `cut` (a send waited too long)."""
        self._task: asyncio.Task[object] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._send: Send | None = None
        self._pinging: asyncio.Task[None] | None = None
        """The keep-alive being sent (held: a task nobody holds may be collected mid-send)."""
        self._complete = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        if scope.get("method") == "HEAD":  # headers only: the stream never starts
            await self._close_body()
            await send(start)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        loop = asyncio.get_running_loop()
        self._task = task = asyncio.current_task()
        self._send = send
        watch = loop.create_task(self._watch(receive))
        self._moved = now = time.monotonic()
        self._timer = loop.call_later(max(self._next_look(now) - now, _SOON), self._look, loop)
        try:
            await self._sent(start)
            async for chunk in self.body_iterator:
                await self._sent({"type": "http.response.body", "body": chunk, "more_body": True})
            self._complete = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if self._ended_by is None or task is None:
                raise  # the server's own cancel (its shutdown timeout): it goes on up
            task.uncancel()
        finally:
            self._complete = True
            watch.cancel()
            self._timer.cancel()
            await self._close_body()

    async def _sent(self, message: dict[str, object]) -> None:
        assert self._send is not None
        self._sending += 1
        self._moved = time.monotonic()
        try:
            await self._send(message)
        finally:
            self._sending -= 1
            self._moved = time.monotonic()

    async def _close_body(self) -> None:
        """Close the body generator (a no-op once it has ended), bounded and shielded from cancels,
        then run `closed`."""
        aclose = getattr(self.body_iterator, "aclose", None)
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_BODY):
            try:
                if aclose is not None:
                    await aclose()
                if self._closed is not None:
                    await self._closed()
            except Exception:  # the relay's body handles its own; a caller's iterator may not
                pass

    async def _watch(self, receive: Receive) -> None:
        """Returns when the browser goes away, ending the response."""
        while (await receive())["type"] != "http.disconnect":
            pass
        self._end("gone")

    def _end(self, why: str) -> None:
        if self._ended_by is None and not self._complete and self._task is not None:
            self._ended_by = why
            self._task.cancel()

    def _next_look(self, now: float) -> float:
        """When a keep-alive or a cut may next be due (`time.monotonic()`)."""
        if self._sending:
            if self._limit is not None:
                return self._moved + self._limit
            return now + (self._ping if self._ping > 0 else _IDLE_LOOK)
        due = self._moved + self._ping if self._ping > 0 else now + _IDLE_LOOK
        if self._limit is not None:  # a send that starts meanwhile is looked at within a quarter more
            due = min(due, now + self._limit / 4)
        return due

    def _look(self, loop: asyncio.AbstractEventLoop) -> None:
        """When a keep-alive or a cut may be due: do what is due, then look again when the next is."""
        if self._complete or self._ended_by is not None:
            return
        now = time.monotonic()
        if self._sending:
            if self._limit is not None and now - self._moved >= self._limit:
                self._end("cut")
                return
        elif self._ping > 0 and now - self._moved >= self._ping:
            self._moved = now  # the keep-alive's send notes it again
            self._pinging = loop.create_task(self._keep_alive())
        self._timer = loop.call_later(max(self._next_look(now) - now, _SOON), self._look, loop)

    async def _keep_alive(self) -> None:
        if self._complete or self._ended_by is not None:
            return
        try:
            await self._sent({"type": "http.response.body", "body": KEEP_ALIVE, "more_body": True})
        except Exception:  # the connection is gone: the watch ends the response
            pass
