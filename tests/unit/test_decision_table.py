"""The decision table, row by row: for each rule an attribute mapping that hits it and the nearest
mapping that does not (one fact changed), then junk, and `verified` never true without a normal
end (the final event and a finish reason), from attributes alone or from a record."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope import classify
from streamscope.core.classifier import LABELS, NORMAL_FINISH, RULES, facts, missing
from streamscope.core.record import RequestInfo, StreamRecord
from streamscope.pipeline import finished_attributes

DOCS = Path(__file__).resolve().parents[2] / "docs" / "classes.md"
FINISH = "gen_ai.response.finish_reasons"
STOP = {FINISH: ("stop",)}
LENGTH = {FINISH: ("length",)}
ANSWER = {"streamscope.time_to_first_content": 0.5, "streamscope.time_to_first_text": 0.5,
          "streamscope.text_chars": 400}
NORMAL = {**STOP, "streamscope.stop_reason": "end_turn", **ANSWER}
CUT = {"error.type": "incomplete_stream", FINISH: ("error",)}
WHOLE_BUDGET = {"streamscope.thinking.budget_tokens": 4096, "gen_ai.usage.reasoning.output_tokens": 4000}


def timeout(fired: str | None, **more: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {"error.type": "timeout", FINISH: ("error",), **more}
    if fired is not None:
        attrs["streamscope.budget.fired"] = fired
    return attrs


# (rule, a mapping that hits it, the nearest mapping that does not, and the label that one gets)
ROWS: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    ("deadline_in_answer", timeout("deadline", **ANSWER),
     timeout("deadline", **{"streamscope.time_to_first_content": 0.5}), "deadline_in_thinking"),
    ("deadline_in_thinking", timeout("deadline", **{"streamscope.thinking.start": 0.2}),
     timeout("idle", **{"streamscope.thinking.start": 0.2, "streamscope.time_to_first_content": 0.2}),
     "stalled_mid_stream"),
    ("stalled_before_first_content", timeout("first_token"),
     timeout("idle", **{"streamscope.time_to_first_content": 0.3}), "stalled_mid_stream"),
    ("stalled_mid_stream", timeout("read_timeout", **{"streamscope.time_to_first_content": 0.3}),
     timeout("read_timeout"), "stalled_before_first_content"),
    ("cancelled", {"error.type": "cancelled", FINISH: ("error",), **ANSWER},
     {"error.type": "RemoteProtocolError", FINISH: ("error",), **ANSWER}, "upstream_error"),
    ("upstream_error", {"error.type": "overloaded_error", FINISH: ("error",), **ANSWER},
     NORMAL, "complete"),
    ("refused", {**NORMAL, FINISH: ("content_filter",), "streamscope.refusal": True},
     {**CUT, "streamscope.refusal": True}, "upstream_error"),
    ("paused", {**NORMAL, "streamscope.paused": True},
     {**NORMAL, "streamscope.paused": "true"}, "complete"),  # a string is not the boolean fact
    ("budget_exhausted", {**LENGTH, "streamscope.thinking.start": 0.1, "streamscope.text_chars": 3},
     {**LENGTH, "streamscope.thinking.start": 0.1, "streamscope.text_chars": 100}, "truncated"),
    ("truncated", {**NORMAL, **LENGTH},
     {**CUT, **ANSWER}, "upstream_error"),  # cut while answering is no token limit
    ("silently_unverified", {**NORMAL, **WHOLE_BUDGET},
     {**NORMAL, **WHOLE_BUDGET, "gen_ai.usage.reasoning.output_tokens": 3800}, "complete"),  # 92.8 %
    ("complete", NORMAL,
     {key: value for key, value in NORMAL.items() if key != FINISH}, "upstream_error"),
]


def test_every_rule_has_a_row_here_in_order() -> None:
    assert [label for label, *_ in ROWS] == [rule.label for rule in RULES]


@pytest.mark.parametrize(("label", "hit", "near", "near_label"), ROWS, ids=[row[0] for row in ROWS])
def test_row(label: str, hit: dict, near: dict, near_label: str) -> None:
    assert classify(hit) == label
    rule = next(rule for rule in RULES if rule.label == label)
    assert rule.test(facts(hit))
    assert not rule.test(facts(near)) or RULES.index(rule) > RULES.index(
        next(r for r in RULES if r.label == near_label)), "the near miss must miss this row"
    assert classify(near) == near_label != label


# -- the normal end that `complete` needs -------------------------------------------------------


@pytest.mark.parametrize("reason", sorted(NORMAL_FINISH))
def test_each_conventions_reason_is_a_normal_end(reason: str) -> None:
    assert facts({FINISH: (reason,)}).normal
    assert classify({FINISH: [reason]}) in {"complete", "truncated", "refused"}  # a list, as JSON lines hold it


@pytest.mark.parametrize("attributes", [
    {},
    {"streamscope.class": "complete", "streamscope.verified": True},  # a label is not evidence
    {**ANSWER, "streamscope.stop_reason": "end_turn"},  # the provider's word, without the finish reason
    {FINISH: ("error",)},  # failed, no error.type
    {FINISH: ()},
    {FINISH: None},
    {FINISH: "stop"},  # a bare string is not the attribute's type
    {FINISH: [None]},
    {FINISH: [5]},
    {FINISH: ["stop", "error"]},
    {FINISH: ("end_turn",)},  # the provider's reason, unmapped
    {FINISH: ("whatever",)},
    {FINISH: ("STOP",)},
    {**STOP, "error.type": 5},
    {**STOP, "error.type": ""},
    {**STOP, "error.type": ["timeout"]},
    {**STOP, "streamscope.budget.fired": "banana"},
    {**STOP, "streamscope.budget.fired": 1.5},
    {**STOP, "streamscope.budget.fired": "idle"},  # a budget fired: never a normal end
])
def test_no_normal_end_is_never_complete(attributes: dict) -> None:
    label = classify(attributes)
    assert label != "complete" and label in LABELS
    assert not facts(attributes).normal


@pytest.mark.parametrize(("attributes", "lacks"), [
    ({}, [FINISH]),
    ({"streamscope.pings": 3, "streamscope.class": "complete"}, [FINISH]),
    ({FINISH: ("error",)}, ["error.type"]),
    ({FINISH: "stop"}, [f"{FINISH} (not an array of strings)"]),
    ({FINISH: [5]}, [f"{FINISH} (not an array of strings)"]),
    ({FINISH: ("whatever",)}, [f"{FINISH} (a reason the conventions do not define: 'whatever')"]),
    ({**STOP, "error.type": 5}, ["error.type (not a string)"]),
    ({**STOP, "streamscope.budget.fired": "banana"}, ["streamscope.budget.fired (not a budget: 'banana')"]),
])
def test_junk_is_upstream_error_and_says_what_it_lacks(attributes: dict, lacks: list[str]) -> None:
    assert classify(attributes) == "upstream_error"
    assert list(missing(attributes)) == lacks


@pytest.mark.parametrize("attributes", [NORMAL, CUT, timeout("idle"), {"error.type": "cancelled"},
                                        {"error.type": "overloaded_error"}, {**NORMAL, **LENGTH}])
def test_spans_that_say_how_they_ended_lack_nothing(attributes: dict) -> None:
    assert missing(attributes) == ()


@pytest.mark.parametrize("attributes", [
    {**NORMAL, "streamscope.time_to_first_text": "0.5", "streamscope.text_chars": "400"},  # strings for numbers
    {**NORMAL, "streamscope.time_to_first_text": None, "streamscope.text_chars": None},
    {**NORMAL, "streamscope.text_chars": math.nan, "streamscope.decode_rate": math.inf},
    {**NORMAL, "streamscope.refusal": None, "streamscope.paused": None, "error.type": None},  # null = absent
    {**NORMAL, "streamscope.thinking.budget_tokens": "4096", "gen_ai.usage.reasoning.output_tokens": "4000"},
    {**NORMAL, "streamscope.thinking.budget_tokens": 0, "gen_ai.usage.reasoning.output_tokens": 9},
    {**NORMAL, "streamscope.thinking.budget_tokens": 10**400, "gen_ai.usage.reasoning.output_tokens": 10**400},
])
def test_junk_beside_a_normal_end_cannot_invent_a_failure(attributes: dict) -> None:
    """Unreadable numbers are no facts: the normal end still decides, and says `complete`."""
    assert classify(attributes) == "complete"


@pytest.mark.parametrize("attributes", [
    {**LENGTH, "streamscope.text_chars": "many", "streamscope.thinking.start": 0.1},  # unread count: none
    {**LENGTH, "streamscope.text_chars": None, "gen_ai.usage.reasoning.output_tokens": 900},
])
def test_unreadable_counts_read_as_none(attributes: dict) -> None:
    assert classify(attributes) == "budget_exhausted"


def test_docs_print_the_normal_end() -> None:
    text = DOCS.read_text()
    rows = dict(re.findall(r"^\| \d+ \| `(\w+)` \| (.*)$", text, flags=re.M))
    assert list(rows) == [rule.label for rule in RULES]
    for reason in NORMAL_FINISH:
        assert f"`{reason}`" in rows["complete"]
    assert "error.type" in rows["complete"] and FINISH in rows["complete"]
    assert "no normal end" in rows["upstream_error"]


# -- verified never true without a normal end ---------------------------------------------------

junk_value = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
                       st.lists(st.one_of(st.text(max_size=8), st.integers(), st.none()), max_size=3),
                       st.sampled_from(["timeout", "cancelled", "deadline", "idle", "stop", "length", "error",
                                        "content_filter", "tool_call", "end_turn"]))
keys = st.sampled_from(["error.type", "streamscope.budget.fired", FINISH, "streamscope.refusal", "streamscope.paused",
                        "streamscope.time_to_first_text", "streamscope.time_to_first_content",
                        "streamscope.thinking.start", "streamscope.thinking.end", "streamscope.thinking.budget_tokens",
                        "streamscope.decode_rate", "gen_ai.usage.reasoning.output_tokens", "streamscope.text_chars"])


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(keys, junk_value))
def test_complete_only_with_a_normal_end(attributes: dict) -> None:
    label = classify(attributes)
    assert label in LABELS
    reasons = attributes.get(FINISH)
    normal_end = (attributes.get("error.type") is None and attributes.get("streamscope.budget.fired") is None
                  and isinstance(reasons, list) and bool(reasons)
                  and all(isinstance(r, str) and r in NORMAL_FINISH for r in reasons))
    if label == "complete":
        assert normal_end, attributes
    if not normal_end:
        assert label != "complete"
        said = isinstance(attributes.get("error.type"), str)  # an error.type says how it ended
        assert bool(missing(attributes)) is (label == "upstream_error" and not said)


@settings(max_examples=300, deadline=None)
@given(end=st.sampled_from(["done", "error", "closed", "abandoned", "cancelled"]), completed=st.booleans(),
       finish=st.sampled_from([None, "stop", "length", "tool_call", "content_filter", "whatever"]),
       fired=st.sampled_from([None, "idle", "first_token", "deadline", "read_timeout"]),
       content=st.sampled_from([None, 0.2]), usage_final=st.booleans())
def test_a_record_is_verified_only_after_a_normal_end(end, completed, finish, fired, content, usage_final) -> None:
    record = StreamRecord(RequestInfo("anthropic", model="m"), start_ns=0, duration=1.0, end=end,
                          error_type="SomeError" if end == "error" else None, budget_fired=fired,
                          time_to_first_chunk=0.1, time_to_first_content=content, time_to_first_text=content,
                          finish_reason=finish, stop_reason=finish, completed=completed, usage_final=usage_final,
                          input_tokens=12, output_tokens=3 if usage_final else 1)
    attrs = finished_attributes(record)
    if attrs["streamscope.verified"]:
        assert record.normal and finish in NORMAL_FINISH
        assert attrs["streamscope.class"] == "complete" and "error.type" not in attrs
    if not record.completed or record.finish_reason is None:
        assert attrs["streamscope.verified"] is False
        assert attrs["streamscope.class"] not in {"complete", "truncated", "budget_exhausted", "silently_unverified",
                                                  "refused", "paused"}
    assert attrs["gen_ai.usage.input_tokens"] == 12  # input-side: known, so on the span however it ended
    assert ("gen_ai.usage.output_tokens" in attrs) is usage_final  # output-side: the final usage only
