"""Budget enforcement: it reads the recorder's clocks and interrupts a read that waited too long.

Nothing here runs per event. The reader marks each read (the caller asked for an event and
waits for it) on the stream's watch, and moves the recorder's provider clock past the time the
caller spent away (see `recorder`); a budget's expiry is computed from that clock only when a
timer fires:

* first-token and idle measure the provider's silence *while the caller waits*: from the
  recorder's `origin`, which never counts the caller's own time between reads. A check that
  finds the caller away (holding an event, or not reading yet) parks the budget until the
  caller asks again. A check that finds an expired wait looks once more before it fires, so
  data already there (in the socket, in the reader's hands, or arriving in the same loop
  turn) is never a stall.
* the deadline is absolute: it fires mid-read, or at the caller's next read at the latest.

* async: one `loop.call_at` timer per stream. When it fires early (content arrived meanwhile),
  it re-arms itself for the new expiry; when a budget really expired and the reader is waiting
  on the stream, it cancels the reading task, and the adapter turns that cancellation into
  `StreamTimeout` (the asyncio.timeout pattern, with `uncancel`).
* sync: one watchdog thread for every sync stream in the process. It keeps a heap of expiries
  and, when one is due, interrupts the blocked read (the adapter shuts the socket down: closing
  the response from another thread does not wake a blocked read). It fires first-token or
  idle only on a reader inside the socket read with nothing readable, twice `CONFIRM` apart:
  a reader held up in this process (a collection, the GIL, a preempted thread) with the rest
  of the answer in its transport is not a stall. A stream that ends leaves nothing in it.

Per process: a forked child (gunicorn, Celery prefork, multiprocessing) starts with no watchdog
(a fresh lock, condition, heap and thread on first use), and every watch remembers the process
that made it: one inherited from the parent is inert in the child, so the child never acts on,
or shuts down, a socket of the parent's streams.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import os
import select
import threading
import time
import types
from collections.abc import Callable
from typing import Any, Literal

from streamscope.core.errors import StreamTimeout
from streamscope.core.guard import internal_error
from streamscope.core.recorder import StreamRecorder

_pid = os.getpid()
"""This process's id, kept current by the at-fork hook below (no system call per stream)."""
CANCEL_MESSAGE = "streamscope budget fired"
CONFIRM = 0.002
"""Sync: how long an expired wait must stay unchanged (same read, nothing readable) before the
watchdog fires. A reader still busy with data it already holds makes progress in that time."""


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


def waiting_budget(rec: StreamRecorder) -> tuple[float, str] | None:
    """When first-token (before the first content) or idle (after it) expires if the caller
    keeps waiting: the provider clock's `origin` plus the budget. None if it is not set."""
    budgets = rec.request.budgets
    if rec.last_content is None:
        length, name = budgets.first_token, "first_token"
    else:
        length, name = budgets.idle, "idle"
    return None if length is None else (rec.origin + length, name)


def deadline_at(rec: StreamRecorder) -> float | None:
    deadline = rec.request.budgets.deadline
    return None if deadline is None else rec.t0 + deadline


def expiry(rec: StreamRecorder) -> tuple[float, str] | None:
    """(monotonic time, budget name) of the budget that expires first while the caller waits
    (before the headers, inside the SDK's call, it always does), or None if none is set."""
    found = waiting_budget(rec)
    at = deadline_at(rec)
    if at is not None and (found is None or at <= found[0]):
        return at, "deadline"
    return found


def expired(rec: StreamRecorder, now: float) -> bool:
    """Whether a budget expired by `now` (the call is still inside the SDK); fires it if so."""
    found = expiry(rec)
    if found is None or found[0] > now:
        return False
    return rec.fire(found[1], found[0])


def header_wait(rec: StreamRecorder, now: float) -> float | None:
    """Sync: the longest an attempt may wait for its headers before the first budget expires
    (at least 1 ms), or None if no budget is set."""
    found = expiry(rec)
    return None if found is None else max(found[0] - now, 0.001)


def retry_too_late(rec: StreamRecorder, delay: float, now: float) -> bool:
    """Whether the SDK's next attempt, `delay` s from `now`, would start after the first budget
    expires: then it is not made, and that budget fires."""
    found = expiry(rec)
    if found is None or now + delay < found[0]:
        return False
    return rec.fired is not None or rec.fire(found[1], now)


def timeout_error(rec: StreamRecorder) -> StreamTimeout:
    """The budget that fired on `rec`, as the exception the caller gets; ends the record."""
    budget = rec.fired or "deadline"
    partial = rec.first_content is not None
    after = None if rec.fired_at is None else rec.fired_at - rec.t0
    rec.finish("error", None, budget)
    stop_watch(rec)
    return StreamTimeout(budget, partial, after)  # type: ignore[arg-type]


def stop_watch(rec: StreamRecorder) -> None:
    """The stream ended: its watch stops (a sync one leaves the watchdog)."""
    watch = rec.watch
    if isinstance(watch, (AsyncWatch, SyncWatch)):
        watch.stop()


