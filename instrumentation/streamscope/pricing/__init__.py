"""Pricing: what a streamed call cost in US dollars, from the usage the provider reported.

`Usage` puts every provider's counts in one convention, `PriceTable` holds the shipped prices
(pydantic's `genai-prices`, loaded by `instrument()`) under the user's overrides, `cost()`
multiplies them, and `cost.call_cost()` prices a finished call's record (what was billed, what a
cut stream's output is estimated at). Pure: it records and exports nothing; it imports the core at most.
"""

from .cost import SHIPPED, cost
from .models import normalize_model
from .prices import (
    KEYS,
    PriceTable,
    Rate,
    Rates,
    check_prices,
    load_shipped,
    merge_prices,
    prices_from_toml,
    shipped_rates,
)
from .usage import Usage

__all__ = [
    "KEYS",
    "SHIPPED",
    "PriceTable",
    "Rate",
    "Rates",
    "Usage",
    "check_prices",
    "cost",
    "load_shipped",
    "merge_prices",
    "normalize_model",
    "prices_from_toml",
    "shipped_rates",
]
