"""Instructions per streamed event (callgrind): the bare SDK, its own tracing, and streamscope.

The bare SDK, the SDK's own tracing, and streamscope observing or enforcing budgets, side by side,
counted by valgrind's callgrind, so the machine's load does not change the figures.

The workload is the same in every configuration: `client.messages.create(..., stream=True)` on
the sync client, read to its end with a plain `for event in stream:` loop. The stream is a
Messages stream as the API sends it (message_start, a text block of N text deltas,
message_delta with usage, message_stop: N + 5 events), replayed by an `httpx2.BaseTransport`
subclass handed to the client, one server-sent event per body chunk, the same chunks every run:
no network, no timers, no threads of the benchmark's own (with budgets, streamscope's watchdog
thread waits on its condition). The configurations:

* bare SDK: a client with `open_telemetry=False`, and no tracer provider anywhere;
* sdk's own tracing: the client given `open_telemetry={"tracer_provider": provider}`;
* streamscope observe-only: `AnthropicInstrumentor().instrument(tracer_provider=provider)`;
* streamscope budgets: the same with `budgets=Budgets(first_token=60, idle=30, deadline=600)`.

`provider` is an OpenTelemetry SDK `TracerProvider` exporting to memory, and each child checks
its spans after reading: one per stream, the SDK's `anthropic.messages.create` or streamscope's,
with the stream's output tokens (content events) on it, and none from the other side — so no
figure is of a tracer that records nothing.

Each configuration runs in a fresh interpreter under `valgrind --tool=callgrind` (address-space
randomisation off, PYTHONHASHSEED=0, so runs repeat), once reading `--small` text deltas and
once `--large`. Before the measured stream the child reads a warm-up stream, seeds `random`
(span ids) and collects garbage (so the collector's counters start alike), then calls
`os.getppid()` and, after the stream, `os.getpgrp()`: callgrind zeroes its counts on entering the
one and writes them out on entering the other, so start-up, imports, instrumenting and warming
up are not counted. Instructions per
event are the slope (I(large) - I(small)) / (large - small), so what is paid once per stream
(the request, the span's end and export) cancels too; what a configuration adds is its slope
minus the bare SDK's.

Layouts: CPython 3.11 caches attribute look-ups in a 4,096-entry table indexed by the type's
version tag and the address of the name, so which look-ups collide there (and miss on every
event) is an accident of the process: what was allocated and looked up before. Such accidents
move a configuration's instructions per event by a thousand or more from one process layout to
another, with the same code, where runs in one layout repeat to within about 100;
`--layouts N` measures N layouts — layout k's interpreter makes 40 * k throwaway classes before
it runs this file — and reports the median over them, with their range. CPython runs several
times more instructions under valgrind than natively: compare the figures with each other, not
with timings.

    python benchmarks/instructions.py [--small 500] [--large 5500] [--configs bare,sdk,observe,budgets]
                                      [--repeats 2] [--layouts 1] [--jobs 2]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx2

HERE = Path(__file__).resolve().parent
PARAMS: dict[str, Any] = {"model": "claude-bench", "max_tokens": 8192, "messages": [{"role": "user", "content": "go"}]}
WARMUP = 100
"""Text deltas in the warm-up stream read before each measured one."""

CONFIGS = {  # key: label
    "bare": "bare SDK",
    "sdk": "sdk's own tracing",
    "observe": "streamscope observe-only",
    "budgets": "streamscope budgets",
}
TARGETS = {"observe": 0.5, "budgets": 0.6}
"""At most this fraction of what the SDK's own tracing adds per event."""
REPEAT_TOLERANCE = 0.005
ZERO, DUMP = "getppid", "getpgrp"
"""libc functions nothing else here calls: the child calls them (`os.getppid()`, `os.getpgrp()`)
just before and after each measured stream, and callgrind zeroes its counts on entering the
first and writes them out on entering the second."""


# -- the workload (in the child) ------------------------------------------------------------

