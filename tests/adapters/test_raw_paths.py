"""The raw-response paths (anthropic): `with_raw_response` and `with_streaming_response`.

Frameworks take them (langchain-anthropic: `messages.with_raw_response.create(stream=True)` then
`.parse()`). {raw, streaming} × {parse, the caller reading the body itself} × {messages,
beta.messages} × {sync, async}: one span per call with the attributes, class and budgets of the
plain `create(stream=True)`, the bytes the caller reads exactly the SDK's, every way out ended once
(read to the end, an in-band error, a budget, leaving the context early, dropping the response).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import re
import time
from collections.abc import Callable
from typing import Any

import anthropic
import pytest

from conftest import USER, Telemetry, aclient, client, offline_class
from streamscope import Budgets, StreamTimeout

PARAMS = {"model": "claude-sim-1", "max_tokens": 256, "messages": USER}
WAYS = ["raw.parse", "raw.body", "streaming.parse", "streaming.iter_lines", "streaming.iter_bytes",
        "streaming.iter_text"]
"""How the caller gets at the events: the raw response parsed into the SDK's stream, or its body
read by the caller (the HTTP response's lines for `with_raw_response`; the response's own readers
for `with_streaming_response`)."""
VOLATILE = ("time", "duration", "max_gap", "decode_rate", "thinking.start", "thinking.end", "request.id",
            "response.id", "server.port", "streamscope.attempt")
"""Attributes that differ between two calls of one scenario (clocks, ids, the port; the second call
of a scenario that failed is taken for a retry of the first: `streamscope.attempt`)."""


def _messages(c: Any, beta: bool) -> Any:
    return c.beta.messages if beta else c.messages


def _stable(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if not any(part in k for part in VOLATILE)}


def read_sync(c: Any, way: str, beta: bool, stop_after: int | None = None) -> list[Any]:
    """What the caller gets through `way`: parsed events' types, or the body's pieces."""
    messages = _messages(c, beta)
    got: list[Any] = []
    if way.startswith("raw."):
        raw = messages.with_raw_response.create(**PARAMS, stream=True)
        items = (e.type for e in raw.parse()) if way == "raw.parse" else raw.http_response.iter_lines()
        for item in items:
            got.append(item)
            if stop_after is not None and len(got) >= stop_after:
                break
        return got
    with messages.with_streaming_response.create(**PARAMS, stream=True) as response:
        if way == "streaming.parse":
            items = (e.type for e in response.parse())
        else:
            items = getattr(response, way.removeprefix("streaming."))()
        for item in items:
            got.append(item)
            if stop_after is not None and len(got) >= stop_after:
                break
    return got


async def read_async(c: Any, way: str, beta: bool, stop_after: int | None = None) -> list[Any]:
    messages = _messages(c, beta)
    got: list[Any] = []
    if way.startswith("raw."):
        raw = await messages.with_raw_response.create(**PARAMS, stream=True)
        if way == "raw.parse":
            parsed = raw.parse()  # a coroutine from anthropic 1.x on; the stream itself on 0.x (the legacy response)
            async for event in await parsed if inspect.isawaitable(parsed) else parsed:
                got.append(event.type)
                if stop_after is not None and len(got) >= stop_after:
                    break
        else:
            async for line in raw.http_response.aiter_lines():
                got.append(line)
                if stop_after is not None and len(got) >= stop_after:
                    break
        return got
    async with messages.with_streaming_response.create(**PARAMS, stream=True) as response:
        if way == "streaming.parse":
            async for event in await response.parse():
                got.append(event.type)
                if stop_after is not None and len(got) >= stop_after:
                    break
        else:
            async for item in getattr(response, way.removeprefix("streaming."))():
                got.append(item)
                if stop_after is not None and len(got) >= stop_after:
                    break
    return got


def plain_attributes(sim: Any, telemetry: Telemetry, scenario: str, beta: bool) -> dict[str, Any]:
    """The span attributes of the plain `create(stream=True)` path for the same scenario."""
    try:
        for _ in _messages(client(sim, scenario), beta).create(**PARAMS, stream=True):
            pass
    except Exception:  # what the scenario ends with: the raw paths must record the same
        pass
    attrs = telemetry.attrs()
    telemetry.exporter.clear()
    telemetry.ends.started.clear()
    telemetry.ends.ended.clear()
    return attrs


SAME_SPAN = [pytest.param(scenario, way, False, id=f"{scenario}-{way}")
             for scenario in ("complete", "thinking", "inband_error", "tool_use", "incomplete", "cut_connection")
             for way in WAYS] + [pytest.param(scenario, way, True, id=f"beta-{scenario}-{way}")
                                 for scenario in ("complete", "inband_error") for way in ("raw.parse", "raw.body")]
"""Every scenario's ending on every way; the beta namespace (the same hooks) on a few."""


