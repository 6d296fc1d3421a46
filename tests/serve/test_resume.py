# ruff: noqa: F811 - the fixtures `sim` and `on` come from test_relay
"""Resume with the embedded buffer: a browser that loses its connection reconnects with
`Last-Event-ID` and gets the rest of the same generation, with no second provider request.

Real uvicorn, the real SDKs against the simulator, an SSE reader that follows the browser's rules
(`test_relay.get`). The grace is scaled down (1 s) so that abandoning is seen quickly.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest
from relay_app import opener
from served import serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from test_relay import Got, get, on, requests_for, sim  # noqa: F401 - fixtures

from streamscope.serve import MemoryBuffer, relay
from streamscope.simulator import Scenario, Simulator, TextSpec, message_stream
from streamscope.simulator.catalog import LONG, words

GRACE = 1.0
BUFFER = MemoryBuffer(grace=GRACE, ttl=30.0)
SMALL = MemoryBuffer(grace=GRACE, ttl=30.0, max_events=4)


def make_app(simulator: Simulator) -> Any:
    async def relayed(request: Request) -> Response:
        p, q = request.path_params, request.query_params
        buffer = SMALL if q.get("small") == "1" else BUFFER
        return await relay(request, opener(simulator, p["sdk"], p["shape"], p["scenario"], q), resume=buffer,
                           heartbeat=float(q.get("heartbeat", "15")))

    return Starlette(routes=[Route("/relay/{sdk}/{shape}/{scenario}", relayed)])


@pytest.fixture(scope="module")
def base(sim: Simulator) -> Iterator[str]:
    with serving(make_app(sim)) as url:
        yield url


def resume_points(state: Any) -> dict[str, int]:
    return {p.attributes["streamscope.resume.outcome"]: p.value for p in state.points("streamscope.relay.resumes")}


def replayed(state: Any) -> int:
    return sum(p.value for p in state.points("streamscope.relay.replayed_events"))


@pytest.mark.parametrize("query", ["", "sync=1"])
@pytest.mark.parametrize("shape", ["create", "stream"])
def test_a_dropped_browser_resumes_the_same_generation(base: str, sim: Simulator, on: Any, shape: str,
                                                       query: str) -> None:
    state = on()
    since = len(sim.requests)
    first = get(base, f"/relay/anthropic/{shape}/slow_answer?{query}", stop_after=3)
    rid = first.headers["x-request-id"]
    assert [e.id for e in first.events] == [f"{rid}:{n}" for n in (1, 2, 3)]
    time.sleep(0.3)  # the browser's reconnect delay: the generation goes on meanwhile
    again = get(base, f"/relay/anthropic/{shape}/slow_answer?{query}", {"Last-Event-ID": f"{rid}:3"})
    assert again.status == 200 and again.headers["x-request-id"] == rid
    done = again.terminal
    assert done.event == "done" and done.json["class"] == "complete" and done.json["chunks"] == 30
    assert [e.id for e in again.events] == [f"{rid}:{n}" for n in range(4, 32)]
    whole = first.tokens + again.tokens
    assert len(whole) == 30
    assert len(requests_for(sim, "slow_answer", since)) == 1, "a resume starts no provider request"
    [span] = [s for s in state.spans() if s.name != "relay resume"]
    assert span.attributes["streamscope.class"] == "complete", "the generation ran on while nobody read it"
    assert span.attributes["streamscope.resume.count"] == 1
    [resume_span] = [s for s in state.exporter.get_finished_spans() if s.name == "relay resume"]
    assert [link.context.span_id for link in resume_span.links] == [span.context.span_id]
    assert resume_span.attributes["streamscope.resume.outcome"] == "resumed"
    assert resume_points(state) == {"resumed": 1}
    assert replayed(state) == len(again.events)
    [record] = state.wait_for_log()
    assert record.__dict__["outcome"] == "done" and record.__dict__["resumes"] == 1
    assert record.__dict__["delivered"] == 31, "every event, the terminal one included, reached a browser"
    assert record.__dict__["last_event_id"] == f"{rid}:3", "the id the reconnect acknowledged"
    assert "Streams" not in str(record.__dict__), "no content in the record"


@pytest.fixture(scope="module", autouse=True)
def _short_answer(sim: Simulator) -> None:
    """12 deltas 0.05 s apart: done well within the grace after a browser leaves at the second."""
    sim.add(Scenario.single("short_answer", message_stream(blocks=[TextSpec(words(LONG)[:12], interval=0.05)])))


def test_a_browser_that_left_is_recorded_as_gone_whatever_the_generation_did(base: str, on: Any) -> None:
    """The browser read two tokens and never came back; the generation finished within the grace.
    The record says what reached the browser: `client_disconnect`, partial, the events delivered
    apart from those generated, no failure code; the call's span says the answer was complete."""
    state = on()
    first = get(base, "/relay/anthropic/create/short_answer", stop_after=2)
    left = time.monotonic()
    assert len(first.events) == 2
    [record] = state.wait_for_log(timeout=15)
    fields = record.__dict__
    assert time.monotonic() - left >= GRACE * 0.9, "written once the grace after the end passed"
    assert (fields["outcome"], fields["streamscope.failure.code"], fields["streamscope.partial"]) == (
        "client_disconnect", None, True)
    assert fields["chunks"] == 12, "generated"
    assert 2 <= fields["delivered"] < 13, fields["delivered"]
    assert fields["last_event_id"] is None and fields["resumes"] == 0
    assert record.levelno == logging.INFO
    assert state.spans()[-1].attributes["streamscope.class"] == "complete", "the call itself completed"
    relayed = {p.attributes["streamscope.relay.outcome"]: p.value for p in state.points("streamscope.relay.streams")}
    assert relayed == {"client_disconnect": 1}


