"""Server-side tool runs (web search, web fetch, code execution) are a phase of their own.

A run lasts from its `server_tool_use` block's end to its result block. The span counts runs and
their total time, has one `streamscope.server_tool` event per run, and `streamscope.max_gap` never
includes a run. While a run is in progress the idle budget takes pings as the server's liveness:
a healthy search never trips it, a search that goes silent is still caught; the deadline always
applies. Over the real SDK and the local endpoint, sync and async, `create` and `stream()`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from conftest import USER, Telemetry, aclient, client, offline_class
from streamscope import AnthropicInstrumentor, Budgets, StreamTimeout
from streamscope.simulator import Scenario, ServerToolSpec, TextSpec, message_stream

# Both ends of a run are read by the client: a loaded machine that reads the run's start late
# shortens it as much as one that reads its result late lengthens it, so the margin goes both ways.
MARGIN = 0.35
LATE = 1.5
"""How late a loaded machine may fire the idle budget on the hung search (silent for 5 s after its pings)."""
BEFORE = TextSpec(["Let me", " look that up."], interval=0.02)
AFTER = TextSpec(["Streams fail", " in four ways."], interval=0.02)
SCENARIOS = [
    # A 1 s search, a ping every 0.2 s.
    Scenario.single("search", message_stream(blocks=[BEFORE, ServerToolSpec(run=1.0, ping_every=0.2), AFTER])),
    # Two searches, then a fetch.
    Scenario.single("three_runs", message_stream(blocks=[
        BEFORE, ServerToolSpec(run=0.3, ping_every=0.1), ServerToolSpec(run=0.3, ping_every=0.1),
        ServerToolSpec("web_fetch", run=0.2, ping_every=0.1, result_type="web_fetch_tool_result"), AFTER])),
    # Pings for 0.6 s, then the search goes silent for 5 s before its result.
    Scenario.single("hung_search", message_stream(blocks=[
        BEFORE, ServerToolSpec(run=5.6, ping_every=0.2, pings_for=0.6), AFTER])),
    # A 1 s run that sends no pings at all.
    Scenario.single("silent_search", message_stream(blocks=[BEFORE, ServerToolSpec(run=1.0, ping_every=None), AFTER])),
    # Code execution, pinging, stopped at pause_turn.
    Scenario.single("paused_run", message_stream(blocks=[
        BEFORE, ServerToolSpec("code_execution", run=0.4, ping_every=0.1, result_type="code_execution_tool_result"),
        TextSpec(["Still working."])], stop_reason="pause_turn")),
]


@pytest.fixture(scope="module", autouse=True)
def _scenarios(sim) -> None:
    for scenario in SCENARIOS:
        sim.add(scenario)


@pytest.fixture
def instrument(instrument: Callable[..., Telemetry]) -> Callable[..., Telemetry]:
    def again(**kwargs: Any) -> Telemetry:
        instrumentor = AnthropicInstrumentor()
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        return instrument(**kwargs)

    return again


def read(sim, scenario: str, path: str) -> str:
    """Read in this thread (sync) or a fresh event loop (async): "complete" or the budget that fired."""
    try:
        if path.startswith("async"):
            asyncio.run(_aread(sim, scenario, path.split()[1]))
        else:
            c = client(sim, scenario)
            if path == "create":
                for _ in c.messages.create(model="m", max_tokens=256, messages=USER, stream=True):
                    pass
            else:
                with c.messages.stream(model="m", max_tokens=256, messages=USER) as s:
                    for _ in s:
                        pass
            c.close()
        return "complete"
    except StreamTimeout as exc:
        return exc.budget


async def _aread(sim, scenario: str, path: str) -> None:
    c = aclient(sim, scenario)
    try:
        if path == "create":
            async for _ in await c.messages.create(model="m", max_tokens=256, messages=USER, stream=True):
                pass
        else:
            async with c.messages.stream(model="m", max_tokens=256, messages=USER) as s:
                async for _ in s:
                    pass
    finally:
        await c.close()


PATHS = ["create", "stream", "async create", "async stream"]


def runs(telemetry: Telemetry) -> list[dict[str, Any]]:
    return [dict(e.attributes or {}) for e in telemetry.one().events if e.name == "streamscope.server_tool"]


@pytest.mark.parametrize("path", PATHS)
def test_a_healthy_search_never_trips_idle(sim, instrument, path: str) -> None:
    reader = InMemoryMetricReader()
    telemetry = instrument(budgets=Budgets(first_token=1, idle=0.5),
                           meter_provider=MeterProvider(metric_readers=[reader]))
    assert read(sim, "search", path) == "complete"
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "complete" == offline_class(telemetry.one())
    assert attrs["streamscope.server_tool.calls"] == 1
    assert 1.0 - MARGIN <= attrs["streamscope.server_tool.duration"] <= 1.0 + MARGIN
    assert attrs["streamscope.max_gap"] < 0.5, "the search is not a gap"
    assert attrs["streamscope.pings"] == 5
    (run,) = runs(telemetry)
    assert run["streamscope.server_tool.name"] == "web_search"
    assert run["streamscope.server_tool.duration"] == attrs["streamscope.server_tool.duration"]
    histogram = _points(reader, "streamscope.server_tool.duration")
    assert [(p.count, round(p.sum, 6)) for p in histogram] == [(1, round(run["streamscope.server_tool.duration"], 6))]


def test_every_run_is_counted_and_none_is_a_gap(sim, instrument) -> None:
    telemetry = instrument()  # observe-only: the same attributes
    assert read(sim, "three_runs", "create") == "complete"
    attrs = telemetry.attrs()
    assert attrs["streamscope.server_tool.calls"] == 3
    assert [r["streamscope.server_tool.name"] for r in runs(telemetry)] == ["web_search", "web_search", "web_fetch"]
    total = sum(r["streamscope.server_tool.duration"] for r in runs(telemetry))
    assert abs(attrs["streamscope.server_tool.duration"] - total) < 1e-9
    assert 0.8 - MARGIN <= total <= 0.8 + MARGIN
    assert attrs["streamscope.max_gap"] < 0.15
    event_times = [e.timestamp for e in telemetry.one().events if e.name == "streamscope.server_tool"]
    assert event_times == sorted(event_times)


@pytest.mark.parametrize("path", PATHS)
def test_a_search_that_goes_silent_is_caught(sim, instrument, path: str) -> None:
    """Pings until 0.6 s into the run, then nothing: idle fires 0.5 s after the last ping."""
    telemetry = instrument(budgets=Budgets(idle=0.5))
    start = time.monotonic()
    assert read(sim, "hung_search", path) == "idle"
    elapsed = time.monotonic() - start
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "stalled_mid_stream"
    assert attrs["streamscope.server_tool.calls"] == 1
    assert 0.1 + 0.6 + 0.5 - 0.05 <= elapsed <= 0.1 + 0.6 + 0.5 + LATE
    assert runs(telemetry) == [], "the run never finished"


@pytest.mark.parametrize("path", ["create", "async create"])
def test_a_run_with_no_pings_is_silence(sim, instrument, path: str) -> None:
    instrument(budgets=Budgets(idle=0.5))
    assert read(sim, "silent_search", path) == "idle"


@pytest.mark.parametrize("path", ["stream", "async stream"])
def test_the_deadline_applies_during_a_run(sim, instrument, path: str) -> None:
    telemetry = instrument(budgets=Budgets(idle=0.5, deadline=0.6))
    assert read(sim, "search", path) == "deadline"
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "deadline_in_answer"
    assert attrs["streamscope.server_tool.calls"] == 1


def test_a_paused_turn_with_a_run(sim, instrument) -> None:
    telemetry = instrument(budgets=Budgets(idle=0.3))
    assert read(sim, "paused_run", "stream") == "complete"
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "paused" == offline_class(telemetry.one())
    assert attrs["streamscope.verified"] is False
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert "error.type" not in attrs
    assert [r["streamscope.server_tool.name"] for r in runs(telemetry)] == ["code_execution"]


def _points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    return [point for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics if m.name == name
            for point in m.data.data_points]