@pytest.mark.parametrize(("scenario", "way", "beta"), SAME_SPAN)
def test_sync_same_span_as_create(sim, telemetry: Telemetry, scenario: str, way: str, beta: bool) -> None:
    plain = plain_attributes(sim, telemetry, scenario, beta)
    try:
        read_sync(client(sim, scenario), way, beta)
    except anthropic.APIStatusError:
        assert way.endswith("parse") and scenario == "inband_error"  # the SDK raises it while parsing
    except Exception:
        assert scenario == "cut_connection"  # the transport's (or the SDK's) error, as without streamscope
    gc.collect()
    attrs = telemetry.attrs()
    telemetry.assert_each_ended_once()
    assert _stable(attrs) == _stable(plain)
    assert attrs["streamscope.class"] == offline_class(telemetry.one())


@pytest.mark.parametrize(("scenario", "way", "beta"), [
    pytest.param(scenario, way, beta, id=f"{'beta-' if beta else ''}{scenario}-{way}")
    for scenario in ("complete", "inband_error") for way in WAYS for beta in (False, True)
    if not beta or way in ("raw.parse", "streaming.iter_lines")])
async def test_async_same_span_as_create(sim, telemetry: Telemetry, scenario: str, way: str, beta: bool) -> None:
    plain = plain_attributes(sim, telemetry, scenario, beta)
    try:
        await read_async(aclient(sim, scenario), way, beta)
    except anthropic.APIStatusError:
        assert way.endswith("parse") and scenario == "inband_error"
    gc.collect()
    attrs = telemetry.attrs()
    telemetry.assert_each_ended_once()
    assert _stable(attrs) == _stable(plain)


def _scrubbed(pieces: list[Any]) -> str:
    """The body as one text, the message's id (one per request) left out."""
    text = "".join(p.decode() if isinstance(p, bytes) else p + "\n" for p in pieces)
    return re.sub(r"msg_sim_[0-9]+", "msg", text)


@pytest.mark.parametrize("way", [w for w in WAYS if not w.endswith("parse")])
@pytest.mark.parametrize("scenario", ["complete", "thinking", "inband_error"])
def test_the_caller_reads_the_sdks_bytes(sim, instrument: Callable[..., Telemetry], scenario: str, way: str) -> None:
    """Observed or not, the body the caller reads is the same (how the transport cuts it in
    pieces is its own)."""
    alone = read_sync(client(sim, scenario), way, False)
    instrument(budgets=Budgets(idle=5.0))
    observed = read_sync(client(sim, scenario), way, False)
    assert _scrubbed(observed) == _scrubbed(alone) and "message_start" in _scrubbed(observed)


@pytest.mark.parametrize("way", WAYS)
def test_sync_idle_budget_fires(sim, instrument: Callable[..., Telemetry], way: str) -> None:
    """Three words, then pings only: the idle budget ends it well inside the 10 s stall."""
    telemetry = instrument(budgets=Budgets(idle=1.0))
    first = len(sim.requests)
    started = time.monotonic()
    with pytest.raises(StreamTimeout) as fired:
        read_sync(client(sim, "pinging_stall"), way, False)
    waited = time.monotonic() - started
    assert fired.value.budget == "idle" and fired.value.partial is True
    assert 1.0 <= waited < 6.0, waited
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "stalled_mid_stream"
    assert attrs["streamscope.budget.fired"] == "idle"
    assert attrs["streamscope.pings"] >= 1
    assert sim.wait_for_outcome(first, timeout=5.0).outcome == "disconnected"
    telemetry.assert_each_ended_once()


