"""`deadline()` and `route()`: what the caller knows about a call, carried by contextvars (and
`relaying()`: the calls `streamscope.serve.relay()` makes, whose stream log record is the relay's).

Context variables work the same in threads and asyncio tasks, so one `with` block covers
every call made inside it, sync or async, without passing anything through user code.

A block may be left in another Context than the one it was entered in: an ASGI server can finish
a streamed response body in another task than the handler's. Leaving it then puts the outer value
back in the Context that leaves (`ContextVar.reset` would raise `ValueError` there).
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar, Token
from typing import TypeVar

_T = TypeVar("_T")

_deadline: ContextVar[float | None] = ContextVar("streamscope_deadline", default=None)
_route: ContextVar[str | None] = ContextVar("streamscope_route", default=None)
_attempt: ContextVar[int | None] = ContextVar("streamscope_attempt", default=None)
_relaying: ContextVar[bool] = ContextVar("streamscope_relaying", default=False)
_continuation: ContextVar[int | None] = ContextVar("streamscope_continuation", default=None)


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
        _restore(_deadline, token, outer)


def _restore(var: ContextVar[_T], token: Token[_T], outer: _T) -> None:
    """Leave a block: reset in the Context that entered it, else set the outer value back."""
    try:
        var.reset(token)
    except ValueError:  # the token was created in another Context (left in another task)
        var.set(outer)


@contextmanager
def route(name: str) -> Iterator[str]:
    """Labels every call made inside the block with the route `name` (`streamscope.route`)."""
    outer = _route.get()
    token = _route.set(str(name))
    try:
        yield name
    finally:
        _restore(_route, token, outer)


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
    outer = _attempt.get()
    token = _attempt.set(number)
    try:
        yield number
    finally:
        _restore(_attempt, token, outer)


def current_continuation() -> int | None:
    """Which continuation of a relayed answer the call being made is (1, 2, ...), else None."""
    return _continuation.get()


@contextmanager
def continuing(number: int) -> Iterator[int]:
    """Marks the calls made inside as continuation `number` of a relayed answer."""
    outer = _continuation.get()
    token = _continuation.set(number)
    try:
        yield number
    finally:
        _restore(_continuation, token, outer)


@contextmanager
def relaying() -> Iterator[None]:
    """Marks the calls made inside as the relay's (`streamscope.serve.relay()`): the relay writes
    one stream log record per relayed request, so these calls write none of their own."""
    outer = _relaying.get()
    token = _relaying.set(True)
    try:
        yield
    finally:
        _restore(_relaying, token, outer)


def current_relaying() -> bool:
    """Whether the call being made is one of the relay's (inside `relaying()`)."""
    return _relaying.get()
