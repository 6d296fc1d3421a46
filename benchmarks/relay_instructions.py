"""Instructions per relayed event (callgrind): streamscope's `relay()` beside a hand-written relay.

One provider stream relayed to a browser as Server-Sent Events, end to end in one process: the
provider's stream replayed into the real anthropic SDK (`client.messages.stream(...)`), the
endpoint's code, the SSE framing, and the ASGI `send` of each event. The configurations:

* `baseline`: the hand-written relay of `baseline_relay.py` (an article's endpoint, as written:
  `resilient_stream` with `asyncio.timeout` per chunk over `stream.text_stream`, its `sse()`
  framing, a Starlette `StreamingResponse`), on the plain SDK (`open_telemetry=False`), no
  tracer provider anywhere;
* `relay`: streamscope's `relay(request, lambda: client.messages.stream(...))` (its own SSE
  response), with `AnthropicInstrumentor().instrument(tracer_provider=provider)`,
  `provider` an OpenTelemetry SDK `TracerProvider` exporting to memory;
* `relay-budgets`: the same with `budgets=Budgets(first_token=60, idle=30, deadline=600)`;
* `relay-plain` (only when asked for, `--configs`): the relay on the plain SDK, no instrumentor
  and no tracer provider: what the relay itself adds, apart from what observing the call adds;
* `relay-create` (only when asked for): `relay` over `client.messages.create(..., stream=True)`,
  the raw events (one per text delta, where `messages.stream()` yields a raw event and a `text`
  event per delta, both of which go through the relay).
* `relay-resume` (only when asked for): `relay` with `resume=MemoryBuffer()`: the generation runs
  as a task of its own and the connection follows it (what a resumable stream costs per event).

Both are FastAPI apps (the article's framework), `POST /v1/chat/stream` with a JSON body, called
directly as ASGI apps in the child, no sockets: `receive` hands over the request once and then
waits forever (the browser never leaves), `send` keeps what it is given. The provider's stream is
`instructions.sse_chunks(N)` (message_start, a text block of N text deltas, message_delta,
message_stop), one server-sent event per body chunk, from an `httpx2.AsyncBaseTransport` handed to
`anthropic.AsyncAnthropic(http_client=httpx2.AsyncClient(transport=...))`. The relay's heartbeat is
set to 600 s: keep-alives are per second of silence, not per event, and the measured stream
never waits for one (nothing here sleeps).

Each child checks what `send` got, with the browser's parsing rules (tests/serve/served.py's
`SseParser`): status 200, N `token` events, each `{"text": "tok "}`, and one terminal event, `done`,
last; for the instrumented relays, one span per stream with its N content events. So no figure is
of a relay that sent nothing.

Measured as `instructions.py` measures (its functions, imported): each configuration in a fresh
interpreter under `valgrind --tool=callgrind` (address-space randomisation off, PYTHONHASHSEED=0),
a warm-up stream, `random.seed(0)`, `gc.collect()`, then `os.getppid()` (callgrind zeroes its
counts), the measured request, `os.getpgrp()` (callgrind dumps them). Instructions per relayed
event are the slope between a `--small` and a `--large` stream, so what is paid once per request
cancels; the type attribute cache's misses (instructions under `find_name_in_mro`, an accident of
the process layout) are counted apart. The target: `relay` and `relay-budgets` at most 1.1x the
article's, said with each run as met or NOT met; the exit status is 0 whatever the figures.

`--profile` adds, per configuration, a child under cProfile natively (not under valgrind) reading
the large stream: the Python functions that dominate, by their own time, with their calls per
relayed event (exact, where the time is only indicative under the profiler).

    python benchmarks/relay_instructions.py [--small 500] [--large 5500] [--configs baseline,relay,relay-budgets,...]
                                            [--repeats 2] [--layouts 1] [--jobs 2] [--profile]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import os
import platform
import pstats
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anthropic
import httpx2
from fastapi import FastAPI, Request

import instructions
from baseline_relay import ChatRequest
from instructions import DUMP, PAD, WARMUP, ZERO, Run, slopes, sse_chunks, type_cache_misses

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "serve"))
from served import SseParser  # noqa: E402  (the tests' parser: the browser's rules)

CONFIGS = {  # key: label
    "baseline": "hand-written relay (article)",
    "relay": "streamscope relay()",
    "relay-budgets": "streamscope relay(), budgets",
    "relay-plain": "relay(), SDK not instrumented",
    "relay-create": "relay() over create(stream=True)",
    "relay-resume": "relay(), resume=MemoryBuffer()",
}
DEFAULT_CONFIGS = ("baseline", "relay", "relay-budgets")
TARGET = 1.1
"""At most this many times the article's instructions per relayed event (`relay`, `relay-budgets`);
reported with each run, never the exit status (a figure is not a failure of the benchmark)."""
TARGET_CONFIGS = ("relay", "relay-budgets")
"""`relay-plain`, `relay-create` and `relay-resume` are measured when asked for (`--configs`)."""
MODEL = "claude-bench"
PROMPT = {"prompt": "go"}
HEARTBEAT = 600.0
"""The relay's keep-alive interval here: longer than any measured stream takes under valgrind."""
PATH = "/v1/chat/stream"
TOKEN = {"text": "tok "}
"""What each relayed token event carries (`instructions.sse_chunks` sends "tok " per delta)."""


