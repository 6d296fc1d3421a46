"""The one path for the data: request → recorder → immutable record → classifier → exporters.

Adapters call `request()` and `open()` when a streamed request is sent, and get a `Call`; the
recorder calls back here, once, when the stream ends. Nothing here runs per event. Every step
is guarded: a failure inside streamscope is counted and logged once, never raised into the caller.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry._logs import Logger, get_logger
from opentelemetry.context import attach, detach
from opentelemetry.trace import NonRecordingSpan, Tracer, set_span_in_context
from opentelemetry.util.types import AttributeValue

from ._version import __version__
from .breaker.circuit import Breakers, BreakerTable, Key, StateName, Ticket, verdict
from .budgets.feasibility import record_unreachable
from .budgets.table import BudgetTable
from .core import attributes as A
from .core.attempts import Attempts
from .core.calls import Call, Helpers
from .core.classifier import classify
from .core.content import capture_mode
from .core.context import (
    current_attempt,
    current_continuation,
    current_deadline,
    current_relaying,
    current_route,
)
from .core.errors import CircuitOpen
from .core.failures import code_of
from .core.guard import internal_error, logger
from .core.record import CallBudgets, RequestInfo, StreamRecord
from .core.recorder import StreamRecorder
from .export import stream_log
from .export.metric_definitions import gen_ai_latest
from .export.metrics import MetricsWriter
from .export.outcomes import OutcomeWriter
from .export.span import SpanWriter
from .pricing import SHIPPED, PriceTable
from .pricing.cost import CallCost, call_cost, cost_attributes


class Pipeline:
    def __init__(self, tracer: Tracer, budgets: BudgetTable | None = None,
                 metrics: MetricsWriter | None = None, *, stream_logs: bool = False,
                 events: Logger | None = None, breakers: BreakerTable | None = None,
                 prices: PriceTable | None = None) -> None:
        self.spans = SpanWriter(tracer, events if events is not None else get_logger("streamscope", __version__))
        self.attempts = Attempts()
        """Failed calls a framework may try again: each retry's span links to the attempt before."""
        self.budgets = budgets or BudgetTable()
        self.metrics = metrics
        self.outcomes = OutcomeWriter(metrics.meter, metrics) if metrics is not None else None
        self.capture = capture_mode()
        """Content capture, from OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT (off by default)."""
        self.stream_logs = stream_logs
        """One `streamscope.streams` log record per call (`instrument(stream_logs=True)`; off by default)."""
        self.breakers = (Breakers(breakers, self._breaker_moved)
                         if breakers is not None and not breakers.empty else None)
        """The circuit breakers (`instrument(breaker=...)`, the file's `[breaker]`); None: none."""
        self.prices = prices or SHIPPED
        """The shipped prices under the user's (`instrument(prices=...)`, the file's `[prices]`)."""
        self.latest = gen_ai_latest()
        """The conventions' opt-in: the pending GenAI cost names on the span too."""

    def request(self, *, provider: str, model: str | None, max_tokens: int | None = None,
                thinking_budget: int | None = None, server_address: str | None = None,
                server_port: int | None = None, attributes: Mapping[str, AttributeValue] | None = None,
                request_id_key: str = "streamscope.request.id", now: float | None = None,
                prompt_chars: int | None = None) -> RequestInfo:
        """What a call is, with the caller's route and deadline and the budgets in force.
        `attributes`: what only this provider has, under its own names (on the span from its start)."""
        now = time.monotonic() if now is None else now
        route = current_route()
        deadline = current_deadline()
        budgets = self.budgets.resolve(model, route)
        if deadline is not None:
            remaining = max(deadline - now, 0.0)
            if budgets.deadline is None or remaining < budgets.deadline:
                budgets = CallBudgets(budgets.first_token, budgets.idle, remaining, budgets.first_content)
        return RequestInfo(
            provider=provider, model=model, max_tokens=max_tokens, thinking_budget=thinking_budget, route=route,
            server_address=server_address, server_port=server_port, budgets=budgets, deadline=deadline,
            attempts=current_attempt(), request_id_key=request_id_key, prompt_chars=prompt_chars,
            attributes=(*((k, v) for k, v in (attributes or {}).items() if v is not None),
                        *(((A.CONTINUATION, n),) if (n := current_continuation()) is not None else ())),
        )

    def open(self, request: RequestInfo, t0: float | None = None, helpers: Helpers | None = None,
             client: object = None) -> Call | None:
        """Start recording a call (and its span). None if streamscope itself failed."""
        admitted = self._admit(request)
        ticket = admitted if isinstance(admitted, Ticket) else None
        try:
            rec = StreamRecorder(request, None, t0)
            if helpers is not None:
                rec.timeout_class = helpers.timeout_class
            call = Call(rec, self.spans.start(request, rec.start_ns), helpers, self)
            if request.attempts is None:  # not streamscope's own retry line, which says its attempts itself
                try:
                    self.attempts.link(call, request, client)
                except Exception:
                    internal_error("pipeline.attempts")
            if isinstance(admitted, CircuitOpen):
                call.refused = admitted  # the adapter ends the record with it and raises it: nothing is sent
            # A relayed call's record is the relay's own (one per relayed request, `serve.relay()`).
            logged = self.stream_logs and not current_relaying()
            rec.on_finish = functools.partial(self._finished, call, logged=logged, ticket=ticket)
            if self.metrics is not None:
                self.metrics.opened(request)
                if self.metrics.live():
                    rec.gaps = []  # the time per output chunk: kept only where it is recorded
            return call
        except Exception:
            internal_error("pipeline.open")
            if ticket is not None and self.breakers is not None:
                self.breakers.ended(ticket, None, request)  # a probe's slot is freed
            return None

    def _admit(self, request: RequestInfo) -> Ticket | CircuitOpen | None:
        """The breaker's word on a call about to be sent (None: no breaker, or streamscope failed)."""
        if self.breakers is None:
            return None
        try:
            return self.breakers.admit(request.provider, request.model, request.route, request)
        except Exception:
            internal_error("pipeline.breaker")
            return None

    def _breaker_moved(self, key: Key, to: StateName, request: RequestInfo) -> None:
        if self.metrics is not None:
            self.metrics.breaker_moved(request, to)

    # -- what the layers above a call report (`calls.Outcomes`) -------------------------------

    def attempted(self, request: RequestInfo, attempts: int) -> None:
        try:
            if self.outcomes is not None:
                self.outcomes.attempted(request, attempts)
        except Exception:
            internal_error("pipeline.attempts")

    def retried(self, request: RequestInfo, code: str) -> None:
        try:
            if self.outcomes is not None:
                self.outcomes.retried(request, code)
        except Exception:
            internal_error("pipeline.retries")

    def relayed(self, request: RequestInfo, outcome: str, code: str | None, partial: bool, status: int) -> None:
        try:
            if self.outcomes is not None:
                self.outcomes.relayed(request, outcome, code, partial, status)
        except Exception:
            internal_error("pipeline.relayed")

    def continued(self, request: RequestInfo, continuations: int, outcome: str) -> None:
        try:
            if self.outcomes is not None:
                self.outcomes.continued(request, continuations, outcome)
        except Exception:
            internal_error("pipeline.continued")

    def stream_logged(self, fields: Mapping[str, Any], call: Call | None) -> None:
        try:
            stream_log.write(fields, call.span.context if call is not None and call.span is not None else None)
        except Exception:
            internal_error("pipeline.stream_log")

    def unobserved(self, provider: str, by: str, why: str = "request", path: str | None = None) -> None:
        """Count a streamed call streamscope saw but could not observe (`streamscope.unobserved_calls`);
        say it once per process, library and path, with what to do."""
        try:
            if self.metrics is not None:
                self.metrics.unobserved(provider, by)
            say_unobserved(provider, by, why, path)
        except Exception:
            internal_error("pipeline.unobserved")

    def _finished(self, call: Call, rec: StreamRecorder, record: StreamRecord, *, logged: bool = False,
                  ticket: Ticket | None = None) -> None:
        if ticket is not None and self.breakers is not None:
            try:
                self.breakers.ended(ticket, verdict(code_of(record), record.completed), record.request)
            except Exception:
                internal_error("pipeline.breaker")
        try:
            attrs = classified_attributes(record)
        except Exception:
            internal_error("classifier")
            attrs = A.start_attributes(record.request)
        cost = self._cost(record, attrs)
        call.attributes = attrs
        attempt = call.attempt
        try:
            if call.span is not None:
                self.spans.finish(call.span, record, {**attrs, **call.notes} if call.notes else attrs,
                                  retries=attempt[1] if attempt is not None else None)
                if attempt is not None and code_of(record) is not None:  # another try may follow
                    self.attempts.failed(attempt[0], call.span.context, attempt[2], time.monotonic())
        except Exception:
            internal_error("span export")
        if self.metrics is not None:
            # The stream's span is current while its histograms record: OpenTelemetry's exemplar
            # filter (trace-based by default) takes the exemplar's trace and span id from there.
            token = attach(set_span_in_context(NonRecordingSpan(call.span.context))) if call.span is not None else None
            try:
                self.metrics.finished(record, attrs, record_unreachable(record), cost)
            except Exception:
                internal_error("metric export")
            finally:
                if token is not None:
                    detach(token)
        if logged:
            try:
                fields = stream_log.call_fields(attrs, request_id_key=record.request.request_id_key,
                                                duration=record.duration)
                stream_log.write(fields, call.span.context if call.span is not None else None)
            except Exception:
                internal_error("stream log")


    def _cost(self, record: StreamRecord, attrs: dict[str, AttributeValue]) -> CallCost | None:
        """The call's price, once, at its end, added to its attributes (None: streamscope failed)."""
        try:
            cost = call_cost(record, self.prices)
            attrs.update(cost_attributes(cost, self.latest))
            if cost.usd is None:
                _say_unpriced(record.request.provider, record.response_model or record.request.model)
            return cost
        except Exception:
            internal_error("cost")
            return None


