"""`streamscope classify FILE`: label spans from an exported file and print the class table.

Exit 1 when a span's live label (`streamscope.class`) is not what `classify()` gives; exit 2 when
the file holds no streamscope span (the message names the formats read, see `streamscope.tools.spanfile`).
Spans whose attributes do not say how the stream ended (no finish reasons, no `error.type`: a span
cut by a crash, an export that lost attributes) are counted as `upstream_error`, never verified,
and one line says how many and what they lack.

Spend per class is the sum of the spans' `streamscope.cost.usd` ("-" where no span of the class
carries one: a file written before streamscope priced calls), with how many of those figures are
estimates; the spend line below the table says what share of it went to classes that bought no
answer (`streamscope.pricing.cost.WASTE`) and how many calls had usage but no price.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from streamscope.tools.spanfile import FORMATS, SpanFileError, cost_estimated, read_spans, span_cost, unpriced
from streamscope.tools.spend import share, usd

from . import EXIT_FINDING, EXIT_OK, UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help=f"the span file: {FORMATS}. Spans without a streamscope.* attribute "
                                     "(other instrumentations') are skipped and counted")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from streamscope.core.classifier import LABELS, classify

    try:
        found = read_spans(args.file)
    except SpanFileError as error:
        raise UsageError(str(error)) from None
    spans = found.spans
    labels = [classify(attrs) for attrs in spans]
    counts = Counter(labels)
    disagree = sum(1 for a, label in zip(spans, labels) if "streamscope.class" in a and a["streamscope.class"] != label)
    partial = Counter(label for a, label in zip(spans, labels) if a.get("streamscope.partial") is True)
    console = Console()
    spend = Spend.of(spans, labels)
    table = Table(title=f"{len(spans)} streamed calls in {escape(str(args.file))}")
    for column in ("class", "requests", "share", "partial", "spend", "estimated"):
        table.add_column(column, justify="left" if column == "class" else "right")
    for label in LABELS:
        if counts[label]:
            priced = spend.priced[label]
            table.add_row(label, str(counts[label]), f"{counts[label] / len(spans):.1%}", str(partial[label]),
                          usd(spend.usd[label]) if priced else "-", str(spend.estimated[label]) if priced else "-")
    console.print(table)
    console.print(spend.line(), markup=False, highlight=False, soft_wrap=True)
    if found.skipped:
        console.print(f"skipped {found.skipped} span(s) without a streamscope.* attribute (other instrumentations')",
                      highlight=False)
    note = lacking_note(str(args.file), spans)
    if note:
        console.print(note, markup=False, highlight=False, soft_wrap=True)  # one line, however long
    if disagree:
        console.print(f"[red]{disagree} span(s) carry a different live label than classify() gives[/]")
        return EXIT_FINDING
    return EXIT_OK


def lacking_note(path: str, spans: Sequence[Mapping[str, Any]]) -> str | None:
    """One line for a file whose spans lack the attributes a class needs, naming what they lack
    (the most frequent first); None when every span says how its stream ended."""
    from streamscope.core.classifier import missing

    what: Counter[str] = Counter()
    count = 0
    for attrs in spans:
        lack = missing(attrs)
        if lack:
            count += 1
            what.update(lack)
    if not count:
        return None
    names = [name for name, _ in what.most_common(3)] + (["..."] if len(what) > 3 else [])
    return (f"{path}: {count} of {len(spans)} span(s) lack the attributes a class needs ({'; '.join(names)}); "
            "they are counted as upstream_error, not verified")


class Spend:
    """What the file's calls cost by class: the sum of their `streamscope.cost.usd`, how many
    carry one and how many of those are estimates, and the calls with usage but no cost."""

    def __init__(self) -> None:
        self.usd: defaultdict[str, float] = defaultdict(float)
        self.priced: Counter[str] = Counter()
        self.estimated: Counter[str] = Counter()
        self.unpriced = 0
        self.calls = 0

    @classmethod
    def of(cls, spans: Sequence[Mapping[str, Any]], labels: Sequence[str]) -> Spend:
        found = cls()
        for attrs, label in zip(spans, labels):
            found.calls += 1
            cost = span_cost(attrs)
            if cost is None:
                found.unpriced += unpriced(attrs)
                continue
            found.usd[label] += cost
            found.priced[label] += 1
            found.estimated[label] += cost_estimated(attrs)
        return found

    @property
    def total(self) -> float:
        return sum(self.usd.values())

    def wasted(self) -> tuple[float, list[str]]:
        """Spend on classes that bought no answer, and those of them with spend, in table order."""
        from streamscope.core.classifier import LABELS
        from streamscope.pricing.cost import WASTE

        classes = [label for label in LABELS if label in WASTE and self.usd[label] > 0]
        return sum(self.usd[label] for label in classes), classes

    def line(self) -> str:
        """The total: spend, how much of it is estimated, the wasted share, the unpriced calls."""
        priced = sum(self.priced.values())
        unpriced = f"{self.unpriced} call(s) with usage (gen_ai.usage.input_tokens) but no streamscope.cost.usd"
        if not priced:
            return (f"spend: - (none of the {self.calls} span(s) carries streamscope.cost.usd: written by a "
                    f"streamscope that did not price calls, or of models with no known price); {unpriced}")
        wasted, classes = self.wasted()
        of = f"{share(wasted, self.total)} of spend" if self.total > 0 else "no spend"
        on = f" on {', '.join(classes)}, calls that bought no answer" if classes else ""
        return (f"spend: {usd(self.total)} on {priced} priced call(s), {sum(self.estimated.values())} of them "
                f"estimated; wasted: {usd(wasted)} ({of}){on}; unpriced: {unpriced}")
