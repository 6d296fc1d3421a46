"""The dashboards: variables, rows and the JSON model Grafana imports.

Why the variables narrow each other (provider, then model, then route): a model list spanning
every provider is long, and a route is configured per model. Every panel query matches all three,
and the config's selector, so the dashboard shows exactly what the alerts count.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as dash_m

from .config import DEFAULT, Config
from .descriptions import DASHBOARD
from .names import MODEL, PROVIDER, REQUESTS, ROUTE
from .panels import DATASOURCE, TRACE_DATASOURCE
from .queries import DASHBOARD_VARIABLES, vector
from .rows import ROWS

Build = Callable[[Config], dash_b.Dashboard]


def _query_variable(name: str, label: str, query: str) -> dash_b.QueryVariable:
    """A filter variable: multi-select, All = ``.*`` so an absent label still matches.

    The id is the name: the SDK's default id is one fixed UUID for every variable, and
    Grafana's variable store keys variables by id.
    """
    return (
        dash_b.QueryVariable(name)
        .id(name)
        .label(label)
        .query(query)
        .datasource(DATASOURCE)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .current(dash_m.VariableOption(selected=True, text=["All"], value=["$__all"]))
        .refresh(dash_m.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dash_m.VariableSort.ALPHABETICAL_ASC)
    )


def _datasource_variable(cfg: Config) -> dash_b.DatasourceVariable:
    """The Prometheus to query; the config may preselect one by name or narrow the choice."""
    var = dash_b.DatasourceVariable("datasource").id("datasource").label("Data source").type("prometheus")
    if cfg.datasource:
        var = var.current(dash_m.VariableOption(selected=True, text=cfg.datasource, value=cfg.datasource))
    if cfg.datasource_regex:
        var = var.regex(cfg.datasource_regex)
    return var


def _trace_datasource_variable() -> dash_b.DatasourceVariable:
    """The trace store the latency panels' exemplars lead to (see ``panels.TRACE_DATASOURCE``)."""
    return (
        dash_b.DatasourceVariable(TRACE_DATASOURCE)
        .id(TRACE_DATASOURCE)
        .label("Traces")
        .type("tempo")
        .description("Where exemplars' traces are: the Tempo datasource the Prometheus datasource's "
                     "exemplar links (trace_id) point at.")
    )


def variables(cfg: Config) -> list[Builder[dash_m.VariableModel]]:
    """Datasource, then provider -> model -> route, each narrowing the next one's choices; last,
    the trace datasource for exemplars."""
    provider, model, _route = DASHBOARD_VARIABLES
    within = cfg.matchers
    return [
        _datasource_variable(cfg),
        _query_variable("provider", "Provider", f"label_values({vector(REQUESTS, within)}, {PROVIDER})"),
        _query_variable("model", "Model", f"label_values({vector(REQUESTS, within, provider)}, {MODEL})"),
        _query_variable("route", "Route", f"label_values({vector(REQUESTS, within, provider, model)}, {ROUTE})"),
        _trace_datasource_variable(),
    ]


def triage_dashboard(cfg: Config = DEFAULT) -> dash_b.Dashboard:
    """The on-call dashboard: what is failing, where the time goes, are the budgets right."""
    board = (
        dash_b.Dashboard(cfg.dashboard_title)
        .uid(cfg.dashboard_uid)
        .description(DASHBOARD)
        .tags(list(cfg.dashboard_tags))
        .editable()
        .time(cfg.time_from, "now")
        .refresh(cfg.refresh)
        .timezone("browser")
        .tooltip(dash_m.DashboardCursorSync.CROSSHAIR)
        .annotations([])
        .variables(variables(cfg))
        .link(
            dash_b.DashboardLink("Runbooks")
            .type(dash_m.DashboardLinkType.LINK)
            .url(cfg.runbook_url)
            .icon("doc")
            .target_blank(True)
        )
    )
    for title, panels in ROWS:
        # An expanded row owns the panels that follow it; panels put *inside* a row are only
        # kept by Grafana when the row is collapsed.
        board = board.with_row(dash_b.Row(title))
        for panel in panels(cfg):
            board = board.with_panel(panel)
    return board


#: Every dashboard the mixin writes: file name -> builder.
DASHBOARDS: Mapping[str, Build] = {
    "streamscope-triage.json": triage_dashboard,
}


def dashboard_model(build: Build = triage_dashboard, cfg: Config = DEFAULT) -> dict[str, Any]:
    """The dashboard as plain JSON data, with stable panel ids (Grafana needs unique ids)."""
    model = json.loads(json.dumps(build(cfg).build(), cls=JSONEncoder))
    for panel_id, panel in enumerate(model["panels"], start=1):
        panel["id"] = panel_id
    return model


def render_dashboard(build: Build, cfg: Config = DEFAULT) -> str:
    """Sorted keys and fixed indentation: the staleness check compares text."""
    return json.dumps(dashboard_model(build, cfg), sort_keys=True, indent=2) + "\n"
