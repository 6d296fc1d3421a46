"""The GenAI conventions as they stand, on both providers: the request attributes the registry
asks for (on the span from its start, where samplers see them), status ERROR with every
`error.type`, an exception's `error.type` module-qualified, the content event (a log record with
the call's attributes and the content as structured attributes; `OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT`
honoured), `gen_ai.tool.definitions` only with content capture on, and the
`gen_ai.client.operation.exception` event on every failed call.

Real SDKs against the simulator; real OpenTelemetry SDK providers with in-memory exporters.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.context import Context
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, Sampler, SamplingResult
from opentelemetry.trace import StatusCode

import sdk_lines
from conftest import USER
from streamscope import AnthropicInstrumentor, OpenAIInstrumentor
from streamscope.adapters.stainless.ending import exception_type
from streamscope.simulator import Simulator
from streamscope.simulator.openai_catalog import OPENAI_SCENARIOS

DETAILS = "gen_ai.client.inference.operation.details"
EXCEPTION = "gen_ai.client.operation.exception"
CAPTURE, EMIT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT"
REQUEST_KEYS = ("gen_ai.request.temperature", "gen_ai.request.top_p", "gen_ai.request.top_k",
                "gen_ai.request.stop_sequences", "gen_ai.request.frequency_penalty",
                "gen_ai.request.presence_penalty", "gen_ai.request.seed", "gen_ai.request.reasoning.level",
                "gen_ai.request.previous_response.id", "gen_ai.output.type", "gen_ai.request.choice.count")
CONTENT_KEYS = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
                "gen_ai.tool.definitions")
SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}
WEATHER = {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}
SECRET = "TOOL-SECRET-51c2: looks up the weather"
CHAT: dict[str, Any] = {"model": "gpt-sim-test", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES: dict[str, Any] = {"model": "gpt-sim-test", "input": "hi", "max_output_tokens": 1024}


class StartSeen(Sampler):
    """Samples everything, and keeps the attributes each span started with (what samplers see)."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def should_sample(self, parent_context: Context | None, trace_id: int, name: str, kind: Any = None,
                      attributes: Any = None, links: Sequence[Any] | None = None, trace_state: Any = None,
                      ) -> SamplingResult:
        self.seen.append(dict(attributes or {}))
        return ALWAYS_ON.should_sample(parent_context, trace_id, name, kind, attributes, links, trace_state)

    def get_description(self) -> str:
        return "StartSeen"


class Session:
    """One instrumentation session: spans, log records, and the attributes spans started with."""

    def __init__(self) -> None:
        self.sampler = StartSeen()
        self.provider = TracerProvider(sampler=self.sampler)
        self.exporter = InMemorySpanExporter()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.logs = InMemoryLogRecordExporter()
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.logs))

    def one(self) -> ReadableSpan:
        (span,) = [s for s in self.exporter.get_finished_spans() if s.instrumentation_scope.name == "streamscope"]
        return span

    def events(self, name: str) -> list[Any]:
        return [r.log_record for r in self.logs.get_finished_logs() if r.log_record.event_name == name]


@pytest.fixture
def session() -> Iterator[Callable[[str], Session]]:
    """`session("anthropic")` / `session("openai")`: that SDK instrumented (read the environment then)."""
    made: list[Any] = []

    def start(sdk: str) -> Session:
        found = Session()
        instrumentor = AnthropicInstrumentor() if sdk == "anthropic" else OpenAIInstrumentor()
        instrumentor.instrument(tracer_provider=found.provider, logger_provider=found.logger_provider)
        made.append(instrumentor)
        return found

    yield start
    for instrumentor in made:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()


@pytest.fixture(scope="module")
def osim() -> Iterator[Simulator]:
    with Simulator(time_scale=0.2) as simulator:
        for scenario in OPENAI_SCENARIOS.values():
            simulator.add(scenario)
        yield simulator


@pytest.fixture(autouse=True)
def _no_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CAPTURE, raising=False)
    monkeypatch.delenv(EMIT, raising=False)


def aclient(sim: Simulator, scenario: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.url(scenario), api_key="test-key", max_retries=0)


def oclient(sim: Simulator, scenario: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.openai_url(scenario), api_key="test", max_retries=0, timeout=15)


def drain(stream: Any) -> BaseException | None:
    """Read a stream to its end; the exception it ended with, if any."""
    try:
        for _ in stream:
            pass
    except Exception as exc:
        return exc
    return None


def anthropic_call(sim: Simulator, scenario: str = "complete", **more: Any) -> BaseException | None:
    return drain(aclient(sim, scenario).messages.create(model="m", max_tokens=64, messages=USER, stream=True,
                                                       **more))


def chat_call(sim: Simulator, scenario: str = "chat_complete", **more: Any) -> BaseException | None:
    return drain(oclient(sim, scenario).chat.completions.create(**CHAT, stream=True, **more))


