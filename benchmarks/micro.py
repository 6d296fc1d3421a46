"""streamscope's per-event path alone, resolved below a microsecond.

A recorded sequence of real SDK event objects (parsed from a real stream, once) is fed through
the same wrapper code the hooks install — `_observed` (observe-only) and `_enforced` (budgets)
— with timeit-style repetition, against the same loop without streamscope. No network, no SSE
parsing: what remains is exactly what streamscope adds per event.

    python benchmarks/micro.py [--events 5000] [--repeat 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import anthropic
from opentelemetry.trace import NoOpTracer

from streamscope.adapters import anthropic as adapter
from streamscope.budgets import Budgets, BudgetTable
from streamscope.enforcement import AsyncWatch, SyncWatch
from streamscope.pipeline import Pipeline

HERE = Path(__file__).resolve().parent


def record_events(count: int) -> list[Any]:
    """Real `RawMessageStreamEvent` objects, parsed by the SDK from a real stream."""
    proc = subprocess.Popen([sys.executable, str(HERE / "_server.py"), str(count)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        client = anthropic.Anthropic(base_url=proc.stdout.readline().strip() + "long", api_key="bench", max_retries=0)
        return list(client.messages.create(model="claude-bench", max_tokens=8192, stream=True,
                                           messages=[{"role": "user", "content": "go"}]))
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=10)


def recorder(budgets: Budgets | None) -> Any:
    pipeline = Pipeline(NoOpTracer(), BudgetTable.from_config(budgets))
    rec = pipeline.open(pipeline.request(model="claude-bench"))
    rec.on_finish = None  # measure the per-event path, not the once-per-stream export
    return rec


def bare(events: list[Any]) -> None:
    for _ in iter(events):
        pass


def observed(events: list[Any]) -> None:
    for _ in adapter._observed(iter(events), recorder(None), None):
        pass


def enforced(events: list[Any]) -> None:
    rec = recorder(Budgets(first_token=60, idle=30, deadline=600))
    watch = SyncWatch(rec, lambda: None)  # not handed to the watchdog: the per-event cost alone
    for _ in adapter._enforced(iter(events), rec, watch, None):
        pass


async def _aiter(events: Iterable[Any]) -> AsyncIterator[Any]:
    for event in events:
        yield event


async def abare(events: list[Any]) -> None:
    async for _ in _aiter(events):
        pass


async def aobserved(events: list[Any]) -> None:
    async for _ in adapter._aobserved(_aiter(events), recorder(None), None):
        pass


async def aenforced(events: list[Any]) -> None:
    rec = recorder(Budgets(first_token=60, idle=30, deadline=600))
    watch = AsyncWatch(rec, asyncio.get_running_loop())
    rec.watch = watch
    async for _ in adapter._aenforced(_aiter(events), rec, watch, None):
        pass
    watch.stop()


def per_event(run: Any, events: list[Any], repeat: int, loop: asyncio.AbstractEventLoop | None = None) -> list[float]:
    """CPU µs per event for each of `repeat` passes over `events`."""
    out = []
    for _ in range(repeat):
        start = time.process_time()
        if loop is None:
            run(events)
        else:
            loop.run_until_complete(run(events))
        out.append((time.process_time() - start) / len(events) * 1e6)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args(argv)
    events = record_events(args.events) * 4  # more passes per timing, less timer granularity
    loop = asyncio.new_event_loop()
    print(f"streamscope's per-event path, µs per event (median of {args.repeat} passes over {len(events)} real events)")
    for name, base, runs, lp in [("sync", bare, {"observe-only": observed, "budgets": enforced}, None),
                                 ("async", abare, {"observe-only": aobserved, "budgets": aenforced}, loop)]:
        baseline = statistics.median(per_event(base, events, args.repeat, lp))
        cells = []
        for label, run in runs.items():
            added = statistics.median(per_event(run, events, args.repeat, lp)) - baseline
            cells.append(f"{label} +{added:.3f}")
        print(f"{name:6} loop alone {baseline:.3f}   " + "   ".join(cells))
    loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
