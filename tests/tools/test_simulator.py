"""The simulator, driven over real loopback HTTP by the real (uninstrumented) anthropic SDK.

Wall-clock assertions use generous upper margins (this runs on a loaded 2-core machine); lower
bounds are tight because the server never sends early. Parsing checks run on a time-scaled
simulator so they are fast; timing checks run at real time.
"""

from __future__ import annotations

import errno
import json
import threading
import time
import uuid
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

import anthropic
import pytest

import sdk_lines
from streamscope.simulator import (
    REFERENCE_DIR,
    SCENARIOS,
    Cut,
    Event,
    HttpError,
    Ping,
    Scenario,
    Silence,
    Simulator,
    TextSpec,
    ThinkingSpec,
    from_sse_file,
    message_stream,
)
from streamscope.simulator.catalog import DESCRIPTIONS
from streamscope.simulator.mix import COUNTERPARTS, DEFAULT_MIX

LATE = 0.6  # how late a loaded 2-core machine (six test workers) may read an event; never early
FAST = 0.05  # time_scale of the parsing simulator: a 10 s stall lasts 0.5 s
REQUEST: dict[str, Any] = {
    "model": "claude-sim-test",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "hi"}],
}


@pytest.fixture(scope="module")
def sim() -> Any:
    with Simulator() as simulator:
        yield simulator


@pytest.fixture(scope="module")
def fast() -> Any:
    with Simulator(time_scale=FAST) as simulator:
        yield simulator


def fresh(sim: Simulator, name: str) -> str:
    """The URL of a private copy of catalog scenario ``name``, so its attempt count starts at 0."""
    copy = Scenario(f"{name}-{uuid.uuid4().hex[:8]}", SCENARIOS[name].attempts)
    sim.add(copy)
    return sim.url(copy.name)


def client(url: str, **kwargs: Any) -> anthropic.Anthropic:
    kwargs.setdefault("max_retries", 0)
    return anthropic.Anthropic(base_url=url, api_key="test", timeout=15, **kwargs)


def read_raw(url: str) -> tuple[list[Any], list[float]]:
    """All events of a ``stream=True`` call, and when each arrived (s after the call)."""
    events, times = [], []
    with client(url) as c:
        start = time.monotonic()
        with c.messages.create(**REQUEST, stream=True) as stream:
            for event in stream:
                events.append(event)
                times.append(time.monotonic() - start)
    return events, times


# --------------------------------------------------------------------------- every catalog scenario parses


@dataclass(frozen=True)
class Expect:
    stop_reason: str | None = "end_turn"
    text: str | None = None
    usage: bool = True
    thinking_tokens: int | None = None
    raises: type[BaseException] | None = None


EXPECT: dict[str, Expect] = {
    "basic_text": Expect(text="Hello!"),
    "docs_thinking": Expect(text="27 * 453 = 12,231", usage=False),
    "docs_overloaded": Expect(raises=anthropic.APIStatusError),
    "complete": Expect(text="Hello! How can I help you today?"),
    "thinking": Expect(thinking_tokens=120),
    "thinking_omitted": Expect(thinking_tokens=120),
    "tool_use": Expect("tool_use", text="I'll check the weather."),
    "long_answer": Expect(),
    "truncated": Expect("max_tokens"),
    "budget_exhausted": Expect("max_tokens", text="Str", thinking_tokens=1020),
    "silently_unverified": Expect(thinking_tokens=4000),
    "refused": Expect("refusal", text="I can't help with that."),
    "inband_error": Expect(raises=anthropic.APIStatusError),
    "cut_connection": Expect(raises=sdk_lines.cut()),
    "incomplete": Expect(None, text="Streams fail in"),
    "prose_overloaded": Expect(raises=anthropic.APIStatusError),  # its first request, as `fresh` makes it
    "tool_call_cut": Expect(raises=sdk_lines.cut()),
    "pinging_stall": Expect(text="Streams fail in ways."),
    "silent_stall": Expect(text="Streams fail in ways."),
    "silent_start": Expect(text="Streams fail in"),
    "http_529": Expect(raises=anthropic.OverloadedError),
    "http_529_then_ok": Expect(raises=anthropic.OverloadedError),  # first attempt, no retries
    "http_429": Expect(raises=anthropic.RateLimitError),
    "http_500": Expect(raises=anthropic.InternalServerError),
    "http_400": Expect(raises=anthropic.BadRequestError),
    "unknown_events": Expect(text="Hello there."),
    "malformed_json": Expect(raises=json.JSONDecodeError),
    "slow_thinking": Expect(thinking_tokens=400),
    "slow_answer": Expect(),
    "timed_thinking": Expect(),
    "timed_pinging_stall": Expect(text="Streams fail in"),
    "timed_long_answer": Expect(),
    "timed_silent_start": Expect(text="Hello."),
}


