"""Relay scale: 100 to 2,000 concurrent relayed streams on one uvicorn worker, and how late budgets fire.

What `relay_load.py` measures at one stream count, swept over several (`--streams`, default 100,
500, 1000, 2000), with a tenth of the streams stalling mid-answer; and the same budgets on the
sync SDK in 200 threads. Processes as in `relay_load.py` (its functions, imported): the provider is
a simulator in its own process (`--simulate`: `streamscope.simulator.Simulator` serving this
file's scenarios, built with the simulator's public API, not the catalog); each endpoint is one
uvicorn worker (h11, asyncio) of its own, started fresh for each stream count; the browsers are
this process, read with the browser's parsing rules.

The load. A worker holds thousands of streams at once because answers are long and requests arrive
spread out (concurrency = arrival rate x duration), not because thousands arrive in the same
second. So the browsers arrive at a fixed rate (`--rate`, 40 a second: N streams arrive over
N / rate s, the ramp), and each answer is longer than the ramp, so that all N are open at once
for `--hold` s (10) after the last one arrives. A healthy answer (`answer-W`): its first text
delta at 0.5 s, then one every `--gap` s (1), W deltas in all, W = 1 + ceil((ramp + hold - 0.5) /
gap): 12 at 40 streams, 61 at 2,000. Browser i stalls when i % `--stall-every` (10) is 9: its
answer (`stall-S`) sends S deltas as a healthy one does, then nothing for 12 s (or idle + 8 s if
more), then one more delta and the end. S is chosen per stream so that its budget comes due while
all N are open: the stalls' due times spread evenly over [ramp + 1, ramp + hold - 1] s after the
first arrival (S >= 1: one that arrives late stalls after its first delta). The warm-up plays
`warm` (5 deltas 50 ms apart). The relay's budgets are first_token 10 s, idle `--idle` (4 s: four
times the healthy gap, so a busy loop's backlog is not taken for a stall), deadline 600 s.

An ASGI middleware in front of each endpoint's app puts the browser's `?scenario=NAME` in a
context variable, and the endpoint's SDK client sends its request through a transport that swaps
the scenario in the upstream path (`/s/warm/v1/messages` -> `/s/answer-61/v1/messages`): the same
in both endpoints, and neither endpoint's code changes. Both endpoints' SDK client has its
connections raised to the stream count, in one pool (`--pool N`: pools of N; the SDK's default
holds 1,000 connections: beyond that, streams would wait for a connection before their request is
even sent). The browsers use one HTTP client per 100 (httpcore2's pool looks at every connection at
each request and response: one client of 2,000 costs the browsers' process, on the same cores,
O(n^2) CPU).

* `baseline`: `baseline_relay.py`, the article's hand-written relay (its own idle timeout, 30 s, is
  longer than the stall: a stalled stream there ends after the silence with S + 1 tokens and
  `done`);
* `relay`: `streamscope.serve.relay()`, `Budgets(first_token=10, idle=--idle, deadline=600)`: a
  stalled stream should end with its S tokens and one `error` event (`upstream_timeout`); one the
  budget did not catch before the silence ended gets its S + 1 and `done` (counted: stalls caught);
  a healthy one must end with its W and `done`.

Per stream count and endpoint: streams done as expected, streams with exactly one terminal event
(last), the most open at once (N when all overlapped), memory per stream (peak resident set during
the N minus before, over N; relay minus baseline is the figure held to 8 KiB), CPU per stream, text
deltas relayed per second (all the browsers got, over the wall time; at the peak about N / gap a
second), the CPU each process used over the run, as a share of one core (the server's over the N;
the simulator's and the browsers', this process's, over the endpoint's whole run, its start and
warm-up included), and the server loop's lag: how late each 50 ms sleep of a task in the server
woke, p50 / p99 / max, during the N.

How late budgets fire (the relay, and the sync part). streamscope puts when a budget fired on the
span (the `streamscope.budget_fired` event's timestamp, which is the recorder's `fired_at`) but not
when it was due: that is the recorder's provider clock, `origin` (the last content event, moved
later by any time the caller spent away from the stream) plus the budget, and `origin` is not
exported. So the server process wraps `StreamRecorder.fire` (read-only: it calls the original and
changes nothing) and, at each firing that counts, keeps: due = `enforcement.waiting_budget(rec)`
(origin + idle, or + first_token before the first content) or `enforcement.deadline_at(rec)` (start
+ deadline), read at that moment (the caller is waiting, so origin does not move), and fired =
`time.monotonic()` at the call (for the watches, the time they fire at; the span's event says the
same). Lateness = fired - due: when the watch decided the stream was stalled; the reader's
cancellation, the relay's `error` event and the span's end follow when the loop next runs the
reading task. The async watch confirms a stall with one more loop turn (bytes waiting in the
socket, which the loop has not read yet, postpone it): on a loop that lags, a firing comes the
loop's lag late. A stall that ends before the watch looks is not caught at all (it is then
counted, not measured: lateness is over the firings). That is what is measured, with the loop's
lag beside, and each firing's lateness less the server's garbage-collector pauses within it
(`gc.callbacks` in the server, read-only: the collector holds the interpreter, so nothing on the
loop runs during a pause). Counted also from the spans: the spans a budget ended
(`streamscope.budget.fired`), and by budget and scenario from the firings; and from the browsers:
healthy streams ended by an `upstream_timeout` error (a budget). A first_token firing on a healthy
stream is retried by the relay, unseen by the browser: only the firings say it.

Sync (`--threads`, default 200): in a child process, 200 threads arrive at the same rate and each
reads `--rounds` (5) streams one after another through one sync `anthropic.Anthropic` client per
scenario (pools of 200), with the same budgets (the sync watchdog: one thread for every stream), a
tenth of each round stalling (after 3 deltas), the healthy answers as long as for 200 async
streams; lateness measured the same way (the watchdog's firing), and as the caller saw it
(`StreamTimeout` raised minus the last text delta it got minus the idle budget, as `precision.py`
measures); beside it, how late a 50 ms `time.sleep` in a thread of the same process woke (the GIL's
lag).

Targets, said with each run, never the exit status: memory per stream at most 8 KiB more than the
baseline, budgets fired within 20 ms of due at the 99th percentile (async), 50 ms (sync threads),
every stream one terminal event, no healthy stream ended by a budget. Exit status 1 only if a
stream was lost or ended otherwise than expected, as `relay_load.py` (a healthy stream that ended
in an error, a budget's too, lost its answer; a stall the budget did not catch did not). Plots
(matplotlib, the `lab` extra) of the figures against the stream count go to `--plots` (by default
docs/img for the default sweep, none for a shorter one).

    python benchmarks/relay_scale.py [--streams 100,500,1000,2000 | --quick] [--threads 200 --rounds 5]
                                     [--rate 40] [--gap 1] [--hold 10] [--idle 4] [--pool 0]
                                     [--parts async,sync] [--plots DIR] [--json]
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import math
import os
import platform
import sys
import threading
import time
from collections import Counter
from contextvars import ContextVar
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx2

import relay_load
from relay_load import ENDPOINTS, MEMORY_TARGET_KIB, Read, Result, first_line, process

HERE = Path(__file__).resolve().parent
COUNTS = (100, 500, 1000, 2000)
QUICK_COUNTS = (50, 200)
WARM = "warm"
WARM_WORDS = 5
"""The warm-up's answer: 5 text deltas 50 ms apart."""
FIRST = 0.5
"""When a measured answer's first text delta comes, s."""
RATE, GAP, HOLD = 40.0, 1.0, 10.0
"""Browsers arriving per second; s between text deltas; s all N streams are open at once, at least."""
SILENCE = 12.0
"""A stalled answer's silence, s (at least idle + 8 s)."""
SYNC_STALL_AFTER = 3
"""Text deltas a stalled sync stream sends before its silence."""
FIRST_TOKEN, IDLE, DEADLINE = 10.0, 4.0, 600.0
ASYNC_TARGET_MS, SYNC_TARGET_MS = 20.0, 50.0
TICK = 0.05
POOL = 0
"""The endpoints' upstream connections per pool by default (0: one pool, as one SDK client has)."""
BROWSERS_PER_CLIENT = 100
"""The browsers' connections per HTTP client (the module docstring says why)."""
MODEL = relay_load.MODEL
PROMPT = [{"role": "user", "content": "How do streams fail?"}]
TEXT = ("Streams fail in ways a single status code cannot describe: they stall, they get cut, they stop at the "
        "token limit, or they end without the final event.").split()


