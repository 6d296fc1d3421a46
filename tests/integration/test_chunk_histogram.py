"""Time per output chunk merged once per stream exports exactly what one `record()` per chunk does.

Real streams (the anthropic SDK against the simulator, budgets on, a stall cut, thinking, a tool
call, a long answer) are recorded by the instrumentor's `MetricsWriter`, which merges each
stream's gaps (export/chunk_histogram.py), and, record for record, by a twin writer on a second
provider that records one `record()` per gap. Both providers have the readers a user has: a
cumulative and a delta reader, a Prometheus exporter. The histogram points, their OTLP encoding
and the Prometheus page are compared, and the same gaps through the multiprocess instruments (a
fresh process, prometheus-client's files, the aggregate page). The comparison is exact: the
sums too, bit for bit.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import anthropic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import Histogram, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.metrics.view import (
    ExplicitBucketHistogramAggregation,
    ExponentialBucketHistogramAggregation,
    View,
)
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry, generate_latest

from streamscope import AnthropicInstrumentor, Budgets, __version__
from streamscope.core.record import StreamRecord
from streamscope.export import chunk_histogram
from streamscope.export.metric_definitions import CURRENT_NAMES, SEMCONV_DURATION_BUCKETS
from streamscope.export.metrics import MetricsWriter
from streamscope.simulator import Simulator

USER = [{"role": "user", "content": "How do streams fail?"}]
NAME = CURRENT_NAMES["time_per_output_chunk"]
SCENARIOS = ["long_answer", "slow_answer", "thinking", "tool_use", "timed_long_answer", "cut_connection",
             "silent_stall", "basic_text", "incomplete"]
BUDGETS = Budgets(first_token=5.0, idle=0.5)


@dataclass
class Side:
    """One provider and its readers."""

    provider: MeterProvider
    readers: dict[str, InMemoryMetricReader]
    registry: CollectorRegistry
    data: dict[str, Any] | None = None

    def collected(self) -> dict[str, Any]:
        """What each in-memory reader collects, once (a delta reader's second collection is empty)."""
        if self.data is None:
            self.data = {name: reader.get_metrics_data() for name, reader in self.readers.items()}
        return self.data


def side(views: list[View] | None = None) -> Side:
    cumulative = InMemoryMetricReader()
    delta = InMemoryMetricReader(preferred_temporality={Histogram: AggregationTemporality.DELTA})
    registry = CollectorRegistry(auto_describe=True)
    provider = MeterProvider(metric_readers=[cumulative, delta, PrometheusMetricReader(registry=registry)],
                             views=views or [], shutdown_on_exit=False)
    return Side(provider, {"cumulative": cumulative, "delta": delta}, registry)


class Twin:
    """The instrumentor's writer, and beside it a writer on another provider recording per chunk,
    given the same records."""

    def __init__(self, merged: MetricsWriter, each: MetricsWriter) -> None:
        self.merged, self.each = merged, each
        self.records: list[tuple[StreamRecord, dict[str, Any]]] = []
        each.merge_chunks = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.merged, name)

    def opened(self, request: Any) -> None:
        self.merged.opened(request)
        self.each.opened(request)

    def finished(self, record: StreamRecord, attrs: Any, unreachable: bool = False, cost: Any = None) -> None:
        in_order = list(record.chunk_gaps)
        self.each.finished(record, attrs, unreachable, cost)  # per chunk, in stream order
        self.merged.finished(record, attrs, unreachable, cost)
        assert in_order == list(record.chunk_gaps), "the merge reads the record's gaps and leaves them as they were"
        self.records.append((replace(record, chunk_gaps=in_order), dict(attrs)))


