"""`AnthropicInstrumentor`: turns streamscope on for the `anthropic` SDK.

A standard OpenTelemetry `BaseInstrumentor`, registered under the `opentelemetry_instrumentor`
entry point, so `opentelemetry-instrument python app.py` turns it on with no code change.

Turning on never fails on configuration it read itself: OpenTelemetry's loader stops at the
first instrumentor that raises, so a bad budget file is one error line and streamscope runs
observe-only, instead of a traceback that also leaves every later instrumentor off.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Collection, Mapping
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.trace import Tracer

from . import internal
from ._version import __version__
from .adapters.anthropic import AnthropicAdapter
from .budgets import CONFIG_ENV, BudgetFileError, Budgets, BudgetTable
from .exporters.metrics import MetricsWriter
from .internal import logger
from .pipeline import Pipeline
from .record import RequestInfo
from .recorder import StreamRecorder

try:
    from opentelemetry.metrics._internal import _ProxyMeterProvider
except ImportError:  # pragma: no cover - an API without it: the no-op class is the only tell
    _ProxyMeterProvider = metrics.NoOpMeterProvider  # type: ignore[assignment,misc]

_INSTRUMENTS = ("anthropic >= 2.10",)
_NOOP_TRACER_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_NOOP_METER_PROVIDERS = (_ProxyMeterProvider, metrics.NoOpMeterProvider)


class AnthropicInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Instrument every streamed Messages call of the `anthropic` SDK.

    `instrument(tracer_provider=None, meter_provider=None, budgets=None, max_models=None,
    max_routes=None)`: `budgets` is one `Budgets` or a mapping with keys `"default"`,
    `"route:<name>"`, `"model:<glob>"` (a bad one raises); without it the TOML file named by
    `STREAMSCOPE_CONFIG` is read (if set): a file that cannot be used is logged as one error (logger
    `streamscope`) and streamscope runs observe-only, with no budgets. `max_models` / `max_routes`
    cap the distinct model and route values the metrics carry (beyond the cap they become `other`);
    default `STREAMSCOPE_MAX_MODELS` / `STREAMSCOPE_MAX_ROUTES`, else 64 each. Where no SDK provider
    receives the spans or metrics, the first streamed call logs one warning saying so.
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
        tracer_provider = kwargs.get("tracer_provider")
        meter_provider = kwargs.get("meter_provider")
        tracer = trace.get_tracer("streamscope", __version__, tracer_provider=tracer_provider)
        budgets: Budgets | Mapping[str, Budgets] | None = kwargs.get("budgets")
        # An explicit `budgets=` is code: a mistake there raises, at the call that made it.
        table = BudgetTable.from_config(budgets) if budgets is not None else _budgets_from_environment()
        meter = metrics.get_meter("streamscope", __version__, meter_provider=meter_provider)
        self.metrics = MetricsWriter(meter, max_models=kwargs.get("max_models"), max_routes=kwargs.get("max_routes"))
        internal.add_counter(self.metrics.internal_errors)
        self.pipeline = _Pipeline(tracer, table, self.metrics,
                                  check_spans=tracer_provider is None, check_metrics=meter_provider is None)
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


def _budgets_from_environment() -> BudgetTable:
    """The budget file's table; no budgets (observe-only) after one error line if it is unusable.

    Never raises: under `opentelemetry-instrument` an exception here would stop OpenTelemetry's
    loader, leaving later instrumentors off, and print tracebacks that bury the file's problem."""
    try:
        return BudgetTable.from_environment()
    except BudgetFileError as exc:
        logger.error("streamscope: budgets are OFF, running observe-only (spans and metrics, no budget enforced) "
                     "until this is fixed and the process restarted: %s", exc)
    except Exception:
        internal.internal_error(f"reading the budget file ({CONFIG_ENV}); budgets are OFF")
    return BudgetTable()


class _Pipeline(Pipeline):
    """The pipeline, which checks once, at the first instrumented call, that its spans and metrics
    go somewhere.

    Why then and not in `instrument()`: code often instruments first and sets its providers after
    (OpenTelemetry's proxy providers forward to them from then on), which is not a mistake. Under
    `opentelemetry-instrument` the distro sets the providers before any instrumentor is loaded, so
    they are there by the first call either way. Only the global providers are checked: one passed
    to `instrument()` is the caller's explicit choice, even a no-op one. Nothing is checked with
    `OTEL_SDK_DISABLED=true` (telemetry off on purpose)."""

    def __init__(self, tracer: Tracer, budgets: BudgetTable, metrics_writer: MetricsWriter, *, check_spans: bool,
                 check_metrics: bool) -> None:
        super().__init__(tracer, budgets, metrics_writer)
        disabled = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
        self._check: tuple[bool, bool] | None = (
            None if disabled or not (check_spans or check_metrics) else (check_spans, check_metrics)
        )
        self._check_lock = threading.Lock()
        internal.renew_lock_after_fork(self, "_check_lock")

    def open(self, request: RequestInfo, t0: float | None = None) -> StreamRecorder | None:
        if self._check is not None:
            self._check_providers()
        return super().open(request, t0)

    def _check_providers(self) -> None:
        with self._check_lock:
            check, self._check = self._check, None
        if check is None:
            return
        try:
            spans, measures = check
            nowhere = [name for name, unset in (
                ("spans", spans and isinstance(trace.get_tracer_provider(), _NOOP_TRACER_PROVIDERS)),
                ("metrics", measures and isinstance(metrics.get_meter_provider(), _NOOP_METER_PROVIDERS)),
            ) if unset]
            if nowhere:
                logger.warning(_no_provider_message(nowhere))
        except Exception:
            internal.internal_error("checking the OpenTelemetry providers")


def _no_provider_message(nowhere: list[str]) -> str:
    providers = {"spans": "tracer provider", "metrics": "meter provider"}
    what = " and ".join(nowhere)
    which = " or ".join(providers[n] for n in nowhere)
    return (f"streamscope: {what} go nowhere: no OpenTelemetry SDK {which} is configured (budgets, "
            f"if any, are still enforced). With opentelemetry-instrument: pip install opentelemetry-distro "
            f"opentelemetry-exporter-otlp (the distro sets up the SDK from OTEL_TRACES_EXPORTER, "
            f"OTEL_METRICS_EXPORTER, ...). In code: call streamscope.telemetry.setup() (pip install "
            f"'streamscope[telemetry]'), or set the global "
            f"providers, or pass tracer_provider= / meter_provider= to instrument(). Logged once.")
