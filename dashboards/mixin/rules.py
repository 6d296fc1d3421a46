"""Recording rules: the shared expressions, at the model level, over the config's two windows.

Why record them: the alerts compare two windows of the same ratio and guard on traffic; reading
recorded series keeps each alert expression short enough to review, and the recorded ratios are
what ``rules_test.yml`` checks by hand-computed values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import queries as q
from .config import Config
from .names import ATTEMPTS, COST_FAMILY, DURATION, FIRINGS_FAMILY, REQUESTS_FAMILY, UNREACHABLE_FAMILY

Build = Callable[[str, Sequence[str], Sequence[str]], str]

#: The metric part of recorded series names (`level:metric:operation`): families, not samples.
REQUESTS = REQUESTS_FAMILY
PARTIAL = f"{REQUESTS_FAMILY}_partial"
FIRINGS = FIRINGS_FAMILY
UNREACHABLE = UNREACHABLE_FAMILY
ATTEMPTS_FAMILY = ATTEMPTS
#: Duration of calls that ended with an error (caller cancels excluded).
FAILED_DURATION = f"{DURATION[0]}_failed"  # named after today's name; it reads both
#: Spend in US dollars (the cost counter's family), and its share on classes that bought no answer.
COST = COST_FAMILY
WASTED_COST = f"{COST_FAMILY}_wasted"


@dataclass(frozen=True)
class Recording:
    """One shared expression recorded at the model level over one window."""

    level: str
    metric: str
    operation: str
    window: str
    build: Build
    matchers: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """``level:metric:operation``, the Prometheus recording-rule naming convention."""
        return f"{self.level}:{self.metric}:{self.operation}{self.window}"

    def expr(self) -> str:
        """The shared expression over this window, under the selector, at the model level."""
        return self.build(self.window, self.matchers, q.MODEL_LEVEL)


def recordings(cfg: Config) -> list[Recording]:
    """Every recorded series: the short window for "is it happening now", the long one for "is it
    real"; the unreachable-deadline share only over the long one (it is arithmetic, not load)."""
    m = cfg.matchers
    out: list[Recording] = []
    for window in (cfg.short_window, cfg.long_window):
        out += [
            Recording("model", REQUESTS, "rate", window, q.requests_rate, m),
            Recording("model_class", REQUESTS, "ratio_rate", window, q.class_ratio, m),
            Recording("model", PARTIAL, "ratio_rate", window, q.partial_ratio, m),
            Recording("model_budget", FIRINGS, "rate", window, q.firing_rate, m),
            Recording("model_budget", FIRINGS, "ratio_rate", window, q.firing_ratio, m),
            Recording("model_failure_code", REQUESTS, "ratio_rate", window, q.failure_code_ratio, m),
            Recording("model", ATTEMPTS_FAMILY, "rate", window, q.attempts_rate, m),
            Recording("model", ATTEMPTS_FAMILY, "mean", window, q.attempts_mean, m),
            Recording("model", FAILED_DURATION, "mean", window, q.failed_duration_mean, m),
            Recording("model", COST, "rate", window, q.spend_rate, m),
            Recording("model", WASTED_COST, "ratio_rate", window, q.wasted_spend_ratio, m),
        ]
    out.append(Recording("model", UNREACHABLE, "ratio_rate", cfg.long_window, q.deadline_unreachable_ratio, m))
    return out


def recorded(cfg: Config, level: str, metric: str, operation: str, window: str) -> str:
    """The name of a recorded series, failing loudly if no such recording exists."""
    name = f"{level}:{metric}:{operation}{window}"
    if name not in {r.name for r in recordings(cfg)}:
        raise KeyError(f"no recording rule named {name}")
    return name


def recording_group(cfg: Config) -> dict[str, object]:
    """The ``streamscope.rules`` group of rules.yml."""
    return {"name": "streamscope.rules", "rules": [{"record": r.name, "expr": r.expr()} for r in recordings(cfg)]}