def test_every_catalog_scenario_has_an_expectation_and_a_description() -> None:
    assert set(EXPECT) == set(SCENARIOS)
    assert set(DESCRIPTIONS) == set(SCENARIOS)
    assert all(text and "\n" not in text for text in DESCRIPTIONS.values())


@pytest.mark.parametrize("name", sorted(EXPECT))
def test_raw_events_parse(fast: Simulator, name: str) -> None:
    expect = EXPECT[name]
    if expect.raises:
        with pytest.raises(expect.raises):
            read_raw(fresh(fast, name))
        return
    events, _ = read_raw(fresh(fast, name))
    types = [e.type for e in events]
    assert types[0] == "message_start"
    assert (types[-2:] == ["message_delta", "message_stop"]) == (expect.stop_reason is not None)
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    text = "".join(d.text for d in deltas if d.type == "text_delta")
    assert text == expect.text if expect.text is not None else len(text) > 20
    if expect.stop_reason:
        assert events[-2].delta.stop_reason == expect.stop_reason
        assert (events[-2].usage is not None) == expect.usage


@pytest.mark.parametrize("name", sorted(n for n, e in EXPECT.items() if e.usage))
def test_stream_helper_final_message(fast: Simulator, name: str) -> None:
    expect = EXPECT[name]
    with client(fresh(fast, name)) as c:
        if expect.raises:
            with pytest.raises(expect.raises), c.messages.stream(**REQUEST) as stream:
                stream.get_final_message()
            return
        with c.messages.stream(**REQUEST) as stream:
            message = stream.get_final_message()
    assert message.stop_reason == expect.stop_reason
    assert message.usage.output_tokens >= 1
    details = message.usage.output_tokens_details
    assert (details.thinking_tokens if details else None) == expect.thinking_tokens
    if expect.thinking_tokens is not None:
        assert message.content[0].type == "thinking" and message.content[0].signature
        assert message.usage.output_tokens >= expect.thinking_tokens


async def test_async_client_parses_thinking(fast: Simulator) -> None:
    async with anthropic.AsyncAnthropic(base_url=fresh(fast, "thinking"), api_key="test", max_retries=0) as c:
        async with c.messages.stream(**REQUEST) as stream:
            thinking = [e async for e in stream if e.type == "thinking"]
            message = await stream.get_final_message()
    assert thinking and message.content[0].thinking == "".join(e.thinking for e in thinking)
    assert message.usage.output_tokens_details.thinking_tokens == 120


def test_thinking_omitted_sends_one_empty_delta(fast: Simulator) -> None:
    events, _ = read_raw(fresh(fast, "thinking_omitted"))
    kinds = [(e.delta.type, getattr(e.delta, "thinking", None)) for e in events if e.type == "content_block_delta"]
    assert kinds[:2] == [("thinking_delta", ""), ("signature_delta", None)]


def test_tool_use_input_and_non_streaming(fast: Simulator) -> None:
    with client(fresh(fast, "tool_use")) as c:
        message = c.messages.create(**REQUEST)  # no stream: one JSON Message from the same script
    assert message.stop_reason == "tool_use"
    assert message.content[1].input == {"location": "San Francisco, CA", "unit": "celsius"}
    assert message.id.startswith("msg_sim_") and message.model == REQUEST["model"]


def test_beta_namespace(fast: Simulator) -> None:
    with client(fresh(fast, "complete")) as c, c.beta.messages.create(**REQUEST, stream=True) as stream:
        assert [e.type for e in stream][-1] == "message_stop"
    assert fast.wait_for_outcome(-1).outcome == "completed"  # logged by the server thread after the last byte


