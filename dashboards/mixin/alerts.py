"""Alerting rules: each reads recorded ratios, over both windows, behind a traffic guard.

Why both windows: the long one says the ratio is real, the short one that it is still happening,
so an alert neither fires on a blip nor keeps firing long after recovery. Why the guard: two
failures out of ten requests on a quiet service are not an incident. Thresholds come from the
config; the panels showing the same ratio draw them as dashed lines. Each alert links to the
section of runbooks.md named after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import rules as r
from .config import Config
from .descriptions import runbook
from .names import BUDGET, CLASS, INTERNAL_ERRORS, JOB, MODEL, ROUTE
from .queries import MODEL_LEVEL, aggregate, vector

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


def guarded(cfg: Config, condition: str) -> str:
    """Add the request-rate guard: ratios over a handful of requests do not alert."""
    traffic = r.recorded(cfg, "model", r.REQUESTS, "rate", cfg.long_window)
    return f"{condition}\nand on ({', '.join(MODEL_LEVEL)})\n{traffic} > {cfg.min_request_rate}"


def over_both_windows(cfg: Config, level: str, metric: str, matcher: str, threshold: float) -> str:
    """A recorded ratio above threshold over the long window (real) and the short one (still on)."""
    long_ = f"{r.recorded(cfg, level, metric, 'ratio_rate', cfg.long_window)}{matcher} > {threshold}"
    short = f"{r.recorded(cfg, level, metric, 'ratio_rate', cfg.short_window)}{matcher} > {threshold}"
    return guarded(cfg, f"{long_}\nand\n{short}")


def class_share_above(cfg: Config, klass: str, threshold: float) -> str:
    """One class's share of a model's requests is above threshold, over both windows."""
    return over_both_windows(cfg, "model_class", r.REQUESTS, f'{{{CLASS}="{klass}"}}', threshold)


def alerts(cfg: Config) -> list[Alert]:
    """The alerts, with the config's thresholds and windows in their expressions and text."""
    windows = f"over {cfg.long_window} and {cfg.short_window}"
    return [
        Alert(
            "StreamscopePartialFailuresRising",
            over_both_windows(cfg, "model", r.PARTIAL, "", cfg.partial_ratio_max),
            "5m", "critical",
            "Streamed answers are failing after users started reading them.",
            "{{ $value | humanizePercentage }} of streamed requests to " + WHERE + " ended "
            "abnormally after content had reached the caller (partial answers), above "
            f"{pct(cfg.partial_ratio_max)} {windows}. A retry cannot hide these: the user already "
            "saw part of the answer. Check the class split on the triage dashboard: "
            "stalled_mid_stream (provider hung), deadline_in_answer (deadline too short for long "
            "answers) or upstream_error (errors after the 200).",
        ),
        Alert(
            "StreamscopeFirstTokenFiringsRising",
            over_both_windows(cfg, "model_budget", r.FIRINGS, f'{{{BUDGET}="first_token"}}',
                              cfg.first_token_firing_ratio_max),
            "15m", "warning",
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
            "5m", "warning",
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
            "15m", "warning",
            "Requests spend their whole token allowance thinking and return no answer.",
            "{{ $value | humanizePercentage }} of requests to " + WHERE + " hit the token limit "
            f"with no answer (above {pct(cfg.budget_exhausted_share_max)} {windows}). More time "
            "will not help: raise max_tokens above the thinking budget plus the answer, or lower "
            "the thinking budget.",
        ),
        Alert(
            "StreamscopeSilentlyUnverifiedShareHigh",
            class_share_above(cfg, "silently_unverified", cfg.silently_unverified_share_max),
            "30m", "warning",
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
            "15m", "warning",
            "The deadline runs out while the model is still thinking.",
            "{{ $value | humanizePercentage }} of requests to " + WHERE + " hit the deadline "
            f"before the answer started (above {pct(cfg.deadline_in_thinking_share_max)} {windows}). "
            "The thinking budget cannot fit in the deadline at the measured decode rate: lower the "
            "thinking budget or raise the deadline; run `streamscope check` on the configuration.",
        ),
        Alert(
            "StreamscopeDeadlineUnreachable",
            f"{r.recorded(cfg, 'model', r.UNREACHABLE, 'ratio_rate', cfg.long_window)} > 0",
            "0m", "info",
            "A configuration asks for more thinking than its deadline can hold.",
            "{{ $value | humanizePercentage }} of requests to " + WHERE + " over the last "
            f"{cfg.long_window} had a deadline that could never fit their thinking budget at the "
            "measured decode rate. This is arithmetic, not load: fix the configuration (thinking "
            "budget, deadline, retries) before it shows up as deadline_in_thinking.",
        ),
        Alert(
            "StreamscopeInstrumentationErrors",
            aggregate((JOB,), f"increase({vector(INTERNAL_ERRORS, cfg.matchers)}[{cfg.long_window}])") + " > 0",
            "0m", "warning",
            "streamscope's own instrumentation raised internal errors.",
            "{{ $value | humanize }} internal errors in job {{ $labels." + JOB + " }} over the last "
            f"{cfg.long_window}. Calls still went through (the instrumentation fails open) but "
            "their spans, classes and metrics may be missing or wrong, so the other alerts "
            "undercount.",
        ),
    ]


def alert_group(cfg: Config) -> dict[str, Any]:
    """The ``streamscope.alerts`` group of rules.yml."""
    return {"name": "streamscope.alerts", "rules": [a.rule(cfg) for a in alerts(cfg)]}
