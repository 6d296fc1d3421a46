"""What resume and the fleet breaker ask of Redis: commands, round trips, bytes, memory, CPU, per event and stream.

Counted by Redis itself. Every process is real: a `redis-server` this script starts on a free
loopback port (tests/redis_server.py; a cluster of three masters for `cluster`), the project's
simulator (`streamscope.simulator.Simulator`, as benchmarks/_server.py runs it) playing answers of
`--short` and `--long` text deltas `--interval` seconds apart, and app workers, each a uvicorn
worker of its own whose route is `relay(request, lambda: client.messages.stream(...),
resume=RedisBuffer(...))` over the real anthropic SDK. `--streams` browsers (httpx2, read with the
browser's parsing rules) run at once per measurement. Before each measurement `CONFIG RESETSTAT`;
after it `INFO stats` (total_net_input_bytes, total_net_output_bytes, total_reads_processed: the
socket reads of the clients' requests, one per round trip for pipelines that fit a read),
`INFO commandstats` (calls and usec per command), `INFO cpu` (used_cpu_user + used_cpu_sys,
before and after, Redis's own CPU per second with no client taken off) and `MEMORY USAGE` of
streamscope's keys (each measurement of streams starts on an empty Redis: `FLUSHALL`). What this
script's own INFO and CONFIG cost is measured on an empty window and taken off; a connection's
set-up (`HELLO`, `CLIENT SETINFO`) is counted apart.

Per event is the slope between the two stream lengths (per-stream costs cancel); per stream is what
is left at zero events. The configurations:

* `owner`: each browser reads its whole answer from the worker that runs it (the owner's writer:
  the stream, the lease, the state), `--repeats` times per length;
* `idempotent`: the same with an `Idempotency-Key` header (the claim, held as long as the answer);
* `follower`: each browser leaves after `--leave` events and, `--pause` seconds later, reconnects
  with `Last-Event-ID` to a second worker sharing the Redis, which replays and follows the Redis
  copy (`XREAD BLOCK`) to the end; the measurement lasts until the owner, a `grace` after the end,
  has asked Redis whether the end was delivered elsewhere (RedisBuffer's default grace, 15 s:
  `--grace`);
* `cluster`: `follower` on a Redis Cluster of three masters (the counts are the three nodes' sums);
* `breaker`: `RedisStore` (the fleet breaker) in a worker relaying without resume: its operations per
  second idle (breakers closed), per call, and per second with one breaker open; its tick's script
  run back to back.

Then Redis at full load, for scale (`--no-saturate`: not): `redis-benchmark` sends an XADD of the
relay's shape, one per round trip, then 20 per round trip. It prints the tables and exits 0
whatever the figures (1 only if a stream was lost or ended otherwise than `done`). docs/scale.md
reads them. About 2.5 minutes.

    python benchmarks/redis_scale.py [--streams 20] [--short 50] [--long 200] [--interval 0.02] [--repeats 2]
                                     [--leave 5] [--pause 0.25] [--grace 15] [--no-saturate] [--json]
                                     [--configs owner,idempotent,follower,cluster,breaker]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import queue
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parent / "tests"))  # redis_server: the tests' real redis-servers
sys.path.insert(0, str(HERE.parent / "tests" / "serve"))
from served import SseParser  # noqa: E402  (the tests' parser: the browser's rules)

CONFIGS = ("owner", "idempotent", "follower", "cluster", "breaker")
MODEL = "claude-sim-1"
WAIT = 120.0
IDLE = 2.0
TICKS = 2000
"""The breaker store's tick script, run back to back this many times: its cost on a busy Redis."""
SATURATE = 100_000
"""XADDs `redis-benchmark` sends per measurement of Redis at full load."""
"""Seconds each node is watched with no client, for its own CPU per second."""
OBSERVER = {"info", "config|resetstat"}
"""This script's own commands: not counted."""
SETUP = {"client|setinfo", "hello", "command", "command|docs", "command|info", "cluster|slots", "cluster|shards",
         "cluster|nodes", "readonly", "select", "script|exists", "script|load"}
"""A connection's or a client's set-up (and the store's script check, shown apart): counted apart."""


# -- the children: the simulator, the app workers -------------------------------------------------

def simulate(lengths: list[int], interval: float) -> None:
    from streamscope.simulator import Scenario, Simulator, TextSpec, message_stream
    from streamscope.simulator.catalog import SCENARIOS

    scenarios = [Scenario.single(f"paced_{n}", message_stream(blocks=[TextSpec(["tok "] * n, interval=interval)]))
                 for n in lengths]
    with Simulator([*scenarios, SCENARIOS["http_500"]]) as sim:
        print(sim.url(), flush=True)
        threading.Event().wait()