def stalls(i: int, every: int) -> bool:
    return every > 0 and i % every == every - 1


@dataclass(frozen=True)
class Profile:
    """The load: arrivals per second, the healthy answers' gap, how long all N are open at once, the
    idle budget, 1 stream in `every` stalling (the module docstring says how each answer is made)."""

    rate: float = RATE
    gap: float = GAP
    hold: float = HOLD
    idle: float = IDLE
    every: int = 10

    @property
    def silence(self) -> float:
        return max(SILENCE, self.idle + 8.0)

    def ramp(self, n: int) -> float:
        """Seconds over which `n` browsers arrive."""
        return n / self.rate

    def words(self, n: int) -> int:
        """Text deltas of a healthy answer at `n` streams: it lasts the ramp and `hold` s more."""
        return 1 + math.ceil(max(0.0, self.ramp(n) + self.hold - FIRST) / self.gap - 1e-9)

    def seconds(self, n: int) -> float:
        """How long a healthy answer at `n` streams lasts, s."""
        return FIRST + (self.words(n) - 1) * self.gap

    def stall_after(self, i: int, n: int) -> int:
        """Text deltas stalled browser i of `n` gets before the silence: its idle budget comes due
        while all `n` are open (the stalls' due times spread over [ramp + 1, ramp + hold - 1])."""
        stalled = max(1, n // self.every)
        ramp = self.ramp(n)
        due = ramp + 1 + max(0.0, self.hold - 2) * (i // self.every + 0.5) / stalled
        after = 1 + round((due - ramp * i / n - FIRST - self.idle) / self.gap)
        return max(1, min(after, self.words(n) - 1))

    def scenario(self, i: int, n: int) -> str:
        """The simulator's scenario for browser i of `n`."""
        return f"stall-{self.stall_after(i, n)}" if stalls(i, self.every) else f"answer-{self.words(n)}"


def pct(values: list[float], q: float) -> float | None:
    """The q-quantile by nearest rank (of 100 values, p99 is the 99th; of fewer, the largest); None
    for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(len(ordered) * q) - 1)]


def spread_ms(values: list[float]) -> tuple[float | None, float | None, float | None]:
    """(p50, p99, max) of seconds, in ms."""
    ms = [v * 1000 for v in values]
    return pct(ms, 0.5), pct(ms, 0.99), max(ms, default=None)


# -- what the server process adds (its own: `--serve ENDPOINT UPSTREAM STREAMS IDLE POOL`) ------

SCENARIO: ContextVar[str | None] = ContextVar("scenario", default=None)
"""The scenario the browser asked for (`?scenario=`), for the upstream request it causes."""


class Scenarios:
    """ASGI middleware: a request's `?scenario=NAME` (else `default`) in `SCENARIO` while it is served."""

    def __init__(self, app: Any, default: str = WARM) -> None:
        self.app, self.default = app, default

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        name = self.default
        if scope["type"] == "http" and scope.get("query_string"):
            name = parse_qs(scope["query_string"].decode()).get("scenario", [name])[0]
        token = SCENARIO.set(name)
        try:
            await self.app(scope, receive, send)
        finally:
            SCENARIO.reset(token)


class Routed(httpx2.AsyncBaseTransport):
    """The SDK's transport, the upstream path's scenario swapped for `SCENARIO`'s where one is set;
    its requests spread over `pools` (in turn)."""

    def __init__(self, pools: list[httpx2.AsyncBaseTransport], default: str) -> None:
        self.pools, self.default, self.prefix, self.turn = pools, default, f"/s/{default}/", itertools.count()

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        name = SCENARIO.get()
        path = request.url.path
        if name is not None and name != self.default and path.startswith(self.prefix):
            request.url = request.url.copy_with(path=f"/s/{name}/{path[len(self.prefix):]}")
        return await self.pools[next(self.turn) % len(self.pools)].handle_async_request(request)

    async def aclose(self) -> None:
        for pool in self.pools:
            await pool.aclose()


class Firings:
    """Every budget firing in this process that counted, as (budget, due, fired, scenario) on the
    monotonic clock: `StreamRecorder.fire` wrapped, read-only (the module docstring says what each
    time is). `scenario`: the browser's, where the firing runs in its request's context (the async
    watch's timer does); None elsewhere (the sync watchdog's thread)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, float | None, float, str | None]] = []

    def install(self) -> Firings:
        from streamscope.budgets import enforcement
        from streamscope.core.recorder import StreamRecorder

        fire, seen = StreamRecorder.fire, self.seen

        def probed(rec: Any, budget: str, t: float) -> bool:
            now = time.monotonic()
            if budget == "deadline":
                due = enforcement.deadline_at(rec)
            else:
                found = enforcement.waiting_budget(rec)
                due = found[0] if found is not None and found[1] == budget else None
            counted = fire(rec, budget, t)
            if counted:
                seen.append((budget, due, now, SCENARIO.get()))
            return counted

        StreamRecorder.fire = probed  # type: ignore[method-assign]
        return self

    def lateness(self) -> list[float]:
        return [fired - due for _, due, fired, _ in self.seen if due is not None]


class Pauses:
    """The server's garbage collector pauses, from `gc.callbacks` (read-only: it only reads the
    clock): `(start, end, generation)` in `time.monotonic()` for each that took 1 ms or more. While
    the collector runs it holds the interpreter, so no budget's check, nor any other callback,
    can run."""

    def __init__(self) -> None:
        self.seen: list[tuple[float, float, int]] = []
        self._began = 0.0

    def install(self) -> Pauses:
        gc.callbacks.append(self._callback)
        return self

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        now = time.monotonic()
        if phase == "start":
            self._began = now
        elif now - self._began >= 0.001:
            self.seen.append((self._began, now, int(info.get("generation", -1))))


def outside(start: float, end: float, pauses: list[tuple[float, float, int]]) -> float:
    """How much of `start`..`end` no collector pause covered (s)."""
    covered = sum(max(0.0, min(end, b) - max(start, a)) for a, b, _ in pauses)
    return max(0.0, end - start - covered)


def scale_app(kind: str, upstream: str, streams: int, idle: float, pool: int) -> Any:
    """`relay_load.endpoint_app(kind)`, its SDK client's connections raised to `streams` (in pools of
    `pool`, 0: one pool) and its upstream's scenario the browser's; the relay's firings in `/stats`."""
    import anthropic

    size = (pool or streams) + 100
    limits = httpx2.Limits(max_connections=size, max_keepalive_connections=size)
    transport = Routed([httpx2.AsyncHTTPTransport(limits=limits) for _ in range(0, streams, pool or streams)], WARM)
    client = anthropic.AsyncAnthropic(base_url=upstream, api_key="load",
                                      http_client=anthropic.DefaultAsyncHttpxClient(transport=transport))
    pauses = Pauses().install()
    if kind == "baseline":
        return Scenarios(relay_load.endpoint_app(kind, upstream, client=client,
                                                 more_stats=lambda: {"pauses": pauses.seen}))
    from streamscope import Budgets

    firings = Firings().install()
    app = relay_load.endpoint_app(kind, upstream, client=client,
                                  budgets=Budgets(first_token=FIRST_TOKEN, idle=idle, deadline=DEADLINE),
                                  more_stats=lambda: {"firings": firings.seen, "pauses": pauses.seen})
    return Scenarios(app)


