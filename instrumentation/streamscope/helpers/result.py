"""An honest result type: a truncated answer cannot pass for a finished one.

`collect(source)` reads a stream to its end and returns the text with what streamscope learned
about it: `status` (`ok` / `degraded` / `unavailable`), `reason` (the class label), `verified`,
`partial` and `stop_reason`. It does not raise for the failures it classifies (budgets, provider
and transport errors): a consumer decides, e.g. an automated executor refuses anything not
`verified`, while an interface shows a `degraded` answer with a warning. Cancellation still
propagates. It needs streamscope instrumented: the class comes from the call's own span.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from streamscope.adapters import providers
from streamscope.core.calls import Call, call_of, cost_of

Status = Literal["ok", "degraded", "unavailable"]
NO_ANSWER = frozenset({"refused", "budget_exhausted"})
"""Classes whose text, if any, is not an answer (a refusal; a sentence cut at the limit)."""


@dataclass(frozen=True)
class StreamResult:
    text: str
    status: Status
    reason: str
    """The class label (`streamscope.class`)."""
    verified: bool
    partial: bool
    stop_reason: str | None
    error: BaseException | None = None
    """The exception that ended the stream, if one did (kept for logs; not re-raised)."""
    code: str | None = None
    """The failure code (`streamscope.failure.code`); None for an answer or a caller that left."""
    cost: float | None = None
    """What the request cost in US dollars, every attempt's included (retries: the failed ones too);
    None when an attempt's model has no known price."""


def status_of(reason: str, text: str) -> Status:
    if reason == "complete":
        return "ok"
    if not text or reason in NO_ANSWER:
        return "unavailable"
    return "degraded"


def _call(source: Any) -> Call | None:
    # A retry iterator knows its last attempt's call, even one that failed before a stream existed.
    found = getattr(source, "call", None)
    return found if isinstance(found, Call) else call_of(source)


def _text_of(source: Any) -> Any:
    """The adapter's `text_of` for `source`'s events (found from the first event if uninstrumented)."""
    call = _call(source)
    if call is not None and call.helpers is not None:
        return call.helpers.text_of

    def first(event: Any) -> str:
        helpers = providers.helpers_for(event)
        return helpers.text_of(event) if helpers is not None else ""

    return first


def _result(source: Any, text: str, error: BaseException | None) -> StreamResult:
    call = _call(source)
    attrs = (call.attributes if call is not None else None) or {}
    reason = attrs.get("streamscope.class")
    if not isinstance(reason, str):
        raise RuntimeError("streamscope.collect needs AnthropicInstrumentor().instrument() first")
    stop = attrs.get("streamscope.stop_reason")
    code = attrs.get("streamscope.failure.code")
    return StreamResult(
        text=text, status=status_of(reason, text), reason=reason, verified=bool(attrs.get("streamscope.verified")),
        partial=bool(attrs.get("streamscope.partial")), stop_reason=stop if isinstance(stop, str) else None,
        error=error, code=code if isinstance(code, str) else None, cost=cost_of(_attempts(source, call)),
    )


def _attempts(source: Any, call: Call | None) -> list[Call] | list[Call | None]:
    """Every attempt's call: a retry iterator keeps them all; a plain stream has one."""
    found = getattr(source, "calls", None)
    return found if isinstance(found, list) else [call]


class _Reading:
    """A stream being read to its end: the text so far, and the exception that ended it, if one did."""

    def __init__(self, source: Any) -> None:
        self.source = source
        self.text_of = _text_of(source)
        self.parts: list[str] = []
        self.error: BaseException | None = None

    def add(self, event: Any) -> None:
        self.parts.append(self.text_of(event))

    @contextmanager
    def keeping_error(self) -> Iterator[None]:
        """The exception that ends the stream is kept for the result (and logs), not raised."""
        try:
            yield
        except Exception as exc:
            self.error = exc

    def result(self) -> StreamResult:
        return _result(self.source, "".join(self.parts), self.error)


def collect(stream: Iterable[Any]) -> StreamResult:
    """Read a raw stream or an entered `messages.stream()` helper to its end."""
    reading = _Reading(stream)
    try:
        with reading.keeping_error():
            for event in stream:
                reading.add(event)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()
    return reading.result()


async def acollect(stream: AsyncIterable[Any]) -> StreamResult:
    """The async form of `collect`."""
    reading = _Reading(stream)
    try:
        with reading.keeping_error():
            async for event in stream:
                reading.add(event)
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            await close()
    return reading.result()
