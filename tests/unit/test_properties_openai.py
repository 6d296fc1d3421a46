"""Bad input, property-based, for the OpenAI adapter (`adapters/openai/events.py`): arbitrary
Chat Completions chunks and Responses events (unknown types, missing and null fields, absurd
numbers, junk where a model or a list belongs, repeated and early terminal events) through the
adapter's per-event path, the recorder and the classifier. Nothing escapes, nothing counts as
streamscope's own failure, the record's times are non-negative and ordered, the classifier
labels every record, and a stream that never delivered its final event is never verified.

Events are the SDK's own classes, built with `model_construct` (what the SDK itself does with a
server's JSON: no validation), so the adapter's `type()` tests see real chunks; fields are
dropped from a model's `__dict__` to make them missing. Three paths: `observe` with an explicit
clock, the shared stream reader (`StreamHooks.read`: the fast path and the clock rule) with a
caller that holds events, breaks off or meets a transport error, and well-formed streams cut
before their final event.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import (
    Choice,
    ChoiceDelta,
    ChoiceDeltaToolCall,
    ChoiceDeltaToolCallFunction,
)
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseErrorEvent,
    ResponseFailedEvent,
    ResponseFunctionCallArgumentsDeltaEvent,
    ResponseIncompleteEvent,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseReasoningSummaryTextDeltaEvent,
    ResponseRefusalDeltaEvent,
    ResponseTextDeltaEvent,
    ResponseUsage,
)
from opentelemetry.trace import NoOpTracer

import streamscope.adapters.stainless.stream as stream_hooks
import streamscope.core.guard as internal
from streamscope.adapters import openai as openai_adapter
from streamscope.adapters.openai import events
from streamscope.adapters.stainless.stream import StreamHooks
from streamscope.budgets.table import Budgets, BudgetTable
from streamscope.core.attributes import record_attributes
from streamscope.core.classifier import LABELS, classify
from streamscope.core.record import StreamRecord
from streamscope.pipeline import Pipeline, finished_attributes

events.load()  # the SDK's classes, for the adapter's `type()` tests (done at install in real use)
HOOKS = StreamHooks(openai_adapter.spec(), None)  # type: ignore[arg-type]  # `read` needs no layers
T0 = 100.0
TERMINAL = ("response.completed", "response.incomplete")

# -- the pieces ---------------------------------------------------------------------------------------

absurd_ints = st.one_of(st.none(), st.integers(min_value=-(2**70), max_value=2**70), st.just(True),
                        st.floats(allow_nan=True), st.text(max_size=3))
some_text = st.text(min_size=1, max_size=12)
maybe_text = st.one_of(some_text, some_text, st.none(), st.text(max_size=12), st.integers(),
                       st.lists(st.text(max_size=3), max_size=2))
junk = st.one_of(st.none(), st.integers(), st.text(max_size=4), st.just([]), st.just({}))


def ns(**fields: Any) -> SimpleNamespace:
    return SimpleNamespace(**fields)


def without(model: Any, drop: list[str]) -> Any:
    """The model with these fields missing altogether (an attribute read raises)."""
    for name in drop:
        model.__dict__.pop(name, None)
    return model


def droppable(*names: str) -> st.SearchStrategy[list[str]]:
    """Fields to remove: mostly none, sometimes one or two."""
    return st.one_of(st.just([]), st.just([]), st.lists(st.sampled_from(names), min_size=1, max_size=2))


# Chat Completions
finish_reasons = st.one_of(st.none(), st.sampled_from(["stop", "length", "tool_calls", "function_call",
                                                       "content_filter", "whatever", ""]), st.integers())
tool_call = st.one_of(
    st.builds(lambda args, name, drop: without(ChoiceDeltaToolCall.model_construct(
        index=0, id="call_1", type="function",
        function=ChoiceDeltaToolCallFunction.model_construct(arguments=args, name=name)), drop),
        maybe_text, maybe_text, droppable("function")),
    st.builds(lambda: ChoiceDeltaToolCall.model_construct(index=0, function=None)),
    junk,
)
delta = st.one_of(
    st.builds(lambda content, refusal, calls, reasoning, key, drop: without(ChoiceDelta.model_construct(
        content=content, refusal=refusal, tool_calls=calls, role="assistant",
        **({} if reasoning is None else {key: reasoning})), drop),
        maybe_text, st.one_of(st.none(), maybe_text), st.one_of(st.none(), junk, st.lists(tool_call, max_size=3)),
        st.one_of(st.none(), maybe_text), st.sampled_from(["reasoning_content", "reasoning", "other_extra"]),
        droppable("content", "refusal", "tool_calls")),
    junk,
)
choice = st.one_of(
    st.builds(lambda d, f, drop: without(Choice.model_construct(index=0, delta=d, finish_reason=f), drop),
              delta, finish_reasons, droppable("delta", "finish_reason")),
    junk,
)
chat_usage = st.one_of(
    junk,
    st.builds(lambda p, c, cached, reasoning, drop: without(CompletionUsage.model_construct(
        prompt_tokens=p, completion_tokens=c, total_tokens=p,
        prompt_tokens_details=ns(cached_tokens=cached) if cached != "none" else None,
        completion_tokens_details=ns(reasoning_tokens=reasoning)), drop),
        absurd_ints, absurd_ints, st.one_of(absurd_ints, st.just("none")), absurd_ints,
        droppable("prompt_tokens_details", "completion_tokens_details", "prompt_tokens")),
)
chunk = st.builds(
    lambda choices, usage, ident, tier, drop: without(ChatCompletionChunk.model_construct(
        id=ident, choices=choices, created=0, model=ident, object="chat.completion.chunk", service_tier=tier,
        system_fingerprint=ident, usage=usage), drop),
    st.one_of(st.lists(choice, min_size=1, max_size=1), st.lists(choice, max_size=3), junk),
    st.one_of(st.none(), st.none(), chat_usage), maybe_text, maybe_text,
    droppable("choices", "usage", "id", "model", "service_tier", "system_fingerprint"),
)

# Responses
item_types = st.sampled_from(["reasoning", "message", "function_call", "custom_tool_call", "web_search_call",
                              "file_search_call", "code_interpreter_call", "image_generation_call", "mcp_call",
                              "brand_new_item", None, 7])
item_ids = st.one_of(st.sampled_from(["ws_1", "ws_2"]), st.none(), st.integers())
item = st.one_of(st.builds(lambda kind, ident: ns(type=kind, id=ident), item_types, item_ids),
                 st.builds(lambda kind, ident: ns(type=kind, id=ident), item_types, item_ids), junk)
responses_usage = st.one_of(
    st.builds(lambda i, o, cached, write, reasoning, drop: without(ResponseUsage.model_construct(
        input_tokens=i, output_tokens=o, total_tokens=i,
        input_tokens_details=ns(cached_tokens=cached, cache_write_tokens=write),
        output_tokens_details=ns(reasoning_tokens=reasoning)), drop),
        absurd_ints, absurd_ints, absurd_ints, absurd_ints, absurd_ints,
        droppable("input_tokens_details", "output_tokens_details", "output_tokens")),
    junk,
)
response = st.one_of(
    st.builds(lambda ident, usage, tier, output, reason, code, drop: without(Response.model_construct(
        id=ident, model=ident, usage=usage, service_tier=tier, output=output,
        incomplete_details=None if reason == "none" else ns(reason=reason),
        error=None if code == "none" else ns(code=code)), drop),
        maybe_text, st.one_of(st.none(), responses_usage), maybe_text, st.one_of(junk, st.lists(item, max_size=3)),
        st.one_of(st.just("none"), maybe_text, st.sampled_from(["max_output_tokens", "content_filter"])),
        st.one_of(st.just("none"), maybe_text, st.sampled_from(["server_error", "rate_limit_exceeded"])),
        droppable("usage", "output", "incomplete_details", "error", "id")),
    junk,
)
response_types = st.sampled_from([
    *events.RESPONSES, "response.in_progress", "response.output_text.done", "response.web_search_call.searching",
    "response.content_part.added", "response.brand_new_event", "", None, 7])
classes = st.sampled_from([ResponseCreatedEvent, ResponseOutputItemAddedEvent, ResponseOutputItemDoneEvent,
                           ResponseTextDeltaEvent, ResponseReasoningSummaryTextDeltaEvent, ResponseRefusalDeltaEvent,
                           ResponseFunctionCallArgumentsDeltaEvent, ResponseCompletedEvent, ResponseIncompleteEvent,
                           ResponseFailedEvent, ResponseErrorEvent])
responses_event = st.builds(
    # Any type in any class: the SDK parses an unknown event into whichever model fits.
    lambda cls, kind, resp, it, d, code, drop: without(cls.model_construct(
        type=kind, response=resp, item=it, delta=d, code=code, item_id="i", output_index=0, content_index=0,
        sequence_number=0), drop),
    classes, response_types, response, item, maybe_text, maybe_text,
    droppable("type", "response", "item", "delta", "code"),
)
realistic = st.deferred(lambda: st.sampled_from(REALISTIC))  # well-formed events, from the pool at the end
event = st.one_of(realistic, realistic, chunk, responses_event, junk, st.builds(ns))  # and no event at all
steps = st.lists(st.tuples(st.floats(min_value=0, max_value=5, allow_nan=False), event), max_size=30)


# -- what every record must satisfy -------------------------------------------------------------------


def may_be_final(ev: Any) -> bool:
    """Generously, whether `ev` could be the stream's final event: a chat chunk with any finish
    reason, or a Responses terminal event. A stream with none of these must never be verified."""
    if type(ev) is ChatCompletionChunk:
        choices = ev.__dict__.get("choices")
        return isinstance(choices, list) and any(
            getattr(c, "__dict__", {}).get("finish_reason") is not None for c in choices)
    return getattr(ev, "type", None) in TERMINAL


def check(record: StreamRecord, attributes: dict[str, Any], final_seen: bool) -> None:
    times = [record.time_to_headers, record.time_to_first_chunk, record.time_to_first_content,
             record.time_to_first_text, record.thinking_start, record.thinking_end, record.max_gap,
             record.first_delta, record.last_delta, record.budget_fired_at]
    assert record.duration >= 0
    assert all(t is None or 0 <= t <= record.duration + 1e-9 for t in times), (times, record.duration)
    if record.first_delta is not None:
        assert record.last_delta is not None and record.first_delta <= record.last_delta
    if record.time_to_first_text is not None:
        assert record.time_to_first_content is not None  # visible output is content under either setting
        assert record.time_to_first_content <= record.time_to_first_text
    if record.time_to_first_content is not None:
        assert record.first_delta is not None and record.first_delta <= record.time_to_first_content
    if record.thinking_start is not None and record.thinking_end is not None:
        assert record.thinking_start <= record.thinking_end
    assert record.server_tool_calls >= len(record.server_tool_runs)
    assert all(0 <= took <= record.duration + 1e-9 and 0 <= ended <= record.duration + 1e-9
               for _name, ended, took in record.server_tool_runs)
    if record.server_tool_duration is not None:
        assert 0 <= record.server_tool_duration <= record.server_tool_calls * record.duration + 1e-9
    assert record.text_chars >= 0 and record.content_events >= (1 if record.time_to_first_content else 0)
    assert record.pings == 0  # OpenAI sends no keep-alive
    for key in ("input_tokens", "output_tokens", "reasoning_tokens", "cache_read_tokens", "cache_write_tokens"):
        value = getattr(record, key)  # a count from the wire: an exporter-safe int, or nothing
        assert value is None or (type(value) is int and 0 <= value < 2**63), (key, value)

    label = attributes["streamscope.class"]
    assert label in LABELS
    assert classify(record_attributes(record)) == label  # offline, the same label as live
    assert (label == "complete") is attributes["streamscope.verified"]
    if attributes["streamscope.verified"]:  # only a normal end: the final event, a reason, no error, no budget
        assert record.normal and "error.type" not in attributes and "streamscope.budget.fired" not in attributes
    if not final_seen:
        assert not attributes["streamscope.verified"], "a stream without its final event was verified"
        assert label != "complete"
    finish = attributes["gen_ai.response.finish_reasons"]
    assert (finish == ["error"]) is ("error.type" in attributes)  # they always agree


def pipeline(any_content: bool) -> Pipeline:
    return Pipeline(NoOpTracer(), BudgetTable.from_config(Budgets(first_content="any" if any_content else None)))


# -- 1. the per-event function, with an explicit clock --------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(steps=steps, end=st.sampled_from(["done", "error", "closed", "abandoned", "cancelled"]),
       any_content=st.booleans(), budget=st.sampled_from([None, "idle", "first_token", "read_timeout"]),
       again=st.lists(st.sampled_from(["done", "error", "closed", "abandoned", "cancelled"]), max_size=3))
def test_arbitrary_events_through_observe(steps, end, any_content, budget, again) -> None:
    errors_before = internal.count
    p = pipeline(any_content)
    call = p.open(p.request(provider="openai", model="gpt-x", now=T0), t0=T0)
    assert call is not None
    rec = call.recorder
    clock = T0
    for delay, ev in steps:
        clock += delay
        events.observe(rec, ev, clock)
    ended_in_band = rec.finished  # `response.failed` / `error` end the record where they arrive
    # A budget ends a stream only as an error (`timeout_error`, or the adapter's `ending`).
    first = rec.finish(end, "SomeError" if end == "error" else None, budget if end == "error" else None,
                       t=clock + 0.5)
    assert (first is None) is ended_in_band
    record = rec.record
    assert record is not None and call.attributes is not None
    attributes = dict(call.attributes)
    for later in again:  # repeated finishes: the first end stands
        assert rec.finish(later, "Other", "idle", t=clock + 9.0) is None
    assert rec.record is record and call.attributes == attributes
    assert internal.count == errors_before, "bad input was counted as streamscope's own failure"
    assert attributes == finished_attributes(record)
    check(record, attributes, any(may_be_final(ev) for _delay, ev in steps))


# -- 2. the shared stream reader: fast path, clock rule, the caller's ways out ------------------------


class RemoteProtocolError(Exception):
    """The transport's (httpx2's) mid-stream failure, by name, as the adapter reads it."""


class ReadTimeout(Exception):
    """The transport's read timeout, by name: `read_timeout`."""


