"""The simulator's OpenAI routes, driven over real loopback HTTP by the real openai SDK.

Chat Completions and the Responses API, with ``create(stream=True)`` and the ``.stream()``
helpers, sync and async: the SDK gets exactly the scripted content, finish reasons, usage and
errors, and every payload on the wire is one the SDK's own types declare, field for field.
Timings are bounded below tightly (the server never sends early) and above generously.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from itertools import accumulate
from typing import Any, get_args

import anthropic
import httpx2
import openai
import pytest
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent
from pydantic import BaseModel

from streamscope.simulator import SCENARIOS, Event, HttpError, Raw, Scenario, Silence, Simulator, TextSpec, ToolUseSpec
from streamscope.simulator.catalog import ANSWER
from streamscope.simulator.mix import DEFAULT_MIX, on_route
from streamscope.simulator.openai_catalog import OPENAI_DESCRIPTIONS, OPENAI_SCENARIOS
from streamscope.simulator.openai_streams import (
    ReasoningSpec,
    chat_error,
    chat_stream,
    personalize,
    responses_error,
    responses_stream,
)

MARGIN = 0.5  # generous: only the lower bounds are tight (the server never sends early)
FAST = 0.05
MESSAGES = [{"role": "user", "content": "hi"}]
CHAT: dict[str, Any] = {"model": "gpt-sim-test", "messages": MESSAGES, "stream_options": {"include_usage": True}}
RESPONSES: dict[str, Any] = {"model": "gpt-sim-test", "input": "hi"}
SUMMARY = ("**Listing failure modes**\n\nThe user asks how streams fail."
           " Stalls, cuts, truncation, and missing final events.")
WEATHER = ("get_weather", '{"location": "San Francisco, CA", "unit": "celsius"}')
REFUSAL = "I'm sorry, but I can't help with that."
EVENT_TYPES = {get_args(m.model_fields["type"].annotation)[0]: m for m in get_args(get_args(ResponseStreamEvent)[0])}


@pytest.fixture(scope="module")
def sim() -> Any:
    with Simulator() as simulator:
        yield simulator


@pytest.fixture(scope="module")
def fast() -> Any:
    with Simulator(time_scale=FAST) as simulator:
        yield simulator


def fresh(sim: Simulator, name: str | Scenario) -> str:
    """The base_url of a private copy of ``name`` (or of a given scenario), attempts from 0."""
    scenario = name if isinstance(name, Scenario) else OPENAI_SCENARIOS[name]
    copy = Scenario(f"{scenario.name}-{uuid.uuid4().hex[:8]}", scenario.attempts)
    sim.add(copy)
    return sim.openai_url(copy.name)


def client(url: str, **kwargs: Any) -> openai.OpenAI:
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("timeout", 15)
    return openai.OpenAI(base_url=url, api_key="test", _strict_response_validation=True, **kwargs)


def aclient(url: str, **kwargs: Any) -> openai.AsyncOpenAI:
    kwargs.setdefault("max_retries", 0)
    kwargs.setdefault("timeout", 15)
    return openai.AsyncOpenAI(base_url=url, api_key="test", _strict_response_validation=True, **kwargs)


# --------------------------------------------------------------------------- what each scenario gives the SDK


@dataclass(frozen=True)
class Expect:
    text: str | None = None  # None: any text longer than 20 characters
    end: str | None = "stop"  # chat: finish_reason; responses: the terminal event's status (None: no end)
    usage: tuple[int, int, int] | None = None  # (prompt/input, completion/output, reasoning); None: any
    has_usage: bool = True
    refusal: str | None = None
    summary: str = ""
    tool: tuple[str, str] | None = None
    reason: str | None = None  # incomplete_details.reason
    raises: type[BaseException] | None = None


EXPECT: dict[str, Expect] = {
    "chat_complete": Expect("Hello! How can I help you today?", usage=(12, 10, 0)),
    "chat_reasoning": Expect(ANSWER, usage=(25, len(ANSWER) // 4 + 256, 256)),
    "chat_truncated": Expect(end="length", usage=(25, 1024, 0)),
    "chat_budget_exhausted": Expect("", end="length", usage=(25, 1024, 1024)),
    "chat_refusal": Expect("", refusal=REFUSAL),
    "chat_content_filter": Expect("Streams fail in", end="content_filter"),
    "chat_tool_call": Expect("", end="tool_calls", tool=WEATHER, usage=(25, 18, 0)),
    "chat_inband_error": Expect(raises=openai.APIError),
    "chat_cut_connection": Expect(raises=openai.APIConnectionError),
    "chat_incomplete": Expect("Streams fail in", end=None, has_usage=False),
    "chat_silent_stall": Expect("Streams fail in ways."),
    "chat_silent_start": Expect("Streams fail in"),
    "chat_no_usage": Expect("Hello! How can I help you today?", has_usage=False),
    "chat_http_429_then_ok": Expect(raises=openai.RateLimitError),  # the first attempt, no retries
    "responses_complete": Expect("Hello! How can I help you today?", "completed", usage=(12, 10, 0)),
    "responses_reasoning": Expect(ANSWER, "completed", usage=(25, len(ANSWER) // 4 + 120, 120), summary=SUMMARY),
    "responses_reasoning_silent": Expect(ANSWER, "completed", usage=(25, len(ANSWER) // 4 + 256, 256)),
    "responses_truncated": Expect(end="incomplete", usage=(25, 1024, 0), reason="max_output_tokens"),
    "responses_budget_exhausted": Expect("", "incomplete", usage=(25, 1024, 1024), summary=SUMMARY * 3,
                                         reason="max_output_tokens"),
    "responses_refusal": Expect("", "completed", refusal=REFUSAL),
    "responses_content_filter": Expect("Streams fail in", "incomplete", reason="content_filter"),
    "responses_tool_call": Expect("", "completed", tool=WEATHER, usage=(25, 18, 0)),
    "responses_inband_error": Expect(raises=openai.APIError),
    "responses_inband_error_documented": Expect("Streams fail in", "error", has_usage=False),
    "responses_failed": Expect("Streams fail in", "failed", has_usage=False),
    "responses_cut_connection": Expect(raises=openai.APIConnectionError),
    "responses_incomplete": Expect("Streams fail in", None, has_usage=False),
    "responses_silent_stall": Expect("Streams fail in ways.", "completed"),
    "responses_silent_start": Expect("Streams fail in", "completed"),
    "openai_http_429": Expect(raises=openai.RateLimitError),
    "openai_http_500": Expect(raises=openai.InternalServerError),
    "openai_http_503": Expect(raises=openai.InternalServerError),
    "openai_http_400": Expect(raises=openai.BadRequestError),
}
CHAT_NAMES = sorted(n for n in EXPECT if not n.startswith("responses_"))
HTTP_ERRORS = {n for n, s in OPENAI_SCENARIOS.items() if isinstance(s.steps_for(0)[0], HttpError)}
RESPONSES_NAMES = sorted(n for n in EXPECT if not n.startswith("chat_"))


def test_every_openai_scenario_has_an_expectation_and_merges_with_the_anthropic_catalog() -> None:
    assert set(EXPECT) == set(OPENAI_SCENARIOS) == set(OPENAI_DESCRIPTIONS)
    assert not set(OPENAI_SCENARIOS) & set(SCENARIOS)


def read_chat(c: openai.OpenAI, **extra: Any) -> dict[str, Any]:
    """Everything a ``create(stream=True)`` caller sees of a chat stream."""
    got: dict[str, Any] = {"text": "", "refusal": None, "tools": {}, "end": None, "usage": None, "chunks": 0}
    with c.chat.completions.create(**{**CHAT, **extra}, stream=True) as stream:
        got["request_id"] = stream.response.headers.get("x-request-id")
        for chunk in stream:
            got["chunks"] += 1
            got["usage"] = chunk.usage or got["usage"]
            for choice in chunk.choices:
                got["text"] += choice.delta.content or ""
                if choice.delta.refusal is not None:
                    got["refusal"] = (got["refusal"] or "") + choice.delta.refusal
                for call in choice.delta.tool_calls or []:
                    name, args = got["tools"].get(call.index, ("", ""))
                    if call.function:
                        name, args = name + (call.function.name or ""), args + (call.function.arguments or "")
                    got["tools"][call.index] = (name, args)
                got["end"] = choice.finish_reason or got["end"]
    return got


def check_usage(usage: Any, expect: Expect, chat: bool) -> None:
    assert (usage is not None) == expect.has_usage
    if usage is None or expect.usage is None:
        return
    if chat:
        got = (usage.prompt_tokens, usage.completion_tokens, usage.completion_tokens_details.reasoning_tokens)
        assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    else:
        got = (usage.input_tokens, usage.output_tokens, usage.output_tokens_details.reasoning_tokens)
        assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert got == expect.usage


@pytest.mark.parametrize("name", CHAT_NAMES)
def test_chat_create_stream(fast: Simulator, name: str) -> None:
    expect = EXPECT[name]
    with client(fresh(fast, name)) as c:
        if expect.raises:
            with pytest.raises(expect.raises):
                read_chat(c)
            return
        got = read_chat(c)
    assert got["text"] == expect.text if expect.text is not None else len(got["text"]) > 20
    assert got["end"] == expect.end and got["refusal"] == expect.refusal
    assert got["tools"] == ({0: expect.tool} if expect.tool else {})
    check_usage(got["usage"], expect, chat=True)


@pytest.mark.parametrize("name", [n for n in CHAT_NAMES if not EXPECT[n].raises and EXPECT[n].end])
def test_chat_stream_helper(fast: Simulator, name: str) -> None:
    expect = EXPECT[name]
    with client(fresh(fast, name)) as c, c.chat.completions.stream(**CHAT) as stream:
        kinds = {event.type for event in stream}
        if expect.end in ("length", "content_filter"):  # iterating is fine; the final completion raises
            error = openai.LengthFinishReasonError if expect.end == "length" else openai.ContentFilterFinishReasonError
            with pytest.raises(error) as info:
                stream.get_final_completion()
            completion = info.value.completion
        else:
            completion = stream.get_final_completion()
    message = completion.choices[0].message
    assert completion.choices[0].finish_reason == expect.end
    assert (message.content or "") == expect.text if expect.text is not None else len(message.content or "") > 20
    assert message.refusal == expect.refusal and ("refusal.done" in kinds) == (expect.refusal is not None)
    calls = [(t.function.name, t.function.arguments) for t in message.tool_calls or []]
    assert calls == ([expect.tool] if expect.tool else [])
    check_usage(completion.usage, expect, chat=True)
    assert completion.id.startswith("chatcmpl-sim") and completion.model == CHAT["model"]


def read_responses(c: openai.OpenAI, **extra: Any) -> dict[str, Any]:
    """Everything a ``create(stream=True)`` caller sees of a Responses stream."""
    got: dict[str, Any] = {"text": "", "refusal": None, "summary": "", "args": "", "types": [], "response": None}
    with c.responses.create(**{**RESPONSES, **extra}, stream=True) as stream:
        got["request_id"] = stream.response.headers.get("x-request-id")
        for event in stream:
            got["types"].append(event.type)
            if event.type == "response.output_text.delta":
                got["text"] += event.delta
            elif event.type == "response.refusal.delta":
                got["refusal"] = (got["refusal"] or "") + event.delta
            elif event.type == "response.reasoning_summary_text.delta":
                got["summary"] += event.delta
            elif event.type == "response.function_call_arguments.delta":
                got["args"] += event.delta
            elif event.type in ("response.completed", "response.incomplete", "response.failed"):
                got["response"] = event.response
            elif event.type == "error":
                got["error"] = event
    return got


@pytest.mark.parametrize("name", RESPONSES_NAMES)
def test_responses_create_stream(fast: Simulator, name: str) -> None:
    expect = EXPECT[name]
    with client(fresh(fast, name)) as c:
        if expect.raises:
            with pytest.raises(expect.raises):
                read_responses(c)
            return
        got = read_responses(c)
    assert got["types"][:2] == ["response.created", "response.in_progress"]
    assert got["text"] == expect.text if expect.text is not None else len(got["text"]) > 20
    assert got["refusal"] == expect.refusal and got["summary"] == expect.summary
    assert got["args"] == (expect.tool[1] if expect.tool else "")
    response = got["response"]
    if expect.end in ("completed", "incomplete", "failed"):
        assert got["types"][-1] == f"response.{expect.end}" and response.status == expect.end
        reason = response.incomplete_details.reason if response.incomplete_details else None
        assert reason == expect.reason
        assert response.id.startswith("resp_sim_") and response.model == RESPONSES["model"]
    else:
        assert response is None and (got["types"][-1] == expect.end if expect.end else True)
    check_usage(response.usage if response else None, expect, chat=False)


@pytest.mark.parametrize("name", [n for n in RESPONSES_NAMES if EXPECT[n].end in ("completed", "incomplete", "failed")])
def test_responses_stream_helper(fast: Simulator, name: str) -> None:
    expect = EXPECT[name]
    with client(fresh(fast, name)) as c, c.responses.stream(**RESPONSES) as stream:
        last = list(stream)[-1]
        if expect.end != "completed":  # the helper's final response is the completed one only
            assert last.type == f"response.{expect.end}"
            with pytest.raises(RuntimeError, match=r"response\.completed"):
                stream.get_final_response()
            return
        response = stream.get_final_response()
    assert response.output_text == expect.text if expect.text is not None else len(response.output_text) > 20
    kinds = [item.type for item in response.output]
    assert ("reasoning" in kinds) == name.startswith("responses_reasoning")
    calls = [(item.name, item.arguments) for item in response.output if item.type == "function_call"]
    assert calls == ([expect.tool] if expect.tool else [])
    check_usage(response.usage, expect, chat=False)


async def test_async_clients(fast: Simulator) -> None:
    async with aclient(fresh(fast, "chat_tool_call")) as c:
        stream = await c.chat.completions.create(**CHAT, stream=True)
        chunks = [chunk async for chunk in stream]
    assert chunks[-1].usage.completion_tokens == 18 and chunks[-2].choices[0].finish_reason == "tool_calls"
    async with aclient(fresh(fast, "chat_complete")) as c, c.chat.completions.stream(**CHAT) as helper:
        completion = await helper.get_final_completion()
    assert completion.choices[0].message.content == "Hello! How can I help you today?"
    async with aclient(fresh(fast, "responses_reasoning")) as c:
        stream = await c.responses.create(**RESPONSES, stream=True)
        summary = "".join([e.delta async for e in stream if e.type == "response.reasoning_summary_text.delta"])
    assert summary == SUMMARY
    async with aclient(fresh(fast, "responses_tool_call")) as c, c.responses.stream(**RESPONSES) as helper:
        response = await helper.get_final_response()
    assert response.output[0].arguments == WEATHER[1]
    async with aclient(fresh(fast, "responses_cut_connection")) as c:
        stream = await c.responses.create(**RESPONSES, stream=True)
        with pytest.raises(openai.APIConnectionError):
            async for _ in stream:
                pass


# --------------------------------------------------------------------------- the wire, field for field


def sse(payload: bytes) -> list[tuple[str | None, str]]:
    """(event name, data) of each SSE event in a body."""
    events = []
    for block in payload.split(b"\n\n"):
        lines = block.decode().split("\n")
        name = next((line[len("event: "):] for line in lines if line.startswith("event: ")), None)
        data = [line[len("data: "):] for line in lines if line.startswith("data: ")]
        if data:
            events.append((name, "\n".join(data)))
    return events


def undeclared(model: BaseModel, path: str = "") -> list[str]:
    """Fields in a parsed payload that the SDK's types do not declare."""
    found = [f"{path}.{key}" for key in model.model_extra or {}]
    for field in type(model).model_fields:
        value = getattr(model, field)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, BaseModel):
                found += undeclared(item, f"{path}.{field}")
    return found


