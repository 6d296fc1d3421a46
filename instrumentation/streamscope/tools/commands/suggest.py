"""`streamscope suggest`: propose per-model and per-route budgets from observed distributions.

Every input is checked before any query is sent: the URL (`localhost:9090` means
`http://localhost:9090`), the window (a Prometheus duration), the span file, the output path.
A server that cannot be reached or is not Prometheus is a usage error (exit 2), named with its URL.
"""

from __future__ import annotations

import argparse
import sys

from streamscope.tools.cli import number, output_file
from streamscope.tools.spanfile import SpanFileError, read_spans

from . import EXIT_OK, UsageError, add_observation_options, prometheus_observations


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_observation_options(
        parser.add_mutually_exclusive_group(required=True), parser,
        prometheus="a Prometheus server's base URL (its HTTP API), e.g. http://localhost:9090; without a scheme, "
                   "http:// is assumed",
        spans="a span file, read as `streamscope classify` reads it (OTLP JSON, JSON lines of span attributes, or "
              "the console exporter's output)",
        window="the range to read from Prometheus, a Prometheus duration (30m, 1h, 1h30m, 7d)")
    parser.add_argument("--min-samples", type=number("whole number of samples", low=1, high=1e9, kind=int),
                        default=20, metavar="N", help="groups with fewer samples get their evidence but no number")
    parser.add_argument("--deadline", type=number("number of seconds", strict=True), metavar="S",
                        help="the caller's own deadline in seconds, if it has one (none by default)")
    parser.add_argument("--output", "-o", type=output_file, metavar="FILE",
                        help="write the TOML here (default: stdout)")


def run(args: argparse.Namespace) -> int:
    from streamscope.tools.suggest import from_spans, to_toml

    if args.prometheus is not None:
        observations, url = prometheus_observations(args.prometheus, args.window)
        source = f"{url} over {args.window}"
    else:
        try:
            observations, source = from_spans(read_spans(args.spans).spans), args.spans
        except SpanFileError as error:
            raise UsageError(str(error)) from None
    text = to_toml(observations, min_samples=args.min_samples, deadline=args.deadline, source=source)
    if args.output:
        try:
            with open(args.output, "w") as f:
                f.write(text)
        except OSError as error:
            raise UsageError(f"cannot write {args.output}: {error.strerror or error}; "
                             "give a file in an existing, writable directory") from None
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return EXIT_OK
