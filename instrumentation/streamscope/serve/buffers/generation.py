"""One generation in the worker that runs it: the relayed events, in order, for every connection
that follows it, and the grace before it is given up.

The relay's producer appends each event it frames (`append`: a list append and a wake-up of the
connections waiting, nothing else per event); each connection, the first and every resume on this
worker, follows the list from its position (`follow`). When the last connection leaves before the
terminal event, `grace` seconds start: a connection that comes back in time (a resume) stops them,
else the generation is abandoned (`abandon`: the producer is cancelled, so the provider connection
is closed and the stream's record says so). A backend (`Backend`) keeps a copy elsewhere for
other workers, with no wait on the producer.

What reached the browser is kept apart from what was generated: `delivered` (the last event a
connection handed to its socket) and `acknowledged` (the last id a reconnect's `Last-Event-ID`
confirmed). The generation is `settled` once it is known whether its terminal event reached a
browser: a connection delivered it, or nobody followed it within a grace after it ended (or it
was abandoned). The relay writes the stream's record then (`on_settled`), so a browser that left
is never recorded as having had the whole answer.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from streamscope.core.attributes import RESUME_ABANDONED, RESUME_COUNT
from streamscope.core.calls import Call
from streamscope.core.guard import internal_error


@dataclass(frozen=True, slots=True)
class Bounds:
    """What a buffer keeps of each generation, and for how long (checked at the buffer's
    construction, `check_bounds`); each generation it starts is handed them."""

    ttl: float
    """Seconds a finished generation stays resumable."""
    grace: float
    """Seconds a generation keeps running with nobody following it."""
    max_events: int
    max_bytes: int
    """What one generation keeps at most: older events are dropped from the front."""


class Backend(Protocol):
    """Where a generation is also kept (Redis): each call returns at once and never raises."""

    def appended(self, generation: Generation, n: int, data: bytes, terminal: bool) -> None: ...
    def ended(self, generation: Generation) -> None: ...
    async def followed_elsewhere(self, generation: Generation) -> bool: ...
    async def delivered_elsewhere(self, generation: Generation) -> bool: ...


class Attempts(Protocol):
    """The relay's retry line, as a generation sees it: the call of the attempt that runs."""

    @property
    def call(self) -> Call | None: ...