Action = Literal["fire", "stall", "rearm", "park", "none"]


def decide(rec: StreamRecorder, waiting: bool, now: float) -> tuple[Action, str, float | None]:
    """What a due check does, as (action, budget, when):

    * `fire`: the deadline passed (interrupt the read, or raise at the next one);
    * `stall`: the caller waits and first-token/idle expired (confirm, then interrupt);
    * `rearm`: look again at `when`;
    * `park`: the caller is away, first-token/idle wait for its next read; look again at `when`
      (the deadline) if it is not None;
    * `none`: nothing to enforce.
    """
    at = deadline_at(rec)
    if at is not None and at <= now:
        return "fire", "deadline", None
    found = waiting_budget(rec)
    if found is None:
        return ("rearm", "", at) if at is not None else ("none", "", None)
    if not waiting:
        return "park", "", at
    when, name = found
    if when <= now:
        return "stall", name, None
    return "rearm", "", when if at is None or when < at else at


class AsyncWatch:
    """One timer for one async stream.

    `reader` is the task while it waits on the stream (for the headers, or for an event), None
    while the caller is away. `attention` asks the reader to look at the watch at its next read:
    a budget fired while it was away (raise), or a budget was parked (arm it again).
    """

    __slots__ = ("attention", "handle", "loop", "pid", "reader", "rec", "suspect")

    def __init__(self, rec: StreamRecorder, loop: asyncio.AbstractEventLoop, reader: asyncio.Task[Any] | None) -> None:
        self.pid = _pid
        self.rec = rec
        self.loop = loop
        self.reader: asyncio.Task[Any] | None = reader
        self.attention = False
        self.suspect: float | None = None
        self.handle: asyncio.Handle | None = None
        self.rearm()

    def rearm(self) -> None:
        """Look again now: the expiry may have moved earlier (first content, a tool run ended),
        or the caller is back from away."""
        self.stop()
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
            if rec.finished or rec.fired is not None or self.pid != _pid:
                return  # (a child that runs the loop it inherited: the stream is the parent's)
            now = time.monotonic()
            reader = self.reader
            action, name, when = decide(rec, reader is not None, now)
            if action == "stall":
                if self.suspect == rec.origin and reader is not None and not reader.done():
                    self.suspect = None
                    if rec.fire(name, now):
                        reader.cancel(CANCEL_MESSAGE)
                    return
                # One loop turn first: data that arrived in this turn has already queued the
                # reader's wake-up ahead of this callback. A busy loop is not a stall.
                self.suspect = rec.origin
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
                self.handle = self.loop.call_at(when, self._check)
        except Exception:
            internal_error("budget timer")

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class SyncWatch:
    """One sync stream under the shared watchdog.

    `reader` is True while a read may block, False while the caller is away; `interrupt` wakes
    a blocked read (the adapter shuts the socket down); `readable` says whether data is already
    waiting in the socket; `waiting` whether the reading thread is inside the socket read, not
    busy with data it already holds (a collection, a preempted thread: the transport may hold
    the rest of the answer while the socket has nothing).
    """

    __slots__ = ("attention", "done", "entry", "interrupt", "pid", "readable", "reader", "rec", "suspect", "waiting")

    def __init__(self, rec: StreamRecorder, interrupt: Callable[[], None], readable: Callable[[], bool],
                 waiting: Callable[[], bool] | None = None) -> None:
        self.rec: StreamRecorder | None = rec
        self.interrupt = interrupt
        self.readable = readable
        self.waiting = _always if waiting is None else waiting
        self.reader = False
        self.attention = False
        self.done = False
        self.entry = -1
        """The sequence number of this stream's one heap entry that counts (-1: none); any
        other entry of it is stale. Written under the watchdog's lock."""
        self.suspect: float | None = None
        self.pid = _pid
        """The process that made it: in a forked child the watch is the parent's, and inert."""

    def rearm(self) -> None:
        """Look again now (see `AsyncWatch.rearm`)."""
        watchdog().push(0.0, self)

    def attend(self) -> bool:
        """At a read with `attention` set: True if a budget fired (the read must raise)."""
        self.attention = False
        rec = self.rec
        if rec is None or rec.fired is not None:
            return rec is not None
        self.rearm()
        return False

    def stop(self) -> None:
        """The stream ended: its entry leaves the watchdog now, not when its budget would have
        expired (a long deadline would keep thousands of finished streams)."""
        self.done = True  # before `drop` takes the lock: a check in progress pushes nothing after it
        self.rec = None
        self.interrupt = _nothing
        self.readable = _never
        self.waiting = _never
        dog = _watchdog
        if dog is not None and self.pid == dog.pid:
            dog.drop(self)


def _nothing() -> None:
    pass


def _never() -> bool:
    return False


def _always() -> bool:
    return True


