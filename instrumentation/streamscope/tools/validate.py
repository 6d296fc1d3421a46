"""`streamscope validate`'s engine: do budgets chosen at today's load still hold at peak?

The budgets run for real: scripted streams from the embedded simulator, read through the real
`anthropic.AsyncAnthropic` with streamscope instrumenting it, at several load multipliers. What
is scripted is known, so what the budgets did can be judged against it (docs/validate.md).

The latency model. At 1x each healthy request's time to first token (TTFT) and its largest gap
between content events are samples of the measured distribution (a span file, Prometheus) or of
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

Times in scripts and figures are model seconds; the simulator and the budgets run at
`time_scale` real seconds per model second, as in `streamscope demo`.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from streamscope.budgets.table import Budgets, CallBudgets
from streamscope.core.attributes import BUDGET_FIRED

from .suggest import Distribution, quantile

if TYPE_CHECKING:  # the simulator, the SDK and the demo are imported when a run starts
    import anthropic

    from streamscope.simulator import Step

    from .demo import Demo
    from .workload import Request

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
DWELL_FACTOR = 1.2
"""A doomed request must be cut within this times the budget meant to cut it."""
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


# -- figures ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What one request did, measured by the caller (model seconds)."""

    script: Script
    fired: str | None
    """The budget that ended it (the span's `streamscope.budget.fired`, or the StreamTimeout)."""
    error: str | None
    ttft: float | None
    dwell: float
    """Doomed: how long it held its slot after going silent (to the cut, or to the stall's end)."""
    start: float
    end: float
    """Real seconds since the multiplier began (for the in-flight count)."""


@dataclass(frozen=True)
class Dwell:
    """Doomed requests of one kind: how long they held a slot after going silent."""

    kind: Kind
    requests: int
    cut: int
    p99: float | None
    max: float | None
    limit: float | None
    """`DWELL_FACTOR` × the budget meant to cut them; None: no such budget."""

    @property
    def holds(self) -> bool:
        return self.requests == 0 or (self.limit is not None and self.p99 is not None and self.p99 <= self.limit)


@dataclass(frozen=True)
class Figures:
    """The figures of one load multiplier."""

    multiplier: float
    requests: int
    healthy: int
    false_kills: int
    false_killed: tuple[int, ...]
    """The numbers of the healthy requests a budget ended."""
    fired: dict[str, int]
    errors: int
    ttft_p50: float
    ttft_p99: float
    """Of the healthy requests, as scripted (what the budgets faced, not cut short by them)."""
    gap_p99: float
    dwell: tuple[Dwell, ...]
    in_flight_peak: int
    seconds: float
    """Real seconds the multiplier took."""

    @property
    def false_kill_rate(self) -> float:
        return self.false_kills / self.healthy if self.healthy else 0.0


@dataclass(frozen=True)
class Report:
    config: Config
    budgets: CallBudgets
    """Model seconds."""
    figures: tuple[Figures, ...]
    max_false_kill_rate: float
    pool_size: int | None = None
    problems: tuple[str, ...] = field(default=())

    @property
    def holds(self) -> bool:
        return not self.problems


def figures(multiplier: float, outcomes: Sequence[Outcome], budgets: CallBudgets, seconds: float) -> Figures:
    healthy = [o for o in outcomes if o.script.kind == "healthy"]
    killed = [o for o in healthy if o.fired is not None]
    fired: dict[str, int] = {}
    for o in outcomes:
        if o.fired is not None:
            fired[o.fired] = fired.get(o.fired, 0) + 1
    ttfts = sorted(o.script.ttft for o in healthy) or [math.nan]
    gaps = sorted(o.script.gap for o in healthy) or [math.nan]
    dwell = []
    kinds: tuple[tuple[Kind, float | None], ...] = (("stall_before_first_content", budgets.first_token),
                                                    ("stall_mid_stream", budgets.idle))
    for kind, budget in kinds:
        doomed = sorted(o.dwell for o in outcomes if o.script.kind == kind)
        dwell.append(Dwell(kind, len(doomed), sum(o.fired is not None for o in outcomes if o.script.kind == kind),
                           quantile(doomed, 0.99) if doomed else None, doomed[-1] if doomed else None,
                           None if budget is None else DWELL_FACTOR * budget))
    events = sorted([(o.start, 1) for o in outcomes] + [(o.end, -1) for o in outcomes])
    peak = open_ = 0
    for _, step in events:
        open_ += step
        peak = max(peak, open_)
    return Figures(multiplier, len(outcomes), len(healthy), len(killed), tuple(o.script.number for o in killed),
                   fired, sum(o.error is not None for o in healthy),
                   quantile(ttfts, 0.5), quantile(ttfts, 0.99), quantile(gaps, 0.99), tuple(dwell), peak, seconds)


def problems(rows: Sequence[Figures], max_false_kill_rate: float, pool_size: int | None) -> tuple[str, ...]:
    """Each way the budgets fail a multiplier, one sentence each."""
    out = []
    for f in rows:
        at = f"at {f.multiplier:g}x"
        if f.false_kill_rate >= max_false_kill_rate:
            out.append(f"{at}, budgets ended {f.false_kills} of {f.healthy} healthy requests "
                       f"({f.false_kill_rate:.1%}, limit {max_false_kill_rate:.1%})")
        for d in f.dwell:
            if d.holds:
                continue
            what = "stalls before first content" if d.kind == "stall_before_first_content" else "mid-stream stalls"
            if d.limit is None:
                budget = "first_token" if d.kind == "stall_before_first_content" else "idle"
                out.append(f"{at}, {what} held their slot for the whole stall ({d.max:g} s): no {budget} budget")
            else:
                out.append(f"{at}, {what} held their slot for {d.p99:.1f} s (p99) before the cut, over the "
                           f"limit of {d.limit:g} s")
        if pool_size is not None and f.in_flight_peak > pool_size:
            out.append(f"{at}, {f.in_flight_peak} streams were open at once, over the pool of {pool_size}")
    return tuple(out)


