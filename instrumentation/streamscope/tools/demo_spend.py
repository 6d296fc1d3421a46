"""What the demo's requests cost, from their spans' `streamscope.cost.usd`: by class for the triage
table, per request for the tour, and the run's spend, waste and unpriced requests for its summary."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

from streamscope.core.classifier import LABELS
from streamscope.pricing.cost import WASTE

from .spanfile import cost_estimated, span_cost, unpriced
from .spend import SIMULATED_NOTE, share, usd

if TYPE_CHECKING:
    from . import demo


def cost_cents(attrs: Any) -> str:
    """The call's cost in US cents, two significant digits (a narrow column); "-" when unpriced."""
    cost = span_cost(attrs)
    if cost is None:
        return "-"
    cents = cost * 100
    text = "0" if cents == 0 else f"{cents:.0f}" if cents >= 10 else f"{cents:.1f}" if cents >= 1 else f"{cents:.2f}"
    return ("~" if cost_estimated(attrs) else "") + text


class Spent:
    """What the run's requests cost, from their spans' `streamscope.cost.usd`, by class."""

    def __init__(self, spans: list[tuple[str, Any]]) -> None:
        self.usd: defaultdict[str, float] = defaultdict(float)
        self.priced: Counter[str] = Counter()
        self.unpriced: Counter[str] = Counter()
        """Requests with usage but no cost, by the model that answered them."""
        self.requests = len(spans)
        for label, attrs in spans:
            cost = span_cost(attrs)
            if cost is not None:
                self.usd[label] += cost
                self.priced[label] += 1
            elif unpriced(attrs):
                self.unpriced[str(attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model"))] += 1

    @classmethod
    def of(cls, run: demo.Run) -> Spent:
        return cls([(str((s.attributes or {}).get("streamscope.class")), s.attributes or {}) for _, s in run.results])

    @property
    def total(self) -> float:
        return sum(self.usd.values())

    def by_class(self, label: str) -> str:
        return usd(self.usd[label]) if self.priced[label] else "-"

    def lines(self) -> list[str]:
        """Total spend and per complete answer, which rates; the wasted share; the unpriced requests."""
        answers = self.priced["complete"]
        per_answer = f", {usd(self.total / answers)} per complete answer" if answers else ""
        lines = [f"Spend: {usd(self.total)} on {sum(self.priced.values())} of {self.requests} requests{per_answer}; "
                 f"{SIMULATED_NOTE}."]
        waste = [label for label in LABELS if label in WASTE and self.usd[label] > 0]
        wasted = sum(self.usd[label] for label in waste)
        on = f": {', '.join(waste)}" if waste else ""
        lines.append(f"Wasted: {usd(wasted)} ({share(wasted, self.total)} of spend) on requests that bought no "
                     f"answer{on}.")
        if self.unpriced:
            count = sum(self.unpriced.values())
            models = ", ".join(sorted(self.unpriced))
            lines.append(f"Unpriced: {count} request{'s' if count > 1 else ''} answered by {models}, a model with no "
                         f"price given: not in the spend; the dashboards' Unpriced calls panel counts "
                         f"{'them' if count > 1 else 'it'}.")
        return lines
