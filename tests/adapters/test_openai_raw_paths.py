"""The raw-response paths (openai): `with_raw_response` and `with_streaming_response`.

Frameworks take them (openai-agents: `responses.with_streaming_response.create`; langchain-openai
with `include_response_headers=True`: `with_raw_response`). {Chat Completions, Responses} ×
{raw, streaming} × {parse, the caller reading the body} × {sync, async}: the span, class, metrics
and log record of the plain `create(stream=True)`; budgets fire on the body the caller reads.
"""

from __future__ import annotations

import gc
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from test_openai_streams import CHAT, RESPONSES, aclient, client, fresh, openai_instrument, osim, requests_by_class

from conftest import Telemetry, offline_class
from streamscope import Budgets, StreamTimeout

__all__ = ["openai_instrument", "osim"]  # fixtures, used by name

WAYS = ["raw.parse", "raw.body", "streaming.parse", "streaming.iter_lines", "streaming.iter_bytes",
        "streaming.iter_text"]
VOLATILE = ("time", "duration", "max_gap", "decode_rate", "thinking.start", "thinking.end", "request.id", "response.id",
            "server.port", "streamscope.attempt")


def _api(c: Any, scenario: str) -> tuple[Any, dict[str, Any]]:
    return (c.responses, RESPONSES) if scenario.startswith("responses_") else (c.chat.completions, CHAT)


def _stable(attrs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in attrs.items() if not any(part in k for part in VOLATILE)}


def read_sync(url: str, scenario: str, way: str) -> list[Any]:
    resource, params = _api(client(url), scenario)
    if way.startswith("raw."):
        raw = resource.with_raw_response.create(**params, stream=True)
        return [type(e).__name__ for e in raw.parse()] if way == "raw.parse" else list(raw.http_response.iter_lines())
    with resource.with_streaming_response.create(**params, stream=True) as response:
        if way == "streaming.parse":
            return [type(e).__name__ for e in response.parse()]
        return list(getattr(response, way.removeprefix("streaming."))())


async def read_async(url: str, scenario: str, way: str) -> list[Any]:
    resource, params = _api(aclient(url), scenario)
    if way.startswith("raw."):
        raw = await resource.with_raw_response.create(**params, stream=True)
        if way == "raw.parse":
            return [type(e).__name__ async for e in raw.parse()]
        return [line async for line in raw.http_response.aiter_lines()]
    async with resource.with_streaming_response.create(**params, stream=True) as response:
        if way == "streaming.parse":
            return [type(e).__name__ async for e in await response.parse()]
        return [piece async for piece in getattr(response, way.removeprefix("streaming."))()]


def plain(osim: Any, otel: Telemetry, scenario: str) -> dict[str, Any]:
    resource, params = _api(client(fresh(osim, scenario)), scenario)
    try:
        for _ in resource.create(**params, stream=True):
            pass
    except Exception:  # what the scenario ends with: the raw paths must record the same
        pass
    attrs = otel.attrs()
    otel.exporter.clear()
    otel.ends.started.clear()
    otel.ends.ended.clear()
    return attrs


SCENARIOS = ["chat_complete", "chat_inband_error", "chat_tool_call", "chat_incomplete", "responses_complete",
             "responses_failed", "responses_reasoning", "responses_incomplete", "responses_inband_error_documented"]


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_sync_same_span_as_create(osim, openai_instrument: Callable[..., Telemetry], scenario: str, way: str) -> None:
    otel = openai_instrument()
    expected = plain(osim, otel, scenario)
    try:
        read_sync(fresh(osim, scenario), scenario, way)
    except Exception as exc:
        assert way.endswith("parse") and type(exc).__name__ == "APIError", exc  # raised by the SDK's stream
    gc.collect()
    attrs = otel.attrs()
    otel.assert_each_ended_once()
    assert _stable(attrs) == _stable(expected)
    assert attrs["streamscope.class"] == offline_class(otel.one())


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("scenario", ["chat_complete", "chat_inband_error", "responses_complete", "responses_failed"])
async def test_async_same_span_as_create(osim, openai_instrument: Callable[..., Telemetry], scenario: str,
                                         way: str) -> None:
    otel = openai_instrument()
    expected = plain(osim, otel, scenario)
    try:
        await read_async(fresh(osim, scenario), scenario, way)
    except Exception as exc:
        assert way.endswith("parse") and type(exc).__name__ == "APIError", exc
    gc.collect()
    attrs = otel.attrs()
    otel.assert_each_ended_once()
    assert _stable(attrs) == _stable(expected)


