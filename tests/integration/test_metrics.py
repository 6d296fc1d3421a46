"""Metrics from the recorder, read back with the SDK's own InMemoryMetricReader: counts per class,
per budget fired and per `partial`; histogram counts and boundaries; the cardinality guard; the
extra instruments the dashboards use. Every stream runs through the real SDK over loopback."""

from __future__ import annotations

import contextlib
import math
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

import streamscope
import streamscope.core.guard as internal
from conftest import USER, Telemetry, client
from streamscope import Budgets
from streamscope.export import metric_definitions as M
from streamscope.export.cardinality import CardinalityGuard

THINKING = {"type": "enabled", "budget_tokens": 4096}
BUDGETS = {
    "route:budgeted": Budgets(first_token=0.8, idle=0.3, deadline=3.0),
    "route:deadline": Budgets(deadline=0.8),
}
# (scenario, route, request extras, expected class, partial, budget fired)
MIX: list[tuple[str, str | None, dict[str, Any], str, bool, str | None]] = [
    ("complete", None, {}, "complete", False, None),
    ("complete", None, {}, "complete", False, None),
    ("thinking", None, {"thinking": THINKING}, "complete", False, None),
    ("truncated", None, {}, "truncated", False, None),
    ("refused", None, {}, "refused", False, None),
    ("inband_error", None, {}, "upstream_error", True, None),
    ("cut_connection", None, {}, "upstream_error", True, None),
    ("incomplete", None, {}, "upstream_error", True, None),
    ("http_529", None, {}, "upstream_error", False, None),
    ("timed_silent_start", "budgeted", {}, "stalled_before_first_content", False, "first_token"),
    ("timed_pinging_stall", "budgeted", {}, "stalled_mid_stream", True, "idle"),
    ("slow_thinking", "deadline", {"thinking": THINKING}, "deadline_in_thinking", False, "deadline"),
    ("silently_unverified", None, {"thinking": THINKING}, "silently_unverified", False, None),
    ("budget_exhausted", None, {"thinking": THINKING}, "budget_exhausted", False, None),
    ("slow_answer", None, {}, "cancelled", True, None),  # the caller breaks out at the first text
]
STREAMSCOPE_KEYS = {"gen_ai.provider.name", "gen_ai.request.model", "streamscope.route"}
EXTRA_KEYS = {
    "streamscope.requests": {"streamscope.class", "streamscope.partial", "streamscope.failure.code"},
    "streamscope.budget.firings": {"streamscope.budget"},
    "streamscope.budget.limit": {"streamscope.budget"},
    "streamscope.cost": {"streamscope.class", "streamscope.partial", "streamscope.cost.estimated"},
    # The fleet's instruments have no call of their own (a buffer kept by another test of this
    # process is reported too): their documented attributes only.
    "streamscope.relay.buffer.size": {"streamscope.buffer.backend"},
    "streamscope.relay.resumes": {"streamscope.resume.outcome"},
    "streamscope.store.errors": {"streamscope.store.operation", "streamscope.store.problem"},
    "streamscope.relay.streams": {"streamscope.relay.outcome", "streamscope.failure.code", "streamscope.partial",
                                  "http.response.status_code"},
}
SEMCONV_KEYS = {
    "gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.model",
    "server.address", "server.port", "streamscope.route",
}
SEMCONV_EXTRA = {
    "gen_ai.client.operation.duration": {"error.type"},
    "gen_ai.client.token.usage": {"gen_ai.token.type"},
    "gen_ai.client.operation.time_to_first_chunk": set(),
    "gen_ai.client.operation.time_per_output_chunk": set(),
}
BOUNDARIES = {
    "gen_ai.client.operation.duration": M.SEMCONV_DURATION_BUCKETS,
    "gen_ai.client.operation.time_to_first_chunk": M.SEMCONV_DURATION_BUCKETS,
    "gen_ai.client.operation.time_per_output_chunk": M.SEMCONV_DURATION_BUCKETS,
    "gen_ai.client.token.usage": M.SEMCONV_TOKEN_BUCKETS,
    "streamscope.time_to_headers": M.TIME_TO_HEADERS_BUCKETS,
    "streamscope.time_to_first_content": M.TIME_TO_FIRST_CONTENT_BUCKETS,
    "streamscope.thinking.duration": M.THINKING_DURATION_BUCKETS,
    "streamscope.max_gap": M.MAX_GAP_BUCKETS,
    "streamscope.decode_rate": M.DECODE_RATE_BUCKETS,
    "streamscope.thinking.budget_used": M.BUDGET_USED_BUCKETS,
    "streamscope.usage.reasoning_tokens": M.REASONING_TOKENS_BUCKETS,
}


