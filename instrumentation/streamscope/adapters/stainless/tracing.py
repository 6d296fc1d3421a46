"""The SDK's own tracing inside an instrumented call: it carries streamscope's span, records nothing.

The SDK (anthropic >= 2.10) makes a CLIENT span of its own whenever a tracer provider is set, and
sends the trace context of its current span with each attempt. Inside a call streamscope
observes, the SDK's tracer is replaced by this one, so the request carries the identity of
streamscope's span (honouring the SDK's propagation switch and the registered propagators) and
there is exactly one span per streamed call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN_CONTEXT, NonRecordingSpan, Span, Tracer

from streamscope.core.calls import Started


class ContextTracer(Tracer):
    """What the SDK's own tracing gets inside an instrumented call: spans that record nothing and
    carry the identity of streamscope's span, so the SDK sends that trace context with every
    attempt (honouring its own propagation switch and the registered propagators) and makes no
    span of its own."""

    def __init__(self, current: Callable[[], Started | None]) -> None:
        self._current = current

    def start_span(self, *args: Any, **kwargs: Any) -> Span:
        started = self._current()
        return NonRecordingSpan(started.context if started is not None else INVALID_SPAN_CONTEXT)

    @contextmanager  # the SDK only enters it: any context manager does (the API's own kind is private)
    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Iterator[Span]:  # type: ignore[override]
        with trace.use_span(self.start_span(), end_on_exit=False) as span:
            yield span
