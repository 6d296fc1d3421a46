"""The metrics exporter: the documented instruments (docs/metrics.md), written once per stream from the finished record.

Nothing here runs per event. `opened()` adds the stream to `streamscope.active_streams` when the
request is sent; `finished()` takes it out again and records everything else from the immutable
`StreamRecord` and the span's final attributes (the same dict the span got, so the class a metric
counts is the class the span carries).

Each instrument is made from the catalog in `instruments.py` (its name, kind, unit, description,
and a histogram's bucket boundaries, given as an advisory, so no View is needed; a View the user
configures still wins). Attribute values are bounded: model and route names pass a
`CardinalityGuard`, everything else comes from closed sets, and nothing per request (ids, text,
timings) ever becomes an attribute. See docs/metrics.md.

Time per output chunk. Where the metrics go somewhere (`live()`), the recorder keeps one gap per
content event after the first in a list (an append per event; see `core/recorder.py`) and
`finished()` puts them into the histogram at once, when the stream has ended (chunk_histogram.py:
the same points as one `Histogram.record()` per gap, for a small part of its cost). A "chunk" is a content
event as the recorder counts them (`streamscope.content_events`: every delta, visible or not:
text, thinking, tool input), so a stream records `content_events - 1` values, measured on
`streamscope.max_gap`'s clock: the provider's time from one content event to the next, the
caller's own time between reads and server tool runs left out. (The conventions' brief: "recorded
for each chunk received after the first one, from the end of the previous chunk to the end of
the current chunk"; pings and the SDK's bookkeeping events are not output chunks.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import metrics as otel_metrics
from opentelemetry.metrics import Meter, NoOpMeter, NoOpMeterProvider

try:
    from opentelemetry.metrics._internal import _ProxyMeterProvider
except ImportError:  # pragma: no cover - an API without it: the no-op class is the only tell
    _ProxyMeterProvider = NoOpMeterProvider  # type: ignore[assignment,misc]
from opentelemetry.util.types import AttributeValue

from streamscope.core import attributes as A
from streamscope.core.classifier import thinking_share
from streamscope.core.record import RequestInfo, StreamRecord
from streamscope.pricing.cost import CallCost

from .cardinality import (
    DEFAULT_MAX_MODELS,
    DEFAULT_MAX_ROUTES,
    MAX_MODELS_ENV,
    MAX_ROUTES_ENV,
    CardinalityGuard,
    limit_from,
)
from .chunk_histogram import merger, per_chunk, record_gaps
from .instruments import counter, gauge, histogram, up_down_counter
from .metric_definitions import (
    BREAKER_STATE,
    BREAKER_TO,
    BUDGET_NAMES,
    CURRENT_NAMES,
    ERROR_TYPE_LIMIT,
    INPUT_MODALITY,
    LATEST_NAMES,
    OUTPUT_MODALITY,
    TOKEN_MODALITY,
    TOKEN_TYPE,
    gen_ai_latest,
)

NOOP_METER_PROVIDERS = (_ProxyMeterProvider, NoOpMeterProvider)
"""The global provider before one is set, and the no-op one: measurements go nowhere."""

class MetricsWriter:
    """Records the documented instruments on `meter`; one instance per instrumentation session."""

    def __init__(self, meter: Meter, *, max_models: int | None = None, max_routes: int | None = None,
                 latest: bool | None = None) -> None:
        """`latest`: the GenAI names being introduced (None: as `OTEL_SEMCONV_STABILITY_OPT_IN` says, read now)."""
        self.meter = meter
        self.latest = gen_ai_latest() if latest is None else latest
        self._global = type(meter).__name__ == "_ProxyMeter"
        """The global provider's meter: it records once a real provider is set, maybe later."""
        models = limit_from(max_models, MAX_MODELS_ENV, DEFAULT_MAX_MODELS)
        routes = limit_from(max_routes, MAX_ROUTES_ENV, DEFAULT_MAX_ROUTES)
        self.models = CardinalityGuard(A.REQUEST_MODEL, models)
        self.response_models = CardinalityGuard(A.RESPONSE_MODEL, models)
        self.routes = CardinalityGuard(A.ROUTE, routes)
        self.error_types = CardinalityGuard(A.ERROR_TYPE, ERROR_TYPE_LIMIT, overflow="_OTHER")

        # Semantic conventions (GenAI client metrics), under today's names or the opt-in's; each
        # mode's usage instruments only in that mode.
        latest = self.latest
        names = LATEST_NAMES if latest else CURRENT_NAMES
        self.operation_duration = histogram(meter, names["duration"])
        self.time_to_first_chunk = histogram(meter, names["time_to_first_chunk"])
        self.time_per_output_chunk = histogram(meter, names["time_per_output_chunk"])
        self.token_usage = None if latest else histogram(meter, CURRENT_NAMES["token_usage"])
        self.input_tokens = counter(meter, LATEST_NAMES["input_tokens"]) if latest else None
        self.output_tokens = counter(meter, LATEST_NAMES["output_tokens"]) if latest else None
        self.cache_read_tokens = counter(meter, LATEST_NAMES["cache_read_tokens"]) if latest else None
        self.cache_write_tokens = counter(meter, LATEST_NAMES["cache_write_tokens"]) if latest else None
        self.reasoning_output_tokens = counter(meter, LATEST_NAMES["reasoning_tokens"]) if latest else None
        self.operation_input_tokens = histogram(meter, LATEST_NAMES["operation_input_tokens"]) if latest else None
        self.operation_output_tokens = histogram(meter, LATEST_NAMES["operation_output_tokens"]) if latest else None
        # streamscope.
        self.requests = counter(meter, "streamscope.requests")
        self.firings = counter(meter, "streamscope.budget.firings")
        self.active_streams = up_down_counter(meter, "streamscope.active_streams")
        self.time_to_headers = histogram(meter, "streamscope.time_to_headers")
        self.time_to_first_content = histogram(meter, "streamscope.time_to_first_content")
        self.thinking_duration = histogram(meter, "streamscope.thinking.duration")
        self.max_gap = histogram(meter, "streamscope.max_gap")
        self.decode_rate = histogram(meter, "streamscope.decode_rate")
        self.budget_used = histogram(meter, "streamscope.thinking.budget_used")
        self.internal_errors = counter(meter, "streamscope.internal_errors")
        self.unobserved_calls = counter(meter, "streamscope.unobserved_calls")
        # streamscope additions beyond the documented table, used by the dashboards.
        self.budget_limit = gauge(meter, "streamscope.budget.limit")
        self.deadline_unreachable = counter(meter, "streamscope.deadline.unreachable")
        self.reasoning_tokens = histogram(meter, "streamscope.usage.reasoning_tokens")
        self.server_tool_duration = histogram(meter, "streamscope.server_tool.duration")

        self.costs = CostMetrics(meter)
        self.breaker_state = gauge(meter, "streamscope.breaker.state")
        self.breaker_transitions = counter(meter, "streamscope.breaker.transitions")

        self.merge_chunks = True
        """A stream's chunk gaps into `time_per_output_chunk` at once (chunk_histogram.py); False:
        one `record()` per gap (what the identity test and the benchmarks compare against)."""
        if self.live():
            merger()  # its one check of the SDK's form, now rather than at the end of a first stream

    # -- attributes -------------------------------------------------------------------------------

    def base_attributes(self, request: RequestInfo) -> dict[str, AttributeValue]:
        """Every streamscope instrument's attributes: provider, model (guarded), route (guarded)."""
        attrs: dict[str, AttributeValue] = {A.PROVIDER: request.provider}
        if request.model is not None:
            attrs[A.REQUEST_MODEL] = self.models(request.model)
        if request.route is not None:
            attrs[A.ROUTE] = self.routes(request.route)
        return attrs

    def semconv_attributes(self, record: StreamRecord, base: Mapping[str, AttributeValue]) -> dict[str, AttributeValue]:
        """The GenAI client metric attributes, plus `streamscope.route` where set."""
        request = record.request
        attrs: dict[str, AttributeValue] = {A.OPERATION: "chat", **base}
        if record.response_model is not None:
            attrs[A.RESPONSE_MODEL] = self.response_models(record.response_model)
        if request.server_address is not None:
            attrs[A.SERVER_ADDRESS] = request.server_address
            if request.server_port is not None:
                attrs[A.SERVER_PORT] = request.server_port
        return attrs

    # -- the pipeline's two calls ----------------------------------------------------------------

    def unobserved(self, provider: str, by: str) -> None:
        self.unobserved_calls.add(1, {A.PROVIDER: provider, A.UNOBSERVED_BY: by})

    def opened(self, request: RequestInfo) -> None:
        self.active_streams.add(1, self.base_attributes(request))

    def breaker_moved(self, request: RequestInfo, to: str) -> None:
        """A breaker changed state (`to`: closed, half_open, open), at a call of `request`'s key."""
        base = self.base_attributes(request)
        self.breaker_state.set(BREAKER_STATE[to], base)
        self.breaker_transitions.add(1, {**base, BREAKER_TO: to})

    def live(self) -> bool:
        """Whether a measurement goes anywhere now: an SDK meter given to `instrument()`, or the
        global provider once one is set. Asked per stream, for what only a recording is worth
        keeping (the chunk gaps)."""
        if isinstance(self.meter, NoOpMeter):
            return False
        if self._global:
            provider = otel_metrics.get_meter_provider()
            return not isinstance(provider, NOOP_METER_PROVIDERS)
        return True

    def finished(self, record: StreamRecord, attrs: Mapping[str, Any], unreachable: bool = False,
                 cost: CallCost | None = None) -> None:
        base = self.base_attributes(record.request)
        self.active_streams.add(-1, base)
        self.costs.count(cost, base, attrs)

        # streamscope.requests: one per stream, by class, partial and failure code (none for a normal end).
        counted = dict(base)
        label = attrs.get(A.CLASS)
        if isinstance(label, str):
            counted[A.CLASS] = label
        counted[A.PARTIAL] = bool(attrs.get(A.PARTIAL, False))
        code = attrs.get(A.FAILURE_CODE)
        if isinstance(code, str):
            counted[A.FAILURE_CODE] = code
        self.requests.add(1, counted)
        if record.budget_fired is not None:
            self.firings.add(1, {**base, A.BUDGET: record.budget_fired})

        budgets = record.request.budgets
        for name in BUDGET_NAMES:
            limit = getattr(budgets, name)
            if limit is not None:
                self.budget_limit.set(limit, {**base, A.BUDGET: name})

        if record.time_to_headers is not None:
            self.time_to_headers.record(record.time_to_headers, base)
        if record.time_to_first_content is not None:
            self.time_to_first_content.record(record.time_to_first_content, base)
        thinking = record.thinking_duration
        if thinking is not None:
            self.thinking_duration.record(thinking, base)
        if record.max_gap is not None:
            self.max_gap.record(record.max_gap, base)
        for _name, _ended, took in record.server_tool_runs:
            self.server_tool_duration.record(took, base)

        # Semantic-convention instruments.
        semconv = self.semconv_attributes(record, base)
        error = attrs.get(A.ERROR_TYPE)
        duration_attrs = semconv if not isinstance(error, str) else {**semconv, A.ERROR_TYPE: self.error_types(error)}
        self.operation_duration.record(record.duration, duration_attrs)
        if record.time_to_first_chunk is not None:
            self.time_to_first_chunk.record(record.time_to_first_chunk, semconv)
        # content_events - 1 values, kept by the recorder (module docstring), recorded at once.
        if self.merge_chunks:
            record_gaps(self.time_per_output_chunk, record.chunk_gaps, semconv)
        else:
            per_chunk(self.time_per_output_chunk, record.chunk_gaps, semconv)

        # Usage, as on the span: input tokens once known (from the first event; billed even when
        # the stream is cut later), everything output-side only from the final usage: before it the
        # output count may be a placeholder, and a rate or a share from it would be wrong.
        if self.latest:
            self._usage_latest(record, semconv, failed=isinstance(error, str))
        elif self.token_usage is not None:
            if record.input_tokens is not None:
                self.token_usage.record(record.input_tokens, {**semconv, TOKEN_TYPE: "input"})
            if record.usage_final and record.output_tokens is not None:
                self.token_usage.record(record.output_tokens, {**semconv, TOKEN_TYPE: "output"})
        if not record.usage_final:
            return
        if record.reasoning_tokens is not None:
            self.reasoning_tokens.record(record.reasoning_tokens, base)
        rate = record.decode_rate
        if rate is not None:
            self.decode_rate.record(rate, base)
        share = thinking_share(attrs)
        if share is not None:
            self.budget_used.record(share, base)
        if unreachable:
            self.deadline_unreachable.add(1, base)


    def _usage_latest(self, record: StreamRecord, semconv: Mapping[str, AttributeValue], failed: bool) -> None:
        """The opt-in's usage instruments. The counters count what was billed, as today's histogram
        does (input once known, cut streams included; output from the final usage); the per-operation
        histograms only operations that did not fail (the conventions' clarification: "token usage
        histograms should not be recorded for failed operations while the usage counters should")."""
        inputs = {**semconv, TOKEN_MODALITY: INPUT_MODALITY}
        outputs = {**semconv, TOKEN_MODALITY: OUTPUT_MODALITY}
        final = record.usage_final
        if record.input_tokens is not None:
            if self.input_tokens is not None:
                self.input_tokens.add(record.input_tokens, inputs)
            if not failed and self.operation_input_tokens is not None:
                self.operation_input_tokens.record(record.input_tokens, semconv)
        if record.cache_read_tokens is not None and self.cache_read_tokens is not None:
            self.cache_read_tokens.add(record.cache_read_tokens, inputs)
        if record.cache_write_tokens is not None and self.cache_write_tokens is not None:
            self.cache_write_tokens.add(record.cache_write_tokens, inputs)
        if not final:
            return
        if record.output_tokens is not None:
            if self.output_tokens is not None:
                self.output_tokens.add(record.output_tokens, outputs)
            if not failed and self.operation_output_tokens is not None:
                self.operation_output_tokens.record(record.output_tokens, semconv)
        if record.reasoning_tokens is not None and self.reasoning_output_tokens is not None:
            self.reasoning_output_tokens.add(record.reasoning_tokens, outputs)


class CostMetrics:
    """`streamscope.cost` (USD, by class, partial and estimated) and `streamscope.cost.unpriced`."""

    def __init__(self, meter: Meter) -> None:
        self.spent = counter(meter, "streamscope.cost")
        self.unpriced = counter(meter, "streamscope.cost.unpriced")

    def count(self, cost: CallCost | None, base: Mapping[str, Any], attrs: Mapping[str, Any]) -> None:
        """One finished call: its cost under its class, or one unpriced call."""
        if cost is None:
            return
        if cost.usd is None:
            self.unpriced.add(1, base)
            return
        label = attrs.get(A.CLASS)
        counted = {**base, A.PARTIAL: bool(attrs.get(A.PARTIAL, False)), A.COST_ESTIMATED: cost.estimated}
        if isinstance(label, str):
            counted[A.CLASS] = label
        self.spent.add(cost.usd, counted)
