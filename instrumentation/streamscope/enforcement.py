"""Budget enforcement: it reads the recorder's clocks and interrupts a read that waited too long.

Nothing here runs per event. The recorder already keeps `first_content` and `last_content`;
a budget's expiry is computed from them only when a timer fires:

* async: one `loop.call_at` timer per stream. When it fires early (content arrived meanwhile),
  it re-arms itself for the new expiry; when the budget really expired and the reader is
  waiting on the stream, it cancels the reading task, and the adapter turns that cancellation
  into `StreamTimeout` (the asyncio.timeout pattern, with `uncancel`).
* sync: one watchdog thread for every sync stream in the process. It keeps a heap of expiries
  and, when one is due, interrupts the blocked read (the adapter shuts the socket down: closing
  the response from another thread does not wake a blocked read).

First-token and idle measure *waiting on the stream*: a check that finds the caller busy
elsewhere (not inside a read) is postponed by one budget rather than blaming the stream for
the caller's own time. The deadline is absolute: it fires at the next read at the latest.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
import types
from collections.abc import Callable

from .internal import internal_error
from .recorder import StreamRecorder

CANCEL_MESSAGE = "streamscope budget fired"


def _current_task_getter() -> Callable[[asyncio.AbstractEventLoop], "asyncio.Task[object] | None"]:
    """`asyncio.current_task(loop)` for a loop already known, at a dict look-up's cost where it can.

    On Python 3.11 `current_task` is a Python function that finds the running loop first: about
    0.2 µs, paid per event by a caller that reads with `anext()` under budgets. There the tasks
    running on each loop are in the `_current_tasks` dict the C accelerator keeps; from 3.12
    `current_task` itself is C.
    """
    current = asyncio.current_task
    if not isinstance(current, types.BuiltinFunctionType):
        tasks = getattr(asyncio.tasks, "_current_tasks", None)
        if isinstance(tasks, dict):
            return tasks.get
    return current


current_task = _current_task_getter()


def expiry(rec: StreamRecorder) -> tuple[float, str] | None:
    """(monotonic time, budget name) of the budget that expires first, or None if none is set."""
    budgets = rec.request.budgets
    when: float | None = None
    name = ""
    last = rec.last_content
    if last is None:
        if budgets.first_token is not None:
            when, name = rec.t0 + budgets.first_token, "first_token"
    elif budgets.idle is not None:
        when, name = last + budgets.idle, "idle"
    if budgets.deadline is not None:
        at = rec.t0 + budgets.deadline
        if when is None or at <= when:
            when, name = at, "deadline"
    return None if when is None else (when, name)


def postponed(rec: StreamRecorder, name: str, now: float) -> float:
    """When to look again at a first-token/idle budget that expired while the caller was away."""
    budgets = rec.request.budgets
    length = budgets.first_token if name == "first_token" else budgets.idle
    return now + (length or 0.0)


AWAY = "away"
"""`reader` while the caller holds an event and has not asked for the next one."""


def _decide(rec: StreamRecorder, reader: object, now: float) -> tuple[str, str, float]:
    """What a due check does: ("rearm", "", when) | ("interrupt", budget, 0) | ("pending", budget, 0)."""
    found = expiry(rec)
    if found is None:
        return "none", "", 0.0
    when, name = found
    if when > now:
        return "rearm", name, when  # fired early: content arrived meanwhile
    if reader is AWAY and name != "deadline":
        return "rearm", name, postponed(rec, name, now)
    if reader is None or reader is AWAY:
        return "pending", name, 0.0  # raised at the caller's next read
    return "interrupt", name, 0.0


class AsyncWatch:
    """One timer for one async stream.

    `reader` is the task while it waits on the stream, `AWAY` while the caller holds an event,
    None before the first read. `pending` is set when a budget fired outside a read.
    """

    __slots__ = ("rec", "loop", "handle", "reader", "pending", "started")

    def __init__(self, rec: StreamRecorder, loop: asyncio.AbstractEventLoop) -> None:
        self.rec = rec
        self.loop = loop
        self.reader: object = None
        self.pending = False
        self.started = False
        self.handle: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        found = expiry(self.rec)
        if found is not None:
            self.handle = self.loop.call_at(found[0], self._check)

    def content_started(self) -> None:
        """Once per stream: the idle budget replaces first-token, and may expire *sooner*."""
        self.started = True
        self.stop()
        self._arm()

    def _check(self) -> None:
        try:
            rec = self.rec
            self.handle = None
            if rec.finished or rec.fired is not None:
                return
            now = time.monotonic()
            reader = self.reader
            action, name, when = _decide(rec, reader, now)
            if action == "rearm":
                self.handle = self.loop.call_at(when, self._check)
            elif action == "pending":
                self.pending = rec.fire(name, now)
            elif action == "interrupt" and isinstance(reader, asyncio.Task) and not reader.done():
                if name == "deadline":
                    self._interrupt(reader, name, now)
                else:
                    # One hop first: data that arrived in this loop iteration has already queued
                    # the reader's wake-up ahead of this callback. A busy loop is not a stall.
                    self.handle = self.loop.call_soon(self._confirm)  # type: ignore[assignment]
        except Exception:
            internal_error("budget timer")

    def _confirm(self) -> None:
        try:
            self.handle = None
            rec, reader = self.rec, self.reader
            if rec.finished or rec.fired is not None:
                return
            now = time.monotonic()
            action, name, when = _decide(rec, reader, now)
            if action == "interrupt" and isinstance(reader, asyncio.Task) and not reader.done():
                self._interrupt(reader, name, now)
            elif action == "pending":
                self.pending = rec.fire(name, now)
            elif action == "rearm":
                self.handle = self.loop.call_at(when, self._check)
        except Exception:
            internal_error("budget timer")

    def _interrupt(self, reader: asyncio.Task[object], name: str, now: float) -> None:
        if self.rec.fire(name, now):
            reader.cancel(CANCEL_MESSAGE)

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class SyncWatch:
    """One sync stream under the shared watchdog.

    `reader` is True while a read may block, `AWAY` while the caller holds an event, None
    before the first read; `interrupt` wakes a blocked read (the adapter shuts the socket).
    """

    __slots__ = ("rec", "interrupt", "reader", "pending", "done", "started", "due")

    def __init__(self, rec: StreamRecorder, interrupt: Callable[[], None]) -> None:
        self.rec: StreamRecorder | None = rec
        self.interrupt = interrupt
        self.reader: object = None
        self.pending = False
        self.done = False
        self.started = False
        self.due = 0.0
        """The one heap entry that counts for this stream; older entries are stale."""

    def content_started(self) -> None:
        """Once per stream: the idle budget replaces first-token, and may expire *sooner*."""
        self.started = True
        watchdog().watch(self)

    def stop(self) -> None:
        """The stream ended: the heap entry is dropped when it comes due."""
        self.done = True
        self.rec = None
        self.interrupt = _nothing


def _nothing() -> None:
    pass


class Watchdog:
    """The one thread that enforces budgets on every sync stream of the process."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, SyncWatch]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, watch: SyncWatch) -> None:
        found = expiry(watch.rec) if watch.rec is not None else None
        if found is not None:
            self._push(found[0], watch)

    def _push(self, when: float, watch: SyncWatch) -> None:
        with self._cond:
            watch.due = when
            heapq.heappush(self._heap, (when, next(self._seq), watch))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="streamscope-watchdog", daemon=True)
                self._thread.start()
            elif self._heap[0][2] is watch:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                when, _, watch = self._heap[0]
                delay = when - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                heapq.heappop(self._heap)
            if when == watch.due:
                self._check(watch)

    def _check(self, watch: SyncWatch) -> None:
        try:
            rec = watch.rec
            if watch.done or rec is None or rec.finished or rec.fired is not None:
                return
            now = time.monotonic()
            reader = watch.reader
            action, name, when = _decide(rec, reader, now)
            if action == "rearm":
                self._push(when, watch)
            elif action == "pending":
                watch.pending = rec.fire(name, now)
                if watch.pending and watch.reader is True:
                    watch.interrupt()  # the caller started a read meanwhile
            elif action == "interrupt" and rec.fire(name, now):
                watch.interrupt()
        except Exception:
            internal_error("watchdog")


_watchdog: Watchdog | None = None
_watchdog_lock = threading.Lock()


def watchdog() -> Watchdog:
    """The process's one watchdog (started on first use)."""
    global _watchdog
    with _watchdog_lock:
        if _watchdog is None:
            _watchdog = Watchdog()
        return _watchdog
