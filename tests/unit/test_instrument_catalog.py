"""The instrument catalog (export/instruments.py) against what the writers create, what they created
before the catalog, a real SDK's export, and docs/metrics.md.

Why: an instrument's name, unit, description or buckets is what dashboards, alerts and users'
queries are written against; none of it may change by accident. The expected lists below were
recorded off the writers at 7460af7, the commit before the catalog (every `create_*` call's
arguments, in order), and are kept here as literals so that a renamed, re-described or re-bucketed
instrument fails this test until the change is meant and written down here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from opentelemetry import metrics as api
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import Gauge, Histogram, InMemoryMetricReader, Sum

from streamscope.export import fleet_metrics
from streamscope.export.fleet_metrics import FleetMetrics
from streamscope.export.instruments import CATALOG, DEFINITIONS, Definition, counter, definition
from streamscope.export.metrics import MetricsWriter
from streamscope.export.outcomes import OutcomeWriter

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


class Created(NamedTuple):
    """One `create_*` call as a meter received it."""

    kind: str
    name: str
    unit: str
    description: str
    buckets: tuple[float, ...] | None = None


# -- The writers' instruments at 7460af7, in creation order ------------------------------------
SEMCONV_SECONDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
SEMCONV_TOKENS = (1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
                  4194304.0, 16777216.0, 67108864.0)
CHUNK = "Time per output chunk after the first: from the end of the previous chunk to the end of this one."
FIRST_CHUNK = "Time to receive the first chunk of the response stream."

GENAI_CURRENT = (
    Created("histogram", "gen_ai.client.operation.duration", "s", "GenAI operation duration.", SEMCONV_SECONDS),
    Created("histogram", "gen_ai.client.operation.time_to_first_chunk", "s", FIRST_CHUNK, SEMCONV_SECONDS),
    Created("histogram", "gen_ai.client.operation.time_per_output_chunk", "s", CHUNK, SEMCONV_SECONDS),
    Created("histogram", "gen_ai.client.token.usage", "{token}", "Number of input and output tokens used.",
            SEMCONV_TOKENS),
)
GENAI_LATEST = (
    Created("histogram", "gen_ai.client.inference.duration", "s", "GenAI client inference operation duration.",
            SEMCONV_SECONDS),
    Created("histogram", "gen_ai.client.inference.time_to_first_chunk", "s", FIRST_CHUNK, SEMCONV_SECONDS),
    Created("histogram", "gen_ai.client.inference.time_per_output_chunk", "s", CHUNK, SEMCONV_SECONDS),
    Created("counter", "gen_ai.client.inference.usage.input_tokens", "{token}",
            "The number of input (prompt) tokens used, including cached tokens."),
    Created("counter", "gen_ai.client.inference.usage.output_tokens", "{token}",
            "The number of output (completion) tokens used, including reasoning tokens."),
    Created("counter", "gen_ai.client.inference.usage.cache_read.input_tokens", "{token}",
            "The number of input tokens served from a provider-managed cache."),
    Created("counter", "gen_ai.client.inference.usage.cache_write.input_tokens", "{token}",
            "The number of input tokens written to a provider-managed cache."),
    Created("counter", "gen_ai.client.inference.usage.reasoning.output_tokens", "{token}",
            "The number of output tokens used for reasoning (e.g. chain-of-thought, extended thinking)."),
    Created("histogram", "gen_ai.client.inference.operation.input_tokens", "{token}",
            "The number of input (prompt) tokens used per inference operation.", SEMCONV_TOKENS),
    Created("histogram", "gen_ai.client.inference.operation.output_tokens", "{token}",
            "The number of output (completion) tokens used per inference operation.", SEMCONV_TOKENS),
)
STREAMSCOPE = (
    Created("counter", "streamscope.requests", "{request}", "Streamed calls, by failure class."),
    Created("counter", "streamscope.budget.firings", "{firing}",
            "Budgets that fired (first_token, idle, deadline, read_timeout)."),
    Created("up_down_counter", "streamscope.active_streams", "{stream}", "Streamed calls in flight."),
    Created("histogram", "streamscope.time_to_headers", "s", "Until the response headers arrived.",
            (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)),
    Created("histogram", "streamscope.time_to_first_content", "s",
            "Until the first content event (under the first_content setting).",
            (0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0,
             120.0, 180.0, 300.0)),
    Created("histogram", "streamscope.thinking.duration", "s",
            "From the first thinking block to the end of the thinking before the answer.",
            (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0,
             600.0)),
    Created("histogram", "streamscope.max_gap", "s",
            "The provider's largest silence between content events while the caller waited (pings are not "
            "content; server tool runs are not gaps).",
            (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)),
    Created("histogram", "streamscope.decode_rate", "{token}/s", "Output tokens per second of generation.",
            (1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 80.0, 100.0, 150.0, 200.0, 300.0, 500.0,
             1000.0)),
    Created("histogram", "streamscope.thinking.budget_used", "1", "Reasoning tokens / thinking budget_tokens.",
            (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 1.0, 1.05, 1.2)),
    Created("counter", "streamscope.internal_errors", "{error}",
            "Failures inside streamscope (swallowed; the host is unaffected)."),
    Created("counter", "streamscope.unobserved_calls", "{call}",
            "Streamed calls streamscope could not observe: another library's request method stood in front of "
            "streamscope's (no span, no budget)."),
    Created("gauge", "streamscope.budget.limit", "s", "The budgets in force at the last stream end."),
    Created("counter", "streamscope.deadline.unreachable", "{request}",
            "Thinking requests whose deadline could not fit their thinking budget at the stream's decode rate."),
    Created("histogram", "streamscope.usage.reasoning_tokens", "{token}", "Reasoning (thinking) output tokens.",
            SEMCONV_TOKENS),
    Created("histogram", "streamscope.server_tool.duration", "s",
            "One server-side tool run (web search, web fetch, code execution, ...): from the tool use block's "
            "end to its result.",
            (0.1, 0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0,
             300.0)),
    Created("counter", "streamscope.cost", "USD",
            "What streamed calls cost, from the usage the provider reported and the price table (cut streams' "
            "output estimated), retried attempts and failures included."),
    Created("counter", "streamscope.cost.unpriced", "{request}",
            "Streamed calls with usage whose model has no known price (add it with prices=)."),
    Created("gauge", "streamscope.breaker.state", "1",
            "The circuit breaker of a provider, model and route in this process: 0 closed, 1 half-open, 2 open."),
    Created("counter", "streamscope.breaker.transitions", "{transition}",
            "Circuit breaker state changes, by the state moved to (streamscope.breaker.to)."),
)
OUTCOMES = (
    Created("histogram", "streamscope.attempts", "{attempt}",
            "Attempts per logical request of the retry helpers or the relay (1 = no retry)",
            (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)),
    Created("counter", "streamscope.retries", "{retry}",
            "Retries made by the retry helpers or the relay, by what the retried attempt failed with"),
    Created("counter", "streamscope.relay.streams", "{stream}",
            "Streams relayed to a client, by outcome, failure code, partial and the status sent"),
)
FLEET = (
    Created("counter", "streamscope.relay.resumes", "{resume}",
            "Reconnects (Last-Event-ID) answered by this worker, by outcome: resumed, nothing_to_resume, expired, "
            "owner_lost"),
    Created("counter", "streamscope.relay.replayed_events", "{event}",
            "Events read back from the resume buffer and sent on resumed connections"),
    Created("counter", "streamscope.store.errors", "{error}",
            "Operations on the shared store (Redis) that failed or timed out, by operation"),
    Created("observable_gauge", "streamscope.relay.buffer.size", "By",
            "Bytes of relayed events this worker keeps for resume (in memory, or written to Redis and not yet "
            "expired)"),
)
EXPECTED: dict[str, tuple[Created, ...]] = {
    "MetricsWriter": GENAI_CURRENT + STREAMSCOPE,
    "MetricsWriter, gen_ai_latest": GENAI_LATEST + STREAMSCOPE,
    "OutcomeWriter": OUTCOMES,
    "FleetMetrics": FLEET,
}


class RecordingMeter:
    """Stands in for a Meter with the API's signatures: notes each `create_*` call, records nothing."""

    def __init__(self) -> None:
        self.created: list[Created] = []

    def _note(self, kind: str, name: str, unit: str, description: str,
              buckets: Any = None) -> object:
        self.created.append(Created(kind, name, unit, description, None if buckets is None else tuple(buckets)))
        return object()

    def create_counter(self, name: str, unit: str = "", description: str = "") -> object:
        return self._note("counter", name, unit, description)

    def create_up_down_counter(self, name: str, unit: str = "", description: str = "") -> object:
        return self._note("up_down_counter", name, unit, description)

    def create_histogram(self, name: str, unit: str = "", description: str = "", *,
                         explicit_bucket_boundaries_advisory: Any = None) -> object:
        return self._note("histogram", name, unit, description, explicit_bucket_boundaries_advisory)

    def create_gauge(self, name: str, unit: str = "", description: str = "") -> object:
        return self._note("gauge", name, unit, description)

    def create_observable_gauge(self, name: str, callbacks: Any = None, unit: str = "",
                                description: str = "") -> object:
        assert callbacks, f"{name}: an observable gauge without a callback observes nothing"
        return self._note("observable_gauge", name, unit, description)