def test_unknown_scenario_is_a_404(fast: Simulator) -> None:
    with client(fast.url("no_such_scenario")) as c, pytest.raises(anthropic.NotFoundError):
        c.messages.create(**REQUEST, stream=True)


# --------------------------------------------------------------------------- failures, as the SDK raises them


def test_inband_error_after_content(fast: Simulator) -> None:
    texts = []
    with client(fresh(fast, "inband_error")) as c, pytest.raises(anthropic.APIStatusError) as info:
        for event in c.messages.create(**REQUEST, stream=True):
            if event.type == "content_block_delta":
                texts.append(event.delta.text)
    # An error event inside a 200 stream: APIStatusError with the body's type, not an OverloadedError.
    assert info.value.type == "overloaded_error" and info.value.status_code == 200
    assert not isinstance(info.value, anthropic.OverloadedError)
    assert texts == ["Streams", " fail", " in"]


def test_cut_is_a_transport_error(fast: Simulator) -> None:
    texts = []
    with client(fresh(fast, "cut_connection")) as c, pytest.raises(sdk_lines.cut()):
        for event in c.messages.create(**REQUEST, stream=True):
            if event.type == "content_block_delta":
                texts.append(event.delta.text)
    assert texts == ["Streams", " fail", " in"]
    assert fast.wait_for_outcome(-1).outcome == "cut"


def test_529_raises_after_retries(fast: Simulator) -> None:
    url = fresh(fast, "http_529")
    with client(url, max_retries=1) as c, pytest.raises(anthropic.OverloadedError) as info:
        c.messages.create(**REQUEST, stream=True)
    assert info.value.status_code == 529 and info.value.type == "overloaded_error"
    assert info.value.response.headers["retry-after"] == "0"
    logs = [r for r in fast.requests if url.endswith(r.scenario)]
    assert [(r.attempt, r.outcome) for r in logs] == [(0, "http_error"), (1, "http_error")]


def test_529_then_ok_succeeds_with_one_retry(fast: Simulator) -> None:
    url = fresh(fast, "http_529_then_ok")
    with client(url, max_retries=1) as c, c.messages.stream(**REQUEST) as stream:
        assert stream.get_final_message().stop_reason == "end_turn"
    fast.wait_for_outcome(-1)  # "completed" is logged by the server thread after the last byte
    logs = [r for r in fast.requests if url.endswith(r.scenario)]
    assert [(r.attempt, r.outcome) for r in logs] == [(0, "http_error"), (1, "completed")]
    assert logs[1].headers["x-stainless-retry-count"] == "1"


PRE_STREAM = {  # name: (status, the SDK's exception, error type, retry-after, a piece of the provider's text)
    "http_429": (429, anthropic.RateLimitError, "rate_limit_error", "1", "would exceed the rate limit"),
    "http_529": (529, anthropic.OverloadedError, "overloaded_error", "0", "Overloaded"),
    "http_500": (500, anthropic.InternalServerError, "api_error", None, "internal to Anthropic's systems"),
    "http_400": (400, anthropic.BadRequestError, "invalid_request_error", None, "prompt is too long"),
}


@pytest.mark.parametrize("name", sorted(PRE_STREAM))
@pytest.mark.parametrize("stream", [True, False])
def test_pre_stream_failures_through_the_sdk(fast: Simulator, name: str, stream: bool) -> None:
    """The errors a service meets before any stream: status, exception, type, Retry-After and the
    provider's own text, streaming or not, as the real SDK raises them."""
    status, error, error_type, retry_after, text = PRE_STREAM[name]
    with client(fast.url(name)) as c, pytest.raises(error) as info:
        c.messages.create(**REQUEST, stream=stream)
    assert info.value.status_code == status and info.value.type == error_type
    assert info.value.response.headers.get("retry-after") == retry_after
    assert text in info.value.message and info.value.request_id == fast.wait_for_outcome(-1).request_id


# --------------------------------------------------------------------------- the mix (plain /v1/messages)


