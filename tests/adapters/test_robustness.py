"""Unknown event types, missing usage and malformed SSE never raise from streamscope, and the
caller receives exactly what it would receive without it."""

from __future__ import annotations

import re

import pytest

import streamscope.core.guard as internal
from conftest import USER, Telemetry, aclient, client
from streamscope import AnthropicInstrumentor
from streamscope.adapters.stainless.ending import exception_type


def events_of(sim, scenario: str) -> tuple[list[tuple[str, str]], str | None]:
    """(type, repr) of every event the caller receives, and the exception it ends with."""
    got: list[tuple[str, str]] = []
    try:
        for event in client(sim, scenario).messages.create(model="m", max_tokens=64, messages=USER, stream=True):
            got.append((event.type, re.sub(r"msg_sim_\d+", "msg_sim_N", event.model_dump_json())))
    except Exception as exc:  # what the caller sees, compared below
        return got, exception_type(exc)  # module-qualified, as the span's error.type names it
    return got, None


@pytest.mark.parametrize(
    "scenario", ["unknown_events", "docs_thinking", "malformed_json", "cut_connection", "inband_error"]
)
def test_caller_receives_the_same_with_and_without(sim, scenario: str) -> None:
    bare = events_of(sim, scenario)
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument()
    errors_before = internal.count
    try:
        instrumented = events_of(sim, scenario)
    finally:
        instrumentor.uninstrument()
    assert instrumented == bare
    assert internal.count == errors_before, "streamscope failed internally on this input"


def test_unknown_event_types_are_delivered_and_ignored(sim, telemetry: Telemetry) -> None:
    types = [e.type for e in client(sim, "unknown_events").messages.create(model="m", max_tokens=64, messages=USER,
                                                                             stream=True)]
    assert "future_event_type" in types
    a = telemetry.attrs()
    assert a["streamscope.class"] == "complete"
    assert a["streamscope.content_events"] == 2


async def test_missing_usage_is_tolerated(sim, telemetry: Telemetry) -> None:
    """The documented extended-thinking stream has no `usage` anywhere."""
    stream = await aclient(sim, "docs_thinking").messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    async for _ in stream:
        pass
    a = telemetry.attrs()
    assert a["streamscope.class"] == "complete"
    assert "gen_ai.usage.output_tokens" not in a and "streamscope.decode_rate" not in a
    assert a["streamscope.thinking.end"] < a["streamscope.time_to_first_text"]


def test_malformed_sse_is_an_upstream_error(sim, telemetry: Telemetry) -> None:
    with pytest.raises(Exception):
        for _ in client(sim, "malformed_json").messages.create(model="m", max_tokens=64, messages=USER, stream=True):
            pass
    a = telemetry.attrs()
    assert a["streamscope.class"] == "upstream_error"


def test_one_span_even_with_the_sdks_own_tracing_on(sim, telemetry: Telemetry) -> None:
    """The SDK traces itself whenever a tracer provider is set; users still get one span per call,
    and keep what the SDK's span carried (status, request id, retry count)."""
    from streamscope.simulator import SCENARIOS, Scenario

    # A scenario of its own: the simulator counts attempts per scenario name.
    sim.add(Scenario("sdk_tracing_529_then_ok", list(SCENARIOS["http_529_then_ok"].attempts)))
    c = client(sim, "sdk_tracing_529_then_ok", max_retries=2,
               open_telemetry={"tracer_provider": telemetry.provider})
    with c.messages.stream(model="m", max_tokens=64, messages=USER) as s:
        s.until_done()
        assert s._raw_stream._observer is None  # off inside the call: what streamscope's layers rely on
    assert [s.name for s in telemetry.all_spans()] == ["chat m"]
    a = telemetry.attrs()
    assert a["http.request.resend_count"] == 1
    assert a["http.response.status_code"] == 200
    assert a["anthropic.request.id"].startswith("req_sim_")


def test_non_streaming_calls_keep_the_sdks_own_span(sim, telemetry: Telemetry) -> None:
    c = client(sim, "complete", open_telemetry={"tracer_provider": telemetry.provider})
    message = c.messages.create(model="m", max_tokens=64, messages=USER)
    assert message.content[0].text == "Hello! How can I help you today?"
    assert telemetry.spans() == []
    assert [s.name for s in telemetry.all_spans()] == ["anthropic.messages.create"]


def _malformed_scenarios(sim) -> None:
    from streamscope.simulator import Raw, Scenario, TextSpec, message_stream

    big = "x" * 2_000_000
    sim.add(Scenario.single("garbage_lines", message_stream(blocks=[TextSpec(
        ["Hello", Raw(b"this is not sse\n:comment\nevent\ndata\n\n"), Raw(b"\x00\xff\xfe garbage\n\n"), " there"])])))
    sim.add(Scenario.single("oversized_event", message_stream(blocks=[TextSpec(["Hello", big])])))
    sim.add(Scenario.single("broken_json_mid", message_stream(blocks=[TextSpec(
        ["Hello", Raw(b'event: content_block_delta\ndata: {"type": "content_block_delta", "delta": {"type": \n\n')])])))


@pytest.mark.parametrize("scenario", ["garbage_lines", "oversized_event", "broken_json_mid"])
def test_malformed_sse_fails_as_without_streamscope(sim, scenario: str) -> None:
    _malformed_scenarios(sim)
    bare = events_of(sim, scenario)
    instrumentor = AnthropicInstrumentor()
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor.instrument(tracer_provider=provider)
    try:
        instrumented = events_of(sim, scenario)
    finally:
        instrumentor.uninstrument()
    assert instrumented == bare
    (span,) = exporter.get_finished_spans()
    label = span.attributes["streamscope.class"]
    if bare[1] is not None:  # the SDK raised: the span says so
        assert label == "upstream_error" and span.attributes["error.type"] == bare[1]
    else:
        assert label == "complete"


def test_the_adapter_lookup_survives_imports_while_it_reads() -> None:
    """An ended call asks every loaded adapter what its exception means, which reads
    `sys.modules`. A finalizer the garbage collector runs mid-read (or another thread) may import
    something then; the lookup must still answer. Each round leaves a cycle whose finalizer adds a
    module, with the collector's threshold stepped so that it runs at a different point of the read.
    """
    import gc
    import sys
    import types

    import anthropic
    import httpx

    from streamscope.adapters import providers

    added: list[str] = []

    class Imports:
        def __del__(self) -> None:
            name = f"_streamscope_test_import_{len(added)}"
            added.append(name)
            sys.modules[name] = types.ModuleType(name)

    error = anthropic.APIConnectionError(request=httpx.Request("POST", "http://127.0.0.1:9/v1/messages"))
    threshold = gc.get_threshold()
    answers = []
    try:
        for step in range(5, 1500, 13):
            gc.collect()
            gc.set_threshold(step)
            garbage = Imports()
            garbage.cycle = garbage  # type: ignore[attr-defined]
            del garbage
            answers.append(providers.retry_decision(error))
    finally:
        gc.set_threshold(*threshold)
        for name in added:
            sys.modules.pop(name, None)
    assert added, "no finalizer ran: the test did not exercise the read"
    assert {a.code for a in answers if a is not None} == {"upstream_unreachable"}
    assert None not in answers
