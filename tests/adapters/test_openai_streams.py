"""OpenAI streams through the same core: the real openai SDK against the simulator's OpenAI routes.

Every class that can arise from an OpenAI stream, over Chat Completions and the Responses API,
sync and async, `create(stream=True)` and the `stream()` helpers: one span each, with the class
the classifier gives offline too, `gen_ai.provider.name = openai`, the request id, the finish
reason, usage (cached input counted once) and the `streamscope.requests` metric by class. Delays
run at `SCALE` and budgets are a fraction of the silences they cut, so no assertion depends on
the machine's speed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from opentelemetry.instrumentation.dependencies import DependencyConflictError
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import sdk_lines
import streamscope
from conftest import USER, EndCounter, Telemetry, offline_class
from streamscope import AnthropicInstrumentor, Budgets, OpenAIInstrumentor, StreamTimeout
from streamscope.adapters.openai import HELPER_STREAMS, HELPERS, events
from streamscope.adapters.stainless.layers import FLAGS
from streamscope.core import guard as internal
from streamscope.core.failures import Failure
from streamscope.core.record import RequestInfo
from streamscope.core.recorder import StreamRecorder
from streamscope.simulator import Raw, Scenario, Simulator, TextSpec
from streamscope.simulator.openai_catalog import OPENAI_SCENARIOS
from streamscope.simulator.openai_streams import SYSTEM_FINGERPRINT, ReasoningSpec, chat_stream, responses_stream

SCALE = 0.2
CHAT: dict[str, Any] = {"model": "gpt-sim-test", "messages": [{"role": "user", "content": "hi"}],
                        "stream_options": {"include_usage": True}, "max_completion_tokens": 1024}
RESPONSES: dict[str, Any] = {"model": "gpt-sim-test", "input": "hi", "max_output_tokens": 1024}
SUMMARY = ["**Weighing it**\n\n", "The user asks how streams fail.", " Stalls and cuts."]
CUSTOM = [
    # Cached input: counted once in gen_ai.usage.input_tokens (OpenAI's totals already include it).
    Scenario.single("chat_cached", chat_stream(text=TextSpec(["Hello", " there."]), prompt_tokens=100,
                                               cached_tokens=60, completion_tokens=3)),
    Scenario.single("responses_cached", responses_stream(text=TextSpec(["Hello", " there."]), input_tokens=100,
                                                         cached_tokens=60, output_tokens=3)),
    # The catalog's silent starts, twice as long (2 s here): room for the headers before the budget
    # and for the budget's timer before the answer, both late on a loaded machine.
    Scenario.single("chat_long_silent_start", chat_stream(first_event_delay=10.0, text=TextSpec(
        ["Three", " short", " words."], interval=0.05))),
    Scenario.single("responses_long_silent_start", responses_stream(first_event_delay=10.0, text=TextSpec(
        ["Three", " short", " words."], interval=0.05))),
    # Reasoning that outlasts the deadline (25 s at scale 1, 5 s here).
    Scenario.single("responses_long_reasoning", responses_stream(
        reasoning=ReasoningSpec(SUMMARY, duration=25.0, first_delay=0.1), text=TextSpec(["Done."]))),
]


@pytest.fixture(scope="module")
def osim() -> Iterator[Simulator]:
    with Simulator(time_scale=SCALE) as simulator:
        for scenario in CUSTOM:
            simulator.add(scenario)
        yield simulator


def fresh(sim: Simulator, name: str | Scenario) -> str:
    """The base_url of a private copy of a scenario (attempts counted from 0, its own request log)."""
    scenario = name if isinstance(name, Scenario) else {**OPENAI_SCENARIOS, **{s.name: s for s in CUSTOM}}[name]
    copy = Scenario(f"{scenario.name}-{uuid.uuid4().hex[:8]}", scenario.attempts)
    sim.add(copy)
    return sim.openai_url(copy.name)


def sim_request_id(sim: Simulator, url: str) -> str:
    (log,) = [r for r in sim.requests if url.removesuffix("/v1").endswith(r.scenario)]
    return log.request_id


def client(url: str, **kwargs: Any) -> openai.OpenAI:
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("timeout", 15)
    return openai.OpenAI(base_url=url, api_key="test", **kwargs)


def aclient(url: str, **kwargs: Any) -> openai.AsyncOpenAI:
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("timeout", 15)
    return openai.AsyncOpenAI(base_url=url, api_key="test", **kwargs)


def make_telemetry() -> Telemetry:
    exporter, provider, ends = InMemorySpanExporter(), TracerProvider(), EndCounter()
    provider.add_span_processor(ends)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Telemetry(exporter, provider, ends)


@pytest.fixture
def openai_instrument() -> Iterator[Callable[..., Telemetry]]:
    """Turn streamscope on for openai (once per test) with an in-memory span exporter."""
    instrumentor = OpenAIInstrumentor()

    def start(**kwargs: Any) -> Telemetry:
        made = make_telemetry()
        instrumentor.instrument(tracer_provider=made.provider, **kwargs)
        return made

    yield start
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()


@pytest.fixture
def otel(openai_instrument: Callable[..., Telemetry]) -> Telemetry:
    return openai_instrument()


@pytest.fixture
def reader() -> InMemoryMetricReader:
    return InMemoryMetricReader()


def requests_by_class(reader: InMemoryMetricReader) -> list[tuple[str, str, int]]:
    data = reader.get_metrics_data()
    return [(p.attributes["gen_ai.provider.name"], p.attributes["streamscope.class"], p.value)
            for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
            if m.name == "streamscope.requests" for p in m.data.data_points]


def metric_total(reader: InMemoryMetricReader, name: str) -> int:
    data = reader.get_metrics_data()
    return sum(p.value for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
               if m.name == name for p in m.data.data_points)


# --------------------------------------------------------------------------- the matrix


@dataclass(frozen=True)
class Case:
    scenario: str
    label: str
    finish: str = "error"
    error: str | None = None
    usage: tuple[int, int, int] | None = None  # (input, output, reasoning); None: not reported
    budgets: Budgets | None = None
    fired: str | None = None
    raises: type[BaseException] | None = None
    leave_early: bool = False

    @property
    def api(self) -> str:
        return "responses" if self.scenario.startswith("responses_") or self.scenario.endswith("500") else "chat"


CASES = [
    Case("chat_complete", "complete", "stop", usage=(12, 10, 0)),
    Case("responses_complete", "complete", "stop", usage=(12, 10, 0)),
    Case("chat_tool_call", "complete", "tool_call", usage=(25, 18, 0)),
    Case("responses_tool_call", "complete", "tool_call", usage=(25, 18, 0)),
    Case("chat_cached", "complete", "stop", usage=(100, 3, 0)),
    Case("responses_cached", "complete", "stop", usage=(100, 3, 0)),
    Case("chat_truncated", "truncated", "length", usage=(25, 1024, 0)),
    Case("responses_truncated", "truncated", "length", usage=(25, 1024, 0)),
    Case("chat_budget_exhausted", "budget_exhausted", "length", usage=(25, 1024, 1024)),
    Case("responses_budget_exhausted", "budget_exhausted", "length", usage=(25, 1024, 1024)),
    Case("chat_refusal", "refused", "stop", usage=(25, 9, 0)),
    Case("responses_refusal", "refused", "stop", usage=(25, 9, 0)),
    Case("chat_content_filter", "refused", "content_filter", usage=(25, 3, 0)),
    Case("responses_content_filter", "refused", "content_filter", usage=(25, 3, 0)),
    Case("chat_inband_error", "upstream_error", error="server_error", raises=openai.APIError),
    Case("responses_inband_error", "upstream_error", error="server_error", raises=openai.APIError),
    Case("responses_inband_error_documented", "upstream_error", error="server_error"),
    Case("responses_failed", "upstream_error", error="server_error"),
    Case("chat_cut_connection", "upstream_error", error=sdk_lines.cut_type("openai"),
         raises=sdk_lines.cut("openai")),
    Case("responses_cut_connection", "upstream_error", error=sdk_lines.cut_type("openai"),
         raises=sdk_lines.cut("openai")),
    Case("chat_incomplete", "upstream_error", error="incomplete_stream"),
    Case("openai_http_429", "upstream_error", error="rate_limit_exceeded", raises=openai.RateLimitError),
    Case("openai_http_500", "upstream_error", error="server_error", raises=openai.InternalServerError),
    # first_token 0.8: after the headers (with the request id) on a loaded machine, and 1.2 s before
    # the 2 s silence ends (a 0.6 s budget once let the catalog's 1 s silence end first, under load)
    Case("chat_long_silent_start", "stalled_before_first_content", error="timeout",
         budgets=Budgets(first_token=0.8), fired="first_token", raises=StreamTimeout),
    Case("responses_long_silent_start", "stalled_before_first_content", error="timeout",
         budgets=Budgets(first_token=0.8), fired="first_token", raises=StreamTimeout),
    Case("chat_silent_stall", "stalled_mid_stream", error="timeout", budgets=Budgets(idle=0.3), fired="idle",
         raises=StreamTimeout),
    Case("responses_silent_stall", "stalled_mid_stream", error="timeout", budgets=Budgets(idle=0.3), fired="idle",
         raises=StreamTimeout),
    # The three words by 0.03 s, then 2 s of silence: a deadline at 1.2 s lands in the silence after
    # the answer began, with a second for a loaded machine (CI under six workers once saw no text by 0.8 s).
    Case("chat_silent_stall", "deadline_in_answer", error="timeout", budgets=Budgets(deadline=1.2),
         fired="deadline", raises=StreamTimeout),
    # The deadline well after the reasoning item opens (0.02 s in), even on a loaded machine (CI under six
    # workers once saw none by 0.4 s), and far before the reasoning ends.
    Case("responses_long_reasoning", "deadline_in_thinking", error="timeout", budgets=Budgets(deadline=1.5),
         fired="deadline", raises=StreamTimeout),
    Case("chat_silent_stall", "cancelled", error="cancelled", leave_early=True),
    Case("responses_silent_stall", "cancelled", error="cancelled", leave_early=True),
]
PATHS = ("create", "stream")
MATRIX = [pytest.param(case, path, id=f"{path}-{case.scenario}-{case.label}") for case in CASES for path in PATHS]


def drain_sync(stream: Any, leave_early: bool) -> None:
    with stream:
        for event in stream:
            if leave_early and HELPERS.text_of(event):
                break  # leaving the `with` closes it


async def drain_async(stream: Any, leave_early: bool) -> None:
    async with stream:
        async for event in stream:
            if leave_early and HELPERS.text_of(event):
                break


def run_sync(url: str, case: Case, path: str) -> BaseException | None:
    with client(url) as c:
        try:
            if case.api == "chat":
                opened = c.chat.completions.create(**CHAT, stream=True) if path == "create" else \
                    c.chat.completions.stream(**CHAT)
            else:
                opened = c.responses.create(**RESPONSES, stream=True) if path == "create" else \
                    c.responses.stream(**RESPONSES)
            if path == "stream":
                with opened as helper:  # the manager sends the request on entry
                    drain_sync(helper, case.leave_early)
            else:
                drain_sync(opened, case.leave_early)
        except Exception as exc:
            return exc
    return None


async def run_async(url: str, case: Case, path: str) -> BaseException | None:
    async with aclient(url) as c:
        try:
            if path == "create":
                opened = await (c.chat.completions.create(**CHAT, stream=True) if case.api == "chat" else
                                c.responses.create(**RESPONSES, stream=True))
                await drain_async(opened, case.leave_early)
            else:
                manager = c.chat.completions.stream(**CHAT) if case.api == "chat" else c.responses.stream(**RESPONSES)
                async with manager as helper:
                    await drain_async(helper, case.leave_early)
        except Exception as exc:
            return exc
    return None


def check(sim: Simulator, url: str, telemetry: Telemetry, reader: InMemoryMetricReader, case: Case,
          caught: BaseException | None) -> None:
    if case.raises is None:
        assert caught is None, repr(caught)
    else:
        assert isinstance(caught, case.raises), repr(caught)
    if case.fired is not None:
        assert caught.budget == case.fired  # type: ignore[union-attr]
    span = telemetry.one()
    attrs = dict(span.attributes or {})
    assert attrs["streamscope.class"] == case.label == offline_class(span)
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["openai.api.type"] == ("chat_completions" if case.api == "chat" else "responses")
    assert attrs["openai.request.id"] == sim_request_id(sim, url)
    assert attrs["gen_ai.response.finish_reasons"] == (case.finish,)
    assert attrs.get("error.type") == case.error
    assert attrs.get("streamscope.budget.fired") == case.fired
    usage = tuple(attrs.get(k) for k in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
                                         "gen_ai.usage.reasoning.output_tokens"))
    assert usage == (case.usage or (None, None, None))
    if case.scenario.endswith("_cached"):
        assert attrs["gen_ai.usage.cache_read.input_tokens"] == 60
    if case.label == "deadline_in_thinking":  # the reasoning item had opened: a thinking phase
        assert "streamscope.thinking.start" in attrs and "streamscope.time_to_first_text" not in attrs
    assert requests_by_class(reader) == [("openai", case.label, 1)]
    telemetry.assert_each_ended_once()


@pytest.mark.parametrize(("case", "path"), MATRIX)
def test_matrix_sync(osim: Simulator, openai_instrument: Callable[..., Telemetry], reader: InMemoryMetricReader,
                     case: Case, path: str) -> None:
    telemetry = openai_instrument(budgets=case.budgets, meter_provider=MeterProvider(metric_readers=[reader]))
    url = fresh(osim, case.scenario)
    check(osim, url, telemetry, reader, case, run_sync(url, case, path))


@pytest.mark.parametrize(("case", "path"), MATRIX)
async def test_matrix_async(osim: Simulator, openai_instrument: Callable[..., Telemetry],
                            reader: InMemoryMetricReader, case: Case, path: str) -> None:
    telemetry = openai_instrument(budgets=case.budgets, meter_provider=MeterProvider(metric_readers=[reader]))
    url = fresh(osim, case.scenario)
    check(osim, url, telemetry, reader, case, await run_async(url, case, path))


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_leaving_a_helper_early_ends_the_span_at_once(osim: Simulator, otel: Telemetry, api: str) -> None:
    """The `stream()` helpers close the response, not the raw stream: their `close` is hooked too,
    so the span ends when the caller leaves, not when the helper is collected."""
    with client(fresh(osim, f"{api}_silent_stall")) as c:
        manager = c.chat.completions.stream(**CHAT) if api == "chat" else c.responses.stream(**RESPONSES)
        with manager as helper:
            for event in helper:
                if HELPERS.text_of(event):
                    break
            assert otel.spans() == []
        assert helper is not None and len(otel.spans()) == 1  # the helper is still alive here
    assert otel.attrs()["streamscope.class"] == "cancelled" and otel.attrs()["streamscope.partial"] is True


@pytest.mark.parametrize(("name", "label"), [("chat_silent_start", "stalled_before_first_content"),
                                           ("responses_silent_stall", "stalled_mid_stream")])
def test_the_sdks_read_timeout(osim: Simulator, otel: Telemetry, name: str, label: str) -> None:
    with client(fresh(osim, name), timeout=0.6) as c, pytest.raises(sdk_lines.read_timeout("openai")):
        stream = c.chat.completions.create(**CHAT, stream=True) if name.startswith("chat") else \
            c.responses.create(**RESPONSES, stream=True)
        for _ in stream:
            pass
    attrs = otel.attrs()
    assert (attrs["streamscope.class"], attrs["error.type"], attrs["streamscope.budget.fired"]) == (
        label, "timeout", "read_timeout")


# --------------------------------------------------------------------------- what maps to what


def test_request_attributes(osim: Simulator, otel: Telemetry) -> None:
    with client(fresh(osim, "chat_complete")) as c:
        for _ in c.chat.completions.create(model="gpt-sim-test", messages=CHAT["messages"], max_tokens=77,
                                           reasoning_effort="low", service_tier="flex", stream=True):
            pass
    with client(fresh(osim, "responses_complete")) as c:
        for _ in c.responses.create(model="gpt-sim-test", input="hi", max_output_tokens=88,
                                    reasoning={"effort": "high"}, stream=True):
            pass
    chat, responses = (dict(s.attributes or {}) for s in otel.spans())
    assert (chat["streamscope.class"], responses["streamscope.class"]) == ("complete", "complete")
    for attrs in (chat, responses):
        assert attrs["server.address"] == "127.0.0.1" and attrs["server.port"] == osim.port
        assert attrs["gen_ai.request.model"] == "gpt-sim-test" and attrs["gen_ai.request.stream"] is True
        assert "streamscope.thinking.budget_tokens" not in attrs  # OpenAI has no token budget for reasoning
    assert (chat["gen_ai.request.max_tokens"], chat["openai.request.reasoning_effort"]) == (77, "low")
    assert chat["openai.request.service_tier"] == "flex"
    assert (responses["gen_ai.request.max_tokens"], responses["openai.request.reasoning_effort"]) == (88, "high")
    # What the response says: the tier it ran on (not the request's "auto", which response.created
    # echoes) and, for Chat Completions, the backend's fingerprint.
    assert (chat["openai.response.service_tier"], chat["openai.response.system_fingerprint"]) == (
        "default", SYSTEM_FINGERPRINT)
    assert responses["openai.response.service_tier"] == "default"
    assert "openai.response.system_fingerprint" not in responses  # the Responses API sends none


def test_which_calls_are_recorded_and_as_which_provider() -> None:
    """Streamed POSTs to either API only, raw-response calls too (not a stored response's resumption);
    the Azure clients are `azure.ai.openai`, as the conventions name them."""
    from openai._models import FinalRequestOptions

    from streamscope.adapters.openai.request import api_of, streamed_request
    from streamscope.pipeline import Pipeline

    def options(method: str, url: str, **kwargs: Any) -> FinalRequestOptions:
        return FinalRequestOptions.construct(method=method, url=url, json_data={"model": "m"}, **kwargs)

    assert api_of(options("post", "/chat/completions"), True) == "chat_completions"
    assert api_of(options("post", "/responses"), True) == "responses"
    assert api_of(options("post", "/responses"), False) is None
    assert api_of(options("get", "/responses/resp_1"), True) is None
    assert api_of(options("post", "/chat/completions", headers={"X-Stainless-Raw-Response": "stream"}),
                  True) == "chat_completions"
    pipeline = Pipeline(TracerProvider().get_tracer("t"))
    azure = openai.AzureOpenAI(api_key="k", api_version="2024-10-21", azure_endpoint="https://x.openai.azure.com")
    info = streamed_request(pipeline, azure, options("post", "/chat/completions"), True, 0.0)
    assert info is not None and (info.provider, info.server_address, info.server_port) == (
        "azure.ai.openai", "x.openai.azure.com", 443)


def test_reasoning_phases_from_reasoning_items(osim: Simulator, otel: Telemetry) -> None:
    for name in ("responses_reasoning", "responses_reasoning_silent"):
        with client(fresh(osim, name)) as c:
            for _ in c.responses.create(**RESPONSES, stream=True):
                pass
    summarized, silent = (dict(s.attributes or {}) for s in otel.spans())
    for attrs in (summarized, silent):
        assert attrs["streamscope.class"] == "complete"  # no budget_tokens: silently_unverified never applies
        assert attrs["streamscope.thinking.start"] < attrs["streamscope.thinking.end"]
        assert attrs["streamscope.thinking.end"] <= attrs["streamscope.time_to_first_text"]
    # At scale 1 the summarized item opens with its first delta (0.3 s) and closes at 0.5 s; the
    # silent one opens at once and closes at 1 s. The server never sends early: lower bounds only,
    # each from the request (a phase's length is not one: on a loaded machine the event that opens
    # it can be read late, the one that closes it on time).
    assert summarized["streamscope.thinking.end"] >= 0.5 * SCALE - 0.01
    assert silent["streamscope.thinking.end"] >= 1.0 * SCALE - 0.01
    assert summarized["gen_ai.usage.reasoning.output_tokens"] == 120


def reasoning_chunk(text: str, delay: float) -> Raw:
    """A chat chunk as DeepSeek-style compatible servers send reasoning (not an OpenAI field)."""
    chunk = {"id": None, "object": "chat.completion.chunk", "created": None, "model": None,
             "choices": [{"index": 0, "delta": {"reasoning_content": text}, "logprobs": None, "finish_reason": None}]}
    return Raw(f"data: {json.dumps(chunk)}\n\n".encode(), delay)


def test_chat_reasoning_content_of_compatible_servers(osim: Simulator, otel: Telemetry) -> None:
    steps = chat_stream(text=TextSpec(["The", " answer."], first_delay=0.5))
    steps[1:1] = [reasoning_chunk("Let me think.", 0.1), reasoning_chunk(" Done.", 0.5)]
    with client(fresh(osim, Scenario.single("chat_reasoning_content", steps))) as c:
        text = "".join(HELPERS.text_of(chunk) for chunk in c.chat.completions.create(**CHAT, stream=True))
    attrs = otel.attrs()
    assert text == "The answer." and attrs["streamscope.text_chars"] == len(text)
    assert attrs["streamscope.class"] == "complete"
    assert 0 < attrs["streamscope.thinking.start"] < attrs["streamscope.thinking.end"]
    assert attrs["streamscope.thinking.end"] == attrs["streamscope.time_to_first_text"]


def test_include_usage_is_what_reports_tokens(osim: Simulator, otel: Telemetry) -> None:
    """Without `stream_options.include_usage` Chat Completions sends no usage: no token attributes,
    and nothing tells that reasoning took the allowance, so a reasoning model's empty `length`
    stop reads `truncated` rather than `budget_exhausted`."""
    request = {k: v for k, v in CHAT.items() if k != "stream_options"}
    for name in ("chat_complete", "chat_budget_exhausted"):
        with client(fresh(osim, name)) as c:
            for _ in c.chat.completions.create(**request, stream=True):
                pass
    complete, exhausted = (dict(s.attributes or {}) for s in otel.spans())
    assert complete["streamscope.class"] == "complete" and "gen_ai.usage.input_tokens" not in complete
    assert exhausted["streamscope.class"] == "truncated" and "gen_ai.usage.output_tokens" not in exhausted


@pytest.mark.parametrize("name", ["chat_truncated", "responses_truncated"])
def test_every_text_delta_is_counted(osim: Simulator, otel: Telemetry, name: str) -> None:
    """The fast path (plain text deltas once text flows) counts what the caller got, event by event."""
    with client(fresh(osim, name)) as c:
        stream = c.chat.completions.create(**CHAT, stream=True) if name.startswith("chat") else \
            c.responses.create(**RESPONSES, stream=True)
        texts = [text for event in stream if (text := HELPERS.text_of(event))]
    attrs = otel.attrs()
    assert attrs["streamscope.text_chars"] == len("".join(texts)) > 500
    assert attrs["streamscope.content_events"] == len(texts)
    assert attrs["streamscope.max_gap"] >= 0


def _chunk(delta: dict[str, Any], finish: str | None = None, choices: int = 1,
           usage: dict[str, Any] | None = None) -> Any:
    """A chat chunk as the SDK parses it from the wire (`data:` JSON through its own stream)."""
    return openai.types.chat.ChatCompletionChunk.model_validate({
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "gpt-test", "usage": usage,
        "choices": [{"index": i, "delta": delta, "logprobs": None, "finish_reason": finish} for i in range(choices)]})


@pytest.mark.parametrize(("chunk", "expected"), [
    (lambda: _chunk({"content": "tok "}), 4),
    (lambda: _chunk({"content": ""}), -1),
    (lambda: _chunk({"content": "last"}, finish="stop"), -1),
    (lambda: _chunk({"refusal": "no"}), -1),
    (lambda: _chunk({"content": "a", "tool_calls": [{"index": 0, "function": {"arguments": "{"}}]}), -1),
    (lambda: _chunk({"content": "a"}, choices=2), -1),
    (lambda: _chunk({}, choices=0, usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}), -1),
    (lambda: openai.types.responses.ResponseTextDeltaEvent.model_validate({
        "type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0,
        "delta": "tok", "logprobs": [], "sequence_number": 3}), 3),
], ids=["content", "empty", "with-finish", "refusal", "with-tool-call", "two-choices", "usage", "responses"])
def test_the_fast_paths_test_takes_only_plain_text(chunk: Callable[[], Any], expected: int) -> None:
    """`text_length` counts a chunk that carries visible text and nothing else; anything more goes
    to the full dispatch (-1), which records the rest (a finish, a refusal, a tool call, usage)."""
    events.load()
    assert events.text_length(chunk()) == expected


def test_next_and_anext_read_the_same(osim: Simulator, otel: Telemetry) -> None:
    with client(fresh(osim, "chat_complete")) as c:
        stream = c.chat.completions.create(**CHAT, stream=True)
        while True:
            try:
                next(stream)
            except StopIteration:
                break

    async def read() -> None:
        async with aclient(fresh(osim, "responses_complete")) as c:
            stream = await c.responses.create(**RESPONSES, stream=True)
            while True:
                try:
                    await stream.__anext__()
                except StopAsyncIteration:
                    break

    asyncio.run(read())
    assert [s.attributes["streamscope.class"] for s in otel.spans()] == ["complete", "complete"]
    assert {s.attributes["streamscope.text_chars"] for s in otel.spans()} == {len("Hello! How can I help you today?")}


LAYER_SCENARIOS = ("chat_complete", "chat_inband_error", "chat_cut_connection", "responses_complete",
                   "responses_failed", "responses_cut_connection")
LAYER_PATHS = ("sync for", "sync next()", "async for", "async anext()")


def what_the_caller_gets(url: str, path: str) -> tuple[list[str], str | None]:
    """Every event the caller reads, as JSON, and the exception that ended the read."""
    got: list[str] = []
    api = "responses" if "/responses_" in url else "chat"

    async def run_async() -> None:
        async with aclient(url) as c:
            stream = await (c.responses.create(**RESPONSES, stream=True) if api == "responses"
                            else c.chat.completions.create(**CHAT, stream=True))
            if path == "async for":
                async for event in stream:
                    got.append(event.model_dump_json(warnings=False))
            else:
                while (event := await anext(stream, None)) is not None:
                    got.append(event.model_dump_json(warnings=False))

    try:
        if path.startswith("async"):
            asyncio.run(run_async())
        else:
            with client(url) as c:
                stream = (c.responses.create(**RESPONSES, stream=True) if api == "responses"
                          else c.chat.completions.create(**CHAT, stream=True))
                if path == "sync for":
                    for event in stream:
                        got.append(event.model_dump_json(warnings=False))
                else:
                    while (event := next(stream, None)) is not None:
                        got.append(event.model_dump_json(warnings=False))
    except Exception as exc:
        return got, type(exc).__name__
    return got, None


def test_the_sdks_pass_through_layers_are_taken_over(osim: Simulator, openai_instrument: Callable[..., Telemetry],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """openai's `Stream.__iter__`/`__next__` (and async) only re-yield: streamscope reads what they
    read in their place (no generator of its own per event). Its `_iter_events` turns timeouts into
    the SDK's errors and is left alone (OpenAI sends no keep-alive to count). The caller gets what
    the SDK alone gives, in place and, as on an SDK whose layers differ, over them."""
    import re

    def scrubbed(got: tuple[list[str], str | None]) -> tuple[list[str], str | None]:
        return [re.sub(r'"(id|created_at|created|item_id)":("[^"]*"|[0-9.]+)', "", e) for e in got[0]], got[1]

    alone = {(s, p): scrubbed(what_the_caller_gets(fresh(osim, s), p)) for s in LAYER_SCENARIOS for p in LAYER_PATHS}
    telemetry = openai_instrument()
    instrumentor = OpenAIInstrumentor()
    layers = instrumentor._adapter.layers  # type: ignore[union-attr]
    # `_iter_events` is a plain re-yield up to openai 2.x (taken over like anthropic's); from 3.x it
    # turns transport errors into the SDK's own, a form the adapter does not know (wrapped).
    plain_events = not sdk_lines.wraps_body_errors("openai")
    assert {f: getattr(layers, f) for f in FLAGS} == {"iter": True, "aiter": True, "next": True, "anext": True,
                                                      "events": plain_events, "aevents": plain_events,
                                                      "stream": False, "astream": False}, (
        "the installed openai SDK's Stream.__iter__/__next__ are no longer the plain re-yields "
        "adapters/stainless/layers.py writes out (PLAIN): streamscope now wraps them (correct, but a "
        "generator more per event); see what they do now and update PLAIN")
    classes: dict[str, dict[tuple[str, str], Any]] = {}
    for placed in ("in place", "over"):
        if placed == "over":
            for name in FLAGS:
                monkeypatch.setattr(layers, name, False)
        classes[placed] = {}
        for scenario in LAYER_SCENARIOS:
            for path in LAYER_PATHS:
                before = len(telemetry.spans())
                assert scrubbed(what_the_caller_gets(fresh(osim, scenario), path)) == alone[scenario, path], (
                    placed, scenario, path)
                (span,) = telemetry.spans()[before:]
                attrs = span.attributes or {}
                classes[placed][scenario, path] = (attrs["streamscope.class"], attrs.get("error.type"),
                                                   attrs["streamscope.content_events"], attrs["streamscope.text_chars"])
    telemetry.assert_each_ended_once()
    assert classes["in place"] == classes["over"]
    assert {classes["in place"][s, "sync for"][0] for s in LAYER_SCENARIOS} == {"complete", "upstream_error"}
    for scenario in LAYER_SCENARIOS:
        assert len({classes["in place"][scenario, p] for p in LAYER_PATHS}) == 1, scenario


def test_server_tool_items_are_tool_runs() -> None:
    """Hosted tools (web search, ...) run between their item's `added` and `done`: a server tool run."""
    from openai._models import construct_type
    from openai.types.responses import ResponseStreamEvent

    events.load()
    rec = StreamRecorder(RequestInfo(provider="openai"), t0=0.0)
    item = {"id": "ws_1", "type": "web_search_call", "status": "in_progress"}
    for t, kind in ((1.0, "response.output_item.added"), (3.0, "response.output_item.done")):
        event = construct_type(type_=ResponseStreamEvent, value={"type": kind, "output_index": 0, "item": item,
                                                                  "sequence_number": int(t)})
        events.observe(rec, event, t)
    record = rec.finish("done", t=3.0)
    assert record is not None and record.server_tool_calls == 1 and record.server_tool_duration == 2.0


def test_capture_when_opted_in(osim: Simulator, openai_instrument: Callable[..., Telemetry],
                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    telemetry = openai_instrument()
    with client(fresh(osim, "chat_tool_call")) as c:
        for _ in c.chat.completions.create(**CHAT, stream=True):
            pass
    with client(fresh(osim, "responses_reasoning")) as c, \
            c.responses.stream(**RESPONSES, instructions="Be brief.") as stream:
        stream.until_done()
    chat, responses = (dict(s.attributes or {}) for s in telemetry.spans())
    assert json.loads(chat["gen_ai.input.messages"]) == [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
    (message,) = json.loads(chat["gen_ai.output.messages"])
    assert "finish_reason" not in message and chat["gen_ai.response.finish_reasons"] == ("tool_call",)
    assert message["parts"] == [{"type": "tool_call", "id": "call_sim_weather", "name": "get_weather",
                                 "arguments": {"location": "San Francisco, CA", "unit": "celsius"}}]
    assert json.loads(responses["gen_ai.system_instructions"]) == [{"type": "text", "content": "Be brief."}]
    (message,) = json.loads(responses["gen_ai.output.messages"])
    kinds = [part["type"] for part in message["parts"]]
    assert kinds == ["reasoning", "text"] and message["parts"][0]["content"].startswith("**Listing failure modes**")


# --------------------------------------------------------------------------- the helpers


def test_collect_and_the_retry_line(osim: Simulator, otel: Telemetry) -> None:
    with client(fresh(osim, "chat_complete")) as c, c.chat.completions.stream(**CHAT) as helper:
        result = streamscope.collect(helper)
    assert (result.text, result.reason, result.verified) == ("Hello! How can I help you today?", "complete", True)
    with client(fresh(osim, "responses_truncated")) as c:
        result = streamscope.collect(c.responses.create(**RESPONSES, stream=True))
    assert (result.reason, result.status, result.stop_reason) == ("truncated", "degraded", "max_output_tokens")
    url = fresh(osim, "chat_http_429_then_ok")
    with client(url) as c:
        retried = streamscope.stream_with_retry(lambda: c.chat.completions.create(**CHAT, stream=True),
                                                backoff=streamscope.Backoff(base=0.01), sleep=lambda _: None)
        text = "".join(HELPERS.text_of(chunk) for chunk in retried)
    assert text == "Hello! How can I help you today?" and retried.attempts == 2
    assert [s.attributes["streamscope.class"] for s in otel.spans()][-2:] == ["upstream_error", "complete"]


def test_retry_decision(osim: Simulator) -> None:
    caught: dict[str, BaseException] = {}
    for name in ("openai_http_429", "openai_http_500", "chat_inband_error", "chat_cut_connection"):
        with client(fresh(osim, name)) as c, pytest.raises((openai.APIError, sdk_lines.cut("openai"))) as info:
            for _ in c.chat.completions.create(**CHAT, stream=True):
                pass
        caught[name] = info.value
    with client(osim.openai_url("no_such_scenario")) as c, pytest.raises(openai.NotFoundError) as missing:
        c.chat.completions.create(**CHAT, stream=True)
    decide = streamscope.helpers.retry.retry_decision  # found by the exception's package: this adapter
    assert [(d.code, d.retryable) for d in map(decide, caught.values())] == [
        ("rate_limited", True), ("upstream_unavailable", True), ("upstream_unavailable", True),
        ("upstream_unreachable", True)]
    assert decide(missing.value) == Failure("upstream_rejected", False)
    assert decide(openai.APITimeoutError(request=missing.value.request)) == Failure("upstream_timeout", True)
    assert HELPERS.failure(ValueError("not the SDK's")) is None


# --------------------------------------------------------------------------- install, uninstall, side by side


def hooked() -> dict[tuple[type, str], Any]:
    """Every class attribute the openai hooks replace, as it is now."""
    import importlib

    from openai import _base_client, _streaming

    owners = [(_base_client.SyncAPIClient, ("request", "_sleep_for_retry")),
              (_base_client.AsyncAPIClient, ("request", "_sleep_for_retry")),
              (_streaming.Stream, ("__iter__", "__next__", "close", "_iter_events")),
              (_streaming.AsyncStream, ("__aiter__", "__anext__", "close", "_iter_events"))]
    owners += [(getattr(importlib.import_module(m), n), ("close",)) for m, n in HELPER_STREAMS]
    return {(owner, name): owner.__dict__[name] for owner, names in owners for name in names}


def test_uninstrument_puts_everything_back(osim: Simulator) -> None:
    before = hooked()
    instrumentor = OpenAIInstrumentor()
    telemetry = make_telemetry()
    instrumentor.instrument(tracer_provider=telemetry.provider)
    try:
        during = hooked()
        assert all(during[key] is not before[key] for key in before)
    finally:
        instrumentor.uninstrument()
    assert all(after is before[key] for key, after in hooked().items())
    with client(fresh(osim, "chat_complete")) as c, c.chat.completions.stream(**CHAT) as helper:
        helper.until_done()
    assert telemetry.spans() == []


def test_missing_or_old_sdk_is_a_dependency_conflict(monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(OpenAIInstrumentor, "_instruments", ("openai >= 999",))
    instrumentor = OpenAIInstrumentor()
    try:
        instrumentor.instrument()  # the manual path: BaseInstrumentor logs the conflict
        assert not instrumentor.is_instrumented_by_opentelemetry and "openai >= 999" in caplog.text
        with pytest.raises(DependencyConflictError):  # the loader's path skips that check: ours raises for it
            instrumentor.instrument(skip_dep_check=True)
        assert not instrumentor.is_instrumented_by_opentelemetry and instrumentor.pipeline is None
    finally:  # the count of an SDK below the floor stays on until uninstrument(), in this process's later tests too
        instrumentor.uninstrument()


async def test_both_instrumentors_side_by_side(osim: Simulator, reader: InMemoryMetricReader) -> None:
    telemetry = make_telemetry()
    meters = MeterProvider(metric_readers=[reader])
    both = (AnthropicInstrumentor(), OpenAIInstrumentor())
    for instrumentor in both:
        instrumentor.instrument(tracer_provider=telemetry.provider, meter_provider=meters)
    try:
        request = {"model": "claude-sim-test", "max_tokens": 64, "messages": USER}
        async with anthropic.AsyncAnthropic(base_url=osim.url("complete"), api_key="t", max_retries=0) as a, \
                aclient(fresh(osim, "responses_complete")) as o:
            claude = await a.messages.create(**request, stream=True)
            gpt = await o.responses.create(**RESPONSES, stream=True)
            firsts = [await claude.__anext__(), await gpt.__anext__()]  # both open at once, read in turn
            rest = [event async for event in claude] + [event async for event in gpt]
        assert firsts and rest
        internal.internal_error("test: one instrument shared by both")
        both[0].uninstrument()  # one off: the other goes on
        internal.internal_error("test: one instrument shared by both")
        with client(fresh(osim, "chat_complete")) as c:
            for _ in c.chat.completions.create(**CHAT, stream=True):
                pass
    finally:
        for instrumentor in both:
            if instrumentor.is_instrumented_by_opentelemetry:
                instrumentor.uninstrument()
    spans = {(s.attributes["gen_ai.provider.name"], s.attributes["gen_ai.request.model"],
              s.attributes["streamscope.class"]) for s in telemetry.spans()}
    assert len(telemetry.spans()) == 3 and spans == {("anthropic", "claude-sim-test", "complete"),
                                                     ("openai", "gpt-sim-test", "complete")}
    assert sorted(requests_by_class(reader)) == [("anthropic", "complete", 1), ("openai", "complete", 2)]
    assert metric_total(reader, "streamscope.internal_errors") == 2  # once each, not once per instrumentor
    telemetry.assert_each_ended_once()


# --------------------------------------------------------------------------- zero-code

APP = textwrap.dedent(
    """
    import sys, openai
    client = openai.OpenAI(base_url=sys.argv[1], api_key="test-key", max_retries=0)
    try:
        for chunk in client.chat.completions.create(model="gpt-sim-test", stream=True,
                                                    messages=[{"role": "user", "content": "secret prompt"}]):
            pass
        print("RESULT ok")
    except TimeoutError as exc:
        print(f"RESULT {type(exc).__name__} {exc.budget}", flush=True)  # one write, apart from the exporter thread's
    """
)


def openai_entry_point(directory: Path) -> Path:
    """A distribution declaring the `openai_streams` entry point and the `instruments-any` extra, as
    streamscope's wheel does (the editable install here may predate them)."""
    info = directory / "streamscope_openai_entry-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: streamscope-openai-entry\nVersion: 1.0\n"
                                   "Provides-Extra: instruments-any\n"
                                   'Requires-Dist: anthropic>=2.10; extra == "instruments-any"\n'
                                   'Requires-Dist: openai>=3.57; extra == "instruments-any"\n')
    (info / "entry_points.txt").write_text(
        "[opentelemetry_instrumentor]\nopenai_streams = streamscope.instrumentor:OpenAIInstrumentor\n")
    return directory


def test_opentelemetry_instrument_turns_openai_on(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    config = tmp_path / "streamscope.toml"
    # 0.8 s: room for a loaded machine's late first token (0.1 s here) and before the 2 s silence ends.
    config.write_text('[budgets.models."gpt-sim*"]\nfirst_token = 0.8\n')
    pythonpath = os.pathsep.join(filter(None, [str(openai_entry_point(tmp_path / "dist")),
                                               os.environ.get("PYTHONPATH")]))
    environment = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_METRICS_EXPORTER": "none",
                   "OTEL_LOGS_EXPORTER": "none", "OTEL_SERVICE_NAME": "openai-zero-code",
                   "PYTHONPATH": pythonpath, "STREAMSCOPE_CONFIG": str(config)}
    launcher = Path(sys.executable).with_name("opentelemetry-instrument")
    with Simulator(time_scale=SCALE) as sim:
        for scenario in CUSTOM:
            sim.add(scenario)
        runs = {name: subprocess.run([str(launcher), sys.executable, "app.py", sim.openai_url(name)],
                                     capture_output=True, text=True, env=environment, timeout=60, cwd=tmp_path)
                for name in ("chat_complete", "chat_long_silent_start")}
    for result in runs.values():
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "RESULT ok" in runs["chat_complete"].stdout
    assert "RESULT StreamTimeout first_token" in runs["chat_long_silent_start"].stdout
    for name, label in (("chat_complete", "complete"), ("chat_long_silent_start", "stalled_before_first_content")):
        out = runs[name].stdout
        span = json.loads(out[out.index("{"):out.rindex("}") + 1])
        assert span["name"] == "chat gpt-sim-test" and span["kind"] == "SpanKind.CLIENT"
        assert span["attributes"]["gen_ai.provider.name"] == "openai"
        assert span["attributes"]["streamscope.class"] == label
        assert "secret prompt" not in out