def serve(role: str, target: str, upstream: str, grace: float) -> None:
    """One uvicorn worker: `role` `buffer` (relay with a RedisBuffer) or `breaker` (relay without
    resume, a fleet breaker on RedisStore); `target` a redis:// URL, `cluster:` before it for a cluster."""
    import anthropic
    import redis
    import uvicorn
    from opentelemetry.sdk.trace import TracerProvider
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.routing import Route

    from streamscope import AnthropicInstrumentor, Breaker
    from streamscope.serve import RedisBuffer, RedisStore, relay

    cluster = target.startswith("cluster:")
    url = target.removeprefix("cluster:")
    given: Any = redis.RedisCluster.from_url(url) if cluster else url
    buffer = RedisBuffer(given, grace=grace) if role == "buffer" else None
    breaker = Breaker(failures=2, window=30, cool_down=600, shared=RedisStore(given)) if role == "breaker" else None
    AnthropicInstrumentor().instrument(tracer_provider=TracerProvider(), breaker=breaker)
    clients: dict[str, anthropic.AsyncAnthropic] = {}

    async def relayed(request: Request) -> Any:
        name = request.path_params["scenario"]
        if name not in clients:
            clients[name] = anthropic.AsyncAnthropic(base_url=f"{upstream}/s/{name}", api_key="x", max_retries=0)
        client = clients[name]
        return await relay(request, lambda: client.messages.stream(
            model=MODEL, max_tokens=1024, messages=[{"role": "user", "content": "go"}]), resume=buffer)

    app = Starlette(routes=[Route("/relay/{scenario}", relayed)])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, http="h11", ws="none", loop="asyncio", lifespan="off", log_config=None,
                            log_level="warning", access_log=False, timeout_graceful_shutdown=1)
    uvicorn.Server(config).run(sockets=[sock])


@contextmanager
def child(*args: str) -> Iterator[str]:
    """This script in a child process with `args`; yields the first line it prints (its URL)."""
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, cwd=HERE)
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    out = proc.stdout
    threading.Thread(target=lambda: [lines.put(line.strip()) for line in out], daemon=True).start()
    try:
        try:
            first = lines.get(timeout=WAIT)
        except queue.Empty:
            raise RuntimeError(f"{args}: no URL within {WAIT} s (exit {proc.poll()})") from None
        yield first
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# -- what Redis counts ------------------------------------------------------------------------------

@dataclass
class Window:
    """What the nodes counted between a reset and a read, this script's own commands taken off."""

    calls: Counter[str] = field(default_factory=Counter)
    usec: Counter[str] = field(default_factory=Counter)
    setup: Counter[str] = field(default_factory=Counter)
    net_in: int = 0
    net_out: int = 0
    reads: int = 0
    cpu: float = 0.0
    seconds: float = 0.0
    by_node: list[int] = field(default_factory=list)
    memory: int = 0
    """Bytes of streamscope's keys at the end (`MEMORY USAGE`): after a flush, what the measured
    answers leave, each for `ttl` seconds after its end."""

    @property
    def commands(self) -> int:
        return sum(self.calls.values())

    def __add__(self, other: Window) -> Window:
        return Window(self.calls + other.calls, self.usec + other.usec, self.setup + other.setup,
                      self.net_in + other.net_in, self.net_out + other.net_out, self.reads + other.reads,
                      self.cpu + other.cpu, self.seconds + other.seconds,
                      [a + b for a, b in zip(self.by_node, other.by_node)] or self.by_node or other.by_node,
                      self.memory + other.memory)