# -- the provider (its own process: `--simulate GAP SILENCE WORDS MOST`) -----------------------

def scenarios(gap: float, silence: float, words: list[int], most: int) -> list[Any]:
    """The simulator's scenarios: `warm`, `answer-W` for each W of `words`, `stall-S` for S of 1 to
    `most` (the module docstring says what each plays)."""
    from streamscope.simulator import Scenario, Silence, TextSpec, message_stream

    def text(n: int) -> list[str]:
        return [f"{' ' if k else ''}{TEXT[k % len(TEXT)]}" for k in range(n)]

    made = [Scenario.single(WARM, message_stream(blocks=[TextSpec(text(WARM_WORDS), interval=0.05)]))]
    made += [Scenario.single(f"answer-{w}", message_stream(blocks=[TextSpec(text(w), first_delay=FIRST, interval=gap)]))
             for w in sorted(set(words))]
    made += [Scenario.single(f"stall-{n}", message_stream(blocks=[
        TextSpec([*text(n), Silence(silence), " end."], first_delay=FIRST, interval=gap)])) for n in range(1, most + 1)]
    return made


def simulate(gap: float, silence: float, words: list[int], most: int) -> None:
    """`scenarios(...)` served by `Simulator` on a free port of 127.0.0.1, until this process is ended
    (its base URL printed first, as `streamscope simulate` prints it)."""
    from streamscope.simulator import Simulator

    simulator = Simulator(scenarios(gap, silence, words, most)).start()
    print(f"ANTHROPIC_BASE_URL={simulator.url()}", flush=True)
    threading.Event().wait()


def simulator_command(profile: Profile, counts: list[int], threads: int | None) -> list[str]:
    """The simulator's process, with every scenario the counts (and the sync threads) play."""
    words = [profile.words(n) for n in counts] + ([profile.words(threads)] if threads else [])
    most = max([SYNC_STALL_AFTER, *words])
    return [sys.executable, str(Path(__file__).resolve()), "--simulate", str(profile.gap), str(profile.silence),
            ",".join(map(str, words)), str(most)]


# -- the sweep (this process) ---------------------------------------------------------------------

