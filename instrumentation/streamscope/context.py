"""`deadline()` and `route()`: what the caller knows about a call, carried by contextvars.

Context variables work the same in threads and asyncio tasks, so one `with` block covers
every call made inside it, sync or async, without passing anything through user code.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_deadline: ContextVar[float | None] = ContextVar("streamscope_deadline", default=None)
_route: ContextVar[str | None] = ContextVar("streamscope_route", default=None)
_attempt: ContextVar[int | None] = ContextVar("streamscope_attempt", default=None)


@contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """An absolute deadline, `seconds` from now, for every call made inside the block.

    Nested deadlines keep the earliest: an inner block can only shorten the time left.
    Yields the absolute deadline on the `time.monotonic()` clock.
    """
    at = time.monotonic() + float(seconds)
    outer = _deadline.get()
    if outer is not None and outer < at:
        at = outer
    token = _deadline.set(at)
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
