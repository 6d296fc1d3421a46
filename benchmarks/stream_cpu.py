"""Client CPU per streamed event: the bare SDK, streamscope, and its peers, side by side.

Whole streams through the real SDK from a local endpoint in another process. Configurations
are alternated stream by stream in one process (each instrumented and uninstrumented around its
own stream), so the machine's noise hits them alike, and the *paired* differences to the bare
SDK are reported as medians with their interquartile range. Every configuration that records
spans gets the same OpenTelemetry SDK tracer provider (no exporter), so span cost is alike too.
Peers are measured where they are installed (`make bench` installs them in a separate virtualenv,
since their entry points would also turn them on under `opentelemetry-instrument`).
Whole-stream timings on a shared machine resolve about 2 µs/event; `micro.py` resolves less.

    python benchmarks/stream_cpu.py [--events 5000] [--samples 40] [--paths ...] [--configs ...]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
from opentelemetry.sdk.trace import TracerProvider

from _server import endpoint
from streamscope import AnthropicInstrumentor, Budgets
from streamscope.adapters.stainless.layers import FLAGS

PARAMS = {"model": "claude-bench", "max_tokens": 8192, "messages": [{"role": "user", "content": "go"}]}
BUDGETS = Budgets(first_token=60, idle=30, deadline=600)
PATHS = ("sync create", "sync stream()", "sync next()", "async create", "async stream()", "async anext()")
PEERS = {  # configuration: (module, instrumentor class) — installed or not
    "sdk's own tracing": None,
    "openllmetry": ("opentelemetry.instrumentation.anthropic", "AnthropicInstrumentor"),
    "openinference": ("openinference.instrumentation.anthropic", "AnthropicInstrumentor"),
    "otel genai-anthropic": ("opentelemetry.instrumentation.genai.anthropic", "AnthropicInstrumentor"),
}


Table = dict[str, dict[str, "list[float] | None"]]
"""Configuration: path: µs per event, one a sample."""


@dataclass
class Config:
    name: str
    start: Callable[[], None]
    stop: Callable[[], None]
    sdk_tracing: bool = False


METERS: list[Any] = [None]
"""The meter provider every instrumentation is given (`--metrics`): an SDK `MeterProvider` with an
in-memory reader, as a user of the dashboards runs it, or None (metrics off)."""


def use_metrics(mode: str) -> str:
    """Set `METERS` for `--metrics` (sdk or off); what the tables' headings say of it."""
    if mode == "off":
        METERS[0] = None
        return "metrics off (no meter provider)"
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    METERS[0] = MeterProvider(metric_readers=[InMemoryMetricReader()], shutdown_on_exit=False)
    return "metrics on (an SDK MeterProvider with a reader)"


def bare_and_ours(ours: Any, provider: TracerProvider) -> list[Config]:
    """The bare SDK, then streamscope's instrumentor `ours` observing and enforcing budgets."""
    return [
        Config("bare SDK", lambda: None, lambda: None),
        Config("streamscope", lambda: ours.instrument(tracer_provider=provider, meter_provider=METERS[0]),
               ours.uninstrument),
        Config("streamscope+budgets", lambda: ours.instrument(tracer_provider=provider, budgets=BUDGETS,
                                                              meter_provider=METERS[0]),
               ours.uninstrument),
    ]


def configs(provider: TracerProvider, wanted: list[str]) -> list[Config]:
    ours = AnthropicInstrumentor()
    found = [
        *bare_and_ours(ours, provider),
        Config("streamscope, over SDK layers", lambda: _over_the_sdks_layers(ours, provider), ours.uninstrument),
        Config("streamscope own work", lambda: _the_sdks_parser(ours, provider), ours.uninstrument),
        Config("sdk's own tracing", lambda: None, lambda: None, sdk_tracing=True),
    ]
    for name, where in PEERS.items():
        if where is None:
            continue
        try:
            peer = getattr(importlib.import_module(where[0]), where[1])()
        except Exception:
            print(f"({name}: not installed, not measured)")
            continue
        found.append(Config(name, lambda p=peer: p.instrument(tracer_provider=provider, meter_provider=METERS[0]),
                            lambda p=peer: p.uninstrument()))
    return [c for c in found if not wanted or c.name in wanted or c.name == "bare SDK"]


def _over_the_sdks_layers(ours: AnthropicInstrumentor, provider: TracerProvider) -> None:
    """streamscope observing, its generators wrapping the SDK's pass-through layers instead of
    taking their place (as on an SDK whose layers it does not know): what taking it saves."""
    ours.instrument(tracer_provider=provider, meter_provider=METERS[0])
    for name in FLAGS:
        setattr(ours._adapter.layers, name, False)


def _the_sdks_parser(ours: AnthropicInstrumentor, provider: TracerProvider) -> None:
    """streamscope observing, with the SDK's own `__stream__` left to run (as on an SDK line whose
    `__stream__` it does not know): streamscope's own work, without the SDK work it saves."""
    ours.instrument(tracer_provider=provider, meter_provider=METERS[0])
    ours._adapter.layers.stream = ours._adapter.layers.astream = False