def test_the_plain_base_url_plays_the_default_mix() -> None:
    seen: dict[str, int] = {}
    with Simulator(time_scale=FAST, seed=5) as sim, client(sim.url()) as c:
        assert sim.url() == f"http://127.0.0.1:{sim.port}" and sim.mix is not None
        assert sim.mix.weights == dict(DEFAULT_MIX) and sim.mix.on("messages") == pytest.approx(dict(DEFAULT_MIX))
        for _ in range(60):
            try:
                with c.messages.stream(**REQUEST) as stream:
                    assert stream.get_final_text() == "Hello! How can I help you today?"
                    seen["ok"] = seen.get("ok", 0) + 1
            except anthropic.APIStatusError as raised:
                seen[str(raised.status_code)] = seen.get(str(raised.status_code), 0) + 1
        assert {log.scenario for log in sim.requests} <= set(DEFAULT_MIX)
    assert seen["ok"] > sum(seen.values()) / 2 and len(seen) >= 3, seen


def test_the_mix_repeats_with_its_seed_and_takes_either_catalogs_names() -> None:
    def played(seed: int) -> list[str]:
        mix = {"complete": 3, "openai_http_429": 1, "http_500": 1}  # openai_http_429 plays http_429 here
        with Simulator(time_scale=FAST, mix=mix, seed=seed) as sim, client(sim.url()) as c:
            for _ in range(20):
                try:
                    c.messages.create(**REQUEST)
                except anthropic.APIStatusError:
                    pass
            return [log.scenario for log in sim.requests]

    first = played(1)
    assert first == played(1) and set(first) == {"complete", "http_429", "http_500"}


def test_a_mix_of_one_name_always_plays_it() -> None:
    with Simulator(mix={"http_429": 1.0}) as sim, client(sim.url()) as c:
        for _ in range(5):
            with pytest.raises(anthropic.RateLimitError) as info:
                c.messages.create(**REQUEST, stream=True)
            assert info.value.response.headers["retry-after"] == "1"


@pytest.mark.parametrize(("mix", "words"), [
    ({"http_249": 1}, ["'http_249'", "did you mean 'http_529'", "valid names:", "complete", "http_429"]),
    ({"complete": -1}, ["weight -1 for 'complete'", ">= 0"]),
    ({"complete": float("nan")}, ["weight nan"]),
    ({"complete": 0}, ["every weight in the mix is 0"]),
    ({}, ["the mix is empty"]),
])
def test_a_bad_mix_is_one_clear_line(mix: dict[str, float], words: list[str]) -> None:
    with pytest.raises(ValueError) as raised:
        Simulator(mix=mix)
    assert "\n" not in str(raised.value) and all(w in str(raised.value) for w in words), raised.value


def test_a_mix_names_only_what_is_served() -> None:
    with pytest.raises(ValueError, match=r"valid names: c$"):
        Simulator([Scenario.single("c", SCENARIOS["complete"].steps_for(0))], mix={"complete": 1})


def test_counterparts_exist_on_their_routes() -> None:
    from streamscope.simulator.openai_catalog import OPENAI_SCENARIOS

    assert all(messages in SCENARIOS and chat in OPENAI_SCENARIOS and responses in OPENAI_SCENARIOS
               for messages, chat, responses in COUNTERPARTS)


def test_without_a_served_default_the_plain_route_is_a_404() -> None:
    with Simulator([Scenario.single("c", SCENARIOS["complete"].steps_for(0))]) as sim, client(sim.url()) as c:
        assert sim.mix is None
        with pytest.raises(anthropic.NotFoundError, match="the mix has no scenario for this API"):
            c.messages.create(**REQUEST)


def test_a_fixed_port_and_a_busy_one() -> None:
    with Simulator() as first:
        port = first.port
        busy = Simulator(port=port)
        with pytest.raises(OSError) as raised:
            busy.start()
        assert raised.value.errno == errno.EADDRINUSE
    with Simulator(port=port) as again:  # free again as soon as the first stopped
        assert again.url() == f"http://127.0.0.1:{port}"
    with pytest.raises(ValueError, match="give a TCP port"):
        Simulator(port=70000)


# --------------------------------------------------------------------------- timing, disconnects, connections


