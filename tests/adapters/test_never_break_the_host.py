"""Never break the host: a failure injected into each of streamscope's own hooks in turn changes
nothing the caller receives, raises nothing into it, is logged once and counted in
`streamscope.internal_errors`. And every span ends once, every connection is closed."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
from collections.abc import Callable
from typing import Any

import anthropic
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import streamscope.core.guard as internal
from conftest import USER, Telemetry
from streamscope import Budgets
from streamscope.simulator import SCENARIOS, Simulator


def boom(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("injected")


# hook name: (object, attribute) to break
HOOKS: dict[str, tuple[str, str]] = {
    "recorder": ("streamscope.core.recorder.StreamRecorder", "delta"),
    "recorder end": ("streamscope.core.recorder.StreamRecorder", "completed_at"),
    "budgets": ("streamscope.budgets.enforcement", "decide"),
    "classifier": ("streamscope.pipeline", "classify"),
    "span start": ("streamscope.export.span.SpanWriter", "start"),
    "span export": ("streamscope.export.span.SpanWriter", "finish"),
    "metric export": ("streamscope.export.metrics.MetricsWriter", "finished"),
    "metric start": ("streamscope.export.metrics.MetricsWriter", "opened"),
    "request hook": ("streamscope.adapters.anthropic.request", "request_info"),
    "event hook": ("streamscope.adapters.anthropic.events", "dispatch"),
}
SCENARIOS_TO_RUN = [
    "complete", "basic_text", "tool_use", "inband_error", "cut_connection", "unknown_events", "docs_thinking",
]


def _resolve(path: str) -> Any:
    import importlib

    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError:
            continue
        for name in parts[i:]:
            obj = getattr(obj, name)
        return obj
    raise LookupError(path)


def what_the_caller_gets(sim: Simulator, scenario: str, path: str) -> tuple[list[str], str | None]:
    c = anthropic.Anthropic(base_url=sim.url(scenario), api_key="k", max_retries=0)
    got: list[str] = []
    try:
        if path == "create":
            for event in c.messages.create(model="m", max_tokens=256, messages=USER, stream=True):
                got.append(re.sub(r"msg_sim_\d+", "", event.model_dump_json()))
        else:
            with c.messages.stream(model="m", max_tokens=256, messages=USER) as s:
                for event in s:
                    got.append(event.type)
                got.append(s.get_final_text())
        return got, None
    except Exception as exc:
        return got, type(exc).__name__
    finally:
        c.close()


async def what_the_async_caller_gets(sim: Simulator, scenario: str) -> tuple[list[str], str | None]:
    c = anthropic.AsyncAnthropic(base_url=sim.url(scenario), api_key="k", max_retries=0)
    got: list[str] = []
    try:
        async with c.messages.stream(model="m", max_tokens=256, messages=USER) as s:
            async for event in s:
                got.append(event.type)
        return got, None
    except Exception as exc:
        return got, type(exc).__name__
    finally:
        await c.close()


@pytest.fixture(scope="module")
def without_streamscope(sim) -> tuple[dict, dict]:
    """What the caller gets with streamscope off (budgets below are generous: they never fire)."""
    expected = {(s, p): what_the_caller_gets(sim, s, p) for s in SCENARIOS_TO_RUN for p in ("create", "stream")}
    expected_async = {s: asyncio.run(what_the_async_caller_gets(sim, s)) for s in SCENARIOS_TO_RUN}
    return expected, expected_async


@pytest.mark.parametrize("hook", list(HOOKS))
def test_a_broken_hook_changes_nothing_for_the_caller(sim, without_streamscope, instrument, monkeypatch, caplog,
                                                      hook: str) -> None:
    expected, expected_async = without_streamscope

    owner, attribute = HOOKS[hook]
    monkeypatch.setattr(_resolve(owner), attribute, boom)
    monkeypatch.setattr(internal, "_logged", set())
    reader = InMemoryMetricReader()
    instrument(meter_provider=MeterProvider(metric_readers=[reader]), budgets=Budgets(first_token=30, idle=30))
    before = internal.count
    caplog.set_level(logging.WARNING, logger="streamscope")

    got = {(s, p): what_the_caller_gets(sim, s, p) for s in SCENARIOS_TO_RUN for p in ("create", "stream")}
    got_async = {s: asyncio.run(what_the_async_caller_gets(sim, s)) for s in SCENARIOS_TO_RUN}
    assert got == expected
    assert got_async == expected_async

    failures = internal.count - before
    assert failures > 0, "the injected failure never ran"
    logged = [r for r in caplog.records if r.name == "streamscope" and "internal error" in r.getMessage()]
    assert len(logged) == len({r.getMessage() for r in logged}), "an internal error was logged more than once"
    counted = 0
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == "streamscope.internal_errors":
                    counted = sum(p.value for p in metric.data.data_points)
    assert counted == failures


def test_spans_and_connections_balance_over_the_path_matrix(instrument) -> None:
    """Raw / helper / beta × sync / async × every way out, including garbage collection of an
    abandoned stream and cancellation in the middle of a read: spans started == ended (once each),
    and the server sees every connection closed."""
    telemetry: Telemetry = instrument(budgets=Budgets(idle=5.0))
    with Simulator(SCENARIOS) as sim:
        runs = 0
        for entry in ("create", "stream", "beta.create", "beta.stream"):
            for exit in ("exhausted", "error", "close", "break_and_drop", "cancel_mid_read", "gc_unread"):
                _sync_way_out(sim, entry, exit)
                asyncio.run(_async_way_out(sim, entry, exit))
                runs += 2
        for _ in range(5):
            gc.collect()
        assert sim.wait_for_connections(0, timeout=10) == 0, "a connection was leaked"
    telemetry.assert_each_ended_once()
    assert len(telemetry.spans()) == runs


def _messages(c: Any, entry: str) -> Any:
    return c.beta.messages if entry.startswith("beta.") else c.messages


def _open_sync(c: Any, entry: str) -> tuple[Any, Callable[[], None]]:
    params = {"model": "m", "max_tokens": 256, "messages": USER}
    if entry.endswith("create"):
        stream = _messages(c, entry).create(**params, stream=True)
        return stream, stream.close
    manager = _messages(c, entry).stream(**params)
    return manager.__enter__(), lambda: manager.__exit__(None, None, None)


def _sync_way_out(sim: Simulator, entry: str, exit: str) -> None:
    scenario = {"exhausted": "complete", "error": "inband_error"}.get(exit, "slow_answer")
    c = anthropic.Anthropic(base_url=sim.url(scenario), api_key="k", max_retries=0)
    stream, close = _open_sync(c, entry)
    try:
        if exit == "gc_unread":
            return
        for event in stream:
            if exit not in ("exhausted", "error") and event.type in ("content_block_delta", "text"):
                if exit == "cancel_mid_read":
                    raise KeyboardInterrupt
                break
        if exit == "close":
            close()
    except (anthropic.APIStatusError, KeyboardInterrupt):
        close()
    finally:
        del stream, close
        gc.collect()
        c.close()


async def _async_way_out(sim: Simulator, entry: str, exit: str) -> None:
    scenario = {"exhausted": "complete", "error": "inband_error"}.get(exit, "slow_answer")
    c = anthropic.AsyncAnthropic(base_url=sim.url(scenario), api_key="k", max_retries=0)
    params = {"model": "m", "max_tokens": 256, "messages": USER}
    if entry.endswith("create"):
        stream = await _messages(c, entry).create(**params, stream=True)
        close = stream.close
    else:
        manager = _messages(c, entry).stream(**params)
        stream = await manager.__aenter__()

        async def close() -> None:
            await manager.__aexit__(None, None, None)
    try:
        if exit == "gc_unread":
            return
        if exit == "cancel_mid_read":
            async def read(events: Any) -> None:
                async for _ in events:
                    pass

            task = asyncio.create_task(read(stream))
            await asyncio.sleep(0.4)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            await close()
            return
        try:
            async for event in stream:
                if exit not in ("exhausted", "error") and event.type in ("content_block_delta", "text"):
                    break
        except anthropic.APIStatusError:
            pass
        if exit in ("close", "error"):
            await close()
    finally:
        del stream, close
        for _ in range(3):
            gc.collect()
            await asyncio.sleep(0.05)
        await c.close()
