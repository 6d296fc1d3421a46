"""The exceptions streamscope raises into user code: a budget fired, a breaker is open."""

from __future__ import annotations

from typing import Literal

BudgetName = Literal["first_token", "idle", "deadline"]


class StreamTimeout(TimeoutError):
    """A streamscope budget fired while the caller was reading a stream.

    A subclass of `TimeoutError`, so code that already handles timeouts keeps working.
    `budget` says which budget fired; `partial` is true when the first content event had
    already reached the caller (what arrived is a fragment, not an answer).
    """

    def __init__(self, budget: BudgetName, partial: bool, after: float | None = None) -> None:
        self.budget = budget
        self.partial = partial
        self.after = after
        when = f" after {after:.3f} s" if after is not None else ""
        super().__init__(f"streamscope {budget} budget fired{when} (partial={partial})")

    @property
    def code(self) -> str:
        """The failure code (`streamscope.failure.code`): a budget firing is always `upstream_timeout`."""
        return "upstream_timeout"

    def __reduce__(self) -> tuple[type[StreamTimeout], tuple[BudgetName, bool, float | None]]:
        # Picklable with its attributes (the default would call __init__ with the message alone).
        return (type(self), (self.budget, self.partial, self.after))


class CircuitOpen(ConnectionError):
    """The breaker for this provider and model (and route) is open: the call failed fast, and
    nothing was sent to the provider.

    A subclass of `ConnectionError`: to its caller the provider is as unreachable as when a
    connection is refused (code that already handles "cannot reach the service" keeps working),
    and it is not a `TimeoutError` (nothing was waited for). `code` is always `circuit_open`;
    `retry_after` is the seconds until the breaker lets its next probe call through (while a
    probe is in flight: its cool-down, the longest the probe can keep it open).
    """

    def __init__(self, retry_after: float, key: tuple[str, str | None, str | None] | None = None) -> None:
        self.retry_after = max(float(retry_after), 0.0)
        self.key = key
        where = f" for {key[0]} model {key[1]!r}" + (f" route {key[2]!r}" if key[2] is not None else "") if key else ""
        super().__init__(f"streamscope circuit breaker open{where}: failing fast, nothing sent "
                         f"(next probe in {self.retry_after:.3f} s)")

    @property
    def code(self) -> str:
        """The failure code (`streamscope.failure.code`): always `circuit_open`."""
        return "circuit_open"

    def __reduce__(self) -> tuple[type[CircuitOpen], tuple[float, tuple[str, str | None, str | None] | None]]:
        return (type(self), (self.retry_after, self.key))
