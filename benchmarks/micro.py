"""streamscope's per-event path alone, resolved below a microsecond, in time and in instructions.

A recorded sequence of real SDK objects (the server-sent events and the events the SDK parsed
from them, from one real stream) is fed through the same code the hooks install — the ping
counter at `_iter_events` and the observer at `__iter__` (`_observed`, observe-only;
`_enforced`, budgets) — with timeit-style repetition, against the SDK's own layers there
(`Stream._iter_events` and `Stream.__iter__`, run over the same objects) without streamscope.
Where the installed SDK's layers are the plain pass-throughs the adapter knows, streamscope's
generators take their place, as the hooks do; else they run over them. No network, no SSE
parsing: what remains is exactly what streamscope adds per event.

`--callgrind` also counts instructions with valgrind: each path runs at two sizes in a fresh
interpreter, and the difference between the sizes, divided by the added events, is the path's
instructions per event; the machine's load does not change it.

    python benchmarks/micro.py [--events 5000] [--repeat 30] [--callgrind]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import pickle
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

import anthropic
from anthropic._streaming import ServerSentEvent
from opentelemetry.trace import NoOpTracer

from _server import endpoint
from streamscope.adapters import anthropic as adapter
from streamscope.budgets import Budgets, BudgetTable
from streamscope.enforcement import AsyncWatch, SyncWatch
from streamscope.pipeline import Pipeline

HERE = Path(__file__).resolve().parent
BUDGETS = Budgets(first_token=60, idle=30, deadline=600)


def record_events(count: int) -> tuple[list[Any], list[Any]]:
    """(server-sent events, parsed events) of one real stream from the local endpoint."""
    with endpoint(count) as base:
        client = anthropic.Anthropic(base_url=base + "long", api_key="bench", max_retries=0)
        events = list(client.messages.create(model="claude-bench", max_tokens=8192, stream=True,
                                             messages=[{"role": "user", "content": "go"}]))
    # One server-sent event per parsed event, as the SDK decodes them (pings would add a few more).
    sses = [ServerSentEvent(event=e.type, data=e.model_dump_json()) for e in events]
    return sses, events


def recorder(budgets: Budgets | None) -> Any:
    pipeline = Pipeline(NoOpTracer(), BudgetTable.from_config(budgets))
    rec = pipeline.open(pipeline.request(model="claude-bench"))
    rec.on_finish = None  # the per-event path, not the once-per-stream export
    return rec


class _Layers:
    """A stand-in for a `Stream`, with what the SDK's own per-event layers read: `_iterator` (the
    parsed events), `_observer` (off), `_decoder` and `response` (the server-sent events)."""

    _observer = anthropic.Stream._observer  # the SDK's own property: its per-event look-up

    def __init__(self, sses: list[Any], events: list[Any], is_async: bool = False) -> None:
        self._iterator = _aiter(events) if is_async else iter(events)
        self._decoder, self.response = self, self
        self._sses = sses

    def iter_bytes(self, _chunks: Any = None) -> Any:
        return iter(self._sses)

    def aiter_bytes(self, _chunks: Any = None) -> Any:
        return _aiter(self._sses)


def sdk_layers(sses: list[Any], events: list[Any]) -> tuple[Any, Any]:
    """The SDK's `Stream._iter_events` and `Stream.__iter__` over the recorded objects."""
    stand_in = _Layers(sses, events)
    return anthropic.Stream._iter_events(stand_in), anthropic.Stream.__iter__(stand_in)  # type: ignore[arg-type]


def ours(sses: list[Any], events: list[Any]) -> tuple[Any, Any]:
    """What streamscope's generators iterate: in place of the SDK's layers where this SDK's are the
    plain pass-throughs the adapter knows (as the hooks do), else over them."""
    layers = adapter._layers
    under = sdk_layers(sses, events)
    return (iter(sses) if layers.events else under[0]), (iter(events) if layers.iter else under[1])


