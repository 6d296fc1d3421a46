"""Keep-alives counted in the body's bytes (`adapters/stainless/pings.py`, `_reader.Pings`), as on
an SDK release whose event layers streamscope does not know: the count is the SDK decoder's own,
however the body is cut into chunks and whatever its line ends; the bytes pass on untouched; and
the idle budget still takes a server tool's pings for liveness."""

from __future__ import annotations

import gzip
from typing import Any

import httpx2
import pytest
from anthropic._streaming import SSEDecoder
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import USER, Telemetry, client
from streamscope import AnthropicInstrumentor, Budgets, StreamTimeout
from streamscope.adapters.stainless import _reader  # built at install here: its absence fails this module
from streamscope.adapters.stainless import pings as pings_module
from streamscope.adapters.stainless.pings import CountedBody, count_in_body
from streamscope.simulator import Scenario, ServerToolSpec, TextSpec, message_stream, pings

BEFORE = TextSpec(["Let me", " look that up."], interval=0.02)
AFTER = TextSpec(["Streams fail", " in four ways."], interval=0.02)
SCENARIOS = [
    Scenario.single("pings_in_text", message_stream(blocks=[TextSpec(
        ["a", *pings(0.0, 3), "b", "c", *pings(0.0, 2), "d"], interval=0.0)])),
    # A 1 s search pinging every 0.2 s; one that stops pinging 0.6 s in and hangs for 5 s.
    Scenario.single("pings_search", message_stream(blocks=[BEFORE, ServerToolSpec(run=1.0, ping_every=0.2), AFTER])),
    Scenario.single("pings_hung_search", message_stream(blocks=[
        BEFORE, ServerToolSpec(run=5.6, ping_every=0.2, pings_for=0.6), AFTER])),
]


@pytest.fixture(scope="module", autouse=True)
def _scenarios(sim: Any) -> None:
    for scenario in SCENARIOS:
        sim.add(scenario)

NAMES = ["ping", "ping ", "pingx", "message_start", "content_block_delta", "pin", "error"]
TEXTS = ["", "event: ping", "\\nevent: ping\\n", "ping", "{\"type\": \"ping\"}"]


@st.composite
def streams(draw: Any) -> tuple[bytes, list[bytes]]:
    """A server-sent event stream (names, data, comments; LF, CR or CRLF line ends; `event:` with
    and without its space) and one way to cut it into chunks."""
    end = draw(st.sampled_from(["\n", "\r", "\r\n"]))
    lines: list[str] = []
    for _ in range(draw(st.integers(0, 12))):
        if draw(st.booleans()):
            lines.append(": keep-alive")
        name = draw(st.sampled_from(NAMES))
        lines.append(f"event:{draw(st.sampled_from(['', ' ']))}{name}")
        lines.append(f"data: {draw(st.sampled_from(TEXTS))}")
        lines.append("")
    body = (end.join(lines) + (end if lines else "")).encode()
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(body) - 1)), max_size=30))) if len(body) > 1 else []
    chunks = [body[a:b] for a, b in zip([0, *cuts], [*cuts, len(body)])]
    return body, chunks


def decoded_pings(body: bytes) -> int:
    """What the SDK's own decoder names `ping`, read in one piece."""
    return sum(sse.event == "ping" for sse in SSEDecoder().iter_bytes(iter([body])))


@settings(max_examples=400, deadline=None)
@given(streams())
def test_the_count_is_the_sdk_decoders_however_the_body_is_cut(stream: tuple[bytes, list[bytes]]) -> None:
    body, chunks = stream
    seen = []
    passed = list(_reader.Pings(iter(chunks), lambda: seen.append(1)))
    assert passed == chunks and all(a is b for a, b in zip(passed, chunks)), "the chunks pass on untouched"
    assert len(seen) == decoded_pings(body)


def test_one_byte_chunks_and_a_failing_body() -> None:
    body = b"event: ping\ndata: {}\n\nevent:ping\r\n\r\n"
    seen: list[int] = []
    assert b"".join(_reader.Pings(iter([body[i:i + 1] for i in range(len(body))]), lambda: seen.append(1))) == body
    assert len(seen) == 2

    def failing() -> Any:
        yield b"event: ping\n\n"
        raise httpx2.ReadError("cut")

    counted = _reader.Pings(failing(), lambda: seen.append(1))
    assert next(counted) == b"event: ping\n\n"
    with pytest.raises(httpx2.ReadError):
        next(counted)


