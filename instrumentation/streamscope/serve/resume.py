"""The relay with a resume buffer: one generation, any number of connections following it.

The first request starts the generation as a task of its own (`produce`), which appends every
event it frames to the buffer's `Generation`; its connection, and any reconnect that carries
`Last-Event-ID: <request_id>:<n>` (`resumed`), follow the generation from their position. A
reconnect starts no provider request: it is answered from the buffer, or with HTTP 204 when
there is nothing to resume (counted by outcome). A resumed connection has a span of its own,
linked to the span of the call that generated the events (a reconnect is another HTTP request,
with its own trace: a link joins the two without making either trace lie about its parent).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.trace import Link, SpanContext
from starlette.responses import Response

from streamscope.core import fleet_signals
from streamscope.core.attributes import RESUME_OUTCOME, RESUME_REPLAYED_EVENTS
from streamscope.core.guard import internal_error, logger

from .buffers.base import Resumable, ResumeBuffer, parse_last_event_id
from .buffers.generation import Attempts, Generation
from .response import RelayResponse
from .wire import CLOSE_WAIT, KEEP_ALIVE, Terminal

RESUME_HEADER = "Streamscope-Resume"
"""On every 204 answer to a reconnect: why there was nothing to resume (`nothing`, `told_off`)."""
MALFORMED = "malformed_last_event_id"
MALFORMED_EVERY = 60.0
"""Seconds between two log lines for malformed `Last-Event-ID`s (a page's bug repeats on every reconnect)."""
_malformed_said = [-MALFORMED_EVERY, 0]  # when it was last said, how many since


def nothing(outcome: str, headers: dict[str, str], reason: str | None = None) -> Response:
    """HTTP 204: nothing to resume (which tells EventSource to stop reconnecting), counted by
    `outcome`; the `reason` (the outcome unless given) in the `Streamscope-Resume` header."""
    fleet_signals.resumed(outcome)
    return Response(status_code=204, headers={**headers, RESUME_HEADER: reason or outcome})


def told_off(headers: dict[str, str]) -> Response:
    """HTTP 204 for a reconnect to a relay without `resume=`: nothing is kept to resume from."""
    return Response(status_code=204, headers={**headers, RESUME_HEADER: "resume_off"})


def _say_malformed(value: str) -> None:
    """One WARNING line for a `Last-Event-ID` the relay never sent, at most one a minute."""
    now = time.monotonic()
    _malformed_said[1] += 1
    if now - _malformed_said[0] < MALFORMED_EVERY:
        return
    seen, _malformed_said[:] = _malformed_said[1], [now, 0]
    more = f" ({seen} such reconnects since the last line)" if seen > 1 else ""
    logger.warning("streamscope: a reconnect's Last-Event-ID %r is not an id the relay sent "
                   "('<request_id>:<n>'); answered 204 with %s: %s%s. A page that sets Last-Event-ID itself must "
                   "send the id of the last event it received.", value[:80], RESUME_HEADER, MALFORMED, more)


async def resumed(buffer: Any, last_event_id: str, headers: Callable[[str], dict[str, str]], *,
                  heartbeat: float, send_timeout: float | None) -> Response:
    """The answer to a reconnect: the generation's events after the one it names, or 204."""
    parsed = parse_last_event_id(last_event_id)
    if parsed is None:
        _say_malformed(last_event_id)
        return nothing("nothing_to_resume", {"Cache-Control": "no-cache"}, MALFORMED)
    request_id, after = parsed
    try:
        found = await buffer.find(request_id, after)
    except Exception:
        internal_error("serve.resume.find")
        found = "nothing_to_resume"
    if isinstance(found, str):
        return nothing(found, headers(request_id))
    return followed(found, headers(request_id), heartbeat=heartbeat, send_timeout=send_timeout)


def followed(found: Resumable, headers: dict[str, str], *, heartbeat: float, send_timeout: float | None) -> Response:
    """The response that follows a generation a reconnect (or a repeated request) found."""
    return RelayResponse(_follow(found), headers=headers, ping=heartbeat, send_timeout=send_timeout)


async def _follow(found: Resumable) -> AsyncIterator[bytes]:
    span = _span(found.span_context)
    try:
        async for data in found.follow():
            yield data
    finally:
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(CLOSE_WAIT):
                await found.close()
            fleet_signals.resumed(found.outcome)
            if found.replayed:
                fleet_signals.replayed(found.replayed)
            if span is not None:
                span.set_attribute(RESUME_OUTCOME, found.outcome)
                span.set_attribute(RESUME_REPLAYED_EVENTS, found.replayed)
                span.end()


def _span(linked: object | None) -> Any:
    """The resumed connection's span, linked to the generating call's; None where no session is on."""
    try:
        tracer = fleet_signals.tracer()
        if tracer is None:
            return None
        links = [Link(linked)] if isinstance(linked, SpanContext) and linked.is_valid else []
        return tracer.start_span("relay resume", kind=trace.SpanKind.INTERNAL, links=links)  # type: ignore[attr-defined]
    except Exception:
        internal_error("serve.resume.span")
        return None


def generate(buffer: ResumeBuffer, request_id: str, line: Attempts, body: AsyncIterator[Any], *, waiting: bool,
             headers: dict[str, str], heartbeat: float, send_timeout: float | None) -> tuple[Generation, Response]:
    """The first request: its generation (the relay's `body`, read by the retry `line`) as a task of
    its own kept in `buffer`, and the response that follows it (`waiting`: the status went out
    before any content, so a keep-alive first)."""
    generation = buffer.start(request_id)
    generation.line = line
    generation.producer = asyncio.ensure_future(produce(body, generation))
    generation.restart_grace()  # until this connection follows it
    return generation, RelayResponse(follow_first(generation, waiting), headers=headers, ping=heartbeat,
                                     send_timeout=send_timeout)


async def produce(items: AsyncIterator[Any], generation: Generation) -> None:
    """The generation's task: every event the relay frames goes to the buffer (keep-alive comments
    aside), the terminal one last. Cancelled when the generation is abandoned."""
    try:
        async for item in items:
            if item is not KEEP_ALIVE:
                generation.append(item, terminal=type(item) is Terminal)
    except BaseException:  # abandoned: the relay's body has closed the provider connection
        pass


async def follow_first(generation: Generation, waiting: bool) -> AsyncIterator[bytes]:
    """The first connection: a keep-alive at once when the status was sent before any content
    (the heartbeat passed), then the generation from its start."""
    generation.join()
    try:
        if waiting:
            yield KEEP_ALIVE
        async for data in generation.follow(0):
            yield data
    finally:
        generation.leave()