def bare(sses: list[Any], events: list[Any]) -> None:
    server_sent, parsed = sdk_layers(sses, events)
    for _ in server_sent:
        pass
    for _ in parsed:
        pass


def observed(sses: list[Any], events: list[Any]) -> None:
    rec = recorder(None)
    server_sent, parsed = ours(sses, events)
    for _ in adapter._counted(server_sent, rec):
        pass
    for _ in adapter._observed(parsed, rec, None):
        pass


def enforced(sses: list[Any], events: list[Any]) -> None:
    rec = recorder(BUDGETS)
    watch = SyncWatch(rec, lambda: None)  # not handed to the watchdog: the per-event cost alone
    watch.started = True
    server_sent, parsed = ours(sses, events)
    for _ in adapter._counted(server_sent, rec):
        pass
    for _ in adapter._enforced(parsed, rec, watch, None):
        pass


async def _aiter(items: Iterable[Any]) -> AsyncIterator[Any]:
    for item in items:
        yield item


def asdk_layers(sses: list[Any], events: list[Any]) -> tuple[Any, Any]:
    stand_in = _Layers(sses, events, is_async=True)
    return anthropic.AsyncStream._iter_events(stand_in), anthropic.AsyncStream.__aiter__(stand_in)  # type: ignore[arg-type]


def aours(sses: list[Any], events: list[Any]) -> tuple[Any, Any]:
    layers = adapter._layers
    under = asdk_layers(sses, events)
    return (_aiter(sses) if layers.aevents else under[0]), (_aiter(events) if layers.aiter else under[1])


async def abare(sses: list[Any], events: list[Any]) -> None:
    server_sent, parsed = asdk_layers(sses, events)
    async for _ in server_sent:
        pass
    async for _ in parsed:
        pass


async def aobserved(sses: list[Any], events: list[Any]) -> None:
    rec = recorder(None)
    server_sent, parsed = aours(sses, events)
    async for _ in adapter._acounted(server_sent, rec):
        pass
    async for _ in adapter._aobserved(parsed, rec, None):
        pass


async def aenforced(sses: list[Any], events: list[Any]) -> None:
    rec = recorder(BUDGETS)
    watch = AsyncWatch(rec, asyncio.get_running_loop())
    watch.started = True
    rec.watch = watch
    server_sent, parsed = aours(sses, events)
    async for _ in adapter._acounted(server_sent, rec):
        pass
    async for _ in adapter._aenforced(parsed, rec, watch, None):
        pass
    watch.stop()


PATHS = {"sync": (bare, {"observe-only": observed, "budgets": enforced}),
         "async": (abare, {"observe-only": aobserved, "budgets": aenforced})}


def call(run: Any, sses: list[Any], events: list[Any]) -> None:
    if asyncio.iscoroutinefunction(run):
        asyncio.run(run(sses, events))
    else:
        run(sses, events)


def per_event(run: Any, sses: list[Any], events: list[Any], repeat: int) -> list[float]:
    """CPU µs per event for each of `repeat` passes."""
    out = []
    loop = asyncio.new_event_loop() if asyncio.iscoroutinefunction(run) else None
    for _ in range(repeat):
        start = time.process_time()
        if loop is not None:
            loop.run_until_complete(run(sses, events))
        else:
            run(sses, events)
        out.append((time.process_time() - start) / len(events) * 1e6)
    if loop is not None:
        loop.close()
    return out


# -- instruction counts -------------------------------------------------------------------------

def sdk_parse(sses: list[Any], _events: list[Any]) -> None:
    """The SDK's own work per event, for scale: a real `Stream` over the same bytes (no network)."""
    import httpx2
    from anthropic.types import RawMessageStreamEvent

    global _sdk_client, _sdk_body
    if _sdk_client is None:  # made once: a client and the bytes are not per-event costs
        _sdk_client = anthropic.Anthropic(api_key="bench", open_telemetry=False)
        _sdk_body = b"".join(f"event: {s.event}\ndata: {s.data}\n\n".encode() for s in sses)
    response = httpx2.Response(200, content=_sdk_body, request=httpx2.Request("POST", "http://127.0.0.1/v1/messages"))
    for _ in anthropic.Stream(cast_to=RawMessageStreamEvent, response=response, client=_sdk_client):
        pass


