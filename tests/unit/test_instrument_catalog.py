"""The instrument catalog (export/instruments.py) against what the writers create, what they created
before the catalog, a real SDK's export, and docs/metrics.md.

Why: an instrument's name, unit, description or buckets is what dashboards, alerts and users'
queries are written against; none of it may change by accident. The expected lists were
recorded off the writers at 7460af7, the commit before the catalog (every `create_*` call's
arguments, in order), and are kept in `instruments_before_catalog.json` beside this file, so that a
renamed, re-described or re-bucketed instrument fails this test until the change is meant and
written down there.
"""

from __future__ import annotations

import json
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


# -- The writers' instruments at 7460af7, in creation order (kept as data beside this file) ------
BEFORE = json.loads((Path(__file__).with_name("instruments_before_catalog.json")).read_text())


def _rows(group: str) -> tuple[Created, ...]:
    return tuple(Created(r["kind"], r["name"], r["unit"], r["description"],
                         tuple(r["buckets"]) if "buckets" in r else None) for r in BEFORE[group])


GENAI_CURRENT, GENAI_LATEST, STREAMSCOPE, OUTCOMES, FLEET = (
    _rows(g) for g in ("GENAI_CURRENT", "GENAI_LATEST", "STREAMSCOPE", "OUTCOMES", "FLEET"))
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