def wire(sim: Simulator, name: str, route: str, body: dict[str, Any]) -> tuple[httpx2.Response, bytes]:
    """The status, headers and body bytes (up to a cut) of one streamed request."""
    received = []
    with httpx2.Client(timeout=15) as http, http.stream("POST", f"{fresh(sim, name)}/{route}", json=body) as response:
        try:
            received += response.iter_bytes()
        except httpx2.RemoteProtocolError:
            assert name.endswith("cut_connection")
        return response, b"".join(received)


@pytest.mark.parametrize("name", [n for n in CHAT_NAMES if n not in HTTP_ERRORS])
def test_chat_wire_is_what_the_sdk_declares(fast: Simulator, name: str) -> None:
    response, body = wire(fast, name, "chat/completions", {**CHAT, "stream": True})
    assert response.status_code == 200 and response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["x-request-id"].startswith("req_sim_")
    events = sse(body)
    assert all(event is None for event, _ in events)  # data-only lines, no event names
    done = events[-1][1] == "[DONE]"
    assert done == (EXPECT[name].end is not None and not EXPECT[name].raises)
    ids = set()
    for _, data in events[:-1] if done else events:
        raw = json.loads(data)
        if "error" in raw:  # the in-band error, which the SDK raises before any parsing
            assert set(raw) == {"error"} and set(raw["error"]) == {"message", "type", "param", "code"}
            continue
        chunk = ChatCompletionChunk.model_validate(raw, strict=True)
        assert undeclared(chunk) == [] and chunk.model_dump(mode="json", exclude_unset=True) == raw
        assert chunk.model == CHAT["model"] and chunk.created > 1_700_000_000 and chunk.obfuscation is not None
        ids.add(chunk.id)
    assert len(ids) == 1 and ids.pop().startswith("chatcmpl-sim")


