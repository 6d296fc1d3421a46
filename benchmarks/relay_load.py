"""Relay load: N concurrent relayed streams on one uvicorn worker, streamscope's relay beside a hand-written one.

Three processes per endpoint, as in production: the provider is `streamscope simulate` (its
`--scenario`, by default `slow_answer`: 30 words over ~3 s, so all the streams overlap); the
endpoint is a server of its own, one uvicorn worker (h11, asyncio), started fresh for each
endpoint; the browsers are N concurrent streaming requests from this process (one httpx2 client,
its connection limits raised to N), arriving evenly over `--ramp` seconds (default 1.5; 0: all in
the same instant), each read with the browser's parsing rules (tests/serve/served.py's
`SseParser`). Both endpoints are FastAPI apps, `POST /v1/chat/stream`
with the same JSON body, on `client.messages.stream(...)` of one `AsyncAnthropic` client:

* `baseline`: the hand-written relay of `baseline_relay.py` (an article's endpoint), plain SDK,
  no telemetry;
* `relay`: streamscope's `relay()`, with `AnthropicInstrumentor().instrument(budgets=Budgets(
  first_token=10, idle=5, deadline=60))`, its spans counted by an exporter that keeps none and its
  metrics in an in-memory reader (memory is measured here).

Per endpoint, after a warm-up of `--warmup` streams: streams done (status 200, the scenario's text
as token events, exactly one terminal event, `done`, last), the most streams open at one moment
(`at once`: N when they all overlapped), the wall time of the N, the server's
memory per stream (its peak resident set during the N minus its resident set before them, over
N: VmHWM reset after the warm-up, and VmRSS sampled every 50 ms, from /proc/<pid>/status), its
CPU per stream (utime + stime from /proc/<pid>/stat, over the N), and how late its event loop ran
(a 50 ms sleep in the server, its worst lateness during the N). Exit status 1 if a stream was lost
or ended otherwise than `done`.

    python benchmarks/relay_load.py [--streams 500] [--warmup 10] [--ramp 1.5] [--scenario slow_answer --words 30]
                                    [--endpoints baseline,relay]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx2
from fastapi import FastAPI, Request

from baseline_relay import ChatRequest, make_app

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "serve"))
from served import Sse, SseParser  # noqa: E402  (the tests' parser: the browser's rules)

ENDPOINTS = {"baseline": "hand-written relay (article)", "relay": "streamscope relay(), budgets"}
PATH = "/v1/chat/stream"
MODEL = "claude-sim-1"
SIMULATE = [sys.executable, "-m", "streamscope.tools.cli", "simulate", "--port", "0"]
WAIT = 120.0
"""Seconds: only how long to wait before calling something hung."""
TICK = 0.05
MEMORY_TARGET_KIB = 8.0
"""At most this much more memory per stream than the article's endpoint, under 500 streams; said
with each run, never the exit status."""


# -- the endpoint (its own process: `--serve ENDPOINT UPSTREAM`) -------------------------------

def endpoint_app(kind: str, upstream: str, *, client: Any = None, budgets: Any = None,
                 more_stats: Callable[[], dict[str, Any]] | None = None) -> Any:
    """The endpoint's app, relaying `upstream`, with `GET /stats` (what it counted, its loop's lateness).
    `client`: the `AsyncAnthropic` to call (default: one on `upstream`); `budgets`: the relay's
    (default first_token 10 s, idle 5 s, deadline 60 s); `more_stats()`: more for `/stats` to say."""
    import anthropic

    if client is None:
        client = anthropic.AsyncAnthropic(base_url=upstream, api_key="load")
    classes: Counter[str] = Counter()
    fired: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    reader: Any = None
    if kind == "baseline":
        app = make_app(client, MODEL)
    else:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

        from streamscope import AnthropicInstrumentor, Budgets
        from streamscope.serve import relay

        class Counted(SpanExporter):
            def export(self, spans: Any) -> SpanExportResult:
                for span in spans:
                    attributes = span.attributes or {}
                    classes[str(attributes.get("streamscope.class"))] += 1
                    if (budget := attributes.get("streamscope.budget.fired")) is not None:
                        fired[str(budget)] += 1
                    if (error := attributes.get("error.type")) is not None:
                        errors[str(error)] += 1
                return SpanExportResult.SUCCESS

        tracer = TracerProvider()
        tracer.add_span_processor(SimpleSpanProcessor(Counted()))
        reader = InMemoryMetricReader()
        meter = MeterProvider(metric_readers=[reader])
        AnthropicInstrumentor().instrument(tracer_provider=tracer, meter_provider=meter,
                                           budgets=budgets or Budgets(first_token=10, idle=5, deadline=60))
        app = FastAPI()

        @app.post(PATH)
        async def chat_stream(request: Request, body: ChatRequest) -> Any:
            return await relay(request, lambda: client.messages.stream(
                model=MODEL, max_tokens=1024, messages=[{"role": "user", "content": body.prompt}]))

    lateness: list[float] = []

    async def ticker() -> None:
        while True:
            start = time.monotonic()
            await asyncio.sleep(TICK)
            lateness.append(time.monotonic() - start - TICK)

    ticking: list[asyncio.Task[None]] = []

    @app.get("/stats")
    async def stats() -> dict[str, Any]:
        """Spans by class, by the budget that ended them and by error type, relayed streams by outcome (the relay);
        the loop's worst lateness since the last call, and each of its 50 ms sleeps' lateness (`lags`;
        the ticker starts at the first call)."""
        if not ticking:
            ticking.append(asyncio.create_task(ticker()))
        lags, lateness[:] = list(lateness), []
        late = max(lags, default=0.0)
        outcomes: Counter[str] = Counter()
        data = reader.get_metrics_data() if reader is not None else None
        for rm in data.resource_metrics if data else []:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == "streamscope.relay.streams":
                        for point in metric.data.data_points:
                            outcomes[str(point.attributes.get("streamscope.relay.outcome"))] += point.value
        return {"spans": dict(classes), "fired": dict(fired), "errors": dict(errors), "relayed": dict(outcomes),
                "late": late, "lags": lags,
                **(more_stats() if more_stats is not None else {})}

    return app


def serve(kind: str, upstream: str) -> None:
    """The endpoint on one uvicorn worker, on a free port of 127.0.0.1 (its URL printed first)."""
    serve_app(endpoint_app(kind, upstream))


def serve_app(app: Any) -> None:
    """`app` on one uvicorn worker (h11, asyncio), on a free port of 127.0.0.1 (its URL printed first)."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)  # before the URL is out: a connection made at once waits in the backlog
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    uvicorn.Server(uvicorn.Config(app, http="h11", ws="none", loop="asyncio", lifespan="off", log_config=None,
                                  log_level="warning", access_log=False, timeout_graceful_shutdown=2,
                                  backlog=4096)).run(sockets=[sock])


