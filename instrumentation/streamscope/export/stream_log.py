"""Every stream, one log record: the line an on-call engineer greps for.

On the `logging` logger `streamscope.streams`: INFO for answers and for a caller that went away,
WARNING for failures; the fields as attributes of the record (`extra`), and, where OpenTelemetry's
logs are set up (a `LoggingHandler` on a logger provider, or `OTelHandler`), through them with the
span's trace and span ids: the record is emitted with the call's span context current. Never content.

Written by the relay (`streamscope.serve`) for every relayed request, and by the plain
instrumentation for every call when `instrument(stream_logs=True)` (`call_fields`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry._logs import LoggerProvider, LogRecord, SeverityNumber, get_logger
from opentelemetry.trace import NonRecordingSpan, SpanContext
from opentelemetry.util.types import AttributeValue

from streamscope._version import __version__
from streamscope.core import attributes as A

LOGGER = logging.getLogger("streamscope.streams")
FIELDS = (A.REQUEST_MODEL, A.ROUTE, A.FAILURE_CODE, A.PARTIAL, A.CLASS, A.BUDGET_FIRED)
"""The span's own attributes the record carries, under the same names."""
KEYS = ("request_id", "provider_request_id", *FIELDS, "attempts", "outcome", "chunks", "duration", "cost",
        "resumes", "delivered", "last_event_id", "continuations")
"""Every field of a record, in order."""
ENV = "STREAMSCOPE_STREAM_LOGS"
"""`true` / `false`: the plain instrumentation's records (`instrument(stream_logs=...)` beats it)."""


def fields(attrs: Mapping[str, Any], *, request_id: str | None, provider_request_id: str | None,
           attempts: int, outcome: str, chunks: int, duration: float, resumes: int | None = None,
           cost: float | None = None, delivered: int | None = None, last_event_id: str | None = None,
           partial: bool | None = None, continuations: int | None = None) -> dict[str, Any]:
    """The record's fields: the span's where the span has them (so the two agree), and the
    relay's own (`request_id`, `attempts`, `outcome`, `chunks`, `duration`; `cost`: US dollars
    for every attempt, None when one was unpriced; with a resume buffer, `resumes`: the
    connections that resumed the stream while it was generated, `delivered`: the events that
    reached a browser's connection, `last_event_id`: the last id a reconnect acknowledged, and
    `partial` as the browser had it where that differs from the call's; with `continuation=`,
    `continuations`: the new requests that carried the answer on after a failure)."""
    found = {key: attrs.get(key) for key in FIELDS}
    found[A.PARTIAL] = bool(found[A.PARTIAL]) if partial is None else partial
    record = {"request_id": request_id, "provider_request_id": provider_request_id, **found,
              "attempts": attempts, "outcome": outcome, "chunks": chunks, "duration": round(duration, 6),
              "cost": cost, "resumes": resumes, "delivered": delivered, "last_event_id": last_event_id,
              "continuations": continuations}
    return record


def call_fields(attrs: Mapping[str, AttributeValue], *, request_id_key: str, duration: float) -> dict[str, Any]:
    """The record of one call of the plain instrumentation, from its span's attributes: outcome
    `error` where there is a failure code, `client_disconnect` for a caller that closed, abandoned
    or cancelled (class `cancelled`, no code), else `done`; `attempts` the retry line's attempt
    number (1 outside it); `chunks` the content events; `cost` this call's; no service `request_id`."""
    code = attrs.get(A.FAILURE_CODE)
    outcome = "error" if code is not None else "client_disconnect" if attrs.get(A.CLASS) == "cancelled" else "done"
    provider_id, attempts, chunks = attrs.get(request_id_key), attrs.get(A.ATTEMPTS), attrs.get(A.CONTENT_EVENTS)
    return fields(attrs, request_id=None, provider_request_id=provider_id if isinstance(provider_id, str) else None,
                  attempts=attempts if isinstance(attempts, int) else 1, outcome=outcome,
                  chunks=chunks if isinstance(chunks, int) else 0, duration=duration,
                  cost=cost if isinstance(cost := attrs.get(A.COST_USD), float) else None)


def write(record: Mapping[str, Any], span_context: SpanContext | None) -> None:
    """Log one stream's record (`fields`), with its span current so a log bridge links the two."""
    failed = record.get(A.FAILURE_CODE) is not None
    level = logging.WARNING if failed else logging.INFO
    if not LOGGER.isEnabledFor(level):
        return
    message = " ".join(f"{key}={value}" for key, value in record.items() if value is not None)
    if span_context is None or not span_context.is_valid:
        LOGGER.log(level, "stream %s", message, extra=dict(record))
        return
    with trace.use_span(NonRecordingSpan(span_context), end_on_exit=False):
        LOGGER.log(level, "stream %s", message, extra=dict(record))


class OTelHandler(logging.Handler):
    """The stream log's records as OpenTelemetry log records (what `streamscope.telemetry.setup()`
    attaches to `streamscope.streams`): the message as body, the level as severity, the current
    span's trace context (`write` makes the call's span current), and the fields as attributes,
    those without a value (None) left out. Nothing else of the `logging` record goes out."""

    def __init__(self, logger_provider: LoggerProvider | None = None, level: int = logging.NOTSET) -> None:
        super().__init__(level)
        self.logger = get_logger(LOGGER.name, __version__, logger_provider=logger_provider)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            found = record.__dict__
            attributes = {key: found[key] for key in KEYS if found.get(key) is not None}
            severity, text = _severity(record.levelno)
            self.logger.emit(LogRecord(
                timestamp=int(record.created * 1e9), observed_timestamp=time.time_ns(),
                context=otel_context.get_current(), severity_number=severity, severity_text=text,
                body=record.getMessage(), attributes=attributes))
        except Exception:
            self.handleError(record)


def _severity(level: int) -> tuple[SeverityNumber, str]:
    if level >= logging.ERROR:
        return SeverityNumber.ERROR, "ERROR"
    if level >= logging.WARNING:
        return SeverityNumber.WARN, "WARN"
    if level >= logging.INFO:
        return SeverityNumber.INFO, "INFO"
    return SeverityNumber.DEBUG, "DEBUG"