@pytest.mark.parametrize("name", [n for n in RESPONSES_NAMES if n not in HTTP_ERRORS])
def test_responses_wire_is_what_the_sdk_declares(fast: Simulator, name: str) -> None:
    response, body = wire(fast, name, "responses", {**RESPONSES, "stream": True, "max_output_tokens": 1024})
    assert response.status_code == 200 and response.headers["x-request-id"].startswith("req_sim_")
    events = sse(body)
    assert events and all(data != "[DONE]" for _, data in events)  # the terminal event ends it, no [DONE]
    numbers, response_ids = [], set()
    for event, data in events:
        raw = json.loads(data)
        assert event == raw["type"]
        numbers.append(raw["sequence_number"])
        if event == "error" and "error" in raw:  # live shape: nested, raised by the SDK before parsing
            assert set(raw) == {"type", "sequence_number", "error"}
            assert set(raw["error"]) == {"type", "code", "message", "param"}
            continue
        parsed = EVENT_TYPES[event].model_validate(raw, strict=True)
        extra = set(undeclared(parsed)) - {".response.store"}  # the API echoes `store`; the SDK does not declare it
        assert extra == ({".obfuscation"} if "delta" in raw else set())  # padding, on the deltas only
        assert parsed.model_dump(mode="json", exclude_unset=True) == raw
        if "response" in raw:
            response_ids.add(parsed.response.id)
            assert parsed.response.model == RESPONSES["model"] and parsed.response.max_output_tokens == 1024
    assert numbers == list(range(len(events)))
    assert len(response_ids) == 1 and response_ids.pop().startswith("resp_sim_")


