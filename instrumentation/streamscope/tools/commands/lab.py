"""`streamscope lab`: a timeout-policy comparison, on simulated streams (see docs/lab.md).

The model lives in `streamscope.tools.lab` (pure); this module only turns flags into its parameters
and its results into a table, JSON or a plot. Every number is bounded (seconds to a day,
requests to 20,000, retries to 10, input to 10,000,000 tokens) so that no flag, however large,
overflows the model or runs it for ever; `--plot` (a writable path, matplotlib installed) and
`--model` (a price for it) are checked before the lab runs.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict, fields
from typing import TYPE_CHECKING, Any

from streamscope.tools.cli import number, output_file, write_plot
from streamscope.tools.lab import LabConfig, LabResult, PolicyResult, StreamModel, run_lab
from streamscope.tools.spend import Pricing, UnknownModel, share, usd

from . import EXIT_OK, UsageError, json_safe

if TYPE_CHECKING:
    from rich.console import Console

_CONFIG_DEFAULTS = LabConfig()
DAY = 86_400.0
SECONDS = number("number of seconds", high=DAY)
TIMEOUT = number("number of seconds", strict=True, high=DAY)
MAX_STREAMS, MAX_RETRIES, MAX_INPUT = 20_000, 10, 10_000_000
"""Both at once: about 12 s and 600 MB; the default run is 200 requests and 1 retry."""
PLOT_FORMATS = (".png", ".svg", ".pdf")
"""What matplotlib writes without extra packages, told by the file name."""


def _ping_every(text: str) -> float:
    value = SECONDS(text)
    if 0 < value < 0.1:  # a ping every microsecond would be billions of events to draw
        raise argparse.ArgumentTypeError(f"expected 0 (no pings) or a number of seconds >= 0.1, got {text!r}")
    return float(value)


def _knob(name: str, default: object) -> tuple[Any, str]:
    """The argparse type and metavar of a `StreamModel` field, from its name and default."""
    if name == "streams":
        return number("whole number of requests", low=1, high=MAX_STREAMS, kind=int), "N"
    if name == "input_tokens":
        return number("whole number of tokens", high=MAX_INPUT, kind=int), "N"
    if name == "decode_rate":
        return number("number of tokens per second", low=0.001, high=1e6), "TOK/S"
    if isinstance(default, int):
        return number("whole number", high=1e9, kind=int), "N"
    if name.endswith("_share") or name == "pace_jitter":
        return number("fraction", high=1), "F"
    return (_ping_every if name == "ping_every" else SECONDS), "S"


def _seconds_list(text: str) -> tuple[float, ...]:
    try:
        values = tuple(TIMEOUT(part.strip()) for part in text.split(",") if part.strip())
    except argparse.ArgumentTypeError:
        values = ()
    if not values:
        raise argparse.ArgumentTypeError(f"expected numbers of seconds > 0 and <= {DAY:,.0f}, separated by "
                                         f"commas (60,120), got {text!r}")
    return values


def _plot_file(text: str) -> str:
    if not text.lower().endswith(PLOT_FORMATS):
        raise argparse.ArgumentTypeError(f"expected a file name ending in {', '.join(PLOT_FORMATS)}, got {text!r}")
    return output_file(text)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    model = parser.add_argument_group("synthetic streams (the model)")
    for f in fields(StreamModel):
        kind, metavar = _knob(f.name, f.default)
        model.add_argument(_flag(f.name), type=kind, default=f.default, metavar=metavar, help=f.metadata["help"])
    policy = parser.add_argument_group("policies compared")
    d = _CONFIG_DEFAULTS
    policy.add_argument("--total", type=_seconds_list, default=d.totals, metavar="S[,S...]",
                        help="one total timeout per attempt, one row each")
    policy.add_argument("--read-timeout", type=TIMEOUT, default=d.read_timeout, metavar="S",
                        help="per-read timeout, judged with and without pings")
    policy.add_argument("--first-token", type=TIMEOUT, default=d.first_token, metavar="S",
                        help="three budgets: wait for the first content event")
    policy.add_argument("--idle", type=TIMEOUT, default=d.idle, metavar="S",
                        help="three budgets: longest gap between content events")
    policy.add_argument("--deadline", type=TIMEOUT, default=d.deadline, metavar="S",
                        help="three budgets: the caller's deadline, shared by retries")
    retries = number("whole number of retries", high=MAX_RETRIES, kind=int)
    policy.add_argument("--retries", type=retries, default=d.retries, metavar="N",
                        help="retries in the 'with retry' rows; 0 drops those rows")
    policy.add_argument("--retry-scope", choices=("any", "before-content"), default="any",
                        help="retry any attempt a rule ended, or only those that had shown no content "
                             "(the retry line)")
    cost = parser.add_argument_group("spend")
    cost.add_argument("--model", metavar="MODEL",
                      help="price the tokens at this model's rates from the shipped price table (such as "
                           "claude-sonnet-4-5 or gpt-4.1); without it, a simulated model at Claude Sonnet 4.5's "
                           "rates ($3 input, $15 output per million tokens)")
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the results as JSON instead of a table")
    out.add_argument("--plot", type=_plot_file, metavar="FILE.png",
                     help="also draw the comparison into this file (.png, .svg or .pdf; needs matplotlib: "
                          "pip install 'streamscope[lab]')")


def run(args: argparse.Namespace) -> int:
    try:
        model = StreamModel(**{f.name: getattr(args, f.name) for f in fields(StreamModel)})
        config = LabConfig(
            totals=args.total, read_timeout=args.read_timeout, first_token=args.first_token,
            idle=args.idle, deadline=args.deadline, retries=args.retries,
            retry_partial=args.retry_scope == "any",
        )
    except ValueError as error:  # the model's own constraints, in the flags' names
        message = re.sub(r"\b(?:" + "|".join(f.name for f in fields(StreamModel)) + r")\b",
                         lambda m: _flag(m.group()), str(error))
        raise UsageError(f"{message}; see 'streamscope lab --help'") from None
    try:
        pricing = Pricing.of(args.model)
    except UnknownModel as error:
        raise UsageError(f"argument --model: {error}") from None
    if args.plot:
        try:
            import matplotlib.figure  # noqa: F401 - checked before the run, not after it
        except ImportError:
            raise UsageError("--plot needs matplotlib, which is not installed; "
                             "run pip install 'streamscope[lab]', or leave out --plot") from None
    result = run_lab(model, config, pricing)
    if args.json:
        print(json.dumps(to_json(result), indent=2))
    else:
        from rich.console import Console

        console = Console()
        render(result, console if console.is_terminal else Console(width=130))
    if args.plot:
        write_plot(plot, result, args.plot)
    return EXIT_OK


def to_json(result: LabResult) -> dict[str, Any]:
    rows = [{**asdict(r), "retries_sent": r.retries_sent, "stalls_missed": r.stalls_missed,
             "per_answer_usd": r.per_answer_usd, "per_extra_answer_usd": result.per_extra_answer_usd(r)}
            for r in result.rows]
    data: dict[str, Any] = json_safe({
        "model": asdict(result.model),
        "config": asdict(result.config),
        "pricing": result.pricing.to_json(),
        "workload": result.workload(),
        "rows": rows,
        "findings": [asdict(f) for f in result.findings],
    })
    return data


def _stalls(row: PolicyResult) -> str:
    text = f"{row.stalls_detected}/{row.stalls}"
    return text if row.stalls_missed == 0 else f"[red]{text}[/red]"


_COLUMNS = ("done", "healthy\nkilled", "stalls\ndetected", "stall\nwait s", "p95 s", "retries\nsent",
            "thrown\naway s", "spend", "wasted", "per\nanswer", "per extra\nanswer")


def _wasted(row: PolicyResult) -> str:
    return f"{usd(row.wasted_usd)} {share(row.wasted_usd, row.spend_usd)}"


def spend_note(result: LabResult) -> str:
    """Which rates and tokens the spend columns are at, and what they count."""
    m = result.model
    return (f"Spend, priced as {result.pricing.note()}; {m.input_tokens:,} input tokens a request, "
            f"{m.decode_rate:g} output tokens per second of thinking and answer. An attempt pays its input once its "
            "headers arrive, and the output generated until it ends; wasted: the spend on attempts that did not "
            "complete. Per answer: spend / requests done. Per extra answer: what the retries added to the spend, "
            "over the answers they added.")


def _extra(result: LabResult, row: PolicyResult) -> str:
    extra = result.per_extra_answer_usd(row)
    if extra is None:
        return ""
    return "[red]no answer[/red]" if extra == float("inf") else usd(extra)


def render(result: LabResult, console: Console) -> None:
    from rich import box
    from rich.table import Table

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
            usd(row.spend_usd), _wasted(row), usd(row.per_answer_usd), _extra(result, row),
            end_section=row.retries == result.config.retries,
        )
    console.print(table)
    console.print(spend_note(result), highlight=False)
    console.print("Findings, computed from the rows without retries:", highlight=False)
    for finding in result.findings:
        mark = "[green]holds[/green]" if finding.holds else "[red]does not hold[/red]"
        console.print(f"  {mark}: {finding.claim} ({finding.evidence})", highlight=False)


def plot(result: LabResult, path: str) -> None:
    """Four panels per row: healthy attempts killed, stalls never detected, mean wait on stalls,
    wasted spend."""
    from matplotlib.figure import Figure  # imported here: only --plot pays for matplotlib

    rows = list(reversed(result.rows))
    labels = [f"{r.policy.name}{' + retry' if r.retries else ''}" for r in rows]
    panels = (
        ("healthy attempts killed", [r.healthy_killed for r in rows], "tab:red", "%.0f"),
        ("stalls never detected", [r.stalls_missed for r in rows], "tab:orange", "%.0f"),
        ("mean wait on stalls (s)", [r.stall_wait_mean for r in rows], "tab:blue", "%.0f"),
        ("wasted spend (US$)", [r.wasted_usd for r in rows], "tab:purple", "%.2f"),
    )
    fig = Figure(figsize=(16, 0.45 * len(rows) + 1.6), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True)
    for ax, (title, values, colour, fmt) in zip(axes, panels):
        ax.barh(labels, values, color=colour)
        ax.set_title(title)
        ax.bar_label(ax.containers[0], fmt=fmt, padding=2)
        ax.margins(x=0.2)
    fig.suptitle(f"streamscope lab: {result.model.streams} synthetic streams, seed {result.model.seed}")
    fig.savefig(path, dpi=110)
