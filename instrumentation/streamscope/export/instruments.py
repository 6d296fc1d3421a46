"""streamscope's instruments, each defined once: name, kind, unit, description, bucket advisory.

Why one table: the writers (`metrics.py`, `outcomes.py`, `fleet_metrics.py`) each spelled out
every `meter.create_*` call, so what an instrument is lay in three files, written the same way again
and again. Now a writer says only which instrument it keeps (`counter(meter, "streamscope.retries")`)
and when (the GenAI instruments of one naming mode, `metric_definitions.gen_ai_latest()`); what it
is lives here, in `CATALOG`, the list docs/metrics.md documents. Both naming modes' GenAI
instruments are in it, under their names from `metric_definitions` (a process creates one set).

Histograms carry their bucket boundaries as an advisory (`explicit_bucket_boundaries_advisory`),
so no View is needed; a View the user configures still wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from opentelemetry.metrics import (
    CallbackT,
    Counter,
    Histogram,
    Meter,
    ObservableGauge,
    UpDownCounter,
    _Gauge,
)

from .metric_definitions import (
    ATTEMPTS_BUCKETS,
    BUDGET_USED_BUCKETS,
    CURRENT_NAMES,
    DECODE_RATE_BUCKETS,
    LATEST_NAMES,
    MAX_GAP_BUCKETS,
    REASONING_TOKENS_BUCKETS,
    SEMCONV_DURATION_BUCKETS,
    SEMCONV_TOKEN_BUCKETS,
    SERVER_TOOL_BUCKETS,
    THINKING_DURATION_BUCKETS,
    TIME_TO_FIRST_CONTENT_BUCKETS,
    TIME_TO_HEADERS_BUCKETS,
)

Kind = Literal["counter", "up_down_counter", "histogram", "gauge", "observable_gauge"]
"""The `Meter.create_<kind>` an instrument is made with."""


@dataclass(frozen=True, slots=True)
class Definition:
    """One instrument as the meter is asked for it; `buckets` only, and always, on a histogram."""

    name: str
    kind: Kind
    unit: str
    description: str
    buckets: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if (self.kind == "histogram") != (self.buckets is not None):
            raise ValueError(f"{self.name}: a histogram, and only a histogram, has bucket boundaries")


DEFINITIONS: tuple[Definition, ...] = (
    # Semantic conventions (GenAI client metrics), today's names.
    Definition(CURRENT_NAMES["duration"], "histogram", "s", "GenAI operation duration.", SEMCONV_DURATION_BUCKETS),
    Definition(CURRENT_NAMES["time_to_first_chunk"], "histogram", "s",
               "Time to receive the first chunk of the response stream.", SEMCONV_DURATION_BUCKETS),
    Definition(CURRENT_NAMES["time_per_output_chunk"], "histogram", "s",
               "Time per output chunk after the first: from the end of the previous chunk to the end of this one.",
               SEMCONV_DURATION_BUCKETS),
    Definition(CURRENT_NAMES["token_usage"], "histogram", "{token}", "Number of input and output tokens used.",
               SEMCONV_TOKEN_BUCKETS),
    # ... and the opt-in's (`gen_ai_latest_experimental`).
    Definition(LATEST_NAMES["duration"], "histogram", "s", "GenAI client inference operation duration.",
               SEMCONV_DURATION_BUCKETS),
    Definition(LATEST_NAMES["time_to_first_chunk"], "histogram", "s",
               "Time to receive the first chunk of the response stream.", SEMCONV_DURATION_BUCKETS),
    Definition(LATEST_NAMES["time_per_output_chunk"], "histogram", "s",
               "Time per output chunk after the first: from the end of the previous chunk to the end of this one.",
               SEMCONV_DURATION_BUCKETS),
    Definition(LATEST_NAMES["input_tokens"], "counter", "{token}",
               "The number of input (prompt) tokens used, including cached tokens."),
    Definition(LATEST_NAMES["output_tokens"], "counter", "{token}",
               "The number of output (completion) tokens used, including reasoning tokens."),
    Definition(LATEST_NAMES["cache_read_tokens"], "counter", "{token}",
               "The number of input tokens served from a provider-managed cache."),
    Definition(LATEST_NAMES["cache_write_tokens"], "counter", "{token}",
               "The number of input tokens written to a provider-managed cache."),
    Definition(LATEST_NAMES["reasoning_tokens"], "counter", "{token}",
               "The number of output tokens used for reasoning (e.g. chain-of-thought, extended thinking)."),
    Definition(LATEST_NAMES["operation_input_tokens"], "histogram", "{token}",
               "The number of input (prompt) tokens used per inference operation.", SEMCONV_TOKEN_BUCKETS),
    Definition(LATEST_NAMES["operation_output_tokens"], "histogram", "{token}",
               "The number of output (completion) tokens used per inference operation.", SEMCONV_TOKEN_BUCKETS),
    # streamscope: per stream (metrics.MetricsWriter).
    Definition("streamscope.requests", "counter", "{request}", "Streamed calls, by failure class."),
    Definition("streamscope.budget.firings", "counter", "{firing}",
               "Budgets that fired (first_token, idle, deadline, read_timeout)."),
    Definition("streamscope.active_streams", "up_down_counter", "{stream}", "Streamed calls in flight."),
    Definition("streamscope.time_to_headers", "histogram", "s", "Until the response headers arrived.",
               TIME_TO_HEADERS_BUCKETS),
    Definition("streamscope.time_to_first_content", "histogram", "s",
               "Until the first content event (under the first_content setting).", TIME_TO_FIRST_CONTENT_BUCKETS),
    Definition("streamscope.thinking.duration", "histogram", "s",
               "From the first thinking block to the end of the thinking before the answer.",
               THINKING_DURATION_BUCKETS),
    Definition("streamscope.max_gap", "histogram", "s",
               "The provider's largest silence between content events while the caller waited "
               "(pings are not content; server tool runs are not gaps).", MAX_GAP_BUCKETS),
    Definition("streamscope.decode_rate", "histogram", "{token}/s", "Output tokens per second of generation.",
               DECODE_RATE_BUCKETS),
    Definition("streamscope.thinking.budget_used", "histogram", "1", "Reasoning tokens / thinking budget_tokens.",
               BUDGET_USED_BUCKETS),
    Definition("streamscope.internal_errors", "counter", "{error}",
               "Failures inside streamscope (swallowed; the host is unaffected)."),
    Definition("streamscope.unobserved_calls", "counter", "{call}",
               "Streamed calls streamscope could not observe: another library's request method "
               "stood in front of streamscope's (no span, no budget)."),
    Definition("streamscope.budget.limit", "gauge", "s", "The budgets in force at the last stream end."),
    Definition("streamscope.deadline.unreachable", "counter", "{request}",
               "Thinking requests whose deadline could not fit their thinking budget at the stream's decode rate."),
    Definition("streamscope.usage.reasoning_tokens", "histogram", "{token}", "Reasoning (thinking) output tokens.",
               REASONING_TOKENS_BUCKETS),
    Definition("streamscope.server_tool.duration", "histogram", "s",
               "One server-side tool run (web search, web fetch, code execution, ...): from the "
               "tool use block's end to its result.", SERVER_TOOL_BUCKETS),
    # Spend (metrics.CostMetrics) and the circuit breaker.
    Definition("streamscope.cost", "counter", "USD",
               "What streamed calls cost, from the usage the provider reported and the price table "
               "(cut streams' output estimated), retried attempts and failures included."),
    Definition("streamscope.cost.unpriced", "counter", "{request}",
               "Streamed calls with usage whose model has no known price (add it with prices=)."),
    Definition("streamscope.breaker.state", "gauge", "1",
               "The circuit breaker of a provider, model and route in this process: 0 closed, 1 half-open, 2 open."),
    Definition("streamscope.breaker.transitions", "counter", "{transition}",
               "Circuit breaker state changes, by the state moved to (streamscope.breaker.to)."),
    # A logical request's attempts and relayed streams (outcomes.OutcomeWriter).
    Definition("streamscope.attempts", "histogram", "{attempt}",
               "Attempts per logical request of the retry helpers or the relay (1 = no retry)", ATTEMPTS_BUCKETS),
    Definition("streamscope.retries", "counter", "{retry}",
               "Retries made by the retry helpers or the relay, by what the retried attempt failed with"),
    Definition("streamscope.relay.streams", "counter", "{stream}",
               "Streams relayed to a client, by outcome, failure code, partial and the status sent"),
    Definition("streamscope.relay.continuations", "counter", "{continuation}",
               "New requests that continued a relayed answer from its partial text after a failure "
               "mid-prose, by how the relayed stream ended (relay(..., continuation=...))"),
    # The fleet: resumes, the resume buffer, the shared store (fleet_metrics.FleetMetrics).
    Definition("streamscope.relay.resumes", "counter", "{resume}",
               "Reconnects (Last-Event-ID) answered by this worker, by outcome: resumed, "
               "nothing_to_resume, expired, owner_lost"),
    Definition("streamscope.relay.replayed_events", "counter", "{event}",
               "Events read back from the resume buffer and sent on resumed connections"),
    Definition("streamscope.store.errors", "counter", "{error}",
               "Operations on the shared store (Redis) that failed or timed out, by operation"),
    Definition("streamscope.relay.buffer.size", "observable_gauge", "By",
               "Bytes of relayed events this worker keeps for resume (in memory, or written to "
               "Redis and not yet expired)"),
)


def _by_name(definitions: Sequence[Definition]) -> Mapping[str, Definition]:
    catalog = {d.name: d for d in definitions}
    if len(catalog) != len(definitions):
        raise ValueError("an instrument is defined twice")
    return catalog


CATALOG: Mapping[str, Definition] = _by_name(DEFINITIONS)
"""Every instrument streamscope creates, by name."""


def definition(name: str, kind: Kind) -> Definition:
    """`name`'s definition; fails loudly where a writer asks for an unlisted name or another kind."""
    found = CATALOG.get(name)
    if found is None:
        raise KeyError(f"{name} is not in streamscope's instrument catalog (export/instruments.py)")
    if found.kind != kind:
        raise TypeError(f"{name} is defined as a {found.kind}, not a {kind}")
    return found


# -- Making them: one function per kind, so each writer's attribute keeps its instrument type ----

def counter(meter: Meter, name: str) -> Counter:
    d = definition(name, "counter")
    return meter.create_counter(d.name, unit=d.unit, description=d.description)


def up_down_counter(meter: Meter, name: str) -> UpDownCounter:
    d = definition(name, "up_down_counter")
    return meter.create_up_down_counter(d.name, unit=d.unit, description=d.description)


def histogram(meter: Meter, name: str) -> Histogram:
    d = definition(name, "histogram")
    return meter.create_histogram(d.name, unit=d.unit, description=d.description,
                                  explicit_bucket_boundaries_advisory=d.buckets)


def gauge(meter: Meter, name: str) -> _Gauge:
    d = definition(name, "gauge")
    return meter.create_gauge(d.name, unit=d.unit, description=d.description)


def observable_gauge(meter: Meter, name: str, callbacks: Sequence[CallbackT]) -> ObservableGauge:
    d = definition(name, "observable_gauge")
    return meter.create_observable_gauge(d.name, callbacks=callbacks, unit=d.unit, description=d.description)
