"""The retry line: retry only where nobody has seen anything.

`stream_with_retry(open_stream)` opens a stream and yields its events. Until the first content
event (under the call's `first_content` setting) the events are held back, so a failed attempt
leaves nothing on the caller's side and a retry is invisible. Once content has been delivered,
nothing is retried: the failure is the caller's to handle (`StreamTimeout.partial`, or the SDK's
exception). Retries use full-jitter exponential backoff that honours `retry-after`, and an attempt
is only started while it still fits in the caller's remaining `deadline()`. Whether a failure is
worth retrying is decided in one place (`retry_decision`), which gives the failure its code too.

Each attempt is its own streamed call with its own span; `streamscope.attempts` on each span is
that attempt's number, so the last span carries the total.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterator
from contextlib import closing, contextmanager, suppress
from typing import Any

from streamscope.adapters import providers
from streamscope.adapters.providers import retry_decision
from streamscope.core.calls import Call, Helpers, call_of, capture_calls, cost_of
from streamscope.core.context import attempt, current_deadline
from streamscope.core.keywords import checked, checked_class, whole_number

__all__ = ["Backoff", "astream_with_retry", "retry_decision", "stream_with_retry"]

_JITTER = random.Random()
"""The default jitter's generator, one per process (a `Random` is 2.5 KiB: one per relayed request
was a tenth of what a relayed stream holds), seeded afresh in each forked worker, so workers
forked from one parent do not wait in step."""
os.register_at_fork(after_in_child=_JITTER.seed)


class Backoff:
    """Full-jitter exponential backoff: uniform(0, min(cap, base * 2**(n-1))), at least `retry-after`.

    `max_wait` (seconds, default 30) is the longest wait before a retry: a provider that asks for
    more (`Retry-After: 120`) is not retried (retrying sooner than it asked would be refused again,
    and waiting longer holds the caller past what a user waits); the failure is the caller's at
    once, with its code and the provider's retry-after (the relay passes it on).

    A keyword it does not take raises a one-line `TypeError` naming the one probably meant; a
    value that is not a number of seconds, a `TypeError`; a negative or infinite one, a `ValueError`."""

    @checked("Backoff()")
    def __init__(self, base: float = 0.5, cap: float = 8.0, rng: random.Random | None = None, *,
                 max_wait: float = 30.0) -> None:
        for name, value in (("base", base), ("cap", cap), ("max_wait", max_wait)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Backoff({name}=...) takes a number of seconds >= 0, not {value!r}")
            if not 0 <= value < float("inf"):
                raise ValueError(f"Backoff({name}=...) takes a finite number of seconds >= 0, not {value!r}")
        if rng is not None and not callable(getattr(rng, "uniform", None)):
            raise TypeError(f"Backoff(rng=...) takes a random.Random (or None), not {type(rng).__name__}")
        self.base = base
        self.cap = cap
        self.max_wait = max_wait
        self.rng = rng or _JITTER

    def longest(self, retry_number: int) -> float:
        """The longest wait before retry `retry_number` (1 = the first retry), Retry-After aside:
        the jitter's upper bound."""
        return float(min(self.cap, self.base * 2.0 ** (retry_number - 1)))

    def total(self, retries: int) -> float:
        """The longest `retries` retries can wait in all: what `streamscope check` sets aside
        before it splits a deadline across the attempts."""
        return sum(self.longest(n) for n in range(1, retries + 1))

    def delay(self, retry_number: int, retry_after: float | None = None) -> float:
        delay = self.rng.uniform(0.0, self.longest(retry_number))
        return max(delay, retry_after) if retry_after is not None else delay


def _fits(delay: float) -> bool:
    """Whether an attempt started after `delay` would still start before the caller's deadline."""
    deadline = current_deadline()
    return deadline is None or time.monotonic() + delay < deadline


def _first_content_setting(stream: Any) -> str:
    call = call_of(stream)
    return call.recorder.request.budgets.first_content if call is not None else "text"


def _helpers(call: Call | None, event: Any) -> Helpers | None:
    """The adapter's answers for this stream's events (found from the first event if uninstrumented)."""
    found = call.helpers if call is not None else None
    return found if found is not None else providers.helpers_for(event)


