"""`streamscope validate`'s latency model and the requests it scripts from it.

At 1x each healthy request's time to first token (TTFT) and its largest gap between content
events are samples of the measured distribution (a span file, Prometheus) or of
`DEFAULT_BASELINE`. At load multiplier m both stretch by queueing:

    TTFT(m) = TTFT(1x) × (1 + a·(m−1)·E)        largest gap(m) = gap(1x) × (1 + b·(m−1)·E')

with E, E' drawn per request from a seeded Exp(1) and a = `TTFT_STRETCH`, b = `GAP_STRETCH`: the
median moves a little, the tail fattens a lot, and m = 1 is the measured distribution itself. The
same request keeps its samples at every multiplier, so a request killed at 3x is also scripted
slower at 5x. Arrivals are Poisson at m × the 1x rate, so the number of open streams grows with
both the rate and the latency (Little's law). A fixed share of requests is doomed:
`STALL_BEFORE_SHARE` send nothing after the headers, `STALL_MID_SHARE` stop after a few words;
either stall lasts `stall_seconds` (at least `STALL_SECONDS`, and twice the budget meant to cut
it), after which the stream would go on as if nothing happened.

Times are model seconds; the simulator and the budgets run at `time_scale` real seconds per
model second, as in `streamscope demo`.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from streamscope.budgets.table import CallBudgets

from .suggest import Distribution

if TYPE_CHECKING:  # the simulator is imported when a run starts
    from streamscope.simulator import Step

TTFT_STRETCH = 0.35
"""a: how much of an Exp(1) queueing delay, per unit of extra load, lands on the time to first token."""
GAP_STRETCH = 0.2
"""b: the same for the largest gap between content events (decoding slows less than queueing grows)."""
STALL_BEFORE_SHARE = 0.02
"""Requests whose stream sends nothing after its headers."""
STALL_MID_SHARE = 0.01
"""Requests whose stream stops after a few words."""
STALL_SECONDS = 60.0
"""The shortest scripted stall (model seconds)."""
WORDS = 16
"""Text events in a healthy answer."""
INTERVAL = 0.1
"""Model seconds between the words of an answer, except its largest gap."""
MODEL = "claude-sim-validate"
ROUTE = "validate"

Kind = Literal["healthy", "stall_before_first_content", "stall_mid_stream"]
Sampler = Callable[[random.Random], float]


def lognormal(median: float, sigma: float, cap: float) -> Sampler:
    """A log-normal of this median and shape, capped (a 1x distribution has no unbounded tail)."""
    return lambda rng: min(cap, rng.lognormvariate(math.log(median), sigma))


def empirical(values: Sequence[float]) -> Sampler:
    """Resample observed values (with replacement)."""
    pool = sorted(values)
    return lambda rng: rng.choice(pool)


def from_quantiles(d: Distribution) -> Sampler:
    """An inverse CDF through the p50, p99 and p99.9 of a histogram: linear from half the median at
    q = 0 to the median, to p99, to p99.9, and flat above it."""
    points = ((0.0, d.p50 / 2), (0.5, d.p50), (0.99, d.p99), (0.999, d.p999), (1.0, d.p999))

    def sample(rng: random.Random) -> float:
        q = rng.random()
        for (q0, v0), (q1, v1) in itertools.pairwise(points):
            if q <= q1:
                return v0 + (v1 - v0) * (q - q0) / (q1 - q0)
        return d.p999
    return sample


@dataclass(frozen=True)
class Baseline:
    """The 1x distribution: a sampler each for the time to first token and the largest gap."""

    ttft: Sampler
    gap: Sampler
    source: str


DEFAULT_BASELINE = Baseline(lognormal(1.0, 0.4, 4.0), lognormal(0.3, 0.5, 1.5),
                            "default: TTFT log-normal (median 1 s, σ 0.4, at most 4 s), "
                            "largest gap log-normal (median 0.3 s, σ 0.5, at most 1.5 s)")
"""Used without a span file or Prometheus: a chat model's first token around 1 s, words at 10 a second."""


