"""500 concurrent relayed streams on one uvicorn worker, with budgets: none lost, each with exactly
one terminal event, and the server's memory per stream measured.

Three processes, as in production: the provider is `streamscope simulate --time-scale 3` (its
`slow_answer`: 30 words over ~9 s, so all 500 streams overlap); the relay is a server of its own (`SERVER`, one
uvicorn worker: `AnthropicInstrumentor().instrument(budgets=Budgets(first_token=10, idle=5,
deadline=60))`, spans counted by an exporter that keeps none, metrics in memory, and `GET /relay`
relaying `AsyncAnthropic(base_url=<the scenario's URL>).messages.create(..., stream=True)`); the
browsers are 500 concurrent streaming GETs from this process on one httpx2 client, arriving over
`RAMP` seconds, each read with the browser's parsing rules (served.py's `SseParser`). Every
stream: 200, the 30 words as token events, exactly one terminal event, `done`, last, class
`complete`; the server counts 510 spans ended `complete` and 510 relayed streams `done` (the
warm-up's 10 included); all 500 were open at one moment.

Memory is the server's resident set (/proc/<pid>/status): VmRSS after a warm-up of 10 streams,
then the peak during the 500 (VmHWM, reset after the warm-up, and VmRSS sampled every 50 ms).
`memory per stream` is (peak - before) / 500: a measurement, printed, not a bound (docs/performance.md
has the figures; benchmarks/relay_load.py measures the same beside a hand-written relay). Deadlines
are generous (a loaded 2-core machine) and only bound waiting; nothing asserts wall-clock time.

The three processes need about 13 s of CPU for the 500 streams, so the worker's event loop runs
behind; where other work takes the rest of the machine, seconds behind. A worker loop more than
the idle budget (5 s) behind can end a stream its provider finished in time as an idle stall
(`error`, `upstream_timeout`, class `stalled_mid_stream`): the failure then lists those spans,
with the simulator's outcome for each (`completed`: it had sent the whole stream).
"""

from __future__ import annotations

import asyncio
import math
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx2
from served import Sse, SseParser

STREAMS = 500
WARMUP = 10
SCENARIO = "slow_answer"
WORDS = 30
"""Text deltas in `slow_answer`, each one token event."""
RAMP = 1.5
"""Seconds over which the 500 browsers arrive, evenly (every stream lasts ~9 s or more, so all
500 are open at once: checked). Not all in the same millisecond: on a loaded machine that burst
holds the worker's event loop seconds behind (see the module's docstring)."""
WAIT = 60.0
"""Seconds: only how long to wait before calling something hung."""
SCALE = 3
"""The simulator's time scale: `slow_answer` over ~9 s, so that all 500 streams still overlap when
the machine's load holds the last arrivals seconds behind the first (at ~3 s, 489 of 500 once did)."""
SIMULATE = [sys.executable, "-m", "streamscope.tools.cli", "simulate", "--port", "0", "--time-scale", str(SCALE)]

SERVER = r'''
import socket
import sys
from collections import Counter

import anthropic
import uvicorn
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from streamscope import AnthropicInstrumentor, Budgets
from streamscope.serve import relay


class Counted(SpanExporter):
    """Counts the ended spans by class and keeps none (memory is measured here) but the attributes
    of the first few that did not end `complete`, to show what happened to them."""

    def __init__(self):
        self.classes = Counter()
        self.odd = []

    def export(self, spans):
        for span in spans:
            attrs = dict(span.attributes or {})
            self.classes[str(attrs.get("streamscope.class"))] += 1
            if attrs.get("streamscope.class") != "complete" and len(self.odd) < 5:
                self.odd.append({k: v for k, v in attrs.items() if isinstance(v, (str, int, float, bool))})
        return SpanExportResult.SUCCESS


spans = Counted()
tracer = TracerProvider()
tracer.add_span_processor(SimpleSpanProcessor(spans))
reader = InMemoryMetricReader()
AnthropicInstrumentor().instrument(tracer_provider=tracer, meter_provider=MeterProvider(metric_readers=[reader]),
                                   budgets=Budgets(first_token=10, idle=5, deadline=60))
client = anthropic.AsyncAnthropic(base_url=sys.argv[1], api_key="load")
USER = [{"role": "user", "content": "How do streams fail?"}]


async def relayed(request):
    return await relay(request, lambda: client.messages.create(model="claude-sim-1", max_tokens=1024,
                                                               messages=USER, stream=True))


async def stats(request):
    """The ended spans by class, and streamscope.relay.streams by outcome."""
    outcomes = Counter()
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == "streamscope.relay.streams":
                    for point in metric.data.data_points:
                        outcomes[str(point.attributes.get("streamscope.relay.outcome"))] += point.value
    return JSONResponse({"spans": dict(spans.classes), "relayed": dict(outcomes), "odd": spans.odd})


app = Starlette(routes=[Route("/relay", relayed), Route("/stats", stats)])
sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
sock.bind(("127.0.0.1", 0))
sock.listen(4096)  # before the URL is out: a connection made at once waits in the backlog
print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
uvicorn.Server(uvicorn.Config(app, http="h11", ws="none", loop="asyncio", lifespan="off", log_config=None,
                              log_level="warning", access_log=False, timeout_graceful_shutdown=2,
                              backlog=4096)).run(sockets=[sock])
'''


