"""One instrumented call, as streamscope tracks it, and how the helpers find it.

An adapter gets a `Call` from `Pipeline.open()` when a streamed request is sent and hangs it on
the SDK's stream object (`ATTR` in its `__dict__`), so the helpers (`collect`, the retry line)
and the stream hooks find it from the stream alone. The recorder holds what the hot path
writes; the call holds what the layers around it keep: the span started for it, the adapter's
finalizer and timeout to restore, the SDK-specific helpers, and the attributes it ended with.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from opentelemetry.util.types import AttributeValue

from .attributes import COST_USD, EXCEPTION_MESSAGE, EXCEPTION_TYPE
from .errors import exception_type
from .guard import internal_error
from .recorder import StreamRecorder

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace.sampling import Decision, SamplingResult
    from opentelemetry.trace import Span, SpanContext

    from .content import CaptureMode
    from .errors import SDKTimeout
    from .failures import Failure
    from .record import End, RequestInfo


def end(rec: StreamRecorder, how: End, error_type: str | None = None, budget: str | None = None, *,
        t: float | None = None, code: str | None = None, exc: BaseException | None = None) -> None:
    """The one way a call's record ends, whatever ends it (the stream, an exception the adapter
    read, a budget, the caller's close or cancel, a dropped stream): only the first end counts
    (`StreamRecorder.finish`, which stops the budgets' watch and hands the record on). `exc`: the
    exception of an error end, named for the `gen_ai.client.operation.exception` event (never on
    the span); its message is the provider's or the transport's text, kept only where the user
    opted in to content. Never raises: a failure here is streamscope's, counted and logged once."""
    try:
        if exc is not None and how == "error" and not rec.finished:
            rec.response_attribute(EXCEPTION_TYPE, exception_type(exc))
            if rec.content is not None:
                rec.response_attribute(EXCEPTION_MESSAGE, str(exc))
        rec.finish(how, error_type, budget, t, code)
    except Exception:
        internal_error("finish")


class Started(NamedTuple):
    """A span whose identity is decided: what an in-flight stream holds."""

    parent: Context
    """The caller's context when the request was sent: the span's parent."""
    context: SpanContext
    """The span's own ids and flags, sent with the request."""
    sampling: SamplingResult | Decision | None
    """The sampler's decision, replayed when the span is created at the end (SDK tracers): only the
    `Decision` where the sampler added no attributes of its own (the span gets all of its own at
    the end anyway), so an in-flight stream does not hold its start attributes twice."""
    span: Span | None
    """Another tracer's span, started when the request was sent."""


ATTR = "_streamscope"
"""The key of a stream's `Call` in the SDK stream object's `__dict__`."""


class Helpers(Protocol):
    """What the provider-neutral helpers need from one SDK's adapter."""

    def is_content(self, event: Any, first_content: str = "text") -> bool:
        """Whether `event` is a content event under the `first_content` setting."""

    def text_of(self, event: Any) -> str:
        """The visible text an event carries, else ''."""

    def starts_tool_call(self, event: Any) -> bool:
        """Whether `event` begins (or carries part of) a tool call: what a continuation never resumes."""

    def failure(self, exc: BaseException) -> Failure | None:
        """What one of this SDK's exceptions (or its transport's) means: its code, whether to retry,
        the provider's retry-after; None for another's."""

    def sends_when_called(self, obj: Any) -> bool | None:
        """For one of this SDK's clients: whether a call on it sends its request when called (a
        sync client: True) or only once awaited or entered (an async one: False). None for
        anything else."""

    @property
    def timeout_class(self) -> type[SDKTimeout] | None:
        """The `StreamTimeout` a budget's firing raises into this SDK's callers: also the SDK's own
        `APITimeoutError`, for frameworks keyed on its errors; made once. None: a plain one."""


class CallOpener(Protocol):
    """What an adapter calls when a streamed request is sent (the pipeline, wired by the instrumentor)."""

    capture: CaptureMode
    """Content capture, from OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT (off by default)."""

    def request(self, *, provider: str, model: str | None, max_tokens: int | None = None,
                thinking_budget: int | None = None, server_address: str | None = None,
                server_port: int | None = None, attributes: Mapping[str, AttributeValue] | None = None,
                request_id_key: str = "streamscope.request.id", now: float | None = None,
                prompt_chars: int | None = None) -> RequestInfo:
        """What a call is, with the caller's route and deadline and the budgets in force."""

    def open(self, request: RequestInfo, t0: float | None = None, helpers: Helpers | None = None,
             client: object = None) -> Call | None:
        """Start recording a call (and its span) sent by `client`. None if streamscope itself failed."""

    def unobserved(self, provider: str, by: str, why: str = "request", path: str | None = None) -> None:
        """A streamed call streamscope saw but could not observe, `why`: the package `by` took its
        request path over (`request`), read its whole body inside the request (`read_whole`), or
        the SDK streamed from an endpoint (`path`) streamscope does not know (`path`)."""


class Outcomes(Protocol):
    """Where the layers above a call (the retry helpers, the relay) report a logical request (the
    pipeline that opened the call). Never raises."""

    def attempted(self, request: RequestInfo, attempts: int) -> None:
        """A logical request ended after `attempts` attempts."""

    def retried(self, request: RequestInfo, code: str) -> None:
        """An attempt that failed with `code` is being retried."""

    def relayed(self, request: RequestInfo, outcome: str, code: str | None, partial: bool, status: int) -> None:
        """A relayed stream ended: `outcome`, its failure code, partial, the HTTP status sent."""

    def continued(self, request: RequestInfo, continuations: int, outcome: str) -> None:
        """A relayed stream that `continuations` new requests carried on ended with `outcome`."""

    def stream_logged(self, fields: Mapping[str, Any], call: Call | None) -> None:
        """The one log record of a stream (`fields`), with `call`'s span context."""


class Call:
    """One streamed call: its recorder, its span, and what the adapter keeps for it."""

    __slots__ = ("__weakref__", "attempt", "attributes", "finalizer", "helpers", "notes", "outcomes", "recorder",
                 "refused", "restore_read", "span")

    def __init__(self, recorder: StreamRecorder, span: Started | None, helpers: Helpers | None = None,
                 outcomes: Outcomes | None = None) -> None:
        self.recorder = recorder
        self.span = span
        self.helpers = helpers
        self.outcomes = outcomes
        """The pipeline that opened the call, for what the layers above it report."""
        self.finalizer: Any = None
        """The adapter's `weakref.finalize` on the stream: it ends the record if the stream is dropped."""
        self.restore_read: tuple[float | None] | None = None
        """Sync: the caller's own read timeout, put back on the response once the headers are in."""
        self.attributes: Mapping[str, AttributeValue] | None = None
        """The span's attributes, class included, once the call has ended."""
        self.notes: dict[str, AttributeValue] | None = None
        """What a layer above says of the call while it runs (the relay: resumes, abandoned), added
        to the span's attributes when it ends (not to the metrics')."""
        self.attempt: tuple[Any, SpanContext | None, int] | None = None
        """(its key, the attempt it retries, its number) where a framework may retry it
        (`core.attempts`); None inside streamscope's own retry line or where streamscope failed."""
        self.refused: BaseException | None = None
        """The breaker is open (a `CircuitOpen`): the adapter ends the record with it and raises it
        into the caller, sending nothing."""

    def end(self, how: End, error_type: str | None = None, budget: str | None = None, *,
            code: str | None = None) -> None:
        """The call ended `how` (`end()`: only the first end counts; never raises)."""
        end(self.recorder, how, error_type, budget, code=code)

    def note(self, key: str, value: AttributeValue) -> None:
        """Say something of the call while it runs (a resume, a generation abandoned): on its span
        when it ends. A note after the end is lost (the span is written)."""
        self.notes = {**(self.notes or {}), key: value}

    @property
    def span_context(self) -> SpanContext | None:
        """The call's span's own ids (for the links of what follows it), None where none was started."""
        return self.span.context if self.span is not None else None

    @property
    def label(self) -> str | None:
        """The class the call ended with, or None while it runs."""
        found = (self.attributes or {}).get("streamscope.class")
        return found if isinstance(found, str) else None


_capture: ContextVar[list[Call] | None] = ContextVar("streamscope_capture", default=None)


@contextmanager
def capture_calls() -> Iterator[list[Call]]:
    """Collects the calls started inside (also those that failed before a stream existed), for
    helpers that must know how their call ended."""
    calls: list[Call] = []
    token = _capture.set(calls)
    try:
        yield calls
    finally:
        _capture.reset(token)


def captured(call: Call) -> None:
    """An adapter announces a call it opened (to `capture_calls` blocks around it)."""
    sink = _capture.get()
    if sink is not None:
        sink.append(call)


def call_of(stream: Any) -> Call | None:
    """The call of a raw SDK stream, or of a helper wrapping one (`_raw_stream`), if instrumented."""
    raw = getattr(stream, "_raw_stream", stream)
    found = getattr(raw, "__dict__", {}).get(ATTR)
    return found if isinstance(found, Call) else None


def cost_of(calls: Iterable[Call | None]) -> float | None:
    """A logical request's cost in US dollars: the sum over its attempts' calls (retried and failed
    ones too). None when it cannot be known: an ended attempt has no price (its model has none
    known), or no attempt was recorded at all (the instrumentation off, a call that was not
    streamed): never 0.0 for a call that may have been billed."""
    total, known = 0.0, False
    for call in calls:
        attrs = call.attributes if call is not None else None
        if attrs is None:
            continue  # no call (nothing was sent), or one still running: nothing billed to add yet
        usd = attrs.get(COST_USD)
        if not isinstance(usd, float | int) or isinstance(usd, bool):
            return None
        total, known = total + usd, True
    return total if known else None
