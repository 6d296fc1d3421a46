"""Money in the tools: the rates simulated models are priced at, a model's rates from the price
table, and US dollars as the tables print them.

The simulator's models (`claude-sim-...`) have no published price, so every tool that runs or
models them prices them at Claude Sonnet 4.5's rates (`SONNET_45`) and says so (`SIMULATED_NOTE`).
`--model` prices at a real model's rates from the shipped table instead (`Pricing.of`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from streamscope.pricing import PriceTable, Rates, Usage, cost

SONNET_45: dict[str, float] = {"input": 3.0, "output": 15.0, "cache_write": 3.75, "cache_write_1h": 6.0,
                               "cache_read": 0.3}
"""Claude Sonnet 4.5's published rates, US dollars per million tokens (prompts up to 200k tokens)."""
SIMULATED_MODEL = "claude-sim-lab"
"""The model `lab` and `check` price when no `--model` is given: a simulated one."""
SIMULATED_PRICES: dict[str, dict[str, float]] = {"claude-sim-*": SONNET_45}
"""`instrument(prices=...)` for every simulated Claude model, at Claude Sonnet 4.5's rates."""
SIMULATED_NOTE = "simulated models priced at Claude Sonnet 4.5's rates ($3 input, $15 output per million tokens)"
"""What every tool that prices a simulated model says about it."""


def usd(value: float | None) -> str:
    """US dollars for a table: three significant digits below a dollar, cents up to a hundred, whole
    dollars from there; "-" for no figure (never a made-up 0)."""
    if value is None or not math.isfinite(value):
        return "-"
    if value == 0:
        return "$0"
    if value >= 100:
        return f"${value:,.0f}"
    if value >= 1:
        return f"${value:,.2f}"
    return f"${value:.{max(2, 2 - math.floor(math.log10(value)))}f}"


def share(part: float, whole: float) -> str:
    """`part / whole` as a percentage, "-" when there is no whole."""
    return f"{part / whole:.1%}" if whole > 0 else "-"


class UnknownModel(ValueError):
    """A `--model` the price table has no price for (the message says what to give instead)."""


@dataclass(frozen=True)
class Pricing:
    """A model and the table that prices it: what a modelled call's tokens cost."""

    model: str = SIMULATED_MODEL
    table: PriceTable = field(default_factory=lambda: PriceTable(SIMULATED_PRICES, shipped=False),
                              compare=False, repr=False)
    rates: Rates | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, model: str | None) -> Pricing:
        """The simulated model at Sonnet 4.5's rates (None), or `model` at the shipped rates
        (UnknownModel when the table has no price for it)."""
        if model is None:
            return cls()
        name = model.strip()
        table = PriceTable()
        rates = table.rates(None, name) if name else None
        if rates is None:
            raise UnknownModel(f"no known price for {model!r}; give a model id the price table knows, such as "
                               "claude-sonnet-4-5, claude-opus-4-1 or gpt-4.1, or leave --model out for a "
                               "simulated model at Claude Sonnet 4.5's rates")
        return cls(name, table, rates)

    @property
    def simulated(self) -> bool:
        return self.model == SIMULATED_MODEL

    def cost(self, usage: Usage) -> float:
        """US dollars for `usage` of this model (0.0 for no usage: nothing was billed)."""
        if usage.empty:
            return 0.0
        found = cost(None, self.model, usage, self.table)
        if found is None:  # pragma: no cover - `of` checked the model has a price
            raise UnknownModel(f"no known price for {self.model!r}")
        return found

    def per_million(self) -> tuple[float, float]:
        """Input and output US dollars per million tokens (the base rates, below any long-context tier)."""
        rates = self.rates or self.table.rates(None, self.model)
        assert rates is not None and rates.input is not None and rates.output is not None
        return rates.input.base, rates.output.base

    def note(self) -> str:
        """Which rates the figures are at, for the output ("Priced as ...")."""
        if self.simulated:
            return "a simulated model at Claude Sonnet 4.5's rates ($3 input, $15 output per million tokens)"
        given, out = self.per_million()
        return f"{self.model} at its rates in the price table (${given:g} input, ${out:g} output per million tokens)"

    def to_json(self) -> dict[str, object]:
        given, out = self.per_million()
        return {"model": self.model, "simulated": self.simulated, "input_per_million_usd": given,
                "output_per_million_usd": out}


@dataclass(frozen=True)
class PlanCost:
    """What `streamscope check`'s plan costs per request that uses its whole thinking budget, in US
    dollars at `pricing`'s rates: every attempt pays its input again, and an attempt cut at the end
    of its allowance pays the output it generated, for no answer."""

    pricing: Pricing
    input_tokens: int
    attempts: int
    fits: bool
    finished_output: int
    """Output tokens of an attempt that finishes: the whole thinking budget and the answer."""
    cut_output: int
    """Output tokens an attempt generates before its allowance ends (what fits, at most what it needs)."""

    @classmethod
    def of(cls, pricing: Pricing, input_tokens: int, attempts: int, fits: bool, needed_tokens: int,
           whole_tokens: int) -> PlanCost:
        return cls(pricing, input_tokens, attempts, fits, needed_tokens, min(whole_tokens, needed_tokens))

    @property
    def finished(self) -> float:
        """An attempt that finishes: its input, the thinking budget and the answer."""
        return self.pricing.cost(Usage(input=self.input_tokens, output=self.finished_output))

    @property
    def cut(self) -> float:
        """An attempt cut at the end of its allowance: its input and the output so far, no answer."""
        return self.pricing.cost(Usage(input=self.input_tokens, output=self.cut_output))

    @property
    def input_only(self) -> float:
        """An attempt cut before its first output (a stall before the first token): its input alone."""
        return self.pricing.cost(Usage(input=self.input_tokens))

    @property
    def wasted(self) -> float:
        """The worst case's waste: every attempt cut (no answer), or every retry before the last one."""
        return (self.attempts if not self.fits else self.attempts - 1) * self.cut

    @property
    def worst(self) -> float:
        """The worst case's spend: the waste, plus the answer when the plan fits."""
        return self.wasted + (self.finished if self.fits else 0.0)

    def sentence(self) -> str:
        """The cost of the plan as one plain sentence."""
        tokens = f"{self.input_tokens:,} input + {self.cut_output:,} output tokens"
        if not self.fits:
            each = f"on each of its {self.attempts} attempts ({tokens} each)" if self.attempts > 1 else f"({tokens})"
            return (f"Every request that uses its whole thinking budget is cut {each}: it wastes {usd(self.wasted)} "
                    "and buys no answer.")
        answer = f"An answer on the first attempt costs {usd(self.finished)}"
        if self.attempts == 1:
            return f"{answer}; an attempt cut before it finishes wastes up to {usd(self.cut)} ({tokens})."
        return (f"{answer}; each retry before it adds up to {usd(self.cut)} ({tokens} of an attempt cut at its "
                f"allowance), so an answer on the last attempt costs up to {usd(self.worst)}, of which "
                f"{usd(self.wasted)} bought nothing.")

    def to_json(self) -> dict[str, object]:
        return {"pricing": self.pricing.to_json(), "input_tokens": self.input_tokens,
                "finished_attempt_usd": self.finished, "cut_attempt_usd": self.cut,
                "input_only_attempt_usd": self.input_only, "worst_case_usd": self.worst,
                "worst_case_wasted_usd": self.wasted, "sentence": self.sentence()}