def run_streams(sim: Simulator, merged: Side, each: Side, rounds: int = 2) -> list[tuple[StreamRecord, dict[str, Any]]]:
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=TracerProvider(), meter_provider=merged.provider, budgets=BUDGETS)
    try:
        twin = Twin(instrumentor.pipeline.metrics, MetricsWriter(each.provider.get_meter("streamscope", __version__)))
        instrumentor.pipeline.metrics = twin
        for _ in range(rounds):
            for scenario in SCENARIOS:
                c = anthropic.Anthropic(base_url=sim.url(scenario), api_key="k", max_retries=0)
                try:
                    for _ in c.messages.create(model="m", max_tokens=64, messages=USER, stream=True):
                        pass
                except Exception:  # cut, stalled, incomplete: recorded all the same
                    pass
                finally:
                    c.close()
        return twin.records
    finally:
        instrumentor.uninstrument()


def histogram_points(data: Any) -> list[Any]:
    found = []
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == NAME:
                    found.extend((sorted(p.attributes.items()), p.count, p.sum, tuple(p.bucket_counts),
                                  tuple(p.explicit_bounds), p.min, p.max) for p in metric.data.data_points)
    return sorted(found, key=repr)


def otlp_points(data: Any, kind: str = "histogram") -> list[bytes]:
    """Each histogram data point as OTLP encodes it, its times and exemplars blanked."""
    found = []
    for resource in encode_metrics(data).resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == NAME:
                    for point in getattr(metric, kind).data_points:
                        point.ClearField("exemplars")
                        point.ClearField("time_unix_nano")
                        point.ClearField("start_time_unix_nano")
                        found.append(point.SerializeToString(deterministic=True))
    return sorted(found)


def page(registry: CollectorRegistry, family: str) -> list[str]:
    return sorted(line for line in generate_latest(registry).decode().splitlines() if line.startswith(family))


@pytest.fixture(scope="module")
def compared(sim: Simulator) -> Iterator[tuple[Side, Side, list[tuple[StreamRecord, dict[str, Any]]]]]:
    merged, each = side(), side()
    records = run_streams(sim, merged, each)
    yield merged, each, records
    merged.provider.shutdown()
    each.provider.shutdown()


def test_the_sdk_form_is_known_here() -> None:
    """On the opentelemetry-sdk the tests run (the newest), the merge is in use, not the fallback."""
    assert chunk_histogram.merger().usable


def test_the_streams_had_chunks_of_every_kind(compared) -> None:
    _, _, records = compared
    gaps = [g for record, _ in records for g in record.chunk_gaps]
    assert len(records) == 2 * len(SCENARIOS)
    assert sum(1 for record, _ in records if len(record.chunk_gaps) > 1) >= 10
    assert len({chunk_histogram.bucket_counts([g], SEMCONV_DURATION_BUCKETS).index(1) for g in gaps}) >= 3
    assert {attrs.get("streamscope.class") for _, attrs in records} >= {"complete", "stalled_mid_stream"}


def test_the_points_are_those_of_one_record_per_chunk(compared) -> None:
    merged, each, records = compared
    total = sum(len(record.chunk_gaps) for record, _ in records)
    for reader in ("cumulative", "delta"):
        got, want = histogram_points(merged.collected()[reader]), histogram_points(each.collected()[reader])
        assert got == want, reader
        assert sum(p[1] for p in got) == total
        assert otlp_points(merged.collected()[reader]) == otlp_points(each.collected()[reader]) != []


def test_the_prometheus_page_is_that_of_one_record_per_chunk(compared) -> None:
    merged, each, _ = compared
    family = "gen_ai_client_operation_time_per_output_chunk_seconds"
    assert page(merged.registry, family) == page(each.registry, family) != []


@pytest.mark.parametrize("aggregation", [ExplicitBucketHistogramAggregation([0.005, 0.05, 0.5]),
                                         ExponentialBucketHistogramAggregation()],
                         ids=["other buckets", "exponential"])