def test_thinking_timing(sim: Simulator) -> None:
    events, times = read_raw(fresh(sim, "thinking"))
    kinds = [e.delta.type if e.type == "content_block_delta" else e.type for e in events]
    first_thinking = times[kinds.index("thinking_delta")]
    signature = times[kinds.index("signature_delta")]
    first_text = times[kinds.index("text_delta")]
    assert 0.3 - 0.01 <= first_thinking <= 0.3 + LATE
    assert 0.5 - 0.01 <= signature <= 0.5 + LATE
    assert 0.6 - 0.01 <= first_text <= 0.6 + LATE


def test_thinking_script_timing_is_exact() -> None:
    steps = SCENARIOS["thinking"].steps_for(0)
    at = list(accumulate(s.delay for s in steps))
    kinds = [s.data["delta"]["type"] if isinstance(s, Event) and s.name == "content_block_delta" else "" for s in steps]
    assert at[kinds.index("thinking_delta")] == pytest.approx(0.3)
    assert at[kinds.index("signature_delta")] == pytest.approx(0.5)
    assert at[kinds.index("text_delta")] == pytest.approx(0.6)


def test_time_scale_scales_delays(fast: Simulator) -> None:
    _, times = read_raw(fresh(fast, "silent_start"))  # 5 s of nothing at scale 1
    assert 5.0 * FAST - 0.01 <= times[0] <= 5.0 * FAST + LATE


def test_early_close_is_seen_as_disconnected(sim: Simulator) -> None:
    url = fresh(sim, "slow_answer")  # ~3 s of text
    with client(url) as c, c.messages.create(**REQUEST, stream=True) as stream:
        for event in stream:
            if event.type == "content_block_delta":
                break
    log = sim.wait_for_outcome(-1, timeout=2)
    assert url.endswith(log.scenario) and log.outcome == "disconnected"
    assert log.ended is not None and log.ended - log.started < 1.0


async def test_disconnect_seen_during_silence(sim: Simulator) -> None:
    """The server notices a client leaving even while it is not writing (a 10 s silent stall)."""
    url = fresh(sim, "silent_stall")
    async with anthropic.AsyncAnthropic(base_url=url, api_key="test", max_retries=0) as c:
        stream = await c.messages.create(**REQUEST, stream=True)
        texts = 0
        async for event in stream:
            texts += event.type == "content_block_delta"
            if texts == 3:
                break
        await stream.close()
    log = sim.wait_for_outcome(-1, timeout=2)
    assert log.outcome == "disconnected" and log.ended - log.started < 2.0  # type: ignore[operator]


def test_open_connections_drop_to_zero_after_close() -> None:
    with Simulator(SCENARIOS.values()) as sim:
        c = client(sim.url("complete"))
        for _ in c.messages.create(**REQUEST, stream=True):
            pass
        assert sim.open_connections() == 1  # kept alive in the client's pool
        c.close()
        assert sim.wait_for_connections(0, timeout=2) == 0


def test_request_log_and_headers(fast: Simulator) -> None:
    url = fresh(fast, "complete")
    with client(url) as c:
        response = c.messages.with_raw_response.create(**REQUEST, stream=True)
        events = list(response.parse())
    log = fast.wait_for_outcome(-1)
    number = log.request_id.removeprefix("req_sim_")
    assert response.headers["request-id"] == log.request_id
    assert response.headers["content-type"].startswith("text/event-stream")
    assert events[0].message.id == f"msg_sim_{number}" and events[0].message.model == REQUEST["model"]
    assert log.body["model"] == REQUEST["model"] and log.stream and log.outcome == "completed"
    assert log.started < log.ended  # type: ignore[operator]


def test_stop_cuts_inflight_streams_and_joins_its_thread() -> None:
    sim = Simulator([Scenario.single("stall", message_stream(blocks=[TextSpec(["a", Silence(30)])]))]).start()
    thread_name = f"simulator:{sim.port}"
    with client(sim.url("stall")) as c:
        stream = c.messages.create(**REQUEST, stream=True)
        assert next(iter(stream)).type == "message_start"
        sim.stop()
        with pytest.raises(sdk_lines.cut()):
            list(stream)
    assert sim.requests[0].outcome == "cut"
    assert thread_name not in [t.name for t in threading.enumerate()]


