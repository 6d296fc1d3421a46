"""Another library on the request path, as tracing libraries put themselves there.

Logfire's `instrument_anthropic()` sets its own `request` on the client classes, bound to the
method it found; `instrument_anthropic(client)` sets it on one client instance; and around the
SDK's method it turns on OpenTelemetry's "suppress instrumentation" flag, which its own tracer
honours. The peers themselves run beside streamscope in tests/peers (each in its own
environment); here the same three shapes are written out in a few lines, so that the main suite
shows what streamscope does with each: goes around the class-level one, records the instance-level
one where the SDK sends it (the HTTP client's `send`; where nothing sees it, names and counts it:
once-per-process warning, `streamscope.unobserved_calls`), and records its span whatever the flag
says.
"""

from __future__ import annotations

import functools
import gc
import logging
import types
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import pytest
from opentelemetry import trace
from opentelemetry.context import attach, detach, set_value
from opentelemetry.instrumentation.utils import is_instrumentation_enabled, suppress_instrumentation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import streamscope
from conftest import USER, Telemetry, aclient, client
from streamscope import AnthropicInstrumentor, StreamTimeout
from streamscope.adapters.stainless.other_libraries import OTHER, taken_by
from streamscope.simulator import Simulator


def _peer_request(original: Callable[..., Any], calls: list[str], suppress: bool = False) -> Callable[..., Any]:
    """A request method in front of `original`, as a tracing library writes one (`functools.wraps`)."""

    @functools.wraps(original)
    def request(*args: Any, **kwargs: Any) -> Any:
        calls.append("peer")
        if not suppress:
            return original(*args, **kwargs)
        with suppress_instrumentation():
            return original(*args, **kwargs)

    return request


@pytest.fixture
def class_level() -> Iterator[Callable[..., list[str]]]:
    """Put a peer's `request` on `anthropic.Anthropic` / `AsyncAnthropic`; take it off afterwards."""
    put: list[type] = []

    def install(suppress: bool = False) -> list[str]:
        calls: list[str] = []
        for cls in (anthropic.Anthropic, anthropic.AsyncAnthropic):
            cls.request = _peer_request(cls.request, calls, suppress)  # type: ignore[method-assign]
            put.append(cls)
        return calls

    yield install
    for cls in put:
        if "request" in cls.__dict__:
            delattr(cls, "request")


def _text(stream: Any) -> str:
    return "".join(e.delta.text for e in stream if e.type == "content_block_delta" and e.delta.type == "text_delta")


def test_a_peer_request_on_the_client_class_before_streamscope_is_gone_around(
        sim: Simulator, instrument: Callable[..., Telemetry], class_level: Callable[..., list[str]]) -> None:
    calls = class_level()
    plain = _text(client(sim, "complete").messages.create(model="m", max_tokens=64, messages=USER, stream=True))
    telemetry = instrument(budgets=streamscope.Budgets(first_token=5.0, idle=1.0, deadline=30.0))

    text = _text(client(sim, "complete").messages.create(model="m", max_tokens=64, messages=USER, stream=True))
    assert text == plain and calls == ["peer", "peer"]
    assert telemetry.attrs()["streamscope.class"] == "complete"

    telemetry.exporter.clear()
    with pytest.raises(StreamTimeout) as fired:  # the budgets hold too: the stall is cut at the idle budget
        with client(sim, "pinging_stall").messages.stream(model="m", max_tokens=64, messages=USER) as stream:
            for _ in stream:
                pass
    assert fired.value.budget == "idle"
    assert telemetry.attrs()["streamscope.class"] == "stalled_mid_stream"
    telemetry.assert_each_ended_once()


async def test_a_peer_request_on_the_async_client_class_before_streamscope_is_gone_around(
        sim: Simulator, telemetry: Telemetry, class_level: Callable[..., list[str]]) -> None:
    AnthropicInstrumentor().uninstrument()
    calls = class_level()
    AnthropicInstrumentor().instrument(tracer_provider=telemetry.provider)
    async with aclient(sim, "complete").messages.stream(model="m", max_tokens=64, messages=USER) as stream:
        async for _ in stream:
            pass
    assert calls == ["peer"]
    assert telemetry.attrs()["streamscope.class"] == "complete"


