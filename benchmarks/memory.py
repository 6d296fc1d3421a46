"""Memory: what streamscope retains per in-flight stream, and that nothing grows with the answer.

1. `--streams` async streams are opened and each has delivered one event; Python allocations
   still live (`tracemalloc`, after a collection) are compared with the same streams bare, with
   streamscope observing, and with budgets enforced. The difference per stream is what
   streamscope holds for an in-flight stream (recorder, span, timer). Target: 2 KiB.
2. One long stream (`--events` deltas) is read with streamscope on; live allocations are taken
   after 100 events and near the end. Without content capture nothing may grow with the
   answer's length.

    python benchmarks/memory.py [--streams 200] [--events 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import tracemalloc
from typing import Any

import anthropic
from opentelemetry.sdk.trace import TracerProvider

from _server import endpoint
from streamscope import AnthropicInstrumentor, Budgets

PARAMS = {"model": "claude-bench", "max_tokens": 8192, "messages": [{"role": "user", "content": "go"}]}


def live_bytes() -> int:
    for _ in range(3):
        gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def in_flight(base: str, n: int) -> int:
    """Live bytes with `n` streams open, one event read from each (then they are closed)."""
    client = anthropic.AsyncAnthropic(base_url=base + "healthy", api_key="b", max_retries=0)
    streams: list[Any] = [await client.messages.create(**PARAMS, stream=True) for _ in range(n)]
    for stream in streams:
        await stream.__anext__()
    held = live_bytes()
    for stream in streams:
        await stream.close()
    await client.close()
    return held


def per_stream(base: str, n: int, instrumentor: AnthropicInstrumentor, config: str) -> float:
    provider = TracerProvider()
    if config == "observe":
        instrumentor.instrument(tracer_provider=provider)
    elif config == "budgets":
        instrumentor.instrument(tracer_provider=provider, budgets=Budgets(first_token=60, idle=30, deadline=600))
    try:
        asyncio.run(in_flight(base, 5))  # warm-up: imports, caches, the first connection
        before = live_bytes()
        held = asyncio.run(in_flight(base, n))
        return (held - before) / n
    finally:
        if config != "bare":
            instrumentor.uninstrument()


def growth(base: str, events: int, instrumentor: AnthropicInstrumentor) -> tuple[int, int]:
    """Live bytes after 100 events and after `events - 100`, one long stream, streamscope on."""
    instrumentor.instrument(tracer_provider=TracerProvider(), budgets=Budgets(idle=30))
    marks: list[int] = []
    try:
        client = anthropic.Anthropic(base_url=base + "long", api_key="b", max_retries=0)
        for i, _ in enumerate(client.messages.create(**PARAMS, stream=True)):
            if i in (100, events - 100):
                marks.append(live_bytes())
        client.close()
    finally:
        instrumentor.uninstrument()
    return marks[0], marks[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--events", type=int, default=5000)
    args = parser.parse_args(argv)
    instrumentor = AnthropicInstrumentor()
    tracemalloc.start()
    with endpoint(args.events) as base:
        bare = per_stream(base, args.streams, instrumentor, "bare")
        observe = per_stream(base, args.streams, instrumentor, "observe")
        budgets = per_stream(base, args.streams, instrumentor, "budgets")
        print(f"live bytes per in-flight async stream ({args.streams} open): bare SDK {bare / 1024:.1f} KiB; "
              f"streamscope adds {(observe - bare) / 1024:.2f} KiB observing, {(budgets - bare) / 1024:.2f} KiB "
              f"with budgets")
        early, late = growth(base, args.events, instrumentor)
        print(f"one {args.events}-event stream, streamscope on: live bytes after 100 events {early / 1024:.0f} KiB, "
              f"after {args.events - 100}: {late / 1024:.0f} KiB (growth {(late - early) / 1024:+.1f} KiB)")
    tracemalloc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
