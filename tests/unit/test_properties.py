"""Bad input, property-based: arbitrary event sequences (unknown types, missing and null fields,
out-of-order blocks, repeated stops, absurd numbers) through the adapter's per-event path, the
recorder and the classifier. Nothing escapes, nothing counts as an internal error, and the
record's invariants hold."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.trace import NoOpTracer

import streamscope.core.guard as internal
from streamscope.adapters.anthropic.events import observe
from streamscope.budgets.table import Budgets, BudgetTable
from streamscope.core.attributes import record_attributes
from streamscope.core.classifier import LABELS, NORMAL_FINISH, classify
from streamscope.pipeline import Pipeline, finished_attributes

absurd_ints = st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63), st.just(True), st.text(max_size=3))
maybe_text = st.one_of(st.none(), st.text(max_size=20), st.integers())
types = st.sampled_from(["message_start", "content_block_start", "content_block_delta", "content_block_stop",
                         "message_delta", "message_stop", "ping", "error", "future_event_type", ""])
delta_types = st.sampled_from(["text_delta", "input_json_delta", "thinking_delta", "signature_delta",
                               "citations_delta", "brand_new_delta", None])
block_types = st.sampled_from(["text", "thinking", "redacted_thinking", "tool_use", "server_tool_use", "mcp_tool_use",
                               "web_search_tool_result", "code_execution_tool_result", "_tool_result", None, "x"])
stops = st.one_of(st.none(), st.sampled_from(["end_turn", "max_tokens", "refusal", "tool_use", "stop_sequence",
                                              "model_context_window_exceeded", "pause_turn", "whatever"]))


def ns(**fields: Any) -> SimpleNamespace:
    return SimpleNamespace(**{k: v for k, v in fields.items() if v is not ...})


usage = st.one_of(st.none(), st.builds(lambda i, o, r, c: ns(input_tokens=i, output_tokens=o,
                                                               cache_read_input_tokens=c,
                                                               output_tokens_details=ns(thinking_tokens=r)),
                                       absurd_ints, absurd_ints, absurd_ints, absurd_ints))
event = st.one_of(
    st.builds(lambda t, d, text: ns(type=t, delta=ns(type=d, text=text, partial_json=text)), types, delta_types,
              maybe_text),
    st.builds(lambda t, d: ns(type=t, delta=d), types, st.none()),
    st.builds(lambda b: ns(type="content_block_start", content_block=ns(type=b)), block_types),
    st.builds(lambda b, i, n: ns(type="content_block_start", content_block=ns(type=b, id=i, tool_use_id=i, name=n)),
              block_types, st.sampled_from([None, "srvtoolu_1", "srvtoolu_2", 7]), maybe_text),
    st.just("ping"),  # a ping, as the decoder sees it (the SDK drops it before the caller)
    st.builds(lambda s, u: ns(type="message_delta", delta=ns(stop_reason=s), usage=u), stops, usage),
    st.builds(lambda u, i: ns(type="message_start", message=ns(id=i, model=i, usage=u)), usage, maybe_text),
    st.builds(lambda: ns()),  # no type at all
    st.just(ns(type="message_stop")),
)
steps = st.lists(st.tuples(st.floats(min_value=0, max_value=5, allow_nan=False), event), max_size=40)
ends = st.sampled_from(["done", "error", "closed", "abandoned", "cancelled"])
ERROR_CLASSES = {"deadline_in_answer", "deadline_in_thinking", "stalled_before_first_content", "stalled_mid_stream",
                 "cancelled", "upstream_error"}


@settings(max_examples=300, deadline=None)
@given(steps=steps, end=ends, any_content=st.booleans(), budget=st.sampled_from([None, "idle", "first_token"]),
       thinking_budget=absurd_ints)
def test_arbitrary_event_sequences(steps, end, any_content, budget, thinking_budget) -> None:
    errors_before = internal.count
    pipeline = Pipeline(NoOpTracer(), BudgetTable.from_config(Budgets(first_content="any" if any_content else None)))
    request = pipeline.request(provider="anthropic", model="m",
                               thinking_budget=thinking_budget if isinstance(thinking_budget, int) else None)
    call = pipeline.open(request, t0=0.0)
    assert call is not None
    rec = call.recorder
    rec.on_finish = None
    clock = [0.0]

    def now() -> float:
        return clock[0]

    for delay, ev in steps:
        clock[0] += delay
        if ev == "ping":
            rec.pinged(now())
            continue
        observe(rec, ev, now())
    record = rec.finish(end, "SomeError" if end == "error" else None, budget, t=clock[0] + 0.5)
    assert record is not None and rec.finish("done") is None  # only the first end counts
    assert internal.count == errors_before, "bad input was counted as streamscope's own failure"

    times = [record.time_to_first_chunk, record.time_to_first_content, record.time_to_first_text,
             record.thinking_start, record.thinking_end, record.max_gap, record.first_delta, record.last_delta]
    assert all(t is None or 0 <= t <= record.duration + 1e-9 for t in times)
    if record.first_delta is not None:
        assert record.first_delta <= record.last_delta
    if record.time_to_first_text is not None and record.time_to_first_content is not None:
        assert record.time_to_first_content <= record.time_to_first_text
    if record.thinking_start is not None and record.thinking_end is not None:
        assert record.thinking_start <= record.thinking_end
    if record.max_gap is not None:
        assert record.max_gap <= record.duration
    assert record.server_tool_calls >= len(record.server_tool_runs)
    assert all(0 <= took <= record.duration + 1e-9 and 0 <= ended <= record.duration + 1e-9
               for _name, ended, took in record.server_tool_runs)
    if record.server_tool_duration is not None:
        assert 0 <= record.server_tool_duration <= record.server_tool_calls * record.duration + 1e-9
    assert record.text_chars >= 0 and record.content_events >= 0
    assert record.content_events >= (1 if record.time_to_first_text is not None else 0)
    attributes = finished_attributes(record)
    assert attributes["streamscope.class"] in LABELS
    assert classify(record_attributes(record)) == attributes["streamscope.class"]
    assert (attributes["streamscope.class"] == "complete") is attributes["streamscope.verified"]
    # Junk is never verified: only a stream that got its final event with a finish reason the
    # conventions define, no error and no budget, is; one that never got its final event is not
    # even an answer (no class of a normal end).
    if attributes["streamscope.verified"]:
        assert record.normal and record.finish_reason in NORMAL_FINISH and "error.type" not in attributes
    if not record.completed or record.finish_reason is None:
        assert attributes["streamscope.verified"] is False
        assert attributes["streamscope.class"] in ERROR_CLASSES, attributes
        assert "error.type" in attributes and attributes["gen_ai.response.finish_reasons"] == ["error"]
    # Usage: output-side only from the final usage (never message_start's placeholder).
    if not record.usage_final:
        assert "gen_ai.usage.output_tokens" not in attributes
        assert "gen_ai.usage.reasoning.output_tokens" not in attributes


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["error.type", "streamscope.budget.fired", "streamscope.stop_reason",
                                        "gen_ai.response.finish_reasons",
                                        "streamscope.time_to_first_text", "streamscope.time_to_first_content",
                                        "streamscope.thinking.start", "streamscope.thinking.end",
                                        "streamscope.thinking.budget_tokens", "streamscope.decode_rate",
                                        "gen_ai.usage.reasoning.output_tokens", "streamscope.text_chars"]),
                       st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
                                 st.sampled_from(["timeout", "deadline", "idle", "cancelled", "max_tokens"]),
                                 st.lists(st.one_of(st.sampled_from(["stop", "length", "tool_call", "content_filter",
                                                                     "error", "end_turn"]), st.integers(), st.none()),
                                          max_size=2))))
def test_classify_is_total(attributes) -> None:
    label = classify(attributes)
    assert label in LABELS
    reasons = attributes.get("gen_ai.response.finish_reasons")
    normal_end = (attributes.get("error.type") is None and attributes.get("streamscope.budget.fired") is None
                  and isinstance(reasons, list) and bool(reasons) and all(r in NORMAL_FINISH for r in reasons))
    assert label != "complete" or normal_end, "complete (verified) only with a normal end in the attributes"
    if not normal_end:
        assert label in ERROR_CLASSES, "attributes without a normal end get an error class, never an answer's"
