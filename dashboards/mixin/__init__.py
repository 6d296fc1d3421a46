"""streamscope's monitoring mixin: Grafana dashboards and Prometheus rules, generated in Python.

Laid out like a monitoring mixin, one concern per module:

- ``config``: :class:`Config`, every threshold, selector, window and Grafana setting (overridable)
- ``names``: Prometheus metric and label names, derived from the exporter's instruments
- ``queries``: PromQL building blocks and the expressions rules and panels share
- ``rules``: recording rules; ``alerts``: alerting rules
- ``panels``: panel builders; ``rows``: the triage dashboard's rows; ``dashboards``: the dashboards
- ``descriptions``: panel descriptions and runbook links
- ``output``: the files written, and every panel query as Prometheus receives it

``dashboards/generate.py`` is the command line.
"""

from __future__ import annotations

from .config import DEFAULT, Config, ConfigError, defaults_toml, from_mapping, load
from .dashboards import DASHBOARDS, dashboard_model, triage_dashboard
from .descriptions import runbook
from .output import (
    RULES_FILE,
    SUBSTITUTIONS,
    PanelExpression,
    panel_expressions,
    panels,
    render_rules,
    rendered_files,
    rules_document,
    stale_files,
    substitute,
)

__all__ = [
    "DASHBOARDS", "DEFAULT", "RULES_FILE", "SUBSTITUTIONS", "Config", "ConfigError", "PanelExpression",
    "dashboard_model", "defaults_toml", "from_mapping", "load", "panel_expressions", "panels",
    "render_rules", "rendered_files", "rules_document", "runbook", "stale_files", "substitute",
    "triage_dashboard",
]
