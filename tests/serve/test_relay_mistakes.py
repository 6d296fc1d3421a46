"""The developer's mistakes with `relay()`, each told in one log line with its fix, never silently.

Behind a real uvicorn server, with the real SDKs against the simulator: an opened stream, a stream
manager or a coroutine passed instead of a function, a call that is not streamed; the relay with
the instrumentation off; the relay with nothing bounding a stall; an option misspelt.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import time
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple

import anthropic
import httpx2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from relay_app import USER, opener
from served import Sse, SseParser, serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from streamscope import AnthropicInstrumentor, Budgets, OpenAIInstrumentor
from streamscope.serve import DeadlineMiddleware, observed, relay
from streamscope.simulator import Simulator

PARAMS: dict[str, Any] = {"model": "claude-sim-1", "max_tokens": 1024, "messages": USER}


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        yield simulator


def make_app(sim: Simulator) -> Any:
    def aclient(scenario: str) -> anthropic.AsyncAnthropic:
        return anthropic.AsyncAnthropic(base_url=sim.url(scenario), api_key="test-key", max_retries=0)

    def client(scenario: str) -> anthropic.Anthropic:
        return anthropic.Anthropic(base_url=sim.url(scenario), api_key="test-key", max_retries=0)

    async def opened(request: Request) -> Response:
        scenario = request.path_params["scenario"]
        if request.query_params.get("sync") == "1":
            stream: Any = await asyncio.to_thread(lambda: client(scenario).messages.create(**PARAMS, stream=True))
        else:
            stream = await aclient(scenario).messages.create(**PARAMS, stream=True)
        return await relay(request, stream)

    async def manager(request: Request) -> Response:
        return await relay(request, aclient(request.path_params["scenario"]).messages.stream(**PARAMS))

    async def coroutine(request: Request) -> Response:
        return await relay(request, aclient(request.path_params["scenario"]).messages.create(**PARAMS, stream=True))

    async def whole(request: Request) -> Response:
        scenario = request.path_params["scenario"]
        if request.query_params.get("sync") == "1":
            return await relay(request, lambda: client(scenario).messages.create(**PARAMS))
        return await relay(request, lambda: aclient(scenario).messages.create(**PARAMS))

    async def relayed(request: Request) -> Response:
        p = request.path_params
        return await relay(request, opener(sim, p["sdk"], p["shape"], p["scenario"], request.query_params),
                           heartbeat=5.0)

    return DeadlineMiddleware(Starlette(routes=[
        Route("/opened/{scenario}", opened), Route("/manager/{scenario}", manager),
        Route("/coroutine/{scenario}", coroutine), Route("/whole/{scenario}", whole),
        Route("/relay/{sdk}/{shape}/{scenario}", relayed),
    ]))


@pytest.fixture(scope="module")
def base(sim: Simulator) -> Iterator[str]:
    with serving(make_app(sim)) as url:
        yield url


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Each test sees the relay's once-per-process lines anew, and every record of streamscope's loggers."""
    monkeypatch.setattr(observed, "_said", set())
    caplog.set_level(logging.INFO, logger="streamscope")


@pytest.fixture
def instrumented() -> Iterator[Any]:
    """Both instrumentors on, with SDK providers (so no "spans go nowhere" line joins the ones under test)."""
    made: list[Any] = []

    def start(budgets: Any = None) -> None:
        for kind in (AnthropicInstrumentor, OpenAIInstrumentor):
            instrumentor = kind()
            instrumentor.instrument(tracer_provider=TracerProvider(),
                                    meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]),
                                    budgets=budgets)
            made.append(instrumentor)

    yield start
    for instrumentor in made:
        instrumentor.uninstrument()


class Got(NamedTuple):
    status: int
    headers: Any
    body: str
    events: list[Sse]

    def json(self) -> Any:
        return json.loads(self.body)