@settings(max_examples=200, deadline=None)
@given(steps=steps, holds=st.lists(st.floats(min_value=0, max_value=3, allow_nan=False), max_size=30),
       way_out=st.sampled_from(["exhausted", "break", "abandon", RemoteProtocolError, ReadTimeout]),
       stop_after=st.integers(min_value=0, max_value=30), any_content=st.booleans(),
       again=st.lists(st.sampled_from(["done", "closed", "abandoned"]), max_size=2))
def test_arbitrary_events_through_the_stream_reader(steps, holds, way_out, stop_after, any_content, again) -> None:
    errors_before = internal.count
    p = pipeline(any_content)
    call = p.open(p.request(provider="openai", model="gpt-x", now=T0), t0=T0)
    assert call is not None
    rec = call.recorder
    clock = [T0]
    delivered: list[Any] = []
    ended_in_band: list[bool] = []

    def source():
        for delay, ev in steps:
            clock[0] += delay
            yield ev
        if isinstance(way_out, type):
            clock[0] += 1.0
            ended_in_band.append(rec.finished)
            raise way_out("peer closed connection")

    with mock.patch.object(stream_hooks, "_now", lambda: clock[0]):
        reader = HOOKS.read(source(), call, object())
        try:
            for i, ev in enumerate(reader):
                delivered.append(ev)
                clock[0] += holds[i] if i < len(holds) else 0.0  # the caller holds the event
                if way_out in ("break", "abandon") and i >= stop_after:
                    break
        except (RemoteProtocolError, ReadTimeout) as exc:
            assert isinstance(exc, way_out)  # the caller gets the transport's own exception, untouched
        reader.close()
        if way_out == "break":
            HOOKS.finish(rec, "closed")  # Stream.close's hook
        elif way_out == "abandon":
            HOOKS.finish(rec, "abandoned")  # the stream's finalizer
        for later in again:
            HOOKS.finish(rec, later)  # type: ignore[arg-type]  # drawn as str: the `End` literals only

    sent = [ev for _d, ev in steps]
    assert len(delivered) <= len(sent) and all(a is b for a, b in zip(delivered, sent, strict=False))
    if way_out not in ("break", "abandon"):
        assert len(delivered) == len(sent)  # nothing lost on the way to the caller
    record = rec.record
    assert record is not None and call.attributes is not None
    assert internal.count == errors_before, "bad input was counted as streamscope's own failure"
    check(record, dict(call.attributes), any(may_be_final(ev) for ev in delivered))
    if record.end == "error":
        assert record.error_type is not None or record.budget_fired is not None, "an error end with no error type"
    if ended_in_band == [False]:  # the transport's failure ended the stream
        expected = ("read_timeout", None) if way_out is ReadTimeout else \
            (None, f"{__name__}.RemoteProtocolError")  # the exception's module-qualified class name
        assert (record.end, record.budget_fired, record.error_type) == ("error", *expected)
    elif way_out == "exhausted" and not record.end == "error":
        assert record.end == "done"
    elif way_out in ("break", "abandon") and record.end != "error" and len(delivered) < len(sent):
        assert record.end == ("closed" if way_out == "break" else "abandoned")


