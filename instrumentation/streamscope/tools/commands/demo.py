"""`streamscope demo`: the main job on the embedded simulated Anthropic endpoint.

A mixed workload (long answers, thinking and stalls, plus every failure streamscope tells apart)
goes through the real `anthropic` SDK with streamscope and budgets on, in scaled time; `/metrics`
is served while it runs; it ends with the triage table an on-call engineer would want, and a
self-check: every request was scripted for one class, and must get it. A page on a port of its own
relays answers to a browser with `streamscope.serve.relay()`; the workload reads it too. Every
call is priced (the simulated models at Claude Sonnet 4.5's rates): the tables show what each
class cost, and a summary what the run spent and how much of it bought no answer.

Imports beyond the standard library happen in `run`, so `streamscope --help` stays fast.
"""

from __future__ import annotations

import argparse
import errno
import logging
import math
import socket
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from streamscope.tools.cli import port as tcp_port

if TYPE_CHECKING:
    from rich.console import Console

    from streamscope.tools import demo

DEFAULT_PORT = 9464
"""OpenTelemetry's Prometheus exporter's usual port."""
DEFAULT_PAGE_PORT = 9465
"""The demo page's port: the one after /metrics."""
WIDTH = 100
"""Columns the output fits in."""

CALLERS = ("refused", "paused", "cancelled")
"""Classes that are no failure of the provider or of the budgets: the caller's (or the prompt's) to handle."""
COLOURS = {"complete": "green", "paused": "cyan"}
"""A class's colour in the per-request table; every other class is yellow (a failure)."""
PHASES = [
    ("time to headers", "streamscope.time_to_headers"),
    ("time to first chunk", "gen_ai.response.time_to_first_chunk"),
    ("time to first content", "streamscope.time_to_first_content"),
    ("thinking", None),
    ("largest gap", "streamscope.max_gap"),
    ("server tools", "streamscope.server_tool.duration"),
    ("total", "duration"),
]


