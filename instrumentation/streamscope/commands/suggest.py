"""`streamscope suggest`: propose per-model and per-route budgets from observed distributions."""

from __future__ import annotations

import argparse
import sys

from ..promql import from_prometheus
from ..spanfile import read_span_attributes
from ..suggest import from_spans, to_toml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prometheus", metavar="URL", help="a Prometheus server's base URL (its HTTP API)")
    source.add_argument("--spans", metavar="FILE", help="a span file (OTLP JSON or JSON lines of attributes)")
    parser.add_argument("--window", default="1h", help="the range to read from Prometheus (default 1h)")
    parser.add_argument("--min-samples", type=int, default=20, help="no number for groups with fewer samples")
    parser.add_argument("--deadline", type=float, help="the caller's own deadline in seconds, if it has one")
    parser.add_argument("--output", "-o", help="write the TOML here (default: stdout)")


def run(args: argparse.Namespace) -> int:
    if args.prometheus:
        observations, source = from_prometheus(args.prometheus, args.window), f"{args.prometheus} over {args.window}"
    else:
        observations, source = from_spans(read_span_attributes(args.spans)), args.spans
    text = to_toml(observations, min_samples=args.min_samples, deadline=args.deadline, source=source)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
