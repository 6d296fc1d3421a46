"""`relay()`: one instrumented provider stream, relayed to a browser as Server-Sent Events.

The contract it keeps, whatever happens upstream:
* retries only before the first content reaches the browser, inside the request's `deadline()`,
  each attempt one provider request (the retry line, `astream_with_retry`);
* the HTTP status is held until the first content, or until `heartbeat` seconds pass with none: a
  failure in that window is a real HTTP error (the failure code's status, a JSON body
  `{"code", "request_id"}`, `Retry-After` passed on); after it, failures are told in-band;
* exactly one terminal event: `done` (finish reason, class, verified; `max_tokens` and refusals
  are answers) or `error` (code, request id, partial); never exception or provider text;
* `: keep-alive` comments keep proxies from closing a quiet connection;
* the browser going away cancels the relay: the provider connection is closed at once (the call's
  class is `cancelled`, the relay's outcome `client_disconnect`) and the cancel goes on up;
* a request with `Last-Event-ID` (a reconnect) or `Streamscope-Cancel` starts nothing; with a
  resume buffer, an `Idempotency-Key` the same request used follows its answer (`idempotency`).

The response (`response.RelayResponse`) keeps the connection alive and notices a disconnect while
streaming; the hold before the status is this module's, as is the framing of each event
(`wire.framed`, its `event:` line made once per name).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

import anyio
from opentelemetry.trace import use_span
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from streamscope.adapters import providers
from streamscope.adapters.providers import retry_decision
from streamscope.core import attributes as A
from streamscope.core import fleet_signals
from streamscope.core.calls import Call
from streamscope.core.context import continuing, current_deadline, relaying
from streamscope.core.failures import HTTP_STATUS, INTERNAL, Failure
from streamscope.core.guard import internal_error
from streamscope.core.keywords import checked
from streamscope.export import stream_log
from streamscope.helpers.retry import Backoff

from . import idempotency
from .buffers.base import ResumeBuffer
from .buffers.generation import Generation
from .continuation import DEFAULT_CONTINUATIONS, Chain, Continuing
from .mistakes import discard, report, wrong_argument
from .observed import stop_reason
from .options import check_options
from .response import RelayResponse
from .resume import followed, generate, nothing, resumed, told_off
from .source import Source
from .wire import CLOSE_WAIT, KEEP_ALIVE, LINE_BREAK, Terminal, error_event, event_line, framed, terminal

__all__ = ["EventMap", "relay", "text_events"]

EventMap = Callable[[Any], Iterable[tuple[str, Mapping[str, Any]]]]
"""A provider event → the SSE events (name, JSON data) to send for it. `done` and `error` are the
relay's own: a map that returns them has them dropped."""
TERMINAL = frozenset({"done", "error"})
EXPIRED = Failure("upstream_timeout", False)
_NOTHING = object()
"""No event yet: a continuation's line is read from its first."""


