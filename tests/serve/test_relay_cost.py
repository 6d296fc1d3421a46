# ruff: noqa: F811 - the fixtures come from test_relay
"""What a relayed request cost: the relay's log record carries the sum over its attempts, the
failed ones included, and a browser that leaves mid-answer still pays its input and the output
generated so far (estimated: 4 characters to a token, rounded up). Figures by hand from the
usage on the spans and the prices given here (the simulator's model has no shipped price)."""

from __future__ import annotations

import math
from typing import Any

import pytest
from test_relay import agrees, base, get, on, sim  # noqa: F401 - fixtures

PRICES = {"claude-sim-*": {"input": 2.0, "output": 10.0}}
"""US dollars per million tokens for the simulator's model."""


def by_hand(attrs: Any) -> float:
    """A span's cost from its reported usage at PRICES (output estimated where the usage is missing)."""
    output = attrs.get("gen_ai.usage.output_tokens")
    if output is None:
        output = max(math.ceil(attrs["streamscope.text_chars"] / 4), 1) if attrs["streamscope.content_events"] else 0
    return (attrs.get("gen_ai.usage.input_tokens", 0) * 2.0 + output * 10.0) / 1e6


def test_a_complete_relayed_answer(base: str, on: Any) -> None:
    state = on(prices=PRICES)
    got = get(base, "/relay/anthropic/create/complete")
    assert got.terminal.event == "done"
    fields = agrees(state, got, "done")
    [span] = state.spans()
    assert span.attributes["streamscope.cost.estimated"] is False
    assert fields["cost"] == pytest.approx(by_hand(span.attributes), rel=1e-12) and fields["cost"] > 0


def test_a_retried_request_costs_both_attempts(base: str, on: Any) -> None:
    state = on(prices=PRICES)
    got = get(base, "/relay/anthropic/create/http_529_then_ok")
    fields = agrees(state, got, "done")
    failed, answered = sorted(state.spans(), key=lambda s: s.start_time)
    assert failed.attributes["streamscope.cost.usd"] == 0.0, "an HTTP 529 before the stream is not billed"
    assert fields["attempts"] == 2
    assert fields["cost"] == pytest.approx(by_hand(answered.attributes), rel=1e-12)


@pytest.mark.parametrize("query", ["", "sync=1"])
def test_a_closed_connection_pays_what_was_generated(base: str, on: Any, query: str) -> None:
    state = on(prices=PRICES)
    got = get(base, f"/relay/anthropic/create/slow_answer?{query}", stop_after=2)
    fields = agrees(state, got, "client_disconnect")
    [span] = state.spans()
    attrs = span.attributes
    assert attrs["streamscope.class"] == "cancelled" and attrs["streamscope.cost.estimated"] is True
    assert "gen_ai.usage.output_tokens" not in attrs and attrs["streamscope.text_chars"] > 0
    assert attrs["streamscope.cost.usd"] == pytest.approx(by_hand(attrs), rel=1e-12)
    assert fields["cost"] == pytest.approx(attrs["streamscope.cost.usd"], rel=1e-12)
    spent = {p.attributes["streamscope.class"]: p.value for p in state.points("streamscope.cost")}
    assert spent == {"cancelled": pytest.approx(attrs["streamscope.cost.usd"], rel=1e-12)}
