"""Budgets on an async stream: one `loop.call_at` timer per stream.

When the timer fires early (content arrived meanwhile), it re-arms itself for the new expiry;
when a budget really expired, the reader is waiting on the stream, nothing waits in its socket
and a loop turn brought nothing either, it cancels the reading task, and the adapter turns that
cancellation into `StreamTimeout` (the asyncio.timeout pattern, with `uncancel`:
`cancelled_by_budget`). What a check decides is `enforcement`'s.
"""

from __future__ import annotations

import asyncio
import time
import types
from collections.abc import Callable
from typing import Any

from streamscope.core.guard import internal_error
from streamscope.core.recorder import StreamRecorder

from . import enforcement
from .enforcement import process_id

CANCEL_MESSAGE = "streamscope budget fired"
LATE_READ_RECHECK = 0.005
"""How soon an expired wait with bytes in its socket is looked at again (s)."""
LATE_LOOP = 0.05
"""A check before the headers that runs this much later than it was due (s) found a busy loop:
what arrived while it was busy may not be read yet, and there is no socket yet to look at."""
LATE_LOOP_MAX = 10.0
"""The longest a busy loop's lateness postpones the second look (s)."""


def _current_task_getter() -> Callable[[asyncio.AbstractEventLoop], asyncio.Task[object] | None]:
    """`asyncio.current_task(loop)` for a loop already known, at a dict look-up's cost where it can.

    On Python 3.11 `current_task` is a Python function that finds the running loop first: about
    0.2 µs, paid per event by a caller that reads under budgets. There the tasks running on each
    loop are in the `_current_tasks` dict the C accelerator keeps; from 3.12 `current_task`
    itself is C.
    """
    current = asyncio.current_task
    if not isinstance(current, types.BuiltinFunctionType):
        tasks = getattr(asyncio.tasks, "_current_tasks", None)
        if isinstance(tasks, dict):
            return tasks.get
    return current


current_task = _current_task_getter()


def cancelled_by_budget(exc: BaseException, rec: StreamRecorder, task: asyncio.Task[Any] | None) -> bool:
    """Whether `exc` is the cancellation a budget's timer sent `task` (and no one else did: the
    asyncio.timeout pattern, `uncancel` down to zero)."""
    if rec.fired is None or not isinstance(exc, asyncio.CancelledError) or task is None:
        return False
    return task.uncancel() == 0


class AsyncWatch:
    """One timer for one async stream.

    `reader` is the task while it waits on the stream (for the headers, or for an event), None
    while the caller is away. `attention` asks the reader to look at the watch at its next read:
    a budget fired while it was away (raise), or a budget was parked (arm it again).
    """

    __slots__ = ("attention", "due", "handle", "loop", "pid", "readable", "reader", "rec", "suspect")

    def __init__(self, rec: StreamRecorder, loop: asyncio.AbstractEventLoop, reader: asyncio.Task[Any] | None) -> None:
        self.pid = process_id()
        self.rec = rec
        self.loop = loop
        self.reader: asyncio.Task[Any] | None = reader
        self.attention = False
        self.suspect: float | None = None
        self.readable: Callable[[], bool] | None = None
        """Whether the stream's socket has data waiting (set once the headers are in)."""
        self.handle: asyncio.Handle | None = None
        self.due = 0.0
        """`time.monotonic()` the pending check was due at (how late it ran says how busy the loop was)."""
        self.rearm()

    def rearm(self) -> None:
        """Look again now: the expiry may have moved earlier (first content, a tool run ended),
        or the caller is back from away."""
        self.stop()
        self.due = time.monotonic()  # a look made now is not late
        self._check()

    def attend(self) -> bool:
        """At a read with `attention` set: True if a budget fired (the read must raise)."""
        self.attention = False
        if self.rec.fired is not None:
            return True
        self.rearm()
        return False

    def _check(self) -> None:
        try:
            self.handle = None
            rec = self.rec
            if rec.finished or rec.fired is not None or self.pid != process_id():
                return  # (a child that runs the loop it inherited: the stream is the parent's)
            now = time.monotonic()
            reader = self.reader
            action, name, when = enforcement.decide(rec, reader is not None, now)
            if action == "stall":
                readable = self.readable
                if readable is not None and readable():
                    # Bytes wait in the socket: the loop is late to read them (a busy loop, many
                    # streams), the provider is not silent. Look again once they are read.
                    self.suspect = None
                    self._look_at(now + LATE_READ_RECHECK)
                    return
                if self.suspect == rec.origin and reader is not None and not reader.done():
                    self.suspect = None
                    if rec.fire(name, now):
                        reader.cancel(CANCEL_MESSAGE)
                    return
                # One look more first. Data the transport read in this loop turn has already
                # queued the reader's wake-up ahead of this callback, and data it has not read
                # is in the socket, which `readable` sees: one turn is enough. Before the
                # headers there is no socket to look at; a check that ran late then (the loop
                # was busy: what came meanwhile may not be read yet) gives the loop as long
                # again to catch up.
                self.suspect = rec.origin
                late = now - self.due
                if late > LATE_LOOP and readable is None:
                    self._look_at(now + min(late, LATE_LOOP_MAX))
                else:
                    self.due = now
                    self.handle = self.loop.call_soon(self._check)
                return
            self.suspect = None
            if action == "fire":
                if reader is not None and not reader.done():
                    if rec.fire(name, now):
                        reader.cancel(CANCEL_MESSAGE)
                elif rec.fire(name, now):
                    self.attention = True  # raised at the caller's next read
                return
            if action == "park":
                self.attention = True
            if when is not None:
                self._look_at(when)
        except Exception:
            internal_error("budget timer")

    def _look_at(self, when: float) -> None:
        self.due = when
        self.handle = self.loop.call_at(when, self._check)

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
