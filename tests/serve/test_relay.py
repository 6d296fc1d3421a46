"""The relay behind a real uvicorn server, relaying the real SDKs' streams from the simulator.

Read over real HTTP with an SSE parser that follows the browser's rules; the browser itself reads
the same endpoints in test_browser.py. Each case checks the status before the stream, exactly one
terminal event with its code and partial flag, no provider text anywhere, and one log record that
agrees with the call's span.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx2
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from relay_app import make_app
from served import Sse, SseParser, serving

from streamscope import AnthropicInstrumentor, Budgets, OpenAIInstrumentor
from streamscope.simulator import SCENARIOS, Scenario, Silence, Simulator, TextSpec, message_stream

PROVIDER_TEXT = ("Overloaded", "overloaded", "_error", "exceed", "Rate limit", "unexpected", "prompt is too long",
                 "maximum context", "org-sim")
"""Words of the simulator's provider error messages and types: none may reach the browser."""


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        yield simulator


@pytest.fixture(scope="module")
def base(sim: Simulator) -> Iterator[str]:
    with serving(make_app(sim)) as url:
        yield url


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class On:
    """streamscope on for both SDKs, with in-memory spans, metrics and the stream log."""

    exporter: InMemorySpanExporter
    reader: InMemoryMetricReader
    logs: Records
    instrumentors: list[Any] = field(default_factory=list)

    def spans(self) -> list[Any]:
        return sorted((s for s in self.exporter.get_finished_spans() if s.instrumentation_scope.name == "streamscope"),
                      key=lambda s: s.start_time)

    def wait_for_log(self, count: int = 1, timeout: float = 10.0) -> list[logging.LogRecord]:
        end = time.monotonic() + timeout
        while len(self.logs.records) < count and time.monotonic() < end:
            time.sleep(0.01)
        return self.logs.records

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        return [p for rm in (data.resource_metrics if data else []) for sm in rm.scope_metrics
                for m in sm.metrics if m.name == name for p in m.data.data_points]


@pytest.fixture
def on() -> Iterator[Any]:
    made: list[On] = []

    def start(budgets: Any = None, **options: Any) -> On:
        exporter, reader = InMemorySpanExporter(), InMemoryMetricReader()
        tracer = TracerProvider()
        tracer.add_span_processor(SimpleSpanProcessor(exporter))
        meter = MeterProvider(metric_readers=[reader])
        logs = Records()
        logger = logging.getLogger("streamscope.streams")
        logger.addHandler(logs)
        logger.setLevel(logging.INFO)
        state = On(exporter, reader, logs)
        for kind in (AnthropicInstrumentor, OpenAIInstrumentor):
            instrumentor = kind()
            instrumentor.instrument(tracer_provider=tracer, meter_provider=meter, budgets=budgets, **options)
            state.instrumentors.append(instrumentor)
        made.append(state)
        return state

    yield start
    for state in made:
        for instrumentor in state.instrumentors:
            instrumentor.uninstrument()
        logging.getLogger("streamscope.streams").removeHandler(state.logs)


@dataclass
class Got:
    status: int
    headers: Any
    body: str
    events: list[Sse]
    comments: list[str]

    @property
    def terminal(self) -> Sse:
        ends = [e for e in self.events if e.event in ("done", "error")]
        assert len(ends) == 1, [e.event for e in self.events]
        assert self.events[-1] is ends[0], "the terminal event is the last one"
        return ends[0]

    @property
    def tokens(self) -> list[str]:
        return [e.json["text"] for e in self.events if e.event == "token"]


def get(base: str, path: str, headers: dict[str, str] | None = None, *, stop_after: int | None = None) -> Got:
    """One request, read as a browser reads an event stream; `stop_after` tokens: the reader leaves."""
    parser = SseParser()
    with httpx2.Client(timeout=30) as client, client.stream("GET", base + path, headers=headers) as response:
        body = ""
        for text in response.iter_text():
            body += text
            if response.headers.get("content-type", "").startswith("text/event-stream"):
                parser.feed(text)
                if stop_after is not None and sum(e.event == "token" for e in parser.events) >= stop_after:
                    break
        return Got(response.status_code, response.headers, body, parser.events, parser.comments)


def no_provider_text(got: Got) -> None:
    for text in PROVIDER_TEXT:
        assert text not in got.body, f"provider text {text!r} reached the browser"


