"""`streamscope demo`: the main job on the embedded simulated Anthropic endpoint."""

from __future__ import annotations

import argparse
import sys

from rich.console import Console
from rich.table import Table

from .. import demo


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="multiply every scripted delay (and so the run time) by this factor")


def _secs(value: object) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) else "-"


def run(args: argparse.Namespace) -> int:
    console = Console() if sys.stdout.isatty() else Console(width=160)
    console.print("[bold]streamscope demo[/]: one scripted request per class, through the real anthropic SDK "
                  "against a local simulated endpoint")
    results = demo.run(time_scale=args.time_scale)
    table = Table(title="one line per request (times in seconds from the request)")
    for column in ("scenario", "route", "class", "fired", "headers", "1st content", "thinking",
                   "1st text", "max gap", "pings", "end"):
        table.add_column(column, no_wrap=True)
    mismatches = 0
    for request, span in results:
        a = span.attributes or {}
        label = str(a.get("streamscope.class"))
        mismatches += label != request.expect
        thinking = "-"
        if "streamscope.thinking.start" in a:
            thinking = f"{_secs(a.get('streamscope.thinking.start'))}→{_secs(a.get('streamscope.thinking.end'))}"
        table.add_row(
            request.scenario, request.route or "", f"[{'green' if label == 'complete' else 'yellow'}]{label}[/]",
            str(a.get("streamscope.budget.fired", "")), _secs(a.get("streamscope.time_to_headers")),
            _secs(a.get("streamscope.time_to_first_content")), thinking, _secs(a.get("streamscope.time_to_first_text")),
            _secs(a.get("streamscope.max_gap")), str(a.get("streamscope.pings", 0)),
            _secs(((span.end_time or 0) - (span.start_time or 0)) / 1e9),
        )
    console.print(table)
    if len(results) != len(demo.FIRST_DEMO) or mismatches:
        console.print(f"[red]{mismatches} request(s) did not get the class their script was written for[/]")
        return 1
    console.print(f"{len(results)} requests, {len(results)} spans, every class as scripted.")
    return 0
