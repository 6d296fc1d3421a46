"""Relay scale: 100 to 2,000 concurrent relayed streams on one uvicorn worker, and how late budgets fire.

What `relay_load.py` measures at one stream count, swept over several (`--streams`, default 100,
500, 1000, 2000), with a tenth of the streams stalling mid-answer; and the same budgets on the
sync SDK in 200 threads. Processes as in `relay_load.py` (its functions, imported): the provider is
`streamscope simulate`, in its own process; each endpoint is one uvicorn worker (h11, asyncio) of
its own, started fresh for each stream count; the browsers are this process, arriving evenly over
`--ramp` s and read with the browser's parsing rules.

The streams. Browser i asks for `?scenario=silent_stall` when i % `--stall-every` (10) is 9, else
nothing (`slow_answer`: 30 text deltas, first at 0.2 s, then every 0.1 s). An ASGI middleware in
front of each endpoint's app puts that name in a context variable, and the endpoint's SDK client
sends its request through a transport that swaps the scenario in the upstream path
(`/s/slow_answer/v1/messages` -> `/s/silent_stall/v1/messages`): the same in both endpoints, and
neither endpoint's code changes. `silent_stall` sends three words 50 ms apart, then nothing for
10 s, then one more word and the end. Both endpoints' SDK client has its connections raised to the
stream count, in one pool (`--pool N`: pools of N; the SDK's default holds 1,000 connections: beyond
that, streams would wait for a connection before their request is even sent). The browsers use one
HTTP client per 100 (httpcore2's pool looks at every connection at each request and response: one
client of 2,000 costs the browsers' process, on the same cores, O(n^2) CPU).

* `baseline`: `baseline_relay.py`, the article's hand-written relay (its own idle timeout, 30 s, is
  longer than the stall: a stalled stream there ends after 10 s with 4 tokens and `done`);
* `relay`: `streamscope.serve.relay()`, `Budgets(first_token=10, idle=--idle (2 s), deadline=60)`:
  a stalled stream should end with 3 tokens and one `error` event (`upstream_timeout`); one the
  budget did not catch before the silence ended gets its 4 and `done` (counted: stalls caught); a
  healthy one must end with 30 and `done`.

Per stream count and endpoint: streams done as expected, streams with exactly one terminal event
(last), the most open at once, memory per stream (peak resident set during the N minus before,
over N; relay minus baseline is the figure held to 8 KiB), CPU per stream, and the server loop's
lag: how late each 50 ms sleep of a task in the server woke, p50 / p99 / max, during the N.

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
reading task. The async watch confirms a stall with one more loop turn, and a check that ran more
than 50 ms late (`LATE_LOOP`, a busy loop) looks again only after as long again, so that what
arrived meanwhile is read before a healthy stream is called stalled: on a loop that lags, a firing
comes the loop's lag late and about as much again, and a stall that ends before those looks is not
caught at all (it is then counted, not measured: lateness is over the firings). That is what is
measured, with the loop's lag beside. Counted also from the spans: the spans a budget ended
(`streamscope.budget.fired`), and by budget and scenario from the firings; and from the browsers:
healthy streams ended by an `upstream_timeout` error (a budget). A first_token firing on a healthy
stream is retried by the relay, unseen by the browser: only the firings say it.

Sync (`--threads`, default 200): in a child process, 200 threads each read `--rounds` (5) streams
one after another through one sync `anthropic.Anthropic` client per scenario (pools of 200), with
the same budgets (the sync watchdog: one thread for every stream), a tenth of each round stalling;
lateness measured the same way (the watchdog's firing), and as the caller saw it (`StreamTimeout`
raised minus the last text delta it got minus the idle budget, as `precision.py` measures); beside
it, how late a 50 ms `time.sleep` in a thread of the same process woke (the GIL's lag).

Targets, said with each run, never the exit status: memory per stream at most 8 KiB more than the
baseline, budgets fired within 20 ms of due at the 99th percentile (async), 50 ms (sync threads),
every stream one terminal event, no healthy stream ended by a budget. Exit status 1 only if a
stream was lost or ended otherwise than expected, as `relay_load.py` (a healthy stream that ended
in an error, a budget's too, lost its answer; a stall the budget did not catch did not). Plots (matplotlib, the
`lab` extra) of the figures against the stream count go to `--plots` (by default docs/img for the
default sweep, none for a shorter one).

    python benchmarks/relay_scale.py [--streams 100,500,1000,2000 | --quick] [--threads 200 --rounds 5]
                                     [--idle 2] [--ramp 1.5] [--pool 0] [--parts async,sync] [--plots DIR] [--json]
"""

