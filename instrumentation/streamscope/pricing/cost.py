"""What one streamed call cost: its usage at its model's rates, computed once at the stream's end."""

from __future__ import annotations

from collections.abc import Mapping

from .prices import PriceTable
from .usage import Usage

__all__ = ["SHIPPED", "cost"]

SHIPPED = PriceTable()
"""The shipped prices alone, for a caller with no prices of its own."""


def cost(provider: str | None, model: str | None, usage: Usage, table: PriceTable | None = None,
         variant: Mapping[str, str] | None = None) -> float | None:
    """US dollars for `usage` of `model` as `provider` (`gen_ai.provider.name`) serves it, at
    `table`'s rates (the shipped ones by default); None when the model has no known price, never
    a made-up 0. `variant` picks a price variant the provider reported (`{"service_tier": "flex"}`,
    `{"speed": "fast"}`); the model is the one the response reported, else the request's."""
    return (table or SHIPPED).cost(provider, model, usage, variant)
