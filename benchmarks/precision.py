"""Budget firing precision: how late after its expiry a budget fires, and the span ends.

For each budget (first_token on a silent start, idle on a stream that goes silent after three
deltas, deadline on the same), sync and async, `--runs` streams: lateness = when the caller got
`StreamTimeout` minus when the budget expired (from the request for first_token and deadline, from
the last content the caller received for idle), and the span's end minus the same expiry.
The target is 20 ms on an idle machine.

    python benchmarks/precision.py [--runs 20] [--budget 0.3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

import anthropic
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from _server import endpoint
from streamscope import AnthropicInstrumentor, Budgets, StreamTimeout

PARAMS = {"model": "claude-bench", "max_tokens": 1024, "messages": [{"role": "user", "content": "go"}]}
CASES = {"first_token": "silent_start", "idle": "quick_stall", "deadline": "quick_stall"}


def budgets_for(name: str, seconds: float) -> Budgets:
    return Budgets(**{name: seconds})


def expected_expiry(name: str, sent: float, last_content: float | None, seconds: float) -> float:
    return (last_content if name == "idle" and last_content is not None else sent) + seconds


def sync_once(client: anthropic.Anthropic, name: str, seconds: float) -> tuple[float, float]:
    sent, last = time.monotonic(), None
    try:
        for event in client.messages.create(**PARAMS, stream=True):
            if event.type == "content_block_delta":
                last = time.monotonic()
    except StreamTimeout:
        raised = time.monotonic()
        return sent, raised - expected_expiry(name, sent, last, seconds)
    raise AssertionError("the budget did not fire")


async def async_once(client: anthropic.AsyncAnthropic, name: str, seconds: float) -> tuple[float, float]:
    sent, last = time.monotonic(), None
    try:
        async for event in await client.messages.create(**PARAMS, stream=True):
            if event.type == "content_block_delta":
                last = time.monotonic()
    except StreamTimeout:
        raised = time.monotonic()
        return sent, raised - expected_expiry(name, sent, last, seconds)
    raise AssertionError("the budget did not fire")


async def async_runs(url: str, runs: int, name: str, seconds: float, sent_at: list[float], raised: list[float]) -> None:
    client = anthropic.AsyncAnthropic(base_url=url, api_key="b", max_retries=0)
    for _ in range(runs):
        sent, late = await async_once(client, name, seconds)
        sent_at.append(sent)
        raised.append(late)
    await client.close()


def ms(values: list[float]) -> str:
    values = sorted(v * 1000 for v in values)
    p99 = values[min(len(values) - 1, int(len(values) * 0.99))]
    return f"median {statistics.median(values):5.1f}  p99 {p99:5.1f}  max {values[-1]:5.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--budget", type=float, default=0.3, help="seconds (the deadline gets this + 0.2)")
    args = parser.parse_args(argv)
    instrumentor = AnthropicInstrumentor()
    print(f"lateness after a budget's expiry, ms ({args.runs} runs each): when the caller got StreamTimeout, "
          f"and when the span ended")
    with endpoint(10) as base:
        for mode in ("sync", "async"):
            for name, scenario in CASES.items():
                seconds = args.budget + (0.2 if name == "deadline" else 0.0)
                spans = InMemorySpanExporter()
                provider = TracerProvider()
                provider.add_span_processor(SimpleSpanProcessor(spans))
                instrumentor.instrument(tracer_provider=provider, budgets=budgets_for(name, seconds))
                raised: list[float] = []
                sent_at: list[float] = []
                try:
                    if mode == "sync":
                        client = anthropic.Anthropic(base_url=base + scenario, api_key="b", max_retries=0)
                        for _ in range(args.runs):
                            sent, late = sync_once(client, name, seconds)
                            sent_at.append(sent)
                            raised.append(late)
                    else:
                        asyncio.run(async_runs(base + scenario, args.runs, name, seconds, sent_at, raised))
                finally:
                    instrumentor.uninstrument()
                # The span ends at the firing. From the request, its duration is the budget plus the
                # lateness for first_token and deadline; idle runs from the last content instead.
                span_late = [(s.end_time - s.start_time) / 1e9 - seconds for s in spans.get_finished_spans()]
                span_cell = ms(span_late) if name != "idle" else "(from the last content: see the caller)"
                print(f"{mode:5} {name:11}  caller: {ms(raised)}   span end: {span_cell}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
