"""The demo: a workload through the real SDK against the embedded simulator, streamscope on.

Requests go through `anthropic.AsyncAnthropic` with budgets per model and route, a bounded number
in flight at once; metrics are served on `/metrics` while it runs. What comes out is read back
from the exported spans, exactly as a tracing backend would see them. Beside it, the demo page
(demo_page.py) relays answers to a browser with `streamscope.serve.relay()`, and the workload reads
that page's relay endpoint over HTTP too. Every call is priced at the workload's `PRICES` (the
simulated models at Claude Sonnet 4.5's rates), so the spans carry `streamscope.cost.usd`.
"""

from __future__ import annotations

import asyncio
import errno
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType

import anthropic
import httpx2
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

from . import demo_page
from .workload import PRICES, Request, scaled_budgets

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
    relayed: int = 0
    """Reads of the demo page's relay endpoint the workload made."""


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


class Demo:
    """What a demo run needs, up until `close()`: telemetry, streamscope on, the simulator playing
    `requests`, and the demo page (on `page_port`, or any free port when that one is taken or 0;
    None: no page, and no reads of it). The page and the instrumentation stay up after `run()`,
    so the page keeps relaying. `prices` are `instrument(prices=...)`: the workload's by default."""

    def __init__(self, requests: Sequence[Request], *, scale: float, prometheus_port: int | None = None,
                 otlp: bool = False, budgets: Mapping[str, Budgets] | BudgetTable | None = None,
                 page_port: int | None = 0, prices: Mapping[str, Mapping[str, float]] | None = None) -> None:
        self.requests = list(requests)
        self.scale = scale
        self.spans = InMemorySpanExporter()
        self.metrics = InMemoryMetricReader()
        self.telemetry = setup("streamscope-demo", otlp=otlp, prometheus_port=prometheus_port, set_global=False,
                               metric_readers=[self.metrics], span_processors=[SimpleSpanProcessor(self.spans)])
        self.instrumentor = AnthropicInstrumentor()
        self.instrumented = False
        self.page: demo_page.Page | None = None
        try:
            self.sim = Simulator([r.scenario for r in self.requests], time_scale=scale)
            if budgets is None:
                budgets = {**scaled_budgets(scale), f"route:{demo_page.ROUTE}": demo_page.BUDGETS}
            self.instrumentor.instrument(tracer_provider=self.telemetry.tracer_provider,
                                         meter_provider=self.telemetry.meter_provider, budgets=budgets,
                                         prices=PRICES if prices is None else prices)
            self.instrumented = True
            self.sim.start()
            if page_port is not None:
                self.page = demo_page.Page(self.sim, scale, page_port)
                try:
                    self.page.start()
                except OSError as error:
                    if not page_port or error.errno not in (errno.EADDRINUSE, errno.EACCES):
                        raise
                    self.page = demo_page.Page(self.sim, scale, 0).start()  # taken: any free port
        except BaseException:
            self.close()
            self.telemetry.shutdown()
            raise

    def __enter__(self) -> Demo:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop the page and the simulator, turn streamscope off (the telemetry stays: the Run's)."""
        try:
            if self.page is not None:
                self.page.stop()
            if hasattr(self, "sim"):
                self.sim.stop()
        finally:
            if self.instrumented:
                self.instrumentor.uninstrument()
                self.instrumented = False

    def run(self, *, concurrency: int = 32, progress: Callable[[Request], None] | None = None) -> Run:
        """Every request, `concurrency` at a time, and a cycle of reads of the page per 50 requests."""
        requests, sim = self.requests, self.sim
        cycles = demo_page.cycles(len(requests)) if self.page is not None else 0
        failed_reads = 0

        async def all_requests() -> None:
            nonlocal failed_reads
            slots = asyncio.Semaphore(concurrency)
            finished = 0
            moved = asyncio.Condition()
            async with anthropic.DefaultAsyncHttpxClient() as http_client, \
                    httpx2.AsyncClient(timeout=60) as browser:

                async def one(request: Request) -> None:
                    nonlocal finished
                    async with slots:
                        await send(sim, request, http_client)
                    if progress is not None:
                        progress(request)
                    async with moved:
                        finished += 1
                        moved.notify_all()

                async def reads(cycle: int) -> int:
                    """The cycle's reads, spread over the run: after its share of the requests ended."""
                    assert self.page is not None
                    async with moved:
                        await moved.wait_for(lambda: finished >= cycle * len(requests) // cycles)
                    return await demo_page.browse(self.page.url, browser)

                workload = asyncio.gather(*(one(r) for r in requests))
                failed_reads = sum(await asyncio.gather(*(reads(c) for c in range(cycles))))
                await workload
            if self.page is not None:
                await asyncio.to_thread(self.page.wait_idle)  # a reader that left: its stream ends after it

        asyncio.run(all_requests())
        number_of = {log.request_id: int(log.headers.get(DEMO_HEADER, -1)) for log in sim.requests}
        by_number = {number_of.get(str((s.attributes or {}).get("anthropic.request.id")), -1): s
                     for s in self.spans.get_finished_spans()}
        results = [(r, by_number[r.number]) for r in requests if r.number in by_number]
        missing = [r for r in requests if r.number not in by_number]
        relayed = cycles * len(demo_page.CYCLE) - failed_reads
        return Run(results, self.scale, self.telemetry, self.metrics, missing, relayed)


def run(requests: Sequence[Request], *, scale: float, concurrency: int = 32, prometheus_port: int | None = None,
        otlp: bool = False, budgets: Mapping[str, Budgets] | BudgetTable | None = None,
        progress: Callable[[Request], None] | None = None, page_port: int | None = 0) -> Run:
    """Run `requests` against a fresh simulator; `scale` multiplies every scripted delay and budget.

    `budgets` (a mapping as for `instrument()`, or a `BudgetTable` such as `BudgetTable.from_toml`
    of what `streamscope suggest` wrote) replaces the scaled workload budgets and is used as given:
    its seconds are real seconds, the scale the simulator's delays already run in. The demo page
    is served on `page_port` while the run lasts (None: no page, and no reads of it).
    """
    with Demo(requests, scale=scale, prometheus_port=prometheus_port, otlp=otlp, budgets=budgets,
              page_port=page_port) as demo:
        return demo.run(concurrency=concurrency, progress=progress)