def test_usage_and_obfuscation_only_when_asked(fast: Simulator) -> None:
    _, asked = wire(fast, "chat_complete", "chat/completions", {**CHAT, "stream": True})
    plain = {**CHAT, "stream": True, "stream_options": {"include_obfuscation": False}}
    _, not_asked = wire(fast, "chat_complete", "chat/completions", plain)
    assert b'"usage":null' in asked and b'"prompt_tokens":12' in asked and b"obfuscation" in asked
    assert b"usage" not in not_asked and b"obfuscation" not in not_asked
    assert len(sse(asked)) == len(sse(not_asked)) + 1  # the usage chunk
    with client(fresh(fast, "chat_complete")) as c:
        assert read_chat(c, stream_options=openai.omit)["usage"] is None
    _, events = wire(fast, "responses_complete", "responses", {**RESPONSES, "stream": True,
                                                                "stream_options": {"include_obfuscation": False}})
    assert b"obfuscation" not in events and b'"input_tokens":12' in events


# --------------------------------------------------------------------------- errors, as the SDK raises them


def test_inband_errors(fast: Simulator) -> None:
    with client(fresh(fast, "chat_inband_error")) as c, pytest.raises(openai.APIError) as chat:
        read_chat(c)
    assert not isinstance(chat.value, openai.APIStatusError)  # a 200 stream: no status error
    assert chat.value.type == "server_error" and chat.value.body["message"] == chat.value.message
    with client(fresh(fast, "responses_inband_error")) as c, pytest.raises(openai.APIError) as live:
        read_responses(c)
    assert not isinstance(live.value, openai.APIStatusError) and live.value.code == "server_error"
    with client(fresh(fast, "responses_inband_error_documented")) as c:
        got = read_responses(c)
    assert got["types"][-1] == "error" and got["error"].code == "server_error" and got["error"].message


