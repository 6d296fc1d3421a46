"""Trace context: each streamed request carries the W3C trace context of streamscope's own span.

The span's identity is decided when the request is sent and the span itself is written when the
stream ends, with exactly those ids, the request's start time and the caller's context as parent.
The SDK's propagation switch (client option, `ANTHROPIC_OPEN_TELEMETRY_PROPAGATION=false`) and the
registered propagators (`OTEL_PROPAGATORS`) are honoured; retries carry the same context; the
sampler decides once, and the `sampled` flag sent is the decision the exported spans show.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from opentelemetry import propagate, trace
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased, TraceIdRatioBased

import sdk_lines
from conftest import USER, Telemetry, aclient, client
from streamscope import AnthropicInstrumentor, Budgets
from streamscope.simulator import SCENARIOS, Scenario


def traceparent(span: ReadableSpan) -> str:
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def last_headers(sim: Any, count: int = 1) -> list[dict[str, str]]:
    return [log.headers for log in sim.requests[-count:]]


def read(c: anthropic.Anthropic, scenario_budgets: Any = None) -> None:
    for _ in c.messages.create(model="m", max_tokens=64, messages=USER, stream=True):
        pass
    c.close()


@pytest.mark.parametrize("budgets", [None, Budgets(first_token=5, idle=5)], ids=["observe-only", "budgets"])
def test_the_request_carries_the_spans_context(sim, instrument, budgets) -> None:
    telemetry = instrument(budgets=budgets)
    read(client(sim, "complete"))
    span = telemetry.one()
    (headers,) = last_headers(sim)
    assert headers["traceparent"] == traceparent(span)
    assert span.parent is None


def test_under_a_parent_span(sim, telemetry: Telemetry) -> None:
    with telemetry.provider.get_tracer("app").start_as_current_span("handler") as parent:
        read(client(sim, "complete"))
    span = telemetry.one()
    assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
    assert span.context.trace_id == parent.get_span_context().trace_id
    assert last_headers(sim)[0]["traceparent"] == traceparent(span)
    assert trace.get_current_span() is trace.INVALID_SPAN


def test_the_span_keeps_its_start_time(sim, telemetry: Telemetry) -> None:
    """The span starts when the request was sent (before the headers), not when it is written."""
    read(client(sim, "slow_answer"))
    span = telemetry.one()
    assert span.attributes["streamscope.time_to_headers"] < 0.2
    assert (span.end_time - span.start_time) / 1e9 >= 2.5  # the whole ~3 s answer


async def test_async_requests_carry_it_too(sim, telemetry: Telemetry) -> None:
    c = aclient(sim, "complete")
    async with c.messages.stream(model="m", max_tokens=64, messages=USER) as s:
        async for _ in s:
            pass
    await c.close()
    assert last_headers(sim)[0]["traceparent"] == traceparent(telemetry.one())


def test_every_retry_carries_the_same_context(sim, telemetry: Telemetry) -> None:
    # A scenario of its own: attempts are counted per scenario over the whole session.
    sim.add(Scenario("retried_context", SCENARIOS["http_529_then_ok"].attempts))
    first = len(sim.requests)
    read(client(sim, "retried_context", max_retries=2))
    span = telemetry.one()
    sent = [log.headers.get("traceparent") for log in sim.requests[first:]]
    assert len(sent) == 2 and set(sent) == {traceparent(span)}
    assert span.attributes["http.request.resend_count"] == 1


def test_the_sdks_propagation_switch(sim, telemetry: Telemetry, monkeypatch: pytest.MonkeyPatch) -> None:
    """The client option (anthropic >= 2.10, where the SDK traces itself) and the environment
    variable (on every line: streamscope reads it where the SDK sends no trace context itself)."""
    if sdk_lines.traces_itself():
        read(client(sim, "complete", open_telemetry={"propagation": False}))
        assert "traceparent" not in last_headers(sim)[0]
    monkeypatch.setenv("ANTHROPIC_OPEN_TELEMETRY_PROPAGATION", "false")  # read when a client is built
    read(client(sim, "complete"))
    assert "traceparent" not in last_headers(sim)[0]
    assert len(telemetry.spans()) == (2 if sdk_lines.traces_itself() else 1), "the span is written either way"


def test_a_client_with_the_sdks_spans_off_still_propagates(sim, telemetry: Telemetry) -> None:
    """`open_telemetry=False` turns the SDK's own spans off, not propagation: streamscope's span is
    there (on the lines before the SDK traced itself, a plain client: streamscope sends it)."""
    read(client(sim, "complete", **({"open_telemetry": False} if sdk_lines.traces_itself() else {})))
    assert last_headers(sim)[0]["traceparent"] == traceparent(telemetry.one())


@pytest.fixture
def no_propagators() -> Iterator[None]:
    before = propagate.get_global_textmap()
    propagate.set_global_textmap(CompositePropagator([]))
    yield
    propagate.set_global_textmap(before)


def test_registered_propagators_decide(sim, telemetry: Telemetry, no_propagators: None) -> None:
    read(client(sim, "complete"))
    assert "traceparent" not in last_headers(sim)[0]
    assert len(telemetry.spans()) == 1


def test_otel_propagators_from_the_environment(sim, tmp_path: Path) -> None:
    """`OTEL_PROPAGATORS=baggage` (read at start-up): no traceparent, the baggage goes."""
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import anthropic
        from opentelemetry import baggage, context
        from opentelemetry.sdk.trace import TracerProvider
        from streamscope import AnthropicInstrumentor
        AnthropicInstrumentor().instrument(tracer_provider=TracerProvider())
        token = context.attach(baggage.set_baggage("tenant", "t1"))
        c = anthropic.Anthropic(base_url={sim.url("complete")!r}, api_key="k", max_retries=0)
        messages = [{{"role": "user", "content": "hi"}}]
        for _ in c.messages.create(model="m", max_tokens=64, messages=messages, stream=True):
            pass
    """))
    first = len(sim.requests)
    env = {**os.environ, "OTEL_PROPAGATORS": "baggage"}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (headers,) = [log.headers for log in sim.requests[first:]]
    assert "traceparent" not in headers
    assert headers.get("baggage") == "tenant=t1"