class Nodes:
    """The Redis nodes of a configuration, read by this script on a connection of its own."""

    def __init__(self, ports: list[int]) -> None:
        import redis

        self.clients = [redis.Redis(port=port, decode_responses=True) for port in ports]
        self.empty = [(0, 0, 0)] * len(ports)
        self.idle = [0.0] * len(ports)
        self.empty = [(w.net_in, w.net_out, w.reads) for w in self._each(lambda: None)]
        self.idle = [w.cpu / w.seconds for w in self._each(lambda: time.sleep(IDLE))]
        """Each node's CPU per second with no client (its timers): taken off every window's."""

    def _each(self, action: Any, flush: bool = False) -> list[Window]:
        if flush:  # what earlier measurements left expires in none of this one
            for c in self.clients:
                c.flushall()
        cpu = [self._cpu(c) for c in self.clients]
        for c in self.clients:
            c.config_resetstat()
        start = time.monotonic()
        action()
        seconds = time.monotonic() - start
        windows = []
        for c, cpu0, idle, (e_in, e_out, e_reads) in zip(self.clients, cpu, self.idle, self.empty):
            stats = c.info("stats")
            w = Window(net_in=int(stats["total_net_input_bytes"]) - e_in,
                       net_out=int(stats["total_net_output_bytes"]) - e_out,
                       reads=int(stats["total_reads_processed"]) - e_reads, seconds=seconds)
            for name, value in c.info("commandstats").items():
                command = name.removeprefix("cmdstat_")
                if command in OBSERVER:
                    continue
                (w.setup if command in SETUP else w.calls)[command] += int(value["calls"])
                w.usec[command] += int(value["usec"])
            w.cpu = self._cpu(c) - cpu0 - idle * seconds
            w.memory = sum(c.memory_usage(k, samples=0) or 0 for k in c.scan_iter(match="streamscope:*", count=1000))
            windows.append(w)
        return windows

    @staticmethod
    def _cpu(client: Any) -> float:
        info = client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def measure(self, action: Any, flush: bool = False) -> Window:
        """`action` done, the nodes' counts summed (`seconds` is the action's); `flush`: the nodes
        emptied first, so that `memory` is what the action left."""
        each = self._each(action, flush)
        total = Window(seconds=each[0].seconds)
        for w in each:
            total = total + Window(w.calls, w.usec, w.setup, w.net_in, w.net_out, w.reads, w.cpu, memory=w.memory)
        total.by_node = [w.commands for w in each]
        return total


# -- the browsers -----------------------------------------------------------------------------------

async def read(client: Any, url: str, headers: dict[str, str], leave: int | None = None) -> tuple[int, list[Any]]:
    parser = SseParser()
    async with client.stream("GET", url, headers=headers) as response:
        async for text in response.aiter_text():
            parser.feed(text)
            if leave is not None and len(parser.events) >= leave:
                break
        return response.status_code, parser.events


async def browse(first: str, scenario: str, n: int, streams: int, spread: float, *, then: str | None = None,
                 leave: int = 0, key: bool = False, pause: float = 0.0) -> list[str]:
    """`streams` browsers at once (arriving over `spread` s): each reads its answer from `first`, or
    `leave` events of it and, `pause` s later, the rest from `then` (`Last-Event-ID`). The problems
    found (none: [])."""
    import httpx2

    limits = httpx2.Limits(max_connections=4 * streams, max_keepalive_connections=4 * streams)

    async def one(client: Any, i: int) -> str | None:
        await asyncio.sleep(spread * i / streams)
        headers = {"Idempotency-Key": uuid.uuid4().hex} if key else {}
        status, events = await read(client, f"{first}/relay/{scenario}", headers, leave if then else None)
        if then is not None:
            if status != 200 or not events:
                return f"first connection: {status}, {len(events)} events"
            await asyncio.sleep(pause)
            status, more = await read(client, f"{then}/relay/{scenario}", {"Last-Event-ID": events[-1].id or ""})
            events += more
        tokens = sum(e.event == "token" for e in events)
        ends = [e.event for e in events if e.event in ("done", "error")]
        return None if status == 200 and tokens == n and ends == ["done"] else f"{status}: {tokens} tokens, {ends}"

    async with httpx2.AsyncClient(limits=limits, timeout=httpx2.Timeout(WAIT)) as client:
        found = await asyncio.gather(*(one(client, i) for i in range(streams)))
    return [p for p in found if p]


# -- the configurations -----------------------------------------------------------------------------

@dataclass
class Measured:
    config: str
    short: Window
    long: Window
    events: tuple[int, int]
    """Relayed events per stream (text deltas and the terminal event), short and long."""
    streams: int
    """Streams per length (over the repeats)."""

    def per_event(self, value: Any) -> float:
        s, ln = value(self.short) / self.streams, value(self.long) / self.streams
        return (ln - s) / (self.events[1] - self.events[0])

    def per_stream(self, value: Any) -> float:
        return value(self.short) / self.streams - self.per_event(value) * self.events[0]


