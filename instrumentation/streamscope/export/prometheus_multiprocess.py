"""Prometheus metrics from every worker process as one scrape target (prometheus-client's multiprocess mode).

Why: under gunicorn, `uvicorn --workers`, Celery's prefork pool or `multiprocessing`, every worker
has a meter provider of its own, and OpenTelemetry's Prometheus exporter serves one process's
numbers from one port. prometheus-client's multiprocess mode is the ecosystem's answer: every
process writes its values to mmap files in `PROMETHEUS_MULTIPROC_DIR`, one set per pid, and
whoever serves `/metrics` sums the files at scrape time. A forked child notices its new pid and
starts files of its own (it never re-counts its parent's), and the files of a worker that exited
stay and keep being summed, so no counter goes backwards when a worker is recycled.

`MultiprocessMeterProvider` is an OpenTelemetry `MeterProvider` whose synchronous instruments
write there under exactly the names, labels and buckets `opentelemetry-exporter-prometheus` gives
the same instruments, so `MetricsWriter`, the dashboards and the alert rules cannot tell which is
in use (prometheus_names.py). It forwards every measurement to an SDK provider too (OTLP, other
readers). `AggregateCollector` (prometheus_aggregate.py) serves the sum.

A histogram measurement made while a sampled span is current (the SDK provider's exemplar filter,
`OTEL_METRICS_EXEMPLAR_FILTER`, decides) also becomes its bucket's exemplar in this process's
`exemplars_<pid>.ex` file beside the `*.db` ones (exemplar_files.py); the aggregate shows the latest
per bucket over every process, in OpenMetrics.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from opentelemetry import metrics as api
from opentelemetry.util.types import Attributes

from streamscope.core import guard as internal

from .chunk_histogram import record_gaps, tally
from .exemplar_files import exemplar_filter, process_file, span_exemplar
from .exemplars import SeriesKey, bucket_bound, series_key
from .metric_definitions import FLEET_MAX_GAUGES
from .prometheus_aggregate import AggregateCollector, aggregate_registry, mark_dead, target_info
from .prometheus_directory import ENV, problem, requested, usable, use_directory
from .prometheus_names import (
    copy_map_unit,
    copy_sanitize_attribute,
    copy_sanitize_full_name,
    family_name,
    label_value,
    sanitize_attribute,
    scope_labels,
)

__all__ = [  # what telemetry.py, the tests and dashboards/mixin import from here
    "ENV",
    "AggregateCollector",
    "MultiprocessMeterProvider",
    "aggregate_registry",
    "copy_map_unit",
    "copy_sanitize_attribute",
    "copy_sanitize_full_name",
    "family_name",
    "mark_dead",
    "problem",
    "requested",
    "sanitize_attribute",
    "target_info",
    "usable",
    "use_directory",
]

_MAX_CACHED = 4096
"""Attribute sets remembered per instrument (the guards in `MetricsWriter` keep far fewer)."""


# -- Instruments -----------------------------------------------------------------------------------

_reentry = threading.local()


def _failed(where: str) -> None:
    """Count a failure as an internal error, except one raised while counting one (the
    `internal_errors` counter writes here too)."""
    if getattr(_reentry, "active", False):
        return
    _reentry.active = True
    try:
        internal.internal_error(where)
    finally:
        _reentry.active = False


class _Series:
    """One instrument's Prometheus side: a prometheus-client metric per set of label names (an
    attribute present on some measurements only makes a second one, as it makes the OTel exporter
    backfill), and the labelled child per attribute set."""

    def __init__(self, kind: str, family: str, description: str, scope: Mapping[str, str],
                 buckets: Sequence[float] | None = None, fleet_max: bool = False) -> None:
        self.kind = kind
        self.fleet_max = fleet_max
        self.family = family
        self.description = description
        self.scope = dict(scope)
        self.buckets = buckets
        self._metrics: dict[tuple[str, ...], Any] = {}
        self._children: dict[tuple[tuple[str, Any], ...], tuple[Any, SeriesKey]] = {}

    def child(self, attributes: Attributes) -> Any:
        return self.entry(attributes)[0]

    def entry(self, attributes: Attributes) -> tuple[Any, SeriesKey]:
        """The labelled child, and the series as the aggregate tells series apart (for exemplars)."""
        key = tuple(attributes.items()) if attributes else ()
        try:
            found = self._children.get(key)
        except TypeError:  # a sequence value: fine as a label, not as a key
            return self._make(attributes)
        if found is None:
            found = self._make(attributes)
            if len(self._children) < _MAX_CACHED:
                self._children[key] = found
        return found

    def _make(self, attributes: Attributes) -> tuple[Any, SeriesKey]:
        labels = dict(self.scope)
        for key, value in (attributes or {}).items():
            labels[sanitize_attribute(key)] = label_value(value)
        names = tuple(sorted(labels))
        metric = self._metrics.get(names)
        if metric is None:
            metric = self._metrics.setdefault(names, self._metric(names))
        return (metric.labels(*(labels[n] for n in names)) if names else metric), series_key(labels)

    def _metric(self, names: tuple[str, ...]) -> Any:
        import prometheus_client as pc

        if self.kind == "counter":
            return pc.Counter(self.family, self.description, names, registry=None)
        if self.kind == "histogram":
            buckets = pc.Histogram.DEFAULT_BUCKETS if self.buckets is None else self.buckets
            return pc.Histogram(self.family, self.description, names, registry=None, buckets=buckets)
        # An up-down counter sums the live workers (a dead one's in-flight count goes with it, after
        # `mark_process_dead`); a gauge keeps the value set last in any worker, as OTel's last value,
        # except those whose fleet value is the largest live worker's (FLEET_MAX_GAUGES).
        mode: Literal["livesum", "livemax", "mostrecent"] = (
            "livesum" if self.kind == "updowncounter" else "livemax" if self.fleet_max else "mostrecent")
        return pc.Gauge(self.family, self.description, names, registry=None, multiprocess_mode=mode)


_series: dict[tuple[Any, ...], _Series] = {}
_series_lock = threading.Lock()


def _renew_series_lock() -> None:
    global _series_lock
    _series_lock = threading.Lock()  # the parent's may be held by a thread the fork did not copy


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_series_lock)


def series(kind: str, name: str, unit: str, description: str, scope: Mapping[str, str],
           buckets: Sequence[float] | None = None) -> _Series:
    """The process's one `_Series` for this instrument: two would write the same file entries
    and overwrite each other's counts (a second `setup()`, a second `instrument()`)."""
    family = family_name(name, unit, kind)
    key = (kind, family, tuple(sorted(scope.items())))
    with _series_lock:
        found = _series.get(key)
        if found is None:
            found = _series[key] = _Series(kind, family, description, scope, buckets,
                                           fleet_max=kind == "gauge" and name in FLEET_MAX_GAUGES)
        return found


