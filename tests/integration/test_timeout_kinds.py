"""What a budget's firing is to the code around the call: the SDK's own timeout error too.

Frameworks key their policies on the SDK's exceptions (a fallback on its API errors, a retry of
its connection errors), so on an SDK's call the `StreamTimeout` a budget raises is also that SDK's
`APITimeoutError` (and so its `APIConnectionError` and `APIError`), still a `TimeoutError`, with
streamscope's attributes, message and code, picklable as itself. For anthropic and openai, sync
and async, a stall before the first token and one mid-stream, real SDKs against the simulator.

Each stall lasts 5 s (before the first event) or 10 s (after three words); the budgets (0.6 s) cut
it well inside, and the time they fire at is checked against `LATE`, a loaded machine's delay.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import openai
import pytest

import sdk_lines
from conftest import USER, EndCounter, Telemetry
from streamscope import AnthropicInstrumentor, Budgets, OpenAIInstrumentor, StreamTimeout
from streamscope.adapters.providers import retry_decision
from streamscope.simulator import Simulator

BUDGETS = Budgets(first_token=0.6, idle=0.6)
LATE = 1.5
"""How late a loaded 2-core machine may fire a budget; the stalls last far longer."""
SDKS = {"anthropic": anthropic, "openai": openai}
STALLS = {  # (sdk, stall) → the scenario, the budget that cuts it, the class it gets
    ("anthropic", "first_token"): ("silent_start", "stalled_before_first_content"),
    ("anthropic", "idle"): ("silent_stall", "stalled_mid_stream"),
    ("openai", "first_token"): ("chat_silent_start", "stalled_before_first_content"),
    ("openai", "idle"): ("chat_silent_stall", "stalled_mid_stream"),
}
CASES = [pytest.param(sdk, stall, id=f"{sdk}-{stall}") for sdk, stall in STALLS]


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:  # every scenario of both APIs
        yield simulator


@pytest.fixture
def instrument() -> Iterator[Callable[[str], Telemetry]]:
    """Turn streamscope on for one SDK, with the budgets, and an in-memory span exporter."""
    on: list[Any] = []

    def start(sdk: str) -> Telemetry:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter, provider, ends = InMemorySpanExporter(), TracerProvider(), EndCounter()
        provider.add_span_processor(ends)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        instrumentor = AnthropicInstrumentor() if sdk == "anthropic" else OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=provider, budgets=BUDGETS)
        on.append(instrumentor)
        return Telemetry(exporter, provider, ends)

    yield start
    for instrumentor in on:
        instrumentor.uninstrument()


def read_sync(sim: Simulator, sdk: str, scenario: str) -> tuple[BaseException, int]:
    """Read the stream to its end; (the exception it ended with, text events seen)."""
    texts = 0
    try:
        if sdk == "anthropic":
            c = anthropic.Anthropic(base_url=sim.url(scenario), api_key="k", max_retries=0)
            for event in c.messages.create(model="m", max_tokens=64, messages=USER, stream=True):
                texts += event.type == "content_block_delta"
        else:
            o = openai.OpenAI(base_url=sim.openai_url(scenario), api_key="k", max_retries=0, timeout=30)
            for chunk in o.chat.completions.create(model="m", messages=USER, stream=True):
                texts += bool(chunk.choices and chunk.choices[0].delta.content)
    except Exception as exc:
        return exc, texts
    raise AssertionError("the stall did not end the stream")


async def read_async(sim: Simulator, sdk: str, scenario: str) -> tuple[BaseException, int]:
    texts = 0
    try:
        if sdk == "anthropic":
            c = anthropic.AsyncAnthropic(base_url=sim.url(scenario), api_key="k", max_retries=0)
            async for event in await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True):
                texts += event.type == "content_block_delta"
        else:
            o = openai.AsyncOpenAI(base_url=sim.openai_url(scenario), api_key="k", max_retries=0, timeout=30)
            async for chunk in await o.chat.completions.create(model="m", messages=USER, stream=True):
                texts += bool(chunk.choices and chunk.choices[0].delta.content)
    except Exception as exc:
        return exc, texts
    raise AssertionError("the stall did not end the stream")


def check(sim: Simulator, telemetry: Telemetry, sdk: str, stall: str, exc: BaseException, texts: int) -> None:
    module = SDKS[sdk]
    _scenario, label = STALLS[sdk, stall]
    # What it is: streamscope's timeout, a TimeoutError, and the SDK's own timeout error.
    assert isinstance(exc, StreamTimeout), repr(exc)
    assert isinstance(exc, TimeoutError)
    assert isinstance(exc, module.APITimeoutError)
    assert isinstance(exc, module.APIConnectionError) and isinstance(exc, module.APIError)
    assert type(exc).__name__ == "StreamTimeout"
    # What it says: streamscope's attributes, message and code.
    assert exc.budget == stall
    assert exc.partial is (texts > 0) is (stall == "idle")
    assert exc.after is not None and 0.6 <= exc.after <= 0.6 + 0.2 + LATE  # idle: after three words (0.15 s)
    assert exc.code == "upstream_timeout"
    assert str(exc) == exc.message and f"streamscope {stall} budget fired" in str(exc)
    request = exc.request
    assert isinstance(request, sdk_lines.transport(sdk).Request)
    assert (request.method, request.url.host, request.url.port) == ("POST", "127.0.0.1", sim.port)
    # The one decision: the budget's timeout, never the SDK's own (a read timeout).
    failure = retry_decision(exc)
    assert failure is not None and failure.code == "upstream_timeout"
    assert failure.retryable is (stall == "first_token")
    # Pickled (a worker's result, a task queue): the same class, the same attributes.
    copy = pickle.loads(pickle.dumps(exc))
    assert type(copy) is type(exc) and isinstance(copy, module.APITimeoutError)
    assert (copy.budget, copy.partial, copy.after, copy.code, str(copy)) == \
        (exc.budget, exc.partial, exc.after, exc.code, str(exc))
    # A framework that wraps it (`raise ... from e`) keeps it as the cause.
    with pytest.raises(RuntimeError) as wrapped:
        try:
            raise exc
        except module.APIConnectionError as caught:
            raise RuntimeError("the framework's own error") from caught
    assert wrapped.value.__cause__ is exc
    # The span: as for every budget's firing.
    a = telemetry.attrs()
    assert a["streamscope.budget.fired"] == stall
    assert a["streamscope.class"] == label
    assert a["error.type"] == "timeout"
    assert a["streamscope.failure.code"] == "upstream_timeout"
    telemetry.assert_each_ended_once()


@pytest.mark.parametrize(("sdk", "stall"), CASES)
def test_a_budget_is_the_sdks_timeout_sync(sim: Simulator, instrument: Callable[[str], Telemetry], sdk: str,
                                          stall: str) -> None:
    telemetry = instrument(sdk)
    scenario, _label = STALLS[sdk, stall]
    check(sim, telemetry, sdk, stall, *read_sync(sim, sdk, scenario))


@pytest.mark.parametrize(("sdk", "stall"), CASES)
async def test_a_budget_is_the_sdks_timeout_async(sim: Simulator, instrument: Callable[[str], Telemetry], sdk: str,
                                                 stall: str) -> None:
    telemetry = instrument(sdk)
    scenario, _label = STALLS[sdk, stall]
    check(sim, telemetry, sdk, stall, *await read_async(sim, sdk, scenario))