def agrees(on: On, got: Got, outcome: str) -> dict[str, Any]:
    """One log record for the stream, agreeing with its last attempt's span field by field."""
    [record] = on.wait_for_log()
    span = on.spans()[-1]
    attrs = dict(span.attributes)
    fields = record.__dict__
    assert fields["request_id"] == got.headers["x-request-id"]
    assert fields["outcome"] == outcome
    for key in ("gen_ai.request.model", "streamscope.class", "streamscope.partial", "streamscope.budget.fired",
                "streamscope.failure.code"):
        assert fields[key] == attrs.get(key, False if key == "streamscope.partial" else None), key
    assert fields["attempts"] == len(on.spans())
    costs = [s.attributes.get("streamscope.cost.usd") for s in on.spans()]  # every attempt's
    if None in costs:
        assert fields["cost"] is None, "an unpriced attempt: the request's cost is unknown"
    else:
        assert fields["cost"] == pytest.approx(sum(costs), rel=1e-12)
    assert record.levelno == (logging.WARNING if fields["streamscope.failure.code"] else logging.INFO)
    return fields


ANSWERS = [
    # (sdk, shape, scenario, query, finish reason, class)
    ("anthropic", "create", "complete", "", "end_turn", "complete"),
    ("anthropic", "stream", "complete", "", "end_turn", "complete"),
    ("anthropic", "create", "complete", "sync=1", "end_turn", "complete"),
    ("anthropic", "stream", "complete", "sync=1", "end_turn", "complete"),
    ("anthropic", "create", "thinking", "thinking=1", "end_turn", "complete"),
    ("anthropic", "create", "truncated", "", "max_tokens", "truncated"),
    ("anthropic", "create", "refused", "", "refusal", "refused"),
    ("anthropic", "create", "http_529_then_ok", "", "end_turn", "complete"),
    ("openai", "chat", "chat_complete", "", "stop", "complete"),
    ("openai", "chat_stream", "chat_complete", "sync=1", "stop", "complete"),
    ("openai", "chat", "chat_truncated", "", "length", "truncated"),
    ("openai", "responses", "responses_complete", "", "completed", "complete"),
    ("openai", "responses_stream", "responses_complete", "sync=1", "completed", "complete"),
]


@pytest.mark.parametrize(("sdk", "shape", "scenario", "query", "finish", "label"), ANSWERS)
def test_answers_end_with_done(base: str, on: Any, sdk: str, shape: str, scenario: str, query: str, finish: str,
                               label: str) -> None:
    state = on()
    got = get(base, f"/relay/{sdk}/{shape}/{scenario}?{query}")
    assert got.status == 200
    assert got.headers["cache-control"] == "no-cache" and got.headers["x-accel-buffering"] == "no"
    rid = got.headers["x-request-id"]
    done = got.terminal
    assert done.event == "done"
    assert done.json == {"request_id": rid, "chunks": len(got.tokens), "finish_reason": finish, "class": label,
                         "verified": label == "complete"}
    assert [e.id for e in got.events] == [f"{rid}:{n}" for n in range(1, len(got.events) + 1)]
    if label != "refused":
        assert got.tokens, "the answer's text went downstream"
    no_provider_text(got)
    agrees(state, got, "done")


def requests_for(sim: Simulator, scenario: str, since: int) -> list[Any]:
    return [r for r in sim.requests[since:] if r.scenario == scenario]


PRE_STREAM = [
    # (sdk, scenario, query, status, code, retry-after, provider requests)
    ("anthropic", "http_529", "", 503, "upstream_unavailable", "0", 3),
    ("anthropic", "http_429", "attempts=1", 429, "rate_limited", "1", 1),
    ("anthropic", "http_500", "attempts=2", 503, "upstream_unavailable", None, 2),
    ("anthropic", "http_400", "", 502, "upstream_rejected", None, 1),
    ("openai", "openai_http_429", "attempts=1", 429, "rate_limited", "1", 1),
    ("openai", "openai_http_500", "attempts=1&sync=1", 503, "upstream_unavailable", None, 1),
    ("openai", "openai_http_400", "", 502, "upstream_rejected", None, 1),
]


