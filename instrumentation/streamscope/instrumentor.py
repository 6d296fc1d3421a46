"""`AnthropicInstrumentor`: turns streamscope on for the `anthropic` SDK.

A standard OpenTelemetry `BaseInstrumentor`, registered under the `opentelemetry_instrumentor`
entry point, so `opentelemetry-instrument python app.py` turns it on with no code change.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from . import internal
from ._version import __version__
from .adapters.anthropic import AnthropicAdapter
from .budgets import Budgets, BudgetTable
from .exporters.metrics import MetricsWriter
from .pipeline import Pipeline

_INSTRUMENTS = ("anthropic >= 2.10",)


class AnthropicInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Instrument every streamed Messages call of the `anthropic` SDK.

    `instrument(tracer_provider=None, meter_provider=None, budgets=None, max_models=None,
    max_routes=None)`: `budgets` is one `Budgets` or a mapping with keys `"default"`,
    `"route:<name>"`, `"model:<glob>"`; without it the TOML file named by `STREAMSCOPE_CONFIG` is
    read (if set). `max_models` / `max_routes` cap the distinct model and route values the metrics
    carry (beyond the cap they become `other`); default `STREAMSCOPE_MAX_MODELS` /
    `STREAMSCOPE_MAX_ROUTES`, else 64 each.
    """

    def __init__(self) -> None:
        super().__init__()
        if "pipeline" in self.__dict__:
            return  # BaseInstrumentor is a singleton: `AnthropicInstrumentor()` again must keep its state
        self._adapter: AnthropicAdapter | None = None
        self.pipeline: Pipeline | None = None
        self.metrics: MetricsWriter | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _INSTRUMENTS

    def _instrument(self, **kwargs: Any) -> None:
        tracer = trace.get_tracer("streamscope", __version__, tracer_provider=kwargs.get("tracer_provider"))
        budgets: Budgets | Mapping[str, Budgets] | None = kwargs.get("budgets")
        table = BudgetTable.from_config(budgets) if budgets is not None else BudgetTable.from_environment()
        meter = metrics.get_meter("streamscope", __version__, meter_provider=kwargs.get("meter_provider"))
        self.metrics = MetricsWriter(meter, max_models=kwargs.get("max_models"), max_routes=kwargs.get("max_routes"))
        internal.add_counter(self.metrics.internal_errors)
        self.pipeline = Pipeline(tracer, table, self.metrics)
        self._adapter = AnthropicAdapter(self.pipeline)
        self._adapter.install()

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._adapter is not None:
            self._adapter.uninstall()
        self._adapter = None
        if self.metrics is not None:
            internal.remove_counter(self.metrics.internal_errors)
        self.metrics = None
        self.pipeline = None
