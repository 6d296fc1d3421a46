"""Prometheus names as `opentelemetry-exporter-prometheus` writes them: family names with their unit
suffix, sanitized label names and values, and the scope labels the installed exporter adds.

The multiprocess meters (prometheus_multiprocess.py) write under exactly these names, so the
dashboards and the alert rules cannot tell which exporter is in use; dashboards/mixin reads them too.
"""

from __future__ import annotations

import functools
import json
import re

from opentelemetry.util.types import Attributes

from streamscope.core import guard as internal

__all__ = [
    "copy_map_unit",
    "copy_sanitize_attribute",
    "copy_sanitize_full_name",
    "family_name",
    "label_value",
    "map_unit",
    "sanitize_attribute",
    "sanitize_full_name",
    "scope_labels",
    "scope_rule",
]

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
def scope_rule() -> tuple[tuple[tuple[str, str], ...], str | None]:
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
    fields, prefix = scope_rule()
    scope = {"name": name, "version": version, "schema_url": schema_url}
    labels = {label: scope[field] or "" for label, field in fields}
    if prefix is not None:
        for key, value in (attributes or {}).items():
            labels[sanitize_attribute(prefix + key)] = label_value(value)
    return labels