@pytest.mark.parametrize("way", WAYS)
async def test_async_budgets_fire(sim, instrument: Callable[..., Telemetry], way: str) -> None:
    telemetry = instrument(budgets=Budgets(first_token=1.0))
    first = len(sim.requests)
    started = time.monotonic()
    with pytest.raises(StreamTimeout) as fired:
        await read_async(aclient(sim, "silent_start"), way, False)
    waited = time.monotonic() - started
    assert fired.value.budget == "first_token" and fired.value.partial is False
    assert 1.0 <= waited < 6.0, waited
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "stalled_before_first_content"
    assert sim.wait_for_outcome(first, timeout=5.0).outcome == "disconnected"
    telemetry.assert_each_ended_once()


@pytest.mark.parametrize("way", [w for w in WAYS if w.startswith("streaming.")])
def test_leaving_the_context_early_is_cancelled(sim, telemetry: Telemetry, way: str) -> None:
    first = len(sim.requests)
    got = read_sync(client(sim, "slow_answer"), way, False, stop_after=6)
    assert len(got) == 6
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "cancelled"
    assert sim.wait_for_outcome(first, timeout=5.0).outcome == "disconnected"
    telemetry.assert_each_ended_once()


@pytest.mark.parametrize("way", [w for w in WAYS if w.startswith("streaming.")])
async def test_async_leaving_the_context_early_is_cancelled(sim, telemetry: Telemetry, way: str) -> None:
    first = len(sim.requests)
    await read_async(aclient(sim, "slow_answer"), way, False, stop_after=6)
    assert telemetry.attrs()["streamscope.class"] == "cancelled"
    assert sim.wait_for_outcome(first, timeout=5.0).outcome == "disconnected"
    telemetry.assert_each_ended_once()


@pytest.mark.parametrize("way", ["raw.parse", "raw.body"])
def test_a_dropped_raw_response_ends_at_its_last_event(sim, telemetry: Telemetry, way: str) -> None:
    read_sync(client(sim, "slow_answer"), way, False, stop_after=8)
    last_read = time.time_ns()
    time.sleep(1.0)  # collected a second later: the span must still end when the caller last read
    gc.collect()
    span = telemetry.one()
    assert span.attributes["streamscope.class"] == "cancelled"
    assert span.end_time is not None and span.end_time <= last_read + 300_000_000
    telemetry.assert_each_ended_once()


def test_an_unread_raw_response_closed_is_cancelled(sim, telemetry: Telemetry) -> None:
    raw = client(sim, "complete").messages.with_raw_response.create(**PARAMS, stream=True)
    raw.http_response.close()
    assert telemetry.attrs()["streamscope.class"] == "cancelled"
    telemetry.assert_each_ended_once()


def test_budgets_keep_a_healthy_raw_body(sim, instrument: Callable[..., Telemetry]) -> None:
    """A slow but healthy answer (a delta every 0.1 s) read as bytes is never ended by its budgets,
    nor counted as the caller's time: the caller sleeps between reads longer than the idle budget."""
    telemetry = instrument(budgets=Budgets(first_token=3.0, idle=0.5))
    with client(sim, "slow_answer").messages.with_streaming_response.create(**PARAMS, stream=True) as response:
        for _ in response.iter_lines():
            time.sleep(0.01)
        time.sleep(0.7)
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "complete"
    assert "streamscope.budget.fired" not in attrs


def test_the_raw_paths_are_sdk_tested_concurrently(sim, telemetry: Telemetry) -> None:
    """Threads reading raw bodies side by side: one span each, each complete."""
    import threading

    errors: list[BaseException] = []

    def one() -> None:
        try:
            read_sync(client(sim, "complete"), "streaming.iter_bytes", False)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    spans = telemetry.spans()
    assert len(spans) == 6 and {s.attributes["streamscope.class"] for s in spans} == {"complete"}
    telemetry.assert_each_ended_once()


async def test_async_cancelled_task_is_cancelled(sim, telemetry: Telemetry) -> None:
    async def reader() -> None:
        await read_async(aclient(sim, "slow_answer"), "streaming.iter_lines", False)

    task = asyncio.create_task(reader())
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert telemetry.attrs()["streamscope.class"] == "cancelled"
    telemetry.assert_each_ended_once()
