"""A client that posts the provider's request itself (LiteLLM's way): httpx and httpx2, sync and async.

No SDK call is made: the request goes through the HTTP library's `send` to `/v1/messages` (or
OpenAI's `/chat/completions`, `/responses`) with `"stream": true`, and the caller reads the body.
One span per call, as the SDK's path would record it; budgets fire on the body the caller reads
and close the connection; an HTTP error, a close after the answer's stop reason, a close before.
"""

from __future__ import annotations

import gc
import importlib
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import anthropic
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from conftest import Telemetry, client, offline_class
from streamscope import Budgets, OpenAIInstrumentor, StreamTimeout

LIBRARIES = ["httpx", "httpx2"]
BODY = {"model": "claude-sim-1", "max_tokens": 256, "stream": True,
        "messages": [{"role": "user", "content": "How do streams fail?"}]}
VOLATILE = ("time", "duration", "max_gap", "decode_rate", "thinking.start", "thinking.end", "request.id",
            "response.id", "server.port", "resend_count", "streamscope.attempt")


def _request(http: Any, c: Any, url: str, body: dict[str, Any] = BODY) -> Any:
    return c.build_request("POST", url, content=json.dumps(body), headers={"content-type": "application/json"})


def read(library: str, url: str, stop_after: int | None = None, body: dict[str, Any] = BODY) -> list[str]:
    http = importlib.import_module(library)
    lines: list[str] = []
    with http.Client() as c:
        response = c.send(_request(http, c, url, body), stream=True)
        try:
            for line in response.iter_lines():
                lines.append(line)
                if stop_after is not None and len(lines) >= stop_after:
                    break
        finally:
            response.close()
    return lines


async def aread(library: str, url: str, stop_after: int | None = None) -> list[str]:
    http = importlib.import_module(library)
    lines: list[str] = []
    async with http.AsyncClient() as c:
        response = await c.send(_request(http, c, url), stream=True)
        try:
            async for line in response.aiter_lines():
                lines.append(line)
                if stop_after is not None and len(lines) >= stop_after:
                    break
        finally:
            await response.aclose()
    return lines


def sdk_attributes(sim: Any, telemetry: Telemetry, scenario: str) -> dict[str, Any]:
    try:
        for _ in client(sim, scenario).messages.create(**{k: v for k, v in BODY.items() if k != "stream"},
                                                       stream=True):
            pass
    except Exception:
        pass
    attrs = telemetry.attrs()
    telemetry.exporter.clear()
    telemetry.ends.started.clear()
    telemetry.ends.ended.clear()
    return {k: v for k, v in attrs.items() if not any(p in k for p in VOLATILE)}


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("scenario", ["complete", "thinking", "inband_error", "incomplete", "tool_use"])
def test_sync_same_span_as_the_sdk(sim, telemetry: Telemetry, library: str, scenario: str) -> None:
    expected = sdk_attributes(sim, telemetry, scenario)
    lines = read(library, sim.url(scenario) + "/v1/messages")
    assert any(line.startswith("event: message_start") for line in lines)
    attrs = telemetry.attrs()
    telemetry.assert_each_ended_once()
    assert {k: v for k, v in attrs.items() if not any(p in k for p in VOLATILE)} == expected
    assert attrs["streamscope.class"] == offline_class(telemetry.one())


@pytest.mark.parametrize("library", LIBRARIES)
@pytest.mark.parametrize("scenario", ["complete", "inband_error"])
async def test_async_same_span_as_the_sdk(sim, telemetry: Telemetry, library: str, scenario: str) -> None:
    expected = sdk_attributes(sim, telemetry, scenario)
    await aread(library, sim.url(scenario) + "/v1/messages")
    attrs = telemetry.attrs()
    telemetry.assert_each_ended_once()
    assert {k: v for k, v in attrs.items() if not any(p in k for p in VOLATILE)} == expected


@pytest.mark.parametrize("library", LIBRARIES)
def test_idle_budget_fires_and_closes(sim, instrument: Callable[..., Telemetry], library: str) -> None:
    telemetry = instrument(budgets=Budgets(idle=1.0))
    first = len(sim.requests)
    started = time.monotonic()
    with pytest.raises(StreamTimeout) as fired:
        read(library, sim.url("pinging_stall") + "/v1/messages")
    assert fired.value.budget == "idle" and 1.0 <= time.monotonic() - started < 6.0
    attrs = telemetry.attrs()
    assert (attrs["streamscope.class"], attrs["streamscope.budget.fired"]) == ("stalled_mid_stream", "idle")
    assert attrs["streamscope.pings"] >= 1
    assert sim.wait_for_outcome(first, timeout=5.0).outcome == "disconnected"


@pytest.mark.parametrize("library", LIBRARIES)
async def test_async_first_token_budget_fires(sim, instrument: Callable[..., Telemetry], library: str) -> None:
    telemetry = instrument(budgets=Budgets(first_token=1.0))
    first = len(sim.requests)
    with pytest.raises(StreamTimeout) as fired:
        await aread(library, sim.url("silent_start") + "/v1/messages")
    assert fired.value.budget == "first_token"
    assert telemetry.attrs()["streamscope.class"] == "stalled_before_first_content"
    assert sim.wait_for_outcome(first, timeout=5.0).outcome == "disconnected"