def test_a_browser_back_after_the_end_within_the_grace_had_it_all(base: str, on: Any) -> None:
    state = on()
    first = get(base, "/relay/anthropic/create/short_answer", stop_after=2)
    rid = first.headers["x-request-id"]
    time.sleep(0.8)  # the generation ends meanwhile (0.6 s), nobody following
    assert state.logs.records == [], "not settled yet: a reconnect may still fetch the end"
    again = get(base, "/relay/anthropic/create/short_answer", {"Last-Event-ID": f"{rid}:2"})
    assert again.terminal.event == "done"
    [record] = state.wait_for_log()
    fields = record.__dict__
    assert (fields["outcome"], fields["delivered"], fields["last_event_id"]) == ("done", 13, f"{rid}:2")


def test_the_same_terminal_event_on_a_resume_after_the_end(base: str, on: Any) -> None:
    state = on()
    whole = get(base, "/relay/anthropic/create/complete")
    rid = whole.headers["x-request-id"]
    again = get(base, "/relay/anthropic/create/complete", {"Last-Event-ID": f"{rid}:1"})
    assert again.events == whole.events[1:]
    assert again.terminal.data == whole.terminal.data
    assert resume_points(state) == {"resumed": 1}


def test_nobody_back_within_the_grace_closes_the_provider_connection(base: str, sim: Simulator, on: Any) -> None:
    state = on()
    since = len(sim.requests)
    first = get(base, "/relay/anthropic/create/slow_answer", stop_after=2)
    left = time.monotonic()
    rid = first.headers["x-request-id"]
    [upstream] = requests_for(sim, "slow_answer", since)
    index = sim.requests.index(upstream)
    time.sleep(GRACE / 2)
    assert sim.requests[index].outcome is None, "the generation runs on during the grace"
    log = sim.wait_for_outcome(index, timeout=10)
    assert log.outcome == "disconnected", log.outcome
    assert log.ended is not None and GRACE * 0.9 <= log.ended - left < GRACE + 3.0, log.ended - left
    deadline = time.monotonic() + 10  # the provider may see the close before the span has ended
    while not state.spans() and time.monotonic() < deadline:
        time.sleep(0.02)
    span = state.spans()[-1]
    assert span.attributes["streamscope.class"] == "cancelled"
    assert span.attributes["streamscope.resume.abandoned"] is True
    [record] = state.wait_for_log()
    assert record.__dict__["outcome"] == "client_disconnect" and record.__dict__["resumes"] == 0
    late = get(base, "/relay/anthropic/create/slow_answer", {"Last-Event-ID": f"{rid}:2"})
    assert late.status == 204 and late.body == ""
    assert len(requests_for(sim, "slow_answer", since)) == 1
    assert resume_points(state) == {"nothing_to_resume": 1}


@pytest.mark.parametrize(("last_event_id", "reason"), [
    ("nonsense", "malformed_last_event_id"), ("abc:", "malformed_last_event_id"), (":3", "malformed_last_event_id"),
    ("x:-1", "malformed_last_event_id"), ("0123456789abcdef:2", "nothing_to_resume")])