class Metrics:
    """The streamscope scope's data points, by instrument name, as the reader holds them now."""

    def __init__(self, reader: InMemoryMetricReader) -> None:
        self.by_name: dict[str, list[Any]] = {}
        data = reader.get_metrics_data()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                if sm.scope.name != "streamscope":
                    continue
                for metric in sm.metrics:
                    self.by_name.setdefault(metric.name, []).extend(metric.data.data_points)

    def points(self, name: str) -> list[Any]:
        return self.by_name.get(name, [])

    def total(self, name: str, **match: Any) -> float:
        """Sum of counter values (or histogram counts) over points whose attributes match."""
        out = 0.0
        for p in self.points(name):
            attrs = dict(p.attributes)
            if all(attrs.get(k.replace("__", ".")) == v for k, v in match.items()):
                out += p.count if isinstance(p, HistogramDataPoint) else p.value
        return out

    def by(self, name: str, *keys: str) -> Counter:
        """Counter values (or histogram counts) grouped by the given attribute keys."""
        out: Counter = Counter()
        for p in self.points(name):
            attrs = dict(p.attributes)
            value = p.count if isinstance(p, HistogramDataPoint) else p.value
            if value:
                out[tuple(attrs.get(k) for k in keys)] += value
        return out


def run(sim, scenario: str, route: str | None, extra: dict[str, Any], model: str = "claude-sim-1") -> None:
    """One streamed call through the real SDK, consumed the way a caller would."""
    params = {"model": model, "max_tokens": 8192 if "thinking" in extra else 1024, "messages": USER, **extra}
    c = client(sim, scenario)
    with streamscope.route(route) if route else contextlib.nullcontext():
        try:
            if scenario == "slow_answer":
                with c.messages.stream(**params) as stream:
                    for event in stream:
                        if event.type == "text":
                            break
                return
            for _ in c.messages.create(stream=True, **params):
                pass
        except Exception:  # the scenario's own failure (APIError, StreamTimeout, a transport error)
            pass


@pytest.fixture
def metered(instrument) -> Iterator[tuple[Any, InMemoryMetricReader]]:
    """`start(**kwargs)` turns streamscope on with an in-memory span exporter (conftest) and an
    in-memory metric reader; returns (telemetry, reader)."""
    providers: list[MeterProvider] = []

    def start(**kwargs: Any) -> tuple[Telemetry, InMemoryMetricReader]:
        reader = InMemoryMetricReader()
        provider = MeterProvider(metric_readers=[reader])
        providers.append(provider)
        return instrument(meter_provider=provider, **kwargs), reader

    yield start
    for provider in providers:
        provider.shutdown()


