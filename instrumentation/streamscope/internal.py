"""Never break the host: streamscope's own failures are swallowed, logged once and counted."""

from __future__ import annotations

import logging
import threading
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
