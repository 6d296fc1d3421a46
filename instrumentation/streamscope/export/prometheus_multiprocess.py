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
in use. It forwards every measurement to an SDK provider too (OTLP, other readers).
`AggregateCollector` serves the sum.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from opentelemetry import metrics as api
from opentelemetry.util.types import Attributes

from streamscope.core import guard as internal

ENV = "PROMETHEUS_MULTIPROC_DIR"
_MAX_CACHED = 4096
"""Attribute sets remembered per instrument (the guards in `MetricsWriter` keep far fewer)."""

# -- Names: the exporter's own helpers, or a copy should it ever move them --------------------------

_UNITS = {
    "d": "days", "h": "hours", "min": "minutes", "s": "seconds", "ms": "milliseconds", "us": "microseconds",
    "ns": "nanoseconds", "By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes", "GiBy": "gibibytes",
    "TiBy": "tibibytes", "KBy": "kilobytes", "MBy": "megabytes", "GBy": "gigabytes", "TBy": "terabytes",
    "m": "meters", "V": "volts", "A": "amperes", "J": "joules", "W": "watts", "g": "grams", "Cel": "celsius",
    "Hz": "hertz", "1": "", "%": "percent",
}
_PER_UNITS = {"s": "second", "m": "minute", "h": "hour", "d": "day", "w": "week", "mo": "month", "y": "year"}
_NAME_RE = re.compile(r"[^a-zA-Z0-9:]+")
_KEY_RE = re.compile(r"[^a-zA-Z0-9]+")


def copy_sanitize_full_name(name: str) -> str:
    """`opentelemetry.exporter.prometheus._mapping.sanitize_full_name` (0.66b0)."""
    if name and name[0].isdigit():
        name = "_" + name[1:]
    return _NAME_RE.sub("_", name)


def copy_sanitize_attribute(key: str) -> str:
    """`..._mapping.sanitize_attribute`: dots and every other non-alphanumeric become `_`."""
    if key and key[0].isdigit():
        key = "_" + key[1:]
    return _KEY_RE.sub("_", key)


def copy_map_unit(unit: str) -> str:
    """`..._mapping.map_unit`: `s` -> `seconds`, `{token}/s` -> `per_second`, annotations dropped."""
    unit = re.sub(r"{.*}", "", unit)
    if unit in _UNITS:
        return _UNITS[unit]
    top, slash, bottom = unit.partition("/")
    if slash and _NAME_RE.sub("_", bottom):
        top = _NAME_RE.sub("_", top)
        top = _UNITS.get(top, top)
        per = _PER_UNITS.get(_NAME_RE.sub("_", bottom), _NAME_RE.sub("_", bottom))
        return f"{top}_per_{per}" if top else f"per_{per}"
    return _NAME_RE.sub("_", unit).strip("_")


try:
    from opentelemetry.exporter.prometheus._mapping import map_unit, sanitize_attribute, sanitize_full_name
except ImportError:  # pragma: no cover - a future exporter that moved them
    map_unit, sanitize_attribute, sanitize_full_name = copy_map_unit, copy_sanitize_attribute, copy_sanitize_full_name


def label_value(value: object) -> str:
    """A label value as the exporter writes it: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, default=str)


def family_name(name: str, unit: str, kind: str) -> str:
    """The exporter's family name: sanitized, `_total` off a counter (the sample gets it back),
    then the unit's suffix unless the name already ends with it."""
    full = sanitize_full_name(name)
    if kind == "counter" and full.endswith("_total"):
        full = full[: -len("_total")]
    suffix = map_unit(unit or "")
    if suffix and not full.endswith("_" + suffix):
        full += "_" + suffix
    return full


