"""The demo workload: scripted requests through the real SDK against the embedded simulator.

One request per class label, each through `anthropic.AsyncAnthropic` with streamscope on,
budgets per route, all in flight at once. What comes out is read back from the exported
spans, exactly as a user's tracing backend would see them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import anthropic
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from .budgets import Budgets
from .context import route
from .errors import StreamTimeout
from .instrumentor import AnthropicInstrumentor
from .simulator import Simulator

PROMPT = [{"role": "user", "content": "Explain how streamed answers fail."}]

BUDGETS: dict[str, Budgets] = {
    "default": Budgets(first_token=2.0, idle=0.6),
    "model:claude-sim-reasoning*": Budgets(first_token=4.0),
    "route:interactive": Budgets(deadline=1.0),
}
"""The demo's budgets: seconds, scaled like the simulator's scripts."""


@dataclass(frozen=True)
class DemoRequest:
    """One scripted request: which simulated stream, how it is asked for, how the caller behaves."""

    scenario: str
    expect: str
    model: str = "claude-sim-chat"
    route: str | None = None
    thinking_budget: int | None = None
    max_tokens: int = 1024
    give_up_after: int | None = None
    """The caller closes the stream after this many text events (a user navigating away)."""


FIRST_DEMO: tuple[DemoRequest, ...] = (
    DemoRequest("complete", "complete"),
    DemoRequest("thinking", "complete", model="claude-sim-reasoning", thinking_budget=2048, max_tokens=4096),
    DemoRequest("truncated", "truncated"),
    DemoRequest("budget_exhausted", "budget_exhausted", model="claude-sim-reasoning", thinking_budget=1024),
    DemoRequest("silently_unverified", "silently_unverified", model="claude-sim-reasoning", thinking_budget=4096,
                max_tokens=8192),
    DemoRequest("refused", "refused"),
    DemoRequest("slow_thinking", "deadline_in_thinking", model="claude-sim-reasoning", route="interactive",
                thinking_budget=2048, max_tokens=4096),
    DemoRequest("slow_answer", "deadline_in_answer", route="interactive"),
    DemoRequest("silent_start", "stalled_before_first_content"),
    DemoRequest("pinging_stall", "stalled_mid_stream"),
    DemoRequest("inband_error", "upstream_error"),
    DemoRequest("slow_answer", "cancelled", give_up_after=3),
)


DEMO_HEADER = "x-streamscope-demo-request"


async def send(sim: Simulator, request: DemoRequest, number: int) -> None:
    """Stream one request to its end, the way an application would; failures are expected."""
    client = anthropic.AsyncAnthropic(base_url=sim.url(request.scenario), api_key="demo", max_retries=0,
                                      default_headers={DEMO_HEADER: str(number)})
    params: dict[str, object] = {"model": request.model, "max_tokens": request.max_tokens, "messages": PROMPT}
    if request.thinking_budget:
        params["thinking"] = {"type": "enabled", "budget_tokens": request.thinking_budget}
    try:
        if request.route:
            with route(request.route):
                await _consume(client, params, request)
        else:
            await _consume(client, params, request)
    except (StreamTimeout, anthropic.APIError, OSError, Exception):
        pass  # the span says what happened; the demo is about that
    finally:
        await client.close()


async def _consume(client: anthropic.AsyncAnthropic, params: dict[str, object], request: DemoRequest) -> None:
    async with client.messages.stream(**params) as stream:  # type: ignore[arg-type]
        texts = 0
        async for event in stream:
            if event.type == "text":
                texts += 1
                if request.give_up_after is not None and texts >= request.give_up_after:
                    return


def run(requests: Sequence[DemoRequest] = FIRST_DEMO, *, time_scale: float = 1.0) -> list[tuple[DemoRequest, ReadableSpan]]:
    """Run `requests` concurrently; return each with its span, in workload order."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=provider, budgets=BUDGETS)
    try:
        with Simulator(time_scale=time_scale) as sim:
            async def all_requests() -> None:
                await asyncio.gather(*(send(sim, r, i) for i, r in enumerate(requests)))

            asyncio.run(all_requests())
            number_of = {log.request_id: int(log.headers.get(DEMO_HEADER, -1)) for log in sim.requests}
    finally:
        instrumentor.uninstrument()
    spans = {number_of.get(str((s.attributes or {}).get("anthropic.request.id")), -1): s
             for s in exporter.get_finished_spans()}
    return [(r, spans[i]) for i, r in enumerate(requests) if i in spans]
