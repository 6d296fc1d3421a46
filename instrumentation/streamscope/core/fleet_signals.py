"""What the fleet's parts (the resume buffer, the shared breaker's store) count, and where it goes.

The relay's resumes and the Redis store have no call of their own to count through (a resume
starts no provider request; a store error happens beside any call), so the metrics writer of each
instrumentation session registers its instruments here (`attach`), and the fleet's parts count
through the module functions. Instruments of one meter are registered once: two instrumentors on
one meter provider count a resume once.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol


class FleetInstruments(Protocol):
    def resumed(self, outcome: str) -> None: ...
    def replayed(self, events: int) -> None: ...
    def store_error(self, operation: str, problem: str) -> None: ...
    def relayed(self, outcome: str, code: str | None, partial: bool, status: int) -> None: ...


_lock = threading.Lock()
_attached: dict[int, tuple[object, FleetInstruments, int]] = {}
"""id(meter) → (meter, its instruments, how many instrumentation sessions use them); the meter is
kept so that its id stays its own."""
_tracers: list[object] = []
"""The tracers of the sessions on, oldest first: a resume's span is made with the first."""


def attach(meter: object, make: Callable[[], FleetInstruments], tracer: object | None = None) -> None:
    """An instrumentation session on `meter` is on: count through its instruments (made once);
    `tracer`: its tracer, for the spans of resumed connections."""
    with _lock:
        if tracer is not None:
            _tracers.append(tracer)
        found = _attached.get(id(meter))
        if found is None:
            _attached[id(meter)] = (meter, make(), 1)
        else:
            _attached[id(meter)] = (meter, found[1], found[2] + 1)


def detach(meter: object, tracer: object | None = None) -> None:
    """That session is off: its instruments count no more once no session uses them."""
    with _lock:
        if tracer is not None and tracer in _tracers:
            _tracers.remove(tracer)
        found = _attached.get(id(meter))
        if found is not None:
            if found[2] <= 1:
                del _attached[id(meter)]
            else:
                _attached[id(meter)] = (meter, found[1], found[2] - 1)


def tracer() -> object | None:
    """The tracer a resumed connection's span is made with (None: no session is on)."""
    with _lock:
        return _tracers[0] if _tracers else None


def _count(name: str, *values: object) -> None:
    """`instruments.<name>(*values)` on every registered set; one failing never stops another."""
    with _lock:
        found = [instruments for _, instruments, _ in _attached.values()]
    for instruments in found:
        try:
            getattr(instruments, name)(*values)
        except Exception:
            pass


def resumed(outcome: str) -> None:
    """A reconnect was answered: `resumed`, `nothing_to_resume`, `expired` or `owner_lost`. Never raises."""
    _count("resumed", outcome)


def replayed(events: int) -> None:
    """`events` events read back from the buffer and sent on a resumed connection. Never raises."""
    _count("replayed", events)


def store_error(operation: str, problem: str = "unreachable") -> None:
    """A store operation that failed (`buffer.append`, `breaker.sync`, ...): Redis `unreachable`, or
    refusing the service's `configuration`. Never raises."""
    _count("store_error", operation, problem)


def relayed(outcome: str, code: str | None, partial: bool, status: int) -> None:
    """A relayed request that made no call ended (refused before it opened anything). Never raises."""
    _count("relayed", outcome, code, partial, status)
