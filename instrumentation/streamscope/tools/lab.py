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
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal


def _knob(default: float, help: str) -> Any:
    """A model parameter; its help becomes the CLI flag's help (`streamscope lab --help`)."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True, slots=True)
class StreamModel:
    """The synthetic workload. Defaults are docs/lab.md's reference run; every field is a `lab` flag."""

    streams: int = _knob(200, "requests in the workload")
    seed: int = _knob(7, "random seed (same seed, same streams)")
    long_share: float = _knob(0.20, "share of requests with a long answer")
    long_min: float = _knob(40.0, "shortest long answer, seconds of generation")
    long_max: float = _knob(110.0, "longest long answer, seconds of generation")
    answer_min: float = _knob(3.0, "shortest ordinary answer, seconds of generation")
    answer_max: float = _knob(30.0, "longest ordinary answer, seconds of generation")
    thinking_share: float = _knob(0.10, "share of requests that think before answering")
    thinking_min: float = _knob(15.0, "shortest thinking phase, seconds")
    thinking_max: float = _knob(50.0, "longest thinking phase, seconds")
    ttft_min: float = _knob(0.5, "shortest time to first content without thinking, seconds")
    ttft_max: float = _knob(4.0, "longest time to first content without thinking, seconds")
    gap_max: float = _knob(1.0, "longest ordinary gap between content events, seconds")
    slow_gap_share: float = _knob(0.06, "share of attempts with one slow gap mid-answer")
    slow_gap_min: float = _knob(5.0, "shortest slow gap, seconds")
    slow_gap_max: float = _knob(10.0, "longest slow gap, seconds")
    pace_jitter: float = _knob(0.10, "an attempt's pace varies by up to this fraction")
    stall_share: float = _knob(0.05, "share of attempts that stall")
    pinging_share: float = _knob(0.5, "share of stalls that keep sending pings")
    ping_every: float = _knob(5.0, "seconds between server pings (0: the server never pings)")
    horizon: float = _knob(600.0, "seconds the lab watches an attempt before calling a stall undetected")

    def __post_init__(self) -> None:
        if self.streams < 1:
            raise ValueError("streams must be at least 1")
        for name in ("long_share", "thinking_share", "slow_gap_share", "stall_share", "pinging_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1")
        for low, high in (("long_min", "long_max"), ("answer_min", "answer_max"),
                          ("thinking_min", "thinking_max"), ("ttft_min", "ttft_max"),
                          ("slow_gap_min", "slow_gap_max")):
            if not 0.0 < getattr(self, low) <= getattr(self, high):
                raise ValueError(f"need 0 < {low} <= {high}")
        if not 0.0 < self.gap_max or not 0.0 <= self.pace_jitter < 1.0:
            raise ValueError("gap_max must be > 0 and pace_jitter in [0, 1)")
        if self.ping_every < 0:
            raise ValueError("ping_every must be >= 0")
        if self.horizon <= self.longest_healthy:
            raise ValueError(f"horizon must exceed the longest healthy attempt ({self.longest_healthy:.0f} s), "
                             "or a slow answer would be taken for a stall")

    @property
    def longest_healthy(self) -> float:
        """An upper bound on how long an attempt that does not stall can take."""
        generation = (self.thinking_max + max(self.long_max, self.answer_max)) * (1.0 + self.pace_jitter)
        return self.ttft_max + generation + self.gap_max + self.slow_gap_max


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try at a request, as event times in seconds from the moment it was sent."""

    headers: float
    content: tuple[float, ...]
    pings: tuple[float, ...]
    stall_at: float | None = None
    """When the server stopped generating (None: it did not stall)."""
    stall_pings: bool = False

    @property
    def stalled(self) -> bool:
        return self.stall_at is not None

    @property
    def end(self) -> float:
        """When the last event arrives; never, for a stall."""
        return math.inf if self.stalled else self.content[-1]


@dataclass(frozen=True, slots=True)
class Request:
    """What a retry keeps: the answer's length and the thinking it needs."""

    index: int
    long: bool
    answer: float
    thinking: float
    attempts: tuple[Attempt, ...]


def _pings(start: float, stop: float, every: float) -> tuple[float, ...]:
    if every <= 0:
        return ()
    return tuple(start + k * every for k in range(1, int((stop - start) / every) + 1))


def draw_attempt(model: StreamModel, answer: float, thinking: float, rng: random.Random) -> Attempt:
    """One fresh attempt at a request with this answer length and thinking need."""
    pace = rng.uniform(1.0 - model.pace_jitter, 1.0 + model.pace_jitter)
    ttft = rng.uniform(model.ttft_min, model.ttft_max)
    headers = ttft * rng.uniform(0.2, 0.5)  # message_start arrives early in the wait
    gaps, length = [0.0], 0.0
    while length < answer * pace:
        gaps.append(rng.uniform(0.05, model.gap_max))
        length += gaps[-1]
    if rng.random() < model.slow_gap_share and len(gaps) > 2:
        gaps[rng.randrange(1, len(gaps) - 1)] = rng.uniform(model.slow_gap_min, model.slow_gap_max)
    t, content = ttft + thinking * pace, []
    for gap in gaps:
        t += gap
        content.append(t)
    if rng.random() >= model.stall_share:
        return Attempt(headers, tuple(content), _pings(headers, content[-1], model.ping_every))
    stall_at = rng.uniform(headers, content[-1])
    pinging = rng.random() < model.pinging_share
    ping_stop = model.horizon if pinging else stall_at
    return Attempt(
        headers, tuple(c for c in content if c <= stall_at),
        _pings(headers, ping_stop, model.ping_every), stall_at, pinging,
    )