@pytest.mark.parametrize("library", LIBRARIES)
def test_http_error_before_the_stream(sim, telemetry: Telemetry, library: str) -> None:
    read(library, sim.url("http_529") + "/v1/messages")
    attrs = telemetry.attrs()
    assert (attrs["http.response.status_code"], attrs["error.type"], attrs["streamscope.class"]) == (
        529, "529", "upstream_error")
    assert attrs["streamscope.failure.code"] == "upstream_unavailable"


@pytest.mark.parametrize("library", LIBRARIES)
def test_closed_early_is_cancelled(sim, telemetry: Telemetry, library: str) -> None:
    first = len(sim.requests)
    read(library, sim.url("slow_answer") + "/v1/messages", stop_after=8)
    assert telemetry.attrs()["streamscope.class"] == "cancelled"
    assert sim.wait_for_outcome(first, timeout=5.0).outcome == "disconnected"


def test_closed_after_the_stop_reason_is_complete(sim, telemetry: Telemetry) -> None:
    """LiteLLM closes the body once `message_delta` (the stop reason and the final usage) arrived:
    the answer is whole, only the terminator went unread."""
    lines = read("httpx", sim.url("complete") + "/v1/messages")
    upto = next(i for i, line in enumerate(lines) if line == "event: message_delta") + 2
    telemetry.exporter.clear()
    telemetry.ends.started.clear()
    telemetry.ends.ended.clear()
    read("httpx", sim.url("complete") + "/v1/messages", stop_after=upto)
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "complete" and "error.type" not in attrs
    assert attrs["gen_ai.usage.output_tokens"] > 0


@pytest.mark.parametrize("library", LIBRARIES)
def test_not_streamed_and_other_paths(sim, instrument: Callable[..., Telemetry], library: str,
                                      caplog: pytest.LogCaptureFixture) -> None:
    """A POST without `"stream": true`, or to another path: nothing. A streamed body the client
    reads whole inside `send` (`stream=False`): nobody waits on a stream, nothing to observe as it
    comes; counted in `streamscope.unobserved_calls` and said once."""
    reader = InMemoryMetricReader()
    telemetry = instrument(meter_provider=MeterProvider(metric_readers=[reader]))
    http = importlib.import_module(library)
    caplog.set_level(logging.WARNING, logger="streamscope")
    with http.Client() as c:
        c.send(_request(http, c, sim.url("complete") + "/v1/messages", {**BODY, "stream": False}), stream=True).close()
        c.send(_request(http, c, sim.url("complete") + "/v1/other"), stream=True).close()
        c.send(_request(http, c, sim.url("complete") + "/v1/messages"), stream=False)
        c.send(_request(http, c, sim.url("complete") + "/v1/messages"), stream=False)
    assert telemetry.spans() == []
    counted = [(p.attributes["streamscope.unobserved.by"], p.value)
               for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics
               if m.name == "streamscope.unobserved_calls" for p in m.data.data_points]
    assert counted == [("_OTHER", 2)]  # this test's own module is no known package
    assert len([r for r in caplog.records if "unobserved" in r.getMessage()]) <= 1


def test_the_sdks_own_calls_are_recorded_once(sim, telemetry: Telemetry) -> None:
    """The SDK posts through the same `send`: its call is the SDK path's, one span."""
    for _ in client(sim, "complete").messages.with_raw_response.create(
            **{k: v for k, v in BODY.items() if k != "stream"}, stream=True).parse():
        pass
    gc.collect()
    assert len(telemetry.spans()) == 1


@pytest.mark.parametrize("library", LIBRARIES)
def test_openai_endpoints_posted(library: str) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from streamscope.simulator import Simulator

    exporter, provider = InMemorySpanExporter(), TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    osim = Simulator()
    osim.__enter__()
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        chat = {"model": "gpt-sim-test", "stream": True, "messages": [{"role": "user", "content": "hi"}],
                "stream_options": {"include_usage": True}}
        read(library, osim.openai_url("chat_complete") + "/chat/completions", body=chat)
        read(library, osim.openai_url("responses_failed") + "/responses",
             body={"model": "gpt-sim-test", "stream": True, "input": "hi"})
    finally:
        instrumentor.uninstrument()
        osim.__exit__(None, None, None)
    spans = [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "streamscope"]
    assert [(s.attributes["gen_ai.provider.name"], s.attributes["openai.api.type"], s.attributes["streamscope.class"])
            for s in spans] == [("openai", "chat_completions", "complete"), ("openai", "responses", "upstream_error")]
    assert spans[0].attributes["gen_ai.usage.output_tokens"] > 0