@pytest.mark.parametrize("way", [w for w in WAYS if not w.endswith("parse")])
@pytest.mark.parametrize("scenario", ["chat_complete", "responses_reasoning"])
def test_the_caller_reads_the_sdks_bytes(osim, openai_instrument: Callable[..., Telemetry], scenario: str,
                                         way: str) -> None:
    def text(pieces: list[Any]) -> str:
        joined = "".join(p.decode() if isinstance(p, bytes) else p + ("\n" if way.endswith(("lines", "body")) else "")
                         for p in pieces)
        joined = re.sub(r'"created(_at)?":\s*[0-9]+', "created", joined)
        return re.sub(r"(chatcmpl|resp|rs|msg)[-_][0-9a-zA-Z_]+", "id", joined)

    alone = read_sync(fresh(osim, scenario), scenario, way)
    openai_instrument(budgets=Budgets(idle=5.0))
    observed = read_sync(fresh(osim, scenario), scenario, way)
    assert text(observed) == text(alone) and len(text(observed)) > 100


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("scenario", ["chat_silent_stall", "responses_silent_stall"])
def test_sync_idle_budget_fires(osim, openai_instrument: Callable[..., Telemetry], scenario: str, way: str) -> None:
    otel = openai_instrument(budgets=Budgets(idle=0.5))
    started = time.monotonic()
    with pytest.raises(StreamTimeout) as fired:
        read_sync(fresh(osim, scenario), scenario, way)
    waited = time.monotonic() - started
    assert fired.value.budget == "idle" and fired.value.partial is True
    assert waited < 1.9, waited  # the stall is 2 s at the module's scale: well before its end
    attrs = otel.attrs()
    assert attrs["streamscope.class"] == "stalled_mid_stream" and attrs["streamscope.budget.fired"] == "idle"
    otel.assert_each_ended_once()


@pytest.mark.parametrize("way", WAYS)
async def test_async_first_token_budget_fires(osim, openai_instrument: Callable[..., Telemetry], way: str) -> None:
    otel = openai_instrument(budgets=Budgets(first_token=0.5))
    with pytest.raises(StreamTimeout) as fired:
        await read_async(fresh(osim, "responses_silent_start"), "responses_silent_start", way)
    assert fired.value.budget == "first_token" and fired.value.partial is False
    assert otel.attrs()["streamscope.class"] == "stalled_before_first_content"
    otel.assert_each_ended_once()


def test_metrics_and_log_record_as_create(osim, openai_instrument: Callable[..., Telemetry]) -> None:
    """A raw call is counted and logged like any other: `streamscope.requests` by class, one
    record on `streamscope.streams`."""
    reader = InMemoryMetricReader()
    openai_instrument(meter_provider=MeterProvider(metric_readers=[reader]), stream_logs=True)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("streamscope.streams")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        read_sync(fresh(osim, "chat_complete"), "chat_complete", "streaming.iter_lines")
        read_sync(fresh(osim, "responses_failed"), "responses_failed", "raw.body")
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    assert sorted(requests_by_class(reader)) == [("openai", "complete", 1), ("openai", "upstream_error", 1)]
    assert [getattr(r, "streamscope.class") for r in records] == ["complete", "upstream_error"]
    assert [r.levelno for r in records] == [logging.INFO, logging.WARNING]