def _default_buckets() -> Sequence[float]:
    from opentelemetry.sdk.metrics._internal.aggregation import (
        _DEFAULT_EXPLICIT_BUCKET_HISTOGRAM_AGGREGATION_BOUNDARIES,
    )

    return _DEFAULT_EXPLICIT_BUCKET_HISTOGRAM_AGGREGATION_BOUNDARIES


def _forward(method: Any, amount: float, attributes: Attributes, context: Any) -> None:
    if context is None:
        method(amount, attributes)
    else:
        method(amount, attributes, context)


class _Instrument:
    """What the four synchronous instruments share: a measurement goes to the SDK instrument (if
    forwarding) as it is, then to the labelled prometheus-client child, whose failure is counted,
    never raised."""

    _what = "multiprocess instrument"

    def __init__(self, series_: _Series, sdk: Any) -> None:
        self._series, self._sdk = series_, sdk

    def _measure(self, sdk_method: str, write: str, amount: float, attributes: Attributes, context: Any) -> None:
        if self._sdk is not None:
            _forward(getattr(self._sdk, sdk_method), amount, attributes, context)
        try:
            getattr(self._series.child(attributes), write)(amount)
        except Exception:
            _failed(self._what)


class _Counter(_Instrument, api.Counter):
    _what = "multiprocess counter"

    def add(self, amount: int | float, attributes: Attributes = None, context: Any = None) -> None:
        if amount >= 0:  # as the SDK: a counter never decreases
            self._measure("add", "inc", amount, attributes, context)
        elif self._sdk is not None:
            _forward(self._sdk.add, amount, attributes, context)  # the SDK drops it with its own warning