def test_a_pinged_that_raises_changes_nothing_for_the_reader() -> None:
    def broken() -> None:
        raise RuntimeError("a bug")

    assert list(_reader.Pings(iter([b"event: ping\n\n", b"data: x\n\n"]), broken)) == [b"event: ping\n\n",
                                                                                        b"data: x\n\n"]


def response(headers: dict[str, str], body: bytes = b"event: ping\n\n") -> httpx2.Response:
    return httpx2.Response(200, headers=headers, stream=httpx2.ByteStream(body),
                           request=httpx2.Request("POST", "http://localhost/v1/messages"))


class Held:
    """What `count_in_body` reads of a stream: its response (an SDK `Stream` has it as well)."""

    def __init__(self, response: httpx2.Response) -> None:
        self.response = response


class Rec:
    def __init__(self) -> None:
        self.pings = 0

    def pinged(self) -> None:
        self.pings += 1


@pytest.mark.parametrize("headers, counted", [
    ({"content-type": "text/event-stream; charset=utf-8"}, True),
    ({"content-type": "text/event-stream", "content-encoding": "gzip"}, False),
    ({"content-type": "application/vnd.amazon.eventstream"}, False),
    ({}, False),
])
def test_where_the_bytes_are_the_events(headers: dict[str, str], counted: bool) -> None:
    body = b"event: ping\ndata: {}\n\n"
    raw = gzip.compress(body) if headers.get("content-encoding") == "gzip" else body
    held, rec = Held(response(headers, raw)), Rec()
    assert count_in_body(held, rec, "ping", False) is counted
    assert count_in_body(held, rec, "ping", False) is counted, "asked twice, counted once"
    assert isinstance(held.response.stream, CountedBody) is counted
    assert held.response.read() == body, "the caller reads the body the HTTP library gives"
    assert rec.pings == (1 if counted else 0)
    held.response.close()


def test_not_on_an_event_loop_nor_for_another_keep_alive_nor_without_the_module(
        monkeypatch: pytest.MonkeyPatch) -> None:
    held = Held(response({"content-type": "text/event-stream"}))
    assert not count_in_body(held, Rec(), "ping", True), "an async body: the hooks count over _iter_events"
    assert not count_in_body(held, Rec(), "heartbeat", False)
    monkeypatch.setattr(pings_module, "_reader", None)
    assert not count_in_body(held, Rec(), "ping", False)
    assert not isinstance(held.response.stream, CountedBody)


@pytest.fixture
def unknown_layers(instrument: Any) -> Any:
    """streamscope instrumented as on an SDK release whose streaming module it does not know."""
    def made(**kwargs: Any) -> Telemetry:
        instrumentor = AnthropicInstrumentor()
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        telemetry = instrument(**kwargs)
        instrumentor._adapter.layers.reset()
        return telemetry

    return made


def read(sim: Any, scenario: str) -> Any:
    """Read a sync `create` stream to its end; the stream, once read."""
    c = client(sim, scenario)
    try:
        with c.messages.create(model="m", max_tokens=256, messages=USER, stream=True) as s:
            for _ in s:
                pass
        return s
    finally:
        c.close()


def test_an_unknown_sdk_release_counts_the_pings_in_the_body(sim: Any, unknown_layers: Any) -> None:
    telemetry = unknown_layers()
    s = read(sim, "pings_in_text")
    assert isinstance(s.response.stream, CountedBody), "the keep-alives were counted in the bytes"
    attrs = telemetry.attrs()
    assert attrs["streamscope.pings"] == 5
    assert attrs["streamscope.content_events"] == 4 and attrs["streamscope.class"] == "complete"


def test_on_an_unknown_sdk_release_a_server_tools_pings_are_liveness(sim: Any, unknown_layers: Any) -> None:
    """A 1 s search pinging every 0.2 s under a 0.5 s idle budget completes; one that stops pinging
    0.6 s in is caught by the idle budget."""
    telemetry = unknown_layers(budgets=Budgets(first_token=1, idle=0.5))
    s = read(sim, "pings_search")
    assert isinstance(s.response.stream, CountedBody)
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "complete" and attrs["streamscope.pings"] == 5
    assert attrs["streamscope.max_gap"] < 0.5, "the search is not a gap"
    telemetry = unknown_layers(budgets=Budgets(idle=0.5))
    with pytest.raises(StreamTimeout) as caught:
        read(sim, "pings_hung_search")
    assert caught.value.budget == "idle"
    assert telemetry.attrs()["streamscope.class"] == "stalled_mid_stream"
