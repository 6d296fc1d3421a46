"""`streamscope demo`: the main job on the embedded simulated Anthropic endpoint.

A mixed workload (long answers, thinking and stalls, plus every failure streamscope tells apart) goes through the
real `anthropic` SDK with streamscope and budgets on, in scaled time; `/metrics` is served while it
runs; it ends with the triage table an on-call engineer would want.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .. import demo
from ..classify import LABELS
from ..suggest import quantile
from ..workload import expected_mix, tour, workload

ADVICE = {
    "stalled_mid_stream": "streams start and then hang (idle budget): look at the provider's status and at "
                          "`streamscope_max_gap_seconds`; pings do not count as progress",
    "stalled_before_first_content": "nothing arrives before the first-token budget: queueing/overload, or a "
                                    "first-token budget too tight for the model's thinking (compare its p99)",
    "deadline_in_thinking": "thinking budgets the deadline cannot reach: lower budget_tokens or raise the "
                            "deadline (`streamscope check`)",
    "deadline_in_answer": "healthy answers cut by the deadline: more time, or shorter answers",
    "budget_exhausted": "the token allowance went on thinking: raise max_tokens or lower the thinking budget; "
                        "more time will not help",
    "silently_unverified": "answers whose thinking used its whole budget: the checking pass was likely cut; "
                           "raise budget_tokens or treat them as unverified",
    "truncated": "answers cut at max_tokens: raise max_tokens or ask for less",
    "upstream_error": "provider or network errors: check error types (overloaded_error, dropped connections)",
    "refused": "refusals: retrying will not change them",
    "paused": "long server-tool turns the server paused: not an error, but no answer yet; make sure the calling "
              "code sends the turn back (the assistant's content as is) to continue it, with a bound on "
              "continuations",
    "cancelled": "callers giving up: not a provider problem",
}
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=150, help="requests in the workload (default 150)")
    parser.add_argument("--seed", type=int, default=7, help="the workload's random seed")
    parser.add_argument("--time-scale", type=float, default=0.05,
                        help="real seconds per model second (default 0.05: a 110 s answer takes 5.5 s)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight at once")
    parser.add_argument("--port", type=int, default=9464, help="serve /metrics here (0: any free port)")
    parser.add_argument("--serve", action="store_true", help="keep serving /metrics after the run, until Ctrl-C")
    parser.add_argument("--otlp", action="store_true",
                        help="also send spans and metrics over OTLP/HTTP (configured by the OTEL_* variables)")
    parser.add_argument("--tour", action="store_true", help="one request of every kind, one line each")


def _value(span, key: str | None) -> float | None:
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


def triage(console: Console, run: demo.Run) -> None:
    spans = [span for _, span in run.results]
    labels = [str((s.attributes or {}).get("streamscope.class")) for s in spans]
    models = sorted({str((s.attributes or {}).get("gen_ai.request.model")) for s in spans})

    by_class = Table(title="requests per class and model")
    by_class.add_column("class")
    for model in models:
        by_class.add_column(model, justify="right")
    by_class.add_column("total", justify="right")
    by_class.add_column("partial", justify="right")
    counts = Counter((label, str((s.attributes or {}).get("gen_ai.request.model"))) for label, s in zip(labels, spans))
    partial = Counter(label for label, s in zip(labels, spans) if (s.attributes or {}).get("streamscope.partial"))
    for label in LABELS:
        total = sum(counts[(label, m)] for m in models)
        if total:
            by_class.add_row(label, *(str(counts[(label, m)] or "") for m in models), str(total),
                             str(partial[label] or ""))
    by_class.add_row("[bold]all[/]", *(str(sum(counts[(lab, m)] for lab in LABELS)) for m in models),
                     str(len(spans)), str(sum(partial.values())))
    console.print(by_class)

    firings = Counter(((s.attributes or {}).get("streamscope.budget.fired"),
                       str((s.attributes or {}).get("gen_ai.request.model"))) for s in spans)
    fired = Table(title="budget firings")
    fired.add_column("budget")
    for model in models:
        fired.add_column(model, justify="right")
    for budget in ("first_token", "idle", "deadline", "read_timeout"):
        if any(firings[(budget, m)] for m in models):
            fired.add_row(budget, *(str(firings[(budget, m)] or "") for m in models))
    console.print(fired)

    phases = Table(title=f"phase percentiles, model seconds (measured ÷ {run.scale:g})")
    phases.add_column("phase")
    for model in models:
        for q in ("p50", "p95", "p99"):
            phases.add_column(f"{model}\n{q}", justify="right")
    for name, key in PHASES:
        cells = []
        for model in models:
            values = sorted(v / run.scale for s in spans
                            if (s.attributes or {}).get("gen_ai.request.model") == model
                            and (v := _value(s, key)) is not None)
            cells += [_f(quantile(values, q)) if values else "-" for q in (0.5, 0.95, 0.99)]
        phases.add_row(name, *cells)
    console.print(phases)

    # Refusals, paused turns and callers giving up are not the on-call engineer's to fix: look at them last.
    failing = Counter(label for label in labels if label not in ("complete", *CALLERS)) or \
        Counter(label for label in labels if label != "complete")
    if failing:
        worst, n = failing.most_common(1)[0]
        console.print(f"[bold]Look at first:[/] {worst} ({n} of {len(spans)}): {ADVICE.get(worst, '')}.")


def per_request(console: Console, run: demo.Run) -> None:
    table = Table(title=f"one line per request (model seconds: measured ÷ {run.scale:g})")
    for column in ("kind", "route", "class", "fired", "1st content", "thinking", "1st text", "max gap", "pings", "end"):
        table.add_column(column, no_wrap=True)
    for request, span in run.results:
        a = span.attributes or {}
        label = str(a.get("streamscope.class"))
        scaled = {k: (v / run.scale if isinstance(v, float) else None) for k, v in a.items()}
        thinking = "-"
        if scaled.get("streamscope.thinking.start") is not None:
            thinking = f"{_f(scaled['streamscope.thinking.start'])}→{_f(scaled.get('streamscope.thinking.end'))}"
        table.add_row(request.kind, request.route, f"[{COLOURS.get(label, 'yellow')}]{label}[/]",
                      str(a.get("streamscope.budget.fired", "")), _f(scaled.get("streamscope.time_to_first_content")),
                      thinking, _f(scaled.get("streamscope.time_to_first_text")), _f(scaled.get("streamscope.max_gap")),
                      str(a.get("streamscope.pings", 0)), _f(_value(span, "duration") / run.scale))
    console.print(table)


def run(args: argparse.Namespace) -> int:
    console = Console() if sys.stdout.isatty() else Console(width=160)
    requests = tour(args.seed) if args.tour else workload(args.requests, args.seed)
    console.print(f"[bold]streamscope demo[/]: {len(requests)} requests through the real anthropic SDK against a "
                  f"local simulated endpoint, time scaled by {args.time_scale:g}, budgets on")
    started = time.monotonic()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=not sys.stdout.isatty()) as bar:
        task = bar.add_task("streaming", total=len(requests))
        result = demo.run(requests, scale=args.time_scale, concurrency=args.concurrency, prometheus_port=args.port,
                          otlp=args.otlp, progress=lambda _r: bar.advance(task))
    if result.telemetry.prometheus_port:
        console.print(f"metrics were served on http://127.0.0.1:{result.telemetry.prometheus_port}/metrics")
    (per_request if args.tour else triage)(console, result)
    wrong = [(r.kind, r.expect, str((s.attributes or {}).get("streamscope.class"))) for r, s in result.results
             if (s.attributes or {}).get("streamscope.class") != r.expect]
    console.print(f"{len(result.results)} spans for {len(requests)} requests in {time.monotonic() - started:.1f} s; "
                  f"designed mix: {dict(sorted(expected_mix(requests).items()))}")
    status = 0
    if wrong or result.missing:
        console.print(f"[red]{len(wrong)} request(s) got another class than designed: {wrong[:5]}; "
                      f"{len(result.missing)} without a span[/]")
        status = 1
    else:
        console.print("every request got the class its script was written for.")
    if args.serve and result.telemetry.prometheus_port:
        console.print("serving /metrics until Ctrl-C")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
    result.telemetry.shutdown()
    return status
