"""The price of each model: the shipped table (pydantic's `genai-prices`) under the user's overrides.

The shipped prices come from `genai-prices`, a maintained table of every provider's published
rates, with the tiers a hand-written table tends to miss (long-context rates, the 1-hour cache
write, web search per request, Bedrock's regional premium, service tiers, dated price changes).
It is loaded when streamscope is instrumented (`load_shipped`, from `instrument()`), not when it is
imported and never at a stream's end: alone it costs ~150 ms of imports (pydantic, httpx2), ~30 ms
once an SDK has loaded those, time an event loop must not lose while streams wait on it. A model's
rates are looked up once and kept as floats, so pricing a call is a few multiplications.

The user's prices (`instrument(prices=...)`, the file's `[prices."<glob>"]` tables) are flat US
dollars per million tokens by model glob; the longest matching glob wins and a key it leaves out
falls back to the shipped rate. A bad entry is one WARNING line naming it; that glob is ignored.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import logging
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from .models import cloud_id, maker_of, normalize_model, undated
from .usage import Usage

if TYPE_CHECKING:
    from genai_prices.types import ModelPrice, TieredPrices

__all__ = ["KEYS", "PriceTable", "Rate", "Rates", "check_prices", "merge_prices", "prices_from_toml"]

logger = logging.getLogger("streamscope")

KEYS = ("input", "output", "cache_write", "cache_write_1h", "cache_read")
"""The keys of a user's price entry, US dollars per million tokens."""
_KEYS_TEXT = "input, output, cache_write, cache_write_1h, cache_read (US dollars per million tokens)"

_LIBRARY_KEYS = {"input": "input_mtok", "output": "output_mtok", "cache_read": "cache_read_mtok",
                 "cache_write": "cache_write_mtok", "cache_write_1h": "cache_write_1h_mtok"}
_LIBRARY_PROVIDER = {"anthropic": "anthropic", "openai": "openai", "aws.bedrock": "aws",
                     "azure.ai.openai": "azure", "azure.ai.inference": "azure"}
"""`gen_ai.provider.name` → the library's provider: a cloud's own prices first (Bedrock's regional
endpoints cost 10% more than its global ones and the first-party API for the newer Claude models).
Not Vertex: its model ids do not tell a regional endpoint from the global one, whose prices are the
first-party API's, and the library's Google table matches Claude ids loosely (`claude-opus-4-1@...`
as Opus 4); a Vertex id is priced as its maker's id."""

Overrides = dict[str, dict[str, float]]
"""Checked user prices: glob → {key: US dollars per million tokens}."""


@dataclass(frozen=True, slots=True)
class Rate:
    """US dollars per million tokens; `tiers` (ascending) replace `base` for every token of the
    call once its input (cached included) exceeds their start, as the providers bill long context."""

    base: float
    tiers: tuple[tuple[int, float], ...] = ()

    def at(self, input_tokens: int) -> float:
        for start, price in reversed(self.tiers):
            if input_tokens > start:
                return price
        return self.base


@dataclass(frozen=True, slots=True)
class Rates:
    """One model's rates. A cache rate left out bills those tokens as the next coarser kind
    (1-hour write → write → input, read → input), as the library does."""

    input: Rate | None = None
    output: Rate | None = None
    cache_read: Rate | None = None
    cache_write: Rate | None = None
    cache_write_1h: Rate | None = None
    web_search: float | None = None
    """US dollars per search request."""
    source: str | None = None
    """Where the shipped rates came from (`anthropic:claude-sonnet-4-5`), for a reader checking them."""

    @property
    def complete(self) -> bool:
        return self.input is not None and self.output is not None

    def merged(self, override: Mapping[str, float]) -> Rates:
        """These rates with a user's flat ones over them (a key not in `override` stays)."""
        changes: dict[str, Any] = {key: Rate(float(value)) for key, value in override.items()}
        return dataclasses.replace(self, **changes)

    def cost(self, usage: Usage) -> float:
        """US dollars for `usage` (only for `complete` rates)."""
        assert self.input is not None and self.output is not None
        n = usage.input
        write = self.cache_write or self.input
        total = (usage.fresh_input * self.input.at(n) + usage.output * self.output.at(n)
                 + usage.cache_read * (self.cache_read or self.input).at(n)
                 + usage.cache_write_5m * write.at(n)
                 + usage.cache_write_1h * (self.cache_write_1h or write).at(n)) / 1_000_000
        if self.web_search is not None:
            total += usage.web_search_requests * self.web_search
        return total