# -- the browsers and the measurements (this process) -------------------------------------------

def _drain(stream: IO[str], lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))


@contextmanager
def process(command: list[str]) -> Iterator[tuple[subprocess.Popen[str], queue.Queue[str]]]:
    """`command` running, its stdout read line by line (a chatty one never blocks); stopped at the end."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=HERE)
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    threading.Thread(target=_drain, args=(proc.stdout, lines), daemon=True).start()
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
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args} exited early with {proc.returncode}") from None
            continue
        if line.startswith(starting):
            return line
    raise RuntimeError(f"{proc.args}: no line starting {starting!r} within {WAIT} s")


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for process {pid}")


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (/proc/<pid>/stat), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reset_peak(pid: int) -> bool:
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
    except OSError:
        return False
    return True


class Sampler:
    """The largest VmRSS seen, sampled every 50 ms while in the `with` block."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0
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
    events: list[Sse]
    error: str | None = None
    started: float = 0.0
    ended: float = 0.0

    def problem(self, words: int, end: str = "done") -> str | None:
        """Why this stream is not one answer relayed whole (`words` text deltas, then one terminal
        event, `end`): None if it is."""
        if self.error or self.status != 200:
            return f"status {self.status} {self.error or ''}".strip()
        tokens = sum(e.event == "token" for e in self.events)
        ends = [e for e in self.events if e.event in ("done", "error")]
        if tokens != words or [e.event for e in ends] != [end] or self.events[-1] is not ends[0]:
            return f"{tokens} tokens, terminal events {[(e.event, e.data) for e in ends]}"
        return None


async def read_one(client: httpx2.AsyncClient, url: str, delay: float) -> Read:
    await asyncio.sleep(delay)
    parser = SseParser()
    started = time.monotonic()
    try:
        async with client.stream("POST", url, json={"prompt": "How do streams fail?"}) as response:
            async for text in response.aiter_text():
                parser.feed(text)
            return Read(response.status_code, parser.events, None, started, time.monotonic())
    except Exception as exc:
        return Read(0, parser.events, f"{type(exc).__name__}: {exc}", started, time.monotonic())