def text_events(event: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """The default map: visible answer text as `token` events (`{"text": ...}`), nothing else."""
    helpers = providers.helpers_for(event)
    text = helpers.text_of(event) if helpers is not None else ""
    return [("token", {"text": text})] if text else []


@checked("relay()")
async def relay(request: Request, open_stream: Callable[[], Any], *, heartbeat: float = 15.0,
                request_id: str | None = None, attempts: int = 3, backoff: Backoff | None = None,
                events: EventMap | None = None, send_timeout: float | None = 30.0,
                resume: ResumeBuffer | None = None, continuation: Callable[[str], Any] | None = None,
                continuations: int = DEFAULT_CONTINUATIONS) -> Response:
    """The response for one streamed call relayed as SSE. `open_stream()` opens the provider
    stream: any call streamscope instruments, sync or async (`client.messages.create(...,
    stream=True)`, `client.messages.stream(...)`, OpenAI's chat completions and responses).
    `events` maps provider events to SSE events (default `text_events`). `resume`: a buffer
    (`MemoryBuffer`, `RedisBuffer`) that keeps the generation for a browser that reconnects with
    `Last-Event-ID`, on this worker or another that shares it (None: a reconnect gets 204).
    `continuation(partial)`: opens a stream that carries on from the answer's `partial` text, for a
    plain-prose answer that fails mid-way (at most `continuations` times; `continuation.py`).

    A wrong keyword or option value raises at the call (`TypeError` / `ValueError`, one line), as
    any call with a wrong argument does; a wrong `open_stream` (an opened stream, a coroutine, a
    call that is not streamed) is answered 500 `internal_error` with one ERROR line naming the fix
    (`mistakes`): what it opened must be closed, and the browser still gets the error shape."""
    check_options(heartbeat, request_id, events, send_timeout, resume, continuation, continuations)
    run = _Relayed(request_id or uuid.uuid4().hex, events or text_events)
    if continuation is not None:
        run.continuing = Continuing(continuation, continuations, attempts, backoff)
    source = Source(open_stream, attempts, backoff)
    mistake = wrong_argument(open_stream)
    if mistake is not None:
        report(mistake)
        await discard(open_stream)
        return run.refused(INTERNAL)
    if idempotency.CANCEL_HEADER in request.headers:  # the client's abort(): never a new generation
        return await idempotency.cancel(request, resume, run.headers)
    last_event_id = request.headers.get("last-event-id")
    if last_event_id is not None:
        if resume is None:
            return told_off(run.headers)
        return await resumed(resume, last_event_id, _headers, heartbeat=heartbeat, send_timeout=send_timeout)
    deadline = current_deadline()
    if deadline is not None and deadline <= time.monotonic():
        run.unsent_cost = 0.0
        return run.refused(EXPIRED)
    key = idempotency.key_of(request) if resume is not None else None
    if resume is not None and key is not None:
        their_id, found = await idempotency.admit(resume, key, await idempotency.fingerprint(request),
                                                  run.request_id, heartbeat)
        if isinstance(found, Failure):
            run.unsent_cost = 0.0
            return run.refused(found)
        if isinstance(found, str):
            return nothing(found, _headers(their_id))
        if found is not None:  # the same request again: its answer from the first event
            return followed(found, _headers(their_id), heartbeat=heartbeat, send_timeout=send_timeout)
        run.claim = (resume, key)
    run.line = Chain(source.line)
    flow = source.line.__aiter__()
    with relaying():  # every attempt opens in this task: the relay writes the stream's one log record
        first: asyncio.Future[Any] = asyncio.ensure_future(anext(flow))
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({first, gone}, timeout=heartbeat, return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        first.cancel()
        gone.cancel()
        raise
    gone.cancel()
    if gone.done() and not gone.cancelled() and not first.done():
        first.cancel()  # the browser left while the status was held: stop the generation now
        await run.close()
        run.release()
        run.finish("client_disconnect", None, 499)
        return Response(status_code=499, headers=run.headers)
    if first.done() and not first.cancelled():
        exc = first.exception()
        if exc is not None and not isinstance(exc, StopAsyncIteration):
            failure = retry_decision(exc) or Failure("internal_error", False)
            return run.refused(failure)
    if resume is not None:
        run.generation, response = generate(resume, run.request_id, run.line, run.body(first, flow),
                                            waiting=not first.done(), headers=run.headers, heartbeat=heartbeat,
                                            send_timeout=send_timeout)
        run.generation.on_settled = run.settled  # before the generation's task first runs
        run.generation.claim, run.claim = key, None  # the key is held as long as the generation
        return response
    return RelayResponse(run.body(first, flow), headers=run.headers, ping=heartbeat, send_timeout=send_timeout,
                         closed=lambda: run.unstarted(first))


def _headers(request_id: str) -> dict[str, str]:
    return {"X-Request-Id": request_id, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def _disconnected(request: Request) -> None:
    """Returns when the browser goes away (the request's body has been read by then)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


class _Relayed:
    """One relayed stream: what went downstream, and its one ending (log record and metrics)."""

    def __init__(self, request_id: str, events: EventMap) -> None:
        self.request_id = request_id
        self.events = events
        self.headers = _headers(request_id)
        self.sent = 0
        self._id = LINE_BREAK.sub("", request_id)
        self._heads: dict[str, str] = {}
        """Each event name's `event:` line."""
        self.t0 = time.monotonic()
        self.line: Chain | None = None
        self.continuing: Continuing | None = None
        self.ended = False
        self.stop: str | None = None
        """The provider's stop reason as the relay read it, for a call streamscope did not observe."""
        self.generation: Generation | None = None
        """With a resume buffer: the generation the connections follow."""
        self.pending: tuple[str, str | None, int] | None = None
        """With a resume buffer: the generation's own ending, kept until it is known whether a
        browser received it (`settled`)."""
        self.unsent_cost: float | None = None
        """The record's cost where no attempt started: 0.0 where the relay sent nothing (an expired
        deadline), None where it cannot know (a wrong `open_stream`: the caller's code may have called)."""
        self.claim: tuple[ResumeBuffer, str] | None = None
        """The buffer and idempotency key this request claimed, until its generation holds it."""

    @property
    def call(self) -> Call | None:
        found = getattr(self.line, "call", None)
        return found if isinstance(found, Call) else None

    def refused(self, failure: Failure) -> JSONResponse:
        """A failure before the status was sent: a real HTTP error (a claimed key given back)."""
        self.release()
        status = HTTP_STATUS[failure.code]
        headers = dict(self.headers)
        if failure.retry_after is not None:
            headers["Retry-After"] = str(math.ceil(failure.retry_after))
        self.finish("error", failure.code, status)
        return JSONResponse({"code": failure.code, "request_id": self.request_id}, status, headers=headers)

    def _event(self, name: str, data: Mapping[str, Any]) -> bytes:
        """One event, numbered: `<request_id>:<n>` (the JSON text has no line break, the id and
        the name have theirs removed)."""
        head = self._heads.get(name)
        if head is None:
            head = self._heads[name] = event_line(name)
        text = json.dumps(data)
        self.sent += 1
        return framed(f"{self._id}:{self.sent}", head, text)

    def _mapped(self, event: Any) -> list[bytes]:
        try:
            found = self.events(event)
            if self.continuing is None:  # the hot path: framed from the map's list (a generator: read whole first)
                return [self._event(n, d) for n, d in (found if type(found) is list else [*found]) if n not in TERMINAL]
            pairs = [(name, data) for name, data in found if name not in TERMINAL]
            framed = [self._event(name, data) for name, data in pairs]
        except Exception:
            internal_error("serve.events")
            return []
        try:
            self.continuing.saw(event, pairs)
        except Exception:
            internal_error("serve.continuation")
        return framed

    async def _next(self, flow: AsyncIterator[Any]) -> Any:
        """The next provider event. A continuation's attempts are opened marked as such, in the
        trace of the request: under the current span (a server instrumentation's), else under
        the first attempt's span."""
        if self.continuing is None or not self.continuing.made:
            return await anext(flow)
        with continuing(self.continuing.made), use_span(self.continuing.parent(), end_on_exit=False):
            return await anext(flow)

    def _seam(self, drop: int) -> bytes:
        """Where a continuation joins the answer: the page drops the last `drop` characters it
        showed (the half sentence the continuation does not carry on from)."""
        assert self.continuing is not None
        return self._event("seam", {"request_id": self.request_id, "continuation": self.continuing.made,
                                    "drop": drop})

    async def body(self, first: asyncio.Future[Any],
                   flow: AsyncIterator[Any]) -> AsyncIterator[bytes]:
        try:
            if not first.done():
                yield KEEP_ALIVE  # the heartbeat interval passed with nothing to send
            event: Any = _NOTHING
            opening: asyncio.Future[Any] | None = first
            while True:  # a line of attempts, then each continuation's
                try:
                    if opening is not None:
                        event, opening = await opening, None
                    observed = self.call is not None  # no retry once an event is delivered: the call stays
                    while True:
                        if event is not _NOTHING:
                            if not observed:
                                self.stop = stop_reason(event) or self.stop
                            for sse in self._mapped(event):
                                yield sse
                        event = await self._next(flow)
                except StopAsyncIteration:
                    break
                except Exception as exc:
                    found = None
                    if self.continuing is not None and self.sent > 0 and self.line is not None:
                        try:
                            found = self.continuing.next(exc, self.line)
                        except Exception:
                            internal_error("serve.continuation")
                    if found is None:
                        raise
                    drop, flow = found
                    yield self._seam(drop)
                    event = _NOTHING
            yield self._ending()
        except Exception as exc:
            failure = retry_decision(exc) or Failure("internal_error", False)
            yield self._error(failure.code)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.close()
            self.finish("client_disconnect", None, 200)
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await self.close()

    def _ending(self) -> Terminal:
        """`done` for an answer; `error` for a stream that ended without its final event. For a
        call streamscope did not observe, the stop reason the relay read, class null."""
        call = self.call
        attrs = (call.attributes if call is not None else None) or {}
        code = attrs.get("streamscope.failure.code")
        if call is None and self.stop is None:
            code = "upstream_unreachable"  # no final event: what an observed call's `incomplete_stream` gets
        if isinstance(code, str):
            return self._error(code)
        self.finish("done", None, 200)
        finish = attrs.get("streamscope.stop_reason") if call is not None else self.stop
        return terminal(self.request_id, self.sent + 1, "done", {
            "request_id": self.request_id, "chunks": self.sent,
            "finish_reason": finish, "class": attrs.get("streamscope.class"),
            "verified": bool(attrs.get("streamscope.verified", False))})

    def _error(self, code: str) -> Terminal:
        self.finish("error", code, 200)
        return error_event(self.request_id, self.sent + 1, code, self.sent > 0)

    async def unstarted(self, first: asyncio.Future[Any]) -> None:
        """The response ended before its body began (a `HEAD` request, a browser gone before the
        status went out): what the body's own ending does. A no-op once the body has ended."""
        first.cancel()
        if not self.ended:
            await self.close()
            self.finish("client_disconnect", None, 200)

    def release(self) -> None:
        """The request started no generation: its idempotency key may start it again."""
        claim, self.claim = self.claim, None
        if claim is not None:
            idempotency.release(*claim, self.request_id)

    async def close(self) -> None:
        """Close the provider connection (a no-op once closed), waiting at most `CLOSE_WAIT`."""
        if self.line is not None:
            with anyio.move_on_after(CLOSE_WAIT):
                await self.line.close()

    def settled(self, generation: Generation) -> None:
        """The generation knows whether its terminal event reached a browser: the record now."""
        if self.pending is not None:
            self.finish(*self.pending)

    def finish(self, outcome: str, code: str | None, status: int) -> None:
        """The stream's one ending: its log record and `streamscope.relay.streams`. With a resume
        buffer, once the generation is settled: a stream no browser received to its end is a
        `client_disconnect`, whatever the generation did after the browser left. Never raises."""
        if self.ended:
            return
        generation = self.generation
        if generation is not None and generation.settled is None:
            self.pending = self.pending or (outcome, code, status)
            return
        self.ended = True
        partial = None
        if generation is not None and not generation.settled:
            outcome, code, partial = "client_disconnect", None, generation.delivered > 0
        try:
            call = self.call
            attrs = (call.attributes if call is not None else None) or {}
            if call is None:  # no span to agree with: partial as the `error` event says it
                attrs = {"streamscope.partial": outcome != "done" and self.sent > 0}
            if code is not None or partial is not None:  # a browser that left: no failure of its own
                attrs = {**attrs, "streamscope.failure.code": code}
            request = call.recorder.request if call is not None else None
            provider_id = attrs.get(request.request_id_key) if request is not None else None
            record = stream_log.fields(
                attrs, request_id=self.request_id, provider_request_id=provider_id if isinstance(
                    provider_id, str) else None, attempts=getattr(self.line, "attempts", 0) or 0, outcome=outcome,
                chunks=self.sent, duration=time.monotonic() - self.t0,
                resumes=generation.resumes if generation is not None else None,
                continuations=self.continuing.made if self.continuing is not None else None,
                cost=self.line.cost if self.line is not None else self.unsent_cost,
                delivered=generation.delivered if generation is not None else None,
                last_event_id=(f"{self.request_id}:{generation.acknowledged}"
                               if generation is not None and generation.acknowledged else None),
                partial=partial)
            if call is not None and call.outcomes is not None:
                call.outcomes.stream_logged(record, call)
                if partial is None:
                    partial = outcome != "done" and self.sent > 0  # as on the span: cut after content was sent
                call.outcomes.relayed(call.recorder.request, outcome, code, partial, status)
                if self.continuing is not None:
                    call.outcomes.continued(call.recorder.request, self.continuing.made, outcome)
            else:
                stream_log.write(record, None)
                if call is None:
                    fleet_signals.relayed(outcome, code, bool(attrs.get(A.PARTIAL)), status)
        except Exception:
            internal_error("serve.finish")
