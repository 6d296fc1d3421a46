"""The span exporter: one CLIENT span per streamed call, written once, from the finished record.

The span's identity is decided when the request is sent, because the request carries it: the
W3C trace context each streamed request sends (as the SDK's own tracing does) is this span's.
With the OpenTelemetry SDK's tracer, only that identity is kept while the stream is in flight
(the caller's context, the span context, the sampler's decision: a few hundred bytes); the
span itself is created when the stream ends, with the request's start time and exactly those
ids and that decision, so an in-flight stream holds no span object and the span is never
current anywhere. With any other tracer the span is started when the request is sent and held
until the end.

OpenTelemetry's "suppress instrumentation" flag is not streamscope's to obey: a library that
traces the same call (Logfire, around the SDK's request) sets it to keep transport-level spans
(httpx) out of its trace, and a tracer that honours it (Logfire's) would hand streamscope a span
that records nothing. The OpenTelemetry SDK's tracer does not read the flag; with any other
tracer, streamscope's span is started with the flag cleared, so it is recorded either way.

Captured content (opt-in, `core/content.py`) goes on the span, and/or into the conventions'
`gen_ai.client.inference.operation.details` event: a log record with that event name (severity
DEBUG), emitted through OpenTelemetry's logs API when the span ends, with the span's trace
context, the span's `gen_ai.*` attributes, and the content as structured attributes (lists and
maps, never JSON strings), as the conventions define the event's attributes. Whether the
event goes out at all follows `OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT` as opentelemetry-util-genai
reads it. A failed call (`error.type` set, the caller's own cancel aside) also gets the
conventions' `gen_ai.client.operation.exception` event (severity WARN): the exception's type, and
its message only where the user opted in to content capture.

A span whose `error.type` is set (a failure, a budget, a body cut short, a caller that left
early) has status ERROR, its description the error type (never provider text).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry._logs import Logger, LogRecord, SeverityNumber
from opentelemetry.context import Context
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import (
    Link,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
    Tracer,
)
from opentelemetry.util.types import AttributeValue

from streamscope.core import attributes as A
from streamscope.core.calls import Started
from streamscope.core.content import EVENT_NAME, CapturedContent, CaptureMode, capture_mode
from streamscope.core.guard import internal_error
from streamscope.core.record import RequestInfo, StreamRecord

_RANDOM_TRACE_ID = getattr(TraceFlags, "RANDOM_TRACE_ID", 0)


def span_name(request: RequestInfo) -> str:
    return f"chat {request.model}" if request.model else "chat"


_replay: ContextVar[Started | None] = ContextVar("streamscope_replay", default=None)


class _Replaying(Sampler):
    """The tracer's sampler, except while `finish()` creates a span decided earlier."""

    def __init__(self, inner: Sampler) -> None:
        self.inner = inner

    def should_sample(self, parent_context: Context | None, trace_id: int, *args: Any, **kwargs: Any) -> SamplingResult:
        started = _replay.get()
        if started is not None and started.sampling is not None and started.context.trace_id == trace_id:
            sampling = started.sampling
            if isinstance(sampling, Decision):
                return SamplingResult(sampling, None, started.context.trace_state)
            return sampling
        return self.inner.should_sample(parent_context, trace_id, *args, **kwargs)

    def get_description(self) -> str:
        return self.inner.get_description()


class _ReplayingIds(IdGenerator):
    """The tracer's id generator, except while `finish()` creates a span decided earlier."""

    def __init__(self, inner: IdGenerator) -> None:
        self.inner = inner

    def generate_span_id(self) -> int:
        started = _replay.get()
        return started.context.span_id if started is not None else self.inner.generate_span_id()

    def generate_trace_id(self) -> int:
        started = _replay.get()
        return started.context.trace_id if started is not None else self.inner.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        return bool(getattr(self.inner, "is_trace_id_random", lambda: False)())


def _sdk_tracer(tracer: Tracer) -> SdkTracer | None:
    """The OpenTelemetry SDK tracer behind `tracer` (a proxy resolves once a provider is set),
    made able to replay a decision; None for any other tracer."""
    real = getattr(tracer, "_tracer", tracer) if isinstance(tracer, trace.ProxyTracer) else tracer
    if not isinstance(real, SdkTracer):
        return None
    if not isinstance(real.sampler, _Replaying):  # streamscope's own tracer (its own scope)
        real.sampler = _Replaying(real.sampler)
        real.id_generator = _ReplayingIds(real.id_generator)
    return real