def socket_readable(sock: Any) -> bool:
    """Whether `sock` has data waiting (in the kernel, or decrypted in its TLS object)."""
    try:
        pending = getattr(sock, "pending", None)
        if pending is not None and pending() > 0:
            return True
        ready, _, _ = select.select([sock], [], [], 0)
        return bool(ready)
    except (OSError, ValueError):
        return False


class Watchdog:
    """The one thread that enforces budgets on every sync stream of the process.

    A heap of (when, seq, watch); a watch's one entry that counts is the one whose seq is
    `watch.entry`. A re-arm or the stream's end leaves its older entry stale: stale entries go
    when they come due, or all at once when they outnumber the live ones (O(n) then, O(1)
    amortized per entry), so the heap never holds more than two entries per watched stream, and
    none once every stream has ended.
    """

    def __init__(self) -> None:
        self.pid = _pid
        self._heap: list[tuple[float, int, SyncWatch]] = []
        self._live = 0
        self._seq = itertools.count()
        self._cond = threading.Condition()
        """Reentrant: a collection inside a locked section may run a stream's finalizer, which
        ends the stream and drops its entry in the same thread."""
        self._thread: threading.Thread | None = None

    def watch(self, watch: SyncWatch) -> None:
        """Start watching a stream (its first check is now)."""
        self.push(0.0, watch)

    def push(self, when: float, watch: SyncWatch) -> None:
        with self._cond:
            if watch.done or watch.pid != _pid:
                return  # it ended meanwhile, or it is the parent process's (inherited at fork)
            if watch.entry < 0:
                self._live += 1
            watch.entry = seq = next(self._seq)
            heap = self._heap
            heapq.heappush(heap, (when, seq, watch))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="streamscope-watchdog", daemon=True)
                self._thread.start()
            elif heap[0][1] == seq:
                self._cond.notify()
            self._tidy()

    def drop(self, watch: SyncWatch) -> None:
        """The stream ended: its entry stops counting."""
        with self._cond:
            if watch.entry >= 0:
                watch.entry = -1
                self._live -= 1
            self._tidy()

    def _tidy(self) -> None:
        """Under the lock: when stale entries outnumber live ones, drop them all."""
        heap = self._heap
        if len(heap) > 2 * self._live:
            heap[:] = [item for item in heap if item[2].entry == item[1]]
            heapq.heapify(heap)

    def pending(self) -> int:
        """Entries in the heap, stale ones included: what it holds in memory."""
        with self._cond:
            return len(self._heap)

    def watched(self) -> int:
        """Streams with a check to come."""
        with self._cond:
            return self._live

    def _run(self) -> None:
        cond, heap = self._cond, self._heap  # compaction keeps the list (it rewrites it in place)
        while True:
            with cond:
                while not heap:
                    cond.wait()
                when, seq, watch = heap[0]
                delay = when - time.monotonic()
                if delay > 0:
                    cond.wait(delay)
                    continue
                heapq.heappop(heap)
                if watch.entry != seq:
                    continue  # stale
                watch.entry = -1
                self._live -= 1
                self._tidy()
            self._check(watch)

    def _check(self, watch: SyncWatch) -> None:
        try:
            rec = watch.rec
            if watch.done or rec is None or rec.finished or rec.fired is not None:
                return
            now = time.monotonic()
            reading = watch.reader
            action, name, when = decide(rec, reading, now)
            if action == "stall":
                if watch.readable() or not watch.waiting():
                    watch.suspect = None  # data is there, or in the reader's hands: it is getting to it
                    self.push(now + CONFIRM, watch)
                elif watch.suspect == rec.origin:
                    watch.suspect = None  # the same wait, still nothing to read: a stall
                    if rec.fire(name, now):
                        watch.interrupt()
                else:
                    watch.suspect = rec.origin
                    self.push(now + CONFIRM, watch)
                return
            watch.suspect = None
            if action == "fire":
                if rec.fire(name, now):
                    watch.attention = True  # raised at the caller's next read, if not this one
                    if watch.reader:
                        watch.interrupt()
                return
            if action == "park":
                watch.attention = True
                if watch.reader:  # the caller started a read meanwhile, and may not have seen it
                    when = now
            if when is not None:
                self.push(when, watch)
        except Exception:
            internal_error("watchdog")


_watchdog: Watchdog | None = None
_watchdog_lock = threading.Lock()


def watchdog() -> Watchdog:
    """The process's one watchdog (made on first use; its thread starts with the first stream)."""
    global _watchdog
    found = _watchdog
    if found is not None:
        return found
    with _watchdog_lock:
        if _watchdog is None:
            _watchdog = Watchdog()
        return _watchdog


def process_id() -> int:
    """This process's id, current after a fork (a watch made elsewhere is the parent's)."""
    return _pid


def _after_fork_in_child() -> None:
    """The child's enforcement starts empty: the parent's heap holds the parent's streams, its
    condition has waiters that do not exist here (a notify would wake no one), and its locks may
    be held by threads that did not survive the fork."""
    global _pid, _watchdog, _watchdog_lock
    _pid = os.getpid()
    _watchdog = None
    _watchdog_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
