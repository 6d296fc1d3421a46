"""Budgets from observed distributions: high percentiles with headroom, per model and route.

* `first_token` = p99.9 of time to first content × 1.5: the first content carries queueing and
  thinking, the phase most sensitive to load, so it gets the widest margin.
* `idle` = p99.9 of the largest gap between content events × 2: past that, the stream is dead.
* no `deadline` unless the caller has one (`--deadline`): a total cap punishes long answers.
* `connect` = p99 of time to headers × 1.3: connecting and queueing are tight and steady, so
  p99 and a small buffer. It is written as a comment: it is the HTTP client's connect (headers)
  timeout, not one of streamscope's budgets (first-token already bounds the wait for the headers).

With fewer than about 1,000 samples a p99.9 is simply the largest value seen; the evidence
printed beside each number says how many samples it rests on. Groups with fewer than
`min_samples` get no number at all.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FIRST_TOKEN_HEADROOM = 1.5
CONNECT_HEADROOM = 1.3
IDLE_HEADROOM = 2.0
QUANTILES = (0.5, 0.99, 0.999)


@dataclass(frozen=True)
class Distribution:
    """How a quantity was observed: sample count and the quantiles `QUANTILES`."""

    samples: int
    p50: float
    p99: float
    p999: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Distribution | None:
        if not values:
            return None
        ordered = sorted(values)
        return cls(len(ordered), *(quantile(ordered, q) for q in QUANTILES))


def quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass
class Evidence:
    """What was observed for one group (all traffic, a model, a route)."""

    first_content: Distribution | None = None
    max_gap: Distribution | None = None
    time_to_headers: Distribution | None = None


@dataclass
class Observations:
    default: Evidence = field(default_factory=Evidence)
    models: dict[str, Evidence] = field(default_factory=dict)
    routes: dict[str, Evidence] = field(default_factory=dict)

    def put(self, kind: str, name: str, evidence: Evidence) -> None:
        """File `evidence` for all traffic (`default`), a model or a route."""
        if kind == "default":
            self.default = evidence
        elif kind == "model":
            self.models[name] = evidence
        else:
            self.routes[name] = evidence


def _round_up(seconds: float) -> float:
    """Up to a readable number: 0.1 s below 10 s, whole seconds above."""
    return math.ceil(seconds * 10) / 10 if seconds < 10 else float(math.ceil(seconds))


def propose(evidence: Evidence, min_samples: int) -> dict[str, float]:
    out: dict[str, float] = {}
    fc, gap = evidence.first_content, evidence.max_gap
    if fc is not None and fc.samples >= min_samples:
        out["first_token"] = _round_up(max(fc.p999 * FIRST_TOKEN_HEADROOM, 0.1))
    if gap is not None and gap.samples >= min_samples:
        out["idle"] = _round_up(max(gap.p999 * IDLE_HEADROOM, 0.1))
    return out


def propose_connect(evidence: Evidence, min_samples: int) -> float | None:
    """The connect (headers) timeout: p99 of time to headers with headroom, or None."""
    headers = evidence.time_to_headers
    if headers is None or headers.samples < min_samples:
        return None
    return _round_up(max(headers.p99 * CONNECT_HEADROOM, 0.1))


def _evidence_comment(evidence: Evidence) -> list[str]:
    lines = []
    for name, dist in (("time to first content", evidence.first_content), ("largest gap", evidence.max_gap),
                       ("time to headers", evidence.time_to_headers)):
        if dist is None and name == "time to headers":
            continue  # an older exporter's data: nothing to say
        if dist is not None:
            lines.append(f"# {name}: {dist.samples} samples, p50 {dist.p50:.3f} s, p99 {dist.p99:.3f} s, "
                         f"p99.9 {dist.p999:.3f} s")
        else:
            lines.append(f"# {name}: no samples")
    return lines


def _table(header: str, evidence: Evidence, min_samples: int, deadline: float | None) -> list[str]:
    values = propose(evidence, min_samples)
    if deadline is not None:
        values["deadline"] = deadline
    lines = ["", header, *_evidence_comment(evidence)]
    if not values:
        lines.append(f"# too few samples (< {min_samples}) to propose anything")
    lines += [f"{key} = {value:g}" for key, value in values.items()]
    connect = propose_connect(evidence, min_samples)
    if connect is not None:
        lines.append(f"# connect = {connect:g}")
    return lines


def _quote(name: str) -> str:
    return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_toml(observations: Observations, *, min_samples: int = 20, deadline: float | None = None,
            source: str = "") -> str:
    """The budget loader's TOML (`STREAMSCOPE_CONFIG`), with the evidence beside each number."""
    lines = [
        "# Budgets proposed by `streamscope suggest`" + (f" from {source}" if source else "") + ".",
        f"# first_token = p99.9(time to first content) x {FIRST_TOKEN_HEADROOM}; "
        f"idle = p99.9(largest gap) x {IDLE_HEADROOM}; "
        + ("deadline = the caller's deadline." if deadline is not None else "no deadline: none was given."),
        "# Numbers only: keep your own first_content settings (the times were measured under them).",
        f"# connect = p99(time to headers) x {CONNECT_HEADROOM}: set it as your HTTP client's connect timeout "
        "(e.g. anthropic.Anthropic(timeout=httpx.Timeout(600, connect=...))); it stays a comment here, as "
        "first_token already bounds the wait for the headers.",
    ]
    lines += _table("[budgets.default]", observations.default, min_samples, deadline)
    for model, evidence in sorted(observations.models.items()):
        lines += _table(f"[budgets.models.{_quote(model)}]", evidence, min_samples, None)
    for route, evidence in sorted(observations.routes.items()):
        lines += _table(f"[budgets.routes.{_quote(route)}]", evidence, min_samples, None)
    return "\n".join(lines) + "\n"


def from_spans(spans: Iterable[Mapping[str, Any]]) -> Observations:
    """Exact distributions from span attributes (a span file)."""
    groups: dict[tuple[str, str], tuple[list[float], list[float], list[float]]] = {}

    def add(key: tuple[str, str], attrs: Mapping[str, Any]) -> None:
        first, gaps, headers = groups.setdefault(key, ([], [], []))
        value = attrs.get("streamscope.time_to_first_content")
        if isinstance(value, (int, float)):
            first.append(float(value))
        gap = attrs.get("streamscope.max_gap")
        if isinstance(gap, (int, float)):
            gaps.append(float(gap))
        waited = attrs.get("streamscope.time_to_headers")
        if isinstance(waited, (int, float)) and not isinstance(waited, bool):
            headers.append(float(waited))

    for attrs in spans:
        add(("default", ""), attrs)
        model = attrs.get("gen_ai.request.model")
        if isinstance(model, str):
            add(("model", model), attrs)
        route = attrs.get("streamscope.route")
        if isinstance(route, str):
            add(("route", route), attrs)
    out = Observations()
    for (kind, name), (first, gaps, headers) in groups.items():
        out.put(kind, name, Evidence(Distribution.of(first), Distribution.of(gaps), Distribution.of(headers)))
    return out
