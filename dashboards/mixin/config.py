"""Everything a user may override, in one place: the mixin's ``_config``.

Why: thresholds that suit one service page another one's on-call for nothing, and a Prometheus
that scrapes many services needs the queries narrowed to streamscope's. Every threshold, the label
selector, the rule windows and the Grafana settings are fields of :class:`Config`; a TOML or YAML
file (``generate.py --config my.toml``) overrides any of them and leaves the rest at their
defaults. The defaults generate the committed ``rules.yml`` and dashboard.
"""

from __future__ import annotations

import json
import re
import tomllib
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A config file or value that cannot be used; the message names the key."""


def _doc(default: Any, doc: str) -> Any:
    """A field with its one-line documentation (``--print-config`` writes it as a comment)."""
    return field(default=default, metadata={"doc": doc})


def _for(default: str, alert: str) -> Any:
    """An alert's ``for:``: how long its condition must hold before it fires (pending until then)."""
    return _doc(default, f"{alert}: how long the condition must hold before it fires")


@dataclass(frozen=True)
class Config:
    """The mixin's settings. Ratios are shares (0.05 = 5%), of requests unless a field says what of."""

    # -- What to query ----------------------------------------------------------------------
    selector: str = _doc("", 'label matchers AND-ed into every query and rule, e.g. job="llm-api"')
    # -- Windows of the recording rules and alerts -------------------------------------------
    short_window: str = _doc("5m", "alerts need the ratio above threshold here too: still happening")
    long_window: str = _doc("30m", "alerts need the ratio above threshold here: real, not a blip")
    # -- Alert thresholds (the matching panels draw them as dashed lines) -----------------------
    min_request_rate: float = _doc(
        0.05, "requests/s over long_window below which no ratio alert fires (retries: logical requests/s)")
    partial_ratio_max: float = _doc(
        0.05, "StreamscopePartialFailuresRising: share of logical requests failed after content")
    first_token_firing_ratio_max: float = _doc(
        0.05, "StreamscopeFirstTokenFiringsRising: share killed by the first-token budget")
    mid_stream_stall_share_max: float = _doc(0.02, "StreamscopeMidStreamStalls: stalled_mid_stream share")
    budget_exhausted_share_max: float = _doc(
        0.05, "StreamscopeBudgetExhaustedShareHigh: budget_exhausted share")
    silently_unverified_share_max: float = _doc(
        0.10, "StreamscopeSilentlyUnverifiedShareHigh: silently_unverified share")
    deadline_in_thinking_share_max: float = _doc(
        0.05, "StreamscopeDeadlineInThinkingShareHigh: deadline_in_thinking share")
    rate_limited_share_max: float = _doc(
        0.05, "StreamscopeRateLimitingRising: share of calls failing with rate_limited")
    attempts_per_request_max: float = _doc(
        1.5, "StreamscopeRetriesPerRequestRising: mean attempts per logical request (>= 1)")
    doomed_dwell_seconds_max: float = _doc(
        30.0, "StreamscopeDoomedRequestDwell: mean seconds of calls that ended with an error")
    pool_size: int | None = _doc(
        None, "StreamscopeInFlightNearPoolSize: streams a job can hold at once; 0 or unset: alert left out")
    pool_headroom_share: float = _doc(
        0.8, "StreamscopeInFlightNearPoolSize: fires above this share of pool_size, 0..1")
    # -- Resume and the fleet's Redis store ----------------------------------------------------
    resume_window: str = _doc("10m", "StreamscopeResumeFailing: the window its share and its guard are taken over")
    min_resume_rate: float = _doc(
        0.02, "reconnects/s per job over resume_window below which StreamscopeResumeFailing does not fire")
    resume_failure_share_max: float = _doc(
        0.2, "StreamscopeResumeFailing: share of reconnects that found their stream expired or its owner lost")
    store_error_window: str = _doc(
        "2m", "StreamscopeRedisUnreachable: the window store errors are counted over (>= 2 scrape intervals)")
    # -- Spend and waste ------------------------------------------------------------------------
    wasted_spend_share_max: float = _doc(
        0.25, "StreamscopeWastedSpendHigh: share of spend (USD) on calls whose class bought no answer")
    min_spend_rate_usd_per_hour: float = _doc(
        0.5, "USD/hour over long_window below which StreamscopeWastedSpendHigh does not fire")
    # -- How long each alert's condition must hold before it fires (its `for:`) ----------------
    partial_failures_for: str = _for("5m", "StreamscopePartialFailuresRising")
    first_token_firings_for: str = _for("15m", "StreamscopeFirstTokenFiringsRising")
    mid_stream_stalls_for: str = _for("5m", "StreamscopeMidStreamStalls")
    budget_exhausted_for: str = _for("15m", "StreamscopeBudgetExhaustedShareHigh")
    silently_unverified_for: str = _for("30m", "StreamscopeSilentlyUnverifiedShareHigh")
    deadline_in_thinking_for: str = _for("15m", "StreamscopeDeadlineInThinkingShareHigh")
    deadline_unreachable_for: str = _for("0m", "StreamscopeDeadlineUnreachable")
    instrumentation_errors_for: str = _for("0m", "StreamscopeInstrumentationErrors")
    rate_limiting_for: str = _for("15m", "StreamscopeRateLimitingRising")
    retries_per_request_for: str = _for("15m", "StreamscopeRetriesPerRequestRising")
    doomed_dwell_for: str = _for("10m", "StreamscopeDoomedRequestDwell")
    in_flight_near_pool_for: str = _for("5m", "StreamscopeInFlightNearPoolSize")
    breaker_open_for: str = _for("1m", "StreamscopeBreakerOpen")
    resume_failing_for: str = _for("5m", "StreamscopeResumeFailing")
    redis_unreachable_for: str = _for("5m", "StreamscopeRedisUnreachable")
    wasted_spend_for: str = _for("15m", "StreamscopeWastedSpendHigh")
    # -- Grafana ------------------------------------------------------------------------------
    datasource: str = _doc("", "data source the dashboard opens with (its name); empty: Grafana's default")
    datasource_regex: str = _doc("", "only offer Prometheus data sources whose name matches this regex")
    dashboard_uid: str = _doc("streamscope-triage", "the triage dashboard's uid (its URL)")
    dashboard_title: str = _doc("streamscope / Streaming triage", "the triage dashboard's title")
    dashboard_tags: tuple[str, ...] = _doc(("streamscope", "gen-ai"), "the triage dashboard's tags")
    time_from: str = _doc("now-3h", "the dashboard's default time range, from this to now")
    refresh: str = _doc("1m", "the dashboard's auto-refresh interval")
    runbook_url: str = _doc(
        "https://github.com/streamscope/streamscope/blob/main/dashboards/runbooks.md",
        "runbooks.md as your team reads it; alerts link to <runbook_url>#<alertname lower-cased>")

    def __post_init__(self) -> None:
        """Fail at load time, naming the key, rather than in Prometheus at rule-load time."""
        parse_selector(self.selector)
        short, long_ = seconds("short_window", self.short_window), seconds("long_window", self.long_window)
        if short >= long_:
            raise ConfigError(f"short_window ({self.short_window}) must be shorter than long_window "
                              f"({self.long_window})")
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name.endswith(("_ratio_max", "_share_max")) and not 0 <= value <= 1:
                raise ConfigError(f"{f.name} is a share, 0..1; got {value}")
            if f.name.endswith("_for"):
                seconds(f.name, value)  # an alert's `for:`: a Prometheus duration such as 5m
        if self.min_request_rate < 0:
            raise ConfigError(f"min_request_rate must be >= 0; got {self.min_request_rate}")
        if self.min_resume_rate < 0:
            raise ConfigError(f"min_resume_rate must be >= 0; got {self.min_resume_rate}")
        if self.min_spend_rate_usd_per_hour < 0:
            raise ConfigError(f"min_spend_rate_usd_per_hour must be >= 0; got {self.min_spend_rate_usd_per_hour}")
        for key in ("resume_window", "store_error_window"):
            if seconds(key, getattr(self, key)) <= 0:
                raise ConfigError(f"{key} must be longer than 0; got {getattr(self, key)!r}")
        if self.attempts_per_request_max < 1:
            raise ConfigError(f"attempts_per_request_max is a mean number of attempts, >= 1; "
                              f"got {self.attempts_per_request_max}")
        if self.doomed_dwell_seconds_max <= 0:
            raise ConfigError(f"doomed_dwell_seconds_max must be > 0 seconds; got {self.doomed_dwell_seconds_max}")
        if self.pool_size is not None and (isinstance(self.pool_size, bool) or not isinstance(self.pool_size, int)
                                           or self.pool_size < 0):
            raise ConfigError(f"pool_size must be a whole number of streams >= 0; got {self.pool_size!r}")
        if self.pool_size == 0:
            object.__setattr__(self, "pool_size", None)  # 0 is how a TOML file says "no pool size"
        if not 0 < self.pool_headroom_share <= 1:
            raise ConfigError(f"pool_headroom_share is a share of pool_size, above 0 and at most 1; "
                              f"got {self.pool_headroom_share}")

    @property
    def matchers(self) -> tuple[str, ...]:
        """The selector as separate label matchers, ready to join into ``{...}``."""
        return parse_selector(self.selector)