def get(url: str, headers: dict[str, str] | None = None) -> Got:
    parser, body = SseParser(), ""
    with httpx2.Client(timeout=30) as http, http.stream("GET", url, headers=headers) as response:
        for text in response.iter_text():
            body += text
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                parser.feed(text)
    return Got(response.status_code, response.headers, body, parser.events)


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What streamscope told the developer (the `streamscope` logger; the per-stream records aside)."""
    return [r.getMessage() for r in caplog.records if r.name == "streamscope"]


def one_line(caplog: pytest.LogCaptureFixture, *fix: str) -> str:
    [line] = lines(caplog)
    assert "\n" not in line
    for words in fix:
        assert words in line, line
    return line


def stream_record(caplog: pytest.LogCaptureFixture, timeout: float = 10.0) -> logging.LogRecord:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        found = [r for r in caplog.records if r.name == "streamscope.streams"]
        if found:
            [record] = found
            return record
        time.sleep(0.01)
    raise AssertionError("no stream record")


def internal_error(response: Got) -> None:
    assert response.status == 500
    assert response.json() == {"code": "internal_error", "request_id": response.headers["x-request-id"]}


# -- a wrong open_stream --------------------------------------------------------------------------------


@pytest.mark.parametrize("query", ["", "sync=1"])
def test_an_opened_stream_is_closed_and_told(base: str, sim: Simulator, instrumented: Any, caplog: Any,
                                             query: str) -> None:
    instrumented()
    since = len(sim.requests)
    response = get(f"{base}/opened/slow_answer?{query}")
    internal_error(response)
    one_line(caplog, "relay() got an opened stream", "pass a function that opens it",
             "lambda: client.messages.create(..., stream=True)")
    [upstream] = sim.requests[since:]
    assert sim.wait_for_outcome(sim.requests.index(upstream), timeout=10).outcome == "disconnected"


def test_a_coroutine_is_closed_never_awaited_and_told(base: str, sim: Simulator, caplog: Any) -> None:
    since = len(sim.requests)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        response = get(f"{base}/coroutine/complete")
        gc.collect()
    internal_error(response)
    one_line(caplog, "relay() got a coroutine", "pass a function that makes the call",
             "lambda: client.messages.create(..., stream=True)")
    assert not [w for w in seen if "never awaited" in str(w.message)]
    assert sim.requests[since:] == [], "nothing was sent"


def test_a_stream_manager_is_told_and_its_request_never_sent(base: str, sim: Simulator, caplog: Any) -> None:
    since = len(sim.requests)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        response = get(f"{base}/manager/complete")
        gc.collect()
    internal_error(response)
    one_line(caplog, "relay() got a stream manager", "lambda: client.messages.stream(...)")
    assert not [w for w in seen if "never awaited" in str(w.message)]
    assert sim.requests[since:] == []


@pytest.mark.parametrize("query", ["", "sync=1"])
def test_a_call_that_is_not_streamed_is_told_not_relayed_as_an_empty_answer(base: str, instrumented: Any,
                                                                              caplog: Any, query: str) -> None:
    instrumented()
    response = get(f"{base}/whole/complete?{query}")
    internal_error(response)
    assert response.events == []
    one_line(caplog, "open_stream() returned a Message", "not a stream",
             "lambda: client.messages.create(..., stream=True)")
    record = stream_record(caplog).__dict__
    assert record["streamscope.failure.code"] == "internal_error"
    assert record["cost"] is None, "a whole answer was billed, and streamscope did not see its usage"


# -- the instrumentation off ----------------------------------------------------------------------------


@pytest.fixture
def off() -> None:
    for kind in (AnthropicInstrumentor, OpenAIInstrumentor):
        assert not kind().is_instrumented_by_opentelemetry, "a test before this one left streamscope on"


@pytest.mark.parametrize(("path", "finish"), [
    ("/relay/anthropic/create/truncated", "max_tokens"),
    ("/relay/anthropic/stream/complete?sync=1", "end_turn"),
    ("/relay/anthropic/create/refused", "refusal"),
    ("/relay/openai/chat/chat_truncated", "length"),
    ("/relay/openai/chat_stream/chat_complete?sync=1", "stop"),
    ("/relay/openai/responses/responses_complete", "completed"),
])
def test_uninstrumented_answers_keep_their_finish_reason(base: str, off: None, caplog: Any, path: str,
                                                         finish: str) -> None:
    response = get(base + path)
    assert response.status == 200
    done = response.events[-1]
    assert done.event == "done"
    assert done.json["finish_reason"] == finish
    assert done.json["class"] is None and done.json["verified"] is False
    record = stream_record(caplog).__dict__
    assert (record["outcome"], record["streamscope.class"], record["streamscope.partial"]) == ("done", None, False)
    assert record["cost"] is None, "billed, but nothing recorded its usage: unknown, never 0.0"
    sdk = path.split("/")[2]
    name = {"anthropic": "AnthropicInstrumentor", "openai": "OpenAIInstrumentor"}[sdk]
    one_line(caplog, f"the {sdk} instrumentation is off", f"call {name}().instrument()")


def test_the_instrumentation_off_is_said_once(base: str, off: None, caplog: Any) -> None:
    for _ in range(2):
        assert get(base + "/relay/anthropic/create/complete").events[-1].event == "done"
    one_line(caplog, "the anthropic instrumentation is off")


@pytest.mark.parametrize(("path", "code"), [
    ("/relay/anthropic/create/inband_error", "upstream_unavailable"),
    ("/relay/anthropic/create/incomplete", "upstream_unreachable"),
    ("/relay/anthropic/create/incomplete?sync=1", "upstream_unreachable"),
])
def test_uninstrumented_failures_after_content_agree_on_partial(base: str, off: None, caplog: Any, path: str,
                                                                code: str) -> None:
    response = get(base + path)
    assert response.status == 200 and any(e.event == "token" for e in response.events)
    error = response.events[-1]
    assert error.event == "error"
    assert error.json == {"code": code, "request_id": response.headers["x-request-id"], "partial": True}
    record = stream_record(caplog).__dict__
    assert (record["outcome"], record["streamscope.failure.code"], record["streamscope.partial"]) == (
        "error", code, True)


# -- nothing bounds a stall -----------------------------------------------------------------------------


def test_no_budgets_is_said_once_at_the_first_relayed_stream(base: str, instrumented: Any, caplog: Any) -> None:
    instrumented()
    for _ in range(2):
        assert get(base + "/relay/anthropic/create/complete").events[-1].event == "done"
    one_line(caplog, "nothing bounds a provider that stalls before the first token or mid-answer",
             "no first_token or idle budget", "instrument(budgets=Budgets(", "DeadlineMiddleware")


def test_an_idle_budget_alone_leaves_the_start_unbounded(base: str, instrumented: Any, caplog: Any) -> None:
    instrumented(Budgets(idle=30))
    assert get(base + "/relay/anthropic/create/complete").events[-1].event == "done"
    one_line(caplog, "stalls before the first token (no deadline, no first_token budget)")


@pytest.mark.parametrize(("budgets", "headers"), [
    (Budgets(first_token=30, idle=30), None),
    (Budgets(deadline=60), None),
    (None, {"request-timeout-ms": "60000"}),
])
def test_bounded_streams_say_nothing(base: str, instrumented: Any, caplog: Any, budgets: Any,
                                     headers: dict[str, str] | None) -> None:
    instrumented(budgets)
    assert get(base + "/relay/anthropic/create/complete", headers).events[-1].event == "done"
    assert lines(caplog) == []


# -- a misspelt option ----------------------------------------------------------------------------------


def test_an_unknown_option_raises_one_line_with_the_fix() -> None:
    with pytest.raises(TypeError) as raised:
        asyncio.run(relay(None, lambda: None, heartbeet=5))  # type: ignore[arg-type, call-arg]
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("relay() got an unexpected keyword argument 'heartbeet' (did you mean 'heartbeat'?)")
    assert message.endswith("it takes request, open_stream, heartbeat, request_id, attempts, backoff, events, "
                            "send_timeout, resume, continuation, continuations")


@pytest.mark.parametrize(("options", "error", "words"), [
    ({"heartbeat": "15"}, TypeError, "relay(heartbeat=...) takes seconds > 0"),
    ({"heartbeat": 0}, ValueError, "relay(heartbeat=...) takes seconds > 0"),
    ({"attempts": 0}, ValueError, "attempts=... takes a whole number of attempts >= 1"),
    ({"attempts": 2.5}, TypeError, "attempts=... takes a whole number"),
    ({"backoff": 0.5}, TypeError, "backoff=... takes a streamscope.Backoff"),
    ({"events": "token"}, TypeError, "relay(events=...) takes a function"),
    ({"send_timeout": -1}, ValueError, "relay(send_timeout=...) takes seconds > 0"),
    ({"send_timeout": "30"}, TypeError, "relay(send_timeout=...) takes seconds > 0 (or None: no limit), not str"),
    ({"continuations": "2"}, TypeError, "relay(continuations=...) takes a whole number, not str"),
    ({"request_id": 7}, TypeError, "relay(request_id=...) takes a str"),
    ({"resume": "redis://localhost"}, TypeError, "relay(resume=...) takes a MemoryBuffer() or RedisBuffer(url)"),
])
def test_a_wrong_option_value_raises_one_line(options: dict[str, Any], error: type[Exception], words: str) -> None:
    with pytest.raises(error) as raised:
        asyncio.run(relay(None, lambda: None, **options))  # type: ignore[arg-type]
    assert words in str(raised.value) and "\n" not in str(raised.value)