_WARNED_UNPRICED: set[tuple[str | None, str | None]] = set()
PRICES_LOGGER = logging.getLogger("streamscope.prices")
"""Where a missing price is said: a child of `streamscope`, so a tool that reports it itself can leave it out."""


def _say_unpriced(provider: str | None, model: str | None) -> None:
    """One WARNING per provider and model per process: its calls have no cost, and how to give one
    (without a meter provider the unpriced counter goes nowhere, so this line is all there is)."""
    if (provider, model) in _WARNED_UNPRICED:
        return
    _WARNED_UNPRICED.add((provider, model))
    PRICES_LOGGER.warning("streamscope: no price is known for %s model %r, so its calls have no cost (counted in "
                   "streamscope.cost.unpriced); give its rates with instrument(prices={%r: {\"input\": ..., "
                   "\"output\": ...}}) or a [prices.\"%s\"] table in the STREAMSCOPE_CONFIG file (US dollars "
                   "per million tokens)", provider or "an unknown provider's", model, model, model)


_WARNED_UNOBSERVED: set[tuple[str, str, str, str | None]] = set()


def say_unobserved(provider: str, by: str, why: str = "request", path: str | None = None) -> None:
    """The one WARNING line for streamed calls that have no span, once per process and reason."""
    key = (provider, by, why, path)
    if key not in _WARNED_UNOBSERVED:
        _WARNED_UNOBSERVED.add(key)
        logger.warning(unobserved_message(provider, by, why, path))


