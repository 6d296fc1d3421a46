"""The demo: a workload through the real SDK against the embedded simulator, streamscope on.

Requests go through `anthropic.AsyncAnthropic` with budgets per model and route, a bounded number
in flight at once; metrics are served on `/metrics` while it runs. What comes out is read back
from the exported spans, exactly as a tracing backend would see them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import anthropic
from anthropic.types import MessageParam, ThinkingConfigParam
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streamscope.budgets.table import Budgets, BudgetTable
from streamscope.core.context import route
from streamscope.core.errors import StreamTimeout
from streamscope.instrumentor import AnthropicInstrumentor
from streamscope.simulator import Simulator
from streamscope.telemetry import Telemetry, setup

from .workload import Request, scaled_budgets

PROMPT: list[MessageParam] = [{"role": "user", "content": "Explain how streamed answers fail."}]
DEMO_HEADER = "x-streamscope-demo-request"


@dataclass
class Run:
    """What a demo run produced: each request with its span, and the telemetry behind them."""

    results: list[tuple[Request, ReadableSpan]]
    scale: float
    telemetry: Telemetry
    metrics: InMemoryMetricReader
    missing: list[Request] = field(default_factory=list)


async def send(sim: Simulator, request: Request, http_client: anthropic.DefaultAsyncHttpxClient) -> None:
    """Stream one request to its end the way an application would; failures are expected.

    Every client shares one connection pool, as an application's one client would: building an
    httpx client per request costs more CPU than its whole stream.
    """
    client = anthropic.AsyncAnthropic(base_url=sim.url(request.scenario.name), api_key="demo", max_retries=0,
                                      default_headers={DEMO_HEADER: str(request.number)}, http_client=http_client)
    thinking: ThinkingConfigParam | anthropic.Omit = anthropic.omit
    if request.thinking_budget:
        thinking = {"type": "enabled", "budget_tokens": request.thinking_budget}
    try:
        with route(request.route):
            async with client.messages.stream(model=request.model, max_tokens=request.max_tokens, messages=PROMPT,
                                              thinking=thinking) as stream:
                texts = 0
                async for event in stream:
                    if event.type == "text":
                        texts += 1
                        if request.give_up_after is not None and texts >= request.give_up_after:
                            break
    except (StreamTimeout, anthropic.APIError, OSError, Exception):
        pass  # the span says what happened: that is what the demo is about


def run(requests: Sequence[Request], *, scale: float, concurrency: int = 32, prometheus_port: int | None = None,
        otlp: bool = False, budgets: Mapping[str, Budgets] | BudgetTable | None = None,
        progress: Callable[[Request], None] | None = None) -> Run:
    """Run `requests` against a fresh simulator; `scale` multiplies every scripted delay and budget.

    `budgets` (a mapping as for `instrument()`, or a `BudgetTable` such as `BudgetTable.from_toml`
    of what `streamscope suggest` wrote) replaces the scaled workload budgets and is used as given:
    its seconds are real seconds, the scale the simulator's delays already run in.
    """
    spans = InMemorySpanExporter()
    metrics = InMemoryMetricReader()
    telemetry = setup("streamscope-demo", otlp=otlp, prometheus_port=prometheus_port, set_global=False,
                      metric_readers=[metrics], span_processors=[SimpleSpanProcessor(spans)])
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider,
                            budgets=budgets if budgets is not None else scaled_budgets(scale))
    try:
        with Simulator([r.scenario for r in requests], time_scale=scale) as sim:
            async def all_requests() -> None:
                slots = asyncio.Semaphore(concurrency)
                async with anthropic.DefaultAsyncHttpxClient() as http_client:

                    async def one(request: Request) -> None:
                        async with slots:
                            await send(sim, request, http_client)
                        if progress is not None:
                            progress(request)

                    await asyncio.gather(*(one(r) for r in requests))

            asyncio.run(all_requests())
            number_of = {log.request_id: int(log.headers.get(DEMO_HEADER, -1)) for log in sim.requests}
    finally:
        instrumentor.uninstrument()
    by_number = {number_of.get(str((s.attributes or {}).get("anthropic.request.id")), -1): s
                 for s in spans.get_finished_spans()}
    results = [(r, by_number[r.number]) for r in requests if r.number in by_number]
    missing = [r for r in requests if r.number not in by_number]
    return Run(results, scale, telemetry, metrics, missing)