def generate(model: StreamModel, attempts: int = 1) -> tuple[Request, ...]:
    """The workload: `model.streams` requests with `attempts` pre-drawn attempts each.

    Each request and each attempt has its own seeded generator, so attempt k of request i is the
    same whatever the retry count, and every policy judges the very same streams.
    """
    requests = []
    for i in range(model.streams):
        rng = random.Random(f"{model.seed}/{i}")
        long = rng.random() < model.long_share
        answer = rng.uniform(model.long_min, model.long_max) if long else rng.uniform(model.answer_min, model.answer_max)
        thinking = rng.uniform(model.thinking_min, model.thinking_max) if rng.random() < model.thinking_share else 0.0
        tries = tuple(draw_attempt(model, answer, thinking, random.Random(f"{model.seed}/{i}/{k}"))
                      for k in range(attempts))
        requests.append(Request(i, long, answer, thinking, tries))
    return tuple(requests)


@dataclass(frozen=True, slots=True)
class Policy:
    """How a client decides to give up. `None` = that rule is not used.

    `total` and `read_timeout` are per attempt (an HTTP client's settings); `deadline` is the
    caller's, shared by every attempt. `pings=False` judges the world where the server never
    pings, the only difference a read timeout can see.
    """

    name: str
    kind: Literal["total", "read", "budgets"]
    total: float | None = None
    read_timeout: float | None = None
    pings: bool = True
    first_token: float | None = None
    idle: float | None = None
    deadline: float | None = None


Status = Literal["completed", "ended", "undetected"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one attempt: `ended` means a rule fired (a kill, or a stall detected)."""

    status: Status
    at: float
    rule: str | None = None
    partial: bool = False
    """Content had already reached the caller (retrying it restarts visible text)."""


def _first_overrun(times: Iterable[float], limit: float, open_end: bool) -> float | None:
    """When a silence longer than `limit` first starts to overrun between sorted `times`;
    with `open_end`, the silence after the last one never ends."""
    last = None
    for t in times:
        if last is not None and t - last > limit:
            return last + limit
        last = t
    return last + limit if open_end and last is not None else None


def judge(attempt: Attempt, policy: Policy, horizon: float, deadline_left: float | None = None) -> Outcome:
    """The earliest rule that fires on this attempt, or its completion, or nothing until the horizon."""
    fires: list[tuple[float, str]] = []
    content = attempt.content
    if policy.total is not None:
        fires.append((policy.total, "total"))
    if policy.deadline is not None:
        fires.append((policy.deadline if deadline_left is None else deadline_left, "deadline"))
    if policy.first_token is not None and (not content or content[0] > policy.first_token):
        fires.append((policy.first_token, "first_token"))
    if policy.idle is not None and content:
        at = _first_overrun(content, policy.idle, open_end=attempt.stalled)
        if at is not None:
            fires.append((at, "idle"))
    if policy.read_timeout is not None:
        pings = attempt.pings if policy.pings else ()
        arrivals = heapq.merge((0.0, attempt.headers), content, pings)
        silent_end = attempt.stalled and not (attempt.stall_pings and policy.pings)
        at = _first_overrun(arrivals, policy.read_timeout, open_end=silent_end)
        if at is not None:
            fires.append((at, "read_timeout"))
    at, rule = min(fires, default=(math.inf, None))
    if at < attempt.end and at < horizon:
        return Outcome("ended", at, rule, partial=bool(content) and content[0] < at)
    if attempt.end <= horizon:
        return Outcome("completed", attempt.end)
    return Outcome("undetected", horizon)


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    request: Request
    outcomes: tuple[Outcome, ...]

    @property
    def latency(self) -> float:
        """Seconds until the caller had its final answer or gave up (no backoff modelled)."""
        return sum(o.at for o in self.outcomes)

    @property
    def completed(self) -> bool:
        return self.outcomes[-1].status == "completed"


def run_request(request: Request, policy: Policy, retries: int, horizon: float,
                retry_partial: bool = True) -> RequestOutcome:
    """Try a request, retrying whatever a rule ended, up to `retries` times.

    A stall nobody detected is never retried (the caller is still waiting), nor is a request
    whose shared deadline is spent; with `retry_partial=False` neither is an attempt that had
    delivered content (the retry line).
    """
    outcomes: list[Outcome] = []
    elapsed = 0.0
    for attempt in request.attempts[: retries + 1]:
        left = None if policy.deadline is None else policy.deadline - elapsed
        outcome = judge(attempt, policy, horizon, left)
        outcomes.append(outcome)
        elapsed += outcome.at
        if outcome.status != "ended" or outcome.rule == "deadline" or (outcome.partial and not retry_partial):
            break
    return RequestOutcome(request, tuple(outcomes))


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

    @property
    def retries_sent(self) -> int:
        return self.attempts - self.requests

    @property
    def stalls_missed(self) -> int:
        return self.stalls - self.stalls_detected


def evaluate(requests: Sequence[Request], policy: Policy, retries: int, horizon: float,
             retry_partial: bool = True) -> PolicyResult:
    """Judge every request under `policy` and summarise (attempt-level counts)."""
    results = [run_request(r, policy, retries, horizon, retry_partial) for r in requests]
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


def run_lab(model: StreamModel | None = None, config: LabConfig | None = None) -> LabResult:
    """The whole comparison: every policy, without and with `config.retries` retries."""
    model = model or StreamModel()
    config = config or LabConfig()
    requests = generate(model, attempts=config.retries + 1)
    retry_counts = (0, config.retries) if config.retries else (0,)
    rows = tuple(evaluate(requests, policy, retries, model.horizon, config.retry_partial)
                 for policy in config.policies() for retries in retry_counts)
    return LabResult(model, config, rows, findings(rows), requests)
