"""What the end of a stream means, decided once per stream when its record is frozen.

When the stream ended (its last event for a normal end or a dropped stream, the budget's firing
time for a budget's end), which budget ended it (none for a stream that ended normally; the
deadline for a caller that gave up after it), and whether it was complete (`ended`), and the
`StreamRecord` the exporters read, with the clocks relative to the stream's start (`frozen`, which
`StreamRecorder.finish` calls once).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .record import End, StreamRecord

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


def frozen(rec: Any, end: End, error_type: str | None, budget: str | None, now: float,
           code: str | None) -> StreamRecord:
    """The record of `rec` (a `StreamRecorder`: typed loosely, since the recorder imports this
    module), which ended at `now` as `end` (its last-event clocks final): what the end means
    (`ended`), and the clocks relative to the stream's start."""
    end_t, fired, fired_at, completed = ended(
        end, budget, now, fired=rec.fired, fired_at=rec.fired_at, last_event=rec.last_event,
        t_headers=rec.t_headers, completed=rec.completed, finish_reason=rec.finish_reason,
        usage_final=rec.usage_final, deadline=rec.request.deadline)
    t0 = rec.t0
    # Between consecutive content events only: a stall's trailing wait is the budget's
    # business (and the span's duration), and would skew the gaps healthy streams show.
    max_gap = rec.max_gap if rec.last_content is not None else None
    tool_time = rec.tool_time
    # The gaps go with the record; an event read after the end (the caller reading on after a
    # budget ended the record) appends to a fresh list, never to the record's.
    gaps = rec.gaps
    if gaps is not None:
        rec.gaps = []
    for _name, began in (rec.tools or {}).values():  # runs the stream ended during
        tool_time += max(end_t - began, 0.0)

    def rel(x: float | None) -> float | None:
        return None if x is None else max(x - t0, 0.0)

    return StreamRecord(
        request=rec.request,
        start_ns=rec.start_ns,
        duration=max(end_t - t0, 0.0),
        end=end,
        error_type=error_type,
        failure_code=code,
        budget_fired=fired,
        budget_fired_at=rel(fired_at),
        time_to_headers=rel(rec.t_headers),
        time_to_first_chunk=rel(rec.t_first_chunk),
        time_to_first_content=rel(rec.first_content),
        time_to_first_text=rel(rec.first_text),
        first_delta=rel(rec.first_delta),
        last_delta=rel(rec.last_delta),
        thinking_start=rel(rec.thinking_start),
        thinking_end=rel(rec.thinking_end),
        max_gap=max_gap,
        chunk_gaps=() if gaps is None else gaps,
        server_tool_calls=rec.tool_calls,
        server_tool_duration=tool_time if rec.tool_calls else None,
        server_tool_runs=tuple((name, rel(end) or 0.0, took) for name, end, took in rec.tool_runs or ()),
        pings=rec.pings,
        content_events=rec.content_events,
        text_chars=rec.text_chars,
        hidden_chars=rec.hidden_chars,
        response_id=rec.response_id,
        response_model=rec.response_model,
        finish_reason=rec.finish_reason,
        stop_reason=rec.stop_reason,
        refusal=rec.refusal,
        paused=rec.paused,
        completed=completed,
        usage_final=rec.usage_final,
        input_tokens=rec.input_tokens,
        output_tokens=rec.output_tokens,
        reasoning_tokens=rec.reasoning_tokens,
        cache_read_tokens=rec.cache_read,
        cache_write_tokens=rec.cache_write,
        cache_write_1h_tokens=rec.cache_write_1h,
        web_search_requests=rec.web_searches,
        http_status=rec.http_status,
        resend_count=rec.resend_count,
        request_id=rec.request_id,
        attributes=tuple(dict(rec.provider_facts).items()),
        content=rec.content,
    )
