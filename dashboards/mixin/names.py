"""Prometheus names of streamscope's metrics, derived from the exporter, never typed in.

Why: a dashboard that queries a name the exporter does not write shows "no data", not an error.
So the instruments are read off a real :class:`~streamscope.export.metrics.MetricsWriter` (its
cost counters included) and the :class:`~streamscope.export.outcomes.OutcomeWriter` beside it
(the retry helpers' and the relay's counts) and the
:class:`~streamscope.export.fleet_metrics.FleetMetrics` (resumes, the resume buffer, the shared
Redis store; all built on a meter that only notes what it is asked to create), and their
OpenTelemetry names and units become Prometheus names through the same helpers streamscope's
multiprocess exporter uses to match ``opentelemetry-exporter-prometheus``: dots to underscores, the unit as a suffix
(``_seconds``, ``_per_second``), ``_total`` on counters. Label names are the exporter's attribute
keys, sanitized the same way. ``tests/deploy/test_dashboards.py`` checks the result against a real scrape.

The GenAI client metrics have two sets of names: today's, and the ones the conventions are
moving to, which ``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental`` turns on (see
``streamscope.export.metrics``). A process emits one set, a fleet may emit both, so every query
over them names both (:data:`Either`): two writers are read here, one per set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streamscope.core import attributes as A
from streamscope.core.classifier import LABELS
from streamscope.export.fleet_metrics import (
    BUFFER_BACKEND,
    RESUME_OUTCOME,
    STORE_OPERATION,
    STORE_PROBLEM,
    FleetMetrics,
)
from streamscope.export.metrics import TOKEN_MODALITY, TOKEN_TYPE, MetricsWriter
from streamscope.export.outcomes import HTTP_STATUS, OUTCOME, OutcomeWriter
from streamscope.export.prometheus_multiprocess import family_name, sanitize_attribute
from streamscope.pricing.cost import WASTE


@dataclass(frozen=True)
class Instrument:
    """One instrument as the exporter creates it, and the Prometheus names it is written under."""

    name: str
    unit: str
    kind: str  # "counter", "updowncounter", "histogram" or "gauge", as prometheus_multiprocess says

    @property
    def family(self) -> str:
        """The metric family: ``streamscope_requests`` for the counter ``streamscope.requests``."""
        return family_name(self.name, self.unit, self.kind)

    @property
    def series(self) -> str:
        """The sample name a counter or gauge is queried by (``_total`` on counters)."""
        if self.kind == "histogram":
            raise TypeError(f"{self.name} is a histogram: query its _bucket, _sum or _count")
        return f"{self.family}_total" if self.kind == "counter" else self.family

    def samples(self) -> tuple[str, ...]:
        """Every sample name the instrument shows on /metrics."""
        if self.kind == "histogram":
            return tuple(f"{self.family}_{s}" for s in ("bucket", "sum", "count"))
        return (self.series,)


class _Catalogue:
    """Stands in for a Meter: notes each instrument ``MetricsWriter`` creates, records nothing."""

    def __init__(self) -> None:
        self.created: list[Instrument] = []

    def _note(self, kind: str, name: str, unit: str) -> Instrument:
        instrument = Instrument(name, unit, kind)
        self.created.append(instrument)
        return instrument

    def create_counter(self, name: str, unit: str = "", description: str = "") -> Instrument:
        return self._note("counter", name, unit)

    def create_up_down_counter(self, name: str, unit: str = "", description: str = "") -> Instrument:
        return self._note("updowncounter", name, unit)

    def create_gauge(self, name: str, unit: str = "", description: str = "") -> Instrument:
        return self._note("gauge", name, unit)

    def create_histogram(self, name: str, unit: str = "", description: str = "", **_: Any) -> Instrument:
        return self._note("histogram", name, unit)

    def create_observable_gauge(self, name: str, callbacks: Any = None, unit: str = "",
                                description: str = "") -> Instrument:
        return self._note("gauge", name, unit)  # exposed like a synchronous gauge: no suffix, no _total


_catalogue = _Catalogue()
# caps and names given: no environment read
_writer: Any = MetricsWriter(_catalogue, max_models=1, max_routes=1, latest=False)  # type: ignore[arg-type]
_outcomes: Any = OutcomeWriter(_catalogue, _writer)  # type: ignore[arg-type]
_fleet: Any = FleetMetrics(_catalogue)  # type: ignore[arg-type]
_latest_catalogue = _Catalogue()
_latest: Any = MetricsWriter(_latest_catalogue, max_models=1, max_routes=1, latest=True)  # type: ignore[arg-type]

#: Every instrument the exporter creates without the opt-in, in creation order.
CURRENT_INSTRUMENTS: tuple[Instrument, ...] = tuple(_catalogue.created)
#: ... and the instruments only the opt-in (``gen_ai_latest_experimental``) creates.
LATEST_INSTRUMENTS: tuple[Instrument, ...] = tuple(
    i for i in _latest_catalogue.created if i not in CURRENT_INSTRUMENTS)
#: Every instrument of either set.
INSTRUMENTS: tuple[Instrument, ...] = CURRENT_INSTRUMENTS + LATEST_INSTRUMENTS

Either = tuple[str, str]
"""The same quantity under today's name and the opt-in's (Prometheus family names, today's first):
the queries select both with ``or`` (``queries.rate``)."""


def either(attribute: str) -> Either:
    """The family of the GenAI instrument ``MetricsWriter`` keeps as ``attribute``, in both sets."""
    return instrument(attribute).family, instrument(attribute, _latest).family


def instrument(attribute: str, writer: Any = _writer) -> Instrument:
    """The instrument ``MetricsWriter`` (or ``writer``) keeps as ``attribute``; fails loudly if it
    was renamed."""
    found = getattr(writer, attribute)
    if not isinstance(found, Instrument):
        raise TypeError(f"{type(writer).__name__}.{attribute} is not an instrument")
    return found


def label(attribute_key: str) -> str:
    """The Prometheus label an OpenTelemetry attribute key becomes (``gen_ai.provider.name`` ->
    ``gen_ai_provider_name``)."""
    return sanitize_attribute(attribute_key)


def legend(labels: Sequence[str]) -> str:
    """A Grafana legend naming each label's value: ``{{a}} {{b}}``."""
    return " ".join("{{" + name + "}}" for name in labels)


# -- Counters and gauges, as queried -----------------------------------------------------------
REQUESTS = instrument("requests").series
FIRINGS = instrument("firings").series
UNREACHABLE = instrument("deadline_unreachable").series
INTERNAL_ERRORS = instrument("internal_errors").series
UNOBSERVED = instrument("unobserved_calls").series
ACTIVE_STREAMS = instrument("active_streams").series
LIMIT = instrument("budget_limit").series
BREAKER_STATE = instrument("breaker_state").series

RELAY_STREAMS = instrument("relay_streams", _outcomes).series
RETRIES = instrument("retries", _outcomes).series
CONTINUATIONS = instrument("continuations", _outcomes).series

#: The fleet's: reconnects answered (``Last-Event-ID``), events replayed from the resume buffer,
#: the buffer's bytes (a gauge, unit ``By``: ``_bytes``), failed operations on the shared Redis store.
RESUMES = instrument("resumes", _fleet).series
REPLAYED_EVENTS = instrument("replayed_events", _fleet).series
BUFFER_SIZE = instrument("buffer_size", _fleet).series
STORE_ERRORS = instrument("store_errors", _fleet).series

#: Spend (``streamscope.pricing``): each finished call's cost in US dollars (unit ``USD``, the
#: suffix: ``streamscope_cost_USD_total``), by class, and the calls whose model has no known price.
COST = instrument("spent", _writer.costs).series
UNPRICED = instrument("unpriced", _writer.costs).series

#: Family names without ``_total``: the middle part of recording-rule names.
REQUESTS_FAMILY = instrument("requests").family
COST_FAMILY = instrument("spent", _writer.costs).family
FIRINGS_FAMILY = instrument("firings").family
UNREACHABLE_FAMILY = instrument("deadline_unreachable").family

# -- Histograms: family names; queries add _bucket, _sum or _count -----------------------------
DURATION = either("operation_duration")
TIME_TO_FIRST_CHUNK = either("time_to_first_chunk")
TIME_PER_CHUNK = either("time_per_output_chunk")
#: Today's token histogram (``gen_ai.token.type``), and the opt-in's per-direction instruments.
TOKENS = instrument("token_usage").family
INPUT_TOKENS = instrument("input_tokens", _latest).series
OUTPUT_TOKENS = instrument("output_tokens", _latest).series
OPERATION_INPUT_TOKENS = instrument("operation_input_tokens", _latest).family
OPERATION_OUTPUT_TOKENS = instrument("operation_output_tokens", _latest).family
TIME_TO_HEADERS = instrument("time_to_headers").family
TTFC = instrument("time_to_first_content").family
THINKING_DURATION = instrument("thinking_duration").family
MAX_GAP = instrument("max_gap").family
DECODE_RATE = instrument("decode_rate").family
BUDGET_USED = instrument("budget_used").family
REASONING = instrument("reasoning_tokens").family
SERVER_TOOL = instrument("server_tool_duration").family
ATTEMPTS = instrument("attempts", _outcomes).family

# -- Labels ------------------------------------------------------------------------------------
PROVIDER = label(A.PROVIDER)
MODEL = label(A.REQUEST_MODEL)
ROUTE = label(A.ROUTE)
CLASS = label(A.CLASS)
PARTIAL = label(A.PARTIAL)
BUDGET = label(A.BUDGET)
TOKEN = label(TOKEN_TYPE)
MODALITY = label(TOKEN_MODALITY)
ERROR_TYPE = label(A.ERROR_TYPE)
UNOBSERVED_BY = label(A.UNOBSERVED_BY)
FAILURE_CODE = label(A.FAILURE_CODE)
RELAY_OUTCOME = label(OUTCOME)
HTTP_STATUS_CODE = label(HTTP_STATUS)
RESUME_OUTCOME_LABEL = label(RESUME_OUTCOME)
BUFFER_BACKEND_LABEL = label(BUFFER_BACKEND)
STORE_OPERATION_LABEL = label(STORE_OPERATION)
STORE_PROBLEM_LABEL = label(STORE_PROBLEM)
LE = "le"  # Prometheus's own bucket label
JOB = "job"  # added by Prometheus at scrape time

# -- Label values ------------------------------------------------------------------------------

#: The classes whose spend bought no answer ("waste"), as the exporter's cost counter knows them
#: (``streamscope.pricing.cost.WASTE``), in the classifier's order. A retried attempt ends in one of
#: them, so retries are waste too; ``complete``, ``truncated``, ``silently_unverified``, ``refused``
#: and ``paused`` are not.
WASTE_CLASSES: tuple[str, ...] = tuple(c for c in LABELS if c in WASTE)
if len(WASTE_CLASSES) != len(WASTE):
    raise ValueError(f"pricing.cost.WASTE names classes the classifier does not give: "
                     f"{sorted(set(WASTE) - set(LABELS))}")
#: The one matcher selecting them, for every query and rule about wasted spend.
WASTED = f'{CLASS}=~"{"|".join(WASTE_CLASSES)}"'


def queried_samples() -> set[str]:
    """Every sample name the exporter writes for the instruments above."""
    return {s for i in INSTRUMENTS for s in i.samples()}
