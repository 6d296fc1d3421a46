"""The path matrix: every way into a stream × every way out of it.

{create(stream=True), stream() helper, beta create, beta stream} × {sync, async} ×
{exhausted, in-band error, close, break and drop, cancel}: one span each, ended once, the right
class, the response closed (the server saw the connection go), nothing left current.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace

from conftest import USER, Telemetry, aclient, client
from streamscope.simulator import SCENARIOS, Scenario, Simulator
from streamscope.simulator.anthropic_streams import message_stream
from streamscope.simulator.catalog import LONG, words
from streamscope.simulator.content import TextSpec

ENTRIES = ["create", "stream", "beta.create", "beta.stream"]
EXITS = {
    # exit: (scenario, expected class)
    "exhausted": ("complete", "complete"),
    "inband_error": ("inband_error", "upstream_error"),
    "close": ("paths_slow_answer", "cancelled"),
    "break_and_drop": ("paths_slow_answer", "cancelled"),
    "cancel": ("paths_slow_answer", "cancelled"),
}
SLOW = Scenario.single(
    "paths_slow_answer", message_stream(blocks=[TextSpec(words(LONG)[:30], first_delay=0.2, interval=0.4)])
)
"""The catalog's slow answer, four times as slow (12 s): "the server saw the connection go" needs
the connection closed before the last event is written, and a drop is collected a second and
several full collections later, which take seconds on a loaded machine with a large heap."""
PARAMS = {"model": "claude-sim-1", "max_tokens": 256, "messages": USER}


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator(SCENARIOS) as simulator:
        simulator.add(SLOW)
        yield simulator


def _messages(c: Any, entry: str) -> Any:
    return c.beta.messages if entry.startswith("beta.") else c.messages


def open_sync(sim, entry: str, scenario: str) -> tuple[Any, Any]:
    """(iterable of events, closer) for a sync entry; the helper's manager is entered here."""
    messages = _messages(client(sim, scenario), entry)
    if entry.endswith("create"):
        stream = messages.create(**PARAMS, stream=True)
        assert trace.get_current_span() is trace.INVALID_SPAN  # our span is never left current
        return stream, stream.close
    manager = messages.stream(**PARAMS)
    stream = manager.__enter__()
    assert trace.get_current_span() is trace.INVALID_SPAN
    return stream, lambda: manager.__exit__(None, None, None)


async def open_async(sim, entry: str, scenario: str) -> tuple[Any, Any]:
    messages = _messages(aclient(sim, scenario), entry)
    if entry.endswith("create"):
        stream = await messages.create(**PARAMS, stream=True)
        assert trace.get_current_span() is trace.INVALID_SPAN
        return stream, stream.close
    manager = messages.stream(**PARAMS)
    stream = await manager.__aenter__()
    assert trace.get_current_span() is trace.INVALID_SPAN
    return stream, lambda: manager.__aexit__(None, None, None)


def check(sim, telemetry: Telemetry, label: str, first_request: int) -> None:
    gc.collect()
    span = telemetry.one()
    assert span.attributes["streamscope.class"] == label
    telemetry.assert_each_ended_once()
    log = sim.wait_for_outcome(first_request, timeout=5.0)
    if label == "cancelled":
        assert log.outcome == "disconnected", "the response was not closed"


@pytest.mark.parametrize("exit", list(EXITS))
@pytest.mark.parametrize("entry", ENTRIES)
def test_sync_paths(sim, telemetry: Telemetry, entry: str, exit: str) -> None:
    scenario, label = EXITS[exit]
    first = len(sim.requests)
    stream, close = open_sync(sim, entry, scenario)
    last_event_at = 0.0
    if exit == "exhausted":
        for _ in stream:
            pass
        close()
    elif exit == "inband_error":
        with pytest.raises(Exception) as caught:
            for _ in stream:
                pass
        assert type(caught.value).__name__ == "APIStatusError"
        close()
    elif exit == "close":
        for event in stream:
            if event.type == "content_block_delta" or event.type == "text":
                break
        close()
    elif exit == "break_and_drop":
        for event in stream:
            if event.type == "content_block_delta" or event.type == "text":
                last_event_at = time.time_ns()
                break
        del stream, close
        time.sleep(1.0)  # the drop is noticed later; the span must still end at the last event
    elif exit == "cancel":
        with pytest.raises(KeyboardInterrupt):
            for event in stream:
                if event.type == "content_block_delta" or event.type == "text":
                    raise KeyboardInterrupt
        close()
    check(sim, telemetry, label, first)
    if exit == "break_and_drop":
        end = telemetry.one().end_time
        # Collection comes a second later: a generous margin for a loaded machine still tells them apart.
        assert end is not None and end <= last_event_at + 300_000_000, "ended at collection, not last event"