# -- Selectors and durations ------------------------------------------------------------------

_MATCHER = re.compile(r"""\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')\s*""")
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def parse_selector(text: str) -> tuple[str, ...]:
    """``job="a", env=~"prod.*"`` (braces optional) -> ``('job="a"', 'env=~"prod.*"')``.

    Parsed rather than pasted so that a typo fails here with the key's name, not as a PromQL
    parse error in every rule and panel.
    """
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    out: list[str] = []
    pos = 0
    while body[pos:].strip():
        match = _MATCHER.match(body, pos)
        if match is None:
            raise ConfigError(f'selector: expected label matchers like job="api", got {text!r}')
        out.append(f"{match[1]}{match[2]}{match[3]}")
        pos = match.end()
        if pos < len(body):
            if body[pos] != ",":
                raise ConfigError(f"selector: expected ',' between matchers in {text!r}")
            pos += 1
    return tuple(out)


def seconds(key: str, duration: str) -> float:
    """A Prometheus duration (``5m``, ``1h30m``) in seconds; recording-rule names embed it."""
    if not duration or _DURATION.sub("", duration):
        raise ConfigError(f"{key}: not a Prometheus duration: {duration!r}")
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in _DURATION.findall(duration))


DEFAULT = Config()

# -- Files ------------------------------------------------------------------------------------