def _is_content(helpers: Helpers | None, event: Any, setting: str) -> bool:
    return helpers.is_content(event, setting) if helpers is not None else True


class _Gate:
    """Holds one attempt's events back until its first content event (under the call's
    `first_content` setting), so that a failed attempt leaves nothing on the caller's side."""

    def __init__(self) -> None:
        self.delivered = False
        """Content reached the caller: from here on events pass as they come, and nothing is retried."""
        self._held: list[Any] = []
        self._helpers: Helpers | None = None
        self._call: Call | None = None
        self._setting = "text"

    def watch(self, stream: Any, call: Call | None) -> None:
        self._setting = _first_content_setting(stream)
        self._call = call

    def hold(self, event: Any) -> list[Any]:
        """The events to pass on now: none until content arrives, then every one held back."""
        self._held.append(event)
        if self._helpers is None:
            self._helpers = _helpers(self._call, event)
        if _is_content(self._helpers, event, self._setting):
            self.delivered = True
            return self.release()
        return []

    def release(self) -> list[Any]:
        """Every event held back (at the end of a stream without content: an empty or thinking-only answer)."""
        held, self._held = self._held, []
        return held


class _RetryLine:
    """What the sync and async forms share: the loop of attempts (`_steps`), the attempt count, its
    context, and the decision after a failure. The forms only perform the steps, each its own way."""

    def __init__(self, open_stream: Callable[[], Any], attempts: int, backoff: Backoff | None) -> None:
        if whole_number("attempts=...", attempts, "a whole number of attempts >= 1") < 1:
            raise ValueError(f"attempts=... takes a whole number of attempts >= 1 (1: no retry), not {attempts!r}")
        if backoff is not None and not isinstance(backoff, Backoff):
            raise TypeError(f"backoff=... takes a streamscope.Backoff (or None), not {type(backoff).__name__}")
        self.open_stream = open_stream
        self.max_attempts = attempts
        self.backoff = backoff or Backoff()
        self.stream: Any = None
        self.call: Call | None = None
        """The current attempt's call (also when it failed before a stream existed)."""
        self.calls: list[Call] = []
        """Every attempt's call, in order: what the logical request cost is their sum (`cost`)."""
        self.attempts = 0
        self._counted = False
        self._retried_code = ""
        self._retry: tuple[Exception, float] | None = None
        """The failure of the attempt just run and the wait before the next, when it is retried."""

    def _steps(self) -> Generator[_Gate | float, None, None]:
        """The retry loop, written once for both forms: yields a gate for each attempt, which the
        form runs (opens the stream, passes its events through the gate) inside `_failing`, and
        after a failure worth retrying, the seconds to sleep before the next attempt. The form
        closes it (`closing`) when the logical request is over, however it ends."""
        try:
            while True:
                yield self._next_attempt()
                retry, self._retry = self._retry, None
                if retry is None:
                    return
                failed, delay = retry
                yield delay
                self.retrying(failed)
        finally:
            self.ended()

    def _next_attempt(self) -> _Gate:
        self.attempts += 1
        self.stream = None
        return _Gate()

    @contextmanager
    def _failing(self, gate: _Gate) -> Iterator[None]:
        """Around running an attempt: a failure worth retrying is kept for `_steps`, any other
        is the caller's, as raised."""
        try:
            yield
        except Exception as exc:
            delay = self.retry_delay(exc, gate.delivered)
            if delay is None:
                raise
            self._retry = exc, delay

    @contextmanager
    def _opening(self) -> Iterator[None]:
        """Around opening an attempt's stream: the attempt's number for its span, and its call kept."""
        with attempt(self.attempts), capture_calls() as calls:
            try:
                yield
            finally:
                self.call = calls[-1] if calls else None
                self.calls += calls

    @property
    def cost(self) -> float | None:
        """US dollars for every attempt so far (None: one was unpriced), retried ones included."""
        return cost_of(self.calls)

    def retry_delay(self, exc: Exception, delivered: bool) -> float | None:
        """Seconds to wait before the next attempt, or None: the failure is the caller's."""
        if delivered:
            return None
        failure = retry_decision(exc)
        if failure is None or not failure.retryable or self.attempts >= self.max_attempts:
            return None
        delay = self.backoff.delay(self.attempts, failure.retry_after)
        if delay > self.backoff.max_wait or not _fits(delay):  # a wait it cannot afford: fail now, not later
            return None
        self._retried_code = failure.code
        return delay

    def retrying(self, failed: Exception) -> None:
        """After the wait: the next attempt starts only if the deadline has not passed meanwhile
        (a busy machine's sleep can overrun it); else `failed`, the last attempt's failure, is the
        caller's. Counted as a retry only once it is one."""
        if not _fits(0.0):
            raise failed
        call = self.call
        if call is not None and call.outcomes is not None:
            call.outcomes.retried(call.recorder.request, self._retried_code)

    def ended(self) -> None:
        """The logical request is over (an answer, a failure that is the caller's, the caller
        gone): its attempts, counted once (`streamscope.attempts`)."""
        call = self.call
        if call is not None and call.outcomes is not None and self.attempts and not self._counted:
            self._counted = True
            call.outcomes.attempted(call.recorder.request, self.attempts)


