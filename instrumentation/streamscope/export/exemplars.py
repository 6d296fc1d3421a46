"""Exemplars on the Prometheus histograms: the trace behind a bucket, from a latency spike to its trace.

OpenTelemetry's SDK samples them (its exemplar filter, `OTEL_METRICS_EXEMPLAR_FILTER`, trace-based by
default: a measurement made while a sampled span is current; streamscope records a stream's
histograms once, at its end, with the stream's span current) and hands them to readers on every
histogram data point. `opentelemetry-exporter-prometheus` drops them; prometheus-client writes a
sample's `exemplar` in the OpenMetrics format only (`Accept: application/openmetrics-text`, what
Prometheus asks for), never in the classic text format. So:

- one process: `exemplar_reader()` is the exporter's reader plus a collector over its output that
  puts on each `_bucket` sample the most recent exemplar that fell in that bucket
  (`ExemplarStore`: the SDK hands an exemplar over once, at the next collection, and a bucket
  keeps showing its latest one, as prometheus-client's own histograms do);
- several processes (`PROMETHEUS_MULTIPROC_DIR`): each process writes one exemplar per bucket
  into a small file of its own (`ExemplarFile`, `exemplars_<pid>.ex` beside prometheus-client's
  `*.db` files); the aggregate reads them all (`read_exemplars()`) and keeps the latest per bucket.

The exemplar's labels are `trace_id` (32 hex digits) and `span_id` (16): what Prometheus stores
(63 characters of labels, within OpenMetrics' 128) and what Grafana links to a trace by.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from streamscope.core import guard as internal

from .prometheus_names import family_name, label_value, sanitize_attribute, scope_labels

__all__ = ["Exemplar", "ExemplarStore", "attach_samples", "bucket_bound", "convert", "exemplar_reader", "series_key"]

TRACE_ID, SPAN_ID = "trace_id", "span_id"
_MAX_KEYS = 50_000
"""Buckets remembered per store (series × buckets; the cardinality guards keep far fewer)."""

SeriesKey = tuple[tuple[str, str], ...]
Key = tuple[str, SeriesKey, float]
"""(the `_bucket` sample's name, its labels but `le` and the empty ones, its bound)."""


class Exemplar(NamedTuple):
    """One observation of a histogram with the span it was made in."""

    trace_id: int
    span_id: int
    value: float
    timestamp: float
    """Unix seconds."""

    def prometheus(self) -> Any:
        """prometheus-client's `Exemplar` with `trace_id` and `span_id` in hex."""
        from prometheus_client.samples import Exemplar as PromExemplar

        return PromExemplar({TRACE_ID: f"{self.trace_id:032x}", SPAN_ID: f"{self.span_id:016x}"}, self.value,
                            self.timestamp)


def convert(exemplar: Any) -> Exemplar | None:
    """An OpenTelemetry SDK exemplar (`trace_id`, `span_id`, `value`, `time_unix_nano`) as ours;
    None without a trace (an `always_on` filter outside any span): Prometheus would keep an
    exemplar nobody can follow."""
    trace_id, span_id = getattr(exemplar, "trace_id", None), getattr(exemplar, "span_id", None)
    if not trace_id or not span_id:
        return None
    value = float(exemplar.value)
    if math.isnan(value):
        return None
    return Exemplar(int(trace_id), int(span_id), value, exemplar.time_unix_nano / 1e9)


def bucket_bound(value: float, bounds: Sequence[float]) -> float:
    """The `le` of the bucket `value` falls in (bounds are inclusive above, as OpenTelemetry's and
    Prometheus's are); `inf` past the last."""
    index = bisect.bisect_left(bounds, value)
    return float(bounds[index]) if index < len(bounds) else math.inf


def series_key(labels: Mapping[str, str]) -> SeriesKey:
    """A series as Prometheus tells series apart: its labels but `le`, the empty ones dropped (the
    exporters backfill an attribute some points lack with "", which Prometheus reads as absent)."""
    return tuple(sorted((k, v) for k, v in labels.items() if k != "le" and v != ""))


def point_labels(scope: Mapping[str, str], attributes: Mapping[str, Any] | None) -> dict[str, str]:
    """A data point's labels as the exporter writes them: the scope's, then the attributes'."""
    labels = dict(scope)
    for key, value in (attributes or {}).items():
        labels[sanitize_attribute(key)] = label_value(value)
    return labels


class ExemplarStore:
    """The most recent exemplar per histogram bucket, put on the `_bucket` samples of collected
    families. Thread-safe (a scrape and an export may collect at once)."""

    def __init__(self, limit: int = _MAX_KEYS) -> None:
        self._latest: dict[Key, Exemplar] = {}
        self._limit = limit
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._latest)

    def offer(self, key: Key, exemplar: Exemplar) -> None:
        """Keep `exemplar` for its bucket unless a later one is there already."""
        with self._lock:
            found = self._latest.get(key)
            if found is None:
                if len(self._latest) >= self._limit:
                    return
            elif found.timestamp > exemplar.timestamp:
                return
            self._latest[key] = exemplar

    def offer_metrics(self, metrics_data: Any) -> None:
        """Every exemplar on the explicit-bucket histogram points of an SDK collection."""
        from opentelemetry.sdk.metrics.export import Histogram

        for resource_metrics in getattr(metrics_data, "resource_metrics", ()):
            for scope_metrics in resource_metrics.scope_metrics:
                scope = None
                for metric in scope_metrics.metrics:
                    if not isinstance(metric.data, Histogram):
                        continue
                    points = [p for p in metric.data.data_points if p.exemplars]
                    if not points:
                        continue
                    if scope is None:
                        s = scope_metrics.scope
                        scope = scope_labels(s.name, s.version, s.schema_url, s.attributes)
                    bucket = family_name(metric.name, metric.unit, "histogram") + "_bucket"
                    for point in points:
                        series = series_key(point_labels(scope, point.attributes))
                        for found in point.exemplars:
                            converted = convert(found)
                            if converted is not None:
                                bound = bucket_bound(converted.value, point.explicit_bounds)
                                self.offer((bucket, series, bound), converted)

    def merge(self, exemplars: Mapping[Key, Exemplar]) -> None:
        for key, exemplar in exemplars.items():
            self.offer(key, exemplar)

    def snapshot(self) -> dict[Key, Exemplar]:
        with self._lock:
            return dict(self._latest)

    def attach(self, families: Iterable[Any]) -> Iterator[Any]:
        """`families` with each histogram `_bucket` sample carrying its bucket's exemplar."""
        latest = self.snapshot()
        for family in families:
            if latest and family.type == "histogram":
                family.samples = attach_samples(family.samples, latest)
            yield family


