"""The immutable record of one streamed call: what the recorder saw, frozen when the stream ended.

Everything downstream (span attributes, the classifier, metrics) reads this record, never the
recorder, so what a span says and what the metrics count cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from opentelemetry.util.types import AttributeValue

FirstContent = Literal["text", "any"]
"""Which event ends the first-token wait: the first visible output, or any content delta."""


@dataclass(frozen=True, slots=True)
class CallBudgets:
    """The budgets in force for one call: a number is enforced, `None` is not."""

    first_token: float | None = None
    idle: float | None = None
    deadline: float | None = None
    first_content: FirstContent = "text"

    @property
    def enforced(self) -> bool:
        return self.first_token is not None or self.idle is not None or self.deadline is not None


End = Literal["done", "error", "closed", "abandoned", "cancelled"]
"""How the stream ended for the caller: read to its end, failed, closed by the caller,
dropped without closing (collected), or its task was cancelled."""


FinishReason = Literal["stop", "length", "tool_call", "content_filter"]
"""The GenAI conventions' finish reasons an adapter maps its provider's stop reasons to (a
reason with no mapping passes through as the provider wrote it)."""


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What is known when the request is sent, in the conventions' terms; what only one provider
    has goes in `attributes` under that provider's names (the adapter chooses them)."""

    provider: str
    """`gen_ai.provider.name`: `anthropic`, `aws.bedrock`, `openai`, ..."""
    model: str | None = None
    max_tokens: int | None = None
    thinking_budget: int | None = None
    """The reasoning allowance in tokens, where the request sets one (`budget_tokens`)."""
    route: str | None = None
    server_address: str | None = None
    server_port: int | None = None
    budgets: CallBudgets = CallBudgets()
    deadline: float | None = None
    """The caller's absolute `deadline()` on the monotonic clock, if any."""
    attempts: int | None = None
    attributes: tuple[tuple[str, AttributeValue], ...] = ()
    """Provider-specific request attributes (`anthropic.thinking.type`, ...), set on the span at its start."""
    request_id_key: str = "streamscope.request.id"
    """The span attribute the provider's request id goes under (`anthropic.request.id`, ...)."""
    prompt_chars: int | None = None
    """Characters of the prompt (messages, system prompt, tools), counted when it was sent: what the
    input is priced from if the provider never reports it. A count, never the text."""


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
    failure_code: str | None = None
    """For `end == "error"`: the failure code the exception or in-band error was given
    (`failures.code_of` says the code of any end)."""
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
    chunk_gaps: Sequence[float] = ()
    """One per content event after the first (`content_events - 1` of them): the provider's time
    from the previous content event to this one, on `max_gap`'s clock (the caller's time away and
    server tool runs left out). The recorder's list, handed over, not copied (the recorder starts another);
    the metrics writer, its last reader, sorts it in place once it has added them up in order."""
    server_tool_calls: int = 0
    server_tool_duration: float | None = None
    """Total seconds from each server tool use block's end to its result (or the stream's end)."""
    server_tool_runs: tuple[tuple[str | None, float, float], ...] = ()
    """Finished runs: (tool name, when the result arrived, how long the run took)."""

    pings: int = 0
    content_events: int = 0
    text_chars: int = 0
    hidden_chars: int = 0
    """Characters of thinking the stream carried (the user does not see them)."""

    response_id: str | None = None
    response_model: str | None = None
    finish_reason: str | None = None
    """Normalised (`FinishReason`, or the provider's own where none maps); None until the provider said."""
    stop_reason: str | None = None
    """The provider's own stop reason, as it sent it."""
    refusal: bool = False
    """The model refused (a refusal stop, a refusal in place of the answer)."""
    paused: bool = False
    """The provider paused a long turn; it continues only when the caller sends it back."""
    completed: bool = False
    """The provider's final event arrived."""
    usage_final: bool = False
    """The final usage arrived: output-side usage (output and reasoning tokens) is only reported
    from it. Input-side usage (input and cache tokens) is reported as soon as it is known (from the
    first event on Anthropic): it is billed even when the stream is cut later."""

    input_tokens: int | None = None
    """All input tokens, cached ones included (the conventions' `gen_ai.usage.input_tokens`)."""
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    """All cache writes, of which `cache_write_1h_tokens` were 1-hour writes (priced apart)."""
    cache_write_1h_tokens: int | None = None
    web_search_requests: int | None = None
    """Server-side web searches the provider reported (billed per request)."""

    http_status: int | None = None
    resend_count: int | None = None
    request_id: str | None = None

    attributes: tuple[tuple[str, AttributeValue], ...] = ()
    """Provider-specific response attributes (`openai.response.system_fingerprint`, ...), under the
    provider's names (the adapter chooses them)."""

    content: object | None = None
    """The captured prompt and answer (`content.CapturedContent`), only when the user opted in."""

    @property
    def normal(self) -> bool:
        """The stream delivered its final events and nothing fired: a normal end."""
        return self.completed and self.finish_reason is not None and self.budget_fired is None \
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