class _UpDownCounter(_Instrument, api.UpDownCounter):
    _what = "multiprocess up-down counter"

    def add(self, amount: int | float, attributes: Attributes = None, context: Any = None) -> None:
        self._measure("add", "inc", amount, attributes, context)


class _Histogram(_Instrument, api.Histogram):
    """Also keeps, per bucket, the latest measurement made in a sampled span (the SDK's exemplar
    filter decides) in this process's exemplar file, which the aggregate puts on the bucket."""

    _what = "multiprocess histogram"

    def __init__(self, series_: _Series, sdk: Any, chosen: Any, directory: str | None) -> None:
        super().__init__(series_, sdk)
        self._filter, self._directory = chosen, directory
        self._bucket = series_.family + "_bucket"

    def record(self, amount: int | float, attributes: Attributes = None, context: Any = None) -> None:
        if self._sdk is not None:
            _forward(self._sdk.record, amount, attributes, context)
        try:
            child, series_ = self._series.entry(attributes)
            with _series_lock:  # as `record_gaps`, which reads and writes the sum as one step
                child.observe(amount)
            self._exemplar(amount, attributes, context, series_)
        except Exception:
            _failed(self._what)

    def record_gaps(self, gaps: list[float], attributes: Attributes = None) -> None:
        """A stream's chunk gaps, in stream order, at once (chunk_histogram.py): into the labelled
        child as `observe()` per gap would leave it (the sum added gap by gap in order, under the
        series lock, so the read and the write of the sum are one step; each bucket incremented
        by its count), and to the SDK instrument merged; the exemplar, if any, of the first gap.
        The child's counts and sum are `tally`'s, on the child's own bounds, in one pass."""
        if not gaps:
            return
        try:
            child, series_ = self._series.entry(attributes)
            with _series_lock:
                counts, _, _, total = tally(gaps, child._upper_bounds[:-1], 0, child._sum.get())
                child._sum.set(total)
            for bucket, n in zip(child._buckets, counts):
                if n:
                    bucket.inc(n)
            self._exemplar(gaps[0], attributes, None, series_)
        except Exception:
            _failed(self._what)
        if self._sdk is not None:
            record_gaps(self._sdk, gaps, attributes or {})

    def _exemplar(self, amount: float, attributes: Attributes, context: Any, series_: SeriesKey) -> None:
        """The measurement as its bucket's exemplar, if the exemplar filter takes it (a sampled span)."""
        if self._directory is None or self._filter is None or not math.isfinite(amount):
            return
        exemplar = span_exemplar(amount, attributes, context, self._filter)
        if exemplar is not None:
            bound = bucket_bound(float(amount), self._series.buckets or ())
            process_file(self._directory).write((self._bucket, series_, bound), exemplar)


class _Gauge(_Instrument, api._Gauge):
    _what = "multiprocess gauge"

    def set(self, amount: int | float, attributes: Attributes = None, context: Any = None) -> None:
        self._measure("set", "set", amount, attributes, context)