@dataclass
class Point:
    """One stream count: both endpoints' runs, what the browsers and the relay's spans say."""

    streams: int
    profile: Profile
    results: dict[str, Result]
    firings: list[tuple[str, float | None, float, str | None]] = field(default_factory=list)
    cpu_others: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    """Per endpoint, CPU seconds of the simulator and of the browsers (this process) over its run
    (server start and warm-up included), and that run's wall time: what else the machine's cores
    were doing."""

    def stalled(self) -> list[int]:
        return [i for i in range(self.streams) if stalls(i, self.profile.every)]

    def memory_more(self) -> float | None:
        if "relay" not in self.results or "baseline" not in self.results:
            return None
        return self.results["relay"].memory_per_stream_kib - self.results["baseline"].memory_per_stream_kib

    def lateness(self) -> list[float]:
        return [fired - due for _, due, fired, _ in self.firings if due is not None]

    def pauses(self, kind: str) -> list[tuple[float, float, int]]:
        r = self.results.get(kind)
        return [tuple(x) for x in r.counted.get("pauses", [])] if r is not None else []  # type: ignore[misc]

    def lateness_outside_collector(self) -> list[float]:
        """Each firing's lateness less the collector's pauses within it: what the loop's other work
        and the watch itself took."""
        pauses = self.pauses("relay")
        return [outside(due, fired, pauses) for _, due, fired, _ in self.firings if due is not None]

    def collector(self, kind: str) -> tuple[int, float | None, float | None]:
        """The server's full collections during its run, and its longest pause, full and young (ms)."""
        pauses = self.pauses(kind)
        full = [b - a for a, b, g in pauses if g == 2]
        young = [b - a for a, b, g in pauses if g != 2]
        return len(full), max(full) * 1000 if full else None, max(young) * 1000 if young else None

    def fired_on(self) -> str:
        """The relay's firings by budget and by the stream's scenario (`healthy`, `stalled`; `unknown`
        where the firing ran outside its request's context)."""
        names = {"stall": "stalled", "answer": "healthy"}
        found = Counter(f"{budget} {names.get((scenario or '').partition('-')[0], 'unknown')}"
                        for budget, _, _, scenario in self.firings)
        return ", ".join(f"{key} {n}" for key, n in sorted(found.items())) or "none"

    def healthy_ended_by_budget(self) -> int:
        """Healthy streams the browser saw end with the relay's `upstream_timeout` (a budget)."""
        relay = self.results.get("relay")
        if relay is None:
            return 0
        return sum(1 for i, r in enumerate(relay.reads) if not stalls(i, self.profile.every) and timed_out(r))

    def stalls_caught(self) -> int:
        relay = self.results.get("relay")
        if relay is None:
            return 0
        return sum(1 for i in self.stalled() if timed_out(relay.reads[i]))

    def ramp(self) -> float:
        return self.profile.ramp(self.streams)

    def words(self) -> int:
        return self.profile.words(self.streams)


def one_terminal(read: Read) -> bool:
    """The stream ended with exactly one terminal event (`done` or `error`), its last."""
    ends = [e for e in read.events if e.event in ("done", "error")]
    return read.status == 200 and len(ends) == 1 and read.events[-1] is ends[0]


def endings(reads: list[Read]) -> str:
    """How the streams ended, counted: the terminal event and its code, or the HTTP failure."""
    found: Counter[str] = Counter()
    for read in reads:
        ends = [e for e in read.events if e.event in ("done", "error")]
        if read.error or read.status != 200:
            found[f"status {read.status}{' ' + read.error.split(':')[0] if read.error else ''}"] += 1
        elif len(ends) != 1:
            found[f"{len(ends)} terminal events"] += 1
        elif ends[0].event == "error":
            try:
                found[f"error {ends[0].json.get('code')}"] += 1
            except ValueError:
                found["error (unreadable)"] += 1
        else:
            found["done"] += 1
    return ", ".join(f"{key} {n}" for key, n in found.most_common())


def timed_out(read: Read) -> bool:
    ends = [e for e in read.events if e.event == "error"]
    try:
        return any(e.json.get("code") == "upstream_timeout" for e in ends)
    except ValueError:
        return False


def checker(kind: str, profile: Profile, n: int) -> Any:
    """Why browser i of `n`'s stream ended wrong, or None: a healthy one must be relayed whole; a
    stalled one (S deltas before its silence) ends on the baseline with S + 1 and `done`, on the
    relay with its S tokens and `error`, or, where the budget did not catch the stall before the
    silence ended, with S + 1 and `done` (a late budget, counted apart, not a stream ended wrong)."""
    words = profile.words(n)

    def check(i: int, read: Read) -> str | None:
        if not stalls(i, profile.every):
            return read.problem(words)
        before = profile.stall_after(i, n)
        if kind == "baseline":
            return read.problem(before + 1, "done")
        caught = read.problem(before, "error")
        return None if caught is None or read.problem(before + 1, "done") is None else caught
    return check


def sweep(upstream: str, simulator: int, counts: list[int], kinds: list[str], warmup: int, profile: Profile,
          pool: int) -> list[Point]:
    """Each stream count on each endpoint, against the simulator of process id `simulator`."""
    points = []
    for n in counts:
        results, others = {}, {}
        for kind in kinds:
            command = [sys.executable, str(Path(__file__).resolve()), "--serve", kind, upstream, str(n),
                       str(profile.idle), str(pool)]
            sim, me, began = relay_load.cpu_seconds(simulator), time.process_time(), time.monotonic()
            results[kind] = relay_load.run(
                kind, upstream, n, warmup, WARM_WORDS, profile.ramp(n), command=command,
                query=lambda i, n=n: f"?scenario={profile.scenario(i, n)}", check=checker(kind, profile, n),
                per_client=BROWSERS_PER_CLIENT)
            others[kind] = (relay_load.cpu_seconds(simulator) - sim, time.process_time() - me,
                            time.monotonic() - began)
            print(f"  {n} streams, {kind}: {results[kind].wall:.1f} s", file=sys.stderr, flush=True)
        firings = [tuple(f) for f in results["relay"].counted.pop("firings", [])] if "relay" in results else []
        points.append(Point(n, profile, results, firings, others))  # type: ignore[arg-type]
    return points


# -- the sync part (a child process: `--sync BASE THREADS ROUNDS IDLE RAMP EVERY WORDS`) ------------