async def test_async_context_manager() -> None:
    async with Simulator([Scenario.single("c", SCENARIOS["complete"].steps_for(0))], time_scale=FAST) as sim:
        async with anthropic.AsyncAnthropic(base_url=sim.url("c"), api_key="test", max_retries=0) as c:
            message = await c.messages.create(**REQUEST)
    assert message.content[0].text == "Hello! How can I help you today?"


# --------------------------------------------------------------------------- the scenario model


def test_from_sse_file_is_verbatim() -> None:
    for path in REFERENCE_DIR.glob("*.sse"):
        assert b"".join(step.encode() for step in from_sse_file(path)) == path.read_bytes()  # type: ignore[union-attr]


def test_docs_thinking_has_no_usage() -> None:
    payload = b"".join(s.encode() for s in SCENARIOS["docs_thinking"].steps_for(0))  # type: ignore[union-attr]
    assert b"data:" in payload and b"usage" not in payload


def test_http_error_must_come_first() -> None:
    with pytest.raises(ValueError):
        Scenario.single("bad", [Ping(), HttpError(529, "overloaded_error", "Overloaded")])


def test_last_attempt_repeats() -> None:
    scenario = SCENARIOS["http_529_then_ok"]
    assert isinstance(scenario.steps_for(0)[0], HttpError)
    assert scenario.steps_for(1) == scenario.steps_for(5)


def test_ping_every_interleaves_pings_in_time() -> None:
    steps = message_stream(blocks=[TextSpec(["a"], first_delay=0.05)], ping_every=0.2, interrupt=[Silence(1.0), Cut()])
    total = sum(s.delay for s in steps)
    assert total == pytest.approx(1.05)
    ping_times = [t for s, t in zip(steps, accumulate(s.delay for s in steps)) if isinstance(s, Ping)]
    assert ping_times == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0])
    assert isinstance(steps[-1], Cut)


def test_seed_timings_are_exact() -> None:
    def content(name: str) -> list[tuple[str, float]]:
        """(kind, delay) of pings and deltas; a block start carries its first delta's delay."""
        shown: list[tuple[str, float]] = []
        carried = 0.0
        for s in SCENARIOS[name].steps_for(0):
            if isinstance(s, Event) and s.name == "content_block_start":
                carried = s.delay  # sent with the block's first delta, as the API does
            elif isinstance(s, Ping) or (isinstance(s, Event) and s.name == "content_block_delta"):
                shown.append((type(s).__name__, round(s.delay + carried, 9)))
                carried = 0.0
            else:
                assert s.delay == 0  # other framing is sent with no delay
        return shown

    assert content("timed_thinking") == [("Ping", 0.2)] * 2 + [("Event", 0.1)] * 5
    assert content("timed_pinging_stall") == [("Event", 0.05)] * 3 + [("Ping", 0.2)] * 10
    assert content("timed_long_answer") == [("Event", 0.05)] * 30
    assert content("timed_silent_start") == [("Event", 5.0)]


def test_thinking_spec_spreads_chunks_until_the_signature() -> None:
    steps = message_stream(thinking=ThinkingSpec(["a", "b"], first_delay=0.1, duration=0.5), blocks=[])
    at = [round(t, 6) for t in accumulate(s.delay for s in steps)]
    assert at == [0.0, 0.1, 0.1, 0.3, 0.5, 0.5, 0.5, 0.5]  # the block opens with its first delta


@pytest.mark.parametrize("tls", [("missing-cert.pem", "missing-key.pem"), "cert.pem", ("junk", "junk")])
def test_tls_files_that_do_not_load_are_one_clear_line(tmp_path, tls: Any) -> None:
    """A wrong `tls=` is refused when the simulator is made, in one line that says what to give,
    not as a failure inside the server's thread."""
    if tls == ("junk", "junk"):
        (tmp_path / "junk").write_text("not a certificate\n")
    if isinstance(tls, tuple):
        tls = tuple(str(tmp_path / name) for name in tls)
    with pytest.raises(ValueError) as raised:
        Simulator(tls=tls)
    message = str(raised.value)
    assert "\n" not in message
    assert "give (certificate file, key file), both PEM" in message
