"""Alerting rules: each reads recorded ratios, over both windows, behind a traffic guard.

Why both windows: the long one says the ratio is real, the short one that it is still happening,
so an alert neither fires on a blip nor keeps firing long after recovery. Why the guard: two
failures out of ten requests on a quiet service are not an incident. Thresholds and each alert's
``for:`` come from the config; the panels showing the same ratio draw the thresholds as dashed
lines. Each alert links to the section of runbooks.md named after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import rules as r
from .config import Config
from .descriptions import runbook
from .names import (
    ACTIVE_STREAMS,
    BREAKER_STATE,
    BUDGET,
    CLASS,
    FAILURE_CODE,
    INTERNAL_ERRORS,
    JOB,
    MODEL,
    ROUTE,
    STORE_ERRORS,
    WASTE_CLASSES,
)
from .queries import HOUR, MODEL_LEVEL, aggregate, resume_outcome_ratio, resumes_rate, vector

#: Alert text templates: the route is named only when the series has one.
WHERE = f"{{{{ $labels.{MODEL} }}}}{{{{ with $labels.{ROUTE} }}}} on route {{{{ . }}}}{{{{ end }}}}"


@dataclass(frozen=True)
class Alert:
    """A Prometheus alerting rule; its runbook section is the alert's name."""

    name: str
    expr: str
    for_: str
    severity: str
    summary: str
    description: str

    def rule(self, cfg: Config) -> dict[str, Any]:
        """The rule as it appears in rules.yml."""
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.for_,
            "labels": {"severity": self.severity},
            "annotations": {
                "summary": self.summary,
                "description": self.description,
                "runbook_url": runbook(cfg, self.name),
            },
        }


def pct(share: float) -> str:
    """A threshold as the alert text shows it: 0.05 -> ``5%``, 0.025 -> ``2.5%``."""
    return f"{round(share * 100, 4):g}%"


def guarded(cfg: Config, condition: str, traffic: str | None = None, minimum: float | None = None) -> str:
    """Add the traffic guard: ratios over a handful of requests do not alert. ``traffic`` is the
    recorded rate to guard on (default: calls per second over the long window), ``minimum`` the
    rate it must exceed (default ``min_request_rate``)."""
    traffic = traffic or r.recorded(cfg, "model", r.REQUESTS, "rate", cfg.long_window)
    minimum = cfg.min_request_rate if minimum is None else minimum
    return f"{condition}\nand on ({', '.join(MODEL_LEVEL)})\n{traffic} > {minimum}"


def over_both_windows(cfg: Config, level: str, metric: str, matcher: str, threshold: float,
                      operation: str = "ratio_rate", traffic: str | None = None,
                      minimum: float | None = None) -> str:
    """A recorded series above threshold over the long window (real) and the short one (still on)."""
    long_ = f"{r.recorded(cfg, level, metric, operation, cfg.long_window)}{matcher} > {threshold}"
    short = f"{r.recorded(cfg, level, metric, operation, cfg.short_window)}{matcher} > {threshold}"
    return guarded(cfg, f"{long_}\nand\n{short}", traffic, minimum)


def class_share_above(cfg: Config, klass: str, threshold: float) -> str:
    """One class's share of a model's requests is above threshold, over both windows."""
    return over_both_windows(cfg, "model_class", r.REQUESTS, f'{{{CLASS}="{klass}"}}', threshold)


def seconds_text(value: float) -> str:
    """A threshold in seconds as the alert text shows it: 30.0 -> ``30s``."""
    return f"{value:g}s"


def pool_alert(cfg: Config) -> list[Alert]:
    """StreamscopeInFlightNearPoolSize, only when the config knows the pool size."""
    if cfg.pool_size is None:
        return []
    limit = round(cfg.pool_size * cfg.pool_headroom_share, 6)
    in_flight = aggregate((JOB,), vector(ACTIVE_STREAMS, cfg.matchers))
    return [Alert(
        "StreamscopeInFlightNearPoolSize",
        f"{in_flight} > {limit:g}",
        cfg.in_flight_near_pool_for, "warning",
        "Streams in flight are close to the pool size.",
        "{{ $value | humanize }} streams are in flight in job {{ $labels." + JOB + " }}, above "
        f"{pct(cfg.pool_headroom_share)} of its pool size of {cfg.pool_size} ({limit:g}). Once the "
        "pool is full, new requests queue or are refused while slow or stuck streams hold their "
        "slots. Check whether the provider slowed down (time to first content, total duration) or "
        "traffic grew (requests by class); lower the deadline and idle budgets or add capacity.",
    )]


