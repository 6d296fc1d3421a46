"""What one streamed call cost: its usage at its model's rates, computed once, when the stream ends
(never per event), for the span, the `streamscope.cost` counters and the helpers.

A cut stream is not free: its input was billed from the first event on, and so was the output the
model generated before the cut, though the final usage that reports it never arrives. That output
is estimated from what arrived: the characters of answer, tool input and thinking the stream
carried, `CHARS_PER_TOKEN` to a token, rounded up, and at least one token once any output event
arrived (a thinking model may stream little of what it generated). An input the provider never
reported (OpenAI reports it with the final usage only) is estimated the same way from the prompt's
characters, counted when the request was sent, once the provider accepted the request (its
headers came). The figure is marked `streamscope.cost.estimated`. A call that got no usage at
all (an HTTP error before the stream, a refused connection) was not billed: 0.0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.util.types import AttributeValue

from streamscope.core import attributes as A
from streamscope.core.record import StreamRecord

from .prices import PriceTable
from .usage import Usage

__all__ = ["CHARS_PER_TOKEN", "SHIPPED", "WASTE", "CallCost", "call_cost", "cost", "cost_attributes", "usage_of"]

SHIPPED = PriceTable()
"""The shipped prices alone, for a caller with no prices of its own."""


def cost(provider: str | None, model: str | None, usage: Usage, table: PriceTable | None = None,
         variant: Mapping[str, str] | None = None) -> float | None:
    """US dollars for `usage` of `model` as `provider` (`gen_ai.provider.name`) serves it, at
    `table`'s rates (the shipped ones by default); None when the model has no known price, never
    a made-up 0. `variant` picks a price variant the provider reported (`{"service_tier": "flex"}`,
    `{"speed": "fast"}`); the model is the one the response reported, else the request's."""
    return (table or SHIPPED).cost(provider, model, usage, variant)


CHARS_PER_TOKEN = 4
"""Characters of output per token for the estimate: English text runs about 4 to the token in both
providers' tokenizers (code and other languages run fewer, so the estimate errs low)."""

WASTE = frozenset({"budget_exhausted", "deadline_in_thinking", "deadline_in_answer", "stalled_before_first_content",
                   "stalled_mid_stream", "upstream_error", "cancelled"})
"""The classes whose spend bought no answer (a retried attempt ends in one of them)."""

GEN_AI_COST = (("gen_ai.usage.cost.currency", "USD"), ("gen_ai.usage.cost.source", "local"))
"""The open GenAI cost proposal's attributes beside its amount (opt-in, like other pending names)."""


@dataclass(frozen=True, slots=True)
class CallCost:
    """A call's price: `usd` None when usage arrived but its model has no known price (never 0)."""

    usd: float | None
    estimated: bool = False
    billed: bool = True
    """False: no usage at all (nothing was billed; `usd` is 0.0)."""


def usage_of(record: StreamRecord) -> tuple[Usage, bool]:
    """The record's billable usage, and whether part of it is an estimate: the output without the
    final usage; the input where the provider accepted the request (its headers came, not an
    error) and never reported it, from the prompt's characters."""
    estimated = False
    input_tokens = record.input_tokens
    status = record.http_status
    if input_tokens is None and record.time_to_headers is not None and (status is None or status < 400) \
            and record.request.prompt_chars:
        input_tokens = math.ceil(record.request.prompt_chars / CHARS_PER_TOKEN)
        estimated = True
    output = (record.output_tokens or 0) if record.usage_final else 0
    reasoning = record.reasoning_tokens if record.usage_final else None
    if not record.usage_final and (record.content_events or record.thinking_start is not None
                                   or record.server_tool_calls):
        chars = record.text_chars + record.hidden_chars
        output = max(math.ceil(chars / CHARS_PER_TOKEN), 1)
        reasoning = math.ceil(record.hidden_chars / CHARS_PER_TOKEN)
        estimated = True
    usage = Usage.from_counts(input_tokens, output, reasoning, record.cache_read_tokens,
                              record.cache_write_tokens, record.cache_write_1h_tokens, record.web_search_requests)
    return usage, estimated


def _variant(record: StreamRecord) -> dict[str, str] | None:
    """A price variant the provider reported (OpenAI's service tier: flex and priority cost apart)."""
    for key, value in record.attributes:
        if key == "openai.response.service_tier" and isinstance(value, str) and value not in ("default", "auto"):
            return {"service_tier": value}
    return None


def call_cost(record: StreamRecord, table: PriceTable) -> CallCost:
    """The call's price at `table`'s rates, for the model the response reported (else the request's)."""
    usage, estimated = usage_of(record)
    if usage.empty:
        return CallCost(0.0, False, billed=False)
    model = record.response_model or record.request.model
    return CallCost(table.cost(record.request.provider, model, usage, _variant(record)), estimated)


def cost_attributes(cost: CallCost, latest: bool) -> dict[str, AttributeValue]:
    """The span's cost attributes: none for an unpriced call; with `latest` (the conventions' opt-in)
    also the GenAI cost proposal's names."""
    if cost.usd is None:
        return {}
    attrs: dict[str, AttributeValue] = {A.COST_USD: cost.usd, A.COST_ESTIMATED: cost.estimated}
    if latest:
        attrs["gen_ai.usage.cost.amount"] = cost.usd
        attrs.update(GEN_AI_COST)
    return attrs