from __future__ import annotations

import argparse
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
from relay_load import ENDPOINTS, MEMORY_TARGET_KIB, SIMULATE, Read, Result, first_line, process

HERE = Path(__file__).resolve().parent
COUNTS = (100, 500, 1000, 2000)
QUICK_COUNTS = (50, 200)
HEALTHY, STALL = "slow_answer", "silent_stall"
WORDS = 30
"""Text deltas of a healthy answer (`slow_answer`)."""
STALL_WORDS = {"relay": 3, "baseline": 4}
"""Text deltas a stalled stream reaches the browser with: three before the stall (the relay's idle
budget ends it there), four where nothing ends it before the silence does (the baseline)."""
FIRST_TOKEN, IDLE, DEADLINE = 10.0, 2.0, 60.0
ASYNC_TARGET_MS, SYNC_TARGET_MS = 20.0, 50.0
TICK = 0.05
POOL = 0
"""The endpoints' upstream connections per pool by default (0: one pool, as one SDK client has)."""
BROWSERS_PER_CLIENT = 100
"""The browsers' connections per HTTP client (the module docstring says why)."""
MODEL = relay_load.MODEL
PROMPT = [{"role": "user", "content": "How do streams fail?"}]


def stalls(i: int, every: int) -> bool:
    return every > 0 and i % every == every - 1


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

    def __init__(self, app: Any, default: str = HEALTHY) -> None:
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


def scale_app(kind: str, upstream: str, streams: int, idle: float, pool: int) -> Any:
    """`relay_load.endpoint_app(kind)`, its SDK client's connections raised to `streams` (in pools of
    `pool`, 0: one pool) and its upstream's scenario the browser's; the relay's firings in `/stats`."""
    import anthropic

    size = (pool or streams) + 100
    limits = httpx2.Limits(max_connections=size, max_keepalive_connections=size)
    transport = Routed([httpx2.AsyncHTTPTransport(limits=limits) for _ in range(0, streams, pool or streams)], HEALTHY)
    client = anthropic.AsyncAnthropic(base_url=upstream, api_key="load",
                                      http_client=anthropic.DefaultAsyncHttpxClient(transport=transport))
    if kind == "baseline":
        return Scenarios(relay_load.endpoint_app(kind, upstream, client=client))
    from streamscope import Budgets

    firings = Firings().install()
    app = relay_load.endpoint_app(kind, upstream, client=client,
                                  budgets=Budgets(first_token=FIRST_TOKEN, idle=idle, deadline=DEADLINE),
                                  more_stats=lambda: {"firings": firings.seen})
    return Scenarios(app)


# -- the sweep (this process) ---------------------------------------------------------------------