def created_by(writer: str) -> list[Created]:
    """The `create_*` calls `writer` (an EXPECTED key) makes, the environment not read."""
    meter = RecordingMeter()
    own = meter if writer.startswith("MetricsWriter") else RecordingMeter()
    metrics = MetricsWriter(own, max_models=1, max_routes=1, latest=writer == "MetricsWriter, gen_ai_latest")
    if writer == "OutcomeWriter":
        OutcomeWriter(meter, metrics)
    elif writer == "FleetMetrics":
        FleetMetrics(meter)
    return meter.created


def as_created(d: Definition) -> Created:
    return Created(d.kind, d.name, d.unit, d.description, d.buckets)


# -- Before and after --------------------------------------------------------------------------

@pytest.mark.parametrize("writer", list(EXPECTED))
def test_each_writer_creates_what_it_created_before_the_catalog(writer: str) -> None:
    assert created_by(writer) == list(EXPECTED[writer])


# -- The catalog is the writers' instruments, no more, no fewer --------------------------------

def test_every_instrument_created_is_as_the_catalog_defines_it() -> None:
    created = [c for writer in EXPECTED for c in created_by(writer)]
    assert all(c == as_created(CATALOG[c.name]) for c in created)
    assert {c.name for c in created} == set(CATALOG)