@functools.cache
def _scope_rule() -> tuple[tuple[tuple[str, str], ...], str | None]:
    """Which labels the installed exporter puts on every sample for the instrumentation scope:
    ((label, scope field), ...) and the prefix of scope-attribute labels. Asked of the exporter
    itself, once, because releases differ (older ones add none)."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from opentelemetry.sdk.metrics import MeterProvider
    from prometheus_client import CollectorRegistry

    probe = {"probe-name": "name", "probe-version": "version", "probe-schema-url": "schema_url"}
    registry = CollectorRegistry()
    provider = None
    try:
        provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)], shutdown_on_exit=False)
        meter = provider.get_meter("probe-name", "probe-version", "probe-schema-url", {"probe": "probe-attribute"})
        meter.create_counter("probe").add(1)
        found: dict[str, str] = {}
        prefix = None
        for family in registry.collect():
            for sample in family.samples:
                if sample.name != "probe_total":
                    continue
                for label, value in sample.labels.items():
                    if value in probe:
                        found[label] = probe[value]
                    elif value == "probe-attribute" and label.endswith("probe"):
                        prefix = label[: -len("probe")]
        return tuple(sorted(found.items())), prefix
    except Exception:  # an exporter or SDK too old for the probe: no scope labels
        internal.internal_error("the Prometheus exporter's scope labels")
        return (), None
    finally:
        if provider is not None:
            provider.shutdown()


def scope_labels(name: str, version: str | None, schema_url: str | None,
                 attributes: Attributes = None) -> dict[str, str]:
    """The scope labels the exporter adds for this meter (`otel_scope_name`, ... when it does)."""
    fields, prefix = _scope_rule()
    scope = {"name": name, "version": version, "schema_url": schema_url}
    labels = {label: scope[field] or "" for label, field in fields}
    if prefix is not None:
        for key, value in (attributes or {}).items():
            labels[sanitize_attribute(prefix + key)] = label_value(value)
    return labels


# -- The directory ---------------------------------------------------------------------------------


def requested(explicit: str | os.PathLike[str] | None = None) -> str | None:
    """The directory asked for: `PROMETHEUS_MULTIPROC_DIR` (every process must agree, and
    prometheus-client reads the variable), else `explicit`; None when neither is set."""
    env = os.environ.get(ENV) or os.environ.get(ENV.lower())
    if env:
        if explicit is not None and os.path.abspath(os.fspath(explicit)) != os.path.abspath(env):
            internal.logger.warning("streamscope: %s=%s is set, so metrics go there, not to %s", ENV, env,
                                    os.fspath(explicit))
        return env
    return os.fspath(explicit) if explicit is not None else None


def problem(path: str, *, write: bool) -> str | None:
    """What is wrong with `path` as the multiprocess directory, and how to fix it; None if usable."""
    fix = f"create it before the server starts (e.g. `mkdir -p {path}`), writable by every worker"
    if not os.path.exists(path):
        return f"{ENV}={path} does not exist: {fix}"
    if not os.path.isdir(path):
        return f"{ENV}={path} is not a directory: point it at an empty directory ({fix})"
    mode = os.R_OK | os.X_OK | (os.W_OK if write else 0)
    if not os.access(path, mode):
        needs = "writable" if write else "readable"
        uid = getattr(os, "getuid", lambda: "?")()
        return f"{ENV}={path} is not {needs} by this process (uid {uid}): make it {needs} by the user the " \
               f"workers run as"
    return None


def usable(path: str, *, write: bool) -> bool:
    """Whether `path` can be used; if not, one log line says what is wrong and how to fix it."""
    wrong = problem(path, write=write)
    if wrong is not None:
        consequence = "no Prometheus metrics from this process" if write else "no /metrics served"
        internal.logger.warning("streamscope: %s; %s until then", wrong, consequence)
        return False
    return True


def use_directory(path: str) -> None:
    """Make prometheus-client write per-process files in `path` (the variable must be set before a
    value is first written; children inherit it). One value class per process: two would open
    the same files twice and overwrite each other."""
    from prometheus_client import values

    os.environ[ENV] = path
    if not getattr(values.ValueClass, "_multiprocess", False):
        values.ValueClass = values.MultiProcessValue()


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
                 buckets: Sequence[float] | None = None) -> None:
        self.kind = kind
        self.family = family
        self.description = description
        self.scope = dict(scope)
        self.buckets = buckets
        self._metrics: dict[tuple[str, ...], Any] = {}
        self._children: dict[tuple[tuple[str, Any], ...], Any] = {}

    def child(self, attributes: Attributes) -> Any:
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

    def _make(self, attributes: Attributes) -> Any:
        labels = dict(self.scope)
        for key, value in (attributes or {}).items():
            labels[sanitize_attribute(key)] = label_value(value)
        names = tuple(sorted(labels))
        metric = self._metrics.get(names)
        if metric is None:
            metric = self._metrics.setdefault(names, self._metric(names))
        return metric.labels(*(labels[n] for n in names)) if names else metric

    def _metric(self, names: tuple[str, ...]) -> Any:
        import prometheus_client as pc

        if self.kind == "counter":
            return pc.Counter(self.family, self.description, names, registry=None)
        if self.kind == "histogram":
            return pc.Histogram(self.family, self.description, names, registry=None, buckets=self.buckets)
        # An up-down counter sums the live workers (a dead one's in-flight count goes with it, after
        # `mark_process_dead`); a gauge keeps the value set last in any worker, as OTel's last value.
        mode = "livesum" if self.kind == "updowncounter" else "mostrecent"
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
            found = _series[key] = _Series(kind, family, description, scope, buckets)
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


class _Counter(api.Counter):
    def __init__(self, series_: _Series, sdk: api.Counter | None) -> None:
        self._series, self._sdk = series_, sdk

    def add(self, amount: int | float, attributes: Attributes = None, context: Any = None) -> None:
        if self._sdk is not None:
            _forward(self._sdk.add, amount, attributes, context)
        try:
            if amount >= 0:  # as the SDK: a counter never decreases
                self._series.child(attributes).inc(amount)
        except Exception:
            _failed("multiprocess counter")


class _UpDownCounter(api.UpDownCounter):
    def __init__(self, series_: _Series, sdk: api.UpDownCounter | None) -> None:
        self._series, self._sdk = series_, sdk

    def add(self, amount: int | float, attributes: Attributes = None, context: Any = None) -> None:
        if self._sdk is not None:
            _forward(self._sdk.add, amount, attributes, context)
        try:
            self._series.child(attributes).inc(amount)
        except Exception:
            _failed("multiprocess up-down counter")


class _Histogram(api.Histogram):
    def __init__(self, series_: _Series, sdk: api.Histogram | None) -> None:
        self._series, self._sdk = series_, sdk

    def record(self, amount: int | float, attributes: Attributes = None, context: Any = None) -> None:
        if self._sdk is not None:
            _forward(self._sdk.record, amount, attributes, context)
        try:
            self._series.child(attributes).observe(amount)
        except Exception:
            _failed("multiprocess histogram")


class _Gauge(api._Gauge):
    def __init__(self, series_: _Series, sdk: Any) -> None:
        self._series, self._sdk = series_, sdk

    def set(self, amount: int | float, attributes: Attributes = None, context: Any = None) -> None:
        if self._sdk is not None:
            _forward(self._sdk.set, amount, attributes, context)
        try:
            self._series.child(attributes).set(amount)
        except Exception:
            _failed("multiprocess gauge")


class MultiprocessMeter(api.Meter):
    """Synchronous instruments write to the multiprocess files (and to the SDK meter when
    `forward`); observable ones, whose callbacks would run in the serving process, go to the SDK
    meter only."""

    def __init__(self, sdk: api.Meter, name: str, version: str | None = None, schema_url: str | None = None,
                 attributes: Attributes = None, *, forward: bool = True) -> None:
        super().__init__(name, version, schema_url)
        self._sdk = sdk
        self._forward = forward
        self._scope = scope_labels(name, version, schema_url, attributes)

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
                                 tuple(buckets) if buckets is not None else tuple(_default_buckets())), sdk)

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
                                                             forward=self._forward)
            return meter

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return bool(self.sdk_provider.force_flush(timeout_millis))

    def shutdown(self, timeout_millis: float = 30_000) -> None:
        self.sdk_provider.shutdown(timeout_millis=timeout_millis)


# -- Serving the sum -------------------------------------------------------------------------------


def _le(value: str) -> str:
    """`le` as the exporter writes it (`f"{float}"`: `1048576.0`), not Go-style (`1.048576e+06`)."""
    return value if value == "+Inf" else repr(float(value))


def target_info(attributes: Mapping[str, Any]) -> Any:
    """The exporter's `target_info`: the resource attributes as labels."""
    from prometheus_client.core import InfoMetricFamily

    return InfoMetricFamily("target", "Target metadata",
                            value={sanitize_attribute(k): label_value(v) for k, v in attributes.items()})