def test_a_users_view_is_honoured(sim: Simulator, aggregation: Any) -> None:
    """A View with other buckets: merged on them; with an exponential histogram: recorded per chunk
    (not a form the merge knows). Either way the same points as per-chunk records."""
    views = [View(instrument_name=NAME, aggregation=aggregation)]
    merged, each = side(views), side(views)
    run_streams(sim, merged, each, rounds=1)
    kind = "histogram" if isinstance(aggregation, ExplicitBucketHistogramAggregation) else "exponential_histogram"
    for name in ("cumulative", "delta"):
        assert otlp_points(merged.collected()[name], kind) == otlp_points(each.collected()[name], kind) != [], name


MULTIPROCESS = textwrap.dedent("""
    import json, sys
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from prometheus_client import generate_latest
    from streamscope.export import prometheus_multiprocess as mp

    directory, streams, name, buckets = sys.argv[1], json.load(open(sys.argv[2])), sys.argv[3], json.loads(sys.argv[4])
    mp.use_directory(directory)
    reader = InMemoryMetricReader()
    sdk = MeterProvider(metric_readers=[reader], shutdown_on_exit=False)
    provider = mp.MultiprocessMeterProvider(sdk, forward=True)
    merged = provider.get_meter("merged").create_histogram(name, unit="s", explicit_bucket_boundaries_advisory=buckets)
    each = provider.get_meter("each").create_histogram(name, unit="s", explicit_bucket_boundaries_advisory=buckets)
    for gaps, attrs in streams:
        merged.record_gaps(list(gaps), attrs)  # sorts the list it is given
        for gap in gaps:
            each.record(gap, attrs)
    points = {}
    for resource in reader.get_metrics_data().resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                points[scope.scope.name] = sorted(
                    [sorted(p.attributes.items()), p.count, p.sum, list(p.bucket_counts), p.min, p.max]
                    for p in metric.data.data_points)
    page = generate_latest(mp.aggregate_registry(directory)).decode()
    print(json.dumps({"points": points, "page": page}))
""")


