"""The recorder (`core/recorder.py`) on its own: clocks, gaps and phases, with explicit timestamps.

The recorder is driven here as the stream hooks (`adapters/stainless/stream.py`) drive it: each
event is handed over with the moment it reached the caller, and the caller's own time away from
the stream (holding an event, or not yet asking for the next) is taken off the provider's clock
when it asks again (`asks`/`delivered` below: the clock rule). No sleeps, no network, no SDK.
Everything is read from what the recorder hands on when it ends: the immutable record, the span
attributes made from it, and where the budgets say the provider's silence ends.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from streamscope.budgets.enforcement import expiry
from streamscope.core.attributes import record_attributes
from streamscope.core.record import CallBudgets, End, FirstContent, RequestInfo, StreamRecord
from streamscope.core.recorder import FinishHook, StreamRecorder

T0 = 1000.0
"""The request was sent at this monotonic time: every record time is relative to it."""


def recorder(first_content: FirstContent = "text", *, deadline: float | None = None, idle: float | None = None,
             first_token: float | None = None, on_finish: FinishHook | None = None) -> StreamRecorder:
    budgets = CallBudgets(first_token=first_token, idle=idle, first_content=first_content)
    request = RequestInfo(provider="test", model="m", budgets=budgets,
                          deadline=None if deadline is None else T0 + deadline)
    return StreamRecorder(request, on_finish, t0=T0)


# -- the clock rule, as the stream hooks apply it ---------------------------------------------------


def asks(rec: StreamRecorder, t: float) -> None:
    """The caller asks for the next event at `t`: its time away since the last delivery is not
    the provider's silence (`asked`, the clock rule)."""
    rec.asked(T0 + t)


def delivered(rec: StreamRecorder, t: float) -> None:
    """The event observed at `t` is now in the caller's hands (the stream hooks write `held`)."""
    rec.held = T0 + t


class Caller:
    """A caller reading one stream: `read(at, arrive)` asks at `at` and gets an event at `arrive`
    (`arrive >= at`: a read never returns before it was made). Times are relative to `T0`."""

    def __init__(self, rec: StreamRecorder, headers: float | None = 0.0) -> None:
        self.rec = rec
        if headers is not None:
            rec.headers(T0 + headers, 200, "req_1", 0)

    def read(self, at: float, arrive: float, event: str, *args: object, **kwargs: object) -> None:
        assert arrive >= at
        asks(self.rec, at)
        getattr(self.rec, event)(T0 + arrive, *args, **kwargs)
        delivered(self.rec, arrive)

    def ping(self, t: float) -> None:
        """A keep-alive: seen below the caller (the SDK drops it), never delivered, no ask."""
        self.rec.pinged(T0 + t)

    def end(self, end: End = "done", at: float | None = None, error_type: str | None = None,
            budget: str | None = None) -> StreamRecord:
        record = self.rec.finish(end, error_type, budget, t=None if at is None else T0 + at)
        assert record is not None
        return record


def answer(rec: StreamRecorder, *, stop: tuple[str, str] = ("stop", "end_turn")) -> Caller:
    """started, a short answer at 1.0 / 1.5 / 2.0 read by a caller that asks at once, final usage, stop, final event."""
    c = Caller(rec, headers=0.2)
    c.read(0.2, 0.3, "started", "msg_1", "model-1")
    c.read(0.3, 1.0, "delta", 5)
    c.read(1.0, 1.5, "delta", 5)
    c.read(1.5, 2.0, "delta", 5)
    rec.usage(30, 12, final=True)
    c.read(2.0, 2.1, "stop", *stop)
    c.read(2.1, 2.2, "completed_at")
    return c


# -- phases: first chunk, first content, first text -------------------------------------------------


def test_times_are_relative_to_the_request_and_ordered() -> None:
    rec = recorder()
    record = answer(rec).end()
    assert record.time_to_headers == pytest.approx(0.2)
    assert record.time_to_first_chunk == pytest.approx(0.3)
    assert record.time_to_first_content == pytest.approx(1.0)
    assert record.time_to_first_text == pytest.approx(1.0)
    assert record.first_delta == pytest.approx(1.0) and record.last_delta == pytest.approx(2.0)
    assert record.duration == pytest.approx(2.2)  # the last event delivered, not when finish() ran
    assert record.content_events == 3 and record.text_chars == 15
    assert record.response_id == "msg_1" and record.response_model == "model-1"
    assert record.http_status == 200 and record.request_id == "req_1" and record.resend_count == 0
    assert record.completed and record.normal