async def read_many(url: str | Callable[[int], str], n: int, ramp: float = 0.0,
                    per_client: int | None = None) -> tuple[list[Read], float]:
    """`n` browsers on one client (or on clients of `per_client` each), arriving evenly over `ramp` s;
    the wall time, first request to last end. `url`: every browser's, or browser i's as `url(i)`."""
    size = min(n, per_client or n)
    limits = httpx2.Limits(max_connections=size, max_keepalive_connections=size)
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(httpx2.AsyncClient(limits=limits, timeout=httpx2.Timeout(WAIT)))
                   for _ in range(0, n, size)]
        start = time.monotonic()
        reads = await asyncio.gather(*(read_one(clients[i // size], url if isinstance(url, str) else url(i),
                                                ramp * i / n) for i in range(n)))
        return list(reads), time.monotonic() - start


def most_in_flight(reads: list[Read]) -> int:
    """The most streams open at one moment (from each request's start to its body's end)."""
    edges = sorted([(r.started, 1) for r in reads] + [(r.ended, -1) for r in reads], key=lambda e: (e[0], e[1]))
    count = most = 0
    for _, step in edges:
        count += step
        most = max(most, count)
    return most


@dataclass
class Result:
    endpoint: str
    streams: int
    done: int
    problems: list[str]
    in_flight: int
    """The most streams open at one moment."""
    wall: float
    rss_before_kib: int
    peak_kib: int
    cpu: float
    late: float
    counted: dict[str, Any]
    lags: list[float] = field(default_factory=list)
    """Each 50 ms sleep's lateness in the server's loop during the N, s."""
    reads: list[Read] = field(default_factory=list, repr=False)
    """What each browser read, in order."""

    @property
    def memory_per_stream_kib(self) -> float:
        return (self.peak_kib - self.rss_before_kib) / self.streams


def run(kind: str, upstream: str, streams: int, warmup: int, words: int, ramp: float, *,
        command: list[str] | None = None, query: Callable[[int], str] | None = None,
        check: Callable[[int, Read], str | None] | None = None, per_client: int | None = None) -> Result:
    """`streams` browsers on endpoint `kind` after `warmup`. `command`: the server to start (default:
    this file's `--serve kind upstream`); `query(i)`: what browser i appends to the URL (the warm-up
    appends nothing); `check(i, read)`: why browser i's stream is wrong, or None (default: not one
    answer of `words` text deltas relayed whole, `Read.problem`); `per_client`: browsers per HTTP
    client (default: all on one)."""
    command = command or [sys.executable, str(Path(__file__).resolve()), "--serve", kind, upstream]
    with process(command) as (proc, lines):
        base = first_line(proc, lines, "http://")
        url = base + PATH
        warm, _ = asyncio.run(read_many(url, warmup))
        if bad := [p for r in warm if (p := r.problem(words))]:
            raise RuntimeError(f"{ENDPOINTS[kind]}: the warm-up went wrong: {bad[:3]}")
        httpx2.get(f"{base}/stats", timeout=WAIT)  # the loop's lateness counts from here
        before, cpu = status_kib(proc.pid, "VmRSS"), cpu_seconds(proc.pid)
        peak_reset = reset_peak(proc.pid)
        with Sampler(proc.pid) as sampler:
            reads, wall = asyncio.run(read_many(url if query is None else (lambda i: url + query(i)), streams, ramp,
                                                per_client))
        cpu = cpu_seconds(proc.pid) - cpu
        peak = max(sampler.peak, status_kib(proc.pid, "VmHWM") if peak_reset else 0)
        end = time.monotonic() + 10
        late, lags = 0.0, []
        while True:  # the spans and the relay's counts of the last streams may land just after them
            counted = httpx2.get(f"{base}/stats", timeout=WAIT).json()
            late, lags = max(late, counted.pop("late")), lags + counted.pop("lags", [])  # each call starts anew
            if kind == "baseline" or sum(counted["relayed"].values()) >= warmup + streams or time.monotonic() > end:
                break
            time.sleep(0.1)
    problems = [f"stream {i}: {p}" for i, r in enumerate(reads)
                if (p := r.problem(words) if check is None else check(i, r))]
    return Result(kind, streams, streams - len(problems), problems, most_in_flight(reads), wall, before, peak, cpu,
                  late, counted, lags, reads)


def report(results: list[Result], scenario: str, words: int, ramp: float) -> None:
    n = results[0].streams
    print(f"{n} concurrent relayed streams per endpoint ({scenario}: {words} text deltas over ~3 s, from `streamscope "
          f"simulate`), arriving over {ramp:g} s; one uvicorn worker (h11, asyncio) per endpoint, in its own process; "
          f"the browsers in another")
    print(f"{'endpoint':32}{'done':>10}{'at once':>8}{'wall s':>8}{'RSS before MiB':>16}{'peak MiB':>10}"
          f"{'KiB/stream':>12}{'CPU ms/stream':>15}{'loop late max ms':>18}")
    for r in results:
        print(f"{ENDPOINTS[r.endpoint]:32}{f'{r.done}/{r.streams}':>10}{r.in_flight:>8}{r.wall:>8.1f}"
              f"{r.rss_before_kib / 1024:>16.1f}{r.peak_kib / 1024:>10.1f}{r.memory_per_stream_kib:>12.1f}"
              f"{r.cpu / r.streams * 1000:>15.2f}{r.late * 1000:>18.0f}")
    by = {r.endpoint: r for r in results}
    if "baseline" in by and "relay" in by:
        b, s = by["baseline"], by["relay"]
        more = s.memory_per_stream_kib - b.memory_per_stream_kib
        print(f"relay - baseline: memory {more:+.1f} KiB per stream, "
              f"CPU {(s.cpu - b.cpu) / s.streams * 1000:+.2f} ms per stream")
        few = "" if s.streams >= 500 else ", fewer streams: indicative"
        print(f"memory, relay - baseline (target <= {MEMORY_TARGET_KIB:.0f} KiB per stream under 500 streams): "
              f"{'met' if more <= MEMORY_TARGET_KIB else 'NOT met'} (what it is made of: relay_memory.py{few})")
    for r in results:
        if r.counted.get("spans") or r.counted.get("relayed"):
            print(f"{ENDPOINTS[r.endpoint]}: spans ended by class {r.counted['spans']}, "
                  f"streamscope.relay.streams by outcome {r.counted['relayed']} (warm-up included)")
        for problem in r.problems[:10]:
            print(f"{ENDPOINTS[r.endpoint]}: {problem}")
        if len(r.problems) > 10:
            print(f"{ENDPOINTS[r.endpoint]}: ... {len(r.problems) - 10} more")
    print("all streams done" if all(r.done == r.streams for r in results) else "STREAMS LOST OR FAILED")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=500, help="concurrent streams per endpoint")
    parser.add_argument("--warmup", type=int, default=10, help="streams read before the measured ones")
    parser.add_argument("--scenario", default="slow_answer", help="the simulator's scenario (a plain text answer)")
    parser.add_argument("--words", type=int, default=30, help="text deltas the scenario sends")
    parser.add_argument("--ramp", type=float, default=1.5, metavar="S",
                        help="seconds over which the streams arrive, evenly (0: all at once)")
    parser.add_argument("--endpoints", default=",".join(ENDPOINTS), help=f"comma-separated, of {', '.join(ENDPOINTS)}")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", nargs=2, metavar=("ENDPOINT", "UPSTREAM"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(*args.serve)
        return 0
    kinds = [k for k in args.endpoints.split(",") if k]
    if unknown := set(kinds) - set(ENDPOINTS):
        parser.error(f"unknown endpoints {sorted(unknown)}; choose from {', '.join(ENDPOINTS)}")
    if args.streams < 1 or args.warmup < 1 or args.ramp < 0:
        parser.error("--streams and --warmup take 1 or more, --ramp seconds >= 0")
    with process(SIMULATE) as (proc, lines):
        upstream = first_line(proc, lines, "ANTHROPIC_BASE_URL=").partition("=")[2] + f"/s/{args.scenario}"
        results = [run(kind, upstream, args.streams, args.warmup, args.words, args.ramp) for kind in kinds]
    if args.json:
        print(json.dumps([{**{k: v for k, v in r.__dict__.items() if k not in ("lags", "reads")},
                            "memory_per_stream_kib": r.memory_per_stream_kib} for r in results], indent=2))
    else:
        report(results, args.scenario, args.words, args.ramp)
    return 0 if all(r.done == r.streams for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
