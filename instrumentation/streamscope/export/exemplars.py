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
import glob
import json
import math
import mmap
import os
import struct
import threading
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from streamscope.core import guard as internal

from .prometheus_names import family_name, label_value, sanitize_attribute, scope_labels

__all__ = [
    "SUFFIX", "Exemplar", "ExemplarFile", "ExemplarStore", "bucket_bound", "convert", "exemplar_filter",
    "exemplar_reader", "process_file", "read_exemplars", "series_key", "span_exemplar",
]

TRACE_ID, SPAN_ID = "trace_id", "span_id"
SUFFIX = ".ex"
"""The exemplar files' extension: not `.db`, which prometheus-client's collector reads as its own."""
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
# The file: an 8-byte header (magic `SSX1`, then the bytes used, u32), then records, each 8-aligned:
#   u32 key length, u32 0, the key (UTF-8 JSON `[bucket sample name, [[label, value], ...], le]`)
#   padded to 8, then 48 bytes: trace id (2 × u64), span id (u64), value (f64), timestamp (f64),
#   CRC-32 of those 40 bytes (u32), u32 0.
# A bucket's record is appended the first time it gets an exemplar and overwritten in place after
# (so the file grows with the buckets that ever had one, never with the observations). A reader
# that catches a record half written sees its CRC wrong and skips it for this scrape.

_MAGIC = b"SSX1"
_HEADER = struct.Struct("<4sI")
_KEYLEN = struct.Struct("<II")
_PAYLOAD = struct.Struct("<QQQdd")
_CRC = struct.Struct("<II")
_RECORD = _PAYLOAD.size + _CRC.size  # 48
_INITIAL = 1 << 14


def _pad(n: int) -> int:
    return (n + 7) & ~7


def _payload(exemplar: Exemplar) -> bytes:
    body = _PAYLOAD.pack(exemplar.trace_id >> 64, exemplar.trace_id & (2**64 - 1), exemplar.span_id,
                         exemplar.value, exemplar.timestamp)
    return body + _CRC.pack(zlib.crc32(body), 0)


def encode_key(key: Key) -> bytes:
    name, series, le = key
    return json.dumps([name, [list(kv) for kv in series], repr(le)], separators=(",", ":")).encode()


def decode_key(raw: bytes) -> Key:
    name, series, le = json.loads(raw)
    return str(name), tuple((str(k), str(v)) for k, v in series), float(le)


class ExemplarFile:
    """This process's exemplar file in a multiprocess directory: one slot per bucket, the latest
    exemplar in it. A forked child opens a file of its own at its first write (the parent's is
    shared memory: writing there would overwrite the parent's slots)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._lock = threading.Lock()
        self._pid = -1
        self._mm: mmap.mmap | None = None
        self._fd = -1
        self._slots: dict[Key, int] = {}
        self._used = 0
        internal.renew_lock_after_fork(self)

    def _open(self) -> mmap.mmap:
        pid = os.getpid()
        if self._mm is not None and self._pid == pid:
            return self._mm
        # A new process (or the first write): the inherited map and descriptor are the parent's file's;
        # closed here (the parent's stay open), and a file of this process's own started.
        if self._mm is not None:
            self._mm.close()
            os.close(self._fd)
        self._mm, self._fd, self._slots = None, -1, {}
        path = os.path.join(self.directory, f"exemplars_{pid}{SUFFIX}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)  # held for the process's life, as prometheus-client's
        size = os.fstat(fd).st_size
        if size < _INITIAL:
            os.ftruncate(fd, _INITIAL)
            size = _INITIAL
        mm = mmap.mmap(fd, size)
        magic, used = _HEADER.unpack_from(mm, 0)
        if magic != _MAGIC:
            used = _HEADER.size
            _HEADER.pack_into(mm, 0, _MAGIC, used)
        else:  # a pid reused within one directory: its slots are ours
            for key, offset, _ in _records(bytes(mm[:used])):
                self._slots[key] = offset
        self._mm, self._fd, self._pid, self._used = mm, fd, pid, used
        return mm

    def write(self, key: Key, exemplar: Exemplar) -> None:
        with self._lock:
            mm = self._open()
            offset = self._slots.get(key)
            if offset is None:
                raw = encode_key(key)
                need = self._used + _KEYLEN.size + _pad(len(raw)) + _RECORD
                if need > len(mm):
                    mm = self._grow(need)
                start = self._used
                _KEYLEN.pack_into(mm, start, len(raw), 0)
                mm[start + _KEYLEN.size:start + _KEYLEN.size + len(raw)] = raw
                offset = start + _KEYLEN.size + _pad(len(raw))
                mm[offset:offset + _RECORD] = _payload(exemplar)
                self._used = need
                _HEADER.pack_into(mm, 0, _MAGIC, need)  # the record is whole before a reader can see it
                self._slots[key] = offset
            else:
                mm[offset:offset + _RECORD] = _payload(exemplar)

    def _grow(self, need: int) -> mmap.mmap:
        assert self._mm is not None
        size = len(self._mm)
        while size < need:
            size *= 2
        self._mm.close()
        os.ftruncate(self._fd, size)
        self._mm = mmap.mmap(self._fd, size)
        return self._mm


def _records(data: bytes) -> Iterator[tuple[Key, int, Exemplar | None]]:
    """(key, payload offset, exemplar or None when torn) for every record of a file's bytes."""
    position = _HEADER.size
    while position + _KEYLEN.size <= len(data):
        length, _ = _KEYLEN.unpack_from(data, position)
        start = position + _KEYLEN.size
        offset = start + _pad(length)
        if length == 0 or offset + _RECORD > len(data):
            return
        key = decode_key(data[start:start + length])
        body = data[offset:offset + _PAYLOAD.size]
        crc, _ = _CRC.unpack_from(data, offset + _PAYLOAD.size)
        exemplar = None
        if zlib.crc32(body) == crc:
            high, low, span_id, value, timestamp = _PAYLOAD.unpack(body)
            exemplar = Exemplar((high << 64) | low, span_id, value, timestamp)
        yield key, offset, exemplar
        position = offset + _RECORD


