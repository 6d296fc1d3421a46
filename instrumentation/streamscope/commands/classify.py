"""`streamscope classify FILE`: label spans from an exported file and print the class table."""

from __future__ import annotations

import argparse
from collections import Counter

from rich.console import Console
from rich.table import Table

from ..classify import LABELS, classify
from ..spanfile import read_span_attributes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="OTLP JSON (one export request per line or per file) or JSON lines of attributes")


def run(args: argparse.Namespace) -> int:
    console = Console()
    spans = read_span_attributes(args.file)
    labels = Counter(classify(attrs) for attrs in spans)
    disagree = sum(1 for a in spans if "streamscope.class" in a and a["streamscope.class"] != classify(a))
    partial = Counter(classify(a) for a in spans if a.get("streamscope.partial") is True)
    table = Table(title=f"{len(spans)} streamed calls in {args.file}")
    for column in ("class", "requests", "share", "partial"):
        table.add_column(column, justify="left" if column == "class" else "right")
    for label in LABELS:
        if labels[label]:
            table.add_row(label, str(labels[label]), f"{labels[label] / len(spans):.1%}", str(partial[label]))
    console.print(table)
    if disagree:
        console.print(f"[red]{disagree} span(s) carry a different live label than classify() gives[/]")
        return 1
    return 0
