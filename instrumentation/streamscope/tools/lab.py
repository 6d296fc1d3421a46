"""The lab's model: seeded synthetic streams judged by timeout policies on a virtual clock.

The timeout-policy comparison, made checkable: the same streams are judged under one total timeout, a
per-read timeout (with and without server pings) and the three budgets, each with and without a
retry. Nothing sleeps and nothing is read or written: a stream is a list of event times, a policy
is a pure function from a stream to an outcome, so the whole comparison takes milliseconds and a
seed reproduces it exactly.

The model (what `docs/lab.md` spells out):

- A *request* has intrinsic properties: whether its answer is long, how long the answer takes
  to generate, and whether (and how long) the model thinks first. A retry resends the same
  request, so a retried long answer is just as long.
- An *attempt* is one try at a request, drawn fresh: its time to first content, its pace
  (within `pace_jitter`), its inter-event gaps, an occasional slow gap, and whether it stalls.
  A retried stall may therefore succeed.
- Content events are the visible output (text deltas); thinking streams no content (as with
  `display: "omitted"`), so a thinking phase is silence apart from pings. Pings come every
  `ping_every` seconds after the headers while the server is alive; a stall that keeps pinging
  pings until the watch horizon, a silent stall stops everything.

- Tokens follow the clock (lab_cost.py): a request's output is `decode_rate` tokens per second of
  its thinking and answer; an attempt is billed its input once its headers arrived and the output
  generated before it ended, priced at a model's rates (`streamscope.tools.spend.Pricing`: by
  default a simulated model at Claude Sonnet 4.5's rates). What an attempt that did not complete
  cost is waste.

The workload is lab_streams.py, the judging lab_policies.py, the billing lab_cost.py; here, the
comparison and its findings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from .lab_cost import attempt_usage
from .lab_policies import Outcome, Policy, RequestOutcome, Status, judge, run_request
from .lab_streams import Attempt, Request, StreamModel, draw_attempt, generate
from .spend import Pricing

__all__ = [
    "Attempt",
    "Finding",
    "LabConfig",
    "LabResult",
    "Outcome",
    "Policy",
    "PolicyResult",
    "Pricing",
    "Request",
    "RequestOutcome",
    "Status",
    "StreamModel",
    "draw_attempt",
    "evaluate",
    "findings",
    "generate",
    "judge",
    "percentile",
    "run_lab",
    "run_request",
]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: a value some request actually had)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)] if ordered else math.nan


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """One table row: a policy with a retry count, over the whole workload."""

    policy: Policy
    retries: int
    requests: int
    completed: int
    attempts: int
    healthy_killed: int
    killed_long: int
    killed_thinking: int
    stalls: int
    stalls_detected: int
    pinging_stalls_missed: int
    stall_wait_mean: float
    stall_wait_max: float
    p95_latency: float
    seconds_thrown_away: float
    spend_usd: float = 0.0
    """US dollars billed for every attempt (input once its headers arrived, output generated)."""
    wasted_usd: float = 0.0
    """US dollars of `spend_usd` on attempts that did not complete: they bought no answer."""

    @property
    def retries_sent(self) -> int:
        return self.attempts - self.requests

    @property
    def per_answer_usd(self) -> float:
        """US dollars spent per completed request, its failed attempts included (inf: no answer)."""
        return self.spend_usd / self.completed if self.completed else math.inf

    @property
    def stalls_missed(self) -> int:
        return self.stalls - self.stalls_detected


def evaluate(requests: Sequence[Request], policy: Policy, retries: int, horizon: float,
             retry_partial: bool = True, model: StreamModel | None = None,
             pricing: Pricing | None = None) -> PolicyResult:
    """Judge every request under `policy` and summarise (attempt-level counts); with `model`, also
    what its attempts cost at `pricing`'s rates (by default the simulated model's)."""
    results = [run_request(r, policy, retries, horizon, retry_partial) for r in requests]
    spend = wasted = 0.0
    if model is not None:
        pricing = pricing or Pricing()
        for r in results:
            for a, o in zip(r.request.attempts, r.outcomes):
                cost = pricing.cost(attempt_usage(model, r.request, a, o))
                spend += cost
                if o.status != "completed":
                    wasted += cost
    killed = [(r.request, o) for r in results
              for a, o in zip(r.request.attempts, r.outcomes) if not a.stalled and o.status == "ended"]
    stalls = [(a, o) for r in results for a, o in zip(r.request.attempts, r.outcomes) if a.stalled]
    waits = [max(0.0, o.at - a.stall_at) for a, o in stalls if a.stall_at is not None]
    return PolicyResult(
        policy=policy,
        retries=retries,
        requests=len(results),
        completed=sum(r.completed for r in results),
        attempts=sum(len(r.outcomes) for r in results),
        healthy_killed=len(killed),
        killed_long=sum(req.long for req, _ in killed),
        killed_thinking=sum(req.thinking > 0 for req, _ in killed),
        stalls=len(stalls),
        stalls_detected=sum(o.status == "ended" for _, o in stalls),
        pinging_stalls_missed=sum(o.status == "undetected" and a.stall_pings for a, o in stalls),
        stall_wait_mean=sum(waits) / len(waits) if waits else 0.0,
        stall_wait_max=max(waits, default=0.0),
        p95_latency=percentile([r.latency for r in results], 95),
        seconds_thrown_away=sum(o.at for _, o in killed),
        spend_usd=spend,
        wasted_usd=wasted,
    )


@dataclass(frozen=True, slots=True)
class LabConfig:
    """The policies compared. Defaults fit `StreamModel`'s defaults (reasons in docs/lab.md)."""

    totals: tuple[float, ...] = (60.0, 120.0)
    read_timeout: float = 30.0
    first_token: float = 60.0
    idle: float = 15.0
    deadline: float = 300.0
    retries: int = 1
    retry_partial: bool = True

    def __post_init__(self) -> None:
        if not self.totals or min(self.totals) <= 0:
            raise ValueError("totals must be one or more positive numbers of seconds")
        if min(self.read_timeout, self.first_token, self.idle, self.deadline) <= 0 or self.retries < 0:
            raise ValueError("timeouts and budgets must be > 0 and retries >= 0")

    def policies(self) -> tuple[Policy, ...]:
        read = f"{self.read_timeout:g}"
        return (
            *(Policy(f"total {t:g} s", "total", total=t) for t in self.totals),
            Policy(f"read {read} s, pings", "read", read_timeout=self.read_timeout),
            Policy(f"read {read} s, no pings", "read", read_timeout=self.read_timeout, pings=False),
            Policy(f"budgets {self.first_token:g}/{self.idle:g}/{self.deadline:g} s", "budgets",
                   first_token=self.first_token, idle=self.idle, deadline=self.deadline),
        )


