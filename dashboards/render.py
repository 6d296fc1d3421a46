#!/usr/bin/env python3
"""Draw the triage dashboard's main panels from a Prometheus server, as PNG files.

Why: a reader of the README (or a CI log) has no Grafana at hand but should see what on-call
sees. Nothing about a panel is restated here: each picture runs the panel's own PromQL from the
generated dashboard model (``generate.py``, variables filled in: every provider, model and route)
and takes its title, unit, legend format, stacking, alert threshold and dashed budget series from
that model too. So a picture can only drift from the dashboard in looks, never in what it shows.
matplotlib's Agg backend draws; no display is needed.

Usage::

    python dashboards/render.py --prometheus http://localhost:9090 --since 30m -o out/
    python dashboards/render.py --live -o docs/img   # `make screenshots`: a demo run under a real
                                                     # Prometheus on loopback, then the pictures
                                                     # (and the demo's page: page_shot.py)
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import math
import re
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import matplotlib

matplotlib.use("Agg")  # before pyplot: files only, no display

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter
from PIL import Image

HERE = Path(__file__).resolve().parent


def _sibling(stem: str) -> ModuleType:
    """Load ``dashboards/<stem>.py`` by path under the name the tests use, so both share it."""
    name = f"streamscope_dashboards_{stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / f"{stem}.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # a module defining dataclasses must be registered while it runs
        spec.loader.exec_module(module)
    return sys.modules[name]


generate = _sibling("generate")
live = _sibling("live")
page_shot = _sibling("page_shot")


@dataclass(frozen=True)
class Figure:
    """One PNG: a row of the dashboard, with the panels worth a picture, in dashboard order."""

    file: str
    row: str
    panels: tuple[str, ...]
    columns: int


#: The main panels, a file per dashboard row: what is failing, where the time goes, whether the
#: budgets fit what the models do, and where the tokens go.
FIGURES: tuple[Figure, ...] = (
    Figure("triage-failing-now.png", "What is failing now",
           ("Requests by class", "Class share over the selected range", "Partial-failure ratio by model",
            "Budget firings by budget"), columns=2),
    Figure("triage-where-the-time-goes.png", "Where the time goes",
           ("Time to first content", "Largest gap between content events", "Total duration"), columns=3),
    Figure("triage-budgets.png", "Are the budgets right",
           ("First-token budget vs p99 time to first content", "Idle budget vs p99 largest gap",
            "Deadline vs p99 total duration"), columns=3),
    Figure("triage-tokens.png", "Tokens",
           ("Token throughput by type", "Mean tokens per request", "Reasoning share of output tokens"), columns=3),
    Figure("triage-serving.png", "Serving to browsers",
           ("Relayed streams by outcome", "Failure codes", "Statuses before the stream", "Attempts per request",
            "Retries by failure code", "Client disconnects by model"), columns=3),
)

#: Grafana's classic palette ("palette-classic"), in its order.
PALETTE = ("#7EB26D", "#EAB839", "#6ED0E0", "#EF843C", "#E24D42", "#1F78C1", "#BA43A9", "#705DA0",
           "#508642", "#CCA300", "#447EBC", "#C15C17", "#890F02", "#0A437C", "#6D1F62", "#584477")
THRESHOLD_RED = "#E24D42"
BACKGROUND = "#F4F5F5"  # Grafana's light theme: grey canvas, white panels


@dataclass(frozen=True)
class Target:
    """One query of a panel: PromQL with Grafana variables, legend format, instant or range."""

    expr: str
    legend: str
    instant: bool


@dataclass(frozen=True)
class Panel:
    """What the picture needs from one panel of the dashboard model."""

    title: str
    type: str
    unit: str
    axis_label: str
    stacked: bool
    threshold: float | None
    dashed: str | None
    targets: tuple[Target, ...]
    colours: Mapping[str, str] = field(default_factory=dict)
    """Series name → fixed colour (the panel's ``byName`` colour overrides, e.g. per class)."""

    @classmethod
    def of(cls, model: Mapping[str, Any]) -> Panel:
        defaults = model.get("fieldConfig", {}).get("defaults", {})
        custom = defaults.get("custom", {})
        steps = [s["value"] for s in defaults.get("thresholds", {}).get("steps", []) if s.get("value") is not None]
        drawn = custom.get("thresholdsStyle", {}).get("mode") == "dashed"
        overrides = model.get("fieldConfig", {}).get("overrides", [])
        dashed = [o["matcher"]["options"] for o in overrides
                  if o["matcher"]["id"] == "byRegexp" and any(p["id"] == "custom.lineStyle" for p in o["properties"])]
        colours = {o["matcher"]["options"]: p["value"]["fixedColor"]
                   for o in overrides if o["matcher"]["id"] == "byName"
                   for p in o["properties"] if p["id"] == "color" and p["value"].get("mode") == "fixed"}
        return cls(
            title=model["title"], type=model["type"], unit=defaults.get("unit", "short"),
            axis_label=custom.get("axisLabel", ""), stacked=custom.get("stacking", {}).get("mode") == "normal",
            threshold=steps[0] if drawn and steps else None, dashed=dashed[0] if dashed else None,
            targets=tuple(Target(t["expr"], t.get("legendFormat", "__auto"), bool(t.get("instant")))
                          for t in model.get("targets", [])),
            colours=colours,
        )


def dashboard_panels() -> dict[str, Panel]:
    """The triage dashboard's panels by title, from the generator (the single source)."""
    model = generate.dashboard_model(generate.triage_dashboard)
    return {p["title"]: Panel.of(p) for p in generate.panels(model) if p["type"] != "row"}


@dataclass
class Series:
    """One line of a panel: its legend text and its points (NaN where PromQL had no value)."""

    legend: str
    times: list[datetime]
    values: list[float]


def legend(fmt: str, labels: Mapping[str, str]) -> str:
    """Grafana's legend format: ``{{label}}`` filled in; ``__auto`` is the label set."""
    if fmt in ("", "__auto"):
        return "{" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__") + "}"
    return " ".join(re.sub(r"\{\{\s*([\w.]+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).split())


def fetch(api: Any, panel: Panel, start: float, end: float, step: float,
          values: Mapping[str, str]) -> list[Series]:
    """Every series of every query of ``panel``, as Grafana would request them."""
    out: list[Series] = []
    for target in panel.targets:
        expr = generate.substitute(target.expr, values)
        if target.instant:
            rows = [{"metric": r["metric"], "values": [r["value"]]} for r in api.query(expr, at=end)]
        else:
            rows = api.query_range(expr, start, end, step)
        for row in rows:
            times = [datetime.fromtimestamp(float(t), tz=UTC) for t, _ in row["values"]]
            out.append(Series(legend(target.legend, row["metric"]), times, [float(v) for _, v in row["values"]]))
    return out


def value_text(unit: str, value: float) -> str:
    """One value in the panel's unit, the way Grafana prints it (ms below a second, % for ratios)."""
    if value == 0:
        return "0"
    if unit == "percentunit":
        return f"{value * 100:.3g}%"
    if unit == "s":
        return f"{value * 1000:.3g} ms" if abs(value) < 1 else f"{value:.3g} s"
    number = f"{value / 1000:.3g} K" if abs(value) >= 1000 else f"{value:.3g}"
    return number + {"reqps": " req/s", "ops": " ops/s"}.get(unit, "")


def formatter(unit: str) -> FuncFormatter:
    """Tick labels in the panel's unit."""
    return FuncFormatter(lambda v, _pos: value_text(unit, v))


def _style(ax: Axes, title: str) -> None:
    ax.set_title(title, loc="left", fontsize=10, fontweight="bold", color="#1f1f20")
    ax.set_facecolor("white")
    ax.grid(True, color="#E6E6E6", linewidth=0.6)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    for side in ("left", "bottom"):
        ax.spines[side].set_color("#BBBBBB")
    ax.tick_params(labelsize=8, colors="#464646")


def _legend(ax: Axes) -> None:
    """Below the plot, as Grafana's list legend; as many columns as the panel's width holds."""
    labels = ax.get_legend_handles_labels()[1]
    if not labels:
        return
    columns = max(1, min(3, len(labels), 96 // (max(map(len, labels)) + 8)))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=columns, fontsize=7, frameon=False,
              handlelength=2.2, columnspacing=1.2)


def draw_timeseries(ax: Axes, panel: Panel, series: Sequence[Series]) -> None:
    """Lines (or stacked areas), min 0, threshold dashed red, the panel's dashed series dashed."""
    def pair_key(s: Series) -> str:
        # With dashed series (a budget beside its observed p99), one colour per budget key, so the
        # dashed budget and the solid p99 of the same model and route read as a pair.
        return s.legend.split(" ", 1)[-1] if panel.dashed else s.legend

    ordered = sorted(series, key=lambda s: (-sum(v for v in s.values if math.isfinite(v)), s.legend)) \
        if panel.stacked else sorted(series, key=lambda s: s.legend)
    colours: dict[str, str] = {}
    for s in ordered:
        if pair_key(s) not in colours:
            fixed = panel.colours.get(s.legend)
            colours[pair_key(s)] = fixed or PALETTE[sum(k not in panel.colours for k in colours) % len(PALETTE)]
    if panel.stacked:
        grid = sorted({t for s in ordered for t in s.times})
        below = [0.0] * len(grid)
        for s in ordered:
            at = dict(zip(s.times, s.values, strict=True))
            here = [at.get(t, 0.0) for t in grid]  # a missing point stacks as 0, as in Grafana
            top = [b + (v if math.isfinite(v) else 0.0) for b, v in zip(below, here, strict=True)]
            colour = colours[pair_key(s)]
            ax.fill_between(grid, below, top, color=colour, alpha=0.3, linewidth=0)
            ax.plot(grid, top, color=colour, linewidth=1.2, label=s.legend)
            below = top
    else:
        for s in ordered:
            dashed = panel.dashed is not None and re.search(panel.dashed, s.legend) is not None
            colour = colours[pair_key(s)]
            ax.plot(s.times, s.values, color=colour, linewidth=1.4, label=s.legend,
                    linestyle=(0, (5, 3)) if dashed else "-")
    if panel.threshold is not None:
        ax.axhline(panel.threshold, color=THRESHOLD_RED, linestyle=(0, (5, 3)), linewidth=1,
                   label=f"alert threshold {value_text(panel.unit, panel.threshold)}")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.05)  # min 0 as on the panel, and room above the top line
    ax.yaxis.set_major_formatter(formatter(panel.unit))
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S", tz=UTC))
    ax.xaxis.set_major_locator(mdates.AutoDateLocator(maxticks=6))
    if panel.axis_label:
        ax.set_ylabel(panel.axis_label, fontsize=8, color="#464646")
    _legend(ax)


def draw_bargauge(ax: Axes, panel: Panel, series: Sequence[Series]) -> None:
    """Horizontal bars, largest on top, coloured green→yellow→red by value (or the series' fixed
    colour), 0–100 %."""
    bars = sorted(((s.legend, s.values[-1]) for s in series if s.values), key=lambda b: b[1])
    cmap = plt.get_cmap("RdYlGn_r")
    names, values = [b[0] for b in bars], [b[1] for b in bars]
    ax.barh(names, values, color=[panel.colours.get(n) or cmap(v) for n, v in zip(names, values, strict=True)],
            height=0.7)
    for y, v in enumerate(values):
        ax.text(v + 0.01, y, value_text(panel.unit, v), va="center", fontsize=7.5, color="#464646")
    ax.set_xlim(0, 1)
    ax.xaxis.set_major_formatter(formatter(panel.unit))
    ax.tick_params(axis="y", labelsize=7.5)
    ax.grid(False, axis="y")


def _save(fig: plt.Figure, path: Path) -> None:
    """A palette PNG: a dashboard has few colours, and the README should stay light."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", facecolor=fig.get_facecolor())
    plt.close(fig)
    buffer.seek(0)
    with Image.open(buffer) as image:
        image.convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def render(url: str, start: float, end: float, out: Path, *, rate_interval: str = "1m",
           figures: Sequence[Figure] = FIGURES, note: str = "") -> dict[Path, dict[str, int]]:
    """Draw ``figures`` from the Prometheus at ``url`` over [start, end] (Unix seconds) into ``out``.

    ``note`` goes on the footer beside the range (where the data came from).

    Returns, per file written, the number of series each panel drew: a panel with 0 drew nothing
    (the caller decides whether that is an error; the live test says it is).
    """
    out.mkdir(parents=True, exist_ok=True)
    api = live.PromAPI(url)
    panels = dashboard_panels()
    step = max(1.0, round((end - start) / 240))
    values = {"__rate_interval": rate_interval, "__range": f"{max(1, round(end - start))}s",
              "__interval": f"{step:g}s"}
    span = (f"{datetime.fromtimestamp(start, tz=UTC):%Y-%m-%d %H:%M:%S}–{datetime.fromtimestamp(end, tz=UTC):%H:%M:%S}"
            f" UTC   ·   all providers, models, routes   ·   $__rate_interval = {rate_interval}"
            + (f"   ·   {note}" if note else ""))
    drawn: dict[Path, dict[str, int]] = {}
    for figure in figures:
        rows = math.ceil(len(figure.panels) / figure.columns)
        fig, axes = plt.subplots(rows, figure.columns, figsize=(5.4 * figure.columns, 4.3 * rows), dpi=100,
                                 squeeze=False, layout="constrained")
        fig.set_facecolor(BACKGROUND)
        fig.suptitle(f"streamscope / Streaming triage  ›  {figure.row}", x=0.01, ha="left", fontsize=13,
                     fontweight="bold", color="#1f1f20")
        fig.supxlabel(span, x=0.01, ha="left", fontsize=8.5, color="#6e6e6e")
        counts: dict[str, int] = {}
        for ax, title in zip(axes.flat, figure.panels, strict=False):
            panel = panels[title]
            series = fetch(api, panel, start, end, step, values)
            counts[title] = len(series)
            _style(ax, f"{title}")
            if not series:
                ax.text(0.5, 0.5, "No data", ha="center", va="center", transform=ax.transAxes, color="#888888")
            elif panel.type == "bargauge":
                draw_bargauge(ax, panel, series)
            else:
                draw_timeseries(ax, panel, series)
        for ax in list(axes.flat)[len(figure.panels):]:
            ax.set_visible(False)
        path = out / figure.file
        _save(fig, path)
        drawn[path] = counts
    return drawn


def render_live(out: Path, *, requests: int = 300, time_scale: float = 0.1, concurrency: int = 16,
                rate_interval: str = "30s", page: bool = True) -> dict[Path, dict[str, int]]:
    """A ``streamscope demo`` run under a real Prometheus (rules loaded) on loopback, then :func:`render`,
    and (``page``) ``page_shot.capture_page`` of the demo's page (counted as one panel, ``demo page``).

    The range is the run itself: from the demo's start to the moment its last request was scraped.
    """
    with tempfile.TemporaryDirectory(prefix="streamscope-render-") as tmp:
        with live.DemoChild(requests, time_scale=time_scale, concurrency=concurrency) as demo, \
                live.PromServer(Path(tmp), demo.port, rule_files=[HERE / generate.RULES_FILE]) as prom:
            prom.wait_ready()
            end = live.settle(prom, demo, timeout=600)
            if not demo.as_designed:
                print("warning: some demo requests got another class than designed", file=sys.stderr)
            note = (f"streamscope demo, {requests} requests, time scaled x{time_scale:g} "
                    f"(1 s here = {1 / time_scale:g} s unscaled)")
            drawn = render(prom.url, demo.started, end, out, rate_interval=rate_interval, note=note)
            if page:  # drawn into `out` by render() already
                drawn[page_shot.capture_page(page_shot.page_url(demo.output), out / page_shot.FILE)] = {"demo page": 1}
            return drawn


def _duration(text: str) -> float:
    """``90s``, ``15m``, ``2h`` → seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smh])", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration like 90s, 15m or 2h: {text!r}")
    return float(match.group(1)) * {"s": 1, "m": 60, "h": 3600}[match.group(2)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prometheus", metavar="URL", help="a Prometheus server's base URL")
    source.add_argument("--live", action="store_true",
                        help="run `streamscope demo` under a real Prometheus on loopback and draw that run")
    parser.add_argument("--since", type=_duration, default=_duration("1h"),
                        help="with --prometheus: the range, ending now (default 1h)")
    parser.add_argument("--rate-interval", help="what $__rate_interval stands for (default: 1m; --live: 30s)")
    parser.add_argument("--requests", type=int, default=300, help="with --live: requests in the demo run")
    parser.add_argument("-o", "--output", type=Path, default=HERE.parent / "docs" / "img",
                        help="directory for the PNG files (default docs/img)")
    args = parser.parse_args(argv)
    if args.live:
        drawn = render_live(args.output, requests=args.requests, rate_interval=args.rate_interval or "30s")
    else:
        end = time.time()
        drawn = render(args.prometheus, end - args.since, end, args.output, rate_interval=args.rate_interval or "1m")
    empty = [f"{path.name}: {title}" for path, counts in drawn.items() for title, n in counts.items() if not n]
    for path in drawn:
        print(f"wrote {path} ({path.stat().st_size // 1024} KB)")
    for name in empty:
        print(f"no data: {name}", file=sys.stderr)
    return 1 if empty else 0


if __name__ == "__main__":
    sys.exit(main())
