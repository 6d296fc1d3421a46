"""`streamscope validate`: do budgets chosen at today's load still hold at peak? (docs/validate.md)

The engine is `streamscope.tools.validate` (the latency model, the scripts, the run over the real
SDK and the simulator); this module turns flags into its parameters, reads the budget file and the
1x distribution, and prints the figures per load multiplier as a table, JSON or a plot. Every input
is checked before anything runs; the simulator, the SDK and matplotlib are imported in `run`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from streamscope.budgets.table import CONFIG_ENV, BudgetFileError, BudgetTable, CallBudgets
from streamscope.tools.cli import number, output_file, write_plot
from streamscope.tools.validate import DWELL_FACTOR, Figures, Report
from streamscope.tools.validate_model import (
    DEFAULT_BASELINE,
    GAP_STRETCH,
    MODEL,
    ROUTE,
    STALL_BEFORE_SHARE,
    STALL_MID_SHARE,
    STALL_SECONDS,
    TTFT_STRETCH,
    Baseline,
    Config,
    empirical,
    from_quantiles,
)

from . import EXIT_FINDING, EXIT_OK, UsageError, add_observation_options, json_safe, prometheus_observations

if TYPE_CHECKING:
    from rich.console import Console

_D = Config()
MAX_MULTIPLIERS = 10
MAX_REQUESTS = 5_000
"""Per multiplier: each is a real stream through the SDK."""


def _multipliers(text: str) -> tuple[float, ...]:
    parse = number("load multiplier", low=1, high=100)
    try:
        values = tuple(sorted({float(parse(part.strip())) for part in text.split(",") if part.strip()}))
    except argparse.ArgumentTypeError:
        values = ()
    if not values or len(values) > MAX_MULTIPLIERS:
        raise argparse.ArgumentTypeError(f"expected up to {MAX_MULTIPLIERS} load multipliers >= 1 and <= 100, "
                                         f"separated by commas (1,3,5), got {text!r}")
    return values


def _png(text: str) -> str:
    if not text.lower().endswith(".png"):
        raise argparse.ArgumentTypeError(f"expected a file name ending in .png, got {text!r}")
    return output_file(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE",
                        help=f"the TOML budget file to validate (as `streamscope suggest` writes it); default: "
                             f"the file {CONFIG_ENV} names, as instrument() reads it")
    parser.add_argument("--model", default=MODEL, metavar="NAME",
                        help="the model the requests name: its [budgets.models] entry applies")
    parser.add_argument("--route", default=ROUTE, metavar="NAME",
                        help="the route the requests run on: its [budgets.routes] entry applies")
    load = parser.add_argument_group("load")
    load.add_argument("--multipliers", type=_multipliers, default=_D.multipliers, metavar="M[,M...]",
                      help="load multipliers to run, each m times the 1x request rate, with latency stretched "
                           "by the latency model")
    load.add_argument("--rate", type=number("number of requests per model second", strict=True, high=1000),
                      default=_D.rate, metavar="R", help="requests per model second at 1x (Poisson arrivals)")
    load.add_argument("--requests", type=number("whole number of requests", low=1, high=MAX_REQUESTS, kind=int),
                      default=_D.requests, metavar="N", help="requests per multiplier")
    load.add_argument("--pool-size", type=number("whole number of connections", low=1, high=1e6, kind=int),
                      metavar="N", help="the connection pool (or worker slots) the streams share: the peak of "
                                        "open streams must stay within it (by default not checked)")
    model = parser.add_argument_group("latency model (model seconds)")
    add_observation_options(
        model.add_mutually_exclusive_group(), model,
        spans="take the 1x time to first content and largest gap from this span file (as `streamscope classify` "
              "reads it); spans a budget ended are left out",
        prometheus="take them from this Prometheus server's histograms (p50, p99, p99.9); by default a built-in "
                   "distribution (TTFT median 1 s, largest gap median 0.3 s)",
        window="with --prometheus: the range to read, a Prometheus duration (30m, 1h, 7d)")
    stretch = number("stretch factor", high=100)
    model.add_argument("--ttft-stretch", type=stretch, default=TTFT_STRETCH, metavar="A",
                       help="at m x load, time to first token = 1x sample x (1 + A(m-1)E), E ~ Exp(1)")
    model.add_argument("--gap-stretch", type=stretch, default=GAP_STRETCH, metavar="B",
                       help="at m x load, largest gap = 1x sample x (1 + B(m-1)E'), E' ~ Exp(1)")
    model.add_argument("--seed", type=int, default=_D.seed, help="the random seed of samples and arrivals")
    model.add_argument("--time-scale", type=number("number of real seconds per model second", strict=True,
                                                   high=10),
                       default=_D.time_scale, metavar="S",
                       help="real seconds per model second, for the simulator and the budgets alike (0.05: a "
                            "60 s stall takes 3 s); a larger scale is kinder to a busy machine")
    judge = parser.add_argument_group("verdict")
    judge.add_argument("--max-false-kills", type=number("fraction", high=1), default=0.005, metavar="F",
                       help="fail when budgets end this share of healthy requests (or more) at any multiplier")
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the figures as JSON instead of a table")
    out.add_argument("--plot", type=_png, metavar="FILE.png",
                     help="also draw the figures per multiplier into this PNG (needs matplotlib: "
                          "pip install 'streamscope[lab]')")


def budgets_of(args: argparse.Namespace) -> tuple[CallBudgets, str]:
    """The budgets for the requests' model and route, in model seconds, and the file they came from."""
    try:
        if args.config is not None:
            return BudgetTable.from_toml(args.config).resolve(args.model, args.route), args.config
        path = os.environ.get(CONFIG_ENV)
        if not path:
            raise UsageError(f"no budget file: pass --config FILE (a TOML budget file), or set {CONFIG_ENV}")
        return BudgetTable.from_environment().resolve(args.model, args.route), path
    except BudgetFileError as error:
        raise UsageError(str(error)) from None