def _drain(stream: IO[str], lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))


@contextmanager
def process(command: list[str]) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str]]]:
    """`command` running, its stdout read line by line (so a chatty one never blocks); stopped at the end."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None and proc.stderr is not None
    threading.Thread(target=_drain, args=(proc.stdout, lines), daemon=True).start()
    errors: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_drain, args=(proc.stderr, errors), daemon=True).start()
    try:
        yield proc, lines
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=WAIT)


def first_line(proc: subprocess.Popen[str], lines: queue.Queue[str], starting: str) -> str:
    end = time.monotonic() + WAIT
    while time.monotonic() < end:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            assert proc.poll() is None, f"exited early with {proc.returncode}"
            continue
        if line.startswith(starting):
            return line
    raise AssertionError(f"no line starting {starting!r} within {WAIT} s")


@dataclass
class Provider:
    """The simulator: the base URL that plays `SCENARIO` every time, and the line it prints per
    finished request (`req_sim_<n> <scenario>: <outcome>`)."""

    url: str
    lines: queue.Queue[str]

    def outcomes(self) -> dict[str, str]:
        """Each finished request's outcome, by request id (`completed`: it sent the whole stream)."""
        found = {}
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return found
            request_id, _, rest = line.partition(" ")
            found[request_id] = rest.rpartition(": ")[2]


@contextmanager
def simulator() -> Iterator[Provider]:
    """`streamscope simulate --port 0 --time-scale 3`."""
    with process(SIMULATE) as (proc, lines):
        base = first_line(proc, lines, "ANTHROPIC_BASE_URL=").partition("=")[2]
        yield Provider(f"{base}/s/{SCENARIO}", lines)


@contextmanager
def relay_server(upstream: str) -> Iterator[tuple[str, int]]:
    """`SERVER` relaying `upstream`: its URL and process id."""
    with process([sys.executable, "-c", SERVER, upstream]) as (proc, lines):
        yield first_line(proc, lines, "http://"), proc.pid


def status_kib(pid: int, field: str) -> int:
    """A field of /proc/<pid>/status in KiB (VmRSS, VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} for process {pid}")


def reset_peak(pid: int) -> bool:
    """Reset the process's VmHWM to its VmRSS now (Linux's clear_refs 5); False where not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


class Sampler:
    """The largest VmRSS seen, sampled every 50 ms while in the `with` block."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, status_kib(self.pid, "VmRSS"))
            self._stop.wait(0.05)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=WAIT)
        self.peak = max(self.peak, status_kib(self.pid, "VmRSS"))


@dataclass
class Read:
    status: int
    content_type: str
    events: list[Sse]
    error: str | None = None
    started: float = 0.0
    ended: float = 0.0
    """When the request went out and when its body ended (monotonic)."""

    @property
    def tokens(self) -> int:
        return sum(e.event == "token" for e in self.events)

    @property
    def terminals(self) -> list[Sse]:
        return [e for e in self.events if e.event in ("done", "error")]


async def read_one(client: httpx2.AsyncClient, url: str, delay: float) -> Read:
    """One browser, `delay` s from now: a streaming GET read to its end with the browser's parsing rules."""
    await asyncio.sleep(delay)
    parser = SseParser()
    started = time.monotonic()
    try:
        async with client.stream("GET", url) as response:
            async for text in response.aiter_text():
                parser.feed(text)
            return Read(response.status_code, response.headers.get("content-type", ""), parser.events, None,
                        started, time.monotonic())
    except Exception as exc:  # a stream lost on the way: counted and shown, never raised past the others
        return Read(0, "", parser.events, f"{type(exc).__name__}: {exc}", started, time.monotonic())