@checked_class
class stream_with_retry(_RetryLine):
    """Events of the first attempt that gets content through; retried only before that.

    `open_stream()` returns a raw stream (`messages.create(stream=True)`) or an entered
    `messages.stream()` helper (`lambda: client.messages.stream(...).__enter__()`).
    `stream` is the current attempt's stream and `attempts` the attempts made so far.
    """

    def __init__(self, open_stream: Callable[[], Any], *, attempts: int = 3, backoff: Backoff | None = None,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        super().__init__(open_stream, attempts, backoff)
        self.sleep = sleep

    def __iter__(self) -> Iterator[Any]:
        with closing(self._steps()) as steps:
            for step in steps:
                if not isinstance(step, _Gate):
                    self.sleep(step)
                    continue
                gate, stream = step, None
                try:
                    with self._failing(gate):
                        with self._opening():
                            self.stream = stream = self.open_stream()
                        gate.watch(stream, self.call)
                        for event in stream:
                            if gate.delivered:
                                yield event
                            else:
                                yield from gate.hold(event)
                        yield from gate.release()
                finally:
                    _close(stream)  # after a failure, or the caller leaving early; a no-op once read

    def close(self) -> None:
        _close(self.stream)


@checked_class
class astream_with_retry(_RetryLine):
    """The async form: `open_stream()` is awaited (`client.messages.create(stream=True)`,
    or `lambda: client.messages.stream(...).__aenter__()`)."""

    def __init__(self, open_stream: Callable[[], Awaitable[Any]], *, attempts: int = 3,
                 backoff: Backoff | None = None) -> None:
        super().__init__(open_stream, attempts, backoff)

    async def __aiter__(self) -> AsyncIterator[Any]:
        with closing(self._steps()) as steps:
            for step in steps:
                if not isinstance(step, _Gate):
                    await asyncio.sleep(step)
                    continue
                gate, stream = step, None
                try:
                    with self._failing(gate):
                        with self._opening():
                            self.stream = stream = await self.open_stream()
                        gate.watch(stream, self.call)
                        async for event in stream:
                            if gate.delivered:
                                yield event
                            else:
                                for early in gate.hold(event):
                                    yield early
                        for early in gate.release():
                            yield early
                finally:
                    await _aclose(stream)

    async def close(self) -> None:
        await _aclose(self.stream)


def _close(stream: Any) -> None:
    """Close an attempt's stream, if it has one; a failure to close is no news to the caller."""
    if stream is not None:
        with suppress(Exception):
            stream.close()


async def _aclose(stream: Any) -> None:
    """The async form of `_close`. The close runs as its own task, shielded: a caller cancelled
    again while it waits (a task group's cancel scope does that at every await) still gets the
    provider connection closed, at once, rather than left to the garbage collector."""
    if stream is not None:
        with suppress(Exception):
            await asyncio.shield(asyncio.ensure_future(_close_quietly(stream)))


async def _close_quietly(stream: Any) -> None:
    with suppress(Exception):
        await stream.close()