def test_first_chunk_is_the_first_started_event_only() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 0.4, "started", "a", "m1")
    c.read(0.4, 0.9, "started", "b", "m2")  # a provider that repeats its id on every chunk
    record = c.end("closed", at=1.0)
    assert record.time_to_first_chunk == pytest.approx(0.4)
    assert record.response_id == "b"  # the latest word on the response's identity


@pytest.mark.parametrize(("setting", "first_content"), [("text", 3.0), ("any", 1.0)])
def test_under_text_thinking_is_not_first_content_but_under_any_it_is(setting: FirstContent,
                                                                      first_content: float) -> None:
    rec = recorder(setting)
    c = Caller(rec)
    c.read(0.0, 0.5, "started", "m", "m")
    c.read(0.5, 1.0, "delta", -1)  # thinking: content the user does not see
    c.read(1.0, 2.0, "delta", -1)
    c.read(2.0, 3.0, "delta", 4)  # the first visible output
    record = c.end("closed", at=3.5)
    assert record.time_to_first_content == pytest.approx(first_content)
    assert record.time_to_first_text == pytest.approx(3.0)
    assert record.first_delta == pytest.approx(1.0)
    assert record.content_events == 3 and record.text_chars == 4


@pytest.mark.parametrize(("setting", "expected"), [("text", None), ("any", 1.0)])
def test_an_empty_visible_delta_is_content_under_any_but_not_text(setting: FirstContent,
                                                                  expected: float | None) -> None:
    # The delta that opens a tool block carries no characters.
    rec = recorder(setting)
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 0)
    record = c.end("closed", at=2.0)
    assert record.time_to_first_content == (None if expected is None else pytest.approx(expected))
    assert record.time_to_first_text is None and record.text_chars == 0
    assert record.content_events == 1


def test_no_content_no_content_times() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 0.5, "started", "m", "m")
    record = c.end("closed", at=4.0)
    assert record.time_to_first_content is None and record.time_to_first_text is None
    assert record.first_delta is None and record.last_delta is None
    assert record.max_gap is None  # no content: no gap between content events at all
    assert record.content_events == 0


# -- gaps and the clock rule ------------------------------------------------------------------------


def test_max_gap_counts_only_the_time_the_caller_waited() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 0.5, "started", "m", "m")
    c.read(0.5, 1.0, "delta", 3)  # first content: no gap before it (that is the first-token wait)
    c.read(3.0, 3.5, "delta", 3)  # the caller held the previous event for 2 s: the provider was silent 0.5 s
    c.read(3.5, 4.5, "delta", 3)  # the caller asked at once: 1.0 s of silence
    c.read(10.0, 10.0, "delta", 3)  # arrived while the caller was away (buffered): no wait at all
    record = c.end()
    assert record.max_gap == pytest.approx(1.0)
    assert record.duration == pytest.approx(10.0)


def test_a_caller_that_asks_at_once_sees_the_providers_whole_gaps() -> None:
    """The same stream read by a caller that always asks at once: the gaps are the provider's."""
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 3)
    c.read(1.0, 3.5, "delta", 3)
    c.read(3.5, 4.5, "delta", 3)
    assert c.end().max_gap == pytest.approx(2.5)


def test_a_gap_partly_spent_by_the_caller_counts_only_its_waiting_part() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 1)
    c.read(1.75, 2.0, "delta", 1)  # held 0.75 s, then waited 0.25 s
    assert c.end().max_gap == pytest.approx(0.25)


def test_the_gap_before_first_content_is_not_a_gap() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 9.0, "delta", 1)  # a slow first token: the first-token budget's business
    c.read(9.0, 9.5, "delta", 1)
    assert c.end().max_gap == pytest.approx(0.5)


def test_a_trailing_wait_is_not_a_gap() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 1)
    c.read(1.0, 1.5, "delta", 1)
    record = c.end("error", at=30.0, error_type="RemoteProtocolError")  # silent 28.5 s, then the connection dropped
    assert record.max_gap == pytest.approx(0.5)
    assert record.duration == pytest.approx(30.0)  # the failure's own moment


def test_one_content_event_has_no_silence_between_content() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 1)
    assert c.end().max_gap == 0.0


def test_invisible_deltas_after_the_first_content_are_content_for_gaps() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 2)
    c.read(1.0, 2.0, "delta", -1)  # interleaved thinking, after the answer began
    c.read(2.0, 4.0, "delta", 2)
    record = c.end()
    assert record.max_gap == pytest.approx(2.0)  # not 3.0: the thinking delta closed a gap
    assert record.content_events == 3 and record.text_chars == 4


