"""Input-side usage on cut streams, over the real `anthropic` SDK and the local endpoint.

`message_start` says the input (`input_tokens`, `cache_read_input_tokens`,
`cache_creation_input_tokens`); that input is billed even when the stream is cut later, so every
span that got that far carries `gen_ai.usage.input_tokens` (the semconv sum: input + cache read +
cache write) and the two cache attributes, and `gen_ai.client.token.usage` records it. Output-side
usage (`output_tokens`, reasoning tokens) comes from the final usage (`message_delta`) only: on a
stream that ended before it, absent, never `message_start`'s placeholder `output_tokens: 1`.
Every cut shape the simulator documents, through `create(stream=True)` and `stream()`, sync.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import anthropic
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import sdk_lines
from conftest import USER, Telemetry, client
from streamscope import Budgets
from streamscope.simulator import (
    Cut,
    Event,
    Raw,
    Scenario,
    Silence,
    TextSpec,
    ThinkingSpec,
    error_event,
    message_stream,
)

FRESH, CACHE_READ, CACHE_WRITE = 10, 100, 5
INPUT = FRESH + CACHE_READ + CACHE_WRITE  # the conventions' gen_ai.usage.input_tokens for Anthropic
CACHE = {"input_tokens": FRESH, "cache_read_input_tokens": CACHE_READ, "cache_creation_input_tokens": CACHE_WRITE}
THREE = ["Streams", " fail", " in"]
OUTPUT_SIDE = ("gen_ai.usage.output_tokens", "gen_ai.usage.reasoning.output_tokens")


def _restating(steps: list[Any], fresh: int) -> list[Any]:
    """The stream with its final usage (`message_delta`) restating a different fresh input count."""
    out = []
    for step in steps:
        if isinstance(step, Event) and step.name == "message_delta":
            step = replace(step, data={**step.data, "usage": {**step.data["usage"], "input_tokens": fresh}})
        out.append(step)
    return out


# name -> (steps, the error.type the span gets)
CUTS: dict[str, tuple[list[Any], str]] = {
    "inband_error": (message_stream(blocks=[TextSpec(THREE, interval=0.02)], interrupt=[error_event(delay=0.02)],
                                    **CACHE), "overloaded_error"),
    "dropped_connection": (message_stream(blocks=[TextSpec(THREE, interval=0.02)], interrupt=[Cut(0.02)], **CACHE),
                           sdk_lines.cut_type()),
    "no_final_event": (message_stream(blocks=[TextSpec(THREE, interval=0.02)], final=False, **CACHE),
                       "incomplete_stream"),
    "stop_only": (message_stream(blocks=[TextSpec(THREE, interval=0.02)], final="stop_only", **CACHE),
                  "incomplete_stream"),
    "malformed_sse": (message_stream(blocks=[TextSpec(["Hello", Raw(
        b'event: content_block_delta\ndata: {"type": "content_block_delta", "ind\n\n')])], **CACHE),
        "json.decoder.JSONDecodeError"),
    "thinking_then_cut": (message_stream(thinking=ThinkingSpec(["Let me think."], first_delay=0.02, duration=0.05),
                                         blocks=[TextSpec(THREE, interval=0.02)], thinking_tokens=50,
                                         interrupt=[Cut(0.02)], **CACHE), sdk_lines.cut_type()),
}
SCENARIOS = [
    *(Scenario.single(f"cut_usage_{name}", steps) for name, (steps, _) in CUTS.items()),
    Scenario.single("cut_usage_complete", message_stream(blocks=[TextSpec(THREE, interval=0.02)], output_tokens=7,
                                                         **CACHE)),
    Scenario.single("cut_usage_restated", _restating(
        message_stream(blocks=[TextSpec(THREE, interval=0.02)], output_tokens=7, **CACHE), fresh=FRESH + 1)),
    Scenario.single("cut_usage_stall", message_stream(blocks=[TextSpec([*THREE, Silence(5.0), " ways."],
                                                                       interval=0.02)], **CACHE)),
    Scenario.single("cut_usage_silent_start", message_stream(first_event_delay=5.0, blocks=[TextSpec(THREE)],
                                                             **CACHE)),
]


@pytest.fixture(scope="module", autouse=True)
def _scenarios(sim) -> None:
    for scenario in SCENARIOS:
        sim.add(scenario)


def via_create(c: anthropic.Anthropic, stop: Callable[[Any], bool]) -> None:
    stream = c.messages.create(model="m", max_tokens=1024, messages=USER, stream=True)
    try:
        for event in stream:
            if stop(event):
                break  # the caller breaks out, and closes
    finally:
        stream.close()


def via_stream(c: anthropic.Anthropic, stop: Callable[[Any], bool]) -> None:
    with c.messages.stream(model="m", max_tokens=1024, messages=USER) as stream:
        for event in stream:
            if stop(event):
                break


CALLS = {"create": via_create, "stream": via_stream}


def never(event: Any) -> bool:
    return False


def first_text(event: Any) -> bool:
    return getattr(event, "type", None) == "content_block_delta"


def run(sim: Any, instrument: Callable[..., Telemetry], scenario: str, call: str,
        stop: Callable[[Any], bool] = never, **options: Any) -> tuple[dict[str, Any], dict[str, float]]:
    """One call; the span's attributes and `gen_ai.client.token.usage`'s sum by token type."""
    reader = InMemoryMetricReader()
    telemetry = instrument(meter_provider=MeterProvider(metric_readers=[reader]), **options)
    c = client(sim, scenario)
    try:
        CALLS[call](c, stop)
    except Exception:  # the SDK's error, the transport's, or StreamTimeout: the span says which
        pass
    finally:
        c.close()
    tokens = {p.attributes["gen_ai.token.type"]: p.sum
              for rm in reader.get_metrics_data().resource_metrics for sm in rm.scope_metrics for m in sm.metrics
              if m.name == "gen_ai.client.token.usage" for p in m.data.data_points}
    telemetry.assert_each_ended_once()
    return telemetry.attrs(), tokens


def assert_input_only(attrs: dict[str, Any], tokens: dict[str, float]) -> None:
    assert attrs["gen_ai.usage.input_tokens"] == INPUT
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == CACHE_READ
    assert attrs["gen_ai.usage.cache_write.input_tokens"] == CACHE_WRITE
    assert not set(OUTPUT_SIDE) & set(attrs), "message_start's placeholder output_tokens is not usage"
    assert tokens == {"input": INPUT}, "the billed input is counted; no output count without the final usage"
    assert attrs["streamscope.verified"] is False


@pytest.mark.parametrize("call", CALLS)
@pytest.mark.parametrize("shape", CUTS)
def test_a_cut_stream_keeps_its_input_usage(sim, instrument, shape: str, call: str) -> None:
    attrs, tokens = run(sim, instrument, f"cut_usage_{shape}", call)
    assert attrs["error.type"] == CUTS[shape][1]
    assert attrs["streamscope.class"] == "upstream_error"
    assert attrs["gen_ai.response.finish_reasons"] == ("error",)
    assert_input_only(attrs, tokens)


@pytest.mark.parametrize("call", CALLS)
def test_a_caller_that_breaks_out_keeps_the_input_usage(sim, instrument, call: str) -> None:
    attrs, tokens = run(sim, instrument, "cut_usage_complete", call, stop=first_text)
    assert attrs["streamscope.class"] == "cancelled" and attrs["error.type"] == "cancelled"
    assert_input_only(attrs, tokens)


@pytest.mark.parametrize("call", CALLS)
def test_a_stream_cut_by_a_budget_keeps_the_input_usage(sim, instrument, call: str) -> None:
    attrs, tokens = run(sim, instrument, "cut_usage_stall", call, budgets=Budgets(idle=0.3))
    assert attrs["streamscope.budget.fired"] == "idle" and attrs["streamscope.class"] == "stalled_mid_stream"
    assert_input_only(attrs, tokens)


@pytest.mark.parametrize("call", CALLS)
def test_no_usage_before_the_first_event(sim, instrument, call: str) -> None:
    """A stream cut before `message_start` never learned its input: nothing to report."""
    attrs, tokens = run(sim, instrument, "cut_usage_silent_start", call, budgets=Budgets(first_token=0.3))
    assert attrs["streamscope.class"] == "stalled_before_first_content"
    assert not {k for k in attrs if k.startswith("gen_ai.usage.")}
    assert tokens == {}


@pytest.mark.parametrize("call", CALLS)
def test_a_complete_stream_reports_the_final_usage(sim, instrument, call: str) -> None:
    attrs, tokens = run(sim, instrument, "cut_usage_complete", call)
    assert attrs["streamscope.class"] == "complete" and attrs["streamscope.verified"] is True
    assert attrs["gen_ai.usage.input_tokens"] == INPUT and attrs["gen_ai.usage.output_tokens"] == 7
    assert tokens == {"input": INPUT, "output": 7}


@pytest.mark.parametrize("call", CALLS)
def test_the_final_usage_overrides_what_it_restates(sim, instrument, call: str) -> None:
    attrs, tokens = run(sim, instrument, "cut_usage_restated", call)
    assert attrs["gen_ai.usage.input_tokens"] == INPUT + 1  # message_delta's fresh count, cache kept
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == CACHE_READ
    assert tokens == {"input": INPUT + 1, "output": 7}
