"""Serving the sum of every worker's multiprocess files as one `/metrics` page, finished the way
`opentelemetry-exporter-prometheus` finishes its own output (see `AggregateCollector`), with the
latest exemplar of each histogram bucket over every worker (exemplar_files.py; OpenMetrics only)."""

from __future__ import annotations

import glob
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from streamscope.core import guard as internal
from streamscope.core.errors import exception_type

from .exemplar_files import read_exemplars
from .exemplars import Exemplar, Key, attach_samples
from .prometheus_names import label_value, sanitize_attribute, scope_rule

logger = logging.getLogger("streamscope")


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
    samples in the exporter's order, its buckets with their exemplars (the latest per bucket in
    any worker's exemplar file). Plus `target_info` for the serving process's resource."""

    def __init__(self, path: str, resource_attributes: Mapping[str, Any] | None = None) -> None:
        from prometheus_client.multiprocess import MultiProcessCollector

        self._path = path
        self._collector = MultiProcessCollector(None, path)
        self._target = target_info(resource_attributes) if resource_attributes else None
        fields, _prefix = scope_rule()
        self._marker = next((label for label, field in fields if field == "name"), None)

    def collect(self) -> Iterator[Any]:
        if self._target is not None:
            yield self._target
        exemplars: dict[Key, Exemplar] | None = None
        files = _written_files(self._path)
        try:
            merged = self._collector.merge(files, accumulate=True)
        except Exception:  # a file no worker wrote, or a damaged one: the page from the others
            merged = self._collector.merge([name for name in files if _readable(name)], accumulate=True)
        for metric in merged:
            if self._marker is None or any(self._marker in s.labels for s in metric.samples):
                if exemplars is None and metric.type == "histogram":
                    exemplars = _exemplars(self._path)
                _finish(metric, exemplars or {})
            yield metric


def _written_files(path: str) -> list[str]:
    """The processes' files (`MultiProcessCollector.collect`'s), but those still empty: a process
    that writes its first value creates its file empty and only then sizes it, and prometheus-client
    reading it in between fails the whole page (an HTTP 500 on a scrape while a gunicorn master
    forks a new worker). An empty file holds no value yet; it is read from the next scrape on."""
    found = []
    for name in glob.glob(os.path.join(path, "*.db")):
        try:
            if os.path.getsize(name) > 0:
                found.append(name)
        except FileNotFoundError:  # a dead worker's live gauges, removed since the glob
            pass
    return found


_said_unreadable: set[str] = set()


def _readable(name: str) -> bool:
    """Whether prometheus-client can read a process's file; one WARNING per file where it cannot."""
    from prometheus_client.mmap_dict import MmapedDict

    try:
        list(MmapedDict.read_all_values_from_file(name))  # a generator: read to its end
        return True
    except FileNotFoundError:
        return False
    except Exception as exc:
        if name not in _said_unreadable:
            _said_unreadable.add(name)
            logger.warning("streamscope: %s is not a metrics file a worker wrote, or is damaged (%s): /metrics "
                           "leaves it out; remove it, and empty the directory when the service starts",
                           name, exception_type(exc))
        return False


def _exemplars(path: str) -> dict[Key, Exemplar]:
    try:
        return read_exemplars(path)
    except Exception:
        internal.internal_error("reading exemplars")
        return {}


def _finish(metric: Any, exemplars: dict[Key, Exemplar] | None = None) -> None:
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
    if exemplars and metric.type == "histogram":
        metric.samples = attach_samples(metric.samples, exemplars)


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