@dataclass
class Results:
    measured: list[Measured] = field(default_factory=list)
    breaker: dict[str, Window] = field(default_factory=dict)
    calls: int = 0
    problems: list[str] = field(default_factory=list)
    saturated: dict[int, tuple[float, Window]] = field(default_factory=dict)
    """XADDs per round trip: (XADDs per second, what Redis counted)."""


def run_streams(nodes: Nodes, results: Results, label: str, flow: Any, after: float, flush: bool = True) -> Window:
    def action() -> None:
        results.problems.extend(f"{label}: {p}" for p in asyncio.run(flow()))
        time.sleep(after)
    return nodes.measure(action, flush)


def buffer_config(name: str, args: argparse.Namespace, results: Results, nodes: Nodes, upstream: str,
                  target: str) -> None:
    lengths = (args.short, args.long)
    spread, n = args.interval, args.streams
    repeats = args.repeats if name in ("owner", "idempotent") else 1
    with ExitStack() as stack:
        if name in ("owner", "idempotent"):
            owner = stack.enter_context(child("--serve", "buffer", target, upstream, str(args.grace)))
            key = name == "idempotent"
            asyncio.run(browse(owner, f"paced_{args.short}", args.short, n, spread, key=key))  # warm-up
            windows = [run_streams(nodes, results, f"{name} {length}", lambda length=length: browse(
                owner, f"paced_{length}", length, n, spread, key=key), 0.5) for _ in range(repeats)
                for length in lengths]
        else:
            owner = stack.enter_context(child("--serve", "buffer", target, upstream, str(args.grace)))
            follower = stack.enter_context(child("--serve", "buffer", target, upstream, str(args.grace)))
            warm = stack.enter_context(child("--serve", "buffer", target, upstream, "1"))
            asyncio.run(browse(owner, f"paced_{args.short}", args.short, n, spread))  # warm-ups: the owner's
            asyncio.run(browse(warm, f"paced_{args.short}", args.short, n, spread, then=follower, leave=args.leave,
                               pause=args.pause))
            time.sleep(6.0)  # `warm`'s grace (1 s) and the follower's lease (3 s) are over: no write left
            windows = [run_streams(nodes, results, f"{name} {length}", lambda length=length: browse(
                owner, f"paced_{length}", length, n, spread, then=follower, leave=args.leave, pause=args.pause),
                args.grace + 1.5)
                for length in lengths]
    short, long = sum(windows[2:][::2], windows[0]), sum(windows[3:][::2], windows[1])
    results.measured.append(Measured(name, short, long, (args.short + 1, args.long + 1), n * repeats))


def breaker_config(args: argparse.Namespace, results: Results, nodes: Nodes, upstream: str, target: str) -> None:
    with child("--serve", "breaker", target, upstream, str(args.grace)) as app:
        asyncio.run(browse(app, f"paced_{args.short}", args.short, 1, 0))  # one key tracked, the scripts loaded
        time.sleep(0.5)
        results.breaker["idle"] = nodes.measure(lambda: time.sleep(args.idle))
        results.calls = args.streams
        results.breaker["calls"] = run_streams(nodes, results, "breaker calls", lambda: browse(
            app, f"paced_{args.short}", args.short, args.streams, args.interval), 0.5, flush=False)

        async def fail() -> list[str]:
            import httpx2
            async with httpx2.AsyncClient(timeout=WAIT) as client:
                for _ in range(4):
                    await client.get(f"{app}/relay/http_500")
                    await asyncio.sleep(0.3)
            return []
        results.breaker["opening"] = run_streams(nodes, results, "breaker opening", fail, 0.5, flush=False)
        results.breaker["open"] = nodes.measure(lambda: time.sleep(args.idle))
        from streamscope.breaker.redis_store import _OPEN, INDEX, VERSIONS  # the script of every tick

        direct = nodes.clients[0]
        sha = direct.script_load(_OPEN)
        results.breaker["tick script"] = nodes.measure(lambda: [direct.evalsha(sha, 2, INDEX, VERSIONS)
                                                                for _ in range(TICKS)])


