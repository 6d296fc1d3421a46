"""Load: many concurrent streams with budgets on, 5 % of them stalling (half still pinging).

Async: `--streams` (default 1,000) concurrent streams per round, three rounds; sync: `--threads`
(default 32) threads each reading `--per-thread` streams. The endpoint runs in its own process.
Checks, per round: every stall detected within its idle budget plus `--margin`, no healthy stream
killed, every span ended, and memory flat across rounds (tracemalloc, after a collection);
reports event-loop lag and client CPU. Exit 1 if a check fails.

    python benchmarks/load.py [--streams 1000] [--rounds 3] [--threads 32] [--per-thread 3]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import sys
import time
import tracemalloc
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import anthropic
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from _server import endpoint
from streamscope import AnthropicInstrumentor, Budgets, StreamTimeout

IDLE = 2.5
"""The idle budget by default; first_token is twice it. Healthy streams write a delta every 1 s."""


def budgets(idle: float) -> Budgets:
    return Budgets(first_token=2 * idle, idle=idle, deadline=60.0)
PARAMS = {"model": "claude-load", "max_tokens": 1024, "messages": [{"role": "user", "content": "go"}]}


@dataclass
class Round:
    mode: str
    streams: int
    stalls: int
    stalls_detected: int
    detection_worst: float
    """Seconds from the stall's last content to StreamTimeout, worst case (should be ~ the idle budget)."""
    healthy_killed: int
    healthy_killed_by: dict[str, int]
    """Which budget ended the healthy streams that were ended (none, when all is well)."""
    spans_started: int
    spans_ended: int
    wall: float
    cpu: float
    loop_lag_p99_ms: float | None
    memory_kib: float


TIMEOUT = anthropic.Timeout(600, connect=60)
"""The SDK's own timeouts, but 60 s to connect (the SDK's is 5 s): 200 streams opening at once on a
loaded 2-core machine once waited longer than 5 s for the simulator to accept them. The budgets are
what this measures; a connection the machine is slow to make is not a stall."""


