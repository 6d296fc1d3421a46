"""The rules that turn a finished call's record into its price (`pricing/cost.py`): which usage
counts, when the output is estimated, and what an unpriced or unbilled call says."""

from __future__ import annotations

from dataclasses import replace

import pytest

from streamscope.adapters.stainless.prompt_size import prompt_chars
from streamscope.core.record import RequestInfo, StreamRecord
from streamscope.pricing import PriceTable
from streamscope.pricing.cost import CallCost, call_cost, cost_attributes, usage_of

TABLE = PriceTable({"flat-*": {"input": 1.0, "output": 10.0, "cache_read": 0.1, "cache_write": 2.0,
                               "cache_write_1h": 4.0}}, shipped=False)
BASE = StreamRecord(request=RequestInfo(provider="anthropic", model="flat-1"), start_ns=0, duration=1.0, end="done")


def test_the_final_usage_is_priced_as_reported() -> None:
    record = replace(BASE, usage_final=True, completed=True, input_tokens=1000, output_tokens=200,
                     cache_read_tokens=500, cache_write_tokens=300, cache_write_1h_tokens=100, text_chars=9999)
    usage, estimated = usage_of(record)
    assert not estimated and usage.output == 200
    # fresh 1000-500-300 = 200 at 1.0, reads 500 at 0.1, 5-minute writes 200 at 2.0, 1-hour writes 100 at 4.0,
    # output 200 at 10.0
    assert call_cost(record, TABLE) == CallCost(pytest.approx((200 + 50 + 400 + 400 + 2000) / 1e6), False)


@pytest.mark.parametrize(("text", "hidden", "events", "thinking", "tokens"), [
    (16, 0, 3, False, 4),     # 16 characters: 4 tokens
    (17, 0, 3, False, 5),     # rounded up
    (0, 36, 2, True, 9),      # thinking counts as output
    (0, 0, 1, False, 1),      # an output event with nothing in it: at least one token
    (0, 0, 0, True, 1),       # a thinking block opened, no delta yet: at least one
    (0, 0, 0, False, 0),      # no output event: nothing estimated
])
def test_a_cut_streams_output_is_estimated(text: int, hidden: int, events: int, thinking: bool, tokens: int) -> None:
    record = replace(BASE, end="error", input_tokens=1000, text_chars=text, hidden_chars=hidden,
                     content_events=events, thinking_start=0.1 if thinking else None)
    usage, estimated = usage_of(record)
    assert usage.output == tokens and estimated is (tokens > 0)
    cost = call_cost(record, TABLE)
    assert cost.usd == pytest.approx((1000 * 1.0 + tokens * 10.0) / 1e6) and cost.estimated is (tokens > 0)


def test_no_usage_is_not_billed_and_an_unknown_model_is_unpriced() -> None:
    assert call_cost(BASE, TABLE) == CallCost(0.0, False, billed=False)
    unknown = replace(BASE, request=RequestInfo(provider="anthropic", model="nobody-knows"), input_tokens=10)
    assert call_cost(unknown, TABLE).usd is None
    assert cost_attributes(call_cost(unknown, TABLE), latest=True) == {}


def test_the_response_model_is_priced_before_the_requests() -> None:
    record = replace(BASE, request=RequestInfo(provider="anthropic", model="alias"), response_model="flat-2",
                     usage_final=True, input_tokens=1000, output_tokens=0)
    assert call_cost(record, TABLE).usd == pytest.approx(1000 / 1e6)


def test_the_proposals_names_only_under_the_opt_in() -> None:
    cost = CallCost(0.25, True)
    assert cost_attributes(cost, latest=False) == {"streamscope.cost.usd": 0.25, "streamscope.cost.estimated": True}
    assert cost_attributes(cost, latest=True) == {
        "streamscope.cost.usd": 0.25, "streamscope.cost.estimated": True, "gen_ai.usage.cost.amount": 0.25,
        "gen_ai.usage.cost.currency": "USD", "gen_ai.usage.cost.source": "local"}


def test_an_unreported_input_is_estimated_from_the_prompt_once_accepted() -> None:
    request = RequestInfo(provider="openai", model="flat-1", prompt_chars=41)
    cut = replace(BASE, request=request, end="error", time_to_headers=0.1, http_status=200, content_events=2,
                  text_chars=8)
    usage, estimated = usage_of(cut)
    assert (usage.input, usage.output, estimated) == (11, 2, True)  # 41 characters: 11 tokens, rounded up
    refused = replace(cut, http_status=529, content_events=0, text_chars=0)
    assert call_cost(refused, TABLE) == CallCost(0.0, False, billed=False), "an HTTP error is not billed"
    never_sent = replace(cut, time_to_headers=None, content_events=0, text_chars=0)
    assert call_cost(never_sent, TABLE).usd == 0.0


def test_the_prompts_text_is_counted_not_its_images() -> None:
    body = {
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * 100_000}},
                {"type": "input_image", "image_url": "data:image/png;base64," + "B" * 50_000},
            ]},
        ],
        "model": "not counted",
    }
    # "Be brief." 9 + "text" 4 (its type); "user" 4 + "text" 4 + "What is this?" 13 + the two parts' types
    assert prompt_chars(body, ("system", "messages", "tools")) == 9 + 4 + 4 + 4 + 13 + len("image") + len(
        "input_image")


def test_a_request_with_no_recorded_attempt_has_no_cost() -> None:
    """`cost_of`: nothing recorded (the instrumentation off, a call that was not streamed) is not
    known to be free: None, never 0.0."""
    from streamscope.core.calls import cost_of

    assert cost_of([]) is None and cost_of([None]) is None
