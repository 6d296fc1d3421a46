"""Never break the host: streamscope's own failures are swallowed, logged once and counted."""

from __future__ import annotations

import logging
import os
import threading
import weakref
from typing import Protocol

logger = logging.getLogger("streamscope")


class _Counter(Protocol):
    def add(self, amount: int, attributes: dict[str, str] | None = None) -> None: ...


_lock = threading.Lock()
_logged: set[str] = set()
_counters: list[_Counter] = []
count = 0
"""Internal errors since the process started (all hooks)."""


def internal_error(where: str) -> None:
    """Call from an `except` block inside a streamscope hook. Never raises."""
    global count
    try:
        with _lock:
            count += 1
            first = where not in _logged
            _logged.add(where)
        if first:
            logger.warning("streamscope: internal error in %s (the host is unaffected; logged once)",
                           where, exc_info=True)
        for counter in list(_counters):
            counter.add(1)
    except Exception:  # pragma: no cover - the last line of defence
        pass


def add_counter(counter: _Counter) -> None:
    """Count internal errors on `counter` too (the `streamscope.internal_errors` instrument)."""
    _counters.append(counter)


def remove_counter(counter: _Counter) -> None:
    if counter in _counters:
        _counters.remove(counter)


def _after_fork_in_child() -> None:
    """A forked child is a process of its own: a fresh lock (the parent's may be held by a thread
    that did not survive the fork), its own count, and its own first log of each error (the
    parent's log lines are not the worker's). The counters stay: they belong to the instruments."""
    global _lock, _logged, count
    _lock = threading.Lock()
    _logged = set()
    count = 0


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def renew_lock_after_fork(owner: object, attr: str = "_lock") -> None:
    """Give `owner` a fresh lock in a forked child: the parent's may be held by a thread that did
    not survive the fork, and the child's first use would wait for it forever."""
    if not hasattr(os, "register_at_fork"):
        return
    ref = weakref.ref(owner)

    def renew() -> None:
        found = ref()
        if found is not None:
            setattr(found, attr, threading.Lock())

    os.register_at_fork(after_in_child=renew)
