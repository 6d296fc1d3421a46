"""Where a relayed stream's memory goes: Python allocations held per open stream, by who made them.

`relay_load.py` measures the server's resident set per stream under load; this says what it is
made of. In one process, `--streams` requests are served at once by each endpoint of
`relay_instructions.py` (the ASGI app called directly, the provider's stream replayed into the
real SDK), each held in the middle of its answer (its provider body waits after half of its
`--deltas` text deltas) until all are open; then the allocations still live (`tracemalloc`, after
a collection) are compared with those before the requests. Each allocation is put to the first
component found walking its call stack from the innermost frame outwards, anyio passed through:
the tasks and threads anyio makes for the relay are the relay's, a pydantic model made by the SDK is
the SDK's. The browser's side
(the benchmark's `send`, which keeps what it is sent) is counted apart.

The configurations are `relay_instructions.py`'s (`baseline`: the article's endpoint on the plain
SDK; `relay-budgets`: streamscope's `relay()` with the SDK instrumented and budgets on;
`relay-plain`: `relay()` on the plain SDK). The figures are tracemalloc's: Python objects only,
not thread stacks or the allocator's slack, so they add up to less than the resident set.

    python benchmarks/relay_memory.py [--streams 300] [--deltas 30] [--configs baseline,relay-budgets,relay-plain]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import subprocess
import sys
import tracemalloc
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2

HERE = Path(__file__).resolve().parent
COMPONENTS = [  # (label, a path fragment of its files); the first that matches, innermost frame first
    ("browser (the benchmark's send)", "relay_instructions.py"),
    ("streamscope relay: response (disconnect watch, keep-alive and send-timeout timer)",
     "streamscope/serve/response.py"),
    ("streamscope relay: the rest", "streamscope/serve/"),
    ("streamscope retry line", "streamscope/helpers/"),
    ("streamscope instrumentation", "streamscope/"),
    ("the article's endpoint", "baseline_relay.py"),
    ("anthropic SDK", "anthropic/"),
    ("httpx2", "httpx2/"),
    ("FastAPI", "fastapi/"),
    ("Starlette", "starlette/"),
]
PASS_THROUGH = ("anyio", "anyio/")
"""A library that others call to make tasks, events and threads: its allocations are its caller's."""
OTHER = "other (event loop, threads)"
CONFIGS = ("baseline", "relay-budgets", "relay-plain")


class _Held(httpx2.AsyncByteStream):
    """A provider body that waits at its middle until `release` is set."""

    waiting = 0
    """Bodies waiting at their middle now."""

    def __init__(self, chunks: list[bytes], release: asyncio.Event) -> None:
        self._chunks, self._release = chunks, release

    async def __aiter__(self) -> AsyncIterator[bytes]:
        half = len(self._chunks) // 2
        for i, chunk in enumerate(self._chunks):
            if i == half and not self._release.is_set():
                _Held.waiting += 1
                await self._release.wait()
                _Held.waiting -= 1
            yield chunk


def component(trace: tracemalloc.Traceback) -> str:
    through = False
    for frame in reversed(list(trace)):
        for label, fragment in COMPONENTS:
            if fragment in frame.filename:
                return label
        through = through or PASS_THROUGH[1] in frame.filename
    return PASS_THROUGH[0] if through else OTHER


def child(config: str, streams: int, deltas: int) -> None:
    """One configuration: bytes held per open stream by component, printed as JSON."""
    import relay_instructions as ri
    from instructions import sse_chunks

    app, transport, _ = ri.setup(config)
    release = asyncio.Event()
    chunks = sse_chunks(deltas)

    async def handle(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, headers={"content-type": "text/event-stream", "request-id": "req_mem"},
                               stream=_Held(chunks, release), request=request)

    transport.handle_async_request = handle  # type: ignore[method-assign]

    async def run() -> dict[str, Any]:
        release.set()
        warm = await ri.call(app, transport, chunks)  # imports, caches, the first connection
        assert not ri.check_body(*warm, deltas), ri.check_body(*warm, deltas)
        release.clear()
        gc.collect()
        tracemalloc.start(25)
        before = tracemalloc.take_snapshot()
        tasks = [asyncio.ensure_future(ri.call(app, transport, chunks)) for _ in range(streams)]
        for _ in range(3000):  # until every request is in the middle of its answer
            await asyncio.sleep(0.02)
            if _Held.waiting == streams:
                break
        else:
            raise RuntimeError(f"{_Held.waiting} of {streams} requests reached the middle of their answer")
        await asyncio.sleep(0.2)  # what each sends for the first half reaches the browser
        for _ in range(3):
            gc.collect()
        during = tracemalloc.take_snapshot()
        tracemalloc.stop()
        release.set()
        done = await asyncio.gather(*tasks)
        problems = [p for got in done for p in ri.check_body(*got, deltas)]
        held: Counter[str] = Counter()
        for stat in during.compare_to(before, "traceback"):
            held[component(stat.traceback)] += stat.size_diff
        return {"held": {k: v / streams for k, v in held.items()}, "problems": problems[:3]}

    print(json.dumps(asyncio.run(run())))


def measure(config: str, streams: int, deltas: int) -> dict[str, float]:
    done = subprocess.run([sys.executable, __file__, "--child", config, "--streams", str(streams),
                           "--deltas", str(deltas)], capture_output=True, text=True, cwd=HERE, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{config}: the child failed\n{done.stdout}{done.stderr[-3000:]}")
    got = json.loads(done.stdout.strip().splitlines()[-1])
    if got["problems"]:
        raise RuntimeError(f"{config}: what was relayed is wrong: {got['problems']}")
    return got["held"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=300, help="requests held open at once")
    parser.add_argument("--deltas", type=int, default=30, help="text deltas per answer (held after half)")
    parser.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.streams, args.deltas)
        return 0
    configs = [c for c in args.configs.split(",") if c]
    if unknown := set(configs) - set(CONFIGS):
        parser.error(f"unknown configurations {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
    if args.streams < 1 or args.deltas < 2:
        parser.error("--streams takes 1 or more, --deltas 2 or more")
    import relay_instructions as ri

    found = {config: measure(config, args.streams, args.deltas) for config in configs}
    labels = [label for label, _ in COMPONENTS] + [PASS_THROUGH[0], OTHER]
    width = max(map(len, labels)) + 2
    print(f"Python allocations held per open relayed stream, bytes ({args.streams} streams open at once, each "
          f"held after {args.deltas // 2} of {args.deltas} text deltas; tracemalloc, by the innermost "
          f"frame of a known component)")
    print(" " * width + "".join(f"{ri.CONFIGS[c][:26]:>28}" for c in configs))
    for label in labels:
        values = [found[c].get(label, 0.0) for c in configs]
        if any(abs(v) >= 50 for v in values):
            print(f"{label:<{width}}" + "".join(f"{v:>28,.0f}" for v in values))
    totals = {c: sum(v for k, v in found[c].items() if not k.startswith("browser")) for c in configs}
    print(f"{'all but the browser':<{width}}" + "".join(f"{totals[c]:>28,.0f}" for c in configs))
    if "baseline" in totals:
        for c in configs:
            if c != "baseline":
                print(f"{ri.CONFIGS[c]} - baseline: {(totals[c] - totals['baseline']) / 1024:+.1f} KiB per stream")
    return 0


if __name__ == "__main__":
    sys.exit(main())