# -- 3. well-formed streams, with and without their final event ----------------------------------------


def chat_stream(texts: list[str], reasoning: list[str], tool_args: list[str], finish: str) -> list[Any]:
    base = {"id": "chatcmpl-1", "created": 0, "model": "gpt-x", "object": "chat.completion.chunk"}

    def chunk_of(delta: dict[str, Any], finish_reason: str | None = None) -> ChatCompletionChunk:
        return ChatCompletionChunk.model_validate(
            {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})

    out = [chunk_of({"role": "assistant", "content": ""})]
    out += [chunk_of({"reasoning_content": r}) for r in reasoning]
    out += [chunk_of({"content": t}) for t in texts]
    out += [chunk_of({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}) for a in tool_args]
    out.append(chunk_of({}, finish))  # the final event (the SDK swallows [DONE])
    out.append(ChatCompletionChunk.model_validate(
        {**base, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}}))
    return out


def responses_stream(texts: list[str], reasoning: list[str], tools: int, terminal: str) -> list[Any]:
    def response_of(status: str, **extra: Any) -> dict[str, Any]:
        return {"id": "resp_1", "created_at": 0, "model": "gpt-x", "object": "response", "output": [],
                "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "status": status, **extra}

    out: list[Any] = [ResponseCreatedEvent.model_validate(
        {"type": "response.created", "sequence_number": 0, "response": response_of("in_progress")})]
    if reasoning:
        out.append(ResponseOutputItemAddedEvent.model_validate({"type": "response.output_item.added", "output_index": 0,
                                                                "sequence_number": 1,
                                                                "item": {"type": "reasoning", "id": "rs_1",
                                                                         "summary": []}}))
        out += [ResponseReasoningSummaryTextDeltaEvent.model_validate(
            {"type": "response.reasoning_summary_text.delta", "delta": r, "item_id": "rs_1", "output_index": 0,
             "summary_index": 0, "sequence_number": 2}) for r in reasoning]
        out.append(ResponseOutputItemDoneEvent.model_validate({"type": "response.output_item.done", "output_index": 0,
                                                               "sequence_number": 3,
                                                               "item": {"type": "reasoning", "id": "rs_1",
                                                                        "summary": []}}))
    for n in range(tools):
        web = {"type": "web_search_call", "id": f"ws_{n}", "status": "completed",
               "action": {"type": "search", "query": "q"}}
        out.append(ResponseOutputItemAddedEvent.model_validate(
            {"type": "response.output_item.added", "output_index": 1, "sequence_number": 4, "item": web}))
        out.append(ResponseOutputItemDoneEvent.model_validate(
            {"type": "response.output_item.done", "output_index": 1, "sequence_number": 5, "item": web}))
    message = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": []}
    out.append(ResponseOutputItemAddedEvent.model_validate(
        {"type": "response.output_item.added", "output_index": 2, "sequence_number": 6, "item": message}))
    out += [ResponseTextDeltaEvent.model_validate(
        {"type": "response.output_text.delta", "delta": t, "item_id": "msg_1", "output_index": 2,
         "content_index": 0, "logprobs": [], "sequence_number": 6}) for t in texts]
    out.append(ResponseOutputItemDoneEvent.model_validate(
        {"type": "response.output_item.done", "output_index": 2, "sequence_number": 6, "item": message}))
    usage = {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
             "output_tokens": 9, "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 14}
    if terminal == "response.completed":
        out.append(ResponseCompletedEvent.model_validate(
            {"type": terminal, "sequence_number": 7, "response": response_of("completed", usage=usage)}))
    else:
        out.append(ResponseIncompleteEvent.model_validate(
            {"type": terminal, "sequence_number": 7,
             "response": response_of("incomplete", usage=usage,
                                     incomplete_details={"reason": "max_output_tokens"})}))
    return out


def final_index(stream: list[Any]) -> int:
    return next(i for i, ev in enumerate(stream) if may_be_final(ev))


texts = st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=5)
thoughts = st.lists(st.text(min_size=1, max_size=8), max_size=3)


@settings(max_examples=150, deadline=None)
@given(api=st.sampled_from(["chat", "responses"]), text=texts, reasoning=thoughts,
       tools=st.integers(min_value=0, max_value=2), keep_final=st.booleans(), cut_after=st.booleans(),
       delays=st.lists(st.floats(min_value=0, max_value=2, allow_nan=False), min_size=1, max_size=20),
       any_content=st.booleans())
def test_well_formed_streams_verified_only_with_their_final_event(api, text, reasoning, tools, keep_final, cut_after,
                                                                   delays, any_content) -> None:
    stream = chat_stream(text, reasoning, [], "stop") if api == "chat" else \
        responses_stream(text, reasoning, tools, "response.completed")
    at = final_index(stream)
    if not keep_final:
        # The final event never came: cut there (and maybe everything after it too).
        stream = stream[:at] if cut_after else stream[:at] + stream[at + 1:]
    errors_before = internal.count
    p = pipeline(any_content)
    call = p.open(p.request(provider="openai", model="gpt-x", now=T0), t0=T0)
    assert call is not None
    rec = call.recorder
    clock = T0
    for i, ev in enumerate(stream):
        clock += delays[i % len(delays)]
        events.observe(rec, ev, clock)
    record = rec.finish("done", t=clock + 1.0)  # the body ended cleanly
    assert record is not None and call.attributes is not None
    attributes = dict(call.attributes)
    assert internal.count == errors_before
    check(record, attributes, keep_final)
    assert attributes["streamscope.verified"] is keep_final
    if keep_final:
        assert attributes["streamscope.class"] == "complete"
        assert attributes["gen_ai.usage.output_tokens"] == 9
        assert record.text_chars == sum(len(t) for t in text)
    else:
        assert attributes["streamscope.class"] == "upstream_error"
        assert attributes["error.type"] == "incomplete_stream"
    if reasoning:
        assert record.thinking_start is not None and record.thinking_start <= record.time_to_first_text
    if api == "responses" and tools:
        assert record.server_tool_calls == tools


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_an_incomplete_end_is_an_answer_cut_at_the_limit(api) -> None:
    stream = chat_stream(["a" * 300], [], [], "length") if api == "chat" else \
        responses_stream(["a" * 300], [], 0, "response.incomplete")
    p = pipeline(False)
    call = p.open(p.request(provider="openai", model="gpt-x", now=T0), t0=T0)
    assert call is not None
    for i, ev in enumerate(stream):
        events.observe(call.recorder, ev, T0 + i)
    call.recorder.finish("done")
    assert call.attributes is not None
    assert call.attributes["streamscope.class"] == "truncated"
    assert call.attributes["gen_ai.response.finish_reasons"] == ["length"]


def _pool() -> list[Any]:
    refusal = ChatCompletionChunk.model_validate(
        {"id": "c", "created": 0, "model": "gpt-x", "object": "chat.completion.chunk",
         "choices": [{"index": 0, "delta": {"refusal": "I can't"}, "finish_reason": None}]})
    failed = ResponseFailedEvent.model_construct(
        type="response.failed", sequence_number=9,
        response=Response.model_construct(id="resp_1", model="gpt-x", usage=None, service_tier="default",
                                          error=ns(code="server_error")))
    error = ResponseErrorEvent.model_construct(type="error", code="rate_limit_exceeded", message="m", sequence_number=9)
    refusal_delta = ResponseRefusalDeltaEvent.model_construct(type="response.refusal.delta", delta="no", item_id="m",
                                                              output_index=0, content_index=0, sequence_number=8)
    arguments = ResponseFunctionCallArgumentsDeltaEvent.model_construct(
        type="response.function_call_arguments.delta", delta='{"q":', item_id="fc", output_index=0, sequence_number=8)
    return [*chat_stream(["Hel", "lo"], ["hmm"], ['{"a":'], "stop"), *chat_stream(["x"], [], [], "length")[-2:],
            *responses_stream(["Hi", "!"], ["think"], 1, "response.completed"),
            *responses_stream(["cut"], [], 0, "response.incomplete")[-2:],
            refusal, failed, error, refusal_delta, arguments]


REALISTIC = _pool()


# -- 4. the reader's clock rule: the caller's own time is never the provider's silence --------------


@settings(max_examples=100, deadline=None)
@given(text=st.lists(st.text(min_size=1, max_size=4), min_size=2, max_size=8),
       delays=st.lists(st.floats(min_value=0, max_value=2, allow_nan=False), min_size=12, max_size=12),
       holds=st.lists(st.floats(min_value=0, max_value=10, allow_nan=False), min_size=12, max_size=12))
def test_the_reader_measures_gaps_while_the_caller_waits(text, delays, holds) -> None:
    stream = chat_stream(text, [], [], "stop")  # role chunk, the text chunks, the finish chunk, the usage chunk
    p = pipeline(False)
    call = p.open(p.request(provider="openai", model="gpt-x", now=T0), t0=T0)
    assert call is not None
    rec = call.recorder
    clock = [T0]

    def source():
        for i, ev in enumerate(stream):
            clock[0] += delays[i]  # the provider's silence before this event, while the caller waits
            yield ev

    with mock.patch.object(stream_hooks, "_now", lambda: clock[0]):
        for i, _ev in enumerate(HOOKS.read(source(), call, object())):
            clock[0] += holds[i]  # the caller's own time with the event
    record = rec.record
    assert record is not None and record.end == "done"
    last = len(stream) - 1
    assert record.max_gap == pytest.approx(max(delays[2:1 + len(text)]))  # between text chunks, holds excluded
    assert record.duration == pytest.approx(sum(delays[:last + 1]) + sum(holds[:last]))  # the last delivery
    assert record.time_to_first_text == pytest.approx(sum(delays[:2]) + holds[0])
    assert record.text_chars == sum(len(t) for t in text) and record.content_events == len(text)
    assert call.attributes is not None and call.attributes["streamscope.class"] == "complete"