def _decide(tracer: SdkTracer, parent: Context, name: str, attributes: Mapping[str, AttributeValue]) -> Started:
    """The ids and sampling decision `tracer.start_span` would make now (its own steps, in order)."""
    sampler, ids = tracer.sampler, tracer.id_generator
    assert isinstance(sampler, _Replaying) and isinstance(ids, _ReplayingIds)
    parent_context = trace.get_current_span(parent).get_span_context()
    enabled = getattr(tracer, "_is_enabled", None)
    if callable(enabled) and not enabled():
        return Started(parent, parent_context, None, None)  # the tracer makes no span: the parent's ids travel
    if parent_context is None or not parent_context.is_valid:
        trace_id = ids.inner.generate_trace_id()
        random = ids.is_trace_id_random()
    else:
        trace_id = parent_context.trace_id
        random = bool(parent_context.trace_flags & _RANDOM_TRACE_ID)
    sampling = sampler.inner.should_sample(parent, trace_id, name, SpanKind.CLIENT, attributes, ())
    flags = TraceFlags.SAMPLED if sampling.decision.is_sampled() else TraceFlags.DEFAULT
    if random:
        flags |= _RANDOM_TRACE_ID
    context = SpanContext(trace_id, ids.inner.generate_span_id(), is_remote=False, trace_flags=TraceFlags(flags),
                          trace_state=sampling.trace_state)
    own = sampling.attributes
    if not own or all(attributes.get(key) == value for key, value in own.items()):
        return Started(parent, context, sampling.decision, None)
    return Started(parent, context, sampling, None)


_SUPPRESSION_KEYS = ("suppress_instrumentation", otel_context._SUPPRESS_INSTRUMENTATION_KEY)
"""The flag under its two names: the key OpenTelemetry's API creates, and the plain string that
older instrumentations (and Logfire) still set and read."""


def _suppressed(context: Context) -> bool:
    return any(context.get(key) for key in _SUPPRESSION_KEYS)


def _unsuppressed(context: Context) -> Context:
    for key in _SUPPRESSION_KEYS:
        context = otel_context.set_value(key, False, context)
    return context


_EVENT_KEYS = (A.SERVER_ADDRESS, A.SERVER_PORT, A.ERROR_TYPE)
"""The span's attributes the content event repeats, besides every `gen_ai.*` one."""
_EXCEPTION_KEYS = (A.OPERATION, A.PROVIDER, A.REQUEST_MODEL, A.SERVER_ADDRESS, A.SERVER_PORT, A.ERROR_TYPE)
"""The span's attributes the exception event repeats."""
EXCEPTION_EVENT = "gen_ai.client.operation.exception"


