"""The classifier as a pure decision table: every label from attributes alone."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from streamscope import classify
from streamscope.core.classifier import LABELS, RULES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "classes.md"
NORMAL = {"gen_ai.response.finish_reasons": ("stop",), "streamscope.stop_reason": "end_turn",
          "streamscope.time_to_first_text": 0.5, "streamscope.time_to_first_content": 0.5,
          "streamscope.text_chars": 400}
LENGTH = {"gen_ai.response.finish_reasons": ("length",)}


@pytest.mark.parametrize(
    ("attributes", "label"),
    [
        (NORMAL, "complete"),
        ({**NORMAL, **LENGTH, "streamscope.stop_reason": "max_tokens"}, "truncated"),
        ({**NORMAL, **LENGTH, "streamscope.stop_reason": "model_context_window_exceeded"}, "truncated"),
        ({**NORMAL, "gen_ai.response.finish_reasons": ["length"]}, "truncated"),  # a list, as live
        ({**LENGTH, "streamscope.thinking.start": 0.1, "streamscope.text_chars": 3}, "budget_exhausted"),
        ({**LENGTH, "gen_ai.usage.reasoning.output_tokens": 900, "streamscope.text_chars": 0}, "budget_exhausted"),
        ({**LENGTH, "streamscope.text_chars": 3}, "truncated"),  # no thinking
        # The provider's own stop reason is kept for people; the classifier reads the normalised facts.
        ({**NORMAL, "streamscope.stop_reason": "max_tokens"}, "complete"),
        ({**NORMAL, "streamscope.thinking.budget_tokens": 4096, "gen_ai.usage.reasoning.output_tokens": 4000},
         "silently_unverified"),
        ({**NORMAL, "streamscope.thinking.budget_tokens": 4096, "gen_ai.usage.reasoning.output_tokens": 3000},
         "complete"),
        # No reasoning usage reported: estimated from the thinking phase and the decode rate.
        ({**NORMAL, "streamscope.thinking.budget_tokens": 1000, "streamscope.thinking.start": 1.0,
          "streamscope.thinking.end": 11.0, "streamscope.decode_rate": 99.0}, "silently_unverified"),
        ({**NORMAL, "streamscope.thinking.budget_tokens": 1000, "streamscope.thinking.start": 1.0,
          "streamscope.thinking.end": 5.0, "streamscope.decode_rate": 99.0}, "complete"),
        ({**NORMAL, "gen_ai.response.finish_reasons": ("content_filter",), "streamscope.refusal": True}, "refused"),
        ({**NORMAL, "gen_ai.response.finish_reasons": ("content_filter",)}, "refused"),  # a content filter
        ({**NORMAL, "streamscope.refusal": True}, "refused"),  # a refusal that ended with `stop`
        ({**NORMAL, "streamscope.paused": True}, "paused"),
        ({**NORMAL, "streamscope.paused": True, "streamscope.thinking.budget_tokens": 4096,
          "gen_ai.usage.reasoning.output_tokens": 4000}, "paused"),
        ({"error.type": "timeout", "streamscope.budget.fired": "deadline"}, "deadline_in_thinking"),
        ({"error.type": "timeout", "streamscope.budget.fired": "deadline", "streamscope.thinking.start": 0.2},
         "deadline_in_thinking"),
        ({"error.type": "timeout", "streamscope.budget.fired": "deadline", "streamscope.time_to_first_text": 9.0},
         "deadline_in_answer"),
        ({"error.type": "timeout", "streamscope.budget.fired": "first_token"}, "stalled_before_first_content"),
        ({"error.type": "timeout", "streamscope.budget.fired": "read_timeout"}, "stalled_before_first_content"),
        ({"error.type": "timeout", "streamscope.budget.fired": "idle", "streamscope.time_to_first_content": 1.0},
         "stalled_mid_stream"),
        ({"error.type": "timeout", "streamscope.budget.fired": "read_timeout",
          "streamscope.time_to_first_content": 1.0}, "stalled_mid_stream"),
        ({"error.type": "overloaded_error"}, "upstream_error"),
        ({"error.type": "RemoteProtocolError", "streamscope.time_to_first_text": 1.0}, "upstream_error"),
        ({"error.type": "incomplete_stream"}, "upstream_error"),
        ({"error.type": "cancelled", "streamscope.time_to_first_text": 1.0}, "cancelled"),
    ],
)
def test_decision_table(attributes: dict, label: str) -> None:
    assert classify(attributes) == label


def test_every_label_is_reachable_and_documented_in_order() -> None:
    assert [r.label for r in RULES] == [
        "deadline_in_answer", "deadline_in_thinking", "stalled_before_first_content", "stalled_mid_stream",
        "cancelled", "upstream_error", "refused", "paused", "budget_exhausted", "truncated", "silently_unverified",
        "complete",
    ]
    assert sorted(r.label for r in RULES) == sorted(LABELS)
    documented = re.findall(r"^\| \d+ \| `(\w+)` \|", DOCS.read_text(), flags=re.M)
    assert documented == [r.label for r in RULES], "docs/classes.md's table is not the classifier's"


@pytest.mark.parametrize(("junk", "label"), [
    # Nothing says how these streams ended: the class of a stream without its final event, never verified.
    ({}, "upstream_error"),
    ({"error.type": 5}, "upstream_error"),
    ({"streamscope.stop_reason": None}, "upstream_error"),
    ({"gen_ai.response.finish_reasons": [5]}, "upstream_error"),
    ({"gen_ai.response.finish_reasons": "length"}, "upstream_error"),  # a bare string is not the attribute
    ({"streamscope.refusal": "yes"}, "upstream_error"),
    ({"streamscope.thinking.budget_tokens": 0, "gen_ai.usage.reasoning.output_tokens": 9}, "upstream_error"),
    # A normal end beside junk: the unreadable values are no facts.
    ({"streamscope.text_chars": "many", "gen_ai.response.finish_reasons": ["length"]}, "truncated"),
    ({**NORMAL, "streamscope.refusal": "yes"}, "complete"),
])
def test_junk(junk: dict, label: str) -> None:
    assert classify(junk) == label
