"""`streamscope validate`'s engine: do budgets chosen at today's load still hold at peak?

The budgets run for real: the requests `validate_model` scripts, played by the embedded
simulator and read through the real `anthropic.AsyncAnthropic` with streamscope instrumenting it,
at several load multipliers. What is scripted is known, so what the budgets did can be judged
against it (docs/validate.md): the figures here are model seconds, like the scripts.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from streamscope.budgets.table import Budgets, CallBudgets
from streamscope.core.attributes import BUDGET_FIRED

from .suggest import quantile
from .validate_model import Config, Kind, Script, scripts

if TYPE_CHECKING:  # the SDK and the demo are imported when a run starts
    import anthropic

    from .demo import Demo
    from .workload import Request

DWELL_FACTOR = 1.2
"""A doomed request must be cut within this times the budget meant to cut it."""
LAG_TICK = 0.02
"""Real seconds between the looks that measure how late the run's event loop wakes."""
LAG_NOTE = 0.1
"""A run that woke later than this share of its smallest budget gets a note: its kills close to a
budget may be the machine's delay (which a budget counts as silence), not the budgets'."""


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
    lag: float = 0.0
    """The latest the run's event loop woke (model seconds): this machine's own delay."""

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
    notes: tuple[str, ...] = field(default=())
    """What to know about the run itself (not a finding: the exit code does not change)."""

    @property
    def holds(self) -> bool:
        return not self.problems


def figures(multiplier: float, outcomes: Sequence[Outcome], budgets: CallBudgets, seconds: float,
            lag: float = 0.0) -> Figures:
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
                   quantile(ttfts, 0.5), quantile(ttfts, 0.99), quantile(gaps, 0.99), tuple(dwell), peak, seconds,
                   lag)


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


def notes(rows: Sequence[Figures], budgets: CallBudgets, time_scale: float) -> tuple[str, ...]:
    """A note for each multiplier whose run woke late by `LAG_NOTE` of the smallest budget or more."""
    given = [(b, name) for b, name in ((budgets.first_token, "first_token"), (budgets.idle, "idle")) if b]
    if not given:
        return ()
    budget, name = min(given)
    return tuple(
        f"at {f.multiplier:g}x this machine ran up to {f.lag:.2g} s late ({f.lag / budget:.0%} of the {budget:g} s "
        f"{name} budget; model seconds, {f.lag * time_scale:.2g} s real): kills close to a budget may be the "
        f"machine's delay, not the budgets'. A larger --time-scale gives the run more real time"
        for f in rows if f.lag >= LAG_NOTE * budget)


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
                        outcomes, lag = await driver.multiplier(batch, requests[m])
                        rows.append(figures(m, outcomes, budgets, time.monotonic() - began, lag))

            asyncio.run(everything())
        finally:
            demo.telemetry.shutdown()
    return Report(config, budgets, tuple(rows), max_false_kill_rate, pool_size,
                  problems(rows, max_false_kill_rate, pool_size), notes(rows, budgets, config.time_scale))


HEADER = "x-streamscope-validate-request"
Timing = tuple[float, float, float | None, float, str | None, str | None]
"""Real seconds: start, end, first content, dwell; the budget that fired; another error's type."""


class _Driver:
    """Open-loop arrivals: each request is sent at its scripted time, whatever is still open."""

    def __init__(self, demo: Demo, http: anthropic.DefaultAsyncHttpxClient, scale: float,
                 progress: Callable[[], None] | None) -> None:
        self.demo, self.http, self.scale, self.progress = demo, http, scale, progress

    async def multiplier(self, batch: Sequence[Script], requests: Sequence[Request]) -> tuple[list[Outcome], float]:
        """Every request of one multiplier, and how late the loop woke meanwhile (model seconds)."""
        began = time.monotonic()
        timings: dict[int, Timing] = {}
        latest = [0.0]
        watch = asyncio.ensure_future(self.lag(latest))

        async def one(script: Script, request: Request) -> None:
            await asyncio.sleep(max(0.0, began + script.arrival * self.scale - time.monotonic()))
            timings[script.number] = await self.read(request, script.kind)
            if self.progress is not None:
                self.progress()

        try:
            await asyncio.gather(*(one(s, r) for s, r in zip(batch, requests, strict=True)))
        finally:
            watch.cancel()
        from_spans = self.fired_from_spans()
        out = []
        for script, request in zip(batch, requests, strict=True):
            start, end, first, dwell, fired, error = timings[script.number]
            out.append(Outcome(script, from_spans.get(request.number) or fired, error,
                               None if first is None else (first - start) / self.scale, dwell / self.scale,
                               start - began, end - began))
        return out, latest[0] / self.scale

    @staticmethod
    async def lag(latest: list[float]) -> None:
        """Keep in `latest[0]` the latest this loop woke from a `LAG_TICK` sleep (real seconds): a
        busy machine, or another thread holding the interpreter, delays reads the same way."""
        while True:
            asked = time.monotonic()
            await asyncio.sleep(LAG_TICK)
            latest[0] = max(latest[0], time.monotonic() - asked - LAG_TICK)

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