def attach_samples(samples: Sequence[Any], latest: Mapping[Key, Exemplar]) -> list[Any]:
    """`samples` (prometheus-client's), the `_bucket` ones with the exemplar of their bucket."""
    out = []
    keys: dict[tuple[tuple[str, str], ...], SeriesKey] = {}
    for sample in samples:
        le = sample.labels.get("le")
        if le is not None and sample.name.endswith("_bucket") and sample.exemplar is None:
            raw = tuple(sample.labels.items())
            series = keys.get(raw)
            if series is None:
                series = keys[raw] = series_key(sample.labels)
            try:
                found = latest.get((sample.name, series, float(le)))
            except ValueError:
                found = None
            if found is not None:
                sample = sample._replace(exemplar=found.prometheus())
        out.append(sample)
    return out


# -- One process: the exporter's reader, and its output with exemplars ---------------------------


class _WithExemplars:
    """A collector: another registry's families with the store's exemplars on their buckets."""

    def __init__(self, inner: Any, store: ExemplarStore) -> None:
        self._inner, self._store = inner, store

    def collect(self) -> Iterator[Any]:
        # Collected whole first: the reader hands the SDK's exemplars to the store while the inner
        # registry collects, and they belong on this very page.
        families = list(self._inner.collect())
        try:
            attached = list(self._store.attach(families))
        except Exception:
            internal.internal_error("exemplars")
            attached = families
        yield from attached


def exemplar_reader(registry: Any) -> Any:
    """`opentelemetry-exporter-prometheus`'s reader, whose families reach `registry` with the
    exemplars the SDK sampled on their histogram buckets. An exporter without the `registry`
    argument (older releases) gets the plain reader on the global registry: no exemplars."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry

    store = ExemplarStore()

    class ExemplarPrometheusReader(PrometheusMetricReader):
        def _receive_metrics(self, metrics_data: Any, timeout_millis: float = 10_000, **kwargs: Any) -> None:
            try:
                store.offer_metrics(metrics_data)
            except Exception:
                internal.internal_error("exemplars")
            super()._receive_metrics(metrics_data, timeout_millis, **kwargs)

    inner = CollectorRegistry(auto_describe=False)
    reader = ExemplarPrometheusReader(registry=inner)
    registry.register(_WithExemplars(inner, store))
    return reader


# -- Several processes: one small file per process ------------------------------------------------
#
