#!/usr/bin/env python3
"""Generate streamscope's Grafana dashboards and Prometheus rules from one source.

Why one file: the on-call engineer reads the same ratio on the dashboard that the alert fired on.
Each shared quantity (class share, partial-failure ratio, budget firings per request, ...) is a
Python function of (window, label filter, grouping). The recording rules are its instance over
``[5m]``/``[30m]`` with no filter; the dashboard panels are its instance over ``$__rate_interval``
with the dashboard's ``$provider``/``$model``/``$route`` filters. The alerts read the recorded
series, and alert thresholds are drawn as dashed lines on the panels showing the same ratio. So a
formula, a threshold or a label name is written once, here.

The dashboards query raw metrics rather than the recorded series, so they work on a Prometheus
that has not loaded ``rules.yml`` (a laptop running ``streamscope demo``, a fresh staging stack).

Usage::

    python dashboards/generate.py          # rewrite dashboards/*.json and dashboards/rules.yml
    python dashboards/generate.py --check  # exit 1 if the committed files are stale

Other code (the live test against a real Prometheus) imports this file by path and calls
:func:`panel_expressions` to get every panel query with the dashboard variables filled in.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import yaml
from grafana_foundation_sdk.builders import bargauge, heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.variants import Dataquery
from grafana_foundation_sdk.models import common as common_m
from grafana_foundation_sdk.models import dashboard as dash_m
from grafana_foundation_sdk.models import heatmap as heatmap_m
from grafana_foundation_sdk.models import prometheus as prometheus_m

HERE = Path(__file__).resolve().parent
RULES_FILE = "rules.yml"
RUNBOOK_URL = "https://github.com/streamscope/streamscope/blob/main/dashboards/runbooks.md"

# --------------------------------------------------------------------------------------------
# Labels and selectors
# --------------------------------------------------------------------------------------------

PROVIDER = "gen_ai_provider_name"
MODEL = "gen_ai_request_model"
ROUTE = "streamscope_route"
CLASS = "streamscope_class"
BUDGET = "streamscope_budget"
#: The "model" aggregation level of the recording rules: the key budgets are configured by
#: (``[budgets.models."<glob>"]`` and ``[budgets.routes.<name>]``). ``streamscope_route`` is
#: absent on series without a route; ``sum by`` then simply yields series without it.
MODEL_LEVEL: tuple[str, ...] = (PROVIDER, MODEL, ROUTE)
#: Grouping for "per model" panels; routes are filtered with ``$route`` instead.
PER_MODEL: tuple[str, ...] = (MODEL,)
#: Grouping for budget panels: a budget is set per model and per route.
PER_BUDGET_KEY: tuple[str, ...] = (MODEL, ROUTE)

#: The dashboard's filters. ``=~`` with the All value ``.*`` also matches an absent label, which
#: is what makes ``streamscope_route`` (only present when a route was set) filterable.
DASHBOARD_FILTER: tuple[str, ...] = (
    f'{PROVIDER}=~"$provider"',
    f'{MODEL}=~"$model"',
    f'{ROUTE}=~"$route"',
)
NO_FILTER: tuple[str, ...] = ()

#: What Grafana's variables stand for when an expression is checked or run outside Grafana.
SUBSTITUTIONS: Mapping[str, str] = {
    "provider": ".*",
    "model": ".*",
    "route": ".*",
    "__rate_interval": "5m",
    "__interval": "1m",
    "__range": "1h",
}

RATE_INTERVAL = "$__rate_interval"

# --------------------------------------------------------------------------------------------
# Alert thresholds. Shared by the alerts and the threshold lines of the matching panels.
# --------------------------------------------------------------------------------------------

#: Requests per second (over 30m) below which no ratio alert fires: 90 requests in 30 minutes.
#: A quiet service with 2 failures out of 10 requests is not an incident.
MIN_REQUEST_RATE = 0.05
PARTIAL_RATIO_MAX = 0.05
FIRST_TOKEN_FIRING_RATIO_MAX = 0.05
MID_STREAM_STALL_SHARE_MAX = 0.02
BUDGET_EXHAUSTED_SHARE_MAX = 0.05
SILENTLY_UNVERIFIED_SHARE_MAX = 0.10
DEADLINE_IN_THINKING_SHARE_MAX = 0.05

# --------------------------------------------------------------------------------------------
# PromQL building blocks
# --------------------------------------------------------------------------------------------


def vector(metric: str, matchers: Sequence[str], *extra: str) -> str:
    """A vector selector; ``metric{}`` is avoided so the text reads like hand-written PromQL."""
    all_matchers = [*matchers, *extra]
    return f"{metric}{{{','.join(all_matchers)}}}" if all_matchers else metric


def aggregate(by: Sequence[str], inner: str, op: str = "sum") -> str:
    """``op by (...) (inner)``, or a plain ``op(inner)`` when there is nothing to group by."""
    return f"{op} by ({', '.join(by)}) ({inner})" if by else f"{op}({inner})"


def rate(metric: str, window: str, matchers: Sequence[str], *extra: str) -> str:
    """``rate(metric{...}[window])``."""
    return f"rate({vector(metric, matchers, *extra)}[{window}])"


def quantile(
    q: float, histogram: str, window: str, matchers: Sequence[str], by: Sequence[str]
) -> str:
    """The q-quantile of a classic Prometheus histogram, per ``by``."""
    inner = aggregate((*by, "le"), rate(f"{histogram}_bucket", window, matchers))
    return f"histogram_quantile({q}, {inner})"


def mean(histogram: str, window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """The mean of a histogram's observations: rate of ``_sum`` over rate of ``_count``."""
    return (
        f"{aggregate(by, rate(f'{histogram}_sum', window, matchers))}\n/\n"
        f"{aggregate(by, rate(f'{histogram}_count', window, matchers))}"
    )


# --------------------------------------------------------------------------------------------
# Shared expressions: one function each, instantiated by the recording rules and the panels.
# --------------------------------------------------------------------------------------------