def test_a_stream_from_an_endpoint_streamscope_does_not_know_is_counted(caplog: pytest.LogCaptureFixture) -> None:
    """A stored response's events streamed again (`responses.retrieve(id, stream=True)`, a GET):
    no span, but counted (by the SDK that streamed it) and said once for that route, never silently."""
    import openai
    from opentelemetry.sdk.trace import TracerProvider

    from streamscope.simulator import Simulator

    reader = InMemoryMetricReader()
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider(metric_readers=[reader]))
    caplog.set_level(logging.WARNING, logger="streamscope")
    try:
        with Simulator() as osim:
            c = openai.OpenAI(base_url=osim.openai_url("responses_complete"), api_key="k", max_retries=0)
            for ident in ("resp_1", "resp_2"):
                with pytest.raises(openai.NotFoundError):  # the simulator keeps no responses
                    for _ in c.responses.retrieve(ident, stream=True):
                        pass
    finally:
        instrumentor.uninstrument()
    counted = [(p.attributes["gen_ai.provider.name"], p.attributes["streamscope.unobserved.by"], p.value)
               for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics
               if m.name == "streamscope.unobserved_calls" for p in m.data.data_points]
    assert counted == [("openai", "openai", 2)]
    said = [r.getMessage() for r in caplog.records if "/responses/{id}" in r.getMessage()]
    assert len(said) <= 1  # once per process and route (another test of this process may have said it first)


def test_an_sdk_below_the_floor_is_left_alone_and_its_streams_counted(
        sim, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Declared below the floor (here: the floor raised past the installed release), the SDK is left
    exactly as it is and OpenTelemetry's check says so; each streamed call is still counted in
    `streamscope.unobserved_calls` and said once, until `uninstrument()`."""
    import anthropic
    import anthropic._streaming as streaming
    from opentelemetry.sdk.trace import TracerProvider

    import streamscope.pipeline
    from streamscope import AnthropicInstrumentor

    streamscope.pipeline._WARNED_UNOBSERVED.clear()
    monkeypatch.setattr(AnthropicInstrumentor, "_instruments", ("anthropic >= 999",))
    before = streaming.Stream.__dict__["__iter__"]
    reader = InMemoryMetricReader()
    instrumentor = AnthropicInstrumentor()
    caplog.set_level(logging.WARNING, logger="streamscope")
    instrumentor.instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider(metric_readers=[reader]))
    try:
        assert not instrumentor.is_instrumented_by_opentelemetry
        assert streaming.Stream.__dict__["__iter__"] is before  # nothing of the SDK hooked
        for _ in range(2):
            for _ in client(sim, "complete").messages.create(**{k: v for k, v in BODY.items() if k != "stream"},
                                                             stream=True):
                pass
    finally:
        instrumentor.uninstrument()
    for _ in client(sim, "complete").messages.create(**{k: v for k, v in BODY.items() if k != "stream"}, stream=True):
        pass  # after uninstrument(): not counted
    counted = [(p.attributes["streamscope.unobserved.by"], p.value)
               for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics
               if m.name == "streamscope.unobserved_calls" for p in m.data.data_points]
    assert counted == [("anthropic", 2)]
    said = [r.getMessage() for r in caplog.records if "below the oldest release" in r.getMessage()]
    assert len(said) == 1 and f"a streamed call of anthropic {anthropic.__version__}," in said[0], said  # once


LATE_IMPORT = r"""
import importlib, json, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
import anthropic
import genai_prices  # streamscope's prices, loaded by instrument(): it imports httpx2 itself
from streamscope import AnthropicInstrumentor

LIBRARIES = ("httpx", "httpx2")
before = [n for n in LIBRARIES if n in sys.modules]
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
AnthropicInstrumentor().instrument(tracer_provider=provider)
after = [n for n in LIBRARIES if n in sys.modules]
classes = {}
for name in LIBRARIES:
    if name in before:
        continue
    http = importlib.import_module(name)
    with http.Client() as c:
        request = c.build_request("POST", sys.argv[1], content=sys.argv[2],
                                  headers={"content-type": "application/json"})
        response = c.send(request, stream=True)
        try:
            for _ in response.iter_lines():
                pass
        finally:
            response.close()
    classes[name] = [s.attributes.get("streamscope.class") for s in exporter.get_finished_spans()]
    exporter.clear()
print(json.dumps({"before": before, "after": after, "classes": classes}))
"""


def test_an_http_library_is_hooked_when_imported_never_imported_for_the_hook(sim) -> None:
    """Instrumenting imports neither httpx nor httpx2 (a whole library in a service that may not use
    it): one that neither the SDK nor streamscope's price
    table imports (httpx beside the SDKs that read through httpx2) is hooked when the process imports
    it, and a call posted with it then gets its span. (On the lines that read through httpx, the
    price table's httpx2 leaves no library to import late: `tests/unit/test_patches.py` covers that.)"""
    import subprocess
    import sys

    import environments

    done = subprocess.run([sys.executable, "-c", LATE_IMPORT, sim.url("complete") + "/v1/messages",
                           json.dumps(BODY)],
                          capture_output=True, text=True, timeout=120, env=environments.clean_environ())
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["after"] == found["before"], found
    assert len(found["classes"]) == len(LIBRARIES) - len(found["before"]), found
    if int(anthropic.__version__.split(".")[0]) >= 2:  # the SDK reads through httpx2: httpx comes late
        assert list(found["classes"]) == ["httpx"], found
    assert all(classes == ["complete"] for classes in found["classes"].values()), found
