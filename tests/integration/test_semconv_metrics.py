"""The GenAI client metrics as the conventions stand: today's names and the opt-in's.

The real SDKs (anthropic and openai) against the embedded simulator, the real OpenTelemetry SDK
with an in-memory reader, once without `OTEL_SEMCONV_STABILITY_OPT_IN` and once with
`gen_ai_latest_experimental` in it (set before `instrument()`, which reads it once): names,
units, instrument kinds, bucket boundaries, attributes, `time_per_output_chunk`'s count per
stream (content events - 1), and that the opt-in changes names and nothing else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    NumberDataPoint,
    Sum,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streamscope import AnthropicInstrumentor, OpenAIInstrumentor
from streamscope.export import metric_definitions as D
from streamscope.export import metrics as M
from streamscope.simulator import Simulator

USER = [{"role": "user", "content": "How do streams fail?"}]
THINKING = {"type": "enabled", "budget_tokens": 4096}
ANTHROPIC = [("complete", {}), ("complete", {}), ("thinking", {"thinking": THINKING}), ("truncated", {}),
             ("inband_error", {}), ("cut_connection", {})]
OPENAI = ["chat_complete", "chat_tool_call", "chat_inband_error", "responses_complete"]
OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"

COMMON = {"gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model",
          "server.address", "server.port", "streamscope.route"}
# name -> (kind, unit, boundaries or None, attribute keys beyond COMMON)
CURRENT = {
    "gen_ai.client.operation.duration": ("histogram", "s", D.SEMCONV_DURATION_BUCKETS, {"error.type"}),
    "gen_ai.client.operation.time_to_first_chunk": ("histogram", "s", D.SEMCONV_DURATION_BUCKETS, set()),
    "gen_ai.client.operation.time_per_output_chunk": ("histogram", "s", D.SEMCONV_DURATION_BUCKETS, set()),
    "gen_ai.client.token.usage": ("histogram", "{token}", D.SEMCONV_TOKEN_BUCKETS, {"gen_ai.token.type"}),
}
LATEST = {
    "gen_ai.client.inference.duration": ("histogram", "s", D.SEMCONV_DURATION_BUCKETS, {"error.type"}),
    "gen_ai.client.inference.time_to_first_chunk": ("histogram", "s", D.SEMCONV_DURATION_BUCKETS, set()),
    "gen_ai.client.inference.time_per_output_chunk": ("histogram", "s", D.SEMCONV_DURATION_BUCKETS, set()),
    "gen_ai.client.inference.usage.input_tokens": ("counter", "{token}", None, {"gen_ai.token.modality"}),
    "gen_ai.client.inference.usage.output_tokens": ("counter", "{token}", None, {"gen_ai.token.modality"}),
    "gen_ai.client.inference.usage.reasoning.output_tokens": ("counter", "{token}", None, {"gen_ai.token.modality"}),
    "gen_ai.client.inference.usage.cache_read.input_tokens": ("counter", "{token}", None, {"gen_ai.token.modality"}),
    "gen_ai.client.inference.usage.cache_write.input_tokens": ("counter", "{token}", None, {"gen_ai.token.modality"}),
    "gen_ai.client.inference.operation.input_tokens": ("histogram", "{token}", D.SEMCONV_TOKEN_BUCKETS, set()),
    "gen_ai.client.inference.operation.output_tokens": ("histogram", "{token}", D.SEMCONV_TOKEN_BUCKETS, set()),
}
RENAMED = {
    "gen_ai.client.operation.duration": "gen_ai.client.inference.duration",
    "gen_ai.client.operation.time_to_first_chunk": "gen_ai.client.inference.time_to_first_chunk",
    "gen_ai.client.operation.time_per_output_chunk": "gen_ai.client.inference.time_per_output_chunk",
}


@pytest.fixture(scope="module")
def simulator() -> Iterator[Simulator]:
    with Simulator() as sim:  # both providers' scenarios
        yield sim


@dataclass
class Run:
    metrics: dict[str, Any]  # name -> Metric (the SDK's), streamscope's scope only
    spans: list[dict[str, Any]]


def collect(sim: Simulator, monkeypatch: pytest.MonkeyPatch, opt_in: str | None) -> Run:
    """Every scenario once through both SDKs, with `OTEL_SEMCONV_STABILITY_OPT_IN` as given."""
    if opt_in is None:
        monkeypatch.delenv(OPT_IN, raising=False)
    else:
        monkeypatch.setenv(OPT_IN, opt_in)
    exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(exporter))
    meter = MeterProvider(metric_readers=[reader])
    instrumentors = [AnthropicInstrumentor(), OpenAIInstrumentor()]
    try:
        for instrumentor in instrumentors:
            instrumentor.instrument(tracer_provider=tracer, meter_provider=meter)
        monkeypatch.delenv(OPT_IN, raising=False)  # read once at instrument(): a later change is ignored
        for scenario, extra in ANTHROPIC:
            a = anthropic.Anthropic(base_url=sim.url(scenario), api_key="k", max_retries=0)
            params = {"model": "claude-sim-1", "max_tokens": 8192 if extra else 1024, "messages": USER, **extra}
            with contextlib.suppress(Exception):
                for _ in a.messages.create(stream=True, **params):
                    pass
        for scenario in OPENAI:
            o = openai.OpenAI(base_url=sim.openai_url(scenario), api_key="k", max_retries=0, timeout=15)
            with contextlib.suppress(Exception):
                if scenario.startswith("responses"):
                    for _ in o.responses.create(model="gpt-sim", input="How do streams fail?", stream=True):
                        pass
                else:
                    for _ in o.chat.completions.create(model="gpt-sim", messages=USER, stream=True,  # type: ignore[arg-type]
                                                       stream_options={"include_usage": True}):
                        pass
    finally:
        for instrumentor in instrumentors:
            if instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.uninstrument()
    found: dict[str, Any] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else ():
        for sm in rm.scope_metrics:
            if sm.scope.name == "streamscope":
                for metric in sm.metrics:
                    found[metric.name] = metric
    meter.shutdown()
    spans = [dict(s.attributes or {}) for s in exporter.get_finished_spans()
             if s.instrumentation_scope.name == "streamscope"]
    assert len(spans) == len(ANTHROPIC) + len(OPENAI)
    return Run(found, spans)


@pytest.fixture(scope="module")
def runs(simulator: Simulator) -> dict[str, Run]:
    """Both runs once per module: off (no variable), on (the opt-in among other values)."""
    with pytest.MonkeyPatch.context() as mp:
        return {
            "off": collect(simulator, mp, None),
            "on": collect(simulator, mp, "http, gen_ai_latest_experimental"),
        }


def kind(metric: Any) -> str:
    if isinstance(metric.data, HistogramData):
        return "histogram"
    assert isinstance(metric.data, Sum) and metric.data.is_monotonic, metric.name
    return "counter"


def points(run: Run, name: str) -> list[Any]:
    return list(run.metrics[name].data.data_points) if name in run.metrics else []


def total(run: Run, name: str, **match: Any) -> float:
    """Histogram sums (or counter values) over the points matching `match` (`__` for `.`)."""
    out = 0.0
    for p in points(run, name):
        attrs = dict(p.attributes)
        if all(attrs.get(k.replace("__", ".")) == v for k, v in match.items()):
            out += p.sum if isinstance(p, HistogramDataPoint) else p.value
    return out


def count(run: Run, name: str) -> int:
    return sum(p.count for p in points(run, name))


@pytest.mark.parametrize(("mode", "expected"), [("off", CURRENT), ("on", LATEST)])
def test_names_units_kinds_boundaries_and_attributes(runs: dict[str, Run], mode: str,
                                                     expected: dict[str, Any]) -> None:
    run = runs[mode]
    gen_ai = {name for name in run.metrics if name.startswith("gen_ai.")}
    assert gen_ai == set(expected), mode
    for name, (want_kind, unit, boundaries, extra) in expected.items():
        metric = run.metrics[name]
        assert kind(metric) == want_kind, name
        assert metric.unit == unit, name
        for p in metric.data.data_points:
            assert set(p.attributes) <= COMMON | extra, (name, dict(p.attributes))
            assert {"gen_ai.operation.name", "gen_ai.provider.name"} <= set(p.attributes), name
            if boundaries is not None:
                assert isinstance(p, HistogramDataPoint)
                assert tuple(p.explicit_bounds) == boundaries, name
            else:
                assert isinstance(p, NumberDataPoint)
    providers = {dict(p.attributes)["gen_ai.provider.name"]
                 for p in points(run, "gen_ai.client." + ("inference" if mode == "on" else "operation") + ".duration")}
    assert providers == {"anthropic", "openai"}


def test_token_type_becomes_modality(runs: dict[str, Run]) -> None:
    off, on = runs["off"], runs["on"]
    assert {dict(p.attributes)["gen_ai.token.type"] for p in points(off, "gen_ai.client.token.usage")} == {
        "input", "output"}
    for name in LATEST:
        for p in points(on, name):
            assert "gen_ai.token.type" not in p.attributes, name
    assert {dict(p.attributes)["gen_ai.token.modality"]
            for p in points(on, "gen_ai.client.inference.usage.input_tokens")} == {M.INPUT_MODALITY}
    assert {dict(p.attributes)["gen_ai.token.modality"]
            for p in points(on, "gen_ai.client.inference.usage.output_tokens")} == {M.OUTPUT_MODALITY}
    for name in ("cache_read", "cache_write"):  # input-side, as the span's cache counts
        assert {dict(p.attributes)["gen_ai.token.modality"]
                for p in points(on, f"gen_ai.client.inference.usage.{name}.input_tokens")} == {M.INPUT_MODALITY}


@pytest.mark.parametrize("mode", ["off", "on"])
def test_time_per_output_chunk_is_content_events_minus_one(runs: dict[str, Run], mode: str) -> None:
    run = runs[mode]
    name = "gen_ai.client." + ("inference" if mode == "on" else "operation") + ".time_per_output_chunk"
    per_provider: dict[str, int] = {}
    for span in run.spans:
        events = int(span.get("streamscope.content_events", 0))
        provider = span["gen_ai.provider.name"]
        per_provider[provider] = per_provider.get(provider, 0) + max(events - 1, 0)
    got: dict[str, int] = {}
    for p in points(run, name):
        provider = dict(p.attributes)["gen_ai.provider.name"]
        got[provider] = got.get(provider, 0) + p.count
        assert p.min >= 0.0
    assert got == per_provider
    assert per_provider["anthropic"] > 20 and per_provider["openai"] > 10  # many chunks, both providers
    # No gap is longer than the stream's largest one (`streamscope.max_gap`, the same clock) by more
    # than what a thinking phase adds (gaps before the first text are not in max_gap).
    assert max(p.max for p in points(run, name)) < 81.92


def test_the_opt_in_changes_names_and_nothing_else(runs: dict[str, Run]) -> None:
    off, on = runs["off"], runs["on"]
    # streamscope's own instruments: the same set either way.
    assert {n for n in off.metrics if n.startswith("streamscope.")} == {
        n for n in on.metrics if n.startswith("streamscope.")}
    # Renamed histograms: the same counts and attribute sets; sums within timing noise (two runs).
    for old, new in RENAMED.items():
        a, b = points(off, old), points(on, new)
        assert sorted(sorted(dict(p.attributes).items()) for p in a) == sorted(
            sorted(dict(p.attributes).items()) for p in b), old
        assert sorted(p.count for p in a) == sorted(p.count for p in b), old
    # Tokens: the histogram's sums by type are the counters' totals (the same streams, exactly).
    for direction in ("input", "output"):
        before = total(off, "gen_ai.client.token.usage", gen_ai__token__type=direction)
        after = total(on, f"gen_ai.client.inference.usage.{direction}_tokens")
        assert before == after > 0, direction
    # Per-operation histograms: successful operations only (the conventions' clarification), so
    # their counts are the streams without error.type that reported that usage.
    ok = [s for s in on.spans if "error.type" not in s]
    assert count(on, "gen_ai.client.inference.operation.input_tokens") == sum(
        1 for s in ok if "gen_ai.usage.input_tokens" in s)
    assert total(on, "gen_ai.client.inference.operation.output_tokens") == sum(
        int(s["gen_ai.usage.output_tokens"]) for s in ok if "gen_ai.usage.output_tokens" in s)
    # Reasoning: the counter carries what streamscope.usage.reasoning_tokens records.
    assert total(on, "gen_ai.client.inference.usage.reasoning.output_tokens") == total(
        on, "streamscope.usage.reasoning_tokens") > 0


def test_the_variable_is_read_at_instrument_time(monkeypatch: pytest.MonkeyPatch) -> None:
    reader = InMemoryMetricReader()
    monkeypatch.setenv(OPT_IN, "gen_ai_latest_experimental")
    writer = M.MetricsWriter(MeterProvider(metric_readers=[reader]).get_meter("t"))
    monkeypatch.delenv(OPT_IN)
    assert writer.latest and writer.token_usage is None and writer.input_tokens is not None
    assert not M.gen_ai_latest({OPT_IN: "gen_ai_latest"}) and not M.gen_ai_latest({})
    assert M.gen_ai_latest({OPT_IN: "database,gen_ai_latest_experimental"})
