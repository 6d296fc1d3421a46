"""`streamscope lab`: a timeout-policy comparison, on simulated streams (see docs/lab.md).

The model lives in `streamscope.lab` (pure); this module only turns flags into its parameters
and its results into a table, JSON or a plot.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, fields
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from streamscope.lab import LabConfig, LabResult, PolicyResult, StreamModel, run_lab

_CONFIG_DEFAULTS = LabConfig()


def _seconds_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds separated by commas, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError("expected one or more positive numbers of seconds")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("synthetic streams (the model)")
    for f in fields(StreamModel):
        model.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default,
                           metavar="N", help=f"{f.metadata['help']} (default {f.default:g})")
    policy = parser.add_argument_group("policies compared")
    d = _CONFIG_DEFAULTS
    policy.add_argument("--total", type=_seconds_list, default=d.totals, metavar="S[,S...]",
                        help="one total timeout per attempt, one row each (default 60,120)")
    policy.add_argument("--read-timeout", type=float, default=d.read_timeout, metavar="S",
                        help=f"per-read timeout, judged with and without pings (default {d.read_timeout:g})")
    policy.add_argument("--first-token", type=float, default=d.first_token, metavar="S",
                        help=f"three budgets: wait for the first content event (default {d.first_token:g})")
    policy.add_argument("--idle", type=float, default=d.idle, metavar="S",
                        help=f"three budgets: longest gap between content events (default {d.idle:g})")
    policy.add_argument("--deadline", type=float, default=d.deadline, metavar="S",
                        help=f"three budgets: the caller's deadline, shared by retries (default {d.deadline:g})")
    policy.add_argument("--retries", type=int, default=d.retries, metavar="N",
                        help=f"retries in the 'with retry' rows; 0 drops those rows (default {d.retries})")
    policy.add_argument("--retry-scope", choices=("any", "before-content"), default="any",
                        help="retry any attempt a rule ended, or only those that had shown no content "
                             "(the retry line) (default any)")
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    out.add_argument("--plot", metavar="FILE.png", help="also draw the comparison into a PNG file")


def run(args: argparse.Namespace) -> int:
    try:
        model = StreamModel(**{f.name: getattr(args, f.name) for f in fields(StreamModel)})
        config = LabConfig(
            totals=args.total, read_timeout=args.read_timeout, first_token=args.first_token,
            idle=args.idle, deadline=args.deadline, retries=args.retries,
            retry_partial=args.retry_scope == "any",
        )
    except ValueError as error:
        Console(stderr=True).print(f"[red]streamscope lab: {error}[/red]")
        return 2
    result = run_lab(model, config)
    if args.json:
        print(json.dumps(to_json(result), indent=2))
    else:
        console = Console()
        render(result, console if console.is_terminal else Console(width=130))
    if args.plot:
        plot(result, args.plot)
    return 0


def _finite(value: Any) -> Any:
    """JSON has no infinity or NaN: write null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def to_json(result: LabResult) -> dict[str, Any]:
    rows = [{**asdict(r), "retries_sent": r.retries_sent, "stalls_missed": r.stalls_missed} for r in result.rows]
    return _finite({
        "model": asdict(result.model),
        "config": asdict(result.config),
        "workload": result.workload(),
        "rows": rows,
        "findings": [asdict(f) for f in result.findings],
    })


def _stalls(row: PolicyResult) -> str:
    text = f"{row.stalls_detected}/{row.stalls}"
    return text if row.stalls_missed == 0 else f"[red]{text}[/red]"


_COLUMNS = ("done", "healthy\nkilled", "stalls\ndetected", "stall\nwait s", "p95 s", "retries\nsent",
            "thrown\naway s")


def render(result: LabResult, console: Console) -> None:
    w = result.workload()
    m = result.model
    table = Table(
        title="Timeout policies on the same synthetic streams",
        caption=(f"{w['requests']} requests (seed {m.seed}): {w['long']} long, {w['thinking']} thinking; "
                 f"{w['stalled']} first attempts stall, {w['stalled_pinging']} of them still pinging. "
                 f"Model figures, not measurements; each attempt watched for {m.horizon:g} s. "
                 "Stall wait: mean seconds from a stall to its detection. p95: request latency, retries "
                 "included. Thrown away: streaming seconds of the healthy attempts killed."),
        box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1),
    )
    table.add_column("policy", no_wrap=True)
    for header in _COLUMNS:
        table.add_column(header, justify="right", overflow="fold")
    for row in result.rows:
        killed = f"{row.healthy_killed}" if row.healthy_killed == 0 else f"[red]{row.healthy_killed}[/red]"
        table.add_row(
            f"  + {row.retries} retr{'ies' if row.retries > 1 else 'y'}" if row.retries else row.policy.name,
            f"{row.completed}/{row.requests}", killed, _stalls(row),
            f"{row.stall_wait_mean:.1f}", f"{row.p95_latency:.1f}",
            str(row.retries_sent), f"{row.seconds_thrown_away:,.0f}",
            end_section=row.retries == result.config.retries,
        )
    console.print(table)
    console.print("Findings, computed from the rows without retries:", highlight=False)
    for finding in result.findings:
        mark = "[green]holds[/green]" if finding.holds else "[red]does not hold[/red]"
        console.print(f"  {mark}: {finding.claim} ({finding.evidence})", highlight=False)


def plot(result: LabResult, path: str) -> None:
    """Three panels per row: healthy attempts killed, stalls never detected, mean wait on stalls."""
    from matplotlib.figure import Figure  # imported here: only --plot pays for matplotlib

    rows = list(reversed(result.rows))
    labels = [f"{r.policy.name}{' + retry' if r.retries else ''}" for r in rows]
    panels = (
        ("healthy attempts killed", [r.healthy_killed for r in rows], "tab:red"),
        ("stalls never detected", [r.stalls_missed for r in rows], "tab:orange"),
        ("mean wait on stalls (s)", [r.stall_wait_mean for r in rows], "tab:blue"),
    )
    fig = Figure(figsize=(13, 0.45 * len(rows) + 1.6), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True)
    for ax, (title, values, colour) in zip(axes, panels):
        ax.barh(labels, values, color=colour)
        ax.set_title(title)
        ax.bar_label(ax.containers[0], fmt="%.0f", padding=2)
        ax.margins(x=0.2)
    fig.suptitle(f"streamscope lab: {result.model.streams} synthetic streams, seed {result.model.seed}")
    fig.savefig(path, dpi=110)
