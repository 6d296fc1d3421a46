"""Budgets on sync streams: one watchdog thread for every sync stream in the process.

It keeps a heap of expiries and, when one is due, interrupts the blocked read (the adapter shuts
the socket down: closing the response from another thread does not wake a blocked read). It
fires first-token or idle only on a reader inside the socket read with nothing readable, twice
`CONFIRM` apart: a reader held up in this process (a collection, the GIL, a preempted thread)
with the rest of the answer in its transport is not a stall. A stream that ends leaves nothing
in it. What a check decides is `enforcement`'s.

Per process: a forked child starts with no watchdog (a fresh lock, condition, heap and thread
on first use); a watch inherited from the parent is inert in the child.
"""

from __future__ import annotations

import heapq
import itertools
import os
import threading
import time
from collections.abc import Callable

from streamscope.core.guard import internal_error
from streamscope.core.recorder import StreamRecorder

from . import enforcement
from .enforcement import process_id

CONFIRM = 0.002
"""How long an expired wait must stay unchanged (same read, nothing readable) before the
watchdog fires. A reader still busy with data it already holds makes progress in that time."""


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
        self.pid = process_id()
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


class Watchdog:
    """The one thread that enforces budgets on every sync stream of the process.

    A heap of (when, seq, watch); a watch's one entry that counts is the one whose seq is
    `watch.entry`. A re-arm or the stream's end leaves its older entry stale: stale entries go
    when they come due, or all at once when they outnumber the live ones (O(n) then, O(1)
    amortized per entry), so the heap never holds more than two entries per watched stream, and
    none once every stream has ended.
    """

    def __init__(self) -> None:
        self.pid = process_id()
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
            if watch.done or watch.pid != process_id():
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
            action, name, when = enforcement.decide(rec, reading, now)
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


def _after_fork_in_child() -> None:
    """The child's watchdog starts empty: the parent's heap holds the parent's streams, its
    condition has waiters that do not exist here (a notify would wake no one), and its locks may
    be held by threads that did not survive the fork."""
    global _watchdog, _watchdog_lock
    _watchdog = None
    _watchdog_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