def saturate(results: Results, port: int, nodes: Nodes) -> None:
    """Redis at full load, for scale: `redis-benchmark` (50 connections) sends an XADD like the
    owner's (an event of ~90 bytes to one of 2,000 streams) one per round trip, then 20 per round
    trip (what a worker's shared pipeline sends when it is busy)."""
    if shutil.which("redis-benchmark") is None:
        return
    data = 'id: 0f1e2d3c4b5a69788796a5b4c3d2e1f0:123\nevent: token\ndata: {"text": "tok "}\n\n'
    for per in (1, 20):
        command = ["redis-benchmark", "-p", str(port), "-c", "50", "-n", str(SATURATE), "-r", "2000", "-P",
                   str(per), "--csv", "XADD", "streamscope:resume:{__rand_int__}", "MAXLEN", "=", "10000", "*", "d",
                   data]
        out: list[str] = []
        w = nodes.measure(lambda c=command, o=out: o.append(subprocess.run(c, capture_output=True, text=True).stdout))
        found = re.findall(r'"([0-9.]+)"', out[0].partition("\n")[2])  # the test's name (the data) has newlines
        rate = float(found[0]) if found else 0.0
        results.saturated[per] = (rate, w)


# -- the report -------------------------------------------------------------------------------------

FIGURES = {
    "commands": lambda w: w.commands,
    "round trips": lambda w: w.reads,
    "bytes in": lambda w: w.net_in,
    "bytes out": lambda w: w.net_out,
    "CPU us": lambda w: w.cpu * 1e6,
    "bytes kept": lambda w: w.memory,
}


def versions() -> dict[str, str]:
    import redis

    server = subprocess.run(["redis-server", "--version"], capture_output=True, text=True).stdout.strip()
    return {"date": time.strftime("%Y-%m-%d"), "redis-server": server, "redis-py": redis.__version__,
            "python": platform.python_version(), "cores": str(os.cpu_count()), "machine": platform.machine()}