# -- pings ------------------------------------------------------------------------------------------


def test_pings_are_counted_never_content_and_never_reset_a_gap() -> None:
    rec = recorder("any")
    c = Caller(rec)
    c.ping(0.5)  # before any content: not the first content, even under "any"
    c.read(0.0, 1.0, "delta", 2)
    c.ping(1.5)
    c.ping(2.5)
    c.read(1.0, 3.0, "delta", 2)
    record = c.end()
    assert record.pings == 3
    assert record.content_events == 2
    assert record.time_to_first_content == pytest.approx(1.0)
    assert record.max_gap == pytest.approx(2.0)  # the pings did not shorten the silence


def test_pings_do_not_move_a_budgets_expiry() -> None:
    rec = recorder(idle=5.0, first_token=3.0)
    c = Caller(rec)
    assert expiry(rec) == (pytest.approx(T0 + 3.0), "first_token")
    c.ping(2.0)
    assert expiry(rec) == (pytest.approx(T0 + 3.0), "first_token")
    c.read(0.0, 2.5, "delta", 1)
    assert expiry(rec) == (pytest.approx(T0 + 7.5), "idle")  # from the first content on, idle
    c.ping(4.0)
    assert expiry(rec) == (pytest.approx(T0 + 7.5), "idle")
    asks(rec, 6.0)  # the caller held the event 3.5 s: the provider's silence starts when it asks
    assert expiry(rec) == (pytest.approx(T0 + 11.0), "idle")


# -- server-side tool runs --------------------------------------------------------------------------


def test_a_server_tool_run_is_never_part_of_a_gap() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 4)
    c.read(1.0, 2.0, "tool_run_started", "srvtoolu_1", "web_search")  # 1.0 s of silence before it
    c.ping(6.0)
    c.ping(11.0)
    c.read(2.0, 12.0, "tool_run_ended", "srvtoolu_1")
    c.read(12.0, 12.5, "delta", 4)  # the gap resumes where it stood: 1.0 + 0.5
    c.read(12.5, 13.0, "delta", 4)
    record = c.end()
    assert record.max_gap == pytest.approx(1.5)
    assert record.server_tool_calls == 1
    assert record.server_tool_duration == pytest.approx(10.0)
    assert record.server_tool_runs == ((("web_search", pytest.approx(12.0), pytest.approx(10.0))),)
    assert record.pings == 2 and record.content_events == 3


def test_during_a_tool_run_pings_are_liveness_for_the_budgets() -> None:
    rec = recorder(idle=5.0)
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 1)
    c.read(1.0, 2.0, "tool_run_started", "t1", "code_execution")
    assert expiry(rec) == (pytest.approx(T0 + 7.0), "idle")  # silence counts from the run's start
    c.ping(6.0)
    assert expiry(rec) == (pytest.approx(T0 + 11.0), "idle")  # the server is working
    c.read(2.0, 9.0, "tool_run_ended", "t1")
    assert expiry(rec) == (pytest.approx(T0 + 13.0), "idle")  # 1.0 s already used before the run


def test_concurrent_runs_and_a_run_the_stream_ended_during() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 1)
    c.read(1.0, 2.0, "tool_run_started", "a", "web_search")
    c.read(2.0, 3.0, "tool_run_started", "b", "web_fetch")
    c.read(3.0, 5.0, "tool_run_ended", "b")  # results may come in any order
    c.read(5.0, 7.0, "tool_run_ended", "a")
    c.read(7.0, 8.0, "tool_run_started", "c", "web_search")
    record = c.end("error", at=10.0, error_type="RemoteProtocolError")  # the connection dropped mid-run
    assert record.server_tool_calls == 3
    assert [(name, round(ended, 6), round(took, 6)) for name, ended, took in record.server_tool_runs] == [
        ("web_fetch", 5.0, 2.0), ("web_search", 7.0, 5.0)]
    assert record.server_tool_duration == pytest.approx(2.0 + 5.0 + 2.0)  # the unfinished run until the end
    assert record.max_gap == 0.0  # a single content event; the runs are no gap