def test_a_peer_request_after_streamscope_runs_through_it_once(
        sim: Simulator, telemetry: Telemetry, class_level: Callable[..., list[str]]) -> None:
    calls = class_level()
    with client(sim, "complete").messages.stream(model="m", max_tokens=64, messages=USER) as stream:
        assert stream.get_final_text()
    assert calls == ["peer"]
    assert len(telemetry.spans()) == 1


class _HonoursSuppression(trace.TracerProvider):
    """A provider whose tracer records nothing while instrumentation is suppressed (Logfire's does)."""

    def __init__(self, inner: TracerProvider) -> None:
        self.inner = inner

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return _SuppressibleTracer(self.inner.get_tracer(*args, **kwargs))


class _SuppressibleTracer(trace.Tracer):
    def __init__(self, inner: trace.Tracer) -> None:
        self.inner = inner

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        from opentelemetry.context import get_value

        if not is_instrumentation_enabled() or get_value("suppress_instrumentation"):
            return trace.INVALID_SPAN
        return self.inner.start_span(*args, **kwargs)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.start_as_current_span(*args, **kwargs)


@pytest.mark.parametrize("key", ["suppress_instrumentation", "api key"])
def test_streamscope_span_is_recorded_inside_a_peer_suppression(
        sim: Simulator, class_level: Callable[..., list[str]], key: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    on = AnthropicInstrumentor()
    on.instrument(tracer_provider=_HonoursSuppression(provider))
    try:
        if key == "api key":  # the key OpenTelemetry's API creates, set by the peer's own context manager
            calls = class_level(suppress=True)
        else:  # the plain string older instrumentations set
            calls = []
            original = anthropic.Anthropic.request

            def request(*args: Any, **kwargs: Any) -> Any:
                calls.append("peer")
                token = attach(set_value("suppress_instrumentation", True))
                try:
                    return original(*args, **kwargs)
                finally:
                    detach(token)

            anthropic.Anthropic.request = request  # type: ignore[method-assign]
        with client(sim, "complete").messages.stream(model="m", max_tokens=64, messages=USER) as stream:
            for _ in stream:
                pass
        spans = [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "streamscope"]
        assert calls == ["peer"]
        assert [dict(s.attributes or {}).get("streamscope.class") for s in spans] == ["complete"]
    finally:
        on.uninstrument()
        if "request" in anthropic.Anthropic.__dict__:
            delattr(anthropic.Anthropic, "request")


def _unobserved(reader: InMemoryMetricReader) -> list[tuple[dict[str, Any], int]]:
    data = reader.get_metrics_data()
    return [(dict(p.attributes or {}), p.value)
            for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics for m in sm.metrics
            if m.name == "streamscope.unobserved_calls" for p in m.data.data_points]


def test_a_peer_request_on_a_client_instance_is_still_observed(
        sim: Simulator, instrument: Callable[..., Telemetry], caplog: pytest.LogCaptureFixture) -> None:
    """The peer's `request` calls the SDK without streamscope's request hook, but the SDK still
    sends through the HTTP client's `send`: the call is recorded there (one span, its class), and
    nothing is counted as unobserved."""
    calls: list[str] = []
    taken = client(sim, "complete")
    taken.request = _peer_request(taken.request, calls)  # type: ignore[method-assign]
    reader = InMemoryMetricReader()
    telemetry = instrument(meter_provider=MeterProvider(metric_readers=[reader]))
    texts = [_text(taken.messages.create(model="m", max_tokens=64, messages=USER, stream=True)) for _ in range(2)]
    assert texts[0] and texts[0] == texts[1] and calls == ["peer", "peer"]  # the caller gets it all
    assert [s.attributes["streamscope.class"] for s in telemetry.spans()] == ["complete", "complete"]
    telemetry.assert_each_ended_once()
    assert _unobserved(reader) == []


def test_a_peer_request_nothing_else_sees_is_counted_and_said_once(
        sim: Simulator, instrument: Callable[..., Telemetry], caplog: pytest.LogCaptureFixture) -> None:
    """Where nothing on the way sees the call (here: the HTTP client's hooks off, as for a client
    streamscope does not hook), its stream reaches the stream hooks without its call: counted,
    the library named, said once."""
    import streamscope.pipeline

    streamscope.pipeline._WARNED_UNOBSERVED.clear()
    calls: list[str] = []
    taken = client(sim, "complete")
    taken.request = _peer_request(taken.request, calls)  # type: ignore[method-assign]
    reader = InMemoryMetricReader()
    telemetry = instrument(meter_provider=MeterProvider(metric_readers=[reader]))
    adapter = AnthropicInstrumentor()._adapter
    assert adapter is not None and adapter.posted
    for posted in adapter.posted:
        posted.active = False
    caplog.set_level(logging.WARNING, logger="streamscope")

    texts = [_text(taken.messages.create(model="m", max_tokens=64, messages=USER, stream=True)) for _ in range(2)]
    assert texts[0] and texts[0] == texts[1] and calls == ["peer", "peer"]  # the caller gets it all
    assert telemetry.spans() == []
    assert _unobserved(reader) == [({"gen_ai.provider.name": "anthropic", "streamscope.unobserved.by": OTHER}, 2)]
    said = [r.getMessage() for r in caplog.records if "unobserved" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("streamscope: a streamed anthropic call went through another "
                                                 "library's request method"), said

    # A client the peer did not touch: observed, nothing more counted.
    _text(client(sim, "complete").messages.create(model="m", max_tokens=64, messages=USER, stream=True))
    assert len(telemetry.spans()) == 1
    assert _unobserved(reader)[0][1] == 2


def _from_package(package: str, calls: list[str], original: Callable[..., Any]) -> Callable[..., Any]:
    """A request method whose code runs in a module of `package` (what `taken_by` reads)."""
    namespace = {"__name__": f"{package}.contrib.anthropic", "original": original, "calls": calls}
    exec("def request(*args, **kwargs):\n    calls.append('peer')\n    return original(*args, **kwargs)\n",
         namespace)
    found = namespace["request"]
    assert isinstance(found, types.FunctionType)
    return found


@pytest.mark.parametrize(("package", "named"), [("ddtrace", "ddtrace"), ("logfire", "logfire"),
                                                 ("somecorp_tracing", OTHER)])
def test_the_library_is_named_from_where_its_code_runs(sim: Simulator, instrument: Callable[..., Telemetry],
                                                        package: str, named: str) -> None:
    calls: list[str] = []
    taken = client(sim, "complete")
    taken.request = functools.wraps(taken.request)(  # type: ignore[method-assign]
        _from_package(package, calls, taken.request))
    instrument()
    stream = taken.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    adapter = AnthropicInstrumentor()._adapter  # the installed hooks: `is_ours` knows them
    assert adapter is not None
    assert taken_by(stream, adapter.client.is_ours) == named
    assert calls == ["peer"]
    _text(stream)
    plain = client(sim, "complete").messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    assert taken_by(plain, adapter.client.is_ours) is None
    _text(plain)


class _Frozen(type):
    """A class whose `request` cannot be replaced: no wrapper can be put on it."""

    def __setattr__(cls, name: str, value: Any) -> None:
        if name == "request":
            raise TypeError(f"{cls.__name__} is frozen")
        super().__setattr__(name, value)


def test_a_client_class_that_cannot_be_gone_around_leaves_streamscope_on(
        sim: Simulator, instrument: Callable[..., Telemetry], caplog: pytest.LogCaptureFixture) -> None:
    calls: list[str] = []

    class Frozen(anthropic.Anthropic, metaclass=_Frozen):
        request = _peer_request(anthropic.Anthropic.request, calls)

    caplog.set_level(logging.WARNING, logger="streamscope")
    telemetry = instrument()
    said = [r.getMessage() for r in caplog.records if "cannot go around" in r.getMessage()]
    assert len(said) == 1 and "Frozen.request (TypeError: Frozen is frozen)" in said[0], said
    _text(client(sim, "complete").messages.create(model="m", max_tokens=64, messages=USER, stream=True))
    assert telemetry.attrs()["streamscope.class"] == "complete"  # every other client is observed
    frozen = Frozen(base_url=sim.url("complete"), api_key="test-key", max_retries=0)
    assert _text(frozen.messages.create(model="m", max_tokens=64, messages=USER, stream=True))
    # Its calls: the caller's as ever, and still recorded where the SDK sends them (the HTTP client's `send`).
    assert calls == ["peer"] and [s.attributes["streamscope.class"] for s in telemetry.spans()] == ["complete"] * 2
    del frozen, Frozen
    gc.collect()  # gone from the SDK's subclasses before the next test instruments
    assert not any(c.__name__ == "Frozen" for c in anthropic.Anthropic.__subclasses__())