def test_cut_is_a_connection_error(fast: Simulator) -> None:
    for name, read in (("chat_cut_connection", read_chat), ("responses_cut_connection", read_responses)):
        with client(fresh(fast, name)) as c, pytest.raises(openai.APIConnectionError) as info:
            read(c)
        assert isinstance(info.value.__cause__, httpx2.RemoteProtocolError)
        assert fast.wait_for_outcome(-1).outcome == "cut"


def test_http_errors_carry_openai_bodies_and_the_request_id(fast: Simulator) -> None:
    with client(fresh(fast, "openai_http_429")) as c, pytest.raises(openai.RateLimitError) as rate:
        read_chat(c)
    log = fast.wait_for_outcome(-1)
    assert rate.value.status_code == 429 and rate.value.code == "rate_limit_exceeded" and rate.value.type == "requests"
    assert rate.value.request_id == log.request_id and log.outcome == "http_error"
    with client(fresh(fast, "openai_http_500")) as c, pytest.raises(openai.InternalServerError) as server:
        read_responses(c)
    assert server.value.body == {"message": server.value.body["message"], "type": "server_error", "param": None,
                                 "code": None}
    url = fresh(fast, "chat_http_429_then_ok")
    with client(url, max_retries=1) as c:
        assert read_chat(c)["text"] == "Hello! How can I help you today?"
    fast.wait_for_outcome(-1)
    logs = [r for r in fast.requests if url.removesuffix("/v1").endswith(r.scenario)]
    assert [(r.attempt, r.outcome) for r in logs] == [(0, "http_error"), (1, "completed")]
    assert logs[1].headers["x-stainless-retry-count"] == "1"


