"""The span exporter: one CLIENT span per streamed call, written once, from the finished record.

When the request is sent only the caller's context is kept (the span's parent); the span itself
is created when the stream ends, with the request's start time, its start attributes (what a
sampler sees) and everything else. So an in-flight stream holds no span object, and the span is
never current anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.util.types import AttributeValue

from .. import attributes as A
from ..content import EVENT_NAME, CapturedContent
from ..record import RequestInfo, StreamRecord


def span_name(request: RequestInfo) -> str:
    return f"chat {request.model}" if request.model else "chat"


class SpanWriter:
    def __init__(self, tracer: Tracer) -> None:
        self.tracer = tracer

    @staticmethod
    def start() -> Context:
        """The caller's context when the request is sent: the span's parent."""
        return otel_context.get_current()

    def finish(self, parent: Context, record: StreamRecord, attributes: Mapping[str, AttributeValue]) -> None:
        """Create the span (started at the request), write attributes and timed events, set the
        status, and end it at the record's end time."""
        span = self.tracer.start_span(
            span_name(record.request), context=parent, kind=SpanKind.CLIENT,
            attributes=A.start_attributes(record.request), start_time=record.start_ns,
        )
        if not span.is_recording():
            span.end()
            return
        span.set_attributes(attributes)
        start = record.start_ns

        def at(seconds: float) -> int:
            return start + int(seconds * 1e9)

        if record.time_to_first_content is not None:
            span.add_event(A.EVENT_FIRST_CONTENT, timestamp=at(record.time_to_first_content))
        if record.thinking_end is not None:
            span.add_event(A.EVENT_THINKING_DONE, timestamp=at(record.thinking_end))
        if record.budget_fired is not None:
            span.add_event(A.EVENT_BUDGET_FIRED, {A.BUDGET: record.budget_fired},
                           timestamp=at(record.budget_fired_at if record.budget_fired_at is not None else record.duration))
        content = record.content
        if isinstance(content, CapturedContent):  # only when the user opted in
            reasons = attributes.get(A.FINISH_REASONS) or ("error",)
            captured = content.attributes(str(reasons[0]))  # type: ignore[index]
            if content.mode.span:
                span.set_attributes(captured)
            if content.mode.event:
                span.add_event(EVENT_NAME, captured, timestamp=at(record.duration))
        error = attributes.get(A.ERROR_TYPE)
        if error is not None and error != "cancelled":
            span.set_status(Status(StatusCode.ERROR, str(error)))
        span.end(end_time=at(record.duration))
