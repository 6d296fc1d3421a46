"""The one path for the data: request → recorder → immutable record → classifier → exporters.

Adapters call `open()` when a streamed request is sent and the recorder calls back here,
once, when the stream ends. Nothing here runs per event. Every step is guarded: a failure
inside streamscope is counted and logged once, never raised into the caller.
"""

from __future__ import annotations

import time

from opentelemetry.trace import Tracer
from opentelemetry.util.types import AttributeValue

from . import attributes as A
from .budgets import BudgetTable, CallBudgets
from .classify import classify
from .content import capture_mode
from .context import current_attempt, current_deadline, current_route
from .exporters.span import SpanWriter
from .internal import internal_error
from .record import RequestInfo, StreamRecord
from .recorder import StreamRecorder


class Pipeline:
    def __init__(self, tracer: Tracer, budgets: BudgetTable | None = None, metrics: object | None = None) -> None:
        self.spans = SpanWriter(tracer)
        self.budgets = budgets or BudgetTable()
        self.metrics = metrics
        self.capture = capture_mode()
        """Content capture, from OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT (off by default)."""

    def request(self, *, model: str | None, max_tokens: int | None = None, thinking_type: str | None = None,
                thinking_budget: int | None = None, service_tier: str | None = None, provider: str = "anthropic",
                server_address: str | None = None, server_port: int | None = None,
                now: float | None = None) -> RequestInfo:
        """What a call is, with the caller's route and deadline and the budgets in force."""
        now = time.monotonic() if now is None else now
        route = current_route()
        deadline = current_deadline()
        budgets = self.budgets.resolve(model, route)
        if deadline is not None:
            remaining = max(deadline - now, 0.0)
            if budgets.deadline is None or remaining < budgets.deadline:
                budgets = CallBudgets(budgets.first_token, budgets.idle, remaining, budgets.first_content)
        return RequestInfo(
            model=model, max_tokens=max_tokens, thinking_type=thinking_type, thinking_budget=thinking_budget,
            service_tier=service_tier, route=route, provider=provider, server_address=server_address,
            server_port=server_port, budgets=budgets, deadline=deadline, attempts=current_attempt(),
        )

    def open(self, request: RequestInfo, t0: float | None = None) -> StreamRecorder | None:
        """Start recording a call (and its span). None if streamscope itself failed."""
        try:
            rec = StreamRecorder(request, self._finished, t0)
            rec.parent = self.spans.start(request, rec.start_ns)
            if self.metrics is not None:
                self.metrics.opened(request)
            return rec
        except Exception:
            internal_error("pipeline.open")
            return None

    def _finished(self, rec: StreamRecorder, record: StreamRecord) -> None:
        try:
            attrs = finished_attributes(record)
        except Exception:
            internal_error("classifier")
            attrs = A.start_attributes(record.request)
        rec.attributes = attrs
        try:
            self.spans.finish(rec.parent, record, attrs)  # type: ignore[arg-type]
        except Exception:
            internal_error("span export")
        if self.metrics is not None:
            try:
                self.metrics.finished(record, attrs)
            except Exception:
                internal_error("metric export")


def finished_attributes(record: StreamRecord) -> dict[str, AttributeValue]:
    """The record's attributes with its class and `verified` (what the span and metrics get)."""
    attrs = A.record_attributes(record)
    label = classify(attrs)
    attrs[A.CLASS] = label
    attrs[A.VERIFIED] = label == "complete"
    return attrs