def test_nothing_to_resume_is_a_204_and_no_generation(base: str, sim: Simulator, on: Any, last_event_id: str,
                                                      reason: str) -> None:
    """The page is told why in the `Streamscope-Resume` header; the metric keeps its four outcomes."""
    state = on()
    since = len(sim.requests)
    got = get(base, "/relay/anthropic/create/complete", {"Last-Event-ID": last_event_id})
    assert got.status == 204 and got.body == ""
    assert got.headers["streamscope-resume"] == reason
    assert sim.requests[since:] == []
    assert resume_points(state) == {"nothing_to_resume": 1}


def test_a_malformed_last_event_id_is_one_line_a_minute(base: str, on: Any, monkeypatch: pytest.MonkeyPatch,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    """A page's bug repeats on every reconnect: the first is one WARNING line naming the fix, the
    next within a minute are counted into the next line."""
    from streamscope.serve import resume

    on()
    monkeypatch.setattr(resume, "_malformed_said", [-resume.MALFORMED_EVERY, 0])
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        for value in ("nonsense", "abc:", "x:-1"):
            assert get(base, "/relay/anthropic/create/complete", {"Last-Event-ID": value}).status == 204
        lines = [r.getMessage() for r in caplog.records if "Last-Event-ID" in r.getMessage()]
        assert len(lines) == 1 and "'nonsense'" in lines[0] and "malformed_last_event_id" in lines[0], lines
        assert "must send the id of the last event it received" in lines[0]
        monkeypatch.setattr(resume, "MALFORMED_EVERY", 0.0)
        assert get(base, "/relay/anthropic/create/complete", {"Last-Event-ID": "again"}).status == 204
        lines = [r.getMessage() for r in caplog.records if "Last-Event-ID" in r.getMessage()]
    assert len(lines) == 2 and "(3 such reconnects since the last line)" in lines[1], lines
    assert all("Traceback" not in line and "\n" not in line for line in lines)


def test_a_reconnect_at_the_terminal_event_is_a_204(base: str, on: Any) -> None:
    state = on()
    whole = get(base, "/relay/anthropic/create/complete")
    assert whole.terminal.id is not None
    got = get(base, "/relay/anthropic/create/complete", {"Last-Event-ID": whole.terminal.id})
    assert got.status == 204 and got.headers["streamscope-resume"] == "nothing_to_resume"
    assert resume_points(state) == {"nothing_to_resume": 1}


def test_past_what_the_buffer_keeps_is_expired(base: str, on: Any) -> None:
    state = on()
    whole = get(base, "/relay/anthropic/create/complete?small=1")
    rid = whole.headers["x-request-id"]
    assert len(whole.events) > 5
    got = get(base, "/relay/anthropic/create/complete?small=1", {"Last-Event-ID": f"{rid}:1"})
    assert got.status == 204 and got.headers["streamscope-resume"] == "expired"
    kept = get(base, "/relay/anthropic/create/complete?small=1", {"Last-Event-ID": f"{rid}:{len(whole.events) - 3}"})
    assert kept.events == whole.events[-3:]
    assert resume_points(state) == {"expired": 1, "resumed": 1}


def test_two_browsers_follow_one_generation(base: str, sim: Simulator, on: Any) -> None:
    """A reconnect while the first connection still reads (a duplicate tab): both get the rest."""
    import threading

    on()
    since = len(sim.requests)
    first: list[Got] = []
    reader = threading.Thread(target=lambda: first.append(get(base, "/relay/anthropic/create/slow_answer")))
    reader.start()
    while not requests_for(sim, "slow_answer", since):
        time.sleep(0.02)
    time.sleep(0.6)
    rid = next(iter(BUFFER._generations))  # the one generation running now
    for key, generation in BUFFER._generations.items():
        if not generation.ended:
            rid = key
    second = get(base, "/relay/anthropic/create/slow_answer", {"Last-Event-ID": f"{rid}:1"})
    reader.join(30)
    assert first[0].terminal.data == second.terminal.data
    assert first[0].events[1:] == second.events
    assert len(requests_for(sim, "slow_answer", since)) == 1


def test_wrong_buffer_options_are_one_line() -> None:
    with pytest.raises(ValueError, match=r"MemoryBuffer\(grace=...\) takes seconds > 0"):
        MemoryBuffer(grace=0)
    with pytest.raises(ValueError, match=r"MemoryBuffer\(max_events=...\) takes a whole number"):
        MemoryBuffer(max_events=0)
    with pytest.raises(TypeError, match="did you mean"):
        MemoryBuffer(gracee=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^MemoryBuffer\(ttl=...\) takes seconds \(a number\), not str '60'$"):
        MemoryBuffer(ttl="60")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^MemoryBuffer\(max_events=...\) takes a whole number, not float 1.5$"):
        MemoryBuffer(max_events=1.5)  # type: ignore[arg-type]
