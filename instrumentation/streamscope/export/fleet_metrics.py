"""The fleet's instruments: resumes, replayed events, the resume buffer's size, store errors.

Made once per meter and registered with `core.fleet_signals` (a resume has no call to count
through); names, units and attributes as documented in docs/metrics.md.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

RESUME_OUTCOME = "streamscope.resume.outcome"
STORE_OPERATION = "streamscope.store.operation"
BUFFER_BACKEND = "streamscope.buffer.backend"

_sizes_lock = threading.Lock()
_sizes: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
"""buffer → its backend: each buffer's `size()` is read when the gauge is collected (a buffer
no longer used is forgotten with it)."""


def watch_size(owner: Any, backend: str) -> None:
    """Report `owner.size()` as the buffer's size (a buffer calls this once, when made)."""
    with _sizes_lock:
        _sizes[owner] = backend


def _observe(options: CallbackOptions) -> Iterable[Observation]:
    totals: dict[str, int] = {}
    with _sizes_lock:
        found = list(_sizes.items())
    for owner, backend in found:
        try:
            totals[backend] = totals.get(backend, 0) + owner.size()
        except Exception:
            continue
    return [Observation(total, {BUFFER_BACKEND: backend}) for backend, total in totals.items()]


class FleetMetrics:
    """`streamscope.relay.resumes`, `streamscope.relay.replayed_events`,
    `streamscope.relay.buffer.size`, `streamscope.store.errors`."""

    def __init__(self, meter: Meter) -> None:
        self.resumes = meter.create_counter(
            "streamscope.relay.resumes", unit="{resume}",
            description="Reconnects (Last-Event-ID) answered by this worker, by outcome: resumed, "
                        "nothing_to_resume, expired, owner_lost")
        self.replayed_events = meter.create_counter(
            "streamscope.relay.replayed_events", unit="{event}",
            description="Events read back from the resume buffer and sent on resumed connections")
        self.store_errors = meter.create_counter(
            "streamscope.store.errors", unit="{error}",
            description="Operations on the shared store (Redis) that failed or timed out, by operation")
        self.buffer_size = meter.create_observable_gauge(
            "streamscope.relay.buffer.size", callbacks=[_observe], unit="By",
            description="Bytes of relayed events this worker keeps for resume (in memory, or written to "
                        "Redis and not yet expired)")

    def resumed(self, outcome: str) -> None:
        self.resumes.add(1, {RESUME_OUTCOME: outcome})

    def replayed(self, events: int) -> None:
        self.replayed_events.add(events)

    def store_error(self, operation: str) -> None:
        self.store_errors.add(1, {STORE_OPERATION: operation})