PRE_STREAM = {  # name: (status, the SDK's exception, error type, code, retry-after, a piece of the provider's text)
    "openai_http_429": (429, openai.RateLimitError, "requests", "rate_limit_exceeded", "1", "Rate limit reached"),
    "openai_http_503": (503, openai.InternalServerError, "server_error", None, None, "engine is currently overloaded"),
    "openai_http_500": (500, openai.InternalServerError, "server_error", None, None, "had an error while processing"),
    "openai_http_400": (400, openai.BadRequestError, "invalid_request_error", "context_length_exceeded", None,
                        "maximum context length is 128000 tokens"),
}


@pytest.mark.parametrize("name", sorted(PRE_STREAM))
@pytest.mark.parametrize("read", [read_chat, read_responses], ids=["chat", "responses"])
def test_pre_stream_failures_through_the_sdk(fast: Simulator, name: str, read: Any) -> None:
    """The errors a service meets before any stream, on both routes: status, exception, type, code,
    Retry-After and the provider's own text, as the real openai SDK raises them."""
    status, error, error_type, code, retry_after, text = PRE_STREAM[name]
    with client(fast.openai_url(name)) as c, pytest.raises(error) as info:
        read(c)
    assert (info.value.status_code, info.value.type, info.value.code) == (status, error_type, code)
    assert info.value.response.headers.get("retry-after") == retry_after
    assert text in info.value.message and info.value.request_id == fast.wait_for_outcome(-1).request_id