def baseline_of(args: argparse.Namespace) -> Baseline:
    """The 1x distribution: the span file's, Prometheus's, or the built-in one."""
    if args.spans is not None:
        from streamscope.tools.spanfile import SpanFileError, read_span_attributes

        try:
            spans = [a for a in read_span_attributes(args.spans) if not a.get("streamscope.budget.fired")]
        except SpanFileError as error:
            raise UsageError(str(error)) from None
        ttft, gap = (_numbers(spans, key) for key in ("streamscope.time_to_first_content", "streamscope.max_gap"))
        for values, key in ((ttft, "streamscope.time_to_first_content"), (gap, "streamscope.max_gap")):
            if not values:
                raise UsageError(f"{args.spans}: no span a budget did not end has {key}; give spans of "
                                 "streamed calls that got content")
        return Baseline(empirical(ttft), empirical(gap),
                        f"{args.spans}: {len(ttft)} times to first content, {len(gap)} largest gaps")
    if args.prometheus is not None:
        observations, url = prometheus_observations(args.prometheus, args.window)
        evidence = observations.default
        if evidence.first_content is None or evidence.max_gap is None:
            raise UsageError(f"{url} has no streamscope_time_to_first_content_seconds and streamscope_max_gap_"
                             f"seconds samples over {args.window}; try a longer --window")
        return Baseline(from_quantiles(evidence.first_content), from_quantiles(evidence.max_gap),
                        f"{url} over {args.window}")
    return DEFAULT_BASELINE