class AggregateCollector:
    """The sum over every process's files (prometheus-client's `MultiProcessCollector`), finished
    the way the OpenTelemetry exporter finishes its own output, for the families streamscope's
    meters wrote: every sample of a family carries all the family's label names (missing ones
    empty, which Prometheus reads as absent: workers whose measurements had different attributes
    must not make two series of one), `le` written as Python writes the float, and a histogram's
    samples in the exporter's order. Plus `target_info` for the serving process's resource."""

    def __init__(self, path: str, resource_attributes: Mapping[str, Any] | None = None) -> None:
        from prometheus_client.multiprocess import MultiProcessCollector

        self._collector = MultiProcessCollector(None, path)
        self._target = target_info(resource_attributes) if resource_attributes else None
        fields, _prefix = _scope_rule()
        self._marker = next((label for label, field in fields if field == "name"), None)

    def collect(self) -> Iterator[Any]:
        if self._target is not None:
            yield self._target
        for metric in self._collector.collect():
            if self._marker is None or any(self._marker in s.labels for s in metric.samples):
                _finish(metric)
            yield metric


def _finish(metric: Any) -> None:
    from prometheus_client.samples import Sample

    names = sorted({k for s in metric.samples for k in s.labels} - {"le"})
    summed = metric.type != "gauge" or getattr(metric, "_multiprocess_mode", "") in ("sum", "livesum")
    merged: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for s in metric.samples:
        labels = [(k, s.labels.get(k, "")) for k in names]
        if "le" in s.labels:
            labels.append(("le", _le(s.labels["le"])))
        key = (s.name, tuple(labels))
        if key in merged:  # one attribute absent here, empty there: the same series
            merged[key] = merged[key] + s.value if summed else max(merged[key], s.value)
        else:
            merged[key] = s.value
    order = _histogram_order(metric.name) if metric.type == "histogram" else None
    keys: Iterable[tuple[str, tuple[tuple[str, str], ...]]] = merged
    if order is not None:
        keys = sorted(merged, key=order)
    metric.samples = [Sample(name, dict(labels), merged[(name, labels)]) for name, labels in keys]


def _histogram_order(family: str) -> Any:
    """Per series: the buckets by bound, `_count`, `_sum` (the exporter's order)."""
    rank = {family + "_bucket": 0, family + "_count": 1, family + "_sum": 2}

    def key(item: tuple[str, tuple[tuple[str, str], ...]]) -> tuple[Any, ...]:
        name, labels = item
        series_ = tuple(kv for kv in labels if kv[0] != "le")
        le = next((float(v) for k, v in labels if k == "le"), 0.0)
        return series_, rank.get(name, 3), le

    return key


def aggregate_registry(path: str, resource_attributes: Mapping[str, Any] | None = None) -> Any:
    """A registry holding only the sum of every process's files (and `target_info`)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(AggregateCollector(path, resource_attributes))
    return registry


def mark_dead(pid: int, path: str) -> None:
    """Drop a dead worker's live gauges (its in-flight streams); its counters stay summed."""
    from prometheus_client.multiprocess import mark_process_dead

    mark_process_dead(pid, path)