def test_the_catalog_lists_each_instrument_once() -> None:
    assert len(CATALOG) == len(DEFINITIONS) == len({c.name for writer in EXPECTED.values() for c in writer})


def test_asking_for_an_unlisted_name_or_another_kind_fails_loudly() -> None:
    with pytest.raises(KeyError, match="not in streamscope's instrument catalog"):
        counter(RecordingMeter(), "streamscope.requets")
    with pytest.raises(TypeError, match="is defined as a histogram, not a counter"):
        definition("streamscope.attempts", "counter")


def test_a_histogram_and_only_a_histogram_has_buckets() -> None:
    with pytest.raises(ValueError, match="only a histogram"):
        Definition("x", "histogram", "s", "no buckets")
    with pytest.raises(ValueError, match="only a histogram"):
        Definition("x", "counter", "1", "buckets", (1.0,))


# -- On a real SDK: every instrument exported as the catalog defines it --------------------------

class _Buffer:
    def size(self) -> int:
        return 10


def _exported(latest: bool) -> dict[str, Any]:
    """Each instrument of the writers, made on an SDK meter and measured once, as the reader exports it."""
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("streamscope")
    writers = [MetricsWriter(meter, max_models=1, max_routes=1, latest=latest)]
    writers += [writers[0].costs, OutcomeWriter(meter, writers[0]), FleetMetrics(meter)]
    for writer in writers:
        for instrument in vars(writer).values():
            if isinstance(instrument, api.Histogram):
                instrument.record(1)
            elif isinstance(instrument, api.Counter | api.UpDownCounter):
                instrument.add(1)
            elif isinstance(instrument, api._Gauge):
                instrument.set(1)
    buffer = _Buffer()
    fleet_metrics.watch_size(buffer, "memory")  # so the observable gauge has a value to export
    data = reader.get_metrics_data()
    assert data is not None
    return {m.name: m for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}


KIND_OF_DATA = {"counter": Sum, "up_down_counter": Sum, "histogram": Histogram, "gauge": Gauge,
                "observable_gauge": Gauge}


@pytest.mark.parametrize("latest", [False, True], ids=["current", "gen_ai_latest"])
def test_the_sdk_exports_each_instrument_as_defined(latest: bool) -> None:
    exported = _exported(latest)
    metrics_writer = "MetricsWriter, gen_ai_latest" if latest else "MetricsWriter"
    expected = {c.name for writer in (metrics_writer, "OutcomeWriter", "FleetMetrics") for c in EXPECTED[writer]}
    assert set(exported) == expected
    for name, metric in exported.items():
        d = CATALOG[name]
        assert (metric.unit, metric.description) == (d.unit, d.description), name
        assert isinstance(metric.data, KIND_OF_DATA[d.kind]), name
        if isinstance(metric.data, Sum):
            assert metric.data.is_monotonic == (d.kind == "counter"), name
        if isinstance(metric.data, Histogram):
            assert tuple(metric.data.data_points[0].explicit_bounds) == d.buckets, name


# -- docs/metrics.md ---------------------------------------------------------------------------

DOC_ROW = re.compile(r"^\| `([a-z_.]+)` \| ((?:up-down |observable )?(?:counter|histogram|gauge))"
                     r"(?: \(synchronous\))?, `?([^`| ]+)`?[^|]*\|", re.M)


def test_docs_list_every_instrument_with_its_kind_and_unit() -> None:
    documented = {(name, kind.replace("-", "_").replace(" ", "_"), unit)
                  for name, kind, unit in DOC_ROW.findall(DOCS.read_text())}
    assert documented == {(d.name, d.kind, d.unit) for d in DEFINITIONS}