def report(args: argparse.Namespace, results: Results) -> None:
    print(f"{versions()}")
    print(f"{args.streams} streams at once, a text delta every {args.interval * 1000:g} ms "
          f"({1 / args.interval:g} events/s per stream); per event: slope between {args.short} and {args.long} "
          f"deltas (+1 terminal event); per stream: what is left. Round trips: Redis's total_reads_processed.")
    head = "".join(f"{k:>12}" for k in FIGURES)
    print(f"{'':14}{'per relayed event':^{len(head)}}  |{'per stream (at zero events)':^{len(head)}}")
    print(f"{'config':14}{head}  |{head}")
    for m in results.measured:
        ev = "".join(f"{m.per_event(f):12.2f}" for f in FIGURES.values())
        st = "".join(f"{m.per_stream(f):12.1f}" for f in FIGURES.values())
        print(f"{m.config:14}{ev}  |{st}")
    print("All in (long answers, per-stream costs included): per relayed event")
    for m in results.measured:
        events = m.streams * m.events[1]
        print(f"{m.config:14}" + "".join(f"{f(m.long) / events:12.2f}" for f in FIGURES.values()))
    for m in results.measured:
        names = sorted(set(m.short.calls) | set(m.long.calls), key=lambda c: -m.long.calls[c])
        parts = [f"{c} {m.per_event(lambda w, c=c: w.calls[c]):.3f}/ev {m.per_stream(lambda w, c=c: w.calls[c]):.2f}/st"
                 for c in names]
        print(f"{m.config}: " + ", ".join(parts))
        setup = m.short.setup + m.long.setup
        nodes = f"; commands by node (long) {m.long.by_node}" if len(m.long.by_node) > 1 else ""
        print(f"{m.config}: set-up apart, both windows: {dict(setup)}{nodes}; Redis CPU per command "
              f"{m.long.cpu / max(1, m.long.commands) * 1e6:.2f} us, per round trip "
              f"{m.long.cpu / max(1, m.long.reads) * 1e6:.2f} us (long window)")
    usec: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    for w in [x for m in results.measured for x in (m.short, m.long)] + list(results.breaker.values()):
        usec += w.usec
        calls += w.calls + w.setup
    print("usec_per_call (INFO commandstats, all windows): " + ", ".join(
        f"{c} {usec[c] / calls[c]:.2f}" for c in sorted(calls, key=lambda c: -calls[c]) if calls[c]))
    if results.breaker:
        idle, on_calls = results.breaker["idle"], results.breaker["calls"]
        for label, w in (("idle, closed", idle), ("open", results.breaker["open"])):
            every = {c: round(v / w.seconds, 2) for c, v in (w.calls + w.setup).items()}
            print(f"breaker store, {label}, per second per process: {every}; round trips {w.reads / w.seconds:.2f}, "
                  f"bytes in {w.net_in / w.seconds:.0f}, out {w.net_out / w.seconds:.0f}, "
                  f"CPU {w.cpu / w.seconds * 1e6:.0f} us")
        extra = {c: round((on_calls.calls[c] + on_calls.setup[c] - (idle.calls[c] + idle.setup[c]) *
                           on_calls.seconds / idle.seconds) / results.calls, 2)
                 for c in set(on_calls.calls) | set(on_calls.setup)}
        print(f"breaker store, per call beyond the ticks ({results.calls} calls): {extra}")
        o = results.breaker["opening"]
        print(f"breaker store, opening (4 failing calls, {o.seconds:.1f} s): {dict(o.calls + o.setup)}")
        t = results.breaker["tick script"]
        print(f"breaker store, its tick's script back to back ({TICKS} times, one key open): "
              f"{t.usec['evalsha'] / max(1, t.calls['evalsha']):.2f} us usec_per_call, Redis CPU "
              f"{t.cpu / TICKS * 1e6:.2f} us per round trip")
    for per, (rate, w) in results.saturated.items():
        n = max(1, w.calls["xadd"])
        print(f"redis-benchmark, 50 connections, {per} XADD per round trip: {rate:.0f} XADD/s; Redis CPU "
              f"{w.cpu / n * 1e6:.2f} us per XADD ({w.cpu / w.seconds * 100:.0f} % of a core), {w.reads / n:.3f} "
              f"round trips and {w.net_in / n:.0f} bytes in per XADD")
    for p in results.problems[:10]:
        print(f"PROBLEM {p}")
    print("all streams done" if not results.problems else f"{len(results.problems)} STREAMS LOST OR FAILED")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=20, help="browsers at once per measurement")
    parser.add_argument("--short", type=int, default=50, help="text deltas of the short answer")
    parser.add_argument("--long", type=int, default=200, help="text deltas of the long answer")
    parser.add_argument("--interval", type=float, default=0.02, help="seconds between two text deltas")
    parser.add_argument("--leave", type=int, default=5, help="events a browser reads before it reconnects (follower)")
    parser.add_argument("--pause", type=float, default=0.25,
                        help="seconds a browser waits before it reconnects (follower)")
    parser.add_argument("--grace", type=float, default=15.0, help="RedisBuffer(grace=...) of the measured workers")
    parser.add_argument("--idle", type=float, default=4.0, help="seconds the breaker store is watched idle")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--repeats", type=int, default=2, help="measurements per length (owner, idempotent)")
    parser.add_argument("--no-saturate", dest="saturate", action="store_false",
                        help="skip Redis at full load (redis-benchmark)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--simulate", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--serve", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.simulate:
        simulate([int(args.simulate[0]), int(args.simulate[1])], float(args.simulate[2]))
        return 0
    if args.serve:
        serve(args.serve[0], args.serve[1], args.serve[2], float(args.serve[3]))
        return 0
    configs = [c for c in args.configs.split(",") if c]
    if unknown := set(configs) - set(CONFIGS):
        parser.error(f"unknown configs {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
    if not 0 < args.short < args.long:
        parser.error("--short must be at least 1 and below --long")
    if shutil.which("redis-server") is None:
        print("redis-server is not installed (scripts/ensure-redis): not measured")
        return 0
    from redis_server import RedisCluster, RedisServer

    results = Results()
    with child("--simulate", str(args.short), str(args.long), str(args.interval)) as upstream:
        with RedisServer() as server:
            nodes = Nodes([server.port])
            for name in [c for c in configs if c in ("owner", "idempotent", "follower")]:
                buffer_config(name, args, results, nodes, upstream, server.url)
            if "breaker" in configs:
                breaker_config(args, results, nodes, upstream, server.url)
            if args.saturate:
                saturate(results, server.port, nodes)
        if "cluster" in configs:
            with tempfile.TemporaryDirectory() as workdir, RedisCluster(workdir) as cluster:
                nodes = Nodes([node.port for node in cluster.nodes])
                buffer_config("cluster", args, results, nodes, upstream, "cluster:" + cluster.url)
    if args.json:
        print(json.dumps({"versions": versions(), "args": vars(args), "measured": [
            {"config": m.config, "events": m.events, "streams": m.streams, "short": m.short.__dict__,
             "long": m.long.__dict__} for m in results.measured],
            "breaker": {k: w.__dict__ for k, w in results.breaker.items()}, "problems": results.problems,
            "saturated": {per: {"rate": rate, **w.__dict__} for per, (rate, w) in results.saturated.items()}},
            indent=1, default=str))
    else:
        report(args, results)
    return 1 if results.problems else 0


if __name__ == "__main__":
    sys.exit(main())