class Generation:
    """The events of one relayed request (`request_id`), numbered from 1 as their SSE ids."""

    def __init__(self, request_id: str, bounds: Bounds, *, backend: Backend | None = None,
                 on_end: Callable[[Generation], None] | None = None) -> None:
        self.request_id = request_id
        self.bounds = bounds
        """Its buffer's: what it keeps at most (`max_events`, `max_bytes`) and its `grace`."""
        self.backend = backend
        self.on_end = on_end
        self.events: deque[bytes] = deque()
        self.first = 1
        """The number of `events[0]` (older events were dropped past the bounds)."""
        self.count = 0
        """The number of the last event appended."""
        self.size = 0
        """Bytes held in `events`."""
        self.ended = False
        self.abandoned = False
        self.tokens = False
        """Whether any event before the terminal one was sent (the `partial` of an error after it)."""
        self.expires: float | None = None
        """`time.monotonic()` after which nothing is resumed (set at the terminal event: + ttl)."""
        self.followers = 0
        self.resumes = 0
        """Connections that resumed it (on this worker, and on others as far as the backend says)."""
        self.producer: asyncio.Future[None] | None = None
        self.line: Attempts | None = None
        """The attempts that generate it (the relay's retry line): the current one's call gets the
        resumes and an abandonment on its span, and the resumes' spans link to it."""
        self.delivered = 0
        """The number of the last event a connection on this worker handed to its socket."""
        self.acknowledged = 0
        """The last event number a reconnect said it had (its `Last-Event-ID`)."""
        self.settled: bool | None = None
        """Whether its terminal event reached a browser, once that is known (None: not yet)."""
        self.on_settled: Callable[[Generation], None] | None = None
        self.claim: str | None = None
        """The idempotency key its request claimed (None: none): held as long as it is resumable."""
        self._waiters: list[asyncio.Future[None]] = []
        self._grace: asyncio.TimerHandle | None = None

    @property
    def call(self) -> Call | None:
        """The call of the attempt that generates it (None: none yet, or one streamscope does not observe)."""
        return self.line.call if self.line is not None else None

    @property
    def span_context(self) -> object | None:
        """The generating call's span, for the resumes' links (None: none)."""
        call = self.call
        return call.span_context if call is not None else None

    # -- the producer's side -------------------------------------------------------------------

    def append(self, data: bytes, terminal: bool = False) -> None:
        if self.ended:
            return
        self.count += 1
        self.events.append(data)
        self.size += len(data)
        if terminal:
            self.ended = True
        else:
            self.tokens = True
        bounds = self.bounds
        while len(self.events) > 1 and (len(self.events) > bounds.max_events or self.size > bounds.max_bytes):
            self.size -= len(self.events.popleft())
            self.first += 1
        if self._waiters:
            for waiter in self._waiters:
                if not waiter.done():
                    waiter.set_result(None)
            self._waiters.clear()
        if self.backend is not None:
            self.backend.appended(self, self.count, data, terminal)
        if terminal:
            self._stop_grace()
            self._end()
            self.restart_grace()  # with nobody following, a grace for a reconnect to fetch the end

    def _end(self) -> None:
        if self.backend is not None:
            self.backend.ended(self)
        if self.on_end is not None:
            self.on_end(self)

    # -- the connections' side -----------------------------------------------------------------

    def available(self, after: int) -> bool:
        """Whether the events after `after` are all still here and one at least is to come."""
        return self.first <= after + 1 and after < self.count + (0 if self.ended else 1) and not self.abandoned

    async def follow(self, after: int) -> AsyncIterator[bytes]:
        """The events after `after`, then each as it is appended, to the terminal one. The caller
        has `join`ed; leaving (end, cancel, close) is `leave`."""
        position = after
        while True:
            if position < self.first - 1:
                return  # fell behind what is kept: the browser's reconnect gets 204
            while position < self.count:
                position += 1
                yield self.events[position - self.first]
                if position > self.delivered:  # asked for the next: this one went to the socket
                    self.delivered = position
            if self.ended and self.delivered >= self.count:
                self.settle(True)
            if self.ended or self.abandoned:
                return
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    def join(self) -> None:
        self.followers += 1
        self._stop_grace()

    def leave(self) -> None:
        self.followers -= 1
        self.restart_grace()

    def restart_grace(self) -> None:
        """With nobody following, the grace starts (again) now: before the end, to give it up;
        after it, to settle it (nobody fetched the end)."""
        if self.followers <= 0 and self.settled is None and not self.abandoned:
            self._stop_grace()
            loop = asyncio.get_running_loop()
            self._grace = loop.call_later(self.bounds.grace, self._grace_over, loop)

    def _stop_grace(self) -> None:
        if self._grace is not None:
            self._grace.cancel()
            self._grace = None

    def _grace_over(self, loop: asyncio.AbstractEventLoop) -> None:
        self._grace = None
        if self.followers > 0 or self.settled is not None or self.abandoned:
            return
        if self.backend is None:
            self._give_up()
            return
        loop.create_task(self._ask_elsewhere(loop))

    def _give_up(self) -> None:
        """Nobody followed it through a grace: abandoned before its end, settled unseen after it."""
        if self.ended:
            self.settle(False)
        else:
            self.abandon()

    async def _ask_elsewhere(self, loop: asyncio.AbstractEventLoop) -> None:
        """Another worker may be following it: look again a grace later if one is."""
        try:
            elsewhere = self.backend is not None and await self.backend.followed_elsewhere(self)
        except Exception:
            internal_error("serve.resume.grace")
            elsewhere = False
        if self.followers > 0 or self.settled is not None or self.abandoned:
            return
        if elsewhere:
            self._grace = loop.call_later(self.bounds.grace, self._grace_over, loop)
        elif self.ended and await self._delivered_elsewhere():
            self.settle(True)
        else:
            self._give_up()

    async def _delivered_elsewhere(self) -> bool:
        """Whether a reconnect on another worker delivered the terminal event (it then had every event)."""
        try:
            if self.backend is None or not await self.backend.delivered_elsewhere(self):
                return False
        except Exception:
            internal_error("serve.resume.delivered")
            return False
        self.delivered = self.count
        return True

    def resumed(self, after: int = 0) -> None:
        """A reconnect resumes it after event `after` (on this worker, or another as the backend says)."""
        self.resumes += 1
        if after > self.acknowledged:
            self.acknowledged = after
        call = self.call
        if call is not None:
            call.note(RESUME_COUNT, self.resumes)

    def abandon(self) -> None:
        """Nobody came back within the grace: stop generating (the producer closes the provider
        connection), and resume no more."""
        call = self.call
        if call is not None and not self.ended:
            call.note(RESUME_ABANDONED, True)
        self.abandoned = True
        self.expires = time.monotonic()
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._waiters.clear()
        if self.producer is not None and not self.producer.done():
            self.producer.cancel()
        self._end()
        self.settle(False)

    def settle(self, reached: bool) -> None:
        """Known at last: whether the terminal event `reached` a browser. Once; tells `on_settled`."""
        if self.settled is not None:
            return
        self.settled = reached
        self._stop_grace()
        if self.on_settled is not None:
            try:
                self.on_settled(self)
            except Exception:
                internal_error("serve.resume.settled")