REQUESTS = "streamscope_requests_total"
FIRINGS = "streamscope_budget_firings_total"
UNREACHABLE = "streamscope_deadline_unreachable_total"
LIMIT = "streamscope_budget_limit_seconds"


def requests_rate(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Requests per second, every class."""
    return aggregate(by, rate(REQUESTS, window, matchers))


def class_rate(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Requests per second per failure class."""
    return aggregate((*by, CLASS), rate(REQUESTS, window, matchers))


def class_ratio(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Each class's share of requests (0..1); the classes of one group add up to 1."""
    return (
        f"{class_rate(window, matchers, by)}\n"
        f"/ ignoring ({CLASS}) group_left\n"
        f"{requests_rate(window, matchers, by)}"
    )


def partial_ratio(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Share of requests that failed after content had reached the caller.

    ``streamscope_partial`` is true only for an abnormal end (``error.type`` set) after content,
    so classes that end normally never count, whatever they showed: ``paused`` (a server-paused
    turn the caller continues), ``truncated``, ``refused``, ``silently_unverified``.
    ``or 0 * total`` turns "no partial series yet" into 0: OpenTelemetry creates the
    ``streamscope_partial="true"`` series on its first increment, and a healthy service may
    never have one, which would otherwise read as "no data" rather than "no partial failures".
    """
    partial = aggregate(by, rate(REQUESTS, window, matchers, 'streamscope_partial="true"'))
    total = requests_rate(window, matchers, by)
    return f"(\n  {partial}\n  or 0 * {total}\n)\n/\n{total}"


def firing_rate(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Budget firings per second, per budget (first_token, idle, deadline, read_timeout)."""
    return aggregate((*by, BUDGET), rate(FIRINGS, window, matchers))


def firing_ratio(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Budget firings per request, per budget: the share of requests each budget killed."""
    return (
        f"{firing_rate(window, matchers, by)}\n"
        f"/ ignoring ({BUDGET}) group_left\n"
        f"{requests_rate(window, matchers, by)}"
    )


def deadline_unreachable_ratio(window: str, matchers: Sequence[str], by: Sequence[str]) -> str:
    """Share of requests whose deadline could never fit their thinking budget (seed 003)."""
    return f"{aggregate(by, rate(UNREACHABLE, window, matchers))}\n/\n{requests_rate(window, matchers, by)}"


# --------------------------------------------------------------------------------------------
# Recording rules
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Recording:
    """One shared expression recorded at the model level over one window."""

    level: str
    metric: str
    operation: str
    window: str
    build: Callable[[str, Sequence[str], Sequence[str]], str]

    @property
    def name(self) -> str:
        """``level:metric:operation``, the Prometheus recording-rule naming convention."""
        return f"{self.level}:{self.metric}:{self.operation}{self.window}"

    def expr(self) -> str:
        """The shared expression over this window, unfiltered, at the model level."""
        return self.build(self.window, NO_FILTER, MODEL_LEVEL)


def recordings() -> list[Recording]:
    """Every recorded series, 5m for "is it happening now", 30m for "is it real"."""
    out: list[Recording] = []
    for window in ("5m", "30m"):
        out += [
            Recording("model", "streamscope_requests", "rate", window, requests_rate),
            Recording("model_class", "streamscope_requests", "ratio_rate", window, class_ratio),
            Recording("model", "streamscope_requests_partial", "ratio_rate", window, partial_ratio),
            Recording("model_budget", "streamscope_budget_firings", "rate", window, firing_rate),
            Recording("model_budget", "streamscope_budget_firings", "ratio_rate", window, firing_ratio),
        ]
    out.append(
        Recording(
            "model", "streamscope_deadline_unreachable", "ratio_rate", "30m", deadline_unreachable_ratio
        )
    )
    return out


def recorded(level: str, metric: str, operation: str, window: str) -> str:
    """The name of a recorded series, failing loudly if no such recording exists."""
    name = f"{level}:{metric}:{operation}{window}"
    if name not in {r.name for r in recordings()}:
        raise KeyError(f"no recording rule named {name}")
    return name


# --------------------------------------------------------------------------------------------
# Alerts
# --------------------------------------------------------------------------------------------

#: Alert text templates: the route is named only when the series has one.
WHERE = (
    "{{ $labels.gen_ai_request_model }}"
    "{{ with $labels.streamscope_route }} on route {{ . }}{{ end }}"
)


@dataclass(frozen=True)
class Alert:
    """A Prometheus alerting rule; its runbook section is the lower-cased alert name."""

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str

    @property
    def anchor(self) -> str:
        """GitHub's anchor for the ``## <AlertName>`` heading in runbooks.md."""
        return self.name.lower()

    def rule(self) -> dict[str, Any]:
        """The rule as it appears in rules.yml."""
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook_url": f"{RUNBOOK_URL}#{self.anchor}",
            },
        }


def guarded(condition: str) -> str:
    """Add the request-rate guard: ratios over a handful of requests do not alert."""
    traffic = recorded("model", "streamscope_requests", "rate", "30m")
    return f"{condition}\nand on ({', '.join(MODEL_LEVEL)})\n{traffic} > {MIN_REQUEST_RATE}"


def over_both_windows(level: str, metric: str, operation: str, matcher: str, threshold: float) -> str:
    """Above threshold over 30m (it is real) and over 5m (it is still happening)."""
    long_ = f"{recorded(level, metric, operation, '30m')}{matcher} > {threshold}"
    short = f"{recorded(level, metric, operation, '5m')}{matcher} > {threshold}"
    return guarded(f"{long_}\nand\n{short}")


def class_share_above(klass: str, threshold: float) -> str:
    """One class's share of a model's requests is above threshold, over both windows."""
    return over_both_windows(
        "model_class", "streamscope_requests", "ratio_rate", f'{{{CLASS}="{klass}"}}', threshold
    )


def alerts() -> list[Alert]:
    """The alerts. Thresholds live in module constants so panels can draw them."""
    return [
        Alert(
            name="StreamscopePartialFailuresRising",
            expr=over_both_windows(
                "model", "streamscope_requests_partial", "ratio_rate", "", PARTIAL_RATIO_MAX
            ),
            for_="5m",
            severity="critical",
            summary="Streamed answers are failing after users started reading them.",
            description=(
                "{{ $value | humanizePercentage }} of streamed requests to " + WHERE + " ended "
                "abnormally after content had reached the caller (partial answers), above "
                f"{PARTIAL_RATIO_MAX:.0%} over 30m and 5m. A retry cannot hide these: the user "
                "already saw part of the answer. Check the "
                "class split on the triage dashboard: stalled_mid_stream (provider hung), "
                "deadline_in_answer (deadline too short for long answers) or upstream_error "
                "(errors after the 200)."
            ),
        ),
        Alert(
            name="StreamscopeFirstTokenFiringsRising",
            expr=over_both_windows(
                "model_budget", "streamscope_budget_firings", "ratio_rate",
                f'{{{BUDGET}="first_token"}}', FIRST_TOKEN_FIRING_RATIO_MAX,
            ),
            for_="15m",
            severity="warning",
            summary="The first-token budget is killing requests before their first content.",
            description=(
                "The first-token budget fired on {{ $value | humanizePercentage }} of requests "
                "to " + WHERE + " (above "
                f"{FIRST_TOKEN_FIRING_RATIO_MAX:.0%} over 30m and 5m). After a model change or "
                "a bigger thinking budget this is a sizing problem, not an outage: compare the "
                "first-token budget with p99 time to first content on the dashboard and raise "
                "the budget for this model or route."
            ),
        ),
        Alert(
            name="StreamscopeMidStreamStalls",
            expr=class_share_above("stalled_mid_stream", MID_STREAM_STALL_SHARE_MAX),
            for_="5m",
            severity="warning",
            summary="Streams stop producing content after they started.",
            description=(
                "{{ $value | humanizePercentage }} of requests to " + WHERE + " stalled mid-"
                "stream (idle budget or read timeout after first content), above "
                f"{MID_STREAM_STALL_SHARE_MAX:.0%} over 30m and 5m. A stream that keeps "
                "pinging is caught only by the idle budget. If the largest gap p99 sits far "
                "below the idle budget for healthy streams, these are real stalls upstream; if "
                "it crowds the budget, the idle budget is too tight for this model."
            ),
        ),
        Alert(
            name="StreamscopeBudgetExhaustedShareHigh",
            expr=class_share_above("budget_exhausted", BUDGET_EXHAUSTED_SHARE_MAX),
            for_="15m",
            severity="warning",
            summary="Requests spend their whole token allowance thinking and return no answer.",
            description=(
                "{{ $value | humanizePercentage }} of requests to " + WHERE + " hit the token "
                "limit with no answer (above "
                f"{BUDGET_EXHAUSTED_SHARE_MAX:.0%} over 30m and 5m). More time will not help: "
                "raise max_tokens above the thinking budget plus the answer, or lower the "
                "thinking budget."
            ),
        ),
        Alert(
            name="StreamscopeSilentlyUnverifiedShareHigh",
            expr=class_share_above("silently_unverified", SILENTLY_UNVERIFIED_SHARE_MAX),
            for_="30m",
            severity="warning",
            summary="Answers arrive complete but their checking pass was likely cut short.",
            description=(
                "{{ $value | humanizePercentage }} of requests to " + WHERE + " used (nearly) "
                "their whole thinking budget and then answered (above "
                f"{SILENTLY_UNVERIFIED_SHARE_MAX:.0%} over 30m and 5m). They return 200 and "
                "count as successes elsewhere. Raise the thinking budget (and the deadline so "
                "it still fits) or route these requests to a configuration that can finish."
            ),
        ),
        Alert(
            name="StreamscopeDeadlineInThinkingShareHigh",
            expr=class_share_above("deadline_in_thinking", DEADLINE_IN_THINKING_SHARE_MAX),
            for_="15m",
            severity="warning",
            summary="The deadline runs out while the model is still thinking.",
            description=(
                "{{ $value | humanizePercentage }} of requests to " + WHERE + " hit the "
                "deadline before the answer started (above "
                f"{DEADLINE_IN_THINKING_SHARE_MAX:.0%} over 30m and 5m). The thinking budget "
                "cannot fit in the deadline at the measured decode rate: lower the thinking "
                "budget or raise the deadline; run `streamscope check` on the configuration."
            ),
        ),
        Alert(
            name="StreamscopeDeadlineUnreachable",
            expr=f"{recorded('model', 'streamscope_deadline_unreachable', 'ratio_rate', '30m')} > 0",
            for_="0m",
            severity="info",
            summary="A configuration asks for more thinking than its deadline can hold.",
            description=(
                "{{ $value | humanizePercentage }} of requests to " + WHERE + " over the last "
                "30m had a deadline that could never fit their thinking budget at the measured "
                "decode rate. This is arithmetic, not load: fix the configuration (thinking "
                "budget, deadline, retries) before it shows up as deadline_in_thinking."
            ),
        ),
        Alert(
            name="StreamscopeInstrumentationErrors",
            expr="sum by (job) (increase(streamscope_internal_errors_total[30m])) > 0",
            for_="0m",
            severity="warning",
            summary="streamscope's own instrumentation raised internal errors.",
            description=(
                "{{ $value | humanize }} internal errors in job {{ $labels.job }} over the last "
                "30m. Calls still went through (the instrumentation fails open) but their spans, "
                "classes and metrics may be missing or wrong, so the other alerts undercount."
            ),
        ),
    ]


def rules_document() -> dict[str, Any]:
    """The content of ``rules.yml``."""
    return {
        "groups": [
            {
                "name": "streamscope.rules",
                "rules": [{"record": r.name, "expr": r.expr()} for r in recordings()],
            },
            {"name": "streamscope.alerts", "rules": [a.rule() for a in alerts()]},
        ]
    }


class _RulesDumper(yaml.SafeDumper):
    """Multi-line strings (the expressions) as ``|`` blocks, so rules.yml reads like PromQL."""


def _str_presenter(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_RulesDumper.add_representer(str, _str_presenter)


def render_rules() -> str:
    """rules.yml as text; key order is kept as written so diffs stay readable."""
    header = "# Generated by dashboards/generate.py; edit that file and run `make dashboards`.\n"
    body = yaml.dump(rules_document(), Dumper=_RulesDumper, sort_keys=False, width=10_000)
    return header + body


# --------------------------------------------------------------------------------------------
# Dashboard building blocks
# --------------------------------------------------------------------------------------------

DATASOURCE = dash_m.DataSourceRef(type_val="prometheus", uid="${datasource}")
PanelBuilder = Builder[dash_m.Panel]
REF_IDS = "ABCDEFGHIJ"


class Query(NamedTuple):
    """One panel query: PromQL plus the legend Grafana shows for it."""

    expr: str
    legend: str = ""


def _targets(queries: Sequence[Query], fmt: prometheus_m.PromQueryFormat | None = None,
             instant: bool = False) -> list[Builder[Dataquery]]:
    """Prometheus queries with stable ref ids (A, B, ...) and the panel's datasource."""
    out: list[Builder[Dataquery]] = []
    for ref, q in zip(REF_IDS, queries, strict=False):
        t = prometheus.Dataquery().expr(q.expr).ref_id(ref).datasource(DATASOURCE)
        t = t.legend_format(q.legend or "__auto")
        if fmt is not None:
            t = t.format(fmt)
        t = t.instant() if instant else t.range()
        out.append(t)
    return out


def _threshold_steps(limit: float | None) -> dash_b.ThresholdsConfig:
    """Green base, red from ``limit`` (an alert threshold) when there is one."""
    steps = [dash_m.Threshold(value=None, color="green")]
    if limit is not None:
        steps.append(dash_m.Threshold(value=limit, color="red"))
    return dash_b.ThresholdsConfig().mode(dash_m.ThresholdsMode.ABSOLUTE).steps(steps)


DASHED = [dash_m.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})]

#: Fixed colours for the classes that are not failures, so neither reads as one at a glance (the
#: failure classes keep the palette; the bar gauge colours them by share). ``paused`` is a calm
#: blue: the server paused a long turn and the caller continues it, nothing failed.
CLASS_COLOURS: Mapping[str, str] = {"complete": "#7EB26D", "paused": "#8AB8FF"}

P = TypeVar("P", timeseries.Panel, bargauge.Panel)


def class_colours(panel: P) -> P:
    """Overrides giving each class of :data:`CLASS_COLOURS` its colour (series named by class)."""
    for klass, colour in CLASS_COLOURS.items():
        panel = panel.override_by_name(
            klass, [dash_m.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": colour})]
        )
    return panel


def graph(
    title: str,
    description: str,
    queries: Sequence[Query],
    unit: str,
    *,
    width: int = 8,
    height: int = 8,
    stacked: bool = False,
    threshold: float | None = None,
    dashed_series: str | None = None,
    axis_label: str = "",
) -> timeseries.Panel:
    """A time-series panel; ``threshold`` draws an alert threshold as a dashed red line."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .targets(_targets(queries))
        .unit(unit)
        .span(width)
        .height(height)
        .min(0)
        .fill_opacity(30 if stacked else 5)
        .legend(
            common_b.VizLegendOptions()
            .show_legend(True)
            .display_mode(common_m.LegendDisplayMode.LIST)
            .placement(common_m.LegendPlacement.BOTTOM)
        )
        .tooltip(common_b.VizTooltipOptions().mode(common_m.TooltipDisplayMode.MULTI).sort(common_m.SortOrder.DESCENDING))
        .thresholds(_threshold_steps(threshold))
        .color_scheme(dash_b.FieldColor().mode(dash_m.FieldColorModeId.PALETTE_CLASSIC))
    )
    if axis_label:
        panel = panel.axis_label(axis_label)
    if stacked:
        panel = panel.stacking(common_b.StackingConfig().mode(common_m.StackingMode.NORMAL))
    if threshold is not None:
        panel = panel.thresholds_style(
            common_b.GraphThresholdsStyleConfig().mode(common_m.GraphTresholdsStyleMode.DASHED)
        )
    if dashed_series is not None:
        panel = panel.override_by_regexp(dashed_series, DASHED)
    return panel


def quantiles(
    title: str,
    description: str,
    histogram: str,
    unit: str,
    qs: Sequence[float] = (0.5, 0.95, 0.99),
    by: Sequence[str] = PER_MODEL,
    **kwargs: Any,
) -> timeseries.Panel:
    """Percentiles of one histogram per model: the shape of a phase, not just its average."""
    legend = " ".join("{{" + label + "}}" for label in by)
    queries = [
        Query(quantile(q, histogram, RATE_INTERVAL, DASHBOARD_FILTER, by), f"p{round(q * 100)} {legend}")
        for q in qs
    ]
    return graph(title, description, queries, unit, **kwargs)


def budget_vs_p99(title: str, description: str, budget: str, guarded_expr: str) -> timeseries.Panel:
    """A budget (dashed) beside the observed p99 of the quantity it guards."""
    legend = "{{gen_ai_request_model}} {{streamscope_route}}"
    which = f'{BUDGET}="{budget}"'
    limit = aggregate(PER_BUDGET_KEY, vector(LIMIT, DASHBOARD_FILTER, which), op="max")
    return graph(
        title,
        description,
        [Query(limit, f"budget {legend}"), Query(guarded_expr, f"p99 {legend}")],
        "s",
        dashed_series="^budget .*",
    )


# --------------------------------------------------------------------------------------------
# The triage dashboard
# --------------------------------------------------------------------------------------------

TTFC = "streamscope_time_to_first_content_seconds"
SERVER_TOOL = "streamscope_server_tool_duration_seconds"
DURATION = "gen_ai_client_operation_duration_seconds"
TOKENS = "gen_ai_client_token_usage"
REASONING = "streamscope_usage_reasoning_tokens"
OUTPUT_TOKENS = 'gen_ai_token_type="output"'
F = DASHBOARD_FILTER
R = RATE_INTERVAL


def failing_now() -> list[PanelBuilder]:
    """Row 1: which class of failure, how many users saw half an answer, which budget fired."""
    return [
        class_colours(graph(
            "Requests by class",
            "**Shows** requests per second by streamscope class, stacked: everything that is not "
            "`complete` is a failure a plain \"timeout\" would hide. **If it looks wrong**, the "
            "class tells you the fix: `stalled_before_first_content` = first-token budget or "
            "upstream queueing; `stalled_mid_stream` = stream hung (pings keep a read timeout "
            "happy, only the idle budget catches it); `deadline_in_thinking` = the thinking budget "
            "cannot fit in the deadline; `deadline_in_answer` = the deadline is too short for long "
            "answers; `budget_exhausted` = tokens, not time, ran out (raise max_tokens or lower "
            "thinking); `silently_unverified` = answered but the checking pass was likely cut; "
            "`truncated` = raise max_tokens; `upstream_error` = provider errors, often after the 200; "
            "`refused` is not retryable; `cancelled` is the caller. `paused` is not a failure: the "
            "server paused a long (server-tool) turn and the caller must send it back to continue; "
            "a rising share means longer tool turns, so check that callers continue them.",
            [Query(class_rate(R, F, ()), "{{streamscope_class}}")],
            "reqps",
            width=12,
            stacked=True,
        )),
        class_colours(
            bargauge.Panel()
            .title("Class share over the selected range")
            .description(
                "**Shows** each class's share of all requests over the whole time range picked at the "
                "top right: the one-glance answer to \"which failure is behind the timeouts\". "
                "**If it looks wrong**, pick the biggest bar other than `complete` and `paused` (a "
                "paused turn is not a failure: the caller continues it) and open the runbook "
                "section for it (dashboard link *Runbooks*); narrow with the model and route filters "
                "to see whether one budget entry is responsible."
            )
            .datasource(DATASOURCE)
            .targets(_targets([Query(
                f"sum by ({CLASS}) (increase({vector(REQUESTS, F)}[$__range]))\n"
                f"/ ignoring ({CLASS}) group_left\n"
                f"sum(increase({vector(REQUESTS, F)}[$__range]))",
                "{{streamscope_class}}",
            )], instant=True))
            .unit("percentunit")
            .min(0)
            .max(1)
            .span(6)
            .height(8)
            .display_mode(common_m.BarGaugeDisplayMode.GRADIENT)
            .orientation(common_m.VizOrientation.HORIZONTAL)
            .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
            .thresholds(_threshold_steps(None))
            .color_scheme(dash_b.FieldColor().mode(dash_m.FieldColorModeId.CONTINUOUS_GR_YL_RD))
        ),
        stat.Panel()
        .title("Active streams")
        .description(
            "**Shows** streams open right now. By Little's law this is request rate times time "
            "in flight, so it climbs when the provider slows down even if nothing fails yet. "
            "**If it looks wrong** (climbing toward your worker or connection pool size), a "
            "too-long budget is letting slow streams hold the pool: check the deadline panel "
            "and lower the deadline or idle budget before the pool runs out."
        )
        .datasource(DATASOURCE)
        .targets(_targets([Query(f"sum({vector('streamscope_active_streams', F)})", "active")]))
        .unit("short")
        .span(6)
        .height(8)
        .graph_mode(common_m.BigValueGraphMode.AREA)
        .color_mode(common_m.BigValueColorMode.VALUE)
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]))
        .thresholds(_threshold_steps(None)),
        graph(
            "Partial-failure ratio by model",
            "**Shows** the share of requests that failed *after* content reached the caller: the "
            "user watched an answer stop. These cannot be retried transparently (retries are safe "
            "only before the first content). The dashed line is the "
            "StreamscopePartialFailuresRising threshold. **If it looks wrong**, see which class "
            "rose with it: `stalled_mid_stream` (provider hang; idle budget), `deadline_in_answer` "
            "(deadline too short for long answers: raise it for this route) or `upstream_error` "
            "(errors after the 200: provider incident).",
            [Query(partial_ratio(R, F, PER_MODEL), "{{gen_ai_request_model}}")],
            "percentunit",
            threshold=PARTIAL_RATIO_MAX,
        ),
        graph(
            "Budget firings by budget",
            "**Shows** how often each client budget fired: `first_token` (nothing arrived in time), "
            "`idle` (a started stream went quiet; pings do not count), `deadline` (the whole call "
            "ran out), `read_timeout` (the HTTP client's own per-read timeout). **If it looks "
            "wrong**: a `first_token` rise right after a model or thinking-budget change is a "
            "sizing problem, not an outage (raise the budget for that model); an `idle` rise with "
            "no config change is the provider stalling; a `read_timeout` rise means the SDK "
            "timeout is tighter than the budgets, or a stall without pings.",
            [Query(firing_rate(R, F, ()), "{{streamscope_budget}}")],
            "ops",
            stacked=True,
        ),
        graph(
            "Error types",
            "**Shows** failed operations per second by the semconv `error.type`: `timeout` (a "
            "budget fired or a deadline expired), `cancelled` (the caller gave up), provider types "
            "such as `overloaded_error`, transport failures such as `RemoteProtocolError`, "
            "`incomplete_stream`. **If it looks wrong**: `timeout` alone does not tell you "
            "which failure you have; read *Requests by class* and *Budget firings* for that. "
            "Provider error types rising together across models point at the provider, not at "
            "your configuration.",
            [Query(
                aggregate(("error_type",), rate(f"{DURATION}_count", R, F, 'error_type!=""')),
                "{{error_type}}",
            )],
            "ops",
            stacked=True,
        ),
    ]


def where_time_goes() -> list[PanelBuilder]:
    """Row 2: each phase of a streamed call, so a slow phase is named, not guessed."""
    return [
        quantiles(
            "Time to headers",
            "**Shows** p50/p95/p99 time until response headers arrived, per model: connection, "
            "queueing and the SDK's own retries before the stream. **If it looks wrong** (rising "
            "while later phases are flat), the problem is before the model: network, connection "
            "pool, provider front end or rate limiting; budgets will not fix it.",
            "streamscope_time_to_headers_seconds",
            "s",
        ),
        quantiles(
            "Time to first chunk",
            "**Shows** p50/p95/p99 time to the stream's first event (`message_start`, semconv's "
            "\"first chunk\"), per model. **If it looks wrong** (high while time to headers is "
            "low), the provider accepted the request and is queueing it. Note: the SDK's own "
            "tracing reports first chunk at the first content delta instead; this panel uses "
            "the semconv reading.",
            "gen_ai_client_operation_time_to_first_chunk_seconds",
            "s",
        ),
        quantiles(
            "Time to first content",
            "**Shows** p50/p95/p99 time to the first content event (the event that ends the "
            "first-token wait), per model. Thinking before the answer lives here. **If it looks "
            "wrong** (p99 close to the first-token budget), thinking models are being cut off: "
            "size the first-token budget above this p99 for the model, not the outage playbook.",
            TTFC,
            "s",
        ),
        quantiles(
            "Thinking duration",
            "**Shows** p50/p95/p99 seconds spent thinking before the answer, per model. **If it "
            "looks wrong** (p99 near the deadline), requests run out of time mid-thought "
            "(`deadline_in_thinking`): lower the thinking budget or raise the deadline so that "
            "thinking budget / decode rate fits with room for the answer.",
            "streamscope_thinking_duration_seconds",
            "s",
        ),
        quantiles(
            "Server tool time",
            "**Shows** p50/p95 seconds of one server-side tool run (web search, web fetch, code "
            "execution: from the tool-use block's end to its result), per model. A run is a phase "
            "of its own: the model waits on the tool, pings count as liveness for the idle budget "
            "meanwhile, and the run is never part of *Largest gap*. Healthy: a few seconds for a "
            "web search or fetch, up to minutes for code execution, steady over time. **If it "
            "looks wrong** (p95 climbing), the tool is slow, not the model: the time lands in "
            "*Total duration* and the deadline, so raise the deadline for routes that use server "
            "tools or cap the tool's uses per request; a rising `paused` share alongside means "
            "turns now run long enough for the server to pause them.",
            SERVER_TOOL,
            "s",
            qs=(0.5, 0.95),
        ),
        quantiles(
            "Largest gap between content events",
            "**Shows** p50/p95/p99 of each stream's largest gap between content events after the "
            "first (pings are not content, server tool runs are not gaps), per model. This is what the idle budget guards. "
            "**If it looks wrong**: p99 near the idle budget means healthy streams get killed "
            "(raise idle for the model); a flat p99 with rising `stalled_mid_stream` means real "
            "stalls upstream.",
            "streamscope_max_gap_seconds",
            "s",
        ),
        quantiles(
            "Total duration",
            "**Shows** p50/p95/p99 of the whole operation (semconv operation duration), per "
            "model. This is what the deadline guards. **If it looks wrong** (p99 pinned at the "
            "deadline), the deadline is the binding constraint: `deadline_in_answer` says it "
            "would have finished with more time, `deadline_in_thinking` says the thinking budget "
            "does not fit.",
            DURATION,
            "s",
        ),
        heatmap.Panel()
        .title("Time to first content (heatmap)")
        .description(
            "**Shows** the distribution of time to first content over time, every model selected. "
            "Two bands usually mean two populations (thinking and non-thinking requests, or two "
            "models) sharing one first-token budget. **If it looks wrong** (a band at the budget "
            "edge), split the budget by model or route in `[budgets.models.\"<glob>\"]` so each "
            "population gets a budget above its own p99."
        )
        .datasource(DATASOURCE)
        .targets(_targets(
            [Query(aggregate(("le",), rate(f"{TTFC}_bucket", R, F)), "{{le}}")],
            fmt=prometheus_m.PromQueryFormat.HEATMAP,
        ))
        .span(16)
        .height(8)
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit("s"))
        .cell_values(heatmap.CellValues().unit("reqps"))
        .color(
            heatmap.HeatmapColorOptions()
            .mode(heatmap_m.HeatmapColorMode.SCHEME)
            .scheme("Oranges")
            .exponent(0.5)
            .steps(64)
            .fill("dark-orange")
        )
        .rows_frame(heatmap.RowsHeatmapOptions().layout(common_m.HeatmapCellLayout.LE))
        .show_tooltip()
        .show_legend(),
    ]


def budgets_right() -> list[PanelBuilder]:
    """Row 3: are the budgets sized for what the models actually do?"""
    return [
        budget_vs_p99(
            "First-token budget vs p99 time to first content",
            "**Shows** the first-token budget in force (dashed) beside the observed p99 time to "
            "first content, per model and route. **If it looks wrong**: p99 at or above the "
            "budget means the budget kills healthy (thinking) requests; that is a sizing problem, "
            "not an outage. Set the budget above p99 with margin in `[budgets.models.\"<glob>\"]` "
            "or `[budgets.routes.<name>]`.",
            "first_token",
            quantile(0.99, TTFC, R, F, PER_BUDGET_KEY),
        ),
        budget_vs_p99(
            "Idle budget vs p99 largest gap",
            "**Shows** the idle budget (dashed) beside the observed p99 of the largest gap "
            "between content events, per model and route. Only the idle budget catches a stream "
            "that stalls while still sending pings. **If it looks wrong**: p99 crowding the "
            "budget means slow-but-healthy answers are killed (raise idle); a budget far above "
            "p99 means stalls hold connections longer than needed (lower it).",
            "idle",
            quantile(0.99, "streamscope_max_gap_seconds", R, F, PER_BUDGET_KEY),
        ),
        budget_vs_p99(
            "Deadline vs p99 total duration",
            "**Shows** the deadline (dashed) beside the observed p99 operation duration, per "
            "model and route. **If it looks wrong**: p99 pinned at the deadline means it is "
            "binding; if the failures are `deadline_in_answer` more time helps, if they are "
            "`deadline_in_thinking` or `budget_exhausted` it does not (fix the thinking budget). "
            "A deadline far above p99 lets slow requests hold the pool during a slowdown.",
            "deadline",
            quantile(0.99, DURATION, R, F, PER_BUDGET_KEY),
        ),
        graph(
            "Budget firings per request, by model",
            "**Shows** the share of requests each budget killed, per model. The dashed line is "
            "the StreamscopeFirstTokenFiringsRising threshold. **If it looks wrong**: one model's "
            "`first_token` share jumping after a deploy means its first-token budget is sized "
            "for the old model; `idle` on one model only means that model's gaps are longer; "
            "every model at once points at the provider.",
            [Query(firing_ratio(R, F, PER_MODEL), "{{streamscope_budget}} {{gen_ai_request_model}}")],
            "percentunit",
            threshold=FIRST_TOKEN_FIRING_RATIO_MAX,
        ),
        quantiles(
            "Thinking-budget use",
            "**Shows** p50/p95/p99 of reasoning tokens / `budget_tokens`, per model; 1.0 (red "
            "line) is the whole thinking budget. **If it looks wrong**: p95 at 1.0 with "
            "`silently_unverified` rising means the checking pass is being cut (raise the "
            "thinking budget and the deadline with it); at 1.0 with `budget_exhausted` means "
            "max_tokens leaves no room for the answer (raise max_tokens or lower thinking).",
            "streamscope_thinking_budget_used",
            "percentunit",
            threshold=1.0,
        ),
        quantiles(
            "Decode rate",
            "**Shows** p10 and p50 output tokens per second of generation, per model: the "
            "exchange rate between a thinking budget (tokens) and a deadline (seconds). **If it "
            "looks wrong** (p10 falling), a thinking budget that fitted the deadline no longer "
            "does: thinking budget / p10 decode rate + answer time must stay inside the deadline. "
            "Re-run `streamscope check` with the new rate.",
            "streamscope_decode_rate_per_second",
            "short",
            qs=(0.1, 0.5),
            axis_label="tokens/s",
        ),
        graph(
            "Deadline cannot fit thinking budget",
            "**Shows** the share of requests whose deadline could never fit their thinking "
            "budget at the measured decode rate (budget_tokens / decode rate > deadline), per "
            "model and route. Such requests are killed mid-thought by construction and still "
            "cost the tokens generated. **If it looks wrong** (anything above 0), fix the "
            "configuration, not the provider: lower the thinking budget or raise the deadline "
            "(and count retries against it).",
            [Query(
                deadline_unreachable_ratio(R, F, PER_BUDGET_KEY),
                "{{gen_ai_request_model}} {{streamscope_route}}",
            )],
            "percentunit",
            width=12,
        ),
        table.Panel()
        .title("Budgets in force")
        .description(
            "**Shows** the budgets currently enforced per model, route and budget, in seconds "
            "(after the `deadline()` cap where one applies). A missing row means that budget is "
            "not enforced. **If it looks wrong** (a model missing its own entry, or a default "
            "budget applied to a thinking model), add `[budgets.models.\"<glob>\"]` or "
            "`[budgets.routes.<name>]` in the file named by `STREAMSCOPE_CONFIG`."
        )
        .datasource(DATASOURCE)
        .targets(_targets([Query(
            aggregate((*PER_BUDGET_KEY, BUDGET), vector(LIMIT, F), op="max")
        )], fmt=prometheus_m.PromQueryFormat.TABLE, instant=True))
        .with_transformation(dash_m.DataTransformerConfig(
            id_val="organize",
            options={"excludeByName": {"Time": True}, "renameByName": {"Value": "seconds"}},
        ))
        .unit("s")
        .span(12)
        .height(8)
        .show_header(True)
        .cell_height(common_m.TableCellHeight.SM),
    ]


def tokens() -> list[PanelBuilder]:
    """Row 4: where the tokens go, since thinking spends output tokens the user never sees."""
    by_type = (*PER_MODEL, "gen_ai_token_type")
    reasoning_legend = "reasoning {{gen_ai_request_model}}"
    type_legend = "{{gen_ai_token_type}} {{gen_ai_request_model}}"
    return [
        graph(
            "Token throughput by type",
            "**Shows** input, output and reasoning tokens per second, per model. Reasoning tokens "
            "are billed as output but never shown. **If it looks wrong** (reasoning growing faster "
            "than requests), thinking budgets are being spent in full; check *Thinking-budget "
            "use* and the `budget_exhausted` / `silently_unverified` classes.",
            [
                Query(aggregate(by_type, rate(f"{TOKENS}_sum", R, F)), type_legend),
                Query(aggregate(PER_MODEL, rate(f"{REASONING}_sum", R, F)), reasoning_legend),
            ],
            "short",
            axis_label="tokens/s",
        ),
        graph(
            "Mean tokens per request",
            "**Shows** the mean input, output and reasoning tokens per request, per model. **If "
            "it looks wrong**: mean output close to max_tokens means answers are `truncated` "
            "(raise max_tokens); mean reasoning close to the thinking budget means thinking is "
            "using all it is given.",
            [
                Query(mean(TOKENS, R, F, by_type), type_legend),
                Query(mean(REASONING, R, F, PER_MODEL), reasoning_legend),
            ],
            "short",
            axis_label="tokens",
        ),
        graph(
            "Reasoning share of output tokens",
            "**Shows** reasoning tokens as a share of all output tokens, per model. **If it looks "
            "wrong** (close to 100%), almost the whole allowance goes on thinking and the answer "
            "gets what is left: `budget_exhausted` follows. Raise max_tokens above thinking budget "
            "plus answer, or lower the thinking budget.",
            [Query(
                f"{aggregate(PER_MODEL, rate(f'{REASONING}_sum', R, F))}\n/\n"
                f"{aggregate(PER_MODEL, rate(f'{TOKENS}_sum', R, F, OUTPUT_TOKENS))}",
                "{{gen_ai_request_model}}",
            )],
            "percentunit",
        ),
    ]


def _query_variable(name: str, label: str, query: str) -> dash_b.QueryVariable:
    """A filter variable: multi-select, All = ``.*`` so an absent label still matches.

    The id is the name: the SDK's default id is one fixed UUID for every variable, and
    Grafana's variable store keys variables by id.
    """
    return (
        dash_b.QueryVariable(name)
        .id(name)
        .label(label)
        .query(query)
        .datasource(DATASOURCE)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(dash_m.VariableOption(selected=True, text=["All"], value=["$__all"]))
        .refresh(dash_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dash_m.VariableSort.ALPHABETICAL_ASC)
    )


def variables() -> list[Builder[dash_m.VariableModel]]:
    """Datasource, then provider → model → route, each narrowing the next one's choices."""
    return [
        dash_b.DatasourceVariable("datasource").id("datasource").label("Data source").type("prometheus"),
        _query_variable("provider", "Provider", f"label_values({REQUESTS}, {PROVIDER})"),
        _query_variable(
            "model", "Model", f'label_values({REQUESTS}{{{PROVIDER}=~"$provider"}}, {MODEL})'
        ),
        _query_variable(
            "route",
            "Route",
            f'label_values({REQUESTS}{{{PROVIDER}=~"$provider",{MODEL}=~"$model"}}, {ROUTE})',
        ),
    ]


def triage_dashboard() -> dash_b.Dashboard:
    """The on-call dashboard: what is failing, where the time goes, are the budgets right."""
    board = (
        dash_b.Dashboard("streamscope / Streaming triage")
        .uid("streamscope-triage")
        .description(
            "Streamed Claude calls by failure class, phase timings, budgets and tokens. "
            "Generated by dashboards/generate.py; do not edit in Grafana."
        )
        .tags(["streamscope", "gen-ai"])
        .editable()
        .time("now-3h", "now")
        .refresh("1m")
        .timezone("browser")
        .tooltip(dash_m.DashboardCursorSync.CROSSHAIR)
        .annotations([])
        .variables(variables())
        .link(
            dash_b.DashboardLink("Runbooks")
            .type(dash_m.DashboardLinkType.LINK)
            .url(RUNBOOK_URL)
            .icon("doc")
            .target_blank(True)
        )
    )
    rows: list[tuple[str, list[PanelBuilder]]] = [
        ("What is failing now", failing_now()),
        ("Where the time goes", where_time_goes()),
        ("Are the budgets right", budgets_right()),
        ("Tokens", tokens()),
    ]
    for title, panels in rows:
        # An expanded row owns the panels that follow it; panels put *inside* a row are only
        # kept by Grafana when the row is collapsed.
        board = board.with_row(dash_b.Row(title))
        for panel in panels:
            board = board.with_panel(panel)
    return board


#: Every dashboard this file writes: file name → builder function.
DASHBOARDS: Mapping[str, Callable[[], dash_b.Dashboard]] = {
    "streamscope-triage.json": triage_dashboard,
}


def dashboard_model(build: Callable[[], dash_b.Dashboard]) -> dict[str, Any]:
    """The dashboard as plain JSON data, with stable panel ids (Grafana needs unique ids)."""
    model = json.loads(json.dumps(build().build(), cls=JSONEncoder))
    for panel_id, panel in enumerate(model["panels"], start=1):
        panel["id"] = panel_id
    return model


def render_dashboard(build: Callable[[], dash_b.Dashboard]) -> str:
    """Sorted keys and fixed indentation: the staleness check compares text."""
    return json.dumps(dashboard_model(build), sort_keys=True, indent=2) + "\n"


# --------------------------------------------------------------------------------------------
# Expressions for checks and live tests
# --------------------------------------------------------------------------------------------


class PanelExpression(NamedTuple):
    """One query of one panel, as Prometheus would receive it."""

    dashboard: str
    panel: str
    ref_id: str
    expr: str


_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


def substitute(expr: str, values: Mapping[str, str] | None = None) -> str:
    """Fill in Grafana variables (``$model``, ``${model}``, ``$__rate_interval``) with values.

    Unknown variables are left alone so a check fails on them instead of passing silently.
    """
    table_ = {**SUBSTITUTIONS, **(values or {})}

    def fill(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return table_.get(name, match.group(0))

    return _VARIABLE.sub(fill, expr)


def _panels(model: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    """Every panel, including those nested in collapsed rows."""
    for panel in model.get("panels", []):
        yield panel
        yield from panel.get("panels", []) or []


def panel_expressions(values: Mapping[str, str] | None = None) -> list[PanelExpression]:
    """Every panel query of every dashboard, variables substituted (defaults: All, 5m, 1h).

    Pass ``values`` to override, e.g. ``{"__rate_interval": "1m"}`` for a short live run.
    """
    out = []
    for build in DASHBOARDS.values():
        model = dashboard_model(build)
        for panel in _panels(model):
            for target in panel.get("targets", []) or []:
                if target.get("expr"):
                    out.append(PanelExpression(
                        model["uid"], panel["title"], target["refId"], substitute(target["expr"], values)
                    ))
    return out


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def rendered_files() -> dict[str, str]:
    """File name (relative to ``dashboards/``) → content, for everything this script owns."""
    files = {name: render_dashboard(build) for name, build in DASHBOARDS.items()}
    files[RULES_FILE] = render_rules()
    return files


def stale_files(directory: Path = HERE) -> list[str]:
    """Files that differ from what would be generated, are missing, or are stray JSON."""
    files = rendered_files()
    stale = [n for n, text in files.items() if not (directory / n).is_file()
             or (directory / n).read_text(encoding="utf-8") != text]
    stale += [p.name for p in directory.glob("*.json") if p.name not in files]
    return sorted(stale)


def main(argv: Sequence[str] | None = None) -> int:
    """Write the files, or with ``--check`` report the stale ones and return 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the committed files differ from the generated ones")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_files()
        for name in stale:
            print(f"stale: dashboards/{name} (run `make dashboards`)", file=sys.stderr)
        return 1 if stale else 0
    for name, text in rendered_files().items():
        (HERE / name).write_text(text, encoding="utf-8")
        print(f"wrote dashboards/{name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