def fleet_alerts(cfg: Config) -> list[Alert]:
    """Resume and the shared Redis store, per job (a fleet of workers shares one store).

    These series carry no provider, model or route: a reconnect is answered by whichever worker
    the browser reaches, and a store operation serves every stream of that worker.
    """
    by = (JOB,)
    job = "{{ $labels." + JOB + " }}"
    window = cfg.resume_window
    return [
        Alert(
            "StreamscopeResumeFailing",
            f"{resume_outcome_ratio(window, cfg.matchers, by)}\n> {cfg.resume_failure_share_max}\n"
            f"and on ({JOB})\n{resumes_rate(window, cfg.matchers, by)} > {cfg.min_resume_rate}",
            cfg.resume_failing_for, "warning",
            "Reconnecting browsers cannot resume their streams.",
            "{{ $value | humanizePercentage }} of reconnects (Last-Event-ID) in job " + job + " over the "
            f"last {window} found their stream expired from the resume buffer or its owning worker gone "
            f"(above {pct(cfg.resume_failure_share_max)}, with more than {cfg.min_resume_rate:g} "
            "reconnects/s). Those users saw an answer stop part-way and must ask again. Check the "
            "resume outcomes on the dashboard: expired = the buffer keeps events for less time than "
            "browsers take to come back, or Redis is unreachable (StreamscopeRedisUnreachable); "
            "owner_lost = workers restarted or died mid-stream (a deploy, OOM kills).",
        ),
        Alert(
            "StreamscopeRedisUnreachable",
            # increase > 0 is rate > 0; its value (operations, not per second) reads better.
            aggregate(by, f"increase({vector(STORE_ERRORS, cfg.matchers)}[{cfg.store_error_window}])") + " > 0",
            cfg.redis_unreachable_for, "warning",
            "streamscope cannot reach its shared Redis store.",
            "{{ $value | humanize }} operations on the shared Redis store failed or timed out in job "
            + job + f" over the last {cfg.store_error_window}, and they have kept failing for "
            f"{cfg.redis_unreachable_for}. Streams keep flowing, but reconnecting browsers cannot "
            "resume them on another worker and each worker's breaker decides on its own. Check "
            "Redis (redis-cli ping, INFO, latency) and the network to it; streamscope goes back to "
            "it by itself once it answers.",
        ),
    ]


def spend_alerts(cfg: Config) -> list[Alert]:
    """Spend that bought no answer, per provider, model and route, guarded by the spend itself (USD
    per hour over the long window): a few cents of failures on a quiet service do not page."""
    windows = f"over {cfg.long_window} and {cfg.short_window}"
    spend = f"{r.recorded(cfg, 'model', r.COST, 'rate', cfg.long_window)} * {HOUR}"
    return [
        Alert(
            "StreamscopeWastedSpendHigh",
            over_both_windows(cfg, "model", r.WASTED_COST, "", cfg.wasted_spend_share_max,
                              traffic=spend, minimum=cfg.min_spend_rate_usd_per_hour),
            cfg.wasted_spend_for, "warning",
            "A large share of the spend on LLM calls buys no answer.",
            "{{ $value | humanizePercentage }} of the spend on " + WHERE + " went on calls that "
            f"ended without an answer ({', '.join(WASTE_CLASSES)}; retried attempts included), above "
            f"{pct(cfg.wasted_spend_share_max)} {windows}, with more than "
            f"{cfg.min_spend_rate_usd_per_hour:g} USD/hour spent over {cfg.long_window}. The provider "
            "bills those tokens all the same. Spend by class on the dashboard says which: a budget "
            "class (budget_exhausted, deadline_*, stalled_*) = a budget too tight for this route's "
            "answers, upstream_error = the provider, cancelled = callers leaving before the end; "
            "many retried attempts = retries that rarely succeed (fewer attempts, or a breaker).",
        ),
    ]