# -- the workload (in the child) ------------------------------------------------------------

class _Body(httpx2.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


class AsyncReplayTransport(httpx2.AsyncBaseTransport):
    """Answers the Messages API's path with a 200 `text/event-stream` whose body yields `chunks`
    one by one (the async counterpart of `instructions.ReplayTransport`)."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages", request.url
        return httpx2.Response(200, headers={"content-type": "text/event-stream", "request-id": "req_bench"},
                               stream=_Body(self.chunks), request=request)


def relay_app(client: anthropic.AsyncAnthropic, create: bool = False, resume: bool = False) -> Any:
    """streamscope's relay behind the same route and body as the article's endpoint, over
    `client.messages.stream(...)` (as the article), or `create(..., stream=True)` (`create`);
    `resume`: with a `MemoryBuffer` (the generation a task of its own, the connection following it)."""
    from streamscope.serve import MemoryBuffer, relay

    buffer = MemoryBuffer() if resume else None

    app = FastAPI()

    @app.post(PATH)
    async def chat_stream(request: Request, body: ChatRequest) -> Any:
        params: dict[str, Any] = {"model": MODEL, "max_tokens": 1024,
                                  "messages": [{"role": "user", "content": body.prompt}]}
        if create:
            return await relay(request, lambda: client.messages.create(**params, stream=True), heartbeat=HEARTBEAT)
        return await relay(request, lambda: client.messages.stream(**params), heartbeat=HEARTBEAT, resume=buffer)

    return app


def scope() -> dict[str, Any]:
    """The HTTP scope uvicorn makes for `POST /v1/chat/stream` with a JSON body."""
    body = json.dumps(PROMPT).encode()
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 50000), "scheme": "http", "method": "POST",
            "root_path": "", "path": PATH, "raw_path": PATH.encode(), "query_string": b"", "state": {},
            "headers": [(b"host", b"127.0.0.1:8000"), (b"accept", b"text/event-stream"),
                        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}


async def call(app: Any, transport: AsyncReplayTransport, chunks: list[bytes]) -> tuple[int, list[bytes]]:
    """One request to `app`, its provider stream `chunks`: the status and the body's chunks sent."""
    transport.chunks = chunks
    request = json.dumps(PROMPT).encode()
    given = False
    status = 0
    sent: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": request, "more_body": False}
        await asyncio.get_running_loop().create_future()  # the browser stays: never a disconnect
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            sent.append(message.get("body", b""))

    await app(scope(), receive, send)
    return status, sent


def check_body(status: int, sent: list[bytes], deltas: int) -> list[str]:
    """What is wrong with a relayed response of `deltas` text deltas, read as a browser reads it."""
    if status != 200:
        return [f"status {status}, expected 200"]
    parser = SseParser()
    parser.feed(b"".join(sent).decode())
    events = parser.events
    tokens = [e for e in events if e.event == "token"]
    ends = [e for e in events if e.event in ("done", "error")]
    problems = []
    if len(tokens) != deltas or any(e.json != TOKEN for e in tokens):
        problems.append(f"{len(tokens)} token events, expected {deltas} of {TOKEN}")
    if [e.event for e in ends] != ["done"] or events[-1] is not ends[0]:
        problems.append(f"terminal events {[e.event for e in ends]}, expected one `done`, last")
    elif ends[0].json.get("chunks") != deltas:
        problems.append(f"`done` says {ends[0].json.get('chunks')} chunks, expected {deltas}")
    return problems


def setup(config: str) -> tuple[Any, AsyncReplayTransport, Any]:
    """The app for `config`, its provider's transport, and its span exporter (None: no tracing)."""
    transport = AsyncReplayTransport()
    client = anthropic.AsyncAnthropic(api_key="x", base_url="http://bench.invalid", max_retries=0,
                                      http_client=httpx2.AsyncClient(transport=transport), open_telemetry=False)
    if config == "baseline":
        import baseline_relay

        return baseline_relay.make_app(client, MODEL), transport, None
    if config == "relay-plain":
        return relay_app(client), transport, None
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import streamscope

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    budgets = streamscope.Budgets(first_token=60, idle=30, deadline=600) if config == "relay-budgets" else None
    streamscope.AnthropicInstrumentor().instrument(tracer_provider=provider, budgets=budgets)
    return relay_app(client, create=config == "relay-create", resume=config == "relay-resume"), transport, exporter


def check_spans(config: str, exporter: Any, deltas: int) -> list[str]:
    """The spans of the warm-up and the measured stream (the relays), or no tracer at all (baseline)."""
    if exporter is None:
        from opentelemetry import trace

        provider = type(trace.get_tracer_provider()).__name__
        return [] if provider == "ProxyTracerProvider" else [f"a global tracer provider is set: {provider}"]
    found = [(s.instrumentation_scope.name, (s.attributes or {}).get("streamscope.content_events"))
             for s in exporter.get_finished_spans()]
    expected = [("streamscope", WARMUP), ("streamscope", deltas)]
    return [] if found == expected else [f"spans {found}, expected {expected}"]


def child(config: str, deltas: int, profile: str | None = None) -> None:
    """One configuration: a warm-up request, then the measured one of `deltas` text deltas (under
    valgrind: between `os.getppid()` and `os.getpgrp()`); prints what was relayed, as JSON."""
    app, transport, exporter = setup(config)
    warmup, measured = sse_chunks(WARMUP), sse_chunks(deltas)

    async def run() -> list[tuple[int, list[bytes]]]:
        first = await call(app, transport, warmup)
        random.seed(0)  # request ids, span ids, jitter: the same every run
        gc.collect()  # the collector's counts from here on are the same whatever start-up allocated
        profiler = cProfile.Profile() if profile else None
        os.getppid()  # ZERO: callgrind counts from here
        if profiler is not None:
            profiler.enable()
        got = await call(app, transport, measured)
        if profiler is not None:
            profiler.disable()
        os.getpgrp()  # DUMP: to here
        if profiler is not None and profile is not None:
            profiler.dump_stats(profile)
        return [first, got]

    (warm_status, warm_sent), (status, sent) = asyncio.run(run())
    problems = [f"warm-up: {p}" for p in check_body(warm_status, warm_sent, WARMUP)]
    problems += check_body(status, sent, deltas) + check_spans(config, exporter, deltas)
    print(json.dumps({"events": deltas, "bytes": sum(map(len, sent)), "problems": problems}))


# -- measuring (in the parent) --------------------------------------------------------------

def measure(config: str, deltas: int, layout: int, repeat: int) -> Run:
    """Instructions of one child's measured request, under callgrind."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out, log = Path(tmp) / "callgrind.out", Path(tmp) / "valgrind.log"
        interpreter = [sys.executable] + (["-c", instructions._BOOT, str(layout * PAD)] if layout else [])
        command = ["setarch", platform.machine(), "-R",
                   "valgrind", "--tool=callgrind", f"--zero-before={ZERO}", f"--dump-before={DUMP}",
                   f"--callgrind-out-file={out}", f"--log-file={log}",
                   *interpreter, __file__, "--child", config, "--deltas", str(deltas)]
        done = subprocess.run(command, capture_output=True, text=True, cwd=HERE,
                              env={**os.environ, "PYTHONHASHSEED": "0"})
        if done.returncode != 0:
            raise RuntimeError(f"{CONFIGS[config]}, {deltas} deltas: the child failed ({done.returncode})\n"
                               f"{done.stderr[-3000:]}{log.read_text()[-1000:] if log.exists() else ''}")
        report = json.loads(done.stdout.strip().splitlines()[-1])
        if report["problems"]:
            raise RuntimeError(f"{CONFIGS[config]}, {deltas} deltas: " + "; ".join(report["problems"]))
        dump = out.with_name(out.name + ".1")
        dumped = dump.read_text()
        assert f"Trigger: --dump-before={DUMP}" in dumped, "no dump at the end of the measured request"
        assert not out.with_name(out.name + ".2").exists(), f"{DUMP} was called elsewhere too"
        match = re.search(r"^summary:\s+(\d+)", dumped, flags=re.M)
        assert match, "no callgrind summary"
        misses = type_cache_misses(dump)
    run = Run(config, deltas, layout, repeat, int(match.group(1)), time.monotonic() - start, misses)
    print(f"({CONFIGS[config]}, {deltas} deltas, layout {layout}, run {repeat + 1}: {run.instructions:,} "
          f"instructions, {run.seconds:.0f} s; {deltas} token events and `done` relayed, {report['bytes']:,} bytes)",
          file=sys.stderr, flush=True)
    return run


def report(per_event: dict[str, list[list[float]]], misses: dict[str, list[list[float]]], small: int,
           large: int) -> None:
    """Instructions per relayed event by configuration and repeat, then relay - baseline."""
    repeats, layouts = len(next(iter(per_event.values()))), len(next(iter(per_event.values()))[0])
    med = {c: [statistics.median(v) for v in by_repeat] for c, by_repeat in per_event.items()}
    over = f", median over {layouts} layouts" if layouts > 1 else ""
    print(f"instructions per relayed event (valgrind callgrind; provider stream replayed into the anthropic SDK's "
          f"async client, messages.stream() unless the label says otherwise, relayed as SSE through the ASGI app "
          f"called in-process; slope between {small} "
          f"and {large} text deltas{over}; without the type cache's misses, counted apart below)")
    head = "".join(f"{f'run {i + 1}':>12}" for i in range(repeats))
    print(f"{'':44}{head}")
    for config in (c for c in CONFIGS if c in med):
        print(f"{CONFIGS[config]:44}" + "".join(f"{v:>12,.0f}" for v in med[config]))
    if "baseline" in med:
        for config in (c for c in CONFIGS if c != "baseline" and c in med):
            diff = [a - b for a, b in zip(med[config], med["baseline"])]
            ratio = [a / b for a, b in zip(med[config], med["baseline"])]
            print(f"{CONFIGS[config] + ' - baseline':44}" + "".join(f"{d:>+12,.0f}" for d in diff)
                  + "   (" + ", ".join(f"{r:.2f}x" for r in ratio) + " the baseline's)")
        for config in (c for c in TARGET_CONFIGS if c in med):
            ratio = [a / b for a, b in zip(med[config], med["baseline"])]
            met = all(r <= TARGET for r in ratio)
            print(f"{CONFIGS[config]} / {CONFIGS['baseline']}: " + " ".join(f"{r:.2f}x" for r in ratio)
                  + f" (target <= {TARGET}x): {'met' if met else 'NOT met'}")
    if repeats > 1:
        worst = max(abs(v[0] - b) / min(v[0], b) for v in med.values() for b in v[1:])
        print(f"repeats: instructions per event within {worst:.3%} of run 1's")
    print("\ntype attribute cache misses, instructions per event (in find_name_in_mro; an accident of the "
          "process layout)")
    for config, by_repeat in misses.items():
        print(f"{CONFIGS[config]:44}" + "".join(f"{statistics.median(v):>12,.0f}" for v in by_repeat))


PROFILE_TOP = 12


def profiled(config: str, deltas: int) -> dict[tuple[str, int, str], tuple[int, float]]:
    """One child under cProfile (natively) reading `deltas` deltas: per function, its calls and own time."""
    with tempfile.TemporaryDirectory() as tmp:
        stats_file = Path(tmp) / "profile.out"
        done = subprocess.run([sys.executable, __file__, "--child", config, "--deltas", str(deltas),
                               "--profile-to", str(stats_file)], capture_output=True, text=True, cwd=HERE,
                              env={**os.environ, "PYTHONHASHSEED": "0"})
        if done.returncode != 0 or json.loads(done.stdout.strip().splitlines()[-1])["problems"]:
            raise RuntimeError(f"{CONFIGS[config]}: the profiled child failed\n{done.stdout}{done.stderr[-3000:]}")
        stats: Any = pstats.Stats(str(stats_file))
    return {key: (ncalls, tottime) for key, (_, ncalls, tottime, _, _) in stats.stats.items()}


def group(path: str) -> str:
    """Where a profiled function lives: its package (streamscope's by subpackage), the standard
    library's module, the baseline's file, or `C` (built-ins and C methods)."""
    if path == "~":
        return "C built-ins and methods"
    if "/instrumentation/streamscope/" in path:
        parts = path.split("/instrumentation/streamscope/", 1)[1].split("/")
        return "streamscope." + (parts[0] if len(parts) > 1 else parts[0].removesuffix(".py"))
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/")[0].removesuffix(".py")
    if path.endswith("baseline_relay.py"):
        return "baseline_relay (the article's code)"
    if path.endswith("relay_instructions.py"):
        return "the benchmark's ASGI receive/send"
    if "/lib/python3" in path:
        rest = path.split("/lib/python3", 1)[1].split("/", 1)[1]
        return "stdlib " + rest.split("/")[0].removesuffix(".py")
    return path


def profile(configs: list[str], deltas: int) -> None:
    """What dominates: per configuration, a child under cProfile reading `deltas` deltas; calls
    per relayed event by package (exact), and the functions with the most time of their own."""
    found = {config: profiled(config, deltas) for config in configs}
    print(f"\nwhat dominates: calls per relayed event by where the function lives (cProfile, natively, one "
          f"request of {deltas} text deltas; the counts are exact, the profiler's times only indicative)")
    groups: dict[str, dict[str, float]] = {}
    for config, stats in found.items():
        for (path, _, _), (ncalls, _) in stats.items():
            groups.setdefault(group(path), {}).setdefault(config, 0.0)
            groups[group(path)][config] += ncalls / deltas
    print(f"{'':40}" + "".join(f"{CONFIGS[c][:24]:>26}" for c in configs))
    order = sorted(groups, key=lambda g: -max(groups[g].values()))
    for name in order:
        cells = groups[name]
        if max(cells.values()) >= 0.5:
            print(f"{name:40}" + "".join(f"{cells.get(c, 0.0):>26.1f}" for c in configs))
    print(f"{'all':40}" + "".join(f"{sum(g.get(c, 0.0) for g in groups.values()):>26.1f}" for c in configs))
    for config, stats in found.items():
        total = sum(t for _, t in stats.values())
        print(f"\n{CONFIGS[config]}: the {PROFILE_TOP} functions with the most own time "
              f"({total / deltas * 1e6:.1f} µs per event under the profiler)")
        print(f"{'calls/event':>11} {'own %':>6}  function")
        rows = sorted(stats.items(), key=lambda kv: kv[1][1], reverse=True)
        for (path, line, name), (ncalls, tottime) in rows[:PROFILE_TOP]:
            where = f" ({_short(path)}:{line})" if line else ""
            print(f"{ncalls / deltas:>11.2f} {tottime / total:>6.1%}  {name}{where}")


def _short(path: str) -> str:
    """A source path from its package on (site-packages/x/y.py -> x/y.py)."""
    for marker in ("site-packages/", "instrumentation/", "benchmarks/", "lib/python3"):
        if marker in path:
            tail = path.split(marker, 1)[1]
            return tail.split("/", 1)[1] if marker == "lib/python3" else tail
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=500, help="text deltas in the smaller stream")
    parser.add_argument("--large", type=int, default=5500, help="text deltas in the larger stream")
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                        help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--repeats", type=int, default=2, help="times each measurement is made")
    parser.add_argument("--layouts", type=int, default=1, help="process layouts each measurement is made in")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="children under valgrind at once")
    parser.add_argument("--profile", action="store_true",
                        help="also profile each configuration (cProfile, natively): what dominates per event")
    parser.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--deltas", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile-to", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.deltas, args.profile_to)
        return 0
    configs = [c for c in CONFIGS if c in {c for c in args.configs.split(",") if c}]
    if unknown := {c for c in args.configs.split(",") if c} - set(CONFIGS):
        parser.error(f"unknown configurations {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
    if not configs:
        parser.error(f"no configuration chosen; choose from {', '.join(CONFIGS)}")
    if not 0 < args.small < args.large:
        parser.error("--small and --large take 0 < small < large")
    if shutil.which("valgrind") is None or shutil.which("setarch") is None:
        print("valgrind (or setarch) is not installed: no instruction counts")
    else:
        jobs = [(c, n, k, i) for i in range(args.repeats) for k in range(args.layouts) for c in configs
                for n in (args.large, args.small)]
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
            runs = list(pool.map(lambda job: measure(*job), jobs))
        print(f"({len(runs)} children under callgrind, {args.jobs} at a time: {time.monotonic() - start:.0f} s)",
              file=sys.stderr, flush=True)
        report(slopes(runs, configs, args.small, args.large, args.repeats, args.layouts),
               slopes(runs, configs, args.small, args.large, args.repeats, args.layouts, lambda r: r.misses),
               args.small, args.large)
    if args.profile:
        profile(configs, args.large)
    return 0


if __name__ == "__main__":
    sys.exit(main())
