"""Distributions from a Prometheus server's HTTP API, for `streamscope suggest`.

Quantiles come from `histogram_quantile` over the histograms streamscope exports, so they are
only as fine as the bucket boundaries; sample counts from the histograms' `_count`.
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any

from .suggest import Distribution, Evidence, Observations, QUANTILES

HISTOGRAMS = {
    "first_content": "streamscope_time_to_first_content_seconds",
    "max_gap": "streamscope_max_gap_seconds",
}
GROUPS = {"default": "", "model": "gen_ai_request_model", "route": "streamscope_route"}


def query(base_url: str, expr: str, timeout: float = 10.0) -> list[dict[str, Any]]:
    """An instant query; the result vector (raises on an API error)."""
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=timeout) as response:
        body = json.load(response)
    if body.get("status") != "success":
        raise RuntimeError(f"Prometheus query failed: {body.get('error', body)}")
    return list(body["data"]["result"])


def _by(label: str) -> str:
    return f" by ({label})" if label else ""


def _key(sample: dict[str, Any], label: str) -> str:
    return sample["metric"].get(label, "") if label else ""


def from_prometheus(base_url: str, window: str = "1h") -> Observations:
    out = Observations()
    for kind, label in GROUPS.items():
        found: dict[str, dict[str, Distribution | None]] = {}
        for quantity, metric in HISTOGRAMS.items():
            counts = {_key(s, label): float(s["value"][1])
                      for s in query(base_url, f"sum{_by(label)} (increase({metric}_count[{window}]))")}
            qs: dict[str, list[float]] = {}
            for q in QUANTILES:
                grouping = ", ".join(x for x in ("le", label) if x)
                expr = f"histogram_quantile({q}, sum by ({grouping}) (increase({metric}_bucket[{window}])))"
                for s in query(base_url, expr):
                    qs.setdefault(_key(s, label), []).append(float(s["value"][1]))
            for name, values in qs.items():
                samples = int(round(counts.get(name, 0)))
                ok = len(values) == len(QUANTILES) and all(v == v for v in values) and samples > 0  # NaN: no data
                found.setdefault(name, {})[quantity] = Distribution(samples, *values) if ok else None
        for name, quantities in found.items():
            if kind == "route" and not name:
                continue  # series without a route
            evidence = Evidence(quantities.get("first_content"), quantities.get("max_gap"))
            if kind == "default":
                out.default = evidence
            elif kind == "model":
                out.models[name] = evidence
            else:
                out.routes[name] = evidence
    return out
