"""Client CPU per streamed event: bare SDK vs streamscope observe-only vs budgets enforced.

Whole streams through the real SDK from a local endpoint in another process; configurations are
alternated stream by stream in one process (instrument/uninstrument between them) so machine
noise hits them alike, and the *paired* differences are reported as medians with their spread.
Whole-stream timings on a shared machine resolve about 2 µs/event; `micro.py` resolves less.

    python benchmarks/stream_cpu.py [--events 5000] [--samples 30]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import anthropic

from streamscope import AnthropicInstrumentor, Budgets

HERE = Path(__file__).resolve().parent
PARAMS = {"model": "claude-bench", "max_tokens": 8192, "messages": [{"role": "user", "content": "go"}]}
BUDGETS = Budgets(first_token=60, idle=30, deadline=600)
CONFIGS = ("bare", "observe", "budgets")
PATHS = ("sync create", "sync stream()", "async create", "async stream()")


def start_server(events: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, str(HERE / "_server.py"), str(events)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip() + "long"


def configure(config: str, instrumentor: AnthropicInstrumentor) -> None:
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()
    if config == "observe":
        instrumentor.instrument()
    elif config == "budgets":
        instrumentor.instrument(budgets=BUDGETS)


def one_stream(path: str, sync: anthropic.Anthropic, aclient: anthropic.AsyncAnthropic,
               loop: asyncio.AbstractEventLoop) -> tuple[float, int]:
    """(client CPU seconds, events) for one whole stream."""
    count = 0
    start = time.process_time()
    if path == "sync create":
        for _ in sync.messages.create(**PARAMS, stream=True):
            count += 1
    elif path == "sync stream()":
        with sync.messages.stream(**PARAMS) as s:
            for _ in s:
                count += 1
    else:
        async def run() -> int:
            n = 0
            if path == "async create":
                async for _ in await aclient.messages.create(**PARAMS, stream=True):
                    n += 1
            else:
                async with aclient.messages.stream(**PARAMS) as s:
                    async for _ in s:
                        n += 1
            return n

        count = loop.run_until_complete(run())
    return time.process_time() - start, count


def spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4) if len(values) >= 4 else [min(values), 0, max(values)]
    return f"{statistics.median(values):7.2f}  [{q[0]:6.2f}, {q[2]:6.2f}]"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--samples", type=int, default=30, help="streams per configuration and path")
    parser.add_argument("--paths", default=",".join(PATHS))
    args = parser.parse_args(argv)
    proc, url = start_server(args.events)
    instrumentor = AnthropicInstrumentor()
    loop = asyncio.new_event_loop()
    rng = random.Random(1)
    try:
        sync = anthropic.Anthropic(base_url=url, api_key="bench", max_retries=0)
        aclient = anthropic.AsyncAnthropic(base_url=url, api_key="bench", max_retries=0)
        paths = [p for p in args.paths.split(",") if p]
        print(f"client CPU per streamed event, µs: median [q1, q3] over {args.samples} paired samples, "
              f"{args.events} text deltas per stream")
        print(f"{'path':16} {'bare SDK':>24} {'+ observe-only':>24} {'+ budgets':>24}")
        for path in paths:
            per_event: dict[str, list[float]] = {c: [] for c in CONFIGS}
            for _ in range(2):  # warm-up: connections, imports, caches
                for config in CONFIGS:
                    configure(config, instrumentor)
                    one_stream(path, sync, aclient, loop)
            for _ in range(args.samples):
                order = list(CONFIGS)
                rng.shuffle(order)
                for config in order:
                    configure(config, instrumentor)
                    cpu, events = one_stream(path, sync, aclient, loop)
                    per_event[config].append(cpu / events * 1e6)
            bare = per_event["bare"]
            observe = [o - b for o, b in zip(per_event["observe"], bare)]
            budgets = [o - b for o, b in zip(per_event["budgets"], bare)]
            print(f"{path:16} {spread(bare):>24} {spread(observe):>24} {spread(budgets):>24}")
        configure("none", instrumentor)
    finally:
        loop.close()
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