# -- the run ---------------------------------------------------------------------------------------


def scaled(budgets: CallBudgets, scale: float) -> Budgets:
    """Model-second budgets as the real seconds the simulator runs in."""
    def s(value: float | None) -> float | None:
        return None if value is None else value * scale
    return Budgets(s(budgets.first_token), s(budgets.idle), s(budgets.deadline), budgets.first_content)


def run(config: Config, budgets: CallBudgets, *, max_false_kill_rate: float = 0.005, pool_size: int | None = None,
        progress: Callable[[], None] | None = None) -> Report:
    """Every multiplier in turn against one simulator, with streamscope and `budgets` (model seconds) on."""
    import anthropic

    from .demo import Demo
    from .workload import Request

    plan = {m: scripts(config, m, budgets) for m in config.multipliers}
    requests = {m: [Request(i * config.requests + s.number, s.kind, s.kind, config.model, config.route,
                            tuple(s.steps())) for s in batch]
                for i, (m, batch) in enumerate(plan.items())}
    rows: list[Figures] = []
    with Demo([r for batch in requests.values() for r in batch], scale=config.time_scale, page_port=None,
              budgets={"default": scaled(budgets, config.time_scale)}) as demo:
        try:
            async def everything() -> None:
                async with anthropic.DefaultAsyncHttpxClient() as http:
                    for m, batch in plan.items():
                        began = time.monotonic()
                        demo.spans.clear()
                        driver = _Driver(demo, http, config.time_scale, progress)
                        outcomes = await driver.multiplier(batch, requests[m])
                        rows.append(figures(m, outcomes, budgets, time.monotonic() - began))

            asyncio.run(everything())
        finally:
            demo.telemetry.shutdown()
    return Report(config, budgets, tuple(rows), max_false_kill_rate, pool_size,
                  problems(rows, max_false_kill_rate, pool_size))


HEADER = "x-streamscope-validate-request"
Timing = tuple[float, float, float | None, float, str | None, str | None]
"""Real seconds: start, end, first content, dwell; the budget that fired; another error's type."""


class _Driver:
    """Open-loop arrivals: each request is sent at its scripted time, whatever is still open."""

    def __init__(self, demo: Demo, http: anthropic.DefaultAsyncHttpxClient, scale: float,
                 progress: Callable[[], None] | None) -> None:
        self.demo, self.http, self.scale, self.progress = demo, http, scale, progress

    async def multiplier(self, batch: Sequence[Script], requests: Sequence[Request]) -> list[Outcome]:
        began = time.monotonic()
        timings: dict[int, Timing] = {}

        async def one(script: Script, request: Request) -> None:
            await asyncio.sleep(max(0.0, began + script.arrival * self.scale - time.monotonic()))
            timings[script.number] = await self.read(request, script.kind)
            if self.progress is not None:
                self.progress()

        await asyncio.gather(*(one(s, r) for s, r in zip(batch, requests, strict=True)))
        from_spans = self.fired_from_spans()
        out = []
        for script, request in zip(batch, requests, strict=True):
            start, end, first, dwell, fired, error = timings[script.number]
            out.append(Outcome(script, from_spans.get(request.number) or fired, error,
                               None if first is None else (first - start) / self.scale, dwell / self.scale,
                               start - began, end - began))
        return out

    async def read(self, request: Request, kind: Kind) -> Timing:
        """Stream one request to its end, as an application would."""
        import anthropic

        from streamscope.core.context import route
        from streamscope.core.errors import StreamTimeout

        from .demo import PROMPT

        client = anthropic.AsyncAnthropic(base_url=self.demo.sim.url(request.scenario.name), api_key="validate",
                                          max_retries=0, default_headers={HEADER: str(request.number)},
                                          http_client=self.http)
        start = time.monotonic()
        texts: list[float] = []
        fired = error = None
        try:
            with route(request.route):
                async with client.messages.stream(model=request.model, max_tokens=1024, messages=PROMPT) as stream:
                    async for event in stream:
                        if event.type == "text":
                            texts.append(time.monotonic())
        except StreamTimeout as timeout:
            fired = str(timeout.budget)
        except Exception as other:  # any other failure is counted, not raised
            error = type(other).__name__
        end = time.monotonic()
        if kind == "stall_before_first_content" or not texts:
            dwell = (texts[0] if texts else end) - start
        else:
            marks = [*texts, end]
            dwell = max(b - a for a, b in itertools.pairwise(marks))
        return start, end, texts[0] if texts else None, dwell, fired, error

    def fired_from_spans(self) -> dict[int, str]:
        """The budget each span says fired, by request number."""
        number_of = {log.request_id: int(log.headers.get(HEADER, -1)) for log in self.demo.sim.requests}
        out = {}
        for span in self.demo.spans.get_finished_spans():
            attrs = span.attributes or {}
            fired = attrs.get(BUDGET_FIRED)
            if fired:
                out[number_of.get(str(attrs.get("anthropic.request.id")), -1)] = str(fired)
        return out
