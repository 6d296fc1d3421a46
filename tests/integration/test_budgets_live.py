"""Budgets enforced on real streams: seed 000's four scripted streams, sync and async, raw and
helper paths. Budgets: first_token=0.8, idle=0.3, deadline=3.0 (the seed's own numbers)."""

from __future__ import annotations

import asyncio
import time

import pytest

import sdk_lines
import streamscope
from conftest import USER, Telemetry, aclient, client
from streamscope import Budgets, StreamTimeout

SEED = Budgets(first_token=0.8, idle=0.3, deadline=3.0)
LATE = 1.0
"""How late a loaded 2-core machine (six test workers) may fire a budget or hand the caller its
exception. Each stall lasts well past it (5 s of silence, 2 s of pings), so a budget that waited
for the stall's end still fails; the lower bounds (never early) stay tight."""
# scenario: (outcome, content events seen by the caller, pings)
OUTCOMES = {
    "timed_thinking": ("complete", 5, 2),
    "timed_pinging_stall": ("idle", 3, None),
    "timed_long_answer": ("complete", 30, 0),
    "timed_silent_start": ("first_token", 0, 0),
}
CLASS = {"complete": "complete", "idle": "stalled_mid_stream", "first_token": "stalled_before_first_content"}


class Seen:
    """What the caller saw: content events, and when (from the call's start) the last one came."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.content = 0
        self.last = 0.0

    def count(self, is_content: bool) -> None:
        if is_content:
            self.content += 1
            self.last = time.monotonic() - self.start

    def result(self, outcome: str) -> tuple[str, int, float, float, float]:
        """(outcome, content events, seconds to the end, seconds to the last content, when it started)."""
        return outcome, self.content, time.monotonic() - self.start, self.last, self.start


def consume_sync(sim, scenario: str, path: str) -> tuple[str, int, float, float, float]:
    c = client(sim, scenario)
    seen = Seen()
    try:
        if path == "create":
            for event in c.messages.create(model="m", max_tokens=64, messages=USER, stream=True):
                seen.count(event.type == "content_block_delta")
        elif path == "next()":
            stream = c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
            while (event := next(stream, None)) is not None:
                seen.count(event.type == "content_block_delta")
        else:
            with c.messages.stream(model="m", max_tokens=64, messages=USER) as s:
                for _text in s.text_stream:
                    seen.count(True)
        return seen.result("complete")
    except StreamTimeout as exc:
        assert isinstance(exc, TimeoutError)
        assert exc.partial is (seen.content > 0)
        return seen.result(exc.budget)


async def consume_async(sim, scenario: str, path: str) -> tuple[str, int, float, float, float]:
    c = aclient(sim, scenario)
    seen = Seen()
    try:
        if path == "create":
            stream = await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
            async for event in stream:
                seen.count(event.type == "content_block_delta")
        elif path == "next()":
            stream = await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
            while (event := await anext(stream, None)) is not None:
                seen.count(event.type == "content_block_delta")
        else:
            async with c.messages.stream(model="m", max_tokens=64, messages=USER) as s:
                async for _ in s.text_stream:
                    seen.count(True)
        return seen.result("complete")
    except StreamTimeout as exc:
        assert exc.partial is (seen.content > 0)
        return seen.result(exc.budget)


def check(sim, telemetry: Telemetry, scenario: str, outcome: str, content: int, elapsed: float, last: float,
          first: int) -> None:
    want, want_content, want_pings = OUTCOMES[scenario]
    assert (outcome, content) == (want, want_content)
    a = telemetry.attrs()
    assert a["streamscope.class"] == CLASS[want]
    if want_pings is not None:
        assert a["streamscope.pings"] == want_pings
    if want == "complete":
        assert "streamscope.budget.fired" not in a
        return
    assert a["streamscope.budget.fired"] == want
    assert a["error.type"] == "timeout"
    span = telemetry.one()
    fired = [e for e in span.events if e.name == "streamscope.budget_fired"]
    assert len(fired) == 1 and fired[0].attributes["streamscope.budget"] == want
    duration = (span.end_time - span.start_time) / 1e9
    if want == "first_token":
        assert 0.8 <= duration <= 0.8 + LATE, duration
    else:  # idle: 0.3 s after the third text delta (at about 0.15 s, later on a loaded machine)
        assert 0.45 - 0.05 <= duration, duration
        assert duration <= last + 0.3 + LATE, (duration, last)
    assert elapsed <= duration + LATE  # the caller got the exception when the span ended
    # The simulator notices a closed connection at its next write: after a silent start, 5 s into the
    # stream. A response left open would end "completed" there instead, so the wait can be generous.
    assert sim.wait_for_outcome(first, timeout=12.0).outcome == "disconnected", "the response was not closed"


ON_TIME = 0.2
"""How far behind its script the simulator may have sent a stream (s), counted from when the caller
sent the request, for the run to test what it means to. A busy simulator is late in two ways: it
reads the request late (its arrival), and it sends its steps late after that (`RequestLog.late`,
counted from the arrival); the caller's budgets see both. The budgets leave the scripts 0.25 s
or more (the first text at 0.4 to 0.55 s against first_token 0.8; deltas 0.05 s apart against
idle 0.3); a simulator held up longer, on a machine too busy for it to keep time, made another
stream, which a budget may rightly end."""
ATTEMPTS = 3


def sent_on_time(sim, telemetry: Telemetry, first: int, asked: float) -> bool:
    """Whether the simulator kept to the script, counted from `asked` (the caller's monotonic time
    just before it sent the request); if not, the run is set aside (its spans cleared)."""
    log = sim.wait_for_outcome(first, timeout=12.0)
    if max(log.started - asked, 0.0) + log.late <= ON_TIME:
        return True
    telemetry.clear()
    return False


@pytest.mark.parametrize("path", ["create", "stream", "next()"])
@pytest.mark.parametrize("scenario", list(OUTCOMES))
def test_seed_streams_sync(sim, instrument, scenario: str, path: str) -> None:
    telemetry = instrument(budgets=SEED)
    for _ in range(ATTEMPTS):
        first = len(sim.requests)
        *seen, asked = consume_sync(sim, scenario, path)
        if sent_on_time(sim, telemetry, first, asked):
            check(sim, telemetry, scenario, *seen, first)
            return
    pytest.fail(f"the simulator sent each of {ATTEMPTS} streams more than {ON_TIME} s behind its script")


@pytest.mark.parametrize("path", ["create", "stream", "next()"])
@pytest.mark.parametrize("scenario", list(OUTCOMES))
async def test_seed_streams_async(sim, instrument, scenario: str, path: str) -> None:
    telemetry = instrument(budgets=SEED)
    for _ in range(ATTEMPTS):
        first = len(sim.requests)
        *seen, asked = await consume_async(sim, scenario, path)
        if sent_on_time(sim, telemetry, first, asked):
            check(sim, telemetry, scenario, *seen, first)
            return
    pytest.fail(f"the simulator sent each of {ATTEMPTS} streams more than {ON_TIME} s behind its script")


def test_silent_stall_without_pings_fires_idle(sim, instrument) -> None:
    telemetry = instrument(budgets=Budgets(idle=0.4))
    with pytest.raises(StreamTimeout) as caught:
        for _ in client(sim, "silent_stall").messages.create(model="m", max_tokens=64, messages=USER, stream=True):
            pass
    assert caught.value.budget == "idle" and caught.value.partial is True
    assert telemetry.attrs()["streamscope.class"] == "stalled_mid_stream"


async def test_deadline_bounds_a_long_answer(sim, instrument) -> None:
    """A long answer that keeps producing content is bounded only by the deadline."""
    telemetry = instrument(budgets=Budgets(first_token=2.0, idle=0.5, deadline=1.0))
    with pytest.raises(StreamTimeout) as caught:
        async with aclient(sim, "slow_answer").messages.stream(model="m", max_tokens=64, messages=USER) as s:
            await s.until_done()
    assert caught.value.budget == "deadline" and caught.value.partial is True
    a = telemetry.attrs()
    assert a["streamscope.class"] == "deadline_in_answer"
    assert a["streamscope.budget.deadline"] == 1.0


def test_deadline_in_thinking_sync(sim, instrument) -> None:
    telemetry = instrument(budgets=Budgets(deadline=0.8))
    with pytest.raises(StreamTimeout):
        with client(sim, "slow_thinking").messages.stream(model="m", max_tokens=4096, messages=USER) as s:
            s.until_done()
    assert telemetry.attrs()["streamscope.class"] == "deadline_in_thinking"


async def test_deadline_context_caps_the_budget(sim, instrument) -> None:
    telemetry = instrument(budgets=Budgets(deadline=30.0))
    ac = aclient(sim, "slow_answer")
    with pytest.raises(StreamTimeout) as caught:
        with streamscope.deadline(0.7):
            stream = await ac.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
            async for _ in stream:
                pass
    assert caught.value.budget == "deadline"
    a = telemetry.attrs()
    assert 0.3 <= a["streamscope.budget.deadline"] <= 0.7  # what remained of 0.7 s when the request began
    assert a["streamscope.class"] == "deadline_in_answer"


def test_deadline_context_enforced_without_budgets(sim, telemetry: Telemetry) -> None:
    with pytest.raises(StreamTimeout):
        with streamscope.deadline(0.5):
            for _ in client(sim, "slow_thinking").messages.create(model="m", max_tokens=64, messages=USER, stream=True):
                pass
    assert telemetry.attrs()["streamscope.class"] == "deadline_in_thinking"


async def test_budget_fires_before_the_headers(sim, instrument) -> None:
    """first_token covers connection, queueing and the SDK's retries before the stream."""
    telemetry = instrument(budgets=Budgets(first_token=0.5))
    c = aclient(sim, "http_529", max_retries=5)
    start = time.monotonic()
    with pytest.raises(StreamTimeout) as caught:
        await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    assert caught.value.budget == "first_token"
    assert time.monotonic() - start < 0.5 + 1.0
    assert telemetry.attrs()["streamscope.class"] == "stalled_before_first_content"


