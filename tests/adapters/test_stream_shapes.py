"""Stream shapes the decision table must get right, over the real SDK and the local endpoint.

* `stop_reason: pause_turn` is `paused`, not verified (the caller must send the turn back);
* output-side usage comes from the final usage only: absent on a stream that ended before it,
  while input-side usage (known from `message_start`, billed) stays (tests/adapters/test_cut_usage.py);
* a `redacted_thinking` block's thinking covers the wait before it;
* `time_to_first_text` is the first non-empty visible output (not the empty `input_json_delta`
  that opens every tool block);
* `message_stop` without `message_delta` is an incomplete stream;
* finish reasons, `error.type` and the class always agree, on every stream of the catalog.
"""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from conftest import USER, Telemetry, client, offline_class
from streamscope import AnthropicInstrumentor, Budgets, StreamTimeout
from streamscope.simulator import SCENARIOS, Scenario, TextSpec, ThinkingSpec, ToolUseSpec, message_stream

OUTPUT_USAGE = ("gen_ai.usage.output_tokens", "gen_ai.usage.reasoning.output_tokens")
ERROR_CLASSES = {"deadline_in_answer", "deadline_in_thinking", "stalled_before_first_content", "stalled_mid_stream",
                 "cancelled", "upstream_error"}
SHAPES = [
    Scenario.single("paused", message_stream(blocks=[TextSpec(["Searching", " more."])], stop_reason="pause_turn")),
    Scenario.single("redacted", message_stream(thinking=ThinkingSpec(display="redacted", duration=0.4),
                                               blocks=[TextSpec(["Here", " it is."], first_delay=0.02)],
                                               thinking_tokens=300)),
    # A tool block alone: its opening empty delta at 0.02 s, the first real input 0.3 s later.
    Scenario.single("tool_only", message_stream(
        blocks=[ToolUseSpec("get_weather", ["", '{"location":', ' "Paris"}'], first_delay=0.02, interval=0.3)],
        stop_reason="tool_use")),
    Scenario.single("stop_only", message_stream(blocks=[TextSpec(["Hello", " there."])], final="stop_only")),
    Scenario.single("cached", message_stream(blocks=[TextSpec(["Hi."])], input_tokens=10,
                                             cache_read_input_tokens=100, cache_creation_input_tokens=5,
                                             output_tokens=3)),
]


@pytest.fixture(scope="module", autouse=True)
def _shapes(sim) -> None:
    for scenario in SHAPES:
        sim.add(scenario)


def read(sim: Any, scenario: str, **request: Any) -> None:
    c = client(sim, scenario)
    try:
        for _ in c.messages.create(model="m", max_tokens=1024, messages=USER, stream=True, **request):
            pass
    except Exception:
        pass
    finally:
        c.close()


def test_pause_turn_is_paused_and_not_verified(sim, telemetry: Telemetry) -> None:
    read(sim, "paused")
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "paused" == offline_class(telemetry.one())
    assert attrs["streamscope.verified"] is False
    assert attrs["streamscope.stop_reason"] == "pause_turn"
    assert attrs["gen_ai.response.finish_reasons"] == ("stop",)
    assert "error.type" not in attrs and attrs["streamscope.partial"] is False


@pytest.mark.parametrize("scenario", ["inband_error", "cut_connection", "incomplete", "stop_only"])
def test_output_usage_only_from_the_final_usage(sim, instrument, scenario: str) -> None:
    reader = InMemoryMetricReader()
    telemetry = instrument(meter_provider=MeterProvider(metric_readers=[reader]))
    read(sim, scenario)
    attrs = telemetry.attrs()
    assert not set(OUTPUT_USAGE) & set(attrs), "message_start's placeholder is not usage"
    assert attrs["gen_ai.usage.input_tokens"] == 25  # message_start's: known, and billed
    assert attrs["streamscope.class"] == "upstream_error"
    points = [(dict(p.attributes), p.sum) for rm in reader.get_metrics_data().resource_metrics
              for sm in rm.scope_metrics for m in sm.metrics if m.name == "gen_ai.client.token.usage"
              for p in m.data.data_points]
    assert [(a["gen_ai.token.type"], total) for a, total in points] == [("input", 25)]


def test_usage_on_a_stream_cut_by_a_budget(sim, instrument) -> None:
    telemetry = instrument(budgets=Budgets(idle=0.3))
    with pytest.raises(StreamTimeout):
        for _ in client(sim, "silent_stall").messages.create(model="m", max_tokens=64, messages=USER, stream=True):
            pass
    attrs = telemetry.attrs()
    assert not set(OUTPUT_USAGE) & set(attrs)
    assert attrs["gen_ai.usage.input_tokens"] == 25


def test_final_usage_is_reported(sim, telemetry: Telemetry) -> None:
    read(sim, "cached")
    attrs = telemetry.attrs()
    assert attrs["gen_ai.usage.input_tokens"] == 10 + 100 + 5
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 100
    assert attrs["gen_ai.usage.cache_write.input_tokens"] == 5
    assert attrs["gen_ai.usage.output_tokens"] == 3


def test_redacted_thinking_covers_the_wait_before_it(sim, telemetry: Telemetry) -> None:
    read(sim, "redacted", thinking={"type": "enabled", "budget_tokens": 2048})
    attrs = telemetry.attrs()
    duration = attrs["streamscope.thinking.end"] - attrs["streamscope.thinking.start"]
    assert 0.35 <= duration <= 0.4 + 0.3
    assert attrs["streamscope.thinking.start"] == attrs["gen_ai.response.time_to_first_chunk"]  # message_start
    assert attrs["streamscope.class"] == "complete"


def test_first_text_is_the_first_non_empty_output(sim, telemetry: Telemetry) -> None:
    read(sim, "tool_only")
    attrs = telemetry.attrs()
    assert attrs["streamscope.time_to_first_text"] >= 0.3
    assert attrs["streamscope.time_to_first_content"] == attrs["streamscope.time_to_first_text"]
    assert attrs["streamscope.content_events"] == 3


def test_message_stop_alone_is_an_incomplete_stream(sim, telemetry: Telemetry) -> None:
    read(sim, "stop_only")
    attrs = telemetry.attrs()
    assert attrs["error.type"] == "incomplete_stream"
    assert attrs["gen_ai.response.finish_reasons"] == ("error",)
    assert attrs["streamscope.class"] == "upstream_error" == offline_class(telemetry.one())
    assert attrs["streamscope.verified"] is False


def test_finish_reasons_error_type_and_class_agree_on_every_stream(sim) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=provider, budgets=Budgets(first_token=1.0, idle=0.5))
    slow = {"silent_start", "timed_silent_start", "silent_stall", "pinging_stall", "slow_thinking", "slow_answer",
            "long_answer", "timed_pinging_stall", "timed_long_answer", "timed_thinking"}
    try:
        for name in [*sorted(set(SCENARIOS) - slow), *(s.name for s in SHAPES)]:
            read(sim, name)
    finally:
        instrumentor.uninstrument()
    spans = exporter.get_finished_spans()
    assert len(spans) >= len(SCENARIOS) - len(slow)
    for span in spans:
        attrs = dict(span.attributes or {})
        error = attrs.get("error.type")
        assert (attrs["gen_ai.response.finish_reasons"] == ("error",)) is (error is not None), attrs
        assert (attrs["streamscope.class"] in ERROR_CLASSES) is (error is not None), attrs
        assert attrs["streamscope.verified"] is (attrs["streamscope.class"] == "complete")
