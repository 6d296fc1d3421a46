"""`deadline()` and `route()`: what the caller knows about a call, carried by contextvars.

Context variables work the same in threads and asyncio tasks, so one `with` block covers
every call made inside it, sync or async, without passing anything through user code.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar

_deadline: ContextVar[float | None] = ContextVar("streamscope_deadline", default=None)
_route: ContextVar[str | None] = ContextVar("streamscope_route", default=None)
_attempt: ContextVar[int | None] = ContextVar("streamscope_attempt", default=None)


def deadline(seconds: float) -> AbstractContextManager[float]:
    """An absolute deadline, `seconds` from now, for every call made inside the block.

    Nested deadlines keep the earliest: an inner block can only shorten the time left.
    `math.inf` sets no deadline of its own (an outer one still applies). Yields the absolute
    deadline on the `time.monotonic()` clock (`math.inf` when there is none).

    `seconds` is checked here, at the call, as `Budgets` checks its fields: a real number > 0,
    not a bool, NaN or string (TypeError / ValueError). A zero or negative deadline would fail
    every call inside at once, and NaN would silently mean none.
    """
    return _deadline_block(_seconds(seconds))


def _seconds(seconds: object) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise TypeError(f"deadline(seconds) takes a number of seconds > 0 (math.inf for no deadline of its own), "
                        f"not {type(seconds).__name__} {seconds!r}")
    value = float(seconds)
    if math.isnan(value) or value <= 0:
        raise ValueError(f"deadline(seconds) must be > 0 (math.inf for no deadline of its own), not {seconds!r}")
    return value


@contextmanager
def _deadline_block(seconds: float) -> Iterator[float]:
    at = time.monotonic() + seconds
    outer = _deadline.get()
    if outer is not None and outer < at:
        at = outer
    token = _deadline.set(at if math.isfinite(at) else outer)
    try:
        yield at
    finally:
        _deadline.reset(token)


@contextmanager
def route(name: str) -> Iterator[str]:
    """Labels every call made inside the block with the route `name` (`streamscope.route`)."""
    token = _route.set(str(name))
    try:
        yield name
    finally:
        _route.reset(token)


def current_deadline() -> float | None:
    """The caller's absolute deadline (monotonic seconds), or None outside any `deadline()`."""
    return _deadline.get()


def current_route() -> str | None:
    """The route name set by the innermost `route()`, or None."""
    return _route.get()


def current_attempt() -> int | None:
    """The attempt number while streamscope's retry helper opens a stream, else None."""
    return _attempt.get()


@contextmanager
def attempt(number: int) -> Iterator[int]:
    """Marks the calls made inside as attempt `number` of the retry helper."""
    token = _attempt.set(number)
    try:
        yield number
    finally:
        _attempt.reset(token)