def sync_child(base: str, threads: int, rounds: int, idle: float, ramp: float, every: int,
               words: int) -> dict[str, Any]:
    """`threads` threads arriving over `ramp` s, each reading `rounds` budgeted streams of the sync
    SDK one after another; stream (round r, thread i) is number r * threads + i, and stalls (after
    `SYNC_STALL_AFTER` deltas) as the async ones do; a healthy one plays `answer-{words}`."""
    import anthropic
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    from streamscope import AnthropicInstrumentor, Budgets, StreamTimeout

    fired_spans: Counter[str] = Counter()

    class Counted(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            for span in spans:
                assert isinstance(span, ReadableSpan)
                if (budget := (span.attributes or {}).get("streamscope.budget.fired")) is not None:
                    fired_spans[str(budget)] += 1
            return SpanExportResult.SUCCESS

    tracer = TracerProvider()
    tracer.add_span_processor(SimpleSpanProcessor(Counted()))
    AnthropicInstrumentor().instrument(tracer_provider=tracer, meter_provider=MeterProvider([InMemoryMetricReader()]),
                                       budgets=Budgets(first_token=FIRST_TOKEN, idle=idle, deadline=DEADLINE))
    firings = Firings().install()
    limits = httpx2.Limits(max_connections=threads + 10, max_keepalive_connections=threads + 10)
    healthy, stall = f"answer-{words}", f"stall-{SYNC_STALL_AFTER}"
    clients = {name: anthropic.Anthropic(base_url=f"{base}/s/{name}", api_key="load",
                                         http_client=anthropic.DefaultHttpxClient(limits=limits))
               for name in (healthy, stall)}
    total = threads * rounds
    outcomes: list[tuple[str, int, float | None]] = [("lost", 0, None)] * total

    def one(k: int) -> tuple[str, int, float | None]:
        texts, last = 0, None
        try:
            with clients[stall if stalls(k, every) else healthy].messages.stream(
                    model=MODEL, max_tokens=1024, messages=PROMPT) as stream:
                for _ in stream.text_stream:
                    texts, last = texts + 1, time.monotonic()
            return "done", texts, None
        except StreamTimeout as exc:
            caller = time.monotonic() - last - idle if exc.budget == "idle" and last is not None else None
            return exc.budget, texts, caller
        except Exception as exc:  # a lost stream: said, and the exit status says it too
            return type(exc).__name__, texts, None

    def worker(i: int) -> None:
        time.sleep(ramp * i / threads)
        for r in range(rounds):
            k = r * threads + i
            outcomes[k] = one(k)

    lags: list[float] = []
    stop = threading.Event()

    def ticker() -> None:
        while not stop.is_set():
            start = time.monotonic()
            time.sleep(TICK)
            lags.append(time.monotonic() - start - TICK)

    tick = threading.Thread(target=ticker, daemon=True)
    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    wall, cpu = time.monotonic(), time.process_time()
    tick.start()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    stop.set()
    tick.join()
    problems = []
    for k, (end, texts, _) in enumerate(outcomes):
        want = ("idle", SYNC_STALL_AFTER) if stalls(k, every) else ("done", words)
        if (end, texts) != want:
            problems.append(f"stream {k}: {end} after {texts} text deltas (expected {want[0]} after {want[1]})")
    return {
        "threads": threads, "rounds": rounds, "streams": total, "words": words, "ramp": ramp,
        "stalls": sum(stalls(k, every) for k in range(total)),
        "stalls_caught": sum(1 for k, o in enumerate(outcomes) if stalls(k, every) and o[0] == "idle"),
        "healthy_ended_by_budget": sum(1 for k, o in enumerate(outcomes) if not stalls(k, every)
                                       and o[0] in ("first_token", "idle", "deadline")),
        "problems": problems, "lateness": firings.lateness(),
        "caller": [o[2] for o in outcomes if o[2] is not None], "lags": lags, "wall": wall, "cpu": cpu,
        "spans_fired": dict(fired_spans),
    }


def run_sync(base: str, threads: int, rounds: int, profile: Profile) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--sync", base, str(threads), str(rounds),
               str(profile.idle), str(profile.ramp(threads)), str(profile.every), str(profile.words(threads))]
    with process(command) as (proc, lines):
        found: dict[str, Any] = json.loads(first_line(proc, lines, "SYNC ").partition(" ")[2])
    return found


# -- the report -------------------------------------------------------------------------------------

def cell(values: tuple[float | None, ...], digits: int = 0) -> str:
    return "/".join("-" if v is None else f"{v:.{digits}f}" for v in values)


def versions() -> str:
    names = ("streamscope", "anthropic", "httpx2", "fastapi", "starlette", "uvicorn", "opentelemetry-sdk")
    found = []
    for name in names:
        try:
            found.append(f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return f"Python {platform.python_version()}, " + ", ".join(found)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f} on {os.cpu_count()} CPUs"


def relayed(r: Result) -> int:
    """Text deltas the browsers got (token events)."""
    return sum(e.event == "token" for read in r.reads for e in read.events)


def cores(p: Point, kind: str) -> tuple[float, float, float]:
    """The CPU the server (over the N), the simulator and the browsers (over the endpoint's run)
    used, each as a share of one core."""
    r = p.results[kind]
    sim, browsers, wall = p.cpu_others.get(kind, (0.0, 0.0, 0.0))
    return r.cpu / r.wall if r.wall else 0.0, sim / wall if wall else 0.0, browsers / wall if wall else 0.0