# -- the user's prices ----------------------------------------------------------------------------


def _problems(entry: Any) -> Iterator[str]:
    if not isinstance(entry, Mapping):
        yield f"must be a table of prices, not {type(entry).__name__}"
        return
    for key, value in entry.items():
        if key not in KEYS:
            close = difflib.get_close_matches(str(key).lower(), KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            nested = " (quote a glob with dots: [prices.\"gpt-4.1*\"])" if isinstance(value, Mapping) else ""
            yield f"unknown key {key!r}{hint}{nested}"
        elif (isinstance(value, bool) or not isinstance(value, int | float | Decimal)
              or not math.isfinite(value) or value < 0):
            yield f"{key} = {value!r} is not a number of US dollars per million tokens >= 0"


def check_prices(config: object, toml: bool = False) -> Overrides:
    """The good entries of `instrument(prices=...)` (or of the file's `[prices]` table, `toml`):
    each bad one is one WARNING line naming its glob and what is wrong, and is left out."""
    where = "[prices]" if toml else "instrument(prices=...)"
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        logger.warning("streamscope: %s takes model globs, each with a table of prices (%s), not %s; "
                       "ignored, the shipped prices apply", where, _KEYS_TEXT, type(config).__name__)
        return {}
    good: Overrides = {}
    for glob, entry in config.items():
        label = f"[prices.{_quoted(glob)}]" if toml else f"prices[{glob!r}]"
        problems = ["a model glob must be a non-empty string"] if not isinstance(glob, str) or not glob \
            else list(_problems(entry))
        if problems:
            logger.warning("streamscope: %s: %s; the keys are %s; this glob is ignored",
                           label, "; ".join(problems), _KEYS_TEXT)
        else:
            good[glob] = {key: float(value) for key, value in entry.items()}
    return good


def prices_from_toml(section: object) -> Overrides:
    """The checked `[prices."<glob>"]` tables of a parsed config file (`section` is its `prices` value)."""
    return check_prices(section, toml=True)


def merge_prices(file: Mapping[str, Mapping[str, float]], api: Mapping[str, Mapping[str, float]]) -> Overrides:
    """`instrument(prices=...)` over the file's tables: the same glob's keys merged, the API's winning."""
    merged = {glob: dict(entry) for glob, entry in file.items()}
    for glob, entry in api.items():
        merged.setdefault(glob, {}).update(entry)
    return merged


def _quoted(name: object) -> str:
    text = str(name)
    return text if text.replace("_", "").replace("-", "").isalnum() else '"' + text.replace('"', '\\"') + '"'


# -- the shipped prices ---------------------------------------------------------------------------


def _rate(value: Decimal | TieredPrices | None) -> Rate | None:
    if value is None:
        return None
    if isinstance(value, Decimal):
        return Rate(float(value))
    return Rate(float(value.base), tuple((tier.start, float(tier.price)) for tier in value.tiers))


def _from_library(price: ModelPrice, source: str) -> Rates:
    found = {key: _rate(getattr(price, name, None)) for key, name in _LIBRARY_KEYS.items()}
    if found["cache_write"] is None:
        found["cache_write"] = _rate(getattr(price, "cache_write_5m_mtok", None))
    searches = getattr(price, "web_searches_kcount", None)
    web = float(searches) / 1000 if isinstance(searches, Decimal) else None
    return Rates(**found, web_search=web, source=source)


def _candidates(provider: str | None, model: str) -> list[tuple[str, str]]:
    """(library provider, model id) to try in order: the cloud's own id and prices, then the
    maker's id, then the maker's id without its date."""
    tries: list[tuple[str, str]] = []
    lib = _LIBRARY_PROVIDER.get(provider or "")
    if lib is not None:
        tries.append((lib, cloud_id(model)))
    norm = normalize_model(model)
    maker = maker_of(norm)
    if maker is not None:
        tries += [(maker, norm), (maker, undated(norm))]
    return list(dict.fromkeys(tries))


_import_failed = False


def _snapshot() -> Any:
    """The library's price data (the bundled snapshot, or the newer one `UpdatePrices` fetched),
    or None without the library (one warning, once)."""
    global _import_failed
    try:
        from genai_prices import data_snapshot
    except ImportError:
        if not _import_failed:
            _import_failed = True
            logger.warning("streamscope: genai-prices is not installed: calls are unpriced "
                           "(pip install genai-prices, or set instrument(prices=...))")
        return None
    return data_snapshot.get_snapshot()


def load_shipped() -> None:
    """Load the shipped table now (`instrument()` does), so that no stream's end pays for it; a
    missing library is one warning, here rather than at the first call. Never raises."""
    try:
        _snapshot()
    except Exception:
        logger.warning("streamscope: the shipped price table could not be loaded: calls are unpriced unless "
                       "instrument(prices=...) prices them", exc_info=False)


def shipped_rates(provider: str | None, model: str, variant: Mapping[str, str] | None = None,
                  day: date | None = None) -> Rates | None:
    """The library's rates for `model` on `day` (today by default), or None: a model it has no
    price for, or the library missing. `variant` selects a price variant (`{"service_tier": "flex"}`)."""
    snapshot = _snapshot()
    if snapshot is None:
        return None
    when = datetime.combine(day, datetime.min.time(), UTC) if day is not None else datetime.now(UTC)
    for lib, ref in _candidates(provider, model):
        try:
            _, info = snapshot.find_provider_model(ref, None, lib, None)
        except LookupError:
            continue
        found = _from_library(info.get_prices(when, dict(variant) if variant else None), f"{lib}:{info.id}")
        return _with_hour_writes(found) if lib in ("aws", "azure") else found
    return None


def _with_hour_writes(rates: Rates) -> Rates:
    """A cloud's Claude rates with the 1-hour cache write its table leaves out (the library's Bedrock
    table has none): Anthropic bills it at twice the input rate, tiers included, on every platform."""
    if rates.cache_write_1h is not None or rates.cache_write is None or rates.input is None \
            or "claude" not in (rates.source or ""):
        return rates
    doubled = Rate(2 * rates.input.base, tuple((start, 2 * price) for start, price in rates.input.tiers))
    return dataclasses.replace(rates, cache_write_1h=doubled)


# -- the table ------------------------------------------------------------------------------------


class PriceTable:
    """The user's prices over the shipped ones, resolved per (provider, model) once a day and kept."""

    def __init__(self, overrides: Mapping[str, Mapping[str, float]] | None = None, shipped: bool = True) -> None:
        """`overrides` already checked (`check_prices`); `shipped=False` prices only what they name."""
        self.overrides = sorted(((g, dict(e)) for g, e in (overrides or {}).items()), key=lambda item: -len(item[0]))
        self.shipped = shipped
        self._cache: dict[tuple[str | None, str, tuple[tuple[str, str], ...], date], Rates | None] = {}

    @classmethod
    def configure(cls, prices: object = None, file_prices: object = None) -> PriceTable:
        """From `instrument(prices=...)` and the file's parsed `[prices]` table (each checked, bad
        entries warned about and left out), the API's merged over the file's."""
        return cls(merge_prices(prices_from_toml(file_prices), check_prices(prices)))

    def override_for(self, model: str) -> tuple[str, dict[str, float]] | None:
        """The longest glob matching the model as given, its cloud id or its maker's id."""
        names = {model, cloud_id(model), normalize_model(model)}
        for glob, entry in self.overrides:
            if any(fnmatch.fnmatchcase(name, glob) for name in names):
                return glob, entry
        return None

    def rates(self, provider: str | None, model: str, variant: Mapping[str, str] | None = None) -> Rates | None:
        """`model`'s rates (None: no known price for its input and output)."""
        today = datetime.now(UTC).date()
        key = (provider, model, tuple(sorted(variant.items())) if variant else (), today)
        try:
            return self._cache[key]
        except KeyError:  # not yet, or the cache was just cleared by another thread
            pass
        found = shipped_rates(provider, model, variant, today) if self.shipped else None
        override = self.override_for(model)
        if override is not None:
            found = (found or Rates()).merged(override[1])
            found = dataclasses.replace(found, source=f"{found.source or 'prices'} + {override[0]!r}")
        if found is not None and not found.complete:
            found = None
        if len(self._cache) >= 4096:
            self._cache.clear()
        self._cache[key] = found
        return found

    def cost(self, provider: str | None, model: str | None, usage: Usage,
             variant: Mapping[str, str] | None = None) -> float | None:
        """US dollars for `usage` of `model`, or None: no model, or none with a known price (never 0)."""
        if not model:
            return None
        rates = self.rates(provider, model, variant)
        return None if rates is None else rates.cost(usage)
