"""Stale entries: a finished stream leaves nothing in the watchdog, and memory stays flat.

`--streams` short budgeted streams (three deltas each) through the real SDK to the benchmarks'
endpoint, shared by `--processes` workers forked from one instrumented parent (as a preforking
server does; the parent streams first, so each worker starts from inherited state). In each
worker, sync streams run from `--threads` threads and every `--async-every`-th stream is async
(on one loop, as many at once as there are threads), both at the same time. The budgets reach
minutes ahead (first_token 60 s, idle 60 s, deadline 600 s): an entry kept until its budget
would expire stays for the whole run. Each worker's share is cut in `--marks` rounds; after each
(no stream in flight) it reports its watchdog's heap (entries, streams watched), live Python
allocations (`tracemalloc` after a collection, with `--tracemalloc`; else the interpreter's
allocated blocks) and its RSS; a sampler reports the largest heap seen while streams ran.
The check, per worker: the heap is empty after every round, and live allocations after the
first round grow by less than `--tolerance` KiB (untraced: 500 blocks and one per 100 streams; a
stale entry keeps about five).

    python benchmarks/stale.py [--streams 100000] [--processes 2] [--threads 16] [--tracemalloc]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import json
import os
import select
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
from opentelemetry.sdk.trace import TracerProvider

from _server import endpoint
from streamscope import AnthropicInstrumentor, Budgets
from streamscope.budgets.sync_watch import Watchdog, watchdog

PARAMS = {"model": "claude-bench", "max_tokens": 64, "messages": [{"role": "user", "content": "go"}]}
BUDGETS = Budgets(first_token=60, idle=60, deadline=600)


def rss_kib() -> int:
    """Resident set size now (Linux), else 0."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def live() -> float:
    """Live allocations after a collection: KiB under tracemalloc, else allocated blocks."""
    for _ in range(2):
        gc.collect()
    return tracemalloc.get_traced_memory()[0] / 1024 if tracemalloc.is_tracing() else float(sys.getallocatedblocks())