def test_sdk_retries_stop_at_the_budget_sync(sim, instrument) -> None:
    telemetry = instrument(budgets=Budgets(first_token=0.5))
    c = client(sim, "http_529", max_retries=8)
    start = time.monotonic()
    with pytest.raises(StreamTimeout):
        c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    assert time.monotonic() - start < 0.5 + 1.0
    assert telemetry.attrs()["streamscope.budget.fired"] == "first_token"


async def test_caller_away_is_not_a_stall(sim, instrument) -> None:
    """Time the caller spends away from the stream is not held against it (idle, first-token)."""
    telemetry = instrument(budgets=Budgets(idle=0.3))
    stream = await aclient(sim, "complete").messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    async for event in stream:
        if event.type == "content_block_delta":
            await asyncio.sleep(0.5)  # busy elsewhere, longer than the idle budget
    assert telemetry.attrs()["streamscope.class"] == "complete"


def test_read_timeout_is_recorded(sim, telemetry: Telemetry) -> None:
    """The SDK's own read timeout (no streamscope budget) is `read_timeout`."""
    c = client(sim, "silent_stall", timeout=0.5)
    with pytest.raises(sdk_lines.read_timeout()):
        for _ in c.messages.create(model="m", max_tokens=64, messages=USER, stream=True):
            pass
    a = telemetry.attrs()
    assert a["streamscope.budget.fired"] == "read_timeout"
    assert a["streamscope.class"] == "stalled_mid_stream"
    assert a["error.type"] == "timeout"