def responses_call(sim: Simulator, scenario: str = "responses_complete", **more: Any) -> BaseException | None:
    return drain(oclient(sim, scenario).responses.create(**RESPONSES, stream=True, **more))


# --------------------------------------------------------------------------- request attributes


def test_anthropic_request_attributes_from_the_start(sim: Simulator, session: Callable[[str], Session]) -> None:
    """The installed SDK (2.16) takes no `temperature`, `top_p` or `top_k` any more: the stop sequences,
    and `output_config`'s effort and format."""
    s = session("anthropic")
    assert anthropic_call(sim, stop_sequences=["END", "STOP"],
                          output_config={"effort": "high", "format": {"type": "json_schema", "schema": SCHEMA}}) \
        is None
    expected = {"gen_ai.request.stop_sequences": ("END", "STOP"), "gen_ai.request.reasoning.level": "high",
                "gen_ai.output.type": "json"}
    (started,) = s.sampler.seen
    attrs = dict(s.one().attributes or {})
    for key, value in expected.items():
        assert started[key] == value, key  # on the span from its start: samplers see it
        assert attrs[key] == value, key
    assert not {"gen_ai.request.seed", "gen_ai.request.frequency_penalty"} & attrs.keys()


def test_anthropic_request_without_them_sets_none(sim: Simulator, session: Callable[[str], Session]) -> None:
    s = session("anthropic")
    assert anthropic_call(sim, output_config={"effort": "low"}) is None  # no format: no output type
    attrs = dict(s.one().attributes or {})
    assert attrs["gen_ai.request.reasoning.level"] == "low"
    assert not (set(REQUEST_KEYS) - {"gen_ai.request.reasoning.level"}) & attrs.keys()


def test_openai_chat_request_attributes(osim: Simulator, session: Callable[[str], Session]) -> None:
    s = session("openai")
    assert chat_call(osim, temperature=0.2, top_p=0.5, seed=-7, stop="STOP", frequency_penalty=0.1,
                     presence_penalty=-0.3, response_format={"type": "json_object"}, reasoning_effort="low",
                     n=2) is None
    expected = {"gen_ai.request.temperature": 0.2, "gen_ai.request.top_p": 0.5, "gen_ai.request.seed": -7,
                "gen_ai.request.stop_sequences": ("STOP",), "gen_ai.request.frequency_penalty": 0.1,
                "gen_ai.request.presence_penalty": -0.3, "gen_ai.output.type": "json",
                "gen_ai.request.reasoning.level": "low", "openai.request.reasoning_effort": "low",
                "gen_ai.request.choice.count": 2}
    (started,) = s.sampler.seen
    attrs = dict(s.one().attributes or {})
    for key, value in expected.items():
        assert started[key] == value, key
        assert attrs[key] == value, key
    assert "gen_ai.request.previous_response.id" not in attrs


@pytest.mark.parametrize(("fmt", "output"), [({"type": "json_schema", "name": "a", "schema": SCHEMA}, "json"),
                                             ({"type": "text"}, "text")])
def test_openai_responses_request_attributes(osim: Simulator, session: Callable[[str], Session],
                                             fmt: dict[str, Any], output: str) -> None:
    s = session("openai")
    assert responses_call(osim, temperature=1, top_p=0.25, text={"format": fmt}, reasoning={"effort": "medium"},
                          previous_response_id="resp_previous_1") is None
    expected = {"gen_ai.request.temperature": 1.0, "gen_ai.request.top_p": 0.25, "gen_ai.output.type": output,
                "gen_ai.request.reasoning.level": "medium",
                "gen_ai.request.previous_response.id": "resp_previous_1"}
    (started,) = s.sampler.seen
    attrs = dict(s.one().attributes or {})
    for key, value in expected.items():
        assert started[key] == value, key
        assert attrs[key] == value, key


def test_openai_request_without_them_sets_none(osim: Simulator, session: Callable[[str], Session]) -> None:
    s = session("openai")
    assert chat_call(osim) is None and responses_call(osim) is None
    for span in s.exporter.get_finished_spans():
        assert not set(REQUEST_KEYS) & (span.attributes or {}).keys()


# --------------------------------------------------------------------------- status and error.type


def test_anthropic_failed_and_cancelled_spans_are_errors(sim: Simulator, session: Callable[[str], Session]) -> None:
    s = session("anthropic")
    cut = anthropic_call(sim, "cut_connection")
    assert cut is not None
    inband = anthropic_call(sim, "inband_error")
    assert isinstance(inband, anthropic.APIStatusError)
    stream = aclient(sim, "long_answer").messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    next(iter(stream))
    stream.close()  # the caller leaves early
    spans = [sp for sp in s.exporter.get_finished_spans() if sp.instrumentation_scope.name == "streamscope"]
    got = [(sp.attributes["error.type"], sp.status.status_code) for sp in spans]
    assert got == [(sdk_lines.cut_type(), StatusCode.ERROR),  # module-qualified, as OpenTelemetry writes it
                   ("overloaded_error", StatusCode.ERROR),  # the provider's own type, as it is
                   ("cancelled", StatusCode.ERROR)]
    assert [sp.attributes["streamscope.class"] for sp in spans] == ["upstream_error", "upstream_error", "cancelled"]


