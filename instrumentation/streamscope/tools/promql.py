"""Distributions from a Prometheus server's HTTP API, for `streamscope suggest`.

Quantiles come from `histogram_quantile` over the histograms streamscope exports, so they are
only as fine as the bucket boundaries; sample counts from the histograms' `_count`.

Counts over the window use :func:`increase_from_zero`, not a bare `increase()`: a series that
appears inside the window (a new model, route or bucket, a fresh process) already carries its
first observations in its first sample, which `increase()` treats as a baseline and drops. On a
short or young window that loses real samples, and the largest value is as likely as any to be
among them; a p99.9 budget computed without it can kill the very request it was sized from.
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .suggest import QUANTILES, Distribution, Evidence, Observations

HISTOGRAMS = {
    "first_content": "streamscope_time_to_first_content_seconds",
    "max_gap": "streamscope_max_gap_seconds",
    "time_to_headers": "streamscope_time_to_headers_seconds",
}
GROUPS = {"default": "", "model": "gen_ai_request_model", "route": "streamscope_route"}


DURATION = re.compile(r"(\d+(ms|s|m|h|d|w|y))+")
"""A Prometheus range duration: `1h`, `30m`, `1h30m`."""


class PrometheusError(RuntimeError):
    """The server could not be asked, or did not answer as Prometheus's HTTP API: one line that
    names the URL and what went wrong."""


def server_url(text: str) -> str:
    """A server's base URL; `localhost:9090` means `http://localhost:9090`, as it does to curl."""
    url = text.strip() if "://" in text else f"http://{text.strip()}"
    parts = urllib.parse.urlsplit(url)
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        parts = parts._replace(netloc="")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http:// or https:// URL such as http://localhost:9090, got {text!r}")
    return url.rstrip("/")


def query(base_url: str, expr: str, timeout: float = 10.0) -> list[dict[str, Any]]:
    """An instant query; the result vector. Raises PrometheusError, never a network exception."""
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    api = "is it a Prometheus server's base URL (its HTTP API under /api/v1)?"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.load(response)
    except urllib.error.HTTPError as error:
        explained = _api_error(error)
        if explained:  # Prometheus itself, refusing the query
            raise PrometheusError(f"{base_url} refused the query: HTTP {error.code}: {explained}") from None
        raise PrometheusError(f"{base_url} answered HTTP {error.code} {error.reason}; {api}") from None
    except urllib.error.URLError as error:
        reason = getattr(error.reason, "strerror", None) or error.reason
        raise PrometheusError(f"cannot reach {base_url}: {reason}; is the server up at that address?") from None
    except TimeoutError:
        raise PrometheusError(f"{base_url} did not answer within {timeout:g} s; is the server up?") from None
    except (OSError, ValueError, http.client.HTTPException) as error:  # not HTTP, dropped, not JSON
        raise PrometheusError(f"{base_url} did not answer as Prometheus ({error}); {api}") from None
    try:
        if body["status"] != "success":
            raise PrometheusError(f"{base_url} refused the query: {body.get('error', body)}")
        return list(body["data"]["result"])
    except (KeyError, TypeError):
        raise PrometheusError(f"{base_url} answered JSON that is not a Prometheus query result; {api}") from None


def _api_error(error: urllib.error.HTTPError) -> str | None:
    """Prometheus's own explanation in an error response (`{"status": "error", "error": ...}`)."""
    try:
        body = json.load(error)
        return str(body["error"]) if isinstance(body, dict) and body.get("error") else None
    except Exception:
        return None


def increase_from_zero(selector: str, window: str) -> str:
    """Observations added over `window`, counting series born inside it from zero.

    A series that existed when the window opened gets the usual `increase()`; one born inside it
    gets its latest value (OpenTelemetry's cumulative counters and buckets start at 0 with the
    process). A counter reset inside a born-in-window series is not seen: that undercounts, as
    before, but only in that rare case.
    """
    existed = f"{selector} offset {window}"
    return (f"(increase({selector}[{window}]) and {existed})"
            f" or (last_over_time({selector}[{window}]) unless {existed})")


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
                      for s in query(base_url, f"sum{_by(label)} ({increase_from_zero(f'{metric}_count', window)})")}
            qs: dict[str, list[float]] = {}
            for q in QUANTILES:
                grouping = ", ".join(x for x in ("le", label) if x)
                added = increase_from_zero(f"{metric}_bucket", window)
                expr = f"histogram_quantile({q}, sum by ({grouping}) ({added}))"
                for s in query(base_url, expr):
                    qs.setdefault(_key(s, label), []).append(float(s["value"][1]))
            for name, values in qs.items():
                samples = round(counts.get(name, 0))
                ok = len(values) == len(QUANTILES) and all(v == v for v in values) and samples > 0  # NaN: no data
                found.setdefault(name, {})[quantity] = Distribution(samples, *values) if ok else None
        for name, quantities in found.items():
            if kind == "route" and not name:
                continue  # series without a route
            out.put(kind, name, Evidence(quantities.get("first_content"), quantities.get("max_gap"),
                                         quantities.get("time_to_headers")))
    return out