def report(points: list[Point], sync: dict[str, Any] | None, profile: Profile, loads: tuple[str, str]) -> None:
    print(f"{versions()}; {loads[0]} at the start, {loads[1]} at the end")
    idle = profile.idle
    if points:
        print(f"concurrent relayed streams per endpoint, arriving {profile.rate:g} a second (over N / "
              f"{profile.rate:g} s, the ramp); healthy answers a text delta every {profile.gap:g} s from {FIRST:g} s, "
              f"lasting the ramp + {profile.hold:g} s; 1 in {profile.every} stalls mid-answer ({profile.silence:g} s "
              f"of silence, due while all are open, then one more delta); one uvicorn worker (h11, asyncio) per "
              f"endpoint and stream count, the simulator and the browsers in processes of their own; the relay's "
              f"budgets first_token {FIRST_TOKEN:g} s, idle {idle:g} s, deadline {DEADLINE:g} s")
        print(f"{'streams':>7}  {'endpoint':31}{'done':>11}{'1 terminal':>11}{'at once':>8}{'deltas':>7}{'ramp s':>7}"
              f"{'wall s':>7}{'KiB/stream':>11}{'CPU ms/stream':>14}{'deltas/s':>9}{'CPU % server/sim/browsers':>26}"
              f"{'loop lag p50/p99/max ms':>25}")
        for p in points:
            for kind, r in p.results.items():
                share = "/".join(f"{100 * c:.0f}" for c in cores(p, kind))
                print(f"{p.streams:>7}  {ENDPOINTS[kind]:31}{f'{r.done}/{r.streams}':>11}"
                      f"{sum(map(one_terminal, r.reads)):>11}{r.in_flight:>8}{p.words():>7}{p.ramp():>7.1f}"
                      f"{r.wall:>7.1f}{r.memory_per_stream_kib:>11.1f}{r.cpu / r.streams * 1000:>14.2f}"
                      f"{relayed(r) / r.wall if r.wall else 0.0:>9.0f}{share:>26}{cell(spread_ms(r.lags)):>25}")
        print("(deltas: a healthy answer's text deltas; deltas/s: all the browsers got, over the wall time; CPU %: of "
              "one core, the server's over the N, the simulator's and the browsers' over the endpoint's whole run)")
        print(f"\nthe relay's budgets (idle {idle:g} s) on the stalled streams; lateness = fired - due, ms (the module "
              f"docstring says how each is taken)")
        print(f"{'streams':>7}{'relay - baseline KiB/stream':>29}{'stalls caught':>15}{'spans ended by a budget':>25}"
              f"{'healthy ended by a budget':>27}{'lateness p50/p99/max ms':>25}{'outside the collector':>23}"
              f"{'loop lag p50/p99/max ms':>25}")
        for p in points:
            more = p.memory_more()
            relay = p.results.get("relay")
            fired = sum(relay.counted.get("fired", {}).values()) if relay else 0
            print(f"{p.streams:>7}{'-' if more is None else f'{more:+.1f}':>29}"
                  f"{f'{p.stalls_caught()}/{len(p.stalled())}':>15}{fired:>25}{p.healthy_ended_by_budget():>27}"
                  f"{cell(spread_ms(p.lateness()), 1):>25}{cell(spread_ms(p.lateness_outside_collector()), 1):>23}"
                  f"{cell(spread_ms(relay.lags if relay else [])):>25}")
        print("(outside the collector: each firing's lateness less the server's garbage-collector pauses within it, "
              "during which no callback runs)")
        print(f"\nthe server's garbage collector over its run: {'streams':>7}  {'endpoint':31}{'full collections':>17}"
              f"{'longest full ms':>16}{'longest young ms':>17}")
        for p in points:
            for kind in p.results:
                full, longest, young = p.collector(kind)
                print(f"{'':45}{p.streams:>7}  {ENDPOINTS[kind]:31}{full:>17}{cell((longest,)):>16}"
                      f"{cell((young,)):>17}")
        print("the relay's firings, by budget and stream: " + "; ".join(
            f"{p.streams}: {p.fired_on()}" for p in points if "relay" in p.results))
        print(f"(lateness is over the firings; a stall not caught ended when the provider's {profile.silence:g} s of "
              f"silence did, {profile.silence - idle:g} s past due; a healthy stream's first_token firing is retried "
              f"by the relay, unseen by the browser)")
    if sync is not None:
        print(f"\nsync: {sync['threads']} threads x {sync['rounds']} streams of the sync SDK (budgets on, the "
              f"watchdog; {sync['words']} deltas {profile.gap:g} s apart, the threads arriving over "
              f"{sync['ramp']:g} s), 1 in {profile.every} stalling: "
              f"{sync['streams'] - len(sync['problems'])}/{sync['streams']} as expected, stalls caught "
              f"{sync['stalls_caught']}/{sync['stalls']}, spans ended by a budget "
              f"{sum(sync['spans_fired'].values())}, healthy ended by a budget {sync['healthy_ended_by_budget']}, "
              f"wall {sync['wall']:.1f} s, CPU {sync['cpu'] / sync['streams'] * 1000:.2f} ms per stream")
        print(f"sync lateness p50/p99/max ms: watchdog fired - due {cell(spread_ms(sync['lateness']), 1)}; "
              f"StreamTimeout raised - last text - idle {cell(spread_ms(sync['caller']), 1)}; a 50 ms sleep's "
              f"lateness in a thread {cell(spread_ms(sync['lags']), 1)}")
    print()
    verdicts(points, sync)