def _session(sampler: Any) -> tuple[AnthropicInstrumentor, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=sampler)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    return instrumentor, exporter


def test_an_unsampled_span_still_propagates_its_decision(sim) -> None:
    instrumentor, exporter = _session(ALWAYS_OFF)
    try:
        read(client(sim, "complete"))
    finally:
        instrumentor.uninstrument()
    assert exporter.get_finished_spans() == ()
    _version, trace_id, span_id, flags = last_headers(sim)[0]["traceparent"].split("-")
    assert int(flags, 16) & 0x01 == 0 and int(trace_id, 16) and int(span_id, 16)


def test_the_sampler_decides_once(sim) -> None:
    """Half the traces sampled: the flag each request sent is the decision its span shows."""
    instrumentor, exporter = _session(ParentBased(TraceIdRatioBased(0.5)))
    first = len(sim.requests)
    try:
        for _ in range(24):
            read(client(sim, "complete"))
    finally:
        instrumentor.uninstrument()
    sent = [log.headers["traceparent"] for log in sim.requests[first:]]
    sampled = {tp for tp in sent if int(tp.rsplit("-", 1)[1], 16) & 0x01}
    exported = {traceparent(span) for span in exporter.get_finished_spans()}
    assert exported == sampled
    assert 0 < len(sampled) < len(sent)


class _OtherTracerProvider(trace.TracerProvider):
    """A tracer provider that is not the OpenTelemetry SDK's (as a vendor's may be): it hands out
    a tracer of its own that delegates to the SDK's."""

    def __init__(self, inner: TracerProvider) -> None:
        self.inner = inner

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _OtherTracer(self.inner.get_tracer(*args, **kwargs))


class _OtherTracer(trace.Tracer):
    def __init__(self, inner: trace.Tracer) -> None:
        self.inner = inner

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        return self.inner.start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.start_as_current_span(*args, **kwargs)


def test_another_tracer_gets_its_span_started_at_the_request(sim) -> None:
    exporter = InMemorySpanExporter()
    inner = TracerProvider()
    inner.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=_OtherTracerProvider(inner))
    try:
        read(client(sim, "complete"))
    finally:
        instrumentor.uninstrument()
    (span,) = exporter.get_finished_spans()
    assert last_headers(sim)[0]["traceparent"] == traceparent(span)
    assert span.attributes["streamscope.class"] == "complete"