def test_openai_failed_and_cancelled_spans_are_errors(osim: Simulator, session: Callable[[str], Session]) -> None:
    s = session("openai")
    assert isinstance(chat_call(osim, "chat_cut_connection"), openai.APIConnectionError)
    assert isinstance(chat_call(osim, "chat_inband_error"), openai.APIError)
    stream = oclient(osim, "chat_silent_stall").chat.completions.create(**CHAT, stream=True)
    next(iter(stream))
    stream.close()
    assert chat_call(osim) is None
    spans = [sp for sp in s.exporter.get_finished_spans() if sp.instrumentation_scope.name == "streamscope"]
    got = [((sp.attributes or {}).get("error.type"), sp.status.status_code) for sp in spans]
    assert got == [(sdk_lines.cut_type("openai"), StatusCode.ERROR), ("server_error", StatusCode.ERROR),
                   ("cancelled", StatusCode.ERROR), (None, StatusCode.UNSET)]


# --------------------------------------------------------------------------- the content event


def _check_details(event: Any, span: ReadableSpan, provider: str) -> dict[str, Any]:
    assert (event.trace_id, event.span_id) == (span.context.trace_id, span.context.span_id)
    assert event.attributes["gen_ai.operation.name"] == "chat"
    assert event.attributes["gen_ai.provider.name"] == provider
    assert event.severity_number is not None and event.severity_number.value == 5  # DEBUG
    assert event.body is None, "the content is in the event's attributes, as the conventions define them"
    content = {key: event.attributes[key] for key in CONTENT_KEYS if key in event.attributes}
    assert content and not any(isinstance(v, str) for v in content.values()), "structured, not JSON strings"
    return json.loads(json.dumps(content))


def test_anthropic_content_event_body(sim: Simulator, session: Callable[[str], Session],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE, "SPAN_AND_EVENT")
    s = session("anthropic")
    tools = [{"name": "get_weather", "description": SECRET, "input_schema": WEATHER},
             {"type": "web_search_20250305", "name": "web_search"}]
    assert anthropic_call(sim, "tool_use", tools=tools, system="Be brief.") is None
    span = s.one()
    (event,) = s.events(DETAILS)
    body = _check_details(event, span, "anthropic")
    definitions = [{"type": "function", "name": "get_weather", "description": SECRET, "parameters": WEATHER},
                   {"type": "web_search_20250305", "name": "web_search"}]
    assert body["gen_ai.tool.definitions"] == definitions
    prompt = USER[0]["content"]
    assert body["gen_ai.input.messages"] == [{"role": "user", "parts": [{"type": "text", "content": prompt}]}]
    assert body["gen_ai.system_instructions"] == [{"type": "text", "content": "Be brief."}]
    [output] = body["gen_ai.output.messages"]
    assert "finish_reason" not in output and output["role"] == "assistant"
    assert event.attributes["gen_ai.response.finish_reasons"] == ("tool_call",)
    # On the span: the same, as JSON strings.
    assert json.loads(span.attributes["gen_ai.tool.definitions"]) == definitions
    assert "finish_reason" not in json.loads(span.attributes["gen_ai.output.messages"])[0]