def alerts(cfg: Config) -> list[Alert]:
    """The alerts, with the config's thresholds and windows in their expressions and text."""
    windows = f"over {cfg.long_window} and {cfg.short_window}"
    return [
        Alert(
            "StreamscopePartialFailuresRising",
            over_both_windows(cfg, "model", r.PARTIAL, "", cfg.partial_ratio_max),
            cfg.partial_failures_for, "critical",
            "Streamed answers are failing after users started reading them.",
            "{{ $value | humanizePercentage }} of streamed requests to " + WHERE + " ended "
            "abnormally after content had reached the caller (partial answers), above "
            f"{pct(cfg.partial_ratio_max)} {windows}; each request counted once however many "
            "attempts it took, cancels by the caller left out. A retry cannot hide these: the user "
            "already saw part of the answer. Check the class split on the triage dashboard: "
            "stalled_mid_stream (provider hung), deadline_in_answer (deadline too short for long "
            "answers) or upstream_error (errors after the 200).",
        ),
        Alert(
            "StreamscopeFirstTokenFiringsRising",
            over_both_windows(cfg, "model_budget", r.FIRINGS, f'{{{BUDGET}="first_token"}}',
                              cfg.first_token_firing_ratio_max),
            cfg.first_token_firings_for, "warning",
            "The first-token budget is killing requests before their first content.",
            "The first-token budget fired on {{ $value | humanizePercentage }} of requests to "
            + WHERE + f" (above {pct(cfg.first_token_firing_ratio_max)} {windows}). After a model "
            "change or a bigger thinking budget this is a sizing problem, not an outage: compare "
            "the first-token budget with p99 time to first content on the dashboard and raise the "
            "budget for this model or route.",
        ),
        Alert(
            "StreamscopeMidStreamStalls",
            class_share_above(cfg, "stalled_mid_stream", cfg.mid_stream_stall_share_max),
            cfg.mid_stream_stalls_for, "warning",
            "Streams stop producing content after they started.",
            "{{ $value | humanizePercentage }} of requests to " + WHERE + " stalled mid-stream "
            "(idle budget or read timeout after first content), above "
            f"{pct(cfg.mid_stream_stall_share_max)} {windows}. A stream that keeps pinging is "
            "caught only by the idle budget. If the largest gap p99 sits far below the idle budget "
            "for healthy streams, these are real stalls upstream; if it crowds the budget, the "
            "idle budget is too tight for this model.",
        ),
        Alert(
            "StreamscopeBudgetExhaustedShareHigh",
            class_share_above(cfg, "budget_exhausted", cfg.budget_exhausted_share_max),
            cfg.budget_exhausted_for, "warning",
            "Requests spend their whole token allowance thinking and return no answer.",
            "{{ $value | humanizePercentage }} of requests to " + WHERE + " hit the token limit "
            f"with no answer (above {pct(cfg.budget_exhausted_share_max)} {windows}). More time "
            "will not help: raise max_tokens above the thinking budget plus the answer, or lower "
            "the thinking budget.",
        ),
        Alert(
            "StreamscopeSilentlyUnverifiedShareHigh",
            class_share_above(cfg, "silently_unverified", cfg.silently_unverified_share_max),
            cfg.silently_unverified_for, "warning",
            "Answers arrive complete but their checking pass was likely cut short.",
            "{{ $value | humanizePercentage }} of requests to " + WHERE + " used (nearly) their "
            f"whole thinking budget and then answered (above {pct(cfg.silently_unverified_share_max)} "
            f"{windows}). They return 200 and count as successes elsewhere. Raise the thinking "
            "budget (and the deadline so it still fits) or route these requests to a "
            "configuration that can finish.",
        ),
        Alert(
            "StreamscopeDeadlineInThinkingShareHigh",
            class_share_above(cfg, "deadline_in_thinking", cfg.deadline_in_thinking_share_max),
            cfg.deadline_in_thinking_for, "warning",
            "The deadline runs out before the answer starts.",
            "{{ $value | humanizePercentage }} of requests to " + WHERE + " hit the deadline "
            f"before the answer started (above {pct(cfg.deadline_in_thinking_share_max)} {windows}). "
            "With thinking, the thinking budget cannot fit in the deadline at the measured decode "
            "rate: lower the thinking budget or raise the deadline (`streamscope check`). Without "
            "thinking (no thinking.budget_tokens on the spans), the start was slow: compare time to "
            "headers and time to first content with the deadline.",
        ),
        Alert(
            "StreamscopeDeadlineUnreachable",
            f"{r.recorded(cfg, 'model', r.UNREACHABLE, 'ratio_rate', cfg.long_window)} > 0",
            cfg.deadline_unreachable_for, "info",
            "A configuration asks for more thinking than its deadline can hold.",
            "{{ $value | humanizePercentage }} of requests to " + WHERE + " over the last "
            f"{cfg.long_window} had a deadline that could never fit their thinking budget at the "
            "measured decode rate. This is arithmetic, not load: fix the configuration (thinking "
            "budget, deadline, retries) before it shows up as deadline_in_thinking.",
        ),
        Alert(
            "StreamscopeInstrumentationErrors",
            aggregate((JOB,), f"increase({vector(INTERNAL_ERRORS, cfg.matchers)}[{cfg.long_window}])") + " > 0",
            cfg.instrumentation_errors_for, "warning",
            "streamscope's own instrumentation raised internal errors.",
            "{{ $value | humanize }} internal errors in job {{ $labels." + JOB + " }} over the last "
            f"{cfg.long_window}. Calls still went through (the instrumentation fails open) but "
            "their spans, classes and metrics may be missing or wrong, so the other alerts "
            "undercount.",
        ),
        Alert(
            "StreamscopeRateLimitingRising",
            over_both_windows(cfg, "model_failure_code", r.REQUESTS, f'{{{FAILURE_CODE}="rate_limited"}}',
                              cfg.rate_limited_share_max),
            cfg.rate_limiting_for, "warning",
            "The provider is rate-limiting calls.",
            "{{ $value | humanizePercentage }} of calls to " + WHERE + " failed with rate_limited "
            f"(HTTP 429 or an in-band rate_limit_error), above {pct(cfg.rate_limited_share_max)} "
            f"{windows}. Every attempt counts: each retry waits at least Retry-After and spends the "
            "deadline before the first token. Compare the request and token rates with the "
            "provider's limits for this model, lower concurrency or spread the load, or ask for a "
            "higher limit.",
        ),
        Alert(
            "StreamscopeRetriesPerRequestRising",
            over_both_windows(cfg, "model", r.ATTEMPTS_FAMILY, "", cfg.attempts_per_request_max, "mean",
                              r.recorded(cfg, "model", r.ATTEMPTS_FAMILY, "rate", cfg.long_window)),
            cfg.retries_per_request_for, "warning",
            "Requests need several attempts before they stream.",
            "Requests to " + WHERE + " of the retry helpers or the relay took {{ $value | humanize }} "
            f"attempts on average, above {cfg.attempts_per_request_max:g} {windows}. First attempts "
            "are failing: each retry adds backoff before the first token and spends the deadline. "
            "Retries by failure code on the dashboard says with what (rate_limited, "
            "upstream_unavailable, upstream_timeout, upstream_unreachable).",
        ),
        Alert(
            "StreamscopeDoomedRequestDwell",
            over_both_windows(cfg, "model", r.FAILED_DURATION, "", cfg.doomed_dwell_seconds_max, "mean"),
            cfg.doomed_dwell_for, "warning",
            "Calls that end in an error hold their slot for a long time first.",
            "Calls to " + WHERE + " that ended with an error (caller cancels left out) ran "
            "{{ $value | humanizeDuration }} on average before failing, above "
            f"{seconds_text(cfg.doomed_dwell_seconds_max)} {windows}. All that time each held a "
            "connection and a worker slot: in a provider slowdown these crowd out healthy streams. "
            "See which budget fires and compare the deadline and idle budgets with p99 of healthy "
            "streams: a budget far above it lets doomed calls dwell.",
        ),
        Alert(
            "StreamscopeBreakerOpen",
            # 2 = open; a breaker half-open between probes (1) is still failing calls fast, but
            # is about to be decided by its probe: only a breaker that stays open pages.
            aggregate(MODEL_LEVEL, vector(BREAKER_STATE, cfg.matchers), op="max") + " == 2",
            cfg.breaker_open_for, "critical",
            "A circuit breaker is open: calls fail fast without reaching the provider.",
            "The breaker for " + WHERE + " is open: streamscope fails its calls at once with "
            "circuit_open (the relay answers 503 with Retry-After) after repeated retryable failures "
            "(rate limits, overloads, timeouts, dropped connections). It closes by itself after its "
            "cool-down if a probe call succeeds. Check the provider's status and the failure codes "
            "that opened it (Failure codes on the dashboard).",
        ),
        *fleet_alerts(cfg),
        *spend_alerts(cfg),
        *pool_alert(cfg),
    ]


def alert_group(cfg: Config) -> dict[str, Any]:
    """The ``streamscope.alerts`` group of rules.yml."""
    return {"name": "streamscope.alerts", "rules": [a.rule(cfg) for a in alerts(cfg)]}