def test_the_scenario_mix(sim, metered) -> None:
    telemetry, reader = metered(budgets=BUDGETS)
    for scenario, route, extra, *_ in MIX:
        run(sim, scenario, route, extra)
    m = Metrics(reader)
    spans = telemetry.spans()
    assert len(spans) == len(MIX)
    span_attrs = [dict(s.attributes) for s in spans]

    # Requests per class and partial: what the mix scripts, and what the spans say.
    want = Counter((label, partial) for *_, label, partial, _ in MIX)
    assert m.by("streamscope.requests", "streamscope.class", "streamscope.partial") == want
    assert Counter((a["streamscope.class"], a["streamscope.partial"]) for a in span_attrs) == want
    # Failure codes: the span's, counted; none for the answers and for the caller that left.
    codes = Counter((a.get("streamscope.failure.code"),) for a in span_attrs)
    assert m.by("streamscope.requests", "streamscope.failure.code") == codes
    assert codes == Counter({(None,): 8, ("upstream_unavailable",): 2, ("upstream_unreachable",): 2,
                             ("upstream_timeout",): 3})
    # Budget firings.
    want_fired = Counter((fired,) for *_, fired in MIX if fired)
    assert m.by("streamscope.budget.firings", "streamscope.budget") == want_fired
    assert sum(want_fired.values()) == 3
    # Nothing left in flight.
    assert {p.value for p in m.points("streamscope.active_streams")} == {0}

    # Histogram counts: one observation per stream that has the quantity.
    def having(key: str) -> int:
        return sum(1 for a in span_attrs if key in a)

    assert m.total("gen_ai.client.operation.duration") == len(MIX)
    assert m.total("gen_ai.client.operation.time_to_first_chunk") == having("gen_ai.response.time_to_first_chunk")
    assert m.total("streamscope.time_to_headers") == having("streamscope.time_to_headers")
    assert m.total("streamscope.time_to_first_content") == having("streamscope.time_to_first_content")
    assert m.total("streamscope.max_gap") == having("streamscope.max_gap")
    assert m.total("streamscope.thinking.duration") == sum(
        1 for a in span_attrs if "streamscope.thinking.start" in a and "streamscope.thinking.end" in a)
    # Output-side usage instruments count streams that delivered their final usage only; input
    # tokens every stream whose message_start arrived (billed, even when cut later), as the span.
    finished = [a for a in span_attrs if a["gen_ai.response.finish_reasons"] != ("error",)]
    assert len(finished) == 7
    started = [a for a in span_attrs if "gen_ai.response.time_to_first_chunk" in a]
    assert len(started) > len(finished)  # cut streams that got their first event are billed too
    assert [a for a in span_attrs if "gen_ai.usage.input_tokens" in a] == started
    assert m.total("gen_ai.client.token.usage", gen_ai__token__type="input") == len(started)
    assert m.total("gen_ai.client.token.usage", gen_ai__token__type="output") == len(finished)
    assert m.total("streamscope.decode_rate") == sum(1 for a in finished if "streamscope.decode_rate" in a)
    # thinking, silently_unverified, budget_exhausted (slow_thinking's deadline fired before its usage)
    assert m.total("streamscope.usage.reasoning_tokens") == 3
    assert m.total("streamscope.thinking.budget_used") == 3

    # Values, not only counts.
    duration_sum = sum(p.sum for p in m.points("gen_ai.client.operation.duration"))
    assert duration_sum == pytest.approx(sum((s.end_time - s.start_time) / 1e9 for s in spans), abs=1e-3 * len(MIX))
    tokens = m.points("gen_ai.client.token.usage")
    input_sum = sum(p.sum for p in tokens if p.attributes["gen_ai.token.type"] == "input")
    assert input_sum == sum(a["gen_ai.usage.input_tokens"] for a in started)
    by_error = m.by("gen_ai.client.operation.duration", "error.type")
    assert by_error == Counter((a.get("error.type"),) for a in span_attrs)
    assert by_error[("timeout",)] == 3 and by_error[("cancelled",)] == 1 and by_error[(None,)] == 7

    # Reasoning tokens / budget_tokens where the scripted usage puts it: thinking 120, budget_exhausted
    # 1020, silently_unverified 4000 (>= 95 %: the only one above the 0.95 boundary).
    [used] = m.points("streamscope.thinking.budget_used")
    assert used.sum == pytest.approx((120 + 1020 + 4000) / 4096)
    bounds = list(M.BUDGET_USED_BUCKETS)
    assert used.bucket_counts[bounds.index(0.1)] == 1  # 0.03 in (0, 0.1]
    assert used.bucket_counts[bounds.index(0.3)] == 1  # 0.25 in (0.2, 0.3]
    assert used.bucket_counts[bounds.index(0.98)] == 1  # 0.977 in (0.95, 0.98]

    check_boundaries_and_attributes(sim, m, spans)


def check_boundaries_and_attributes(sim, m: Metrics, spans: list[Any]) -> None:
    for name, bounds in BOUNDARIES.items():
        points = m.points(name)
        assert points, name
        for p in points:
            assert tuple(p.explicit_bounds) == bounds, name
    # Nothing per request becomes an attribute.
    forbidden = set()
    for span in spans:
        a = dict(span.attributes)
        forbidden |= {a.get("gen_ai.response.id"), a.get("anthropic.request.id"), a.get("streamscope.time_to_headers")}
    forbidden.discard(None)
    for name, points in m.by_name.items():
        allowed = (SEMCONV_KEYS | SEMCONV_EXTRA[name]) if name in SEMCONV_EXTRA else (
            STREAMSCOPE_KEYS | EXTRA_KEYS.get(name, set()))
        for p in points:
            assert set(p.attributes) <= allowed, (name, dict(p.attributes))
            assert not forbidden & set(p.attributes.values()), (name, dict(p.attributes))
    # Semconv attributes.
    [overloaded] = [p for p in m.points("gen_ai.client.operation.duration")  # the in-band error (the 529
                    if p.attributes.get("error.type") == "overloaded_error"  # has no response model)
                    and "gen_ai.response.model" in p.attributes]
    a = dict(overloaded.attributes)
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.provider.name"] == "anthropic"
    assert a["server.address"] == "127.0.0.1" and a["server.port"] == sim.port
    assert a["gen_ai.request.model"] == a["gen_ai.response.model"] == "claude-sim-1"
    routes = {p.attributes.get("streamscope.route") for p in m.points("gen_ai.client.operation.duration")}
    assert routes == {None, "budgeted", "deadline"}
    # The budgets in force, a gauge per budget, only where budgets were set.
    limits = {(p.attributes["streamscope.budget"], p.attributes.get("streamscope.route")): p.value
              for p in m.points("streamscope.budget.limit")}
    assert limits == {("first_token", "budgeted"): 0.8, ("idle", "budgeted"): 0.3, ("deadline", "budgeted"): 3.0,
                      ("deadline", "deadline"): 0.8}