@dataclass
class Point:
    """One stream count: both endpoints' runs, what the browsers and the relay's spans say."""

    streams: int
    stall_every: int
    results: dict[str, Result]
    firings: list[tuple[str, float | None, float, str | None]] = field(default_factory=list)
    cpu_others: dict[str, tuple[float, float]] = field(default_factory=dict)
    """Per endpoint, CPU seconds of the simulator and of the browsers (this process) over its run
    (server start and warm-up included): what else the machine's cores were doing."""

    def stalled(self) -> list[int]:
        return [i for i in range(self.streams) if stalls(i, self.stall_every)]

    def memory_more(self) -> float | None:
        if "relay" not in self.results or "baseline" not in self.results:
            return None
        return self.results["relay"].memory_per_stream_kib - self.results["baseline"].memory_per_stream_kib

    def lateness(self) -> list[float]:
        return [fired - due for _, due, fired, _ in self.firings if due is not None]

    def fired_on(self) -> str:
        """The relay's firings by budget and by the stream's scenario (`healthy`, `stalled`; `unknown`
        where the firing ran outside its request's context)."""
        names = {STALL: "stalled", HEALTHY: "healthy"}
        found = Counter(f"{budget} {names.get(scenario or '', 'unknown')}" for budget, _, _, scenario in self.firings)
        return ", ".join(f"{key} {n}" for key, n in sorted(found.items())) or "none"

    def healthy_ended_by_budget(self) -> int:
        """Healthy streams the browser saw end with the relay's `upstream_timeout` (a budget)."""
        relay = self.results.get("relay")
        if relay is None:
            return 0
        return sum(1 for i, r in enumerate(relay.reads) if not stalls(i, self.stall_every) and timed_out(r))

    def stalls_caught(self) -> int:
        relay = self.results.get("relay")
        if relay is None:
            return 0
        return sum(1 for i in self.stalled() if timed_out(relay.reads[i]))


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


def checker(kind: str, every: int) -> Any:
    """Why browser i's stream ended wrong, or None: a healthy one must be relayed whole; a stalled
    one on the relay ends with its 3 tokens and `error`, or, where the budget did not catch the
    stall before the silence ended, with all 4 and `done` (a late budget, counted apart, not a
    stream ended wrong)."""
    def check(i: int, read: Read) -> str | None:
        if not stalls(i, every):
            return read.problem(WORDS)
        if kind == "baseline":
            return read.problem(STALL_WORDS[kind], "done")
        caught = read.problem(STALL_WORDS[kind], "error")
        return None if caught is None or read.problem(STALL_WORDS["baseline"], "done") is None else caught
    return check


def sweep(upstream: str, simulator: int, counts: list[int], kinds: list[str], warmup: int, ramp: float,
          idle: float, every: int, pool: int) -> list[Point]:
    """Each stream count on each endpoint, against the simulator of process id `simulator`."""
    points = []
    for n in counts:
        results, others = {}, {}
        for kind in kinds:
            command = [sys.executable, str(Path(__file__).resolve()), "--serve", kind, upstream, str(n), str(idle),
                       str(pool)]
            sim, me = relay_load.cpu_seconds(simulator), time.process_time()
            results[kind] = relay_load.run(
                kind, upstream, n, warmup, WORDS, ramp, command=command,
                query=lambda i: f"?scenario={STALL}" if stalls(i, every) else "", check=checker(kind, every),
                per_client=BROWSERS_PER_CLIENT)
            others[kind] = (relay_load.cpu_seconds(simulator) - sim, time.process_time() - me)
            print(f"  {n} streams, {kind}: {results[kind].wall:.1f} s", file=sys.stderr, flush=True)
        firings = [tuple(f) for f in results["relay"].counted.pop("firings", [])] if "relay" in results else []
        points.append(Point(n, every, results, firings, others))  # type: ignore[arg-type]
    return points


# -- the sync part (a child process: `--sync BASE THREADS ROUNDS IDLE RAMP EVERY`) ------------------