@pytest.fixture
def blackhole():
    """A loopback port that accepts connections and never answers (no headers, ever)."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    server.close()


def test_sdk_timeout_is_capped_before_the_headers_sync(blackhole, instrument) -> None:
    """Sync: the SDK's 600 s read timeout is capped to the budget, so waiting for headers that
    never come ends with the budget (and the SDK's retries cannot outlive it)."""
    import anthropic

    telemetry = instrument(budgets=Budgets(first_token=0.6))
    c = anthropic.Anthropic(base_url=blackhole, api_key="k", max_retries=2)
    start = time.monotonic()
    with pytest.raises(StreamTimeout) as caught:
        c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    assert caught.value.budget == "first_token"
    assert time.monotonic() - start < 0.6 + 1.5
    a = telemetry.attrs()
    assert a["streamscope.class"] == "stalled_before_first_content" and a["streamscope.budget.fired"] == "first_token"


async def test_headers_that_never_come_async(blackhole, instrument) -> None:
    import anthropic

    telemetry = instrument(budgets=Budgets(first_token=5.0))
    c = anthropic.AsyncAnthropic(base_url=blackhole, api_key="k", max_retries=2)
    with pytest.raises(StreamTimeout) as caught:
        with streamscope.deadline(0.6):
            await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    assert caught.value.budget == "deadline"
    assert telemetry.attrs()["streamscope.class"] == "deadline_in_thinking"