@dataclass(frozen=True)
class Config:
    """One validation run: the workload at each multiplier and the latency model."""

    multipliers: tuple[float, ...] = (1.0, 3.0, 5.0)
    requests: int = 150
    rate: float = 0.5
    """Requests per model second at 1x."""
    ttft_stretch: float = TTFT_STRETCH
    gap_stretch: float = GAP_STRETCH
    seed: int = 1
    time_scale: float = 0.05
    baseline: Baseline = DEFAULT_BASELINE
    stall_before_share: float = STALL_BEFORE_SHARE
    stall_mid_share: float = STALL_MID_SHARE
    model: str = MODEL
    route: str = ROUTE
    """The model and route the requests name (the budgets are resolved for them)."""


@dataclass(frozen=True)
class Script:
    """One request as the simulator plays it (model seconds)."""

    number: int
    kind: Kind
    arrival: float
    """After the first arrival of its multiplier."""
    ttft: float
    gap: float
    """The largest gap between content events (healthy), or the stall."""
    gap_after: int
    """Words sent before that gap."""

    def steps(self) -> list[Step]:
        from streamscope.simulator import Silence, TextSpec, message_stream

        if self.kind == "stall_before_first_content":
            return message_stream(first_event_delay=self.gap, blocks=[TextSpec(["tok "] * 3, interval=INTERVAL)])
        words: list[str | Step] = ["tok "] * WORDS
        words.insert(self.gap_after, Silence(max(0.0, self.gap - INTERVAL)))
        return message_stream(first_event_delay=self.ttft, blocks=[TextSpec(words, interval=INTERVAL, first_delay=0)])

    @property
    def total(self) -> float:
        """Model seconds from the request to the end of its stream, as scripted."""
        return self.ttft + self.gap + (WORDS - 2) * INTERVAL if self.kind != "stall_before_first_content" \
            else self.gap + 3 * INTERVAL


def stall_seconds(budgets: CallBudgets, kind: Kind) -> float:
    """A stall long enough to be doomed: `STALL_SECONDS`, or twice the budget meant to cut it."""
    budget = budgets.first_token if kind == "stall_before_first_content" else budgets.idle
    return max(STALL_SECONDS, 2 * (budget or 0))


def scripts(config: Config, multiplier: float, budgets: CallBudgets) -> list[Script]:
    """The requests at `multiplier`: the same draws at every multiplier, stretched by it."""
    rng = random.Random(config.seed)
    n = config.requests
    kinds: list[Kind] = ["healthy"] * n
    doomed = rng.sample(range(n), min(n, _count(n, config.stall_before_share) + _count(n, config.stall_mid_share)))
    before = _count(n, config.stall_before_share)
    for i, index in enumerate(doomed):
        kinds[index] = "stall_before_first_content" if i < before else "stall_mid_stream"
    out, arrival = [], 0.0
    for number, kind in enumerate(kinds):
        ttft, gap = config.baseline.ttft(rng), config.baseline.gap(rng)
        e_ttft, e_gap, spacing = rng.expovariate(1), rng.expovariate(1), rng.expovariate(1)
        gap_after = rng.randint(1, WORDS - 1)
        if kind == "healthy":
            ttft *= 1 + config.ttft_stretch * (multiplier - 1) * e_ttft
            gap *= 1 + config.gap_stretch * (multiplier - 1) * e_gap
        else:  # the stall is the point: the rest as at 1x
            gap = stall_seconds(budgets, kind)
            gap_after = min(gap_after, 3)
        out.append(Script(number, kind, arrival, ttft, max(gap, INTERVAL), gap_after))
        arrival += spacing / (config.rate * multiplier)
    return out


def _count(n: int, share: float) -> int:
    """Requests of a share: at least one when the share is not 0, so every run has both stalls."""
    return 0 if share <= 0 else max(1, round(n * share))