def verdicts(points: list[Point], sync: dict[str, Any] | None) -> None:
    def said(ok: bool) -> str:
        return "met" if ok else "NOT met"

    if points:
        top = points[-1]
        more = top.memory_more()
        if more is not None:
            print(f"memory at {top.streams} streams, relay - baseline: {more:+.1f} KiB per stream "
                  f"(target <= {MEMORY_TARGET_KIB:.0f}): {said(more <= MEMORY_TARGET_KIB)}")
        if "relay" in top.results:
            _, p99, _ = spread_ms(top.lateness())
            _, lag99, lagmax = spread_ms(top.results["relay"].lags)
            missed = len(top.stalled()) - top.stalls_caught()
            _, own99, _ = spread_ms(top.lateness_outside_collector())
            ok = p99 is not None and p99 <= ASYNC_TARGET_MS and missed == 0
            print(f"budgets at {top.streams} streams, async: p99 {cell((p99,), 1)} ms late (target <= "
                  f"{ASYNC_TARGET_MS:.0f} ms){f', {missed} stalls not caught' if missed else ''}: {said(ok)}; "
                  f"the loop's lag p99 {cell((lag99,))} ms, max {cell((lagmax,))} ms; outside the collector's "
                  f"pauses p99 {cell((own99,), 1)} ms")
        terminal = all(sum(map(one_terminal, r.reads)) == r.streams for p in points for r in p.results.values())
        print(f"every stream one terminal event: {said(terminal)}")
        killed = sum(p.healthy_ended_by_budget() for p in points)
        print(f"no healthy stream ended by a budget (async): {said(killed == 0)}"
              f"{'' if killed == 0 else f' ({killed} were)'}")
    if sync is not None:
        _, p99, _ = spread_ms(sync["lateness"])
        print(f"budgets, {sync['threads']} sync threads: p99 {cell((p99,), 1)} ms late (target <= "
              f"{SYNC_TARGET_MS:.0f} ms): {said(p99 is not None and p99 <= SYNC_TARGET_MS)}; no healthy stream "
              f"ended by a budget: {said(sync['healthy_ended_by_budget'] == 0)}")
    for p in points:
        for kind, r in p.results.items():
            if r.problems:
                print(f"{p.streams} streams, {ENDPOINTS[kind]}: {len(r.problems)} ended otherwise than expected; "
                      f"endings of all its streams: {endings(r.reads)}; its spans' error types: "
                      f"{r.counted.get('errors') or 'none'}")
            for problem in r.problems[:5]:
                print(f"{p.streams} streams, {ENDPOINTS[kind]}: {problem}")
            if len(r.problems) > 5:
                print(f"{p.streams} streams, {ENDPOINTS[kind]}: ... {len(r.problems) - 5} more")
    for problem in (sync or {}).get("problems", [])[:5]:
        print(f"sync: {problem}")