async def settled(sim, first_request: int, timeout: float = 5.0) -> None:
    """Collect and let the loop run until the server saw the request end.

    A dropped async stream is closed by the event loop: collection schedules each generator's
    `aclose()` as a task. `check()` then blocks this loop while it waits for the server, so on a
    loaded machine the close must have run before it, not in five fixed sleeps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        requests = sim.requests
        if len(requests) > first_request and requests[first_request].outcome is not None:
            return
        gc.collect()
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("exit", list(EXITS))
@pytest.mark.parametrize("entry", ENTRIES)
async def test_async_paths(sim, telemetry: Telemetry, entry: str, exit: str) -> None:
    scenario, label = EXITS[exit]
    first = len(sim.requests)
    stream, close = await open_async(sim, entry, scenario)
    last_event_at = 0.0
    if exit == "exhausted":
        async for _ in stream:
            pass
        await close()
    elif exit == "inband_error":
        with pytest.raises(Exception) as caught:
            async for _ in stream:
                pass
        assert type(caught.value).__name__ == "APIStatusError"
        await close()
    elif exit == "close":
        async for event in stream:
            if event.type in ("content_block_delta", "text"):
                break
        await close()
    elif exit == "break_and_drop":
        async for event in stream:
            if event.type in ("content_block_delta", "text"):
                last_event_at = time.time_ns()
                break
        del stream, close
        await asyncio.sleep(1.0)  # the drop is collected a second later (below): far from the last event
        await settled(sim, first)  # the SDK's generators close the response in tasks on this loop
    elif exit == "cancel":
        async def consume() -> None:
            async for _ in stream:
                pass

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.5)  # mid-answer, inside a read
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await close()
    check(sim, telemetry, label, first)
    if exit == "break_and_drop":
        end = telemetry.one().end_time
        assert end is not None and end <= last_event_at + 300_000_000, "ended at collection, not last event"


@pytest.mark.parametrize("helper", ["text_stream", "get_final_message", "get_final_text", "until_done", "iterate"])
def test_sync_helpers(sim, telemetry: Telemetry, helper: str) -> None:
    with client(sim, "complete").messages.stream(**PARAMS) as stream:
        if helper == "text_stream":
            text = "".join(stream.text_stream)
        elif helper == "get_final_message":
            text = stream.get_final_message().content[0].text
        elif helper == "get_final_text":
            text = stream.get_final_text()
        elif helper == "until_done":
            stream.until_done()
            text = stream.get_final_text()
        else:
            text = "".join(e.text for e in stream if e.type == "text")
    assert text == "Hello! How can I help you today?"
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "complete"
    assert attrs["streamscope.text_chars"] == len(text)


@pytest.mark.parametrize("helper", ["text_stream", "get_final_message", "get_final_text", "until_done", "iterate"])
async def test_async_helpers(sim, telemetry: Telemetry, helper: str) -> None:
    async with aclient(sim, "complete").messages.stream(**PARAMS) as stream:
        if helper == "text_stream":
            text = "".join([t async for t in stream.text_stream])
        elif helper == "get_final_message":
            text = (await stream.get_final_message()).content[0].text
        elif helper == "get_final_text":
            text = await stream.get_final_text()
        elif helper == "until_done":
            await stream.until_done()
            text = await stream.get_final_text()
        else:
            text = "".join([e.text async for e in stream if e.type == "text"])
    assert text == "Hello! How can I help you today?"
    assert telemetry.attrs()["streamscope.class"] == "complete"


async def test_the_span_is_a_child_of_the_callers_span(sim, telemetry: Telemetry) -> None:
    tracer = telemetry.provider.get_tracer("app")
    with tracer.start_as_current_span("handler") as handler:
        stream = await aclient(sim, "complete").messages.create(**PARAMS, stream=True)
    async for _ in stream:  # read outside the handler's context: the parent is where the call was made
        pass
    span = telemetry.one()
    assert span.parent is not None and span.parent.span_id == handler.get_span_context().span_id
    assert span.context.trace_id == handler.get_span_context().trace_id