def sync_child(base: str, threads: int, rounds: int, idle: float, ramp: float, every: int) -> dict[str, Any]:
    """`threads` threads, each reading `rounds` budgeted streams of the sync SDK one after another;
    stream (round r, thread i) is number r * threads + i, and stalls as the async ones do."""
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
    clients = {name: anthropic.Anthropic(base_url=f"{base}/s/{name}", api_key="load",
                                         http_client=anthropic.DefaultHttpxClient(limits=limits))
               for name in (HEALTHY, STALL)}
    total = threads * rounds
    outcomes: list[tuple[str, int, float | None]] = [("lost", 0, None)] * total

    def one(k: int) -> tuple[str, int, float | None]:
        texts, last = 0, None
        try:
            with clients[STALL if stalls(k, every) else HEALTHY].messages.stream(
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
        want = ("idle", 3) if stalls(k, every) else ("done", WORDS)
        if (end, texts) != want:
            problems.append(f"stream {k}: {end} after {texts} text deltas (expected {want[0]} after {want[1]})")
    return {
        "threads": threads, "rounds": rounds, "streams": total,
        "stalls": sum(stalls(k, every) for k in range(total)),
        "stalls_caught": sum(1 for k, o in enumerate(outcomes) if stalls(k, every) and o[0] == "idle"),
        "healthy_ended_by_budget": sum(1 for k, o in enumerate(outcomes) if not stalls(k, every)
                                       and o[0] in ("first_token", "idle", "deadline")),
        "problems": problems, "lateness": firings.lateness(),
        "caller": [o[2] for o in outcomes if o[2] is not None], "lags": lags, "wall": wall, "cpu": cpu,
        "spans_fired": dict(fired_spans),
    }


def run_sync(base: str, threads: int, rounds: int, idle: float, ramp: float, every: int) -> dict[str, Any]:
    command = [sys.executable, str(Path(__file__).resolve()), "--sync", base, str(threads), str(rounds), str(idle),
               str(ramp), str(every)]
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


def report(points: list[Point], sync: dict[str, Any] | None, ramp: float, idle: float, every: int,
           loads: tuple[str, str]) -> None:
    print(f"{versions()}; {loads[0]} at the start, {loads[1]} at the end")
    if points:
        print(f"concurrent relayed streams per endpoint, arriving over {ramp:g} s; 1 in {every} stalls mid-answer "
              f"({STALL}: 3 words, then 10 s of silence), the rest {HEALTHY} (30 words over ~3 s); one uvicorn "
              f"worker (h11, asyncio) per endpoint and stream count, the simulator and the browsers in processes "
              f"of their own; the relay's budgets first_token {FIRST_TOKEN:g} s, idle {idle:g} s, deadline "
              f"{DEADLINE:g} s")
        print(f"{'streams':>7}  {'endpoint':31}{'done':>11}{'1 terminal':>11}{'at once':>8}{'wall s':>7}"
              f"{'KiB/stream':>11}{'CPU ms/stream':>14}{'loop lag p50/p99/max ms':>25}{'CPU s sim/browsers':>20}")
        for p in points:
            for kind, r in p.results.items():
                sim, browsers = p.cpu_others.get(kind, (0.0, 0.0))
                print(f"{p.streams:>7}  {ENDPOINTS[kind]:31}{f'{r.done}/{r.streams}':>11}"
                      f"{sum(map(one_terminal, r.reads)):>11}{r.in_flight:>8}{r.wall:>7.1f}"
                      f"{r.memory_per_stream_kib:>11.1f}{r.cpu / r.streams * 1000:>14.2f}"
                      f"{cell(spread_ms(r.lags)):>25}{f'{sim:.1f}/{browsers:.1f}':>20}")
        print(f"\nthe relay's budgets (idle {idle:g} s) on the stalled streams; lateness = fired - due, ms (the module "
              f"docstring says how each is taken)")
        print(f"{'streams':>7}{'relay - baseline KiB/stream':>29}{'stalls caught':>15}{'spans ended by a budget':>25}"
              f"{'healthy ended by a budget':>27}{'lateness p50/p99/max ms':>25}{'loop lag p50/p99/max ms':>25}")
        for p in points:
            more = p.memory_more()
            relay = p.results.get("relay")
            fired = sum(relay.counted.get("fired", {}).values()) if relay else 0
            print(f"{p.streams:>7}{'-' if more is None else f'{more:+.1f}':>29}"
                  f"{f'{p.stalls_caught()}/{len(p.stalled())}':>15}{fired:>25}{p.healthy_ended_by_budget():>27}"
                  f"{cell(spread_ms(p.lateness()), 1):>25}{cell(spread_ms(relay.lags if relay else [])):>25}")
        print("the relay's firings, by budget and stream: " + "; ".join(
            f"{p.streams}: {p.fired_on()}" for p in points if "relay" in p.results))
        print(f"(lateness is over the firings; a stall not caught ended when the provider's 10 s of silence did, "
              f"{10 - idle:g} s past due; a healthy stream's first_token firing is retried by the relay, unseen by "
              f"the browser)")
    if sync is not None:
        print(f"\nsync: {sync['threads']} threads x {sync['rounds']} streams of the sync SDK (budgets on, the "
              f"watchdog), 1 in {every} stalling: {sync['streams'] - len(sync['problems'])}/{sync['streams']} as "
              f"expected, stalls caught {sync['stalls_caught']}/{sync['stalls']}, spans ended by a budget "
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
            ok = p99 is not None and p99 <= ASYNC_TARGET_MS and missed == 0
            print(f"budgets at {top.streams} streams, async: p99 {cell((p99,), 1)} ms late (target <= "
                  f"{ASYNC_TARGET_MS:.0f} ms){f', {missed} stalls not caught' if missed else ''}: {said(ok)}; "
                  f"the loop's lag p99 {cell((lag99,))} ms, max {cell((lagmax,))} ms")
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
                               "cpu_simulator_browsers": p.cpu_others,
                               "lateness_ms": spread_ms(p.lateness()), "memory_more_kib": p.memory_more()}
        for kind, r in p.results.items():
            row[kind] = {"done": r.done, "one_terminal": sum(map(one_terminal, r.reads)), "at_once": r.in_flight,
                         "wall": r.wall, "kib_per_stream": r.memory_per_stream_kib,
                         "cpu_ms_per_stream": r.cpu / r.streams * 1000, "loop_lag_ms": spread_ms(r.lags),
                         "spans": r.counted.get("spans"), "fired": r.counted.get("fired"), "problems": r.problems}
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
    parser.add_argument("--ramp", type=float, default=1.5, metavar="S", help="seconds over which the streams arrive")
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
    parser.add_argument("--sync", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        kind, upstream, n, idle, pool = args.serve
        relay_load.serve_app(scale_app(kind, upstream, int(n), float(idle), int(pool)))
        return 0
    if args.sync:
        base, threads, rounds, idle, ramp, every = args.sync
        found = sync_child(base, int(threads), int(rounds), float(idle), float(ramp), int(every))
        print("SYNC " + json.dumps(found), flush=True)
        return 0
    full = not args.quick and args.streams is None
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
    if any(n < 1 for n in counts) or args.warmup < 1 or args.ramp < 0 or threads < 1 or rounds < 1:
        parser.error("stream counts, --warmup, --threads and --rounds take 1 or more, --ramp seconds >= 0")
    plots = args.plots if args.plots is not None else (HERE.parent / "docs" / "img" if full else None)
    started = load()
    points: list[Point] = []
    sync = None
    with process(SIMULATE) as (proc, lines):
        base = first_line(proc, lines, "ANTHROPIC_BASE_URL=").partition("=")[2]
        if "async" in parts:
            points = sweep(f"{base}/s/{HEALTHY}", proc.pid, counts, kinds, args.warmup, args.ramp, args.idle,
                       args.stall_every, args.pool)
        if "sync" in parts:
            sync = run_sync(base, threads, rounds, args.idle, args.ramp, args.stall_every)
    if args.json:
        print(json.dumps(summary(points, sync), indent=2))
    else:
        report(points, sync, args.ramp, args.idle, args.stall_every, (started, load()))
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