def test_a_result_without_a_run_is_ignored() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 1)
    c.read(1.0, 5.0, "tool_run_ended", "nobody")
    c.read(5.0, 6.0, "delta", 1)
    record = c.end()
    assert record.server_tool_calls == 0 and record.server_tool_duration is None
    assert record.server_tool_runs == ()
    assert record.max_gap == pytest.approx(5.0)  # nothing ran: the whole silence is a gap


# -- thinking ---------------------------------------------------------------------------------------


def test_thinking_start_is_the_first_and_end_is_the_last_before_the_answer() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 0.5, "reasoning_started")
    c.read(0.5, 1.0, "delta", -1)
    c.read(1.0, 2.0, "reasoning_ended")
    c.read(2.0, 2.5, "reasoning_started")  # a second thinking block: the phase began with the first
    c.read(2.5, 3.0, "reasoning_ended")
    c.read(3.0, 4.0, "delta", 5)  # the answer
    c.read(4.0, 5.0, "reasoning_started")  # interleaved thinking after the answer began
    c.read(5.0, 6.0, "reasoning_ended")  # changes nothing
    record = c.end()
    assert record.thinking_start == pytest.approx(0.5)
    assert record.thinking_end == pytest.approx(3.0)
    assert record.thinking_duration == pytest.approx(2.5)
    assert record.thinking_start <= record.thinking_end <= record.time_to_first_text


def test_reasoning_that_arrives_whole_began_at_the_previous_event() -> None:
    """A redacted thinking block: the adapter says its reasoning began when the previous event
    reached the caller, which may be before the block's own event."""
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 0.5, "started", "m", "m")
    asks(rec, 0.5)
    rec.reasoning_started(rec.held)
    rec.reasoning_ended(T0 + 4.0)
    delivered(rec, 4.0)
    record = c.end("closed", at=5.0)
    assert record.thinking_start == pytest.approx(0.5) and record.thinking_end == pytest.approx(4.0)


def test_thinking_still_running_has_a_start_and_no_end() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 0.5, "reasoning_started")
    c.read(0.5, 1.0, "delta", -1)
    record = c.end("closed", at=9.0)
    assert record.thinking_start == pytest.approx(0.5) and record.thinking_end is None
    assert record.thinking_duration is None


# -- usage -------------------------------------------------------------------------------------------


def test_the_placeholder_output_is_never_reported() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 0.5, "started", "m", "m")
    rec.usage(25, 1, final=False)  # message_start's usage: its output count is a placeholder
    c.read(0.5, 1.0, "delta", 100)
    c.read(1.0, 3.0, "delta", 100)
    record = c.end("error", at=4.0, error_type="overloaded_error")
    assert not record.usage_final
    assert record.decode_rate is None  # never a rate from the placeholder
    attrs = record_attributes(record)
    assert "gen_ai.usage.output_tokens" not in attrs
    assert "streamscope.decode_rate" not in attrs
    assert attrs["gen_ai.usage.input_tokens"] == 25  # input-side usage is known, and billed, from the start


def test_the_final_usage_overrides_and_keeps_what_it_does_not_restate() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 0.5, "started", "m", "m")
    rec.usage(125, 1, None, 100, 0, final=False)
    c.read(0.5, 1.0, "delta", 10)
    c.read(1.0, 3.0, "delta", 10)
    rec.usage(None, 80, 30, None, None, final=True)  # restates output and reasoning only
    c.read(3.0, 3.1, "stop", "stop", "end_turn")
    c.read(3.1, 3.2, "completed_at")
    record = c.end()
    assert record.usage_final
    assert (record.input_tokens, record.output_tokens, record.reasoning_tokens) == (125, 80, 30)
    assert (record.cache_read_tokens, record.cache_write_tokens) == (100, 0)
    assert record.decode_rate == pytest.approx(80 / 2.0)  # first to last content delta
    attrs = record_attributes(record)
    assert attrs["gen_ai.usage.output_tokens"] == 80
    assert attrs["gen_ai.usage.input_tokens"] == 125
    assert attrs["gen_ai.usage.reasoning.output_tokens"] == 30


def test_a_placeholder_after_the_final_usage_does_not_replace_it() -> None:
    rec = recorder()
    rec.usage(10, 80, final=True)
    rec.usage(10, 1, final=False)  # a repeated start event (malformed, or a proxy's)
    record = rec.finish("done", t=T0 + 1.0)
    assert record is not None
    assert record_attributes(record).get("gen_ai.usage.output_tokens") == 80


# -- stop reasons -----------------------------------------------------------------------------------


