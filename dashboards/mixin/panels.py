"""Panel builders: one look for every panel of a kind, so rows only say what to show.

Why: a threshold line, a legend or a colour decided once here reads the same on every panel.
Each builder takes the panel's title and looks its description up in :mod:`.descriptions`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, TypeVar

from grafana_foundation_sdk.builders import bargauge, heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.variants import Dataquery
from grafana_foundation_sdk.models import common as common_m
from grafana_foundation_sdk.models import dashboard as dash_m
from grafana_foundation_sdk.models import heatmap as heatmap_m
from grafana_foundation_sdk.models import prometheus as prometheus_m

from .descriptions import describe
from .names import BUDGET, LIMIT, MODEL, ROUTE, legend
from .queries import PER_BUDGET_KEY, PER_MODEL, RATE_INTERVAL, Metric, aggregate, quantile, vector

DATASOURCE = dash_m.DataSourceRef(type_val="prometheus", uid="${datasource}")
TRACE_DATASOURCE = "trace_datasource"
"""The dashboard variable naming the trace store (type datasource, Tempo) that exemplars lead to.
Grafana draws an exemplar's link from the Prometheus datasource's own settings (`exemplarTraceIdDestinations`:
the `trace_id` label, the Tempo datasource's uid); a dashboard cannot carry those, so it carries
what it can: `exemplar: true` on the latency queries, and this variable, which names (and lets
the viewer pick) the trace datasource those settings should point at."""
PanelBuilder = Builder[dash_m.Panel]
REF_IDS = "ABCDEFGHIJ"
DASHED = [dash_m.DynamicConfigValue(id_val="custom.lineStyle", value={"fill": "dash", "dash": [10, 10]})]
#: Fixed colours for the classes that are not failures, so neither reads as one at a glance (the
#: failure classes keep the palette; the bar gauge colours them by share). ``paused`` is a calm
#: blue: the server paused a long turn and the caller continues it, nothing failed.
CLASS_COLOURS: Mapping[str, str] = {"complete": "#7EB26D", "paused": "#8AB8FF"}


class Query(NamedTuple):
    """One panel query: PromQL plus the legend Grafana shows for it."""

    expr: str
    legend: str = ""


def targets(queries: Sequence[Query], fmt: prometheus_m.PromQueryFormat | None = None,
            instant: bool = False, exemplar: bool = False) -> list[Builder[Dataquery]]:
    """Prometheus queries with stable ref ids (A, B, ...) and the panel's datasource; ``exemplar``
    asks Prometheus for the exemplars of the series queried (the latency panels: a dot per traced
    call, linked to its trace by the Prometheus datasource's exemplar settings, see
    :data:`TRACE_DATASOURCE`)."""
    out: list[Builder[Dataquery]] = []
    for ref, q in zip(REF_IDS, queries, strict=False):
        t = prometheus.Dataquery().expr(q.expr).ref_id(ref).datasource(DATASOURCE)
        if exemplar:
            t = t.exemplar(True)
        t = t.legend_format(q.legend or "__auto")
        if fmt is not None:
            t = t.format(fmt)
        t = t.instant() if instant else t.range()
        out.append(t)
    return out


def threshold_steps(limit: float | None) -> dash_b.ThresholdsConfig:
    """Green base, red from ``limit`` (an alert threshold) when there is one."""
    steps = [dash_m.Threshold(value=None, color="green")]
    if limit is not None:
        steps.append(dash_m.Threshold(value=limit, color="red"))
    return dash_b.ThresholdsConfig().mode(dash_m.ThresholdsMode.ABSOLUTE).steps(steps)


P = TypeVar("P", timeseries.Panel, bargauge.Panel)


def class_colours(panel: P) -> P:
    """Overrides giving each class of :data:`CLASS_COLOURS` its colour (series named by class)."""
    for klass, colour in CLASS_COLOURS.items():
        panel = panel.override_by_name(
            klass, [dash_m.DynamicConfigValue(id_val="color", value={"mode": "fixed", "fixedColor": colour})]
        )
    return panel


def graph(title: str, queries: Sequence[Query], unit: str, *, width: int = 8, height: int = 8,
          stacked: bool = False, threshold: float | None = None, dashed_series: str | None = None,
          axis_label: str = "", exemplar: bool = False) -> timeseries.Panel:
    """A time-series panel; ``threshold`` draws an alert threshold as a dashed red line."""
    panel = (
        timeseries.Panel()
        .title(title)
        .description(describe(title))
        .datasource(DATASOURCE)
        .targets(targets(queries, exemplar=exemplar))
        .unit(unit)
        .span(width)
        .height(height)
        .min(0)
        .fill_opacity(30 if stacked else 5)
        .legend(
            common_b.VizLegendOptions()
            .show_legend(True)
            .display_mode(common_m.LegendDisplayMode.LIST)
            .placement(common_m.LegendPlacement.BOTTOM)
        )
        .tooltip(
            common_b.VizTooltipOptions()
            .mode(common_m.TooltipDisplayMode.MULTI)
            .sort(common_m.SortOrder.DESCENDING)
        )
        .thresholds(threshold_steps(threshold))
        .color_scheme(dash_b.FieldColor().mode(dash_m.FieldColorModeId.PALETTE_CLASSIC))
    )
    if axis_label:
        panel = panel.axis_label(axis_label)
    if stacked:
        panel = panel.stacking(common_b.StackingConfig().mode(common_m.StackingMode.NORMAL))
    if threshold is not None:
        panel = panel.thresholds_style(
            common_b.GraphThresholdsStyleConfig().mode(common_m.GraphTresholdsStyleMode.DASHED)
        )
    if dashed_series is not None:
        panel = panel.override_by_regexp(dashed_series, DASHED)
    return panel


def quantiles(title: str, histogram: Metric, unit: str, matchers: Sequence[str],
              qs: Sequence[float] = (0.5, 0.95, 0.99), by: Sequence[str] = PER_MODEL,
              **kwargs: Any) -> timeseries.Panel:
    """Percentiles of one histogram per model: the shape of a phase, not just its average."""
    queries = [
        Query(quantile(q, histogram, RATE_INTERVAL, matchers, by), f"p{round(q * 100)} {legend(by)}")
        for q in qs
    ]
    return graph(title, queries, unit, **kwargs)


def budget_vs_p99(title: str, budget: str, observed: str, matchers: Sequence[str]) -> timeseries.Panel:
    """A budget in force (dashed) beside the observed p99 of the quantity it guards."""
    where = legend((MODEL, ROUTE))
    limit = aggregate(PER_BUDGET_KEY, vector(LIMIT, matchers, f'{BUDGET}="{budget}"'), op="max")
    return graph(title, [Query(limit, f"budget {where}"), Query(observed, f"p99 {where}")], "s",
                 dashed_series="^budget .*")


def share_bars(title: str, query: Query) -> bargauge.Panel:
    """Horizontal bars of shares (0..1) over the selected range, one per series."""
    return class_colours(
        bargauge.Panel()
        .title(title)
        .description(describe(title))
        .datasource(DATASOURCE)
        .targets(targets([query], instant=True))
        .unit("percentunit")
        .min(0)
        .max(1)
        .span(6)
        .height(8)
        .display_mode(common_m.BarGaugeDisplayMode.GRADIENT)
        .orientation(common_m.VizOrientation.HORIZONTAL)
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .thresholds(threshold_steps(None))
        .color_scheme(dash_b.FieldColor().mode(dash_m.FieldColorModeId.CONTINUOUS_GR_YL_RD))
    )


def big_number(title: str, query: Query, unit: str = "short", threshold: float | None = None) -> stat.Panel:
    """The latest value, large, with its recent history behind it; red from ``threshold`` (an
    alert threshold) when there is one."""
    return (
        stat.Panel()
        .title(title)
        .description(describe(title))
        .datasource(DATASOURCE)
        .targets(targets([query]))
        .unit(unit)
        .span(6)
        .height(8)
        .graph_mode(common_m.BigValueGraphMode.AREA)
        .color_mode(common_m.BigValueColorMode.VALUE)
        .reduce_options(common_b.ReduceDataOptions().calcs(["lastNotNull"]))
        .thresholds(threshold_steps(threshold))
    )


def instant_table(title: str, query: Query, unit: str, value_column: str) -> table.Panel:
    """One row per series at the range's end, labels as columns, the value renamed."""
    return (
        table.Panel()
        .title(title)
        .description(describe(title))
        .datasource(DATASOURCE)
        .targets(targets([query], fmt=prometheus_m.PromQueryFormat.TABLE, instant=True))
        .with_transformation(dash_m.DataTransformerConfig(
            id_val="organize",
            options={"excludeByName": {"Time": True}, "renameByName": {"Value": value_column}},
        ))
        .unit(unit)
        .span(12)
        .height(8)
        .show_header(True)
        .cell_height(common_m.TableCellHeight.SM)
    )


def bucket_heatmap(title: str, query: Query, unit: str) -> heatmap.Panel:
    """A histogram's buckets over time, as Prometheus already bucketed them (no recalculation)."""
    return (
        heatmap.Panel()
        .title(title)
        .description(describe(title))
        .datasource(DATASOURCE)
        .targets(targets([query], fmt=prometheus_m.PromQueryFormat.HEATMAP))
        .span(16)
        .height(8)
        .calculate(False)
        .y_axis(heatmap.YAxisConfig().unit(unit))
        .cell_values(heatmap.CellValues().unit("reqps"))
        .color(
            heatmap.HeatmapColorOptions()
            .mode(heatmap_m.HeatmapColorMode.SCHEME)
            .scheme("Oranges")
            .exponent(0.5)
            .steps(64)
            .fill("dark-orange")
        )
        .rows_frame(heatmap.RowsHeatmapOptions().layout(common_m.HeatmapCellLayout.LE))
        .show_tooltip()
        .show_legend()
    )