@pytest.mark.parametrize(("sdk", "scenario", "query", "status", "code", "retry_after", "tries"), PRE_STREAM)
def test_failures_before_the_stream_are_http_errors(base: str, sim: Simulator, on: Any, sdk: str, scenario: str,
                                                    query: str, status: int, code: str, retry_after: str | None,
                                                    tries: int) -> None:
    state = on()
    since = len(sim.requests)
    shape = "create" if sdk == "anthropic" else "chat"
    got = get(base, f"/relay/{sdk}/{shape}/{scenario}?{query}")
    assert got.status == status
    assert got.headers["content-type"] == "application/json"
    assert httpx2.Response(status, content=got.body).json() == {"code": code,
                                                                "request_id": got.headers["x-request-id"]}
    assert got.headers.get("retry-after") == retry_after
    assert len(requests_for(sim, scenario, since)) == tries  # each attempt one provider request
    no_provider_text(got)
    fields = agrees(state, got, "error")
    assert fields["attempts"] == tries


IN_BAND = [
    # (sdk, shape, scenario, query, budgets, code, partial, class)
    ("anthropic", "create", "inband_error", "", None, "upstream_unavailable", True, "upstream_error"),
    ("anthropic", "stream", "cut_connection", "sync=1", None, "upstream_unreachable", True, "upstream_error"),
    ("anthropic", "create", "incomplete", "", None, "upstream_unreachable", True, "upstream_error"),
    ("anthropic", "create", "timed_pinging_stall", "", Budgets(idle=0.4), "upstream_timeout", True,
     "stalled_mid_stream"),
    ("anthropic", "create", "timed_pinging_stall", "sync=1", Budgets(idle=0.4), "upstream_timeout", True,
     "stalled_mid_stream"),
    ("anthropic", "create", "timed_silent_start", "heartbeat=0.3&attempts=1", Budgets(first_token=0.8),
     "upstream_timeout", False, "stalled_before_first_content"),
    ("openai", "chat", "chat_inband_error", "", None, "upstream_unavailable", True, "upstream_error"),
    ("openai", "chat", "chat_cut_connection", "sync=1", None, "upstream_unreachable", True, "upstream_error"),
    ("openai", "responses", "responses_failed", "", None, "upstream_unavailable", True, "upstream_error"),
]


@pytest.mark.parametrize(("sdk", "shape", "scenario", "query", "budgets", "code", "partial", "label"), IN_BAND)
def test_failures_after_the_status_are_one_error_event(base: str, on: Any, sdk: str, shape: str, scenario: str,
                                                       query: str, budgets: Any, code: str, partial: bool,
                                                       label: str) -> None:
    state = on(budgets)
    got = get(base, f"/relay/{sdk}/{shape}/{scenario}?{query}")
    assert got.status == 200
    error = got.terminal
    assert error.event == "error"
    assert error.json == {"code": code, "request_id": got.headers["x-request-id"], "partial": partial}
    assert bool(got.tokens) is partial
    if not partial:
        assert "keep-alive" in got.comments  # the status went out with a keep-alive when the heartbeat passed
    no_provider_text(got)
    agrees(state, got, "error")
    assert state.spans()[-1].attributes["streamscope.class"] == label


def test_a_first_token_stall_is_retried_then_a_504(base: str, sim: Simulator, on: Any) -> None:
    """The 5 s silent start, twice. The budget leaves the loaded simulator time to read each
    request's body (it logs a request only then: at 0.4 s a second attempt was once sent, and cut,
    before the simulator had read it, so it logged one), and still fires seconds before the answer."""
    state = on(Budgets(first_token=1.5))
    since = len(sim.requests)
    got = get(base, "/relay/anthropic/create/timed_silent_start?attempts=2")
    assert (got.status, got.headers["content-type"]) == (504, "application/json")
    assert len(requests_for(sim, "timed_silent_start", since)) == 2
    assert [s.attributes["streamscope.class"] for s in state.spans()] == ["stalled_before_first_content"] * 2
    agrees(state, got, "error")


@pytest.mark.parametrize(("scenario", "time_left_ms", "label", "partial"), [
    ("slow_thinking", "1500", "deadline_in_thinking", False),
    ("slow_answer", "1500", "deadline_in_answer", True),
])
def test_the_callers_deadline(base: str, on: Any, scenario: str, time_left_ms: str, label: str,
                              partial: bool) -> None:
    state = on()
    got = get(base, f"/relay/anthropic/create/{scenario}?thinking=1&heartbeat=0.3",
              {"request-timeout-ms": time_left_ms})
    assert got.status == 200
    assert got.terminal.json == {"code": "upstream_timeout", "request_id": got.headers["x-request-id"],
                                 "partial": partial}
    assert state.spans()[-1].attributes["streamscope.class"] == label
    if scenario == "slow_thinking":  # nothing to send while it thinks: keep-alives (an answer's words come faster)
        assert "keep-alive" in got.comments
    agrees(state, got, "error")


