"""Privacy: no prompt or answer text in any span, event, metric or log unless the user opts in;
with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT the content is where semconv puts it."""

from __future__ import annotations

import json
import logging
import re

import anthropic
import pytest
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from conftest import Telemetry, client
from streamscope import Budgets
from streamscope.simulator import SCENARIOS

SECRET = "PROMPT-SECRET-4b1d: my account number is 998877"
SYSTEM = "SYSTEM-SECRET-aa71: you are a careful assistant"
MESSAGES = [{"role": "user", "content": SECRET}]
SCENARIO_NAMES = sorted(n for n in SCENARIOS if not n.startswith("timed_silent") and n not in ("silent_start",
                                                                                               "silent_stall"))


def provider_message(exc: anthropic.APIStatusError) -> str:
    """The provider's own message text in an API error. Not `str(exc)`: from anthropic 2.17 that also
    carries the request id, the path and the error type (`invalid_request_error`), which telemetry
    carries by design; a 20-character window of it that falls inside the error type is no leak."""
    body = exc.body
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    return message if isinstance(message, str) else (body if isinstance(body, str) else "")


def stream_everything(sim) -> list[str]:
    """Every scenario; returns pieces of the text the caller received (answers, thinking, the
    provider's raw error messages): every 20-character window, so no sentence can hide."""
    texts: list[str] = []
    for name in SCENARIO_NAMES:
        received = ""
        try:
            with client(sim, name).messages.stream(model="m", max_tokens=8192, messages=MESSAGES, system=SYSTEM,
                                                   thinking={"type": "enabled", "budget_tokens": 4096}) as s:
                for event in s:
                    if event.type == "text":
                        received += event.text
                    elif event.type == "thinking":
                        received += event.thinking
        except anthropic.APIStatusError as exc:
            received += " " + provider_message(exc)
        except Exception as exc:
            received += " " + str(exc)
        texts.append(received)
    return [t[i:i + 20] for t in texts for i in range(0, max(len(t) - 20, 0) + 1, 10) if len(t[i:i + 20].strip()) == 20]


def exported(telemetry: Telemetry, metrics: InMemoryMetricReader, caplog) -> str:
    spans = "\n".join(s.to_json() for s in telemetry.all_spans())
    data = metrics.get_metrics_data()
    # The instruments' descriptions are streamscope's own fixed sentences ("Until the response
    # headers arrived."), never a request's: left out, so a provider message that happens to share
    # 20 characters of English with one is not taken for a leak.
    described = re.sub(r'"description": "[^"]*"', '"description": ""', data.to_json() if data else "")
    return spans + "\n" + described + "\n" + caplog.text


@pytest.fixture
def telemetry_and_metrics(instrument):
    reader = InMemoryMetricReader()
    telemetry = instrument(meter_provider=MeterProvider(metric_readers=[reader]), budgets=Budgets(idle=0.5))
    return telemetry, reader


def test_nothing_leaks_by_default(sim, telemetry_and_metrics, caplog, monkeypatch) -> None:
    monkeypatch.delenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", raising=False)
    caplog.set_level(logging.DEBUG, logger="streamscope")
    telemetry, metrics = telemetry_and_metrics
    received = stream_everything(sim)
    assert len(received) > 20 and len(telemetry.spans()) == len(SCENARIO_NAMES)
    blob = exported(telemetry, metrics, caplog)
    for text in [SECRET, SYSTEM, *received]:
        assert text not in blob, f"content leaked: {text!r}"
    # The account number on its own; not the same digits inside a float (0.026975814998877468) or an id.
    assert not re.search(r"(?<![0-9a-fA-F.])998877(?![0-9a-fA-F])", blob), "content leaked: the account number"
    assert "Overloaded" not in blob  # the provider's raw message text
    assert "overloaded_error" in blob  # ...its error type is what spans carry


EVENT = "gen_ai.client.inference.operation.details"


def plain(value):
    """An attribute value as JSON reads it: the span's JSON strings parsed, the event's structured
    values (the SDK keeps sequences as tuples) as lists."""
    return json.loads(value) if isinstance(value, str) else json.loads(json.dumps(value))


@pytest.mark.parametrize("mode", ["SPAN_ONLY", "true", "EVENT_ONLY", "SPAN_AND_EVENT"])
def test_content_where_semconv_puts_it_when_opted_in(sim, instrument, monkeypatch, mode: str) -> None:
    """On the span as JSON strings; in the conventions' event, a log record with the event name and
    the span's trace context, as structured attributes (the conventions' event attributes). Never a
    span event."""
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", mode)
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider()
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    telemetry = instrument(logger_provider=logger_provider)
    with client(sim, "thinking").messages.stream(model="m", max_tokens=8192, messages=MESSAGES, system=SYSTEM,
                                                  thinking={"type": "enabled", "budget_tokens": 4096}) as s:
        answer = s.get_final_text()
    span = telemetry.one()
    on_span = "gen_ai.input.messages" in span.attributes
    events = [r.log_record for r in logs.get_finished_logs() if r.log_record.event_name == EVENT]
    assert on_span is (mode in ("SPAN_ONLY", "true", "SPAN_AND_EVENT"))
    assert len(events) == (1 if mode in ("EVENT_ONLY", "SPAN_AND_EVENT") else 0)
    assert not [e for e in span.events if e.name == EVENT]
    if events:
        [event] = events
        assert (event.trace_id, event.span_id) == (span.context.trace_id, span.context.span_id)
        assert event.timestamp == span.end_time
        assert event.attributes["gen_ai.request.model"] == "m"
        assert event.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    wheres = ([span.attributes] if on_span else []) + [e.attributes for e in events]
    for where in wheres:
        inputs = plain(where["gen_ai.input.messages"])
        assert inputs == [{"role": "user", "parts": [{"type": "text", "content": SECRET}]}]
        assert plain(where["gen_ai.system_instructions"]) == [{"type": "text", "content": SYSTEM}]
        [output] = plain(where["gen_ai.output.messages"])
        assert output["role"] == "assistant" and "finish_reason" not in output
        parts = {p["type"]: p["content"] for p in output["parts"]}
        assert parts["text"] == answer and parts["reasoning"].startswith("The user asks")
    for event in events:
        assert not isinstance(event.attributes["gen_ai.input.messages"], str), "the event's messages are structured"
        assert event.body is None, "the content is in the event's attributes"


def test_tool_calls_are_captured_as_tool_call_parts(sim, instrument, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    telemetry = instrument()
    for _ in client(sim, "tool_use").messages.create(model="m", max_tokens=64, messages=MESSAGES, stream=True):
        pass
    [output] = json.loads(telemetry.attrs()["gen_ai.output.messages"])
    call = next(p for p in output["parts"] if p["type"] == "tool_call")
    assert call["name"] == "get_weather" and call["arguments"] == {"location": "San Francisco, CA", "unit": "celsius"}
    assert "finish_reason" not in output  # deprecated: gen_ai.response.finish_reasons says it
    assert telemetry.attrs()["gen_ai.response.finish_reasons"] == ("tool_call",)