class NotAnIterator(Exception):
    """The configuration's stream has no `__next__`/`__anext__` (a peer's proxy hides it):
    `next()` on it fails for its users too."""


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
    elif path == "sync next()":
        stream = sync.messages.create(**PARAMS, stream=True)
        if not hasattr(type(stream), "__next__"):
            stream.close()
            raise NotAnIterator
        while next(stream, None) is not None:
            count += 1
    else:
        async def run() -> int:
            n = 0
            if path == "async create":
                async for _ in await aclient.messages.create(**PARAMS, stream=True):
                    n += 1
            elif path == "async anext()":
                stream = await aclient.messages.create(**PARAMS, stream=True)
                if not hasattr(type(stream), "__anext__"):
                    await stream.close()
                    raise NotAnIterator
                while await anext(stream, None) is not None:
                    n += 1
            else:
                async with aclient.messages.stream(**PARAMS) as s:
                    async for _ in s:
                        n += 1
            return n

        count = loop.run_until_complete(run())
    return time.process_time() - start, count


def paired(chosen: list[Config], paths: list[str], samples: int,
           run: Callable[[Config, str], tuple[float, int]], rng: random.Random) -> Table:
    """Per configuration and path, µs per event: the bare SDK's (the first configuration), then
    what each other adds to it, paired sample by sample (None: its stream is no iterator).
    `run(config, path)` reads one whole stream between the configuration's `start` and `stop`:
    (client CPU seconds, events)."""
    table: Table = {c.name: {} for c in chosen}
    for path in paths:
        per_event: dict[str, list[float]] = {c.name: [] for c in chosen}
        broken: set[str] = set()
        for sample in range(samples + 2):  # the first two warm up connections and caches
            order = list(chosen)
            rng.shuffle(order)
            for config in order:
                if config.name in broken:
                    continue
                config.start()
                try:
                    cpu, events = run(config, path)
                except NotAnIterator:
                    broken.add(config.name)
                    continue
                finally:
                    config.stop()
                if sample >= 2:
                    per_event[config.name].append(cpu / events * 1e6)
        bare = per_event[chosen[0].name]
        for config in chosen:
            table[config.name][path] = None if config.name in broken else (
                bare if config is chosen[0] else [x - b for x, b in zip(per_event[config.name], bare)])
        print(f"({path}: measured)", file=sys.stderr, flush=True)
    return table


def show(table: Table, chosen: list[Config], paths: list[str]) -> None:
    print(f"{'':30}" + "".join(f"{path:>23}" for path in paths))
    for config in chosen:
        label = config.name if config is chosen[0] else "+ " + config.name
        cells = (table[config.name][path] for path in paths)
        print(f"{label:30}" + "".join(f"{'next() fails' if v is None else spread(v):>23}" for v in cells))


def spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=4) if len(values) >= 4 else [min(values), 0.0, max(values)]
    return f"{statistics.median(values):6.2f} [{q[0]:5.2f},{q[2]:5.2f}]"


def arguments(doc: str, paths: tuple[str, ...]) -> argparse.ArgumentParser:
    """The options every whole-stream benchmark takes."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--samples", type=int, default=40, help="paired streams per configuration and path")
    parser.add_argument("--paths", default=",".join(paths))
    parser.add_argument("--configs", default="", help="comma-separated configuration names (default: all)")
    parser.add_argument("--metrics", choices=("sdk", "off"), default="sdk",
                        help="an SDK MeterProvider with a reader for every instrumentation (as the dashboards' "
                             "users run), or none")
    return parser


def close(clients: Any, loop: asyncio.AbstractEventLoop) -> None:
    """Each (sync, async) client pair closed, the async one on `loop`: collected later, the SDK
    would close it on another."""
    for sync, aclient in clients:
        sync.close()
        loop.run_until_complete(aclient.close())


def main(argv: list[str] | None = None) -> int:
    args = arguments(__doc__, PATHS).parse_args(argv)
    metrics = use_metrics(args.metrics)
    provider = TracerProvider()
    loop = asyncio.new_event_loop()
    rng = random.Random(1)
    with endpoint(args.events) as base:
        url = base + "long"
        clients: dict[bool, tuple[anthropic.Anthropic, anthropic.AsyncAnthropic]] = {}
        for traced in (False, True):
            option: Any = {"tracer_provider": provider} if traced else False
            clients[traced] = (anthropic.Anthropic(base_url=url, api_key="bench", max_retries=0, open_telemetry=option),
                               anthropic.AsyncAnthropic(base_url=url, api_key="bench", max_retries=0,
                                                        open_telemetry=option))
        chosen = configs(provider, [c for c in args.configs.split(",") if c])
        paths = [p for p in args.paths.split(",") if p]
        print(f"client CPU per streamed event, µs: the bare SDK's, then what each configuration adds to it "
              f"(paired), median [q1,q3] of {args.samples} samples, {args.events} text deltas per stream; {metrics}")

        def run(config: Config, path: str) -> tuple[float, int]:
            sync, aclient = clients[config.sdk_tracing]
            return one_stream(path, sync, aclient, loop)

        show(paired(chosen, paths, args.samples, run, rng), chosen, paths)
        close(clients.values(), loop)
    loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
