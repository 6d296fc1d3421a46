"""The one exception streamscope raises into user code: a budget fired."""

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