def test_an_expired_deadline_is_answered_at_once_with_no_provider_call(base: str, sim: Simulator, on: Any) -> None:
    state = on()
    since = len(sim.requests)
    got = get(base, "/relay/anthropic/create/complete", {"request-timeout-ms": "0"})
    assert got.status == 504 and httpx2.Response(504, content=got.body).json()["code"] == "upstream_timeout"
    assert sim.requests[since:] == []
    # Spent between the middleware and the relay: the relay's own 504, and its record.
    got = get(base, "/relay/anthropic/create/complete?spent=1")
    assert got.status == 504 and httpx2.Response(504, content=got.body).json()["code"] == "upstream_timeout"
    assert sim.requests[since:] == []
    [record] = state.wait_for_log()
    assert record.__dict__["cost"] == 0.0, "nothing was sent: a cost known to be nothing"


def test_last_event_id_starts_no_generation(base: str, sim: Simulator, on: Any) -> None:
    on()
    since = len(sim.requests)
    got = get(base, "/relay/anthropic/create/complete", {"Last-Event-ID": "abc:3"})
    assert got.status == 204 and got.body == "" and got.headers["streamscope-resume"] == "resume_off"
    assert sim.requests[since:] == []


@pytest.mark.parametrize("query", ["", "sync=1"])
def test_heartbeats_during_long_silences(base: str, on: Any, query: str) -> None:
    on()
    got = get(base, f"/relay/anthropic/create/slow_thinking?thinking=1&heartbeat=0.25&{query}")
    assert got.status == 200 and got.terminal.event == "done"
    assert got.comments.count("keep-alive") >= 3  # ~2 s of thinking, a keep-alive every 0.25 s


@pytest.mark.parametrize("query", ["", "sync=1"])
@pytest.mark.parametrize(("sdk", "shape", "scenario"), [("anthropic", "create", "slow_answer"),
                                                        ("anthropic", "stream", "slow_answer")])
def test_the_browser_leaving_closes_the_provider_connection(base: str, sim: Simulator, on: Any, sdk: str,
                                                            shape: str, scenario: str, query: str) -> None:
    state = on()
    since = len(sim.requests)
    got = get(base, f"/relay/{sdk}/{shape}/{scenario}?{query}", stop_after=2)
    left = time.monotonic()
    [upstream] = requests_for(sim, scenario, since)
    index = sim.requests.index(upstream)
    log = sim.wait_for_outcome(index, timeout=10)
    assert log.outcome == "disconnected"
    assert log.ended is not None and log.ended - left < 1.0, "the provider saw the connection end within a second"
    fields = agrees(state, got, "client_disconnect")
    assert state.spans()[-1].attributes["streamscope.class"] == "cancelled"
    assert fields["streamscope.failure.code"] is None


@pytest.mark.parametrize("query", ["", "sync=1"])
def test_leaving_while_the_status_is_held_closes_the_provider_connection(base: str, sim: Simulator, on: Any,
                                                                         query: str) -> None:
    """The browser gives up during the thinking, before any byte of the response was sent."""
    state = on()
    since = len(sim.requests)
    with httpx2.Client(timeout=30) as client:
        with pytest.raises(httpx2.ReadTimeout):
            client.get(f"{base}/relay/anthropic/create/slow_thinking?thinking=1&{query}", timeout=0.6)
    left = time.monotonic()
    [upstream] = requests_for(sim, "slow_thinking", since)
    log = sim.wait_for_outcome(sim.requests.index(upstream), timeout=10)
    assert log.outcome == "disconnected"
    assert log.ended is not None and log.ended - left < 1.0
    [record] = state.wait_for_log()
    assert record.__dict__["outcome"] == "client_disconnect"
    assert state.spans()[-1].attributes["streamscope.class"] == "cancelled"


@pytest.mark.parametrize("query", ["", "sync=1"])
def test_a_map_sends_tool_input_and_thinking_and_cannot_forge_the_end(base: str, on: Any, query: str) -> None:
    on()
    tool = get(base, f"/relay/anthropic/create/tool_use?map=all&{query}")
    assert tool.terminal.event == "done" and "forged" not in tool.terminal.data
    assert "".join(e.json["partial_json"] for e in tool.events if e.event == "tool_input")
    thought = get(base, f"/relay/anthropic/stream/thinking?map=all&thinking=1&{query}")
    assert next(e.event for e in thought.events if e.event != "token") == "thinking"
    assert thought.terminal.event == "done" and thought.tokens
    assert [e.id for e in thought.events][-1] == f"{thought.headers['x-request-id']}:{len(thought.events)}"