def plot(points: list[Point], sync: dict[str, Any] | None, directory: Path) -> list[Path] | None:
    """The figures against the stream count, as PNGs in `directory`; None if matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    directory.mkdir(parents=True, exist_ok=True)
    xs = [p.streams for p in points]
    written = []
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for kind, style in (("baseline", "o-"), ("relay", "s-")):
        if all(kind in p.results for p in points):
            ax.plot(xs, [p.results[kind].memory_per_stream_kib for p in points], style, label=ENDPOINTS[kind])
    if all(p.memory_more() is not None for p in points):
        ax.plot(xs, [p.memory_more() for p in points], "^-", label="relay - baseline")
        ax.axhline(MEMORY_TARGET_KIB, color="grey", linestyle="--", label=f"target: +{MEMORY_TARGET_KIB:.0f} KiB")
    ax.set_xlabel("concurrent relayed streams, one uvicorn worker")
    ax.set_ylabel("server memory per stream, KiB")
    ax.set_xticks(xs)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Memory per relayed stream")
    fig.tight_layout()
    written.append(directory / "relay-scale-memory.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [3, 1.3]})
    ax = axes[0]
    if all("relay" in p.results for p in points):
        for i, (name, style) in enumerate((("budget lateness p50", "o-"), ("budget lateness p99", "s-"),
                                            ("budget lateness max", "^-"))):
            ax.plot(xs, [spread_ms(p.lateness())[i] or 0.0 for p in points], style, label=name)
        for i, (name, style) in enumerate((("loop lag p99", "s:"), ("loop lag max", "^:")), start=1):
            ax.plot(xs, [spread_ms(p.results["relay"].lags)[i] or 0.0 for p in points], style, color="grey",
                    alpha=0.8 if i == 1 else 0.5, label=name)
        for p in points:
            top = spread_ms(p.lateness())[2] or 0.0
            ax.annotate(f"{p.stalls_caught()}/{len(p.stalled())} caught", (p.streams, top),
                        textcoords="offset points", xytext=(0, 8), ha="center", fontsize=7)
    ax.axhline(ASYNC_TARGET_MS, color="red", linestyle="--", label=f"target: p99 {ASYNC_TARGET_MS:.0f} ms")
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(0, max(ax.get_ylim()[1], ASYNC_TARGET_MS) * 4)  # room for the counts above the points
    ax.set_xticks(xs)
    ax.set_xlabel("concurrent relayed streams, one uvicorn worker")
    ax.set_ylabel("ms late (fired - due)")
    ax.set_title("Async relay: budgets' lateness, the loop's lag beside")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax = axes[1]
    if sync is not None:
        labels = ["p50", "p99", "max"]
        width = 0.38
        late, lag = spread_ms(sync["lateness"]), spread_ms(sync["lags"])
        ax.bar([i - width / 2 for i in range(3)], [v or 0.0 for v in late], width, label="budget lateness")
        ax.bar([i + width / 2 for i in range(3)], [v or 0.0 for v in lag], width, color="grey", alpha=0.6,
               label="thread sleep lag")
        ax.set_xticks(range(3), labels)
        ax.axhline(SYNC_TARGET_MS, color="red", linestyle="--", label=f"target: p99 {SYNC_TARGET_MS:.0f} ms")
        ax.legend(fontsize=8)
    ax.set_title(f"Sync SDK, {sync['threads'] if sync else '-'} threads")
    ax.set_ylabel("ms")
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    written.append(directory / "relay-scale-lateness.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


def summary(points: list[Point], sync: dict[str, Any] | None) -> dict[str, Any]:
    rows = []
    for p in points:
        row: dict[str, Any] = {"streams": p.streams, "stalls": len(p.stalled()), "stalls_caught": p.stalls_caught(),
                               "healthy_ended_by_budget": p.healthy_ended_by_budget(), "fired_on": p.fired_on(),
                               "cpu_simulator_browsers_wall": p.cpu_others, "words": p.words(), "ramp": p.ramp(),
                               "lateness_ms": spread_ms(p.lateness()), "memory_more_kib": p.memory_more(),
                               "lateness_outside_collector_ms": spread_ms(p.lateness_outside_collector())}
        for kind, r in p.results.items():
            row[kind] = {"done": r.done, "one_terminal": sum(map(one_terminal, r.reads)), "at_once": r.in_flight,
                         "wall": r.wall, "kib_per_stream": r.memory_per_stream_kib,
                         "cpu_ms_per_stream": r.cpu / r.streams * 1000, "loop_lag_ms": spread_ms(r.lags),
                         "deltas_per_s": relayed(r) / r.wall if r.wall else 0.0,
                         "cpu_share_server_simulator_browsers": cores(p, kind),
                         "spans": r.counted.get("spans"), "fired": r.counted.get("fired"), "problems": r.problems,
                         "collector_full_longest_full_ms_longest_young_ms": p.collector(kind)}
        rows.append(row)
    found: dict[str, Any] = {"async": rows}
    if sync is not None:
        found["sync"] = {**{k: v for k, v in sync.items() if k not in ("lateness", "caller", "lags")},
                         "lateness_ms": spread_ms(sync["lateness"]), "caller_ms": spread_ms(sync["caller"]),
                         "thread_lag_ms": spread_ms(sync["lags"])}
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", help="comma-separated stream counts (default 100,500,1000,2000)")
    parser.add_argument("--quick", action="store_true",
                        help=f"a short run: {','.join(map(str, QUICK_COUNTS))} streams, 40 sync threads x 2")
    parser.add_argument("--warmup", type=int, default=10, help="streams read before the measured ones")
    parser.add_argument("--rate", type=float, default=RATE, metavar="R",
                        help="browsers arriving per second (N streams arrive over N / R s, the ramp)")
    parser.add_argument("--gap", type=float, default=GAP, metavar="S", help="seconds between a healthy answer's deltas")
    parser.add_argument("--hold", type=float, default=HOLD, metavar="S",
                        help="seconds all N streams stay open after the last arrives (answers last the ramp + this)")
    parser.add_argument("--idle", type=float, default=IDLE, help="the relay's and the sync streams' idle budget, s")
    parser.add_argument("--stall-every", type=int, default=10, metavar="K", help="1 stream in K stalls (0: none)")
    parser.add_argument("--threads", type=int, help="sync threads (default 200; --quick 40)")
    parser.add_argument("--rounds", type=int, help="streams each sync thread reads in turn (default 5; --quick 2)")
    parser.add_argument("--endpoints", default=",".join(ENDPOINTS), help=f"comma-separated, of {', '.join(ENDPOINTS)}")
    parser.add_argument("--parts", default="async,sync", help="comma-separated, of async, sync")
    parser.add_argument("--plots", type=Path, metavar="DIR",
                        help="where to write the PNGs (default docs/img for the default sweep, none otherwise)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pool", type=int, default=POOL, metavar="N",
                        help="the endpoints' upstream connections per pool (0: one pool for all)")
    parser.add_argument("--serve", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--sync", nargs=7, help=argparse.SUPPRESS)
    parser.add_argument("--simulate", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.simulate:
        gap, silence, words, most = args.simulate
        simulate(float(gap), float(silence), [int(w) for w in words.split(",") if w], int(most))
        return 0
    if args.serve:
        kind, upstream, n, idle, pool = args.serve
        relay_load.serve_app(scale_app(kind, upstream, int(n), float(idle), int(pool)))
        return 0
    if args.sync:
        base, threads, rounds, idle, ramp, every, words = args.sync
        found = sync_child(base, int(threads), int(rounds), float(idle), float(ramp), int(every), int(words))
        print("SYNC " + json.dumps(found), flush=True)
        return 0
    full = not args.quick and args.streams is None
    if args.streams and not all(n.strip().isdigit() and int(n) > 0 for n in args.streams.split(",") if n):
        parser.error(f"--streams takes stream counts separated by commas, such as 100,500; not {args.streams!r}")
    counts = [int(n) for n in args.streams.split(",") if n] if args.streams else list(
        QUICK_COUNTS if args.quick else COUNTS)
    threads = args.threads or (40 if args.quick else 200)
    rounds = args.rounds or (2 if args.quick else 5)
    kinds = [k for k in args.endpoints.split(",") if k]
    parts = {p for p in args.parts.split(",") if p}
    if unknown := set(kinds) - set(ENDPOINTS):
        parser.error(f"unknown endpoints {sorted(unknown)}; choose from {', '.join(ENDPOINTS)}")
    if parts - {"async", "sync"} or not parts:
        parser.error("--parts takes async, sync or both")
    if any(n < 1 for n in counts) or args.warmup < 1 or threads < 1 or rounds < 1:
        parser.error("stream counts, --warmup, --threads and --rounds take 1 or more")
    if args.rate <= 0 or args.gap <= 0 or args.hold < 0 or args.idle <= 0 or args.stall_every < 0:
        parser.error("--rate, --gap and --idle take a number > 0, --hold and --stall-every >= 0")
    profile = Profile(args.rate, args.gap, args.hold, args.idle, args.stall_every)
    if (longest := max(profile.seconds(n) for n in [*counts, threads])) >= DEADLINE:
        parser.error(f"the longest answer would last {longest:.0f} s, past the {DEADLINE:g} s deadline: fewer streams "
                     f"or a higher --rate")
    plots = args.plots if args.plots is not None else (HERE.parent / "docs" / "img" if full else None)
    started = load()
    points: list[Point] = []
    sync = None
    simulator = simulator_command(profile, counts if "async" in parts else [], threads if "sync" in parts else None)
    with process(simulator) as (proc, lines):
        base = first_line(proc, lines, "ANTHROPIC_BASE_URL=").partition("=")[2]
        if "async" in parts:
            points = sweep(f"{base}/s/{WARM}", proc.pid, counts, kinds, args.warmup, profile, args.pool)
        if "sync" in parts:
            sync = run_sync(base, threads, rounds, profile)
    if args.json:
        print(json.dumps(summary(points, sync), indent=2))
    else:
        report(points, sync, profile, (started, load()))
    said = sys.stderr if args.json else sys.stdout  # --json: stdout is the JSON alone
    if plots is None:
        print("plots: none for a short run (--plots DIR draws them)", file=said)
    elif not points:
        print("plots: none without the async part", file=said)
    elif (written := plot(points, sync, plots)) is None:
        print("plots: matplotlib is not installed: pip install 'streamscope[lab]' draws them", file=said)
    else:
        print("plots: " + ", ".join(str(p) for p in written), file=said)
    lost = any(r.done != r.streams for p in points for r in p.results.values()) or bool(sync and sync["problems"])
    print("STREAMS LOST OR FAILED" if lost else "all streams done", file=said)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
