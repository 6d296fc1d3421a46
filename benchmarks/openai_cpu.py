"""Client CPU per streamed event on the openai SDK: the bare SDK, streamscope, and OpenTelemetry's
OpenAI instrumentation, side by side.

`stream_cpu.py`'s method on the openai SDK: whole streams through the real SDK from the local
endpoint in another process (`_server.py`'s `long_chat` and `long_responses`: N text deltas back
to back), configurations alternated stream by stream in one process, each instrumented and
uninstrumented around its own stream, and the paired differences to the bare SDK reported as
medians with their interquartile range. Every configuration that records spans gets the same
OpenTelemetry SDK tracer provider (no exporter). The paths: Chat Completions and the Responses
API, `create(stream=True)` read with `for` / `async for`, and the chat `stream()` helper.

The targets are the ones streamscope has on the anthropic SDK: observe-only at most 0.5 µs of
client CPU per event, budgets at most 1 µs.

    python benchmarks/openai_cpu.py [--events 5000] [--samples 40] [--paths ...] [--configs ...]
"""

from __future__ import annotations

import asyncio
import importlib
import random
import statistics
import sys
import time
from typing import Any

import openai
from opentelemetry.sdk.trace import TracerProvider

from _server import endpoint
from instructions import use_openai_v2_overlay
from stream_cpu import METERS, Config, arguments, bare_and_ours, close, paired, show, use_metrics
from streamscope import OpenAIInstrumentor

CHAT: dict[str, Any] = {"model": "gpt-bench", "messages": [{"role": "user", "content": "go"}],
                        "stream_options": {"include_usage": True}}
RESPONSES: dict[str, Any] = {"model": "gpt-bench", "input": "go"}
PATHS = ("chat sync", "chat async", "chat stream()", "responses sync", "responses async")
PEER = ("opentelemetry.instrumentation.openai_v2", "OpenAIInstrumentor")
"""OpenTelemetry's OpenAI instrumentation (opentelemetry-instrumentation-openai-v2)."""
TARGETS = {"streamscope": 0.5, "streamscope+budgets": 1.0}
"""µs of client CPU per event, at most."""


def configs(provider: TracerProvider, wanted: list[str]) -> list[Config]:
    found = bare_and_ours(OpenAIInstrumentor(), provider)
    use_openai_v2_overlay()
    try:
        peer = getattr(importlib.import_module(PEER[0]), PEER[1])()
    except Exception as exc:  # not installed, or installed beside dependencies it does not work with
        print(f"(otel openai-v2: {type(exc).__name__}: {exc}; not measured)")
    else:
        found.append(Config("otel openai-v2",
                            lambda: peer.instrument(tracer_provider=provider, meter_provider=METERS[0]),
                            peer.uninstrument))
    return [c for c in found if not wanted or c.name in wanted or c.name == "bare SDK"]


def one_stream(path: str, clients: dict[str, Any], loop: asyncio.AbstractEventLoop) -> tuple[float, int]:
    """(client CPU seconds, events) for one whole stream."""
    api = path.split()[0]
    sync, aclient = clients[api]
    count = 0
    start = time.process_time()
    if path == "chat sync":
        for _ in sync.chat.completions.create(**CHAT, stream=True):
            count += 1
    elif path == "chat stream()":
        with sync.chat.completions.stream(**CHAT) as s:
            for _ in s:
                count += 1
    elif path == "responses sync":
        for _ in sync.responses.create(**RESPONSES, stream=True):
            count += 1
    else:
        async def run() -> int:
            n = 0
            if api == "chat":
                async for _ in await aclient.chat.completions.create(**CHAT, stream=True):
                    n += 1
            else:
                async for _ in await aclient.responses.create(**RESPONSES, stream=True):
                    n += 1
            return n

        count = loop.run_until_complete(run())
    return time.process_time() - start, count


def verdict(name: str, per_path: dict[str, list[float]], target: float) -> str:
    """Whether `name` is within `target` µs per event on every path, or, where the paired
    differences spread wider than the target, that these timings cannot tell."""
    medians = {path: statistics.median(values) for path, values in per_path.items()}
    worst = max(medians, key=medians.__getitem__)
    spread = max(q[2] - q[0] for q in (statistics.quantiles(v, n=4) if len(v) >= 4 else [min(v), 0.0, max(v)]
                                       for v in per_path.values()))
    found = f"{name}: at most {medians[worst]:.2f} µs per event ({worst}; target <= {target} µs)"
    if spread > target:
        return f"{found}: not resolved, the paired differences spread over {spread:.1f} µs (interquartile)"
    return f"{found}: {'met' if medians[worst] <= target else 'NOT met'}"


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, PATHS)
    args = parser.parse_args(argv)
    paths = [p for p in args.paths.split(",") if p]
    if unknown := set(paths) - set(PATHS):
        parser.error(f"unknown paths {sorted(unknown)}; choose from {', '.join(PATHS)}")
    metrics = use_metrics(args.metrics)
    provider = TracerProvider()
    loop = asyncio.new_event_loop()
    with endpoint(args.events) as base:
        clients = {api: (openai.OpenAI(base_url=f"{base}long_{api}/v1", api_key="bench", max_retries=0),
                         openai.AsyncOpenAI(base_url=f"{base}long_{api}/v1", api_key="bench", max_retries=0))
                   for api in ("chat", "responses")}
        chosen = configs(provider, [c for c in args.configs.split(",") if c])
        print(f"openai SDK: client CPU per streamed event, µs: the bare SDK's, then what each configuration "
              f"adds to it (paired), median [q1,q3] of {args.samples} samples, {args.events} text deltas per stream; "
              f"{metrics}")
        table = paired(chosen, paths, args.samples, lambda config, path: one_stream(path, clients, loop),
                       random.Random(1))
        show(table, chosen, paths)
        for name, target in TARGETS.items():
            if name in table:
                print(verdict(name, {path: table[name][path] or [0.0] for path in paths}, target))
        close(clients.values(), loop)
    loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