def read_file(path: str) -> dict[Key, Exemplar]:
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _HEADER.size:
        return {}
    magic, used = _HEADER.unpack_from(data, 0)
    if magic != _MAGIC:
        return {}
    return {key: exemplar for key, _, exemplar in _records(data[:used]) if exemplar is not None}


def read_exemplars(directory: str) -> dict[Key, Exemplar]:
    """The latest exemplar per bucket over every process's file in `directory`."""
    latest: dict[Key, Exemplar] = {}
    for path in glob.glob(os.path.join(directory, f"exemplars_*{SUFFIX}")):
        try:
            found = read_file(path)
        except (OSError, ValueError):  # a file being created, or damaged: skipped for this scrape
            continue
        for key, exemplar in found.items():
            current = latest.get(key)
            if current is None or exemplar.timestamp > current.timestamp:
                latest[key] = exemplar
    return latest


# -- Which measurements become exemplars (the multiprocess instruments) ----------------------------


def exemplar_filter(sdk_provider: Any = None) -> Any:
    """The exemplar filter the SDK provider uses (its configuration, from `OTEL_METRICS_EXEMPLAR_FILTER`
    or its `exemplar_filter` argument); the SDK's default, trace-based, if it cannot be read."""
    found = getattr(getattr(sdk_provider, "_sdk_config", None), "exemplar_filter", None)
    if found is not None:
        return found
    from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, AlwaysOnExemplarFilter, TraceBasedExemplarFilter

    chosen = os.environ.get("OTEL_METRICS_EXEMPLAR_FILTER", "trace_based").strip().lower()
    if chosen == "always_off":
        return AlwaysOffExemplarFilter()
    if chosen == "always_on":
        return AlwaysOnExemplarFilter()
    return TraceBasedExemplarFilter()


def span_exemplar(value: float, attributes: Any, context: Any, chosen: Any) -> Exemplar | None:
    """An exemplar of a measurement if the filter takes it and a span is current (in `context`,
    else the current context); None otherwise."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace

    ctx = context if context is not None else otel_context.get_current()
    now = time.time_ns()
    if not chosen.should_sample(value, now, attributes, ctx):
        return None
    span = trace.get_current_span(ctx).get_span_context()
    if not span.is_valid:
        return None
    return Exemplar(span.trace_id, span.span_id, float(value), now / 1e9)


_files: dict[str, ExemplarFile] = {}
_files_lock = threading.Lock()


def process_file(directory: str) -> ExemplarFile:
    """This process's one `ExemplarFile` for `directory` (two would write two files for one pid)."""
    with _files_lock:
        found = _files.get(directory)
        if found is None:
            found = _files[directory] = ExemplarFile(directory)
        return found


def _renew_files_lock() -> None:
    global _files_lock
    _files_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_files_lock)
