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

from streamscope.core.attributes import FAILURE_CODE, HTTP_STATUS, PARTIAL, RELAY_OUTCOME, RESUME_OUTCOME

from .instruments import counter, observable_gauge

STORE_OPERATION = "streamscope.store.operation"
STORE_PROBLEM = "streamscope.store.problem"
"""`unreachable` (an outage: it passes by itself) or `configuration` (Redis refuses the service's settings)."""
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
    `streamscope.relay.buffer.size`, `streamscope.store.errors`; and `streamscope.relay.streams` for
    a relayed request that made no call (refused before opening anything)."""

    def __init__(self, meter: Meter) -> None:
        self.resumes = counter(meter, "streamscope.relay.resumes")
        self.replayed_events = counter(meter, "streamscope.relay.replayed_events")
        self.store_errors = counter(meter, "streamscope.store.errors")
        self.buffer_size = observable_gauge(meter, "streamscope.relay.buffer.size", [_observe])
        self.relay_streams = counter(meter, "streamscope.relay.streams")  # the calls' own instrument

    def resumed(self, outcome: str) -> None:
        self.resumes.add(1, {RESUME_OUTCOME: outcome})

    def replayed(self, events: int) -> None:
        self.replayed_events.add(events)

    def store_error(self, operation: str, problem: str) -> None:
        self.store_errors.add(1, {STORE_OPERATION: operation, STORE_PROBLEM: problem})

    def relayed(self, outcome: str, code: str | None, partial: bool, status: int) -> None:
        attrs: dict[str, Any] = {RELAY_OUTCOME: outcome, PARTIAL: partial, HTTP_STATUS: status}
        if code is not None:
            attrs[FAILURE_CODE] = code
        self.relay_streams.add(1, attrs)