def test_one_record_per_relayed_stream_with_the_per_call_records_on(base: str, sim: Simulator, on: Any) -> None:
    """With the plain instrumentation's per-call records on, a relayed stream still has one record:
    the relay's, for the logical request (its attempts counted), not one per attempt."""
    sim.add(Scenario("logged_529_then_ok", list(SCENARIOS["http_529_then_ok"].attempts)))  # attempts count per name
    state = on(stream_logs=True)
    got = get(base, "/relay/anthropic/create/logged_529_then_ok")
    assert got.terminal.event == "done"
    time.sleep(0.3)  # a second record, if any, would be written by now
    fields = agrees(state, got, "done")
    assert fields["attempts"] == 2 == len(state.spans())


def test_a_wait_beyond_the_ceiling_is_a_429_at_once(base: str, sim: Simulator, on: Any) -> None:
    """The provider asks for two minutes: more than a retry may wait, so the relay answers now, 429
    with the provider's Retry-After, after one provider request."""
    from streamscope.simulator import HttpError

    sim.add(Scenario.single("limited_for_two_minutes",
                            [HttpError(429, "rate_limit_error", "slow down", {"retry-after": "120"})]))
    state = on()
    since = len(sim.requests)
    got = get(base, "/relay/anthropic/create/limited_for_two_minutes")
    assert (got.status, got.headers.get("retry-after")) == (429, "120")
    assert len(requests_for(sim, "limited_for_two_minutes", since)) == 1
    assert agrees(state, got, "error")["streamscope.failure.code"] == "rate_limited"


def test_sync_relays_waiting_on_silent_providers_hold_only_their_own_threads(base: str, sim: Simulator,
                                                                              on: Any) -> None:
    """Twelve sync relays, each held by a provider gone silent for 30 s after its first words (more
    than the event loop's default executor has threads on this machine: cores + 4), then a thirteenth
    request: it streams to its end while all twelve still wait, and the app's own
    `asyncio.to_thread` work is not queued behind them. Then the twelve browsers leave, and every
    provider connection closes."""
    sim.add(Scenario.single("long_silence", message_stream(blocks=[TextSpec(["Streams", " fail", Silence(30.0),
                                                                             " late"], interval=0.02)])))
    on()
    since = len(sim.requests)
    stalled: list[tuple[httpx2.Response, Any]] = []
    clients = [httpx2.Client(timeout=60) for _ in range(12)]
    try:
        for client in clients:  # each browser reads to its first token, then waits
            response = client.send(client.build_request("GET", base + "/relay/anthropic/create/long_silence?sync=1"),
                                   stream=True)
            chunks = response.iter_text()  # kept: a reader dropped mid-body closes the response
            stalled.append((response, chunks))
            text = ""
            for chunk in chunks:
                text += chunk
                if "event: token" in text:
                    break
        assert len(requests_for(sim, "long_silence", since)) == 12
        got = get(base, "/relay/anthropic/create/complete?sync=1")
        assert got.status == 200 and got.terminal.event == "done"
        assert httpx2.get(base + "/thread").text == "ok"  # the default executor is free
        waiting = [r for r in requests_for(sim, "long_silence", since) if r.outcome is None]
        assert len(waiting) == 12, "every stalled provider stream is still open: the answer did not wait for them"
    finally:
        for response, _ in stalled:
            response.close()
        for client in clients:
            client.close()
    for request in requests_for(sim, "long_silence", since):
        assert sim.wait_for_outcome(sim.requests.index(request), timeout=10).outcome == "disconnected"


def test_a_flowing_answer_gets_no_keep_alive(base: str, on: Any) -> None:
    """The keep-alive is for a quiet connection: it goes out after `heartbeat` seconds with nothing
    sent, never on a timer of its own while the answer flows (words about 0.1 s apart here)."""
    on()
    got = get(base, "/relay/anthropic/create/slow_answer?heartbeat=1.5")
    assert got.status == 200 and got.terminal.event == "done" and len(got.tokens) > 10
    assert got.comments == []
    assert got.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert (got.headers["cache-control"], got.headers["x-accel-buffering"]) == ("no-cache", "no")