def test_active_streams_while_streaming(sim, metered) -> None:
    _, reader = metered()
    c = client(sim, "slow_answer")
    seen = []
    with c.messages.stream(model="claude-sim-1", max_tokens=64, messages=USER) as stream:
        for event in stream:
            if event.type == "text":
                seen.append(Metrics(reader).total("streamscope.active_streams"))
                break
    seen.append(Metrics(reader).total("streamscope.active_streams"))
    assert seen == [1, 0]


def test_deadline_unreachable(sim, metered) -> None:
    """4096 thinking tokens at the stream's ~100 tokens/s need ~40 s: a 3 s deadline can never fit
    them, a 300 s one can."""
    _, reader = metered(budgets={"route:tight": Budgets(deadline=3.0), "route:loose": Budgets(deadline=300.0)})
    run(sim, "thinking", "tight", {"thinking": THINKING})
    run(sim, "thinking", "loose", {"thinking": THINKING})
    run(sim, "complete", "tight", {})  # no thinking budget: never counted
    m = Metrics(reader)
    assert m.by("streamscope.deadline.unreachable", "streamscope.route") == Counter({("tight",): 1})
    [rate] = [p for p in m.points("streamscope.decode_rate") if p.attributes.get("streamscope.route") == "tight"]
    assert 4096 / (rate.sum / rate.count) > 3.0


def test_cardinality_guard_folds_a_flood_of_models(sim, metered) -> None:
    telemetry, reader = metered(max_models=3)
    models = [f"flood-model-{i:02d}" for i in range(10)]
    for model in models:
        run(sim, "complete", None, {}, model=model)
    m = Metrics(reader)
    requests = m.by("streamscope.requests", "gen_ai.request.model")
    assert requests == Counter({(models[0],): 1, (models[1],): 1, (models[2],): 1, ("other",): 7})
    durations = m.by("gen_ai.client.operation.duration", "gen_ai.request.model", "gen_ai.response.model")
    assert durations[("other", "other")] == 7 and len(durations) == 4
    active = {p.attributes["gen_ai.request.model"]: p.value for p in m.points("streamscope.active_streams")}
    assert active == {models[0]: 0, models[1]: 0, models[2]: 0, "other": 0}
    # Spans keep the real names: only metrics are folded.
    assert sorted(s.attributes["gen_ai.request.model"] for s in telemetry.spans()) == models


def test_route_cap_and_environment(sim, metered, monkeypatch) -> None:
    monkeypatch.setenv("STREAMSCOPE_MAX_ROUTES", "1")
    monkeypatch.setenv("STREAMSCOPE_MAX_MODELS", "5")
    _, reader = metered()
    for route in ("checkout", "search", "tenant-4711"):
        run(sim, "complete", route, {})
    m = Metrics(reader)
    assert m.by("streamscope.requests", "streamscope.route") == Counter({("checkout",): 1, ("other",): 2})


def test_guard_is_thread_safe_and_stable() -> None:
    guard = CardinalityGuard("gen_ai.request.model", 16)
    results: dict[str, set[str]] = {}
    lock = threading.Lock()

    def hammer(offset: int) -> None:
        for i in range(400):
            value = f"m{(i * 7 + offset) % 100}"
            got = guard(value)
            with lock:
                results.setdefault(value, set()).add(got)

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(guard.admitted) == 16
    for value, got in results.items():
        assert len(got) == 1, "a value changed series"  # once admitted or folded, always the same
        assert got == ({value} if value in guard.admitted else {"other"})
    with pytest.raises(ValueError):
        CardinalityGuard("x", -1)


def test_internal_errors_are_counted(metered) -> None:
    _telemetry, reader = metered()
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        internal.internal_error("test_metrics")
    assert Metrics(reader).total("streamscope.internal_errors") == 1


def test_uninstrument_unregisters_the_internal_error_counter() -> None:
    instrumentor = streamscope.AnthropicInstrumentor()
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    instrumentor.instrument(meter_provider=provider)
    counter = instrumentor.metrics.internal_errors
    instrumentor.uninstrument()
    assert counter not in internal._counters
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        internal.internal_error("test_metrics.after")
    assert Metrics(reader).total("streamscope.internal_errors") == 0
    provider.shutdown()


def test_metric_failures_never_reach_the_caller(sim, metered, monkeypatch) -> None:
    """A broken metric path is an internal error, counted; the span and the caller are unaffected."""
    telemetry, reader = metered()
    before = internal.count

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("metric backend down")

    writer = streamscope.AnthropicInstrumentor().metrics  # BaseInstrumentor is a singleton
    monkeypatch.setattr(writer.requests, "add", broken)
    run(sim, "complete", None, {})
    assert internal.count == before + 1
    assert telemetry.attrs()["streamscope.class"] == "complete"
    assert math.isclose(Metrics(reader).total("streamscope.internal_errors"), 1)
