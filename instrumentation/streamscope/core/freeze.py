"""What the end of a stream means, decided once per stream when its record is frozen.

When the stream ended (its last event for a normal end or a dropped stream, the budget's firing
time for a budget's end), which budget ended it (none for a stream that ended normally; the
deadline for a caller that gave up after it), and whether it was complete. The recorder
(`StreamRecorder.finish`) asks this with its clocks and copies the rest into the `StreamRecord`.
"""

from __future__ import annotations

from typing import NamedTuple

from .record import End

DEADLINE_SLACK = 0.001
"""A caller that gives up within 1 ms of its deadline gave up *at* the deadline (timer granularity)."""


class Ended(NamedTuple):
    """What an end means."""

    at: float
    """When the stream ended (monotonic)."""
    budget: str | None
    """The budget that ended it, or None."""
    budget_at: float | None
    """When that budget fired (monotonic), or None."""
    completed: bool
    """The answer was whole."""


def ended(end: End, budget: str | None, now: float, *, fired: str | None, fired_at: float | None,
          last_event: float | None, t_headers: float | None, completed: bool, finish_reason: str | None,
          usage_final: bool, deadline: float | None) -> Ended:
    """The meaning of a stream's end `end` at `now` (`budget`: the one that ended it, if one did),
    from the recorder's clocks: the budget that fired while it ran (`fired`, `fired_at`), its last
    event, its headers, whether its final event came, its finish reason, whether its usage is
    final, and the caller's deadline."""
    # A stream that ended normally had no budget end it: one that fired on a read that
    # returned its data anyway (the rest of the answer was in the transport) came to nothing.
    if end == "done":
        fired, fired_at = None, None
    if fired is None and budget is not None:
        fired, fired_at = budget, now
    if end == "done":
        end_t = last_event if last_event is not None else now
    elif end == "abandoned":
        # Dropped without close(): it ended when the caller last touched it, not when collected.
        end_t = last_event if last_event is not None else (t_headers or now)
    else:
        end_t = now
    if fired_at is not None:
        end_t = fired_at if end_t > fired_at else end_t
    # A caller that let go after the provider's stop reason and final usage had the whole answer:
    # only the terminator was left unread (LiteLLM closes the body at Anthropic's `message_delta`).
    completed = completed or (end in ("closed", "abandoned") and fired is None
                              and finish_reason is not None and usage_final)
    if (fired is None and not completed and deadline is not None
            and end in ("closed", "abandoned", "cancelled") and end_t >= deadline - DEADLINE_SLACK):
        fired, fired_at = "deadline", end_t  # the caller gave up after its deadline expired
    return Ended(end_t, fired, fired_at, completed)
