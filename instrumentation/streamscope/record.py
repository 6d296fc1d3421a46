"""The immutable record of one streamed call: what the recorder saw, frozen when the stream ended.

Everything downstream (span attributes, the classifier, metrics) reads this record, never the
recorder, so what a span says and what the metrics count cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .budgets import CallBudgets

End = Literal["done", "error", "closed", "abandoned", "cancelled"]
"""How the stream ended for the caller: read to its end, failed, closed by the caller,
dropped without closing (collected), or its task was cancelled."""


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What is known when the request is sent."""

    model: str | None = None
    max_tokens: int | None = None
    thinking_type: str | None = None
    thinking_budget: int | None = None
    service_tier: str | None = None
    route: str | None = None
    provider: str = "anthropic"
    server_address: str | None = None
    server_port: int | None = None
    budgets: CallBudgets = CallBudgets()
    deadline: float | None = None
    """The caller's absolute `deadline()` on the monotonic clock, if any."""
    attempts: int | None = None


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One streamed call. Times are seconds since the request was sent; None = never happened."""

    request: RequestInfo
    start_ns: int
    """Wall-clock start (ns since the epoch), for the span."""
    duration: float
    """Until the last event delivered to the caller, or the moment it closed/cancelled."""
    end: End
    error_type: str | None = None
    """For `end == "error"`: the provider's error type or the exception's class name."""
    budget_fired: str | None = None
    """`first_token`, `idle`, `deadline` or `read_timeout`; also `deadline` when the caller
    gave up after its `deadline()` had expired."""
    budget_fired_at: float | None = None

    time_to_headers: float | None = None
    time_to_first_chunk: float | None = None
    time_to_first_content: float | None = None
    time_to_first_text: float | None = None
    first_delta: float | None = None
    last_delta: float | None = None
    thinking_start: float | None = None
    thinking_end: float | None = None
    max_gap: float | None = None
    """The provider's largest silence between consecutive content events while the caller
    waited (the caller's own time between reads and server tool runs are not in it)."""
    server_tool_calls: int = 0
    server_tool_duration: float | None = None
    """Total seconds from each server tool use block's end to its result (or the stream's end)."""
    server_tool_runs: tuple[tuple[str | None, float, float], ...] = ()
    """Finished runs: (tool name, when the result arrived, how long the run took)."""

    pings: int = 0
    content_events: int = 0
    text_chars: int = 0

    response_id: str | None = None
    response_model: str | None = None
    stop_reason: str | None = None
    message_stopped: bool = False
    usage_final: bool = False
    """The final usage arrived (`message_delta`): usage is only reported from it."""

    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None

    http_status: int | None = None
    resend_count: int | None = None
    request_id: str | None = None

    content: object | None = None
    """The captured prompt and answer (`content.CapturedContent`), only when the user opted in."""

    @property
    def normal(self) -> bool:
        """The stream delivered its final events and nothing fired: a normal end."""
        return self.message_stopped and self.stop_reason is not None and self.budget_fired is None \
            and self.end != "error"

    @property
    def decode_rate(self) -> float | None:
        """Output tokens per second of generation (first to last content delta); only from the
        final usage (before it, `output_tokens` is message_start's placeholder)."""
        if not self.usage_final or not self.output_tokens or self.first_delta is None or self.last_delta is None:
            return None
        span = self.last_delta - self.first_delta
        return self.output_tokens / span if span > 0 else None

    @property
    def thinking_duration(self) -> float | None:
        if self.thinking_start is None or self.thinking_end is None:
            return None
        return max(self.thinking_end - self.thinking_start, 0.0)