def unobserved_message(provider: str, by: str, why: str = "request", path: str | None = None) -> str:
    """The one line that says why a streamed call has no span, and what to do about it (`path`: the
    route, or for `below_floor` the release found and the floor)."""
    who = "another library" if by.startswith("_") else by
    if why == "below_floor":
        return (f"streamscope: a streamed call of {path}, below the oldest release streamscope supports: "
                f"streamscope leaves that SDK as it is, so its streamed calls have no span and no budgets "
                f"(counted in streamscope.unobserved_calls). Upgrade {provider} to a supported release. Logged once.")
    if why == "read_whole":
        return (f"streamscope: {who} posted a streamed {provider} request and read its whole body at once "
                f"(send(..., stream=False)): nobody waits on a stream, so such calls have no span and no budgets "
                f"(counted in streamscope.unobserved_calls). Read the body as a stream (send(..., stream=True)) "
                f"to have them recorded. Logged once.")
    if why == "path":
        return (f"streamscope: a streamed {provider} call to {path} is not one streamscope knows the events of "
                f"(it records Messages, Chat Completions and Responses streams): no span, no budgets for such "
                f"calls (counted in streamscope.unobserved_calls). Logged once for this path.")
    return (f"streamscope: a streamed {provider} call went through {who}'s request method on the client, which "
            f"calls the {provider} SDK without streamscope: no span, no budgets for such calls (counted in "
            f"streamscope.unobserved_calls). Turn streamscope on before {who} instruments a client instance, "
            f"or let {who} instrument the client classes (either order works then). Logged once.")


def classified_attributes(record: StreamRecord) -> dict[str, AttributeValue]:
    """The record's attributes with its class and `verified`."""
    attrs = A.record_attributes(record)
    label = classify(attrs)
    attrs[A.CLASS] = label
    attrs[A.VERIFIED] = label == "complete"
    return attrs


def finished_attributes(record: StreamRecord, prices: PriceTable | None = None,
                        latest: bool = False) -> dict[str, AttributeValue]:
    """What the span and metrics get: the record's attributes, its class and `verified`, and its
    cost at `prices` (the shipped ones by default)."""
    attrs = classified_attributes(record)
    attrs.update(cost_attributes(call_cost(record, prices or SHIPPED), latest))
    return attrs