def test_the_plain_base_url_plays_each_apis_counterpart() -> None:
    """One mix, three APIs: each route draws its own catalog's counterpart of every name."""
    mix = {"complete": 2, "http_429": 1, "http_529": 1, "http_500": 1, "http_400": 1}
    with Simulator(time_scale=FAST, mix=mix, seed=2) as sim, client(sim.openai_url()) as c:
        assert sim.openai_url() == f"http://127.0.0.1:{sim.port}/v1"
        assert set(sim.mix.on("chat")) == {"chat_complete", "openai_http_429", "openai_http_503", "openai_http_500",
                                           "openai_http_400"}
        statuses = set()
        for read in (read_chat, read_responses) * 20:
            try:
                read(c)
                statuses.add(200)
            except openai.APIStatusError as raised:
                statuses.add(raised.status_code)
        played = {log.scenario for log in sim.requests}
    assert statuses == {200, 429, 503, 500, 400}
    assert {"chat_complete", "responses_complete"} <= played and not played & set(SCENARIOS)


def test_an_api_the_mix_has_nothing_for_answers_404() -> None:
    assert on_route("chat_no_usage", "responses") is None and on_route("openai_http_500", "messages") == "http_500"
    with Simulator(mix={"chat_no_usage": 1}) as sim, client(sim.openai_url()) as c:
        assert read_chat(c)["text"] == "Hello! How can I help you today?"
        with pytest.raises(openai.NotFoundError, match="the mix has no scenario for this API"):
            read_responses(c)
        with pytest.raises(anthropic.NotFoundError):
            anthropic.Anthropic(base_url=sim.url(), api_key="test", max_retries=0).messages.create(
                model="m", max_tokens=8, messages=MESSAGES)
    assert set(DEFAULT_MIX) <= set(SCENARIOS)


def test_only_streams_are_simulated(fast: Simulator) -> None:
    with client(fresh(fast, "chat_complete")) as c, pytest.raises(openai.BadRequestError) as info:
        c.chat.completions.create(model="gpt-sim-test", messages=MESSAGES)
    assert info.value.param == "stream"
    with client(fast.openai_url("no_such_scenario")) as c, pytest.raises(openai.NotFoundError):
        c.responses.create(**RESPONSES, stream=True)


def test_request_log_and_request_id(fast: Simulator) -> None:
    with client(fresh(fast, "responses_complete")) as c:
        got = read_responses(c)
    log = fast.wait_for_outcome(-1)
    assert got["request_id"] == log.request_id and log.outcome == "completed" and log.stream
    assert got["response"].id == f"resp_sim_{log.request_id.removeprefix('req_sim_')}"
    assert log.body["input"] == "hi" and log.headers["authorization"] == "Bearer test"


def test_default_simulator_serves_both_catalogs(fast: Simulator) -> None:
    with client(fast.openai_url("chat_complete")) as c:
        assert read_chat(c)["text"] == "Hello! How can I help you today?"
    request = {"model": "claude-sim-test", "max_tokens": 64, "messages": MESSAGES}
    with anthropic.Anthropic(base_url=fast.url("complete"), api_key="test", max_retries=0) as c:
        assert c.messages.create(**request).content[0].text == "Hello! How can I help you today?"


def test_silent_start_times_out(fast: Simulator) -> None:
    with client(fresh(fast, "chat_silent_start"), timeout=0.1) as c, pytest.raises(openai.APITimeoutError):
        read_chat(c)  # 5 s of nothing at scale 1: 0.25 s here


# --------------------------------------------------------------------------- timing


def test_chat_reasoning_is_silent_until_the_first_chunk(sim: Simulator) -> None:
    with client(fresh(sim, "chat_reasoning")) as c:
        start = time.monotonic()
        stream = c.chat.completions.create(**CHAT, stream=True)
        first = next(iter(stream))
        at = time.monotonic() - start
        stream.close()
    assert first.choices[0].delta.role == "assistant"
    assert 1.0 - 0.01 <= at <= 1.0 + MARGIN


def test_responses_reasoning_timing(sim: Simulator) -> None:
    with client(fresh(sim, "responses_reasoning")) as c:
        start = time.monotonic()
        kinds, times = [], []
        for event in c.responses.create(**RESPONSES, stream=True):
            kinds.append(event.type)
            times.append(time.monotonic() - start)
    first_summary = times[kinds.index("response.reasoning_summary_text.delta")]
    reasoning_done = times[kinds.index("response.output_item.done")]
    first_text = times[kinds.index("response.output_text.delta")]
    assert 0.3 - 0.01 <= first_summary <= 0.3 + MARGIN
    assert 0.5 - 0.01 <= reasoning_done <= 0.5 + MARGIN
    assert 0.6 - 0.01 <= first_text <= 0.6 + MARGIN