def test_openai_content_event_body(osim: Simulator, session: Callable[[str], Session],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE, "EVENT_ONLY")
    s = session("openai")
    chat_tools = [{"type": "function", "function": {"name": "get_weather", "description": SECRET,
                                                    "parameters": WEATHER}}]
    assert chat_call(osim, "chat_tool_call", tools=chat_tools) is None
    assert responses_call(osim, tools=[{"type": "function", "name": "get_weather", "description": SECRET,
                                        "parameters": WEATHER, "strict": True}, {"type": "web_search"}]) is None
    spans = [sp for sp in s.exporter.get_finished_spans() if sp.instrumentation_scope.name == "streamscope"]
    events = s.events(DETAILS)
    assert len(events) == 2
    function = {"type": "function", "name": "get_weather", "description": SECRET, "parameters": WEATHER}
    for span, event, tools in zip(spans, events, ([function], [function, {"type": "web_search"}])):
        body = _check_details(event, span, "openai")
        assert body["gen_ai.tool.definitions"] == tools
        assert all("finish_reason" not in m for m in body["gen_ai.output.messages"])
        assert not set(CONTENT_KEYS) & set(span.attributes or {}), "EVENT_ONLY: nothing on the span"


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_nothing_with_capture_off(sim: Simulator, osim: Simulator, session: Callable[[str], Session],
                                  sdk: str) -> None:
    s = session(sdk)
    tools = [{"name": "get_weather", "description": SECRET, "input_schema": WEATHER}]
    if sdk == "anthropic":
        assert anthropic_call(sim, tools=tools) is None
    else:
        assert responses_call(osim, tools=[{"type": "function", "name": "get_weather", "description": SECRET,
                                            "parameters": WEATHER}]) is None
    assert not set(CONTENT_KEYS) & set(s.one().attributes or {})
    assert s.events(DETAILS) == []
    assert SECRET not in s.one().to_json()


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_emit_event_false_wins(sim: Simulator, osim: Simulator, session: Callable[[str], Session],
                               monkeypatch: pytest.MonkeyPatch, sdk: str) -> None:
    monkeypatch.setenv(CAPTURE, "EVENT_ONLY")
    monkeypatch.setenv(EMIT, "False")
    s = session(sdk)
    assert (anthropic_call(sim) if sdk == "anthropic" else chat_call(osim)) is None
    assert s.events(DETAILS) == []
    assert not set(CONTENT_KEYS) & set(s.one().attributes or {})


@pytest.mark.parametrize("sdk", ["anthropic", "openai"])
def test_emit_event_true_without_capture(sim: Simulator, osim: Simulator, session: Callable[[str], Session],
                                         monkeypatch: pytest.MonkeyPatch, sdk: str) -> None:
    """`true`: the event for every call; without content capture it carries the attributes alone."""
    monkeypatch.setenv(EMIT, "TRUE")
    s = session(sdk)
    assert (anthropic_call(sim) if sdk == "anthropic" else chat_call(osim)) is None
    (event,) = s.events(DETAILS)
    assert event.attributes["gen_ai.provider.name"] == sdk
    assert event.attributes["gen_ai.operation.name"] == "chat"
    assert event.body is None and not set(CONTENT_KEYS) & set(event.attributes)


def test_emit_event_unset_follows_the_capture_mode(sim: Simulator, session: Callable[[str], Session],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE, "SPAN_ONLY")
    s = session("anthropic")
    assert anthropic_call(sim) is None
    assert s.events(DETAILS) == [] and "gen_ai.input.messages" in (s.one().attributes or {})


# --------------------------------------------------------------------------- the exception event


@pytest.mark.parametrize(("sdk", "scenario"), [("anthropic", "cut_connection"), ("anthropic", "inband_error"),
                                               ("openai", "chat_cut_connection"), ("openai", "chat_inband_error")])
def test_exception_event_on_a_failed_call(sim: Simulator, osim: Simulator, session: Callable[[str], Session],
                                          sdk: str, scenario: str) -> None:
    s = session(sdk)
    exc = anthropic_call(sim, scenario) if sdk == "anthropic" else chat_call(osim, scenario)
    assert exc is not None
    span = s.one()
    (event,) = s.events(EXCEPTION)
    assert event.severity_number is not None and event.severity_number.value == 13  # WARN
    assert event.attributes["exception.type"] == exception_type(exc)
    assert "." in event.attributes["exception.type"]  # module-qualified (anthropic.…, openai.…, httpx2.…)
    assert "exception.message" not in event.attributes, "no message text without content capture"
    assert event.attributes["error.type"] == span.attributes["error.type"]
    assert event.attributes["gen_ai.provider.name"] == sdk
    assert (event.trace_id, event.span_id) == (span.context.trace_id, span.context.span_id)
    assert str(exc) not in json.dumps(dict(event.attributes))
    assert not [k for k in span.attributes or {} if k.startswith("exception.")], "never on the span"


def test_exception_event_message_with_capture_on(sim: Simulator, session: Callable[[str], Session],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CAPTURE, "SPAN_ONLY")
    s = session("anthropic")
    exc = anthropic_call(sim, "inband_error")
    assert exc is not None
    (event,) = s.events(EXCEPTION)
    assert event.attributes["exception.message"] == str(exc)


def test_no_exception_event_without_a_failure(sim: Simulator, osim: Simulator,
                                              session: Callable[[str], Session]) -> None:
    s = session("anthropic")
    assert anthropic_call(sim) is None
    stream = aclient(sim, "long_answer").messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    next(iter(stream))
    stream.close()  # cancelled: the caller's choice, no exception
    assert s.events(EXCEPTION) == []


def test_exception_event_without_an_exception(sim: Simulator, session: Callable[[str], Session]) -> None:
    """A body cut short raises nothing: the event's type is the error type."""
    s = session("anthropic")
    assert anthropic_call(sim, "incomplete") is None
    (event,) = s.events(EXCEPTION)
    assert event.attributes["exception.type"] == "incomplete_stream" == s.one().attributes["error.type"]
