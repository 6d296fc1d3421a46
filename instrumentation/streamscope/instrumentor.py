"""`AnthropicInstrumentor` and `OpenAIInstrumentor`: turn streamscope on for one SDK each.

Standard OpenTelemetry `BaseInstrumentor`s, registered under the `opentelemetry_instrumentor`
entry point, so `opentelemetry-instrument python app.py` turns on whichever SDK is installed with
no code change. They share everything but the adapter they install and the SDK they require;
each has its own pipeline, so either can be on alone, or both side by side.

Turning on never fails on configuration it read itself: OpenTelemetry's loader stops at the
first instrumentor that raises, so a bad budget file is one error line and streamscope runs
observe-only, instead of a traceback that also leaves every later instrumentor off. For the same
reason a keyword `instrument()` does not take (`budget=` for `budgets=`) is one warning line
naming the keyword probably meant, and is ignored: `**kwargs` would otherwise swallow it silently.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Collection, Mapping
from typing import Any

from opentelemetry import _logs, metrics, trace
from opentelemetry.instrumentation.dependencies import DependencyConflictError, get_dependency_conflicts
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.trace import Tracer

from ._version import __version__
from .adapters.anthropic import AnthropicAdapter
from .adapters.openai import OpenAIAdapter
from .adapters.stainless import watch_below_floor
from .adapters.stainless.patches import Patches
from .breaker import Breaker, BreakerTable
from .budgets.config_file import read_budget_file, read_toml
from .budgets.table import CONFIG_ENV, BudgetFileError, Budgets, BudgetTable
from .core import fleet_signals, keywords
from .core import guard as internal
from .core.calls import Call, Helpers
from .core.guard import logger
from .core.record import RequestInfo
from .export import stream_log
from .export.fleet_metrics import FleetMetrics
from .export.metrics import NOOP_METER_PROVIDERS, MetricsWriter
from .pipeline import Pipeline, say_unobserved
from .pricing import PriceTable, load_shipped

_NOOP_TRACER_PROVIDERS = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
KEYWORDS = ("tracer_provider", "meter_provider", "logger_provider", "budgets", "breaker", "max_models", "max_routes",
            "stream_logs", "prices")
"""What `instrument()` reads (`_instrument`'s `kwargs.get`): a new keyword goes here too."""
OPENTELEMETRY_KEYWORDS = ("skip_dep_check", "raise_exception_on_conflict")
"""What OpenTelemetry's `BaseInstrumentor.instrument` reads itself (`opentelemetry-instrument`'s
loader passes `skip_dep_check=True`)."""


# BaseInstrumentor is Any to mypy (pyproject's [tool.mypy] overrides say why): subclassing it is the point.
class StreamscopeInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """What both instrumentors share; a subclass names its SDK (`_instruments`) and its adapter.

    `instrument(tracer_provider=None, meter_provider=None, logger_provider=None, budgets=None,
    max_models=None, max_routes=None, stream_logs=None)`: `budgets` is one `Budgets` or a mapping
    with keys `"default"`, `"route:<name>"`, `"model:<glob>"` (a bad one raises); without it the
    TOML file named by `STREAMSCOPE_CONFIG` is read (if set): a file that cannot be used is logged as
    one error (logger `streamscope`) and streamscope runs observe-only, with no budgets. `max_models`
    / `max_routes` cap the distinct model and route values the metrics carry (beyond the cap they
    become `other`); default `STREAMSCOPE_MAX_MODELS` / `STREAMSCOPE_MAX_ROUTES`, else 64 each.
    `stream_logs`: one `streamscope.streams` log record per streamed call (not a bool raises); when
    not given, `STREAMSCOPE_STREAM_LOGS` (`true` / `false`), else the file's `[logs] streams`, else
    off. `logger_provider`: where the opt-in content event goes (else the global one). Where no SDK
    provider receives the spans or metrics, the first streamed call logs one warning saying so.
    `breaker`: the circuit breaker, one `Breaker` or a mapping with keys `"default"`,
    `"route:<name>"`, `"model:<glob>"` (a `None` value: no breaker there; a bad one raises); without
    it the `[breaker]` tables of the `STREAMSCOPE_CONFIG` file (a bad one: one error line, and no
    breaker); without either, no breaker. `prices`: the user's prices in US dollars per million
    tokens by model glob (`{"claude-sonnet-4-5*": {"input": 3.0, "output": 15.0}}`; keys `input`,
    `output`, `cache_write`, `cache_write_1h`, `cache_read`), merged over the file's
    `[prices."<glob>"]` tables, both over the shipped price table; a bad entry is one warning line
    and is left out.
    """

    _instruments: tuple[str, ...] = ()
    _endpoints: tuple[str, ...] = ()
    """The paths of the SDK's streaming endpoints (counted where the SDK is below the floor)."""

    def __init__(self) -> None:
        super().__init__()
        if "pipeline" in self.__dict__:
            return  # BaseInstrumentor is a singleton per class: a second `XInstrumentor()` must keep its state
        self._adapter: AnthropicAdapter | OpenAIAdapter | None = None
        self.pipeline: Pipeline | None = None
        self.metrics: MetricsWriter | None = None
        self._below_floor: Patches | None = None
        """Where the SDK is below the supported floor: the hooks that count its streamed calls."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return self._instruments

    def _make_adapter(self, pipeline: Pipeline) -> AnthropicAdapter | OpenAIAdapter:
        raise NotImplementedError

    def _instrument(self, **kwargs: Any) -> None:
        # The dist's `instruments-any` extra lets OpenTelemetry's loader through when any one SDK
        # is installed, and it then skips the per-instrumentor check: this is that check.
        conflict = get_dependency_conflicts(self.instrumentation_dependencies())
        if conflict is not None:
            raise DependencyConflictError(conflict)
        tracer_provider = kwargs.get("tracer_provider")
        meter_provider = kwargs.get("meter_provider")
        tracer = trace.get_tracer("streamscope", __version__, tracer_provider=tracer_provider)
        budgets: Budgets | Mapping[str, Budgets] | None = kwargs.get("budgets")
        # An explicit `budgets=` is code: a mistake there raises, at the call that made it.
        table = BudgetTable.from_config(budgets) if budgets is not None else _budgets_from_environment()
        stream_logs = _stream_logs(kwargs.get("stream_logs"), file_reported=budgets is None)
        breaker: Breaker | Mapping[str, Breaker | None] | None = kwargs.get("breaker")
        breakers = BreakerTable.from_config(breaker) if breaker is not None else _breaker_from_environment()
        events = _logs.get_logger("streamscope", __version__, logger_provider=kwargs.get("logger_provider"))
        meter = metrics.get_meter("streamscope", __version__, meter_provider=meter_provider)
        self.metrics = MetricsWriter(meter, max_models=kwargs.get("max_models"), max_routes=kwargs.get("max_routes"))
        _count_internal_errors(self.metrics.internal_errors, +1)
        fleet_signals.attach(meter, functools.partial(FleetMetrics, meter), tracer)
        prices = PriceTable.configure(kwargs.get("prices"), _prices_from_environment())
        load_shipped()  # here, once, rather than at some stream's end (an event loop's streams would wait)
        self.pipeline = _Pipeline(tracer, table, self.metrics, stream_logs=stream_logs, events=events,
                                  check_spans=tracer_provider is None, check_metrics=meter_provider is None,
                                  breakers=breakers, prices=prices)
        self._adapter = self._make_adapter(self.pipeline)
        if not self._adapter.install_or_log():  # all or nothing: the SDK is as it was, and so is streamscope
            self._adapter = None
            _count_internal_errors(self.metrics.internal_errors, -1)
            fleet_signals.detach(meter, tracer)
            self.metrics = None
            self.pipeline = None

    def instrument(self, **kwargs: Any) -> None:
        """`BaseInstrumentor.instrument`; where the SDK could not be instrumented (one error line
        says why), streamscope stays uninstrumented, so a later `instrument()` tries again. An
        unknown keyword is one warning line (did-you-mean) and is ignored: never raised, since a
        zero-code loader stops at the first instrumentor that raises."""
        self._warn_unknown(kwargs)
        self._watch_below_floor(kwargs)
        super().instrument(**kwargs)
        if self._adapter is None and self.is_instrumented_by_opentelemetry:
            self._is_instrumented_by_opentelemetry = False

    def uninstrument(self, **kwargs: Any) -> None:
        """`BaseInstrumentor.uninstrument`, and the counting of an SDK below the floor off."""
        if self._below_floor is not None:
            self._below_floor.undo()
            self._below_floor = None
        super().uninstrument(**kwargs)

    def _watch_below_floor(self, kwargs: Mapping[str, Any]) -> None:
        """An SDK installed below the supported floor is left exactly as it is (OpenTelemetry's check
        says so in one line), but its streamed calls are counted in `streamscope.unobserved_calls`
        and said once: never silently blind."""
        try:
            if self._below_floor is not None or self.is_instrumented_by_opentelemetry:
                return
            conflict = get_dependency_conflicts(self.instrumentation_dependencies())
            found = getattr(conflict, "found", None) if conflict is not None else None
            if not found:  # supported, or not installed at all
                return
            sdk = self._instruments[0].split()[0]
            meter = metrics.get_meter("streamscope", __version__, meter_provider=kwargs.get("meter_provider"))
            writer = MetricsWriter(meter)

            def count() -> None:
                writer.unobserved(sdk, sdk)
                say_unobserved(sdk, sdk, "below_floor", str(found))

            self._below_floor = watch_below_floor(self._endpoints, count)
        except Exception:
            internal.internal_error("instrumentor.below_floor")

    def _warn_unknown(self, kwargs: Mapping[str, Any]) -> None:
        try:
            wrong = keywords.unknown(kwargs, (*KEYWORDS, *OPENTELEMETRY_KEYWORDS))
            if wrong:
                logger.warning("streamscope: %s", keywords.message(
                    f"{type(self).__name__}().instrument()", wrong, KEYWORDS, ignored=True))
        except Exception:
            internal.internal_error("checking instrument()'s keywords")

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._adapter is not None:
            self._adapter.uninstall()
        self._adapter = None
        if self.metrics is not None:
            _count_internal_errors(self.metrics.internal_errors, -1)
            fleet_signals.detach(self.metrics.meter, self.pipeline.spans.tracer if self.pipeline else None)
        self.metrics = None
        self.pipeline = None


class AnthropicInstrumentor(StreamscopeInstrumentor):
    """Instrument every streamed Messages call of the `anthropic` SDK (see `StreamscopeInstrumentor`
    for `instrument()`'s arguments)."""

    _instruments = ("anthropic >= 0.75",)
    _endpoints = ("/v1/messages",)

    def _make_adapter(self, pipeline: Pipeline) -> AnthropicAdapter:
        return AnthropicAdapter(pipeline)


class OpenAIInstrumentor(StreamscopeInstrumentor):
    """Instrument every streamed Chat Completions and Responses call of the `openai` SDK (see
    `StreamscopeInstrumentor` for `instrument()`'s arguments)."""

    _instruments = ("openai >= 1.92",)
    _endpoints = ("/chat/completions", "/responses")

    def _make_adapter(self, pipeline: Pipeline) -> OpenAIAdapter:
        return OpenAIAdapter(pipeline)


_counter_users: dict[int, int] = {}
"""How many instrumentors count internal errors on each `streamscope.internal_errors` instrument."""


def _count_internal_errors(counter: Any, change: int) -> None:
    """Register the instrument once however many instrumentors share it (both on one meter provider
    get the same one): an internal error is counted once, and until the last of them is off."""
    users = _counter_users.get(id(counter), 0) + change
    if users > 0 and users - change == 0:
        internal.add_counter(counter)
    elif users <= 0 and users - change > 0:
        internal.remove_counter(counter)
    if users > 0:
        _counter_users[id(counter)] = users
    else:
        _counter_users.pop(id(counter), None)


def _budgets_from_environment() -> BudgetTable:
    """The budget file's table; no budgets (observe-only) after one error line if it is unusable
    (one per process: each instrumentor reads the file, and says nothing the other said).

    Never raises: under `opentelemetry-instrument` an exception here would stop OpenTelemetry's
    loader, leaving later instrumentors off, and print tracebacks that bury the file's problem."""
    try:
        return BudgetTable.from_environment()
    except BudgetFileError as exc:
        message = ("streamscope: budgets are OFF, running observe-only (spans and metrics, no budget enforced) "
                   f"until this is fixed and the process restarted: {exc}")
        if message not in _WARNED:
            _WARNED.add(message)
            logger.error(message)
    except Exception:
        internal.internal_error(f"reading the budget file ({CONFIG_ENV}); budgets are OFF")
    return BudgetTable()


def _breaker_from_environment() -> BreakerTable:
    """The `[breaker]` tables of the `STREAMSCOPE_CONFIG` file; no breaker after one error line if
    they (or the file) cannot be used. Never raises (see `_budgets_from_environment`)."""
    try:
        return BreakerTable.from_environment()
    except BudgetFileError as exc:
        _say_once(logger.error, "streamscope: the circuit breaker is OFF until this is fixed and the process "
                                f"restarted: {exc}")
    except Exception:
        internal.internal_error(f"reading the config file ({CONFIG_ENV}); the circuit breaker is OFF")
    return BreakerTable()


def _prices_from_environment() -> object:
    """The `[prices]` table of the `STREAMSCOPE_CONFIG` file (checked by `PriceTable.configure`);
    None when there is none or the file cannot be read (the budgets' reading says why, once)."""
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return None
    try:
        return read_toml(path, env=CONFIG_ENV).get("prices")
    except Exception:
        return None


def _stream_logs(value: object, *, file_reported: bool) -> bool:
    """Whether each streamed call writes its stream log record: `instrument(stream_logs=...)`, else
    `STREAMSCOPE_STREAM_LOGS`, else the `STREAMSCOPE_CONFIG` file's `[logs] streams`, else off.

    An explicit argument that is not a bool raises (it is code); a bad variable is one warning and
    is skipped; a file that cannot be used is one error line (none more where `_budgets_from_environment`
    already reported that file: `file_reported`) and the records stay off."""
    if value is not None:
        if not isinstance(value, bool):
            raise TypeError(f"instrument(stream_logs=...) takes True or False, not {type(value).__name__} {value!r}")
        return value
    raw = os.environ.get(stream_log.ENV, "").strip()
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    if raw:
        _say_once(logger.warning, f"streamscope: ignoring {stream_log.ENV}={raw!r} (it takes true or false); "
                                  f"using the {CONFIG_ENV} file's [logs] streams if any, else stream logs are off")
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return False
    try:
        return read_budget_file(path, env=CONFIG_ENV).logs.get("streams", False)
    except BudgetFileError as exc:
        if not file_reported:
            _say_once(logger.error, "streamscope: stream log records are OFF until this is fixed and the process "
                                    f"restarted: {exc}")
    except Exception:
        internal.internal_error(f"reading the config file ({CONFIG_ENV}); stream log records are OFF")
    return False


def _say_once(log: Any, message: str) -> None:
    if message not in _WARNED:
        _WARNED.add(message)
        log(message)


class _Pipeline(Pipeline):
    """The pipeline, which checks once, at the first instrumented call, that its spans and metrics
    go somewhere.

    Why then and not in `instrument()`: code often instruments first and sets its providers after
    (OpenTelemetry's proxy providers forward to them from then on), which is not a mistake. Under
    `opentelemetry-instrument` the distro sets the providers before any instrumentor is loaded, so
    they are there by the first call either way. Only the global providers are checked: one passed
    to `instrument()` is the caller's explicit choice, even a no-op one. Nothing is checked with
    `OTEL_SDK_DISABLED=true` (telemetry off on purpose)."""

    def __init__(self, tracer: Tracer, budgets: BudgetTable, metrics_writer: MetricsWriter, *, stream_logs: bool,
                 events: _logs.Logger, check_spans: bool, check_metrics: bool,
                 breakers: BreakerTable | None = None, prices: PriceTable | None = None) -> None:
        super().__init__(tracer, budgets, metrics_writer, stream_logs=stream_logs, events=events, breakers=breakers,
                         prices=prices)
        disabled = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
        self._check: tuple[bool, bool] | None = (
            None if disabled or not (check_spans or check_metrics) else (check_spans, check_metrics)
        )
        self._check_lock = threading.Lock()
        internal.renew_lock_after_fork(self, "_check_lock")

    def open(self, request: RequestInfo, t0: float | None = None, helpers: Helpers | None = None,
             client: object = None) -> Call | None:
        if self._check is not None:
            self._check_providers()
        return super().open(request, t0, helpers, client)

    def _check_providers(self) -> None:
        with self._check_lock:
            check, self._check = self._check, None
        if check is None:
            return
        try:
            spans, measures = check
            nowhere = [name for name, unset in (
                ("spans", spans and isinstance(trace.get_tracer_provider(), _NOOP_TRACER_PROVIDERS)),
                ("metrics", measures and isinstance(metrics.get_meter_provider(), NOOP_METER_PROVIDERS)),
            ) if unset]
            message = _no_provider_message(nowhere) if nowhere else None
            if message is not None and message not in _WARNED:  # once per process, whichever SDK saw it first
                _WARNED.add(message)
                logger.warning(message)
        except Exception:
            internal.internal_error("checking the OpenTelemetry providers")


_WARNED: set[str] = set()


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