def test_silence_mid_stream_and_time_scale(sim: Simulator, fast: Simulator) -> None:
    stall = Scenario.single("stall", chat_stream(text=TextSpec(["a", Silence(0.6), "b"], interval=0.05)))
    with client(fresh(sim, stall)) as c:
        start, arrivals = time.monotonic(), {}
        for chunk in c.chat.completions.create(**CHAT, stream=True):
            for choice in chunk.choices:
                if choice.delta.content:
                    arrivals[choice.delta.content] = time.monotonic() - start
    assert 0.6 - 0.01 <= arrivals["b"] - arrivals["a"] <= 0.6 + MARGIN
    with client(fresh(fast, "responses_silent_start")) as c:
        start = time.monotonic()
        next(iter(c.responses.create(**RESPONSES, stream=True)))
        at = time.monotonic() - start
    assert 5.0 * FAST - 0.01 <= at <= 5.0 * FAST + MARGIN


# --------------------------------------------------------------------------- the builders


def at(steps: list[Any]) -> list[float]:
    return [round(t, 6) for t in accumulate(s.delay for s in steps)]


def test_chat_script_timing_and_shape() -> None:
    steps = chat_stream(first_event_delay=1.0, text=TextSpec(["a", "b"], interval=0.1, first_delay=0.2),
                        tool_calls=[ToolUseSpec("f", ["{", "}"], interval=0.05)], finish_reason="tool_calls")
    assert at(steps) == [1.0, 1.2, 1.3, 1.35, 1.4, 1.45, 1.45, 1.45, 1.45]
    assert all(isinstance(s, Raw) for s in steps) and steps[-1].payload == b"data: [DONE]\n\n"
    only_tools = chat_stream(tool_calls=[ToolUseSpec("f", ["{}"])], include_usage=False)
    assert b'"role":"assistant","content":null,"tool_calls":[{"index":0' in only_tools[0].payload  # header rides along
    cut = chat_stream(text=TextSpec(["a"]), interrupt=[chat_error()])
    assert b'"error"' in cut[-1].payload and b"finish_reason\":\"stop" not in b"".join(s.payload for s in cut)


def test_responses_script_numbers_and_timing() -> None:
    steps = responses_stream(reasoning=ReasoningSpec(["x", "y"], duration=0.5, first_delay=0.1),
                             text=TextSpec(["a"], first_delay=0.2), interrupt=[responses_error(delay=0.3)])
    assert all(isinstance(s, Event) for s in steps)
    assert [s.data["sequence_number"] for s in steps] == list(range(len(steps)))
    times = dict(zip([s.name for s in steps], at(steps)))  # the last time of each kind
    assert times["response.reasoning_summary_text.delta"] == 0.3
    assert times["response.output_item.done"] == 0.5  # the reasoning item closes at its duration
    assert times["response.output_text.delta"] == 0.7 and times["error"] == 1.0
    assert steps[-2].name == "response.output_text.delta"  # the message is left open
    silent = responses_stream(reasoning=ReasoningSpec((), duration=2.0), text=TextSpec(["a"], first_delay=0.0))
    assert [s.name for s in silent][2:4] == ["response.output_item.added", "response.output_item.done"]
    assert silent[3].delay == 2.0


def test_personalize_fills_the_request() -> None:
    steps = personalize(responses_stream(text=TextSpec(["a"])), {"model": "m", "instructions": "be brief"}, 7)
    created = steps[0].data["response"]
    assert (created["id"], created["model"], created["instructions"]) == ("resp_sim_7", "m", "be brief")
    request = {"model": "m", "stream_options": {"include_usage": True}}
    chunks = personalize(chat_stream(text=TextSpec(["a"])), request, 3)
    first = json.loads(chunks[0].payload[6:])
    assert (first["id"], first["model"], first["usage"]) == ("chatcmpl-sim3", "m", None)