def _event(data: dict[str, Any]) -> bytes:
    return f"event: {data['type']}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def sse_chunks(deltas: int) -> list[bytes]:
    """A Messages stream with `deltas` text deltas, one server-sent event per chunk, as the API
    sends it (compact JSON on one `data:` line; the shapes of streamscope's simulator)."""
    usage = {"input_tokens": 25, "output_tokens": 1}
    start = {"id": "msg_bench", "type": "message", "role": "assistant", "content": [], "model": PARAMS["model"],
             "stop_reason": None, "stop_sequence": None, "usage": usage}
    delta = _event({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "tok "}})
    return [
        _event({"type": "message_start", "message": start}),
        _event({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        *[delta] * deltas,
        _event({"type": "content_block_stop", "index": 0}),
        _event({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {**usage, "output_tokens": deltas}}),
        _event({"type": "message_stop"}),
    ]


class _Body(httpx2.SyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    def __iter__(self) -> Iterator[bytes]:
        yield from self._chunks


class ReplayTransport(httpx2.BaseTransport):
    """Answers every request with a 200 `text/event-stream` whose body yields `chunks` one by one."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        assert request.url.path == "/v1/messages", request.url
        return httpx2.Response(200, headers={"content-type": "text/event-stream", "request-id": "req_bench"},
                               stream=_Body(self.chunks), request=request)


def read_stream(client: anthropic.Anthropic, transport: ReplayTransport, chunks: list[bytes]) -> int:
    """The measured workload: one streamed create, read to its end. Returns the events read."""
    transport.chunks = chunks
    count = 0
    for _ in client.messages.create(**PARAMS, stream=True):
        count += 1
    return count


def child(config: str, deltas: int) -> None:
    """One configuration, a warm-up stream and a measured one of `deltas` text deltas (under
    valgrind); then check the spans and print what was read and recorded, as JSON."""
    provider: Any = None
    exporter: Any = None
    if config != "bare":
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    transport = ReplayTransport()
    client = anthropic.Anthropic(api_key="x", base_url="http://bench.invalid", max_retries=0,
                                 http_client=httpx2.Client(transport=transport),
                                 open_telemetry={"tracer_provider": provider} if config == "sdk" else False)
    if config in ("observe", "budgets"):
        import streamscope

        budgets = streamscope.Budgets(first_token=60, idle=30, deadline=600) if config == "budgets" else None
        streamscope.AnthropicInstrumentor().instrument(tracer_provider=provider, budgets=budgets)
    warmup, measured = sse_chunks(WARMUP), sse_chunks(deltas)

    read_stream(client, transport, warmup)
    random.seed(0)  # the span ids the tracers draw: the same every run
    gc.collect()  # the collector's counts from here on are the same whatever start-up allocated
    os.getppid()  # ZERO: callgrind counts from here
    events = read_stream(client, transport, measured)
    os.getpgrp()  # DUMP: to here

    spans = [] if exporter is None else list(exporter.get_finished_spans())
    problems = check_spans(config, spans, deltas)
    if events != deltas + 5:
        problems.append(f"read {events} events, expected {deltas + 5}")
    print(json.dumps({"spans": [f"{s.instrumentation_scope.name}: {s.name}" for s in spans], "problems": problems}))


def check_spans(config: str, spans: list[Any], deltas: int) -> list[str]:
    """What is wrong with the spans `config` recorded for the warm-up and the measured stream."""
    if config == "bare":
        from opentelemetry import trace

        provider = type(trace.get_tracer_provider()).__name__
        return [] if provider == "ProxyTracerProvider" else [f"a global tracer provider is set: {provider}"]
    if config == "sdk":
        scope, count = "com.anthropic.sdk.python", "gen_ai.usage.output_tokens"
        named = all(s.name == "anthropic.messages.create" for s in spans)
    else:  # streamscope names its span after the operation and model ("chat claude-bench")
        scope, count = "streamscope", "streamscope.content_events"
        named = True
    found = [(s.instrumentation_scope.name, (s.attributes or {}).get(count)) for s in spans]
    if found == [(scope, WARMUP), (scope, deltas)] and named:
        return []
    return [f"spans {[(s.instrumentation_scope.name, s.name) for s in spans]} with {count} {[c for _, c in found]}, "
            f"expected two from {scope} with {WARMUP} and {deltas}"]


# -- measuring (in the parent) --------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    config: str
    deltas: int
    layout: int
    repeat: int
    instructions: int
    """Of the measured stream."""
    seconds: float


PAD = 40
"""Layout k's interpreter makes k * PAD throwaway classes (each looked up once, so each takes a
type version tag) before it runs this file."""
_BOOT = """\
import runpy, sys
_pad = [type(f"_Pad{i}", (), {"x": i}) for i in range(int(sys.argv[1]))]
for cls in _pad:
    cls.x
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def measure(config: str, deltas: int, layout: int, repeat: int) -> Run:
    """Instructions of one child's measured stream, under callgrind."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        out, log = Path(tmp) / "callgrind.out", Path(tmp) / "valgrind.log"
        interpreter = [sys.executable] + (["-c", _BOOT, str(layout * PAD)] if layout else [])
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
        # One dump at DUMP (part 1), then the one at exit: the measured stream is part 1's count.
        dumped = out.with_name(out.name + ".1").read_text()
        assert f"Trigger: --dump-before={DUMP}" in dumped, "no dump at the end of the measured stream"
        assert not out.with_name(out.name + ".2").exists(), f"{DUMP} was called elsewhere too"
        match = re.search(r"^summary:\s+(\d+)", dumped, flags=re.M)
        assert match, "no callgrind summary"
    run = Run(config, deltas, layout, repeat, int(match.group(1)), time.monotonic() - start)
    print(f"({CONFIGS[config]}, {deltas} deltas, layout {layout}, run {repeat + 1}: {run.instructions:,} "
          f"instructions, {run.seconds:.0f} s; spans: {', '.join(report['spans']) or 'none'})",
          file=sys.stderr, flush=True)
    return run


Slopes = dict[str, list[list[float]]]
"""Instructions per event, by configuration, then repeat, then layout."""


def slopes(runs: list[Run], configs: list[str], small: int, large: int, repeats: int, layouts: int) -> Slopes:
    total = {(r.config, r.deltas, r.layout, r.repeat): r.instructions for r in runs}
    return {c: [[(total[c, large, k, i] - total[c, small, k, i]) / (large - small) for k in range(layouts)]
                for i in range(repeats)] for c in configs}


def report(per_event: Slopes, small: int, large: int) -> None:
    bare = [statistics.median(by_layout) for by_layout in per_event["bare"]]
    repeats, layouts = len(bare), len(per_event["bare"][0])
    rows: dict[str, list[tuple[float, float, float]]] = {}  # config: per repeat, (median, lowest, highest)
    for config, by_repeat in per_event.items():
        base = [0.0] * repeats if config == "bare" else bare
        rows[config] = [(statistics.median(v) - b, min(v) - b, max(v) - b) for v, b in zip(by_repeat, base)]
    over = f", median over {layouts} layouts [lowest, highest]" if layouts > 1 else ""
    print(f"instructions per streamed event (valgrind callgrind; sync create(stream=True) read with a for loop; "
          f"slope between {small} and {large} text deltas{over}): the bare SDK's, then what each configuration adds")
    width = 28 if layouts > 1 else 12
    print(f"{'':28}" + "".join(f"{f'run {i + 1}':>{width}}" for i in range(repeats)))
    for config, cells in rows.items():
        label = CONFIGS[config] if config == "bare" else "+ " + CONFIGS[config]
        print(f"{label:28}" + "".join(f"{f'{m:,.0f} [{lo:,.0f}, {hi:,.0f}]' if layouts > 1 else f'{m:,.0f}':>{width}}"
                                      for m, lo, hi in cells))
    if "sdk" in rows:
        for config, target in TARGETS.items():
            if config not in rows:
                continue
            ratios = [ours[0] / sdk[0] for ours, sdk in zip(rows[config], rows["sdk"])]
            met = all(r <= target for r in ratios)
            print(f"{CONFIGS[config]} / {CONFIGS['sdk']}: " + " ".join(f"{r:.2f}x" for r in ratios)
                  + f" (target <= {target}x): {'met' if met else 'NOT met'}")
    if repeats > 1:
        worst = max(abs(a - b) / min(a, b) for by_repeat in per_event.values()
                    for other in by_repeat[1:] for a, b in zip(by_repeat[0], other))
        moved = max(max(m for m, _, _ in cells) - min(m for m, _, _ in cells) for cells in rows.values())
        verdict = "within" if worst <= REPEAT_TOLERANCE else "NOT within"
        print(f"repeats: instructions per event {verdict} {REPEAT_TOLERANCE:.1%} of run 1's (largest difference "
              f"{worst:.3%}); the bare SDK's figure and what each configuration adds moved by at most {moved:.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=500, help="text deltas in the smaller stream")
    parser.add_argument("--large", type=int, default=5500, help="text deltas in the larger stream")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"comma-separated, of {', '.join(CONFIGS)} (bare is always measured)")
    parser.add_argument("--repeats", type=int, default=2, help="times each measurement is made")
    parser.add_argument("--layouts", type=int, default=1, help="process layouts each measurement is made in")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="children under valgrind at once")
    parser.add_argument("--child", choices=CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--deltas", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.deltas)
        return 0
    if shutil.which("valgrind") is None or shutil.which("setarch") is None:
        print("valgrind (or setarch) is not installed: no instruction counts")
        return 0
    wanted = {c for c in args.configs.split(",") if c}
    if unknown := wanted - set(CONFIGS):
        parser.error(f"unknown configurations {sorted(unknown)}; choose from {', '.join(CONFIGS)}")
    configs = [c for c in CONFIGS if c in wanted or c == "bare"]
    jobs = [(c, n, k, i) for i in range(args.repeats) for k in range(args.layouts) for c in configs
            for n in (args.large, args.small)]
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        runs = list(pool.map(lambda job: measure(*job), jobs))
    print(f"({len(runs)} children under callgrind, {args.jobs} at a time: {time.monotonic() - start:.0f} s)",
          file=sys.stderr, flush=True)
    report(slopes(runs, configs, args.small, args.large, args.repeats, args.layouts), args.small, args.large)
    return 0


if __name__ == "__main__":
    sys.exit(main())