def _count(least: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {least}, got {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {least}, got {text!r}")
        return value
    return parse


def _scale(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (0 < value <= 10):  # also refuses nan and inf
        raise argparse.ArgumentTypeError(f"expected real seconds per model second, > 0 and <= 10 "
                                         f"(0.05 makes a 110 s answer take 5.5 s), got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=_count(1), default=150, metavar="N", help="requests in the workload")
    parser.add_argument("--seed", type=int, default=7, help="the workload's random seed")
    parser.add_argument("--time-scale", type=_scale, default=0.05, metavar="S",
                        help="real seconds per model second (0.05: a 110 s answer takes 5.5 s); a larger "
                             "scale gives every script more real time on a busy machine")
    parser.add_argument("--concurrency", type=_count(1), default=16, metavar="N", help="requests in flight at once")
    parser.add_argument("--port", type=tcp_port, default=DEFAULT_PORT,
                        help="serve /metrics on this port of 127.0.0.1 (0: any free port; "
                             f"if {DEFAULT_PORT} is taken, another is picked)")
    parser.add_argument("--page-port", type=tcp_port, default=DEFAULT_PAGE_PORT, metavar="PORT",
                        help="serve the demo page (answers relayed to a browser) on this port of 127.0.0.1 "
                             f"(0: any free port; if {DEFAULT_PAGE_PORT} is taken, another is picked)")
    parser.add_argument("--serve", action="store_true",
                        help="keep serving /metrics and the demo page after the run, until Ctrl-C")
    parser.add_argument("--otlp", action="store_true",
                        help="also send spans and metrics over OTLP/HTTP (configured by the OTEL_* variables)")
    parser.add_argument("--tour", action="store_true", help="one request of every kind, one line each")


def _value(span: Any, key: str | None) -> float | None:
    a = span.attributes or {}
    if key is None:
        start, end = a.get("streamscope.thinking.start"), a.get("streamscope.thinking.end")
        return end - start if isinstance(start, float) and isinstance(end, float) else None
    if key == "duration":
        return ((span.end_time or 0) - (span.start_time or 0)) / 1e9
    value = a.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def _f(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.1f}" if seconds < 100 else f"{seconds:.0f}"


def _model(name: str) -> str:
    """A model's column heading: the simulator's models differ only after `claude-sim-`."""
    return name.removeprefix("claude-sim-")


def triage(console: Console, run: demo.Run) -> None:
    from rich import box
    from rich.markup import escape
    from rich.table import Table

    from streamscope.core.classifier import LABELS
    from streamscope.tools.advice import advice_for
    from streamscope.tools.demo_spend import Spent
    from streamscope.tools.spend import usd
    from streamscope.tools.suggest import quantile
    from streamscope.tools.workload import expected_mix

    spans = [span for _, span in run.results]
    labels = [str((s.attributes or {}).get("streamscope.class")) for s in spans]
    models = sorted({str((s.attributes or {}).get("gen_ai.request.model")) for s in spans})
    designed = expected_mix([request for request, _ in run.results])

    by_class = Table(title="requests per class and model (claude-sim-…)", box=box.SIMPLE_HEAD)
    by_class.add_column("class")
    for model in models:
        by_class.add_column(_model(model), justify="right")
    for column in ("total", "designed", "partial", "spend"):
        by_class.add_column(column, justify="right")
    counts = Counter((label, str((s.attributes or {}).get("gen_ai.request.model"))) for label, s in zip(labels, spans))
    partial = Counter(label for label, s in zip(labels, spans) if (s.attributes or {}).get("streamscope.partial"))
    spent = Spent.of(run)
    for label in LABELS:
        total = sum(counts[(label, m)] for m in models)
        if total or designed.get(label):
            by_class.add_row(label, *(str(counts[(label, m)] or "") for m in models), str(total),
                             str(designed.get(label, 0)), str(partial[label] or ""), spent.by_class(label))
    by_class.add_row("[bold]all[/]", *(str(sum(counts[(lab, m)] for lab in LABELS)) for m in models),
                     str(len(spans)), str(sum(designed.values())), str(sum(partial.values())), usd(spent.total))
    console.print(by_class)

    firings = Counter(((s.attributes or {}).get("streamscope.budget.fired"),
                       str((s.attributes or {}).get("gen_ai.request.model"))) for s in spans)
    fired = Table(title="budget firings", box=box.SIMPLE_HEAD)
    fired.add_column("budget")
    for model in models:
        fired.add_column(_model(model), justify="right")
    for budget in ("first_token", "idle", "deadline", "read_timeout"):
        if any(firings[(budget, m)] for m in models):
            fired.add_row(budget, *(str(firings[(budget, m)] or "") for m in models))
    console.print(fired)

    phases = Table(title=f"phase percentiles, model seconds (measured ÷ {run.scale:g})", box=box.SIMPLE_HEAD)
    for column in ("model", "phase", "p50", "p95", "p99"):
        phases.add_column(column, justify="left" if column in ("model", "phase") else "right")
    for model in models:
        for row, (name, key) in enumerate(PHASES):
            values = sorted(v / run.scale for s in spans
                            if (s.attributes or {}).get("gen_ai.request.model") == model
                            and (v := _value(s, key)) is not None)
            cells = [_f(quantile(values, q)) if values else "-" for q in (0.5, 0.95, 0.99)]
            phases.add_row(_model(model) if row == 0 else "", name, *cells, end_section=row == len(PHASES) - 1)
    console.print(phases)

    # Refusals, paused turns and callers giving up are not the on-call engineer's to fix: look at them last.
    failing = Counter(label for label in labels if label not in ("complete", *CALLERS)) or \
        Counter(label for label in labels if label != "complete")
    if failing:
        worst, n = failing.most_common(1)[0]
        tip = advice_for(worst, (s.attributes or {} for s, label in zip(spans, labels) if label == worst))
        console.print(f"[bold]Look at first:[/] {worst} ({n} of {len(spans)}): {escape(tip)}.")


def per_request(console: Console, run: demo.Run) -> None:
    from rich import box
    from rich.table import Table

    from streamscope.tools.demo_spend import cost_cents

    table = Table(title=f"one line per request (model seconds: measured ÷ {run.scale:g})", box=box.SIMPLE_HEAD,
                  padding=(0, 1), pad_edge=False)
    table.add_column("kind", ratio=1)
    table.add_column("class", no_wrap=True)
    for column in ("content", "thinking", "text", "gap", "pings", "end", "cost ¢"):
        table.add_column(column, justify="right", no_wrap=True)
    for request, span in run.results:
        a = span.attributes or {}
        label = str(a.get("streamscope.class"))
        scaled = {k: (v / run.scale if isinstance(v, float) else None) for k, v in a.items()}
        thinking = "-"
        if scaled.get("streamscope.thinking.start") is not None:
            thinking = f"{_f(scaled['streamscope.thinking.start'])}→{_f(scaled.get('streamscope.thinking.end'))}"
        table.add_row(request.kind, f"[{COLOURS.get(label, 'yellow')}]{label}[/]",
                      _f(scaled.get("streamscope.time_to_first_content")),
                      thinking, _f(scaled.get("streamscope.time_to_first_text")), _f(scaled.get("streamscope.max_gap")),
                      str(a.get("streamscope.pings", 0)), _f((_value(span, "duration") or 0) / run.scale),
                      cost_cents(a))
    console.print(table)
    console.print("content, text: time to the first content and the first text; gap: the largest silence "
                  "after the first content; end: the whole call; cost: US cents, ~ estimated (cut before the "
                  "final usage), - unpriced", style="dim")


def self_check(console: Console, run: demo.Run, requests: list[Any]) -> bool:
    """Say what was checked and whether it held: one span per request, each with its designed class."""
    from streamscope.tools.workload import margin

    least = min((margin(r) for r in requests), default=math.inf)
    clear = "" if math.isinf(least) else (
        f"; every script stays at least {least:.0f} model seconds ({least * run.scale:.2f} s at this time scale) "
        "clear of the budgets that decide its class")
    console.print(f"Self-check: each of the {len(requests)} requests follows a script written for one class{clear}.")
    wrong = [(r, s) for r, s in run.results if (s.attributes or {}).get("streamscope.class") != r.expect]
    if not wrong and not run.missing:
        console.print("[green]Passed:[/] every request produced one span, and every span carries the class "
                      "its script was written for.")
        return True
    if wrong:
        console.print(f"[red]Failed:[/] {len(wrong)} of {len(requests)} requests got another class than their "
                      "script was written for:")
        for request, span in wrong[:10]:
            a = span.attributes or {}
            fired = a.get("streamscope.budget.fired")
            why = f" ({fired} budget fired)" if fired else ""
            console.print(f"  request {request.number} ({request.kind}): written for {request.expect}, "
                          f"got {a.get('streamscope.class')}{why}")
        if len(wrong) > 10:
            console.print(f"  and {len(wrong) - 10} more")
    if run.missing:
        names = ", ".join(f"{r.number} ({r.kind})" for r in run.missing[:5])
        more = f" and {len(run.missing) - 5} more" if len(run.missing) > 5 else ""
        console.print(f"[red]Failed:[/] {len(run.missing)} requests reached the simulated endpoint but no span "
                      f"for them was exported: {names}{more}")
    console.print(f"On a machine this busy, a larger time scale gives every script more real time: "
                  f"streamscope demo --time-scale {min(run.scale * 2, 10):g}")
    return False


def _free(port: int) -> bool:
    """Whether 127.0.0.1:`port` can be bound now (where the metrics page will listen)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as error:
            if error.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


class _OneLine(logging.Formatter):
    """Log records as one line each, without tracebacks: the demo's terminal shows results, not stacks."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage().splitlines()[0] if record.getMessage() else ""
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            message += f" ({type(error).__name__}: {error})" if str(error) else f" ({type(error).__name__})"
        named = message if message.startswith("streamscope") else f"{record.name}: {message}"
        return named[:WIDTH * 2]


def _quiet_logging() -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    handler.setLevel(logging.WARNING)
    # The relay's record of each stream it relayed (a warning when it failed, which the demo's are
    # meant to): the page's and the summary line show them.
    # And the unpriced model's line: the spend summary says it in the demo's words.
    handler.addFilter(lambda record: record.name not in ("streamscope.streams", "streamscope.prices"))
    logging.getLogger().addHandler(handler)
    return handler


def run(args: argparse.Namespace) -> int:
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from streamscope.tools import demo
        from streamscope.tools.workload import tour, workload
    except ModuleNotFoundError as missing:
        from . import UsageError

        raise UsageError(f"the demo needs {missing.name}, which is not installed; install the demo extra: "
                         "pip install 'streamscope[demo]' (or run `make demo` in a checkout)") from None

    tty = sys.stdout.isatty()
    console = Console(width=min(Console().width, WIDTH)) if tty else Console(width=WIDTH)
    port, page_port = args.port, args.page_port
    if port and not _free(port):
        console.print(f"port {port} is in use: serving /metrics on another free port "
                      f"(choose one with --port N)")
        port = 0
    handler = _quiet_logging()
    try:
        requests = tour(args.seed) if args.tour else workload(args.requests, args.seed)
        console.print(f"[bold]streamscope demo[/]: {len(requests)} requests through the real anthropic SDK to a "
                      f"local simulated endpoint, time scaled by {args.time_scale:g}, budgets on")
        with demo.Demo(requests, scale=args.time_scale, prometheus_port=port, otlp=args.otlp,
                       page_port=page_port) as session:
            page = session.page.url if session.page is not None else None
            if session.page is not None and page_port and session.page.port != page_port:
                console.print(f"port {page_port} is in use: serving the demo page on another free port "
                              f"(choose one with --page-port N)")
            if page is not None:
                console.print(f"the demo page, answers relayed to a browser: {page}"
                              + ("" if args.serve else " (--serve keeps it up)"))
            started = time.monotonic()
            with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                          console=console, transient=not tty) as bar:
                task = bar.add_task("streaming", total=len(requests))
                result = session.run(concurrency=args.concurrency, progress=lambda _r: bar.advance(task))
            try:
                passed = _report(console, args, result, requests, started, page)
            finally:
                result.telemetry.shutdown()
    finally:
        logging.getLogger().removeHandler(handler)
    return 0 if passed else 1


def _report(console: Console, args: argparse.Namespace, result: demo.Run, requests: list[Any], started: float,
            page: str | None) -> bool:
    """The tables and the self-check; with --serve, then serve until Ctrl-C. Whether the check passed."""
    if result.telemetry.prometheus_port:
        console.print(f"metrics were served on http://127.0.0.1:{result.telemetry.prometheus_port}/metrics")
    (per_request if args.tour else triage)(console, result)
    from streamscope.tools.demo_spend import Spent

    for line in Spent.of(result).lines():
        console.print(line, highlight=False, markup=False)
    relayed = f", and {result.relayed} reads of the demo page's relay endpoint" if result.relayed else ""
    console.print(f"{len(result.results)} spans for {len(requests)} requests{relayed} in "
                  f"{time.monotonic() - started:.1f} s.")
    passed = self_check(console, result, requests)
    if args.serve and result.telemetry.prometheus_port:
        if page is not None:
            console.print(f"the demo page is at {page}")
        console.print("serving /metrics until Ctrl-C")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    return passed
