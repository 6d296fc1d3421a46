"""The GenAI semantic conventions' registry, read from the pinned YAML in `semconv-genai/`, and the
checks that judge what streamscope emits against it.

`Registry` loads the models with pyyaml and resolves their `ref_group`s (across files, and
`span.<type>` for an event that takes a span's attributes): `attribute(key)` (type, stability,
members), `metric(name)` (unit, instrument, buckets from docs/buckets.yaml, attributes with their
requirement levels), `span(type, provider)` (kind, attributes, with the provider's refinement
merged in), `event(name)`, `renamed(old)` (changelog.yaml's pending renames and replacements) and
`spelling(key)` (the registry's spelling of a key it does not have).

The `check_*` functions return `Deviation`s (name / what is wrong / what the registry says), never
raise: the test collects them over every run and fails with the whole list.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).parent / "semconv-genai"

# Keys that spans.yaml / events.yaml reference from the core conventions' registry (not part of the
# GenAI registry), with their types there.
EXTERNAL: dict[str, str] = {
    "error.type": "string",
    "server.address": "string",
    "server.port": "int",
    "exception.type": "string",
    "exception.message": "string",
    "exception.stacktrace": "string",
}
# Namespaces a registry governs: a key in one must be a key of that registry.
GOVERNED = ("gen_ai.",)
# The OpenAI registry governs only the keys it lists; a key near one of them is a misspelling.
VENDOR = ("openai.",)
OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
LATEST = "gen_ai_latest_experimental"


@dataclass(frozen=True)
class Attribute:
    key: str
    type: str  # string, int, double, boolean, string[], int[], double[], boolean[], any, template[...], enum
    stability: str
    members: tuple[str, ...] = ()


@dataclass(frozen=True)
class Requirement:
    level: str  # required, conditionally_required, recommended, opt_in
    condition: str = ""


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    instrument: str  # histogram, counter, updowncounter, gauge
    buckets: tuple[float, ...] | None
    attributes: Mapping[str, Requirement]


@dataclass(frozen=True)
class Span:
    type: str
    kind: str
    attributes: Mapping[str, Requirement]


@dataclass(frozen=True)
class Event:
    name: str
    attributes: Mapping[str, Requirement]
    severity: int | None  # the number its note asks for


@dataclass(frozen=True)
class Deviation:
    name: str
    wrong: str
    registry: str

    def __str__(self) -> str:
        return f"{self.name} / {self.wrong} / {self.registry}"


def _load(relative: str, root: Path = ROOT) -> dict[str, Any]:
    with (root / relative).open(encoding="utf-8") as f:
        loaded = yaml.safe_load(f)
    assert isinstance(loaded, dict), relative
    return loaded


def _requirement(raw: Any) -> Requirement | None:
    if raw is None:
        return None
    if isinstance(raw, str):
        return Requirement(raw)
    (level, condition), = raw.items()
    return Requirement(level, str(condition).strip())


def _type(raw: Any) -> tuple[str, tuple[str, ...]]:
    if isinstance(raw, dict):
        return "enum", tuple(str(m["value"]) for m in raw["members"])
    return str(raw), ()


class Registry:
    """The pinned conventions, resolved."""

    def __init__(self, root: Path = ROOT) -> None:
        def load(relative: str) -> dict[str, Any]:
            return _load(relative, root)

        self._attributes: dict[str, Attribute] = {}
        for relative in ("model/gen-ai/registry.yaml", "model/openai/registry.yaml"):
            for raw in load(relative)["attributes"]:
                kind, members = _type(raw["type"])
                self._attributes[raw["key"]] = Attribute(raw["key"], kind, raw["stability"], members)
        spans = load("model/gen-ai/spans.yaml")
        files = [spans, load("model/gen-ai/metrics.yaml"), load("model/gen-ai/token-metrics.yaml")]
        self._groups: dict[str, list[dict[str, Any]]] = {
            g["id"]: g["attributes"] for f in files for g in f.get("attribute_groups", [])}
        self._spans: dict[str, dict[str, Any]] = {s["type"]: s for s in spans["spans"]}
        self._refinements: dict[str, dict[str, Any]] = {r["id"]: r for r in spans.get("span_refinements", [])}
        for span_type in self._spans:
            self._groups[f"span.{span_type}"] = self._spans[span_type]["attributes"]
        self._metrics: dict[str, dict[str, Any]] = {m["name"]: m for f in files[1:] for m in f["metrics"]}
        self._buckets: dict[str, tuple[float, ...]] = {
            name: tuple(float(b) for b in bounds) for name, bounds in load("docs/buckets.yaml").items()}
        self._events: dict[str, dict[str, Any]] = {e["name"]: e for e in load("model/gen-ai/events.yaml")["events"]}
        self.changelog = load("changelog.yaml")

    # ---------------------------------------------------------------------------- look-ups

    def attribute(self, key: str) -> Attribute | None:
        """A registry key (GenAI or OpenAI), or one of the core keys the models reference; None otherwise."""
        if key in self._attributes:
            return self._attributes[key]
        if key in EXTERNAL:
            return Attribute(key, EXTERNAL[key], "stable")
        return None

    def attributes(self, key: str) -> tuple[str, str] | None:
        """(type, stability) of `key`, None if the registry has no such key."""
        found = self.attribute(key)
        return None if found is None else (found.type, found.stability)

    def resolve(self, entries: Iterable[dict[str, Any]], seen: tuple[str, ...] = (),
                base: Mapping[str, Requirement] | None = None) -> dict[str, Requirement]:
        """An attribute list with its `ref_group`s expanded, over `base` (a refined span's own list);
        a later `ref` of a key overrides its requirement level only where it gives one."""
        out: dict[str, Requirement] = dict(base or {})
        for entry in entries:
            if "ref_group" in entry:
                group = entry["ref_group"]
                assert group in self._groups, f"unresolved ref_group {group}"
                assert group not in seen, f"ref_group cycle through {group}"
                out.update(self.resolve(self._groups[group], (*seen, group)))
                continue
            key = entry["ref"]
            assert self.attribute(key) is not None, f"ref {key} names no registry key"
            level = _requirement(entry.get("requirement_level"))
            if level is not None:
                out[key] = level
            elif key not in out:
                out[key] = Requirement("recommended")
        return out

    def metric(self, name: str) -> Metric | None:
        raw = self._metrics.get(name)
        if raw is None:
            return None
        return Metric(name, raw["unit"], raw["instrument"], self._buckets.get(name),
                      self.resolve(raw.get("attributes", [])))

    def metric_names(self) -> list[str]:
        return list(self._metrics)

    def span(self, span_type: str = "gen_ai.client.inference", provider: str | None = None) -> Span:
        raw = self._spans[span_type]
        attrs = self.resolve(raw["attributes"])
        refinement = self._refinements.get(f"{provider}.{span_type}") if provider else None
        if refinement is not None:
            assert refinement["ref"] == span_type, refinement["id"]
            attrs = self.resolve(refinement["attributes"], base=attrs)
        return Span(span_type, raw["kind"], attrs)

    def event(self, name: str) -> Event | None:
        raw = self._events.get(name)
        if raw is None:
            return None
        note = str(raw.get("note", ""))
        severity = None
        for number, word in ((5, "DEBUG"), (13, "WARN")):
            if f"severity number {number}" in note or f"to {word}" in note:
                severity = number
        return Event(name, self.resolve(raw.get("attributes", [])), severity)

    def renamed(self, old: str) -> str | list[str] | None:
        """The new name(s) of an old metric or attribute, as changelog.yaml's pending changes have it."""
        log = self.changelog
        for section in ("renamed_metrics", "renamed_attributes", "renamed_spans"):
            if old in (log.get(section) or {}):
                return str(log[section][old]["to"])
        if old in (log.get("replaced_metrics") or {}):
            return [str(n) for n in log["replaced_metrics"][old]["by"]]
        return None

    def removed_attribute(self, key: str) -> bool:
        return key in (self.changelog.get("removed_attributes") or {})

    def narrowed(self, name: str) -> str | None:
        entry = (self.changelog.get("narrowed_metrics") or {}).get(name)
        return None if entry is None else str(entry["note"])

    def spelling(self, key: str) -> str | None:
        """The registry's spelling of a key it does not have: a pending rename, else the closest key."""
        new = self.renamed(key)
        if isinstance(new, str):
            return new
        keys = list(self._attributes)
        # an old `gen_ai.<vendor>.*` key lives under `<vendor>.*` now
        for vendor in VENDOR:
            stripped = key.removeprefix("gen_ai.")
            if stripped != key and stripped.startswith(vendor) and stripped in self._attributes:
                return stripped
        close = difflib.get_close_matches(key, keys, n=1, cutoff=0.75)
        if close:
            return close[0]
        tail = key.rsplit(".", 2)[-2:]
        same_tail = [k for k in keys if k.rsplit(".", 2)[-2:] == tail]
        return same_tail[0] if len(same_tail) == 1 else None


# -------------------------------------------------------------------------------- typing


def type_matches(kind: str, value: Any) -> bool:
    """Whether an OpenTelemetry attribute value is of the registry's type."""
    if kind in ("string", "enum"):
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "double":
        return isinstance(value, float)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind.endswith("[]"):
        return isinstance(value, (tuple, list)) and all(type_matches(kind[:-2], v) for v in value)
    if kind == "any":
        return value is not None
    if kind.startswith("template["):
        return type_matches(kind[len("template["):-1], value)
    raise AssertionError(f"registry type {kind} unknown to the checker")


def describe(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        inner = sorted({describe(v) for v in value})
        return f"{'|'.join(inner) or 'empty'}[]"
    return {bool: "boolean", int: "int", float: "double", str: "string"}.get(type(value), type(value).__name__)


PROPOSED = {"gen_ai.usage.cost.amount": "double", "gen_ai.usage.cost.currency": "string",
            "gen_ai.usage.cost.source": "string"}
"""Keys of open GenAI proposals not yet in the registry (semantic-conventions-genai #443: a call's
cost), which streamscope emits under the opt-in only: checked for their proposed types."""


def check_keys(reg: Registry, where: str, attrs: Mapping[str, Any], *,
               allow_removed: Iterable[str] = ()) -> list[Deviation]:
    """Every governed key (gen_ai.*, and the OpenAI registry's near misses) spelled and typed as the
    registry says; the core keys the models reference (server.*, error.type, exception.*) typed."""
    out: list[Deviation] = []
    allowed_removed = set(allow_removed)
    for key, value in attrs.items():
        found = reg.attribute(key)
        if found is None:
            if key in allowed_removed:
                continue
            if key in PROPOSED:  # an open proposal's name, emitted under the opt-in: typed as proposed
                if not type_matches(PROPOSED[key], value):
                    out.append(Deviation(f"{where}: {key}", f"type {describe(value)} ({value!r})",
                                         f"type {PROPOSED[key]} (proposed)"))
                continue
            governed = key.startswith(GOVERNED)
            near = reg.spelling(key)
            vendor_miss = key.startswith(VENDOR) and near is not None and near.startswith(VENDOR)
            if governed or vendor_miss:
                if reg.removed_attribute(key):
                    entry = reg.changelog["removed_attributes"][key]
                    out.append(Deviation(f"{where}: {key}", "not a registry key (removed)",
                                         f"replaced by {entry['replaced_by']}"))
                else:
                    out.append(Deviation(f"{where}: {key}", "not a registry key",
                                         f"spelled {near}" if near else "no such key"))
            continue
        if not type_matches(found.type, value):
            out.append(Deviation(f"{where}: {key}", f"type {describe(value)} ({value!r})",
                                 f"type {found.type}"))
    return out


def check_required(where: str, attrs: Mapping[str, Any], wanted: Mapping[str, Requirement],
                   conditions: Mapping[str, bool]) -> list[Deviation]:
    """Required keys present; a conditionally required (or opt-in) key present where its condition
    holds (`conditions[key]`); a key whose condition does not hold absent where the condition is
    "if and only if" or an error (`error.type`)."""
    out: list[Deviation] = []
    for key, need in wanted.items():
        if need.level == "required" and key not in attrs:
            out.append(Deviation(f"{where}: {key}", "missing", "required"))
        elif need.level in ("conditionally_required", "opt_in") and key in conditions:
            holds = conditions[key]
            if holds and key not in attrs:
                out.append(Deviation(f"{where}: {key}", "missing",
                                     f"{need.level}: {need.condition or 'opted in'}"))
            exclusive = "if and only if" in need.condition.lower() or key == "error.type"
            if not holds and key in attrs and exclusive:
                out.append(Deviation(f"{where}: {key}", f"set ({attrs[key]!r}) where its condition does not hold",
                                     f"{need.level}: {need.condition}"))
    if "server.port" in wanted and "server.address" in attrs and "server.port" not in attrs:
        out.append(Deviation(f"{where}: server.port", "missing", "conditionally_required: If `server.address` is set."))
    return out


# -------------------------------------------------------------------------------- spans


@dataclass
class CallFacts:
    """What the test knows about one call, for the conditions of conditionally required keys."""

    provider: str
    failed: bool
    request: set[str] = field(default_factory=set)  # conditionally required keys whose condition holds
    content: bool = False  # content capture on the span


def check_span(reg: Registry, span: Any, facts: CallFacts) -> list[Deviation]:
    """The inference span (spans.yaml, with the provider's refinement): name, kind, keys, levels."""
    attrs = dict(span.attributes or {})
    definition = reg.span("gen_ai.client.inference", facts.provider)
    where = f"span[{facts.provider}]"
    out = check_keys(reg, where, attrs)
    if span.kind.name.lower() != definition.kind:
        out.append(Deviation(f"{where} kind", span.kind.name, definition.kind.upper()))
    op, model = attrs.get("gen_ai.operation.name"), attrs.get("gen_ai.request.model")
    name = f"{op} {model}" if model else str(op)
    if span.name != name:
        out.append(Deviation(f"{where} name", repr(span.name),
                             f"{{gen_ai.operation.name}} {{gen_ai.request.model}}: {name!r}"))
    if attrs.get("gen_ai.provider.name") != facts.provider:
        out.append(Deviation(f"{where}: gen_ai.provider.name", repr(attrs.get("gen_ai.provider.name")),
                             f"MUST be {facts.provider!r}"))
    conditions = {
        "error.type": facts.failed,
        "gen_ai.request.model": True,  # every call names its model
        "gen_ai.request.stream": True,  # every call streams
        **{key: key in facts.request for key in definition.attributes
           if definition.attributes[key].level == "conditionally_required"
           and key not in ("error.type", "gen_ai.request.model", "gen_ai.request.stream", "server.port")},
    }
    for key in ("gen_ai.input.messages", "gen_ai.output.messages"):
        conditions[key] = facts.content
    out += check_required(where, attrs, definition.attributes, conditions)
    if attrs.get("gen_ai.request.stream") not in (None, True):
        out.append(Deviation(f"{where}: gen_ai.request.stream", repr(attrs["gen_ai.request.stream"]),
                             "true for a streaming request"))
    for event in span.events:
        if event.name.startswith(GOVERNED) and reg.event(event.name) is None:
            out.append(Deviation(f"{where} event {event.name}", "not a registry event", "no such event"))
        out += check_keys(reg, f"{where} event {event.name}", dict(event.attributes or {}))
    return out


# -------------------------------------------------------------------------------- metrics


KIND_OF_DATA = {"Histogram": "histogram", "ExponentialHistogram": "histogram", "Gauge": "gauge"}


def instrument_kind(metric: Any) -> str:
    """histogram / counter / updowncounter / gauge, as the SDK's metric data type shows."""
    data = metric.data
    kind = type(data).__name__
    if kind == "Sum":
        return "counter" if data.is_monotonic else "updowncounter"
    return KIND_OF_DATA.get(kind, kind)


def _same_bounds(got: Sequence[float], want: Sequence[float]) -> bool:
    return len(got) == len(want) and all(math.isclose(a, b, rel_tol=1e-9) for a, b in zip(got, want))


def metric_definition(reg: Registry, name: str, latest: bool) -> tuple[Metric | None, list[Deviation], set[str]]:
    """The definition an emitted metric name is judged by, the deviations of the name itself, and
    the removed attributes its old name still carries (allowed on it)."""
    found = reg.metric(name)
    narrowed = reg.narrowed(name)
    new = reg.renamed(name)
    if latest and narrowed is not None:
        renamed = name.replace("gen_ai.client.operation.", "gen_ai.client.inference.")
        return reg.metric(renamed) or found, [Deviation(name, "emitted under the opt-in", narrowed)], set()
    if found is not None:
        return found, [], set()
    if new is None:
        near = difflib.get_close_matches(name, reg.metric_names(), n=1, cutoff=0.75)
        spelled = f"spelled {near[0]}" if near else "no such metric"
        return None, [Deviation(name, "not a registry metric", spelled)], set()
    targets = [new] if isinstance(new, str) else new
    # a replaced histogram is judged by the replacement of its own kind (the per-operation histograms)
    defs = [d for d in (reg.metric(t) for t in targets) if d is not None]
    histograms = [d for d in defs if d.instrument == "histogram"]
    definition = (histograms or defs)[0]
    allowed = set(reg.changelog.get("removed_attributes") or {})
    if latest:
        return definition, [Deviation(name, "old name emitted under the opt-in", f"named {' / '.join(targets)}")], set()
    return definition, [], allowed


def check_metric(reg: Registry, metric: Any, *, latest: bool, failures_possible: bool = True) -> list[Deviation]:
    """One emitted gen_ai.* metric (an OpenTelemetry SDK `Metric`): name, unit, kind, buckets and the
    attributes of each of its points."""
    name = metric.name
    definition, out, removed_ok = metric_definition(reg, name, latest)
    if definition is None:
        return out
    if metric.unit != definition.unit:
        out.append(Deviation(name, f"unit {metric.unit!r}", f"unit {definition.unit!r}"))
    kind = instrument_kind(metric)
    if kind != definition.instrument:
        out.append(Deviation(name, f"instrument {kind}", f"instrument {definition.instrument}"))
    wanted = definition.attributes
    for point in metric.data.data_points:
        attrs = dict(point.attributes or {})
        if definition.instrument == "histogram":
            bounds = tuple(getattr(point, "explicit_bounds", ()) or ())
            if definition.buckets is not None and not _same_bounds(bounds, definition.buckets):
                out.append(Deviation(name, f"bucket boundaries {list(bounds)}",
                                     f"ExplicitBucketBoundaries {list(definition.buckets)} (docs/buckets.yaml)"))
        out += check_keys(reg, name, attrs, allow_removed=removed_ok)
        for key in attrs:
            governed = key.startswith(GOVERNED) or key in EXTERNAL
            if governed and key not in wanted and key not in removed_ok and reg.attribute(key) is not None:
                out.append(Deviation(f"{name}: {key}", "attribute not defined for this metric",
                                     f"attributes {sorted(wanted)}"))
        conditions = {"gen_ai.request.model": True, "gen_ai.provider.name": True,
                      "error.type": "error.type" in attrs}
        out += check_required(name, attrs, wanted, conditions)
    return out


def dedupe(found: Iterable[Deviation]) -> list[Deviation]:
    return sorted(set(found), key=str)


# -------------------------------------------------------------------------------- events


def check_log_record(reg: Registry, record: Any, facts: CallFacts | None, content_in_event: bool) -> list[Deviation]:
    """A log record with an event name (`gen_ai.*`): a registry event, its severity, its attributes."""
    name = record.event_name
    definition = reg.event(name)
    if definition is None:
        return [Deviation(f"event {name}", "not a registry event", "events gen_ai.client.inference.operation.details, "
                                                                     "gen_ai.client.operation.exception")]
    where = f"event {name}"
    attrs = dict(record.attributes or {})
    out = check_keys(reg, where, attrs)
    severity = getattr(record.severity_number, "value", record.severity_number)
    if definition.severity is not None and severity != definition.severity:
        out.append(Deviation(f"{where} severity", str(severity), f"severity number {definition.severity}"))
    if name == "gen_ai.client.operation.exception":
        if "exception.type" not in attrs and "exception.message" not in attrs:
            out.append(Deviation(f"{where}: exception.type", "missing (and no exception.message)",
                                 "conditionally_required: Required if `exception.message` is not set"))
        return out
    conditions: dict[str, bool] = {"gen_ai.request.model": True, "gen_ai.request.stream": True}
    if facts is not None:
        conditions["error.type"] = facts.failed
        for key in ("gen_ai.input.messages", "gen_ai.output.messages"):
            conditions[key] = content_in_event
    out += check_required(where, attrs, definition.attributes, conditions)
    return out