def test_stop_reasons_normalised_and_raw() -> None:
    rec = recorder()
    record = answer(rec, stop=("length", "max_tokens")).end()
    assert (record.finish_reason, record.stop_reason) == ("length", "max_tokens")
    assert not record.refusal and not record.paused


def test_a_refusal_is_sticky_and_a_stop_without_a_reason_keeps_the_reason() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 3)
    c.read(1.0, 1.5, "stop", None, None, refusal=True)  # a refusal delta: no finish reason yet
    c.read(1.5, 2.0, "stop", "content_filter", "refusal")
    c.read(2.0, 2.5, "stop", None, None)  # says nothing more
    c.read(2.5, 3.0, "completed_at")
    record = c.end()
    assert record.refusal
    assert (record.finish_reason, record.stop_reason) == ("content_filter", "refusal")


def test_a_refusal_without_a_finish_reason_is_no_finish_reason() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 1.0, "stop", None, None, refusal=True)
    record = c.end("closed", at=2.0)
    assert record.refusal and record.finish_reason is None and record.stop_reason is None


def test_a_pause_comes_with_its_finish_reason() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 1.0, "stop", "stop", "pause_turn", paused=True)
    c.read(1.0, 1.1, "completed_at")
    record = c.end()
    assert record.paused and record.stop_reason == "pause_turn" and record.normal


def test_a_stream_without_its_final_event_is_not_normal() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 3)
    c.read(1.0, 1.1, "stop", "stop", "end_turn")
    record = c.end()  # the body ended cleanly, without the final event
    assert not record.completed and not record.normal
    assert record_attributes(record)["error.type"] == "incomplete_stream"


# -- how it ends ------------------------------------------------------------------------------------


def test_finish_counts_once_and_hands_the_record_on_once() -> None:
    handed: list[StreamRecord] = []
    rec = recorder(on_finish=lambda r, record: handed.append(record))
    c = answer(rec)
    first = c.end()
    assert rec.finished and rec.record is first
    assert rec.finish("error", "RemoteProtocolError", "idle", t=T0 + 50.0) is None
    assert rec.finish("closed") is None
    assert handed == [first] and rec.record is first
    assert first.end == "done" and first.budget_fired is None and first.error_type is None
    assert not rec.fire("idle", T0 + 60.0)  # nothing fires on an ended stream


class CountingWatch:
    """A budget watch (`recorder.Watch`) that counts what the recorder tells it."""

    def __init__(self) -> None:
        self.rearmed = 0
        self.stopped = 0

    def rearm(self) -> None:
        self.rearmed += 1

    def stop(self) -> None:
        self.stopped += 1


def test_the_watch_hears_when_an_expiry_may_come_sooner_and_is_stopped_once() -> None:
    rec = recorder(idle=2.0, first_token=5.0)
    watch = CountingWatch()
    rec.watch = watch
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", -1)  # thinking, under "text": still the first-token wait
    assert watch.rearmed == 0
    c.read(1.0, 2.0, "delta", 3)  # the first content: idle replaces first-token
    assert watch.rearmed == 1
    c.read(2.0, 3.0, "delta", 3)  # the steady state tells nobody
    c.read(3.0, 4.0, "tool_run_started", "t1", "web_search")
    assert watch.rearmed == 1
    c.read(4.0, 9.0, "tool_run_ended", "t1")  # the gap resumes where it stood: it may expire sooner
    assert watch.rearmed == 2
    c.read(9.0, 9.5, "failed", "overloaded_error")  # an in-band error ends the stream
    rec.finish("closed", t=T0 + 10.0)
    rec.failed(T0 + 11.0, "api_error")
    assert watch.stopped == 1


def test_events_after_the_end_change_nothing_in_the_record() -> None:
    rec = recorder()
    c = answer(rec)
    record = c.end()
    before = dataclasses.replace(record)
    c.read(3.0, 4.0, "delta", 50)
    rec.usage(1, 2, final=True)
    rec.stop(T0 + 5.0, "length", "max_tokens")
    assert rec.record is record and record == before


def test_the_record_is_immutable() -> None:
    record = answer(recorder()).end()
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.max_gap = 0.0  # type: ignore[misc]  # frozen: the point of the test
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.duration = -1.0  # type: ignore[misc]  # frozen: the point of the test