def test_the_multiprocess_files_are_those_of_one_record_per_chunk(compared, tmp_path: Path) -> None:
    """The same streams' gaps through the multiprocess instruments, merged and per chunk (two
    meters, so two scope labels), in a process of its own: the aggregate page's lines and the
    forwarded SDK points agree once the scope name is set aside."""
    _, _, records = compared
    streams = [[list(record.chunk_gaps), {"gen_ai.provider.name": "anthropic", "gen_ai.request.model": str(i % 3)}]
               for i, (record, _) in enumerate(records) if record.chunk_gaps]
    # Ten gaps of 0.1 s: added in order they make 0.9999999999999999, an exactly rounded sum 1.0.
    streams.append([[0.1] * 10, {"gen_ai.provider.name": "anthropic", "gen_ai.request.model": "tenths"}])
    # Added in this order 1.0599999999999998, in sorted order 1.06: the sum is not taken after the sort.
    streams.append([list(chunk_histogram.UNSORTED),
                    {"gen_ai.provider.name": "anthropic", "gen_ai.request.model": "unsorted"}])
    (tmp_path / "metrics").mkdir()
    (tmp_path / "streams.json").write_text(json.dumps(streams))
    done = subprocess.run([sys.executable, "-c", MULTIPROCESS, str(tmp_path / "metrics"),
                           str(tmp_path / "streams.json"), NAME, json.dumps(list(SEMCONV_DURATION_BUCKETS))],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["points"]["merged"] == found["points"]["each"] != []
    lines: dict[str, list[str]] = {"merged": [], "each": []}
    for line in found["page"].splitlines():
        for scope in lines:
            if f'otel_scope_name="{scope}"' in line:
                lines[scope].append(line.replace(f'otel_scope_name="{scope}"', 'otel_scope_name=""'))
    assert sorted(lines["merged"]) == sorted(lines["each"])
    assert any("_bucket{" in line for line in lines["merged"]) and any("_sum{" in line for line in lines["merged"])


def test_merges_racing_collections_lose_and_double_nothing() -> None:
    """Four threads merge streams' gaps into one histogram while a delta reader collects as fast
    as it can: every gap is counted exactly once, and nothing deadlocks (a delta reader's view
    drops its aggregations at each collection, so a merge sometimes finds none and records the
    rest per chunk: once with the view's lock still held, which it takes again)."""
    import math
    import random
    import threading
    import time

    cumulative = InMemoryMetricReader()
    delta = InMemoryMetricReader(preferred_temporality={Histogram: AggregationTemporality.DELTA})
    provider = MeterProvider(metric_readers=[cumulative, delta], shutdown_on_exit=False)
    histogram = provider.get_meter("race").create_histogram(
        NAME, unit="s", explicit_bucket_boundaries_advisory=SEMCONV_DURATION_BUCKETS)
    streams = [[random.Random(i).expovariate(20) for _ in range(1 + i % 97)] for i in range(400)]
    attributes = [{"gen_ai.request.model": str(i % 3)} for i in range(len(streams))]
    done = threading.Event()
    collected: list[tuple[int, float]] = []

    def collect() -> None:
        while not done.is_set():
            collected.extend(_totals(delta.get_metrics_data()))

    def write(part: int) -> None:
        for i in range(part, len(streams), 4):
            chunk_histogram.record_gaps(histogram, streams[i], attributes[i])

    collector = threading.Thread(target=collect, daemon=True)
    collector.start()
    writers = [threading.Thread(target=write, args=(k,), daemon=True) for k in range(4)]
    for w in writers:
        w.start()
    deadline = time.monotonic() + 60  # a few seconds on a loaded machine
    for w in writers:
        w.join(timeout=max(deadline - time.monotonic(), 0.1))
    done.set()
    collector.join(timeout=max(deadline - time.monotonic(), 0.1))
    assert not any(t.is_alive() for t in (*writers, collector)), "a merge and a collection deadlocked"
    collected.extend(_totals(delta.get_metrics_data()))
    gaps = [g for stream in streams for g in stream]
    assert sum(count for count, _ in collected) == len(gaps)
    assert math.isclose(sum(total for _, total in collected), math.fsum(gaps), rel_tol=1e-9)
    final = _totals(cumulative.get_metrics_data())
    assert sum(count for count, _ in final) == len(gaps)
    assert math.isclose(sum(total for _, total in final), math.fsum(gaps), rel_tol=1e-9)
    provider.shutdown()


def _totals(data: Any) -> list[tuple[int, float]]:
    return [(p.count, p.sum) for resource in (data.resource_metrics if data else [])
            for scope in resource.scope_metrics for metric in scope.metrics for p in metric.data.data_points]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([0.0, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 2.5, 10.0]) | st.floats(0.0, 20.0),
                min_size=1, max_size=60),
       st.lists(st.floats(0.001, 15.0), max_size=12).map(lambda b: sorted(set(b))), st.integers(0, 3),
       st.sampled_from([0.0, 1e16, 0.30000000000000004]) | st.floats(0.0, 1e6))
def test_the_compiled_tally_is_the_sorted_counts(gaps: list[float], boundaries: list[float], start: int,
                                                 running: float) -> None:
    """`tally` (compiled: a binary search and an addition per gap, no sort) counts as sorting and
    bisecting does, on bounds the gaps fall on too, and sums as `+=` per gap in stream order does,
    bit for bit, from any running sum; the fallback where `_tally` was not built is the sort itself."""
    assert chunk_histogram._tally is not None, "streamscope.export._tally was not built at install"
    start = min(start, len(gaps) - 1)
    ordered = sorted(gaps[start:])
    total = running
    for gap in gaps[start:]:
        total += gap
    want = (chunk_histogram.bucket_counts(ordered, boundaries), ordered[0], ordered[-1], total)
    before = list(gaps)
    assert chunk_histogram.tally(gaps, boundaries, start, running) == want
    assert gaps == before, "the gaps are read, never reordered"
    built, chunk_histogram._tally = chunk_histogram._tally, None
    try:
        assert chunk_histogram.tally(gaps, boundaries, start, running) == want
    finally:
        chunk_histogram._tally = built