def plan(n: int, rng: random.Random) -> list[str]:
    """5 % stalls, half of them pinging, shuffled among healthy streams."""
    stalls = max(2, n // 20)
    kinds = ["pinging_stall"] * (stalls // 2) + ["silent_stall"] * (stalls - stalls // 2)
    kinds += ["healthy"] * (n - len(kinds))
    rng.shuffle(kinds)
    return kinds


async def one_async(client: anthropic.AsyncAnthropic, kind: str) -> tuple[str, float | None]:
    last_content = None
    try:
        stream = await client.with_options(base_url=client.base_url.copy_with(path=f"/s/{kind}")).messages.create(
            **PARAMS, stream=True)
        async for event in stream:
            if event.type == "content_block_delta":
                last_content = time.monotonic()
        return "complete", None
    except StreamTimeout as exc:
        return exc.budget, (time.monotonic() - last_content) if last_content else None


def one_sync(client: anthropic.Anthropic, kind: str) -> tuple[str, float | None]:
    last_content = None
    try:
        for event in client.with_options(base_url=client.base_url.copy_with(path=f"/s/{kind}")).messages.create(
                **PARAMS, stream=True):
            if event.type == "content_block_delta":
                last_content = time.monotonic()
        return "complete", None
    except StreamTimeout as exc:
        return exc.budget, (time.monotonic() - last_content) if last_content else None


def judge(mode: str, kinds: list[str], outcomes: list[tuple[str, float | None]], spans: InMemorySpanExporter,
          started: int, wall: float, cpu: float, lag: list[float]) -> Round:
    stalls = [(k, o) for k, o in zip(kinds, outcomes) if k != "healthy"]
    detected = [o for _, o in stalls if o[0] == "idle"]
    killed = Counter(o[0] for k, o in zip(kinds, outcomes) if k == "healthy" and o[0] != "complete")
    return Round(
        mode=mode, streams=len(kinds), stalls=len(stalls), stalls_detected=len(detected),
        detection_worst=max((d for _, d in detected if d is not None), default=0.0),
        healthy_killed=sum(killed.values()), healthy_killed_by=dict(killed),
        spans_started=started, spans_ended=len(spans.get_finished_spans()), wall=wall, cpu=cpu,
        loop_lag_p99_ms=sorted(lag)[min(len(lag) - 1, int(len(lag) * 0.99))] * 1000 if lag else None,
        memory_kib=0.0,
    )


async def async_round(base: str, n: int, rng: random.Random, spans: InMemorySpanExporter) -> Round:
    kinds = plan(n, rng)
    lag: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:  # event-loop lag: how late a 50 ms sleep wakes up
        while not done.is_set():
            t = time.monotonic()
            await asyncio.sleep(0.05)
            lag.append(time.monotonic() - t - 0.05)

    # One client per 100 streams: httpcore's pool scans every connection per request (quadratic
    # in one client's concurrency), a cost of the SDK's transport that streamscope does not add to.
    clients = [anthropic.AsyncAnthropic(base_url=base, api_key="load", max_retries=0, timeout=TIMEOUT)
               for _ in range(0, n, 100)]
    tick = asyncio.create_task(ticker())
    wall, cpu = time.monotonic(), time.process_time()
    outcomes = await asyncio.gather(*(one_async(clients[i // 100], k) for i, k in enumerate(kinds)))
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    done.set()
    await tick
    for client in clients:
        await client.close()
    return judge("async", kinds, list(outcomes), spans, len(kinds), wall, cpu, lag)


def sync_round(base: str, threads: int, per_thread: int, rng: random.Random, spans: InMemorySpanExporter) -> Round:
    kinds = plan(threads * per_thread, rng)
    client = anthropic.Anthropic(base_url=base, api_key="load", max_retries=0, timeout=TIMEOUT)
    wall, cpu = time.monotonic(), time.process_time()
    with ThreadPoolExecutor(threads) as pool:
        outcomes = list(pool.map(lambda k: one_sync(client, k), kinds))
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    client.close()
    return judge(f"sync ×{threads} threads", kinds, outcomes, spans, len(kinds), wall, cpu, [])


def memory_kib() -> float:
    for _ in range(3):
        gc.collect()
    return tracemalloc.get_traced_memory()[0] / 1024


def run(streams: int, rounds: int, threads: int, per_thread: int, margin: float, seed: int,
        idle: float = IDLE) -> tuple[list[Round], bool]:
    rng = random.Random(seed)
    results: list[Round] = []
    instrumentor = AnthropicInstrumentor()
    tracemalloc.start()
    with endpoint(10) as url:
        base = url.removesuffix("/s/")
        for mode in ("async", "sync"):
            for _ in range(rounds):
                spans = InMemorySpanExporter()
                provider = TracerProvider()
                provider.add_span_processor(SimpleSpanProcessor(spans))
                meters = MeterProvider([InMemoryMetricReader()])  # metrics on, as users run it
                instrumentor.instrument(tracer_provider=provider, meter_provider=meters, budgets=budgets(idle))
                try:
                    if mode == "async":
                        result = asyncio.run(async_round(base, streams, rng, spans))
                    else:
                        result = sync_round(base, threads, per_thread, rng, spans)
                finally:
                    instrumentor.uninstrument()
                spans.clear()
                meters.shutdown()
                del spans, provider, meters
                result.memory_kib = memory_kib()
                results.append(result)
    tracemalloc.stop()
    ok = all(r.stalls_detected == r.stalls and r.healthy_killed == 0 and r.spans_ended == r.spans_started
             and r.detection_worst <= idle + margin for r in results)
    for mode in ("async", "sync"):
        mem = [r.memory_kib for r in results if r.mode.startswith(mode)]
        if len(mem) >= 3:  # flat: the last round retains no more than the second (plus slack)
            ok &= mem[-1] <= mem[1] * 1.10 + 512
    return results, ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--per-thread", type=int, default=3)
    parser.add_argument("--margin", type=float, default=0.5, help="seconds allowed past the idle budget")
    parser.add_argument("--idle", type=float, default=IDLE,
                        help="the idle budget, s (first_token is twice it); healthy streams write every 1 s")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results, ok = run(args.streams, args.rounds, args.threads, args.per_thread, args.margin, args.seed, args.idle)
    if args.json:
        print(json.dumps([asdict(r) for r in results], indent=2))
    else:
        print(f"idle budget {args.idle} s; margin {args.margin} s; 5 % of streams stall (half still pinging)")
        print(f"{'mode':18} {'streams':>7} {'stalls':>9} {'worst detect s':>14} {'healthy killed':>14} "
              f"{'spans':>11} {'wall s':>7} {'cpu s':>6} {'loop lag p99 ms':>15} {'memory KiB':>10}")
        for r in results:
            lag = f"{r.loop_lag_p99_ms:.1f}" if r.loop_lag_p99_ms is not None else "-"
            print(f"{r.mode:18} {r.streams:>7} {r.stalls_detected:>4}/{r.stalls:<4} {r.detection_worst:>14.3f} "
                  f"{r.healthy_killed:>14} {r.spans_ended:>5}/{r.spans_started:<5} {r.wall:>7.1f} {r.cpu:>6.1f} "
                  f"{lag:>15} {r.memory_kib:>10.0f}")
        for r in results:
            if r.healthy_killed:
                by = ", ".join(f"{n} {budget}" for budget, n in sorted(r.healthy_killed_by.items()))
                print(f"{r.mode}: healthy streams ended by {by} (loop lag p99 {r.loop_lag_p99_ms} ms)")
        print("all checks hold" if ok else "A CHECK FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