@dataclass(frozen=True, slots=True)
class Finding:
    """One of the three claims (docs/lab.md), checked against this run."""

    claim: str
    holds: bool
    evidence: str


@dataclass(frozen=True, slots=True)
class LabResult:
    model: StreamModel
    config: LabConfig
    rows: tuple[PolicyResult, ...]
    findings: tuple[Finding, ...]
    requests: tuple[Request, ...] = field(repr=False, default=())
    pricing: Pricing = field(default_factory=Pricing)
    """The rates `rows`' spend is at."""

    def without_retries(self, row: PolicyResult) -> PolicyResult:
        """The row of `row`'s policy without retries (`row` itself when it has none)."""
        return next(r for r in self.rows if r.policy == row.policy and r.retries == 0)

    def per_extra_answer_usd(self, row: PolicyResult) -> float | None:
        """What each answer the retries added cost: the retries' extra spend over the extra
        requests completed (inf: they added none); None for a row without retries."""
        if not row.retries:
            return None
        base = self.without_retries(row)
        gained = row.completed - base.completed
        return (row.spend_usd - base.spend_usd) / gained if gained > 0 else math.inf

    def workload(self) -> dict[str, int]:
        """What the first attempts hold: the mix every policy was judged on."""
        first = [r.attempts[0] for r in self.requests]
        return {
            "requests": len(self.requests),
            "long": sum(r.long for r in self.requests),
            "thinking": sum(r.thinking > 0 for r in self.requests),
            "stalled": sum(a.stalled for a in first),
            "stalled_pinging": sum(a.stalled and a.stall_pings for a in first),
        }


def findings(rows: Sequence[PolicyResult]) -> tuple[Finding, ...]:
    """The three findings, computed from the rows without retries."""
    base = [r for r in rows if r.retries == 0]
    budgets = next(r for r in base if r.policy.kind == "budgets")
    pinged = next(r for r in base if r.policy.kind == "read" and r.policy.pings)
    unpinged = next(r for r in base if r.policy.kind == "read" and not r.policy.pings)
    totals = sorted((r for r in base if r.policy.kind == "total"), key=lambda r: r.policy.total or 0.0)
    shortest, longest = totals[0], totals[-1]
    return (
        Finding(
            "three budgets complete every healthy answer and detect every stall",
            budgets.healthy_killed == 0 and budgets.stalls_missed == 0,
            f"{budgets.healthy_killed} healthy killed, {budgets.stalls_detected} of {budgets.stalls} stalls detected",
        ),
        Finding(
            "a read timeout misses stalls that keep pinging",
            pinged.pinging_stalls_missed > 0,
            f"{pinged.pinging_stalls_missed} of {pinged.stalls} stalls never detected, one still waiting "
            f"{pinged.stall_wait_max:.1f} s after it stalled; without pings it "
            f"detects {unpinged.stalls_detected} of {unpinged.stalls} but kills "
            f"{unpinged.killed_thinking} thinking streams",
        ),
        Finding(
            "a total timeout kills long answers",
            shortest.killed_long > 0 and (len(totals) == 1 or longest.healthy_killed < shortest.healthy_killed),
            f"{shortest.policy.name} kills {shortest.healthy_killed} healthy answers "
            f"({shortest.killed_long} long)"
            + ("" if len(totals) == 1 else f", {longest.policy.name} kills {longest.healthy_killed}"),
        ),
    )


def run_lab(model: StreamModel | None = None, config: LabConfig | None = None,
            pricing: Pricing | None = None) -> LabResult:
    """The whole comparison: every policy, without and with `config.retries` retries, its spend at
    `pricing`'s rates (by default a simulated model at Claude Sonnet 4.5's)."""
    model = model or StreamModel()
    config = config or LabConfig()
    pricing = pricing or Pricing()
    requests = generate(model, attempts=config.retries + 1)
    retry_counts = (0, config.retries) if config.retries else (0,)
    rows = tuple(evaluate(requests, policy, retries, model.horizon, config.retry_partial, model, pricing)
                 for policy in config.policies() for retries in retry_counts)
    return LabResult(model, config, rows, findings(rows), requests, pricing)
