"""`streamscope classify FILE`: label spans from an exported file and print the class table.

Exit 1 when a span's live label (`streamscope.class`) is not what `classify()` gives; exit 2 when
the file holds no streamscope span (the message names the formats read, see `streamscope.tools.spanfile`).
Spans whose attributes do not say how the stream ended (no finish reasons, no `error.type`: a span
cut by a crash, an export that lost attributes) are counted as `upstream_error`, never verified,
and one line says how many and what they lack.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from streamscope.tools.spanfile import FORMATS, SpanFileError, read_spans

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
    table = Table(title=f"{len(spans)} streamed calls in {escape(str(args.file))}")
    for column in ("class", "requests", "share", "partial"):
        table.add_column(column, justify="left" if column == "class" else "right")
    for label in LABELS:
        if counts[label]:
            table.add_row(label, str(counts[label]), f"{counts[label] / len(spans):.1%}", str(partial[label]))
    console.print(table)
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