def _numbers(spans: list[dict[str, Any]], key: str) -> list[float]:
    return [float(v) for a in spans if isinstance(v := a.get(key), (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and v >= 0]


def run(args: argparse.Namespace) -> int:
    from streamscope.tools import validate

    budgets, source = budgets_of(args)
    baseline = baseline_of(args)
    if args.plot:
        try:
            import matplotlib.figure  # noqa: F401 - checked before the run, not after it
        except ImportError:
            raise UsageError("--plot needs matplotlib, which is not installed; "
                             "run pip install 'streamscope[lab]', or leave out --plot") from None
    config = Config(multipliers=args.multipliers, requests=args.requests, rate=args.rate,
                    ttft_stretch=args.ttft_stretch, gap_stretch=args.gap_stretch, seed=args.seed,
                    time_scale=args.time_scale, baseline=baseline, model=args.model, route=args.route)
    with _Progress(args, len(config.multipliers) * config.requests) as advance:
        report = validate.run(config, budgets, max_false_kill_rate=args.max_false_kills, pool_size=args.pool_size,
                              progress=advance)
    if args.json:
        print(json.dumps(to_json(report, source), indent=2))
    else:
        from rich.console import Console

        console = Console()
        render(report, source, console if console.is_terminal else Console(width=150))
    if args.plot:
        write_plot(plot, report, args.plot)
    return EXIT_OK if report.holds else EXIT_FINDING


class _Progress:
    """A progress bar on stderr while the streams run; nothing when stderr is not a terminal or with --json."""

    def __init__(self, args: argparse.Namespace, total: int) -> None:
        self.bar: Any = None
        if not args.json and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import Progress

            self.bar = Progress(console=Console(stderr=True), transient=True)
            self.task = self.bar.add_task("streams", total=total)

    def __enter__(self) -> Any:
        if self.bar is None:
            return None
        self.bar.start()
        return lambda: self.bar.advance(self.task)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()


# -- output ----------------------------------------------------------------------------------------


def to_json(report: Report, source: str) -> dict[str, Any]:
    c = report.config
    rows = []
    for f in report.figures:
        row = asdict(f)
        row["false_kill_rate"] = f.false_kill_rate
        row["rate"] = c.rate * f.multiplier
        row["dwell"] = {d.kind: {**asdict(d), "holds": d.holds} for d in f.dwell}
        for d in row["dwell"].values():
            del d["kind"]
        rows.append(row)
    data: dict[str, Any] = json_safe({
        "budget_file": source,
        "budgets": {"first_token": report.budgets.first_token, "idle": report.budgets.idle,
                    "deadline": report.budgets.deadline, "model": c.model, "route": c.route},
        "latency_model": {"baseline": c.baseline.source, "ttft_stretch": c.ttft_stretch,
                          "gap_stretch": c.gap_stretch, "stall_before_share": STALL_BEFORE_SHARE,
                          "stall_mid_share": STALL_MID_SHARE, "dwell_factor": DWELL_FACTOR},
        "requests": c.requests, "rate_1x": c.rate, "seed": c.seed, "time_scale": c.time_scale,
        "max_false_kill_rate": report.max_false_kill_rate, "pool_size": report.pool_size,
        "multipliers": rows,
        "holds": report.holds,
        "problems": list(report.problems),
        "notes": list(report.notes),
    })
    return data


def _s(value: float | None) -> str:
    return "-" if value is None or not math.isfinite(value) else f"{value:.1f}" if value < 100 else f"{value:.0f}"


def _dwell(f: Figures, index: int) -> str:
    d = f.dwell[index]
    if not d.requests:
        return "-"
    limit = "no budget" if d.limit is None else f"≤ {d.limit:g}"
    text = f"{_s(d.p99)} / {_s(d.max)} ({limit})"
    return text if d.holds else f"[red]{text}[/red]"


def render(report: Report, source: str, console: Console) -> None:
    from rich import box
    from rich.table import Table

    c, b = report.config, report.budgets
    budgets = ", ".join(f"{name} {_s(v)} s" if v is not None else f"no {name}"
                        for name, v in (("first_token", b.first_token), ("idle", b.idle), ("deadline", b.deadline)))
    table = Table(
        title=f"Budgets under load: {budgets} ({source}, model {c.model}, route {c.route})",
        caption=(f"{c.requests} requests per multiplier, {c.rate:g}/s at 1x (seed {c.seed}); 1x latency: "
                 f"{c.baseline.source}; at m x, TTFT x (1 + {c.ttft_stretch:g}(m-1)E), largest gap x "
                 f"(1 + {c.gap_stretch:g}(m-1)E'). Model seconds. TTFT and gap: scripted for the healthy "
                 f"requests. Dwell: p99 / max seconds a doomed request held its slot after going silent "
                 f"(limit {DWELL_FACTOR:g} x its budget; each stall lasts at least {STALL_SECONDS:g} s)."),
        box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0, 0, 1),
    )
    for header in ("load", "req/s", "healthy", "false kills", "TTFT\np50 / p99", "gap\np99",
                   "dwell: stall before\nfirst content", "dwell: stall\nmid-stream", "in flight\npeak"):
        table.add_column(header, justify="right")
    for f in report.figures:
        kills = f"{f.false_kills} ({f.false_kill_rate:.1%})"
        if f.false_kill_rate >= report.max_false_kill_rate:
            kills = f"[red]{kills}[/red]"
        peak = f"{f.in_flight_peak}" + (f" / {report.pool_size}" if report.pool_size is not None else "")
        if report.pool_size is not None and f.in_flight_peak > report.pool_size:
            peak = f"[red]{peak}[/red]"
        errors = f" +{f.errors} errors" if f.errors else ""
        table.add_row(f"{f.multiplier:g}x", f"{c.rate * f.multiplier:g}", f"{f.healthy}{errors}", kills,
                      f"{_s(f.ttft_p50)} / {_s(f.ttft_p99)}", _s(f.gap_p99), _dwell(f, 0), _dwell(f, 1), peak)
    console.print(table)
    if report.holds:
        console.print(f"[green]The budgets hold[/green] at every multiplier up to {max(c.multipliers):g}x.",
                      highlight=False)
    else:
        console.print("[red]The budgets do not hold:[/red]", highlight=False)
        for problem in report.problems:
            console.print(f"  {problem}", highlight=False)
    for note in report.notes:
        console.print(f"[yellow]Note:[/yellow] {note}.", highlight=False)


def plot(report: Report, path: str) -> None:
    """Three panels over the multipliers: false-kill rate, doomed dwell, streams open at once."""
    from matplotlib.figure import Figure  # imported here: only --plot pays for matplotlib

    rows = report.figures
    x = [f.multiplier for f in rows]
    fig = Figure(figsize=(13, 4), layout="constrained")
    kills, dwell, peak = fig.subplots(1, 3)
    kills.plot(x, [100 * f.false_kill_rate for f in rows], "o-", color="tab:red")
    kills.axhline(100 * report.max_false_kill_rate, color="grey", linestyle="--", label="limit")
    kills.set_title("healthy requests a budget ended (%)")
    for index, (label, colour) in enumerate((("stall before first content", "tab:blue"),
                                             ("stall mid-stream", "tab:orange"))):
        dwell.plot(x, [f.dwell[index].p99 or math.nan for f in rows], "o-", color=colour, label=f"{label}, p99")
        limit = rows[0].dwell[index].limit
        if limit is not None:
            dwell.axhline(limit, color=colour, linestyle="--", label=f"{label}, limit")
    dwell.set_title("doomed requests: seconds held after going silent")
    peak.plot(x, [f.in_flight_peak for f in rows], "o-", color="tab:green")
    if report.pool_size is not None:
        peak.axhline(report.pool_size, color="grey", linestyle="--", label="pool")
    peak.set_title("streams open at once (peak)")
    for ax in (kills, dwell, peak):
        ax.set_xlabel("load multiplier")
        ax.set_xticks(x)
        ax.set_ylim(bottom=0)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    fig.suptitle(f"streamscope validate: {report.config.requests} requests per multiplier, seed {report.config.seed}")
    fig.savefig(path, dpi=110)