def test_failed_in_the_stream_ends_it_as_that_error() -> None:
    handed: list[StreamRecord] = []
    rec = recorder(on_finish=lambda r, record: handed.append(record))
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 3)
    c.read(1.0, 2.0, "failed", "overloaded_error")
    assert rec.finished and len(handed) == 1
    record = handed[0]
    assert (record.end, record.error_type) == ("error", "overloaded_error")
    assert record.duration == pytest.approx(2.0)
    rec.failed(T0 + 3.0, "api_error")  # a second error event: the first end stands
    assert len(handed) == 1 and rec.record is record


def test_a_fired_budget_ends_the_record_at_its_firing() -> None:
    rec = recorder(idle=2.0)
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 3)
    assert rec.fire("idle", T0 + 3.0)
    assert not rec.fire("deadline", T0 + 3.5)  # one firing per stream
    record = c.end("error", at=3.2, budget="idle")  # the reader noticed a little later
    assert (record.budget_fired, record.budget_fired_at) == ("idle", pytest.approx(3.0))
    assert record.duration == pytest.approx(3.0)


def test_a_firing_that_came_to_nothing_is_dropped_on_a_normal_end() -> None:
    rec = recorder(idle=2.0)
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 3)
    rec.fire("idle", T0 + 3.0)  # the read returned its data anyway
    c.read(1.0, 3.1, "stop", "stop", "end_turn")
    c.read(3.1, 3.2, "completed_at")
    record = c.end()
    assert record.budget_fired is None and record.budget_fired_at is None and record.normal


@pytest.mark.parametrize(("end_at", "fired"), [(4.0, None), (5.0, "deadline"), (7.0, "deadline")])
def test_a_caller_that_gives_up_after_its_deadline_is_the_deadline_firing(end_at: float, fired: str | None) -> None:
    rec = recorder(deadline=5.0)
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 3)
    record = c.end("closed", at=end_at)
    assert record.budget_fired == fired
    assert record.duration == pytest.approx(end_at)
    assert record_attributes(record)["error.type"] == ("timeout" if fired else "cancelled")


def test_an_abandoned_stream_ends_at_its_last_event_not_at_collection() -> None:
    rec = recorder()
    c = Caller(rec)
    c.read(0.0, 1.0, "delta", 3)
    c.read(1.0, 2.5, "delta", 3)
    record = c.end("abandoned", at=600.0)
    assert record.duration == pytest.approx(2.5)
    assert record.end == "abandoned"


def test_a_normal_end_is_the_last_event_delivered() -> None:
    rec = recorder()
    record = answer(rec).end("done", at=99.0)  # finish() ran late (the caller's loop ended later)
    assert record.duration == pytest.approx(2.2)


def test_times_are_never_negative() -> None:
    """A time before the request was sent (a clock read racing `t0`) is clamped, not negative."""
    rec = recorder("any")
    rec.started(T0 - 0.5, "m", "m")
    rec.reasoning_started(T0 - 0.25)
    rec.delta(T0 - 0.1, 3)
    record = rec.finish("closed", t=T0 - 0.05)
    assert record is not None
    times = [record.time_to_first_chunk, record.time_to_first_content, record.time_to_first_text,
             record.thinking_start, record.first_delta, record.last_delta, record.max_gap]
    assert all(t is not None and t >= 0 for t in times), times
    assert record.duration >= 0


def test_the_record_times_are_ordered_in_a_realistic_stream() -> None:
    rec = recorder("any")
    c = Caller(rec, headers=0.3)
    c.read(0.3, 0.4, "started", "m", "m")
    rec.usage(10, 1, final=False)
    c.read(0.4, 0.6, "reasoning_started")
    c.read(0.6, 0.7, "delta", -1)
    c.read(0.7, 4.0, "delta", -1)
    c.read(4.0, 4.1, "reasoning_ended")
    c.read(4.1, 4.3, "delta", 0)
    c.read(4.3, 4.5, "delta", 7)
    c.ping(5.0)
    c.read(4.5, 5.5, "delta", 7)
    rec.usage(None, 42, 30, final=True)
    c.read(5.5, 5.6, "stop", "stop", "end_turn")
    c.read(5.6, 5.7, "completed_at")
    record = c.end()
    chain = [0.0, record.time_to_headers, record.time_to_first_chunk, record.thinking_start,
             record.time_to_first_content, record.thinking_end, record.time_to_first_text, record.last_delta,
             record.duration]
    assert all(a is not None for a in chain)
    assert chain == sorted(chain), chain
    assert record.first_delta == record.time_to_first_content  # under "any"
    assert record.max_gap is not None and 0 <= record.max_gap <= record.duration
    assert math.isclose(record.max_gap, 3.3)  # the thinking's own silence, under "any"