class SpanWriter:
    def __init__(self, tracer: Tracer, events: Logger | None = None, mode: CaptureMode | None = None) -> None:
        self.tracer = tracer
        self.events = events
        """Where the content and exception events go (OpenTelemetry's logs); None: nowhere."""
        self.mode = capture_mode() if mode is None else mode
        """Whether the details event goes out for a call that captured no content (`emit`)."""

    def start(self, request: RequestInfo, start_ns: int) -> Started:
        """Decide the span's identity when the request is sent (its parent: the caller's context)."""
        parent = otel_context.get_current()
        name, attributes = span_name(request), A.start_attributes(request)
        sdk = _sdk_tracer(self.tracer)
        if sdk is not None:
            return _decide(sdk, parent, name, attributes)
        token = otel_context.attach(_unsuppressed(parent)) if _suppressed(parent) else None
        try:
            span = self.tracer.start_span(name, context=parent, kind=SpanKind.CLIENT, attributes=attributes,
                                          start_time=start_ns)
        finally:
            if token is not None:
                otel_context.detach(token)
        return Started(parent, span.get_span_context(), None, span)

    def finish(self, started: Started, record: StreamRecord, attributes: Mapping[str, AttributeValue],
               retries: SpanContext | None = None) -> None:
        """Create the span (started at the request, with the ids it sent), write attributes and
        timed events, set the status, and end it at the record's end time; then the content event
        (opt-in). `retries`: the attempt a framework's retry follows (a link to its span)."""
        span = started.span
        links = [Link(retries, {A.LINK: A.PREVIOUS_ATTEMPT})] if retries is not None else None
        if span is None:
            with _replaying(started):
                span = self.tracer.start_span(
                    span_name(record.request), context=started.parent, kind=SpanKind.CLIENT,
                    attributes=A.start_attributes(record.request), start_time=record.start_ns, links=links,
                )
        elif links is not None and span.is_recording():
            span.add_link(retries, {A.LINK: A.PREVIOUS_ATTEMPT})  # type: ignore[arg-type]
            if span.get_span_context().span_id != started.context.span_id and started.context.is_valid:
                internal_error("span ids")  # the SDK made its ids another way: the request sent others
        if not span.is_recording():
            span.end()
            self._events(span, record, attributes)
            return
        span.set_attributes(attributes)
        start = record.start_ns

        def at(seconds: float) -> int:
            return start + int(seconds * 1e9)

        if record.time_to_first_content is not None:
            span.add_event(A.EVENT_FIRST_CONTENT, timestamp=at(record.time_to_first_content))
        if record.thinking_end is not None:
            span.add_event(A.EVENT_THINKING_DONE, timestamp=at(record.thinking_end))
        for name, ended, took in record.server_tool_runs:
            event: dict[str, AttributeValue] = {A.SERVER_TOOL_DURATION: took}
            if name is not None:
                event[A.SERVER_TOOL_NAME] = name
            span.add_event(A.EVENT_SERVER_TOOL, event, timestamp=at(ended))
        if record.budget_fired is not None:
            fired_at = record.budget_fired_at if record.budget_fired_at is not None else record.duration
            span.add_event(A.EVENT_BUDGET_FIRED, {A.BUDGET: record.budget_fired}, timestamp=at(fired_at))
        content = record.content
        if isinstance(content, CapturedContent) and content.mode.span:  # only when the user opted in
            span.set_attributes(content.attributes())
        error = attributes.get(A.ERROR_TYPE)
        if error is not None:  # a cancelled call too: the operation did not complete
            span.set_status(Status(StatusCode.ERROR, str(error)))
        span.end(end_time=at(record.duration))
        self._events(span, record, attributes)

    def _events(self, span: trace.Span, record: StreamRecord, attributes: Mapping[str, AttributeValue]) -> None:
        """The log events of a finished call, at the span's end, with its trace context, whether or
        not the span is sampled (they are logs: a log pipeline decides what to keep)."""
        if self.events is None:
            return
        end_ns = record.start_ns + int(record.duration * 1e9)
        context = trace.set_span_in_context(span)
        self._content_event(record, attributes, end_ns, context)
        self._exception_event(record, attributes, end_ns, context)

    def _content_event(self, record: StreamRecord, attributes: Mapping[str, AttributeValue], end_ns: int,
                       context: Context) -> None:
        """The conventions' `gen_ai.client.inference.operation.details` event, where it is on
        (`CaptureMode.emit`): the span's `gen_ai.*` attributes (with the server and the error
        type), and, where the user opted in to content in the event, `gen_ai.input.messages`,
        `gen_ai.output.messages`, `gen_ai.system_instructions` and `gen_ai.tool.definitions` as
        attributes with structured values (never JSON strings): the conventions give the event
        the span's attribute group, and opentelemetry-util-genai writes them there too."""
        content = record.content
        mode = content.mode if isinstance(content, CapturedContent) else self.mode
        if not mode.emit or self.events is None:
            return
        try:
            fields: dict[str, AttributeValue] = {
                key: value for key, value in attributes.items() if key.startswith("gen_ai.") or key in _EVENT_KEYS}
            fields[A.OPERATION] = attributes.get(A.OPERATION, "chat")
            fields[A.PROVIDER] = attributes.get(A.PROVIDER, record.request.provider)
            if isinstance(content, CapturedContent) and content.mode.event:
                fields.update(content.messages())
            self.events.emit(LogRecord(
                timestamp=end_ns, context=context, severity_number=SeverityNumber.DEBUG, severity_text="DEBUG",
                event_name=EVENT_NAME, attributes=fields))
        except Exception:
            internal_error("content event")

    def _exception_event(self, record: StreamRecord, attributes: Mapping[str, AttributeValue], end_ns: int,
                         context: Context) -> None:
        """The conventions' `gen_ai.client.operation.exception` event for a failed call (`error.type`
        set; a caller that closed or cancelled is no failure): `exception.type` the class of the
        exception that ended it (module-qualified), else, where none was raised (a body cut short,
        an error event the SDK yields), the error type; `exception.message` only where the user
        opted in to content capture (the adapter records it only then)."""
        error = attributes.get(A.ERROR_TYPE)
        if error is None or error == "cancelled" or self.events is None:
            return
        try:
            found = dict(record.attributes)
            fields: dict[str, AttributeValue] = {key: attributes[key] for key in _EXCEPTION_KEYS if key in attributes}
            fields[A.EXCEPTION_TYPE] = found.get(A.EXCEPTION_TYPE, error)
            message = found.get(A.EXCEPTION_MESSAGE)
            if message is not None and isinstance(record.content, CapturedContent):
                fields[A.EXCEPTION_MESSAGE] = message
            self.events.emit(LogRecord(
                timestamp=end_ns, context=context, severity_number=SeverityNumber.WARN, severity_text="WARN",
                event_name=EXCEPTION_EVENT, attributes=fields))
        except Exception:
            internal_error("exception event")


@contextmanager
def _replaying(started: Started) -> Iterator[None]:
    token = _replay.set(started)
    try:
        yield
    finally:
        _replay.reset(token)