def _coerce(key: str, kind: Any, value: Any) -> Any:
    """Check one file value against the field's type; ints are fine where floats are expected."""
    if kind == int | None:
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        raise ConfigError(f"{key}: expected a whole number (0 or null: none), got {value!r}")
    if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind is str and isinstance(value, str):
        return value
    if typing.get_origin(kind) is tuple and isinstance(value, list | tuple) \
            and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigError(f"{key}: expected {getattr(kind, '__name__', kind)}, got {value!r}")


def from_mapping(data: Mapping[str, Any], source: str = "config") -> Config:
    """A Config from parsed file content: unknown keys are errors (a typo must not pass silently)."""
    hints = typing.get_type_hints(Config)
    unknown = sorted(set(data) - set(hints))
    if unknown:
        raise ConfigError(f"{source}: unknown key(s) {', '.join(unknown)}; known: {', '.join(hints)}")
    try:
        return replace(DEFAULT, **{k: _coerce(k, hints[k], v) for k, v in data.items()})
    except ConfigError as error:
        raise ConfigError(f"{source}: {error}") from None


def load(path: str | Path) -> Config:
    """Read overrides from a ``.toml`` or ``.yaml``/``.yml`` file of top-level keys."""
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":
        data = tomllib.loads(text)
    elif path.suffix in (".yaml", ".yml"):
        data = yaml.safe_load(text) or {}
    else:
        raise ConfigError(f"{path}: use a .toml, .yaml or .yml file")
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping of keys to values")
    return from_mapping(data, str(path))


def _toml(value: Any) -> str:
    """A default as TOML: a literal string ('...') when it holds quotes or backslashes; None (TOML
    has no null) as 0, which the optional numbers read as "not set"."""
    if value is None:
        return "0"
    if isinstance(value, str):
        return f"'{value}'" if ('"' in value or "\\" in value) and "'" not in value else json.dumps(value)
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return repr(value)


def defaults_toml() -> str:
    """Every key with its default and documentation, commented out: a starting point to copy."""
    lines = ["# streamscope dashboards and rules: uncomment what you change.", ""]
    for f in fields(Config):
        lines += [f"# {f.metadata['doc']}", f"# {f.name} = {_toml(f.default)}", ""]
    return "\n".join(lines)