class Sampler:
    """The largest heap (entries, and streams watched then) seen while streams run."""

    def __init__(self, dog: Watchdog) -> None:
        self.dog, self.worst = dog, (0, 0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            seen = (self.dog.pending(), self.dog.watched())
            if seen > self.worst:
                self.worst = seen

    def stop(self) -> tuple[int, int]:
        self._stop.set()
        self._thread.join()
        return self.worst


def worker(args: argparse.Namespace, base: str, share: int, say: Callable[[str], None]) -> dict[str, Any]:
    """Run `share` streams in `--marks` rounds; report each round; return the summary."""
    rounds = max(1, min(args.marks, share))
    every = args.async_every
    unit = "KiB" if args.tracemalloc else "blocks"
    dog = watchdog()
    loop = asyncio.new_event_loop()
    rows: list[tuple[int, int, int, float, int, float]] = []
    sync = anthropic.Anthropic(base_url=base + "long", api_key="b", max_retries=2)
    aclient = anthropic.AsyncAnthropic(base_url=base + "long", api_key="b", max_retries=2)

    def one(_: int) -> None:
        for _event in sync.messages.create(**PARAMS, stream=True):
            pass

    async def some(n: int) -> None:
        gate = asyncio.Semaphore(args.threads)

        async def one_async() -> None:
            async with gate:
                async for _event in await aclient.messages.create(**PARAMS, stream=True):
                    pass

        await asyncio.gather(*(one_async() for _ in range(n)))

    if args.tracemalloc:
        tracemalloc.start()
    sampler = Sampler(dog)
    start, done = time.monotonic(), 0
    with ThreadPoolExecutor(args.threads) as pool:
        for r in range(1, rounds + 1):
            n = share * r // rounds - done
            n_async = n // every if every else 0
            running = pool.map(one, range(n - n_async))
            loop.run_until_complete(some(n_async))
            for _ in running:
                pass
            done += n
            rows.append((done, dog.pending(), dog.watched(), live(), rss_kib(), time.monotonic() - start))
            say(f"{done:>8} streams  watchdog entries {rows[-1][1]} (watching {rows[-1][2]})  "
                f"live {rows[-1][3]:>9.0f} {unit}  RSS {rows[-1][4]:>7} KiB  {rows[-1][5]:6.1f} s")
    worst = sampler.stop()
    tracemalloc.stop()
    sync.close()
    loop.run_until_complete(aclient.close())
    loop.close()
    growth = rows[-1][3] - rows[0][3]
    allowed = args.tolerance if args.tracemalloc else 500 + share / 100
    empty = all(entries == 0 and watched == 0 for _, entries, watched, *_ in rows)
    return {"streams": share, "seconds": rows[-1][5], "worst": worst, "empty": empty, "growth": growth,
            "rss": rows[-1][4] - rows[0][4], "flat": empty and growth < allowed}


def forked(args: argparse.Namespace, base: str, shares: list[int]) -> list[dict[str, Any]]:
    """One worker per share, forked from this (instrumented) process; their lines are printed as
    they come, prefixed with the worker's number."""
    pipes: dict[int, tuple[int, int, list[bytes]]] = {}
    for index, share in enumerate(shares):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: report through the pipe, never return into the parent's code
            status = 1
            try:
                os.close(read)
                out = os.fdopen(write, "w", buffering=1)
                summary = worker(args, base, share, functools.partial(print, file=out))
                print(json.dumps(summary), file=out)
                status = 0
            finally:
                os._exit(status)
        os.close(write)
        pipes[read] = (index, pid, [])
    summaries: list[dict[str, Any]] = []
    while pipes:
        ready, _, _ = select.select(list(pipes), [], [])
        for fd in ready:
            index, pid, buffer = pipes[fd]
            chunk = os.read(fd, 65536)
            buffer.append(chunk)
            *lines, rest = b"".join(buffer).split(b"\n")
            buffer[:] = [rest]
            for line in lines:
                text = line.decode()
                if text.startswith("{"):
                    summaries.append(json.loads(text))
                else:
                    print(f"[worker {index}] {text}", flush=True)
            if not chunk:
                os.close(fd)
                os.waitpid(pid, 0)
                del pipes[fd]
    if len(summaries) != len(shares):
        raise RuntimeError("a worker failed (see its traceback above)")
    return summaries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=100_000)
    parser.add_argument("--processes", type=int, default=2, help="workers forked to share the streams (1: none)")
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--async-every", type=int, default=10, help="every n-th stream is async (0: none)")
    parser.add_argument("--marks", type=int, default=10)
    parser.add_argument("--tracemalloc", action="store_true", help="trace allocations (slower)")
    parser.add_argument("--tolerance", type=float, default=256.0, help="KiB of growth allowed after the first round")
    args = parser.parse_args(argv)
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=TracerProvider(), budgets=BUDGETS)
    started = time.monotonic()
    try:
        with endpoint(3) as base:
            if args.processes <= 1:
                summaries = [worker(args, base, args.streams, lambda line: print(line, flush=True))]
            else:
                warm = anthropic.Anthropic(base_url=base + "long", api_key="b", max_retries=2)
                for _event in warm.messages.create(**PARAMS, stream=True):  # the parent streams before forking
                    pass
                warm.close()
                n = args.processes
                summaries = forked(args, base, [args.streams * (i + 1) // n - args.streams * i // n for i in range(n)])
    finally:
        instrumentor.uninstrument()
    seconds = time.monotonic() - started
    flat = all(s["flat"] for s in summaries)
    every = args.async_every
    print(f"{args.streams} streams ({args.streams // every if every else 0} async; {len(summaries)} process(es), "
          f"{args.threads} at once in each) in {seconds:.0f} s ({seconds / args.streams * 1e3:.2f} ms a stream)")
    for i, s in enumerate(summaries):
        print(f"  process {i}: {s['streams']} streams; largest heap while running {s['worst'][0]} entries for "
              f"{s['worst'][1]} streams; empty after every round: {'yes' if s['empty'] else 'no'}; live allocations "
              f"after the first round {s['growth']:+.0f} {'KiB' if args.tracemalloc else 'blocks'}, "
              f"RSS {s['rss']:+d} KiB")
    print(f"flat: {'yes' if flat else 'no'}")
    return 0 if flat else 1


if __name__ == "__main__":
    sys.exit(main())