async def read_many(url: str, n: int, ramp: float = 0.0) -> tuple[list[Read], float]:
    """`n` browsers on one client (its connection limits raised to `n`), arriving evenly over
    `ramp` seconds; the wall time from the first request to the last body's end."""
    limits = httpx2.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx2.AsyncClient(limits=limits, timeout=httpx2.Timeout(WAIT)) as client:
        start = time.monotonic()
        reads = await asyncio.gather(*(read_one(client, url, ramp * i / n) for i in range(n)))
        return list(reads), time.monotonic() - start


def most_in_flight(reads: list[Read]) -> int:
    """The most streams open at one moment (from each request's start to its body's end)."""
    edges = sorted([(r.started, 1) for r in reads] + [(r.ended, -1) for r in reads], key=lambda e: (e[0], e[1]))
    count = most = 0
    for _, step in edges:
        count += step
        most = max(most, count)
    return most


def problems(reads: list[Read]) -> list[str]:
    """What went wrong, per stream: not 200 and an event stream, no tokens, not exactly one
    terminal event `done` last that counts the tokens sent, budgets fired (class not complete)."""
    found = []
    for i, read in enumerate(reads):
        ends = read.terminals
        if read.error or read.status != 200 or not read.content_type.startswith("text/event-stream"):
            found.append(f"stream {i}: status {read.status} {read.content_type!r} {read.error or ''}")
        elif read.tokens != WORDS or [e.event for e in ends] != ["done"] or read.events[-1] is not ends[0]:
            found.append(f"stream {i}: {read.tokens} tokens, terminal events {[(e.event, e.data) for e in ends]}")
        elif ends[0].json["chunks"] != WORDS or ends[0].json["class"] != "complete":
            found.append(f"stream {i}: done says {ends[0].data}")
    return found


def stats(base: str, expected: int) -> dict[str, Any]:
    """The server's ended spans by class and relayed streams by outcome, once `expected` have ended."""
    end = time.monotonic() + WAIT
    while True:
        got = httpx2.get(f"{base}/stats", timeout=WAIT).json()
        if sum(got["spans"].values()) >= expected and sum(got["relayed"].values()) >= expected:
            return got
        if time.monotonic() > end:
            return got
        time.sleep(0.1)


def test_500_concurrent_relayed_streams_with_budgets_none_lost() -> None:
    with simulator() as provider, relay_server(provider.url) as (base, pid):
        warm, _ = asyncio.run(read_many(f"{base}/relay", WARMUP))
        assert problems(warm) == []
        before = status_kib(pid, "VmRSS")
        peak_reset = reset_peak(pid)
        with Sampler(pid) as sampler:
            reads, wall = asyncio.run(read_many(f"{base}/relay", STREAMS, RAMP))
        peak = max(sampler.peak, status_kib(pid, "VmHWM") if peak_reset else 0)
        ended = stats(base, WARMUP + STREAMS)
        time.sleep(0.5)  # the simulator's line for each request
        played = provider.outcomes()
    odd = [{**span, "the provider's outcome": played.get(str(span.get("anthropic.request.id")))}
           for span in ended.pop("odd")]

    found = problems(reads)
    assert found == [], (f"{len(found)} of {STREAMS} streams went wrong: {found[:10]}; the server's count: {ended}; "
                         f"spans that did not end complete: {odd}")
    done = sum(r.terminals[0].event == "done" for r in reads)
    assert done == STREAMS, f"{STREAMS - done} streams lost"
    assert most_in_flight(reads) == STREAMS, f"at most {most_in_flight(reads)} streams were open at once"
    assert ended == {"spans": {"complete": WARMUP + STREAMS}, "relayed": {"done": WARMUP + STREAMS}}, ended
    per_stream = (peak - before) / STREAMS
    print(f"\n{STREAMS} concurrent relayed streams ({SCENARIO}, budgets on), one uvicorn worker: {done} done in "
          f"{wall:.1f} s; server RSS {before / 1024:.1f} MiB before, peak {peak / 1024:.1f} MiB "
          f"({'VmHWM' if peak_reset else 'VmRSS sampled every 50 ms'})")
    print(f"memory per stream: {per_stream:.1f} KiB")
    assert math.isfinite(per_stream) and per_stream > 0, "the server's memory during the streams was not measured"