class MultiprocessMeter(api.Meter):
    """Synchronous instruments write to the multiprocess files (and to the SDK meter when
    `forward`); observable ones, whose callbacks would run in the serving process, go to the SDK
    meter only."""

    def __init__(self, sdk: api.Meter, name: str, version: str | None = None, schema_url: str | None = None,
                 attributes: Attributes = None, *, forward: bool = True, exemplars: Any = None) -> None:
        super().__init__(name, version, schema_url)
        self._sdk = sdk
        self._forward = forward
        self._scope = scope_labels(name, version, schema_url, attributes)
        self._exemplars = exemplars
        """The exemplar filter (the SDK provider's); None: no exemplars."""

    def _sdk_or_none(self, create: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._sdk, create)(*args, **kwargs) if self._forward else None

    def create_counter(self, name: str, unit: str = "", description: str = "") -> api.Counter:
        return _Counter(series("counter", name, unit, description, self._scope),
                        self._sdk_or_none("create_counter", name, unit, description))

    def create_up_down_counter(self, name: str, unit: str = "", description: str = "") -> api.UpDownCounter:
        return _UpDownCounter(series("updowncounter", name, unit, description, self._scope),
                              self._sdk_or_none("create_up_down_counter", name, unit, description))

    def create_histogram(self, name: str, unit: str = "", description: str = "", *,
                         explicit_bucket_boundaries_advisory: Sequence[float] | None = None) -> api.Histogram:
        buckets = explicit_bucket_boundaries_advisory
        sdk = None
        if self._forward:
            sdk = (self._sdk.create_histogram(name, unit, description) if buckets is None else
                   self._sdk.create_histogram(name, unit, description,
                                              explicit_bucket_boundaries_advisory=buckets))
        return _Histogram(series("histogram", name, unit, description, self._scope,
                                 tuple(buckets) if buckets is not None else tuple(_default_buckets())), sdk,
                          self._exemplars, requested())

    def create_gauge(self, name: str, unit: str = "", description: str = "") -> Any:
        return _Gauge(series("gauge", name, unit, description, self._scope),
                      self._sdk_or_none("create_gauge", name, unit, description))

    def create_observable_counter(self, name: str, callbacks: Any = None, unit: str = "",
                                  description: str = "") -> api.ObservableCounter:
        return self._sdk.create_observable_counter(name, callbacks, unit, description)

    def create_observable_up_down_counter(self, name: str, callbacks: Any = None, unit: str = "",
                                          description: str = "") -> api.ObservableUpDownCounter:
        return self._sdk.create_observable_up_down_counter(name, callbacks, unit, description)

    def create_observable_gauge(self, name: str, callbacks: Any = None, unit: str = "",
                                description: str = "") -> api.ObservableGauge:
        return self._sdk.create_observable_gauge(name, callbacks, unit, description)


class MultiprocessMeterProvider(api.MeterProvider):
    """Meters whose measurements reach every worker's `/metrics` sum, and the SDK provider's
    readers (OTLP, ...) too when it has any. `force_flush` and `shutdown` are the SDK provider's."""

    def __init__(self, sdk: Any, *, forward: bool) -> None:
        self.sdk_provider = sdk
        self._forward = forward
        self._exemplars = exemplar_filter(sdk)
        self._meters: dict[tuple[str, str | None, str | None], MultiprocessMeter] = {}
        self._lock = threading.Lock()
        internal.renew_lock_after_fork(self)

    def get_meter(self, name: str, version: str | None = None, schema_url: str | None = None,
                  attributes: Attributes = None) -> api.Meter:
        key = (name, version, schema_url)
        with self._lock:
            meter = self._meters.get(key)
            if meter is None:
                sdk = self.sdk_provider.get_meter(name, version, schema_url, attributes)
                meter = self._meters[key] = MultiprocessMeter(sdk, name, version, schema_url, attributes,
                                                             forward=self._forward, exemplars=self._exemplars)
            return meter

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return bool(self.sdk_provider.force_flush(timeout_millis))

    def shutdown(self, timeout_millis: float = 30_000) -> None:
        self.sdk_provider.shutdown(timeout_millis=timeout_millis)