_sdk_client: Any = None
_sdk_body = b""


def _child(name: str, recorded: str, repeat: int) -> None:
    """Run one path `repeat` times over the recorded events (under valgrind), collector off."""
    with open(recorded, "rb") as f:
        sses, parsed = pickle.load(f)
    if name == "sdk":
        run: Any = sdk_parse
    else:
        base, runs = PATHS[name.split(":")[0]]
        run = base if name.endswith(":bare") else runs[name.split(":")[1]]
    gc.disable()
    for _ in range(repeat):
        call(run, sses, parsed)


def instructions(name: str, recorded: Path, repeat: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
                        "--child", name, "--recorded", str(recorded), "--repeat", str(repeat)],
                       check=True, capture_output=True, cwd=HERE, env={**os.environ, "PYTHONHASHSEED": "0"})
        match = re.search(r"^summary:\s+(\d+)", out.read_text(), flags=re.M)
        assert match, "no callgrind summary"
        return int(match.group(1))


def callgrind_table(sses: list[Any], events: list[Any], passes: int = 5) -> None:
    """Instructions per event: the slope between 1 and `passes` passes, so start-up cancels.

    Sync paths only (an event loop adds its own noise), and the SDK's own parsing for scale.
    Absolute counts under valgrind run high for CPython; compare them with each other.
    """
    def slope(name: str) -> float:
        return (instructions(name, recorded, passes) - instructions(name, recorded, 1)) / ((passes - 1) * len(events))

    with tempfile.TemporaryDirectory() as tmp:
        recorded = Path(tmp) / "events.pickle"
        recorded.write_bytes(pickle.dumps((sses, events)))
        print(f"instructions per event (valgrind callgrind, sync; slope between 1 and {passes} passes over "
              f"{len(events)} events):")
        bare_loop = slope("sync:bare")
        sdk = slope("sdk")
        added = {label: slope(f"sync:{label}") - bare_loop for label in PATHS["sync"][1]}
        print(f"the SDK's own work per event (bytes to parsed event) {sdk:.0f};   " + "   ".join(
            f"streamscope {label} +{value:.0f} ({value / sdk:.1%} of the SDK's)" for label, value in added.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--callgrind", action="store_true", help="also count instructions with valgrind")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--recorded", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    adapter._layers.check()  # as `instrument()` does: which SDK layers streamscope takes the place of
    if args.child:
        _child(args.child, args.recorded, args.repeat)
        return 0
    sses, events = record_events(args.events)
    sses, events = sses * 4, events * 4  # more work per timing, less timer granularity
    layers = adapter._layers
    placed = "in place of" if layers.iter and layers.events and layers.aiter and layers.aevents else "over"
    print(f"streamscope's per-event path, µs of CPU per event (median of {args.repeat} passes over "
          f"{len(events)} real events, ping counter included), against the SDK's own per-event layers "
          f"alone; streamscope's generators run {placed} them")
    for path, (base, runs) in PATHS.items():
        baseline = statistics.median(per_event(base, sses, events, args.repeat))
        cells = []
        for label, run in runs.items():
            samples = [s - baseline for s in per_event(run, sses, events, args.repeat)]
            q = statistics.quantiles(samples, n=4)
            cells.append(f"{label} +{statistics.median(samples):.3f} [{q[0]:.3f}, {q[2]:.3f}]")
        print(f"{path:6} SDK's layers alone {baseline:.3f}   " + "   ".join(cells))
    if args.callgrind:
        if shutil.which("valgrind") is None:
            print("valgrind is not installed: no instruction counts")
        else:
            n = min(len(events), 2000)
            callgrind_table(sses[:n], events[:n])
    return 0


if __name__ == "__main__":
    sys.exit(main())
