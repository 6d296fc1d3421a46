"""The adapter for the `anthropic` SDK: the only file that knows its classes.

Where the hooks sit (anthropic >= 2.10; see docs/design.md for why each one):

* `SyncAPIClient.request` / `AsyncAPIClient.request`: every streamed `/v1/messages` call passes
  here once — `messages.create(stream=True)`, the `messages.stream()` helpers (their request is
  sent from the manager's `__enter__`), sync and async, `beta.messages` too. The record starts
  here; when it returns, the response headers have arrived and the SDK's own retries are over.
* `Stream.__iter__` / `__next__` (and `AsyncStream.__aiter__` / `__anext__`): every parsed event
  passes once, on its way to the caller, on every path (the helpers iterate the raw stream).
  `__next__` and `__anext__` run once per event, so they are plain functions, not wrapt's.
* `Stream._iter_events`: every server-sent event, pings included (the SDK drops pings above it).
  Where the SDK's layers there are the pass-throughs `anthropic_layers.py` writes out,
  streamscope's generators take their place instead of adding a layer under each.
* `Stream.close` / `AsyncStream.close`: the caller closed it (also via `with` and the helpers).
* A `weakref.finalize` on the stream: dropped without close; it ended at its last event.
* `BaseClient._tracer`: *inside* an instrumented call, a tracer whose spans record nothing and
  carry streamscope's span context: the SDK's own span is not emitted twice (what it carried,
  retry count, status, request id, is on streamscope's span), and the SDK still sends the trace
  context with each attempt, as its own tracing does, now streamscope's.
"""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping
from contextvars import ContextVar
from typing import Any

import wrapt

from ..content import CapturedContent
from ..enforcement import AsyncWatch, SyncWatch, current_task, expiry, process_id, socket_readable, watchdog
from ..errors import StreamTimeout
from ..exporters.span import ContextTracer, Started
from ..internal import internal_error
from ..pipeline import Pipeline
from ..record import End
from ..recorder import StreamRecorder
from .anthropic_layers import items, layers, server_sent

ATTR = "_streamscope"
_now = time.monotonic
_capture: ContextVar[list[StreamRecorder] | None] = ContextVar("streamscope_capture", default=None)
_in_call: ContextVar[StreamRecorder | None] = ContextVar("streamscope_in_call", default=None)
"""The recorder of the instrumented call in progress (between sending and the headers)."""


def _started() -> Started | None:
    rec = _in_call.get()
    return rec.parent if rec is not None and isinstance(rec.parent, Started) else None


_CONTEXT_TRACER = ContextTracer(_started)


# -- what a request is ----------------------------------------------------------------------

_INT64 = 2**63


def _int(value: Any) -> int | None:
    """A count from the wire: a non-negative int64 (an exporter cannot encode more), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < _INT64:
        return value
    return None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _is_message_stream(options: Any, stream: bool) -> bool:
    """A streamed POST to /v1/messages whose caller gets a parsed stream (not a raw response)."""
    if not stream or getattr(options, "method", "").lower() != "post":
        return False
    url = getattr(options, "url", "") or ""
    if not url.split("?", 1)[0].endswith("/v1/messages"):
        return False
    headers = getattr(options, "headers", None)
    if isinstance(headers, Mapping):
        from anthropic._constants import RAW_RESPONSE_HEADER

        if any(str(k).lower() == RAW_RESPONSE_HEADER.lower() for k in headers):
            return False
    return True


def _request_info(pipeline: Pipeline, client: Any, options: Any, now: float):
    body = options.json_data if isinstance(options.json_data, Mapping) else {}
    thinking = body.get("thinking")
    thinking = thinking if isinstance(thinking, Mapping) else {}
    base_url = getattr(client, "base_url", None)
    host = getattr(base_url, "host", None)
    port = getattr(base_url, "port", None)
    if port is None and base_url is not None:
        port = 443 if getattr(base_url, "scheme", "https") == "https" else 80
    return pipeline.request(
        model=_str(body.get("model")),
        max_tokens=_int(body.get("max_tokens")),
        thinking_type=_str(thinking.get("type")),
        thinking_budget=_int(thinking.get("budget_tokens")),
        service_tier=_str(body.get("service_tier")),
        provider=_str(getattr(client, "_gen_ai_provider_name", None)) or "anthropic",
        server_address=_str(host),
        server_port=_int(port),
        now=now,
    )


def _split_request_args(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, bool]:
    """`request(cast_to, options, *, stream=False, stream_cls=None)` → (options, stream)."""
    options = args[1] if len(args) > 1 else kwargs.get("options")
    return options, bool(kwargs.get("stream", False))


# -- content capture (only when the user opted in) ---------------------------------------------

def _field(block: Any, name: str) -> Any:
    return block.get(name) if isinstance(block, Mapping) else getattr(block, name, None)


def _parts(content: Any) -> list[dict[str, Any]]:
    """Anthropic content (a string or blocks) as semconv message parts."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    parts: list[dict[str, Any]] = []
    for block in content if isinstance(content, (list, tuple)) else ():
        kind = _field(block, "type")
        if kind == "text":
            parts.append({"type": "text", "content": _field(block, "text")})
        elif kind == "thinking":
            parts.append({"type": "reasoning", "content": _field(block, "thinking")})
        elif kind == "tool_use":
            parts.append({"type": "tool_call", "id": _field(block, "id"), "name": _field(block, "name"),
                          "arguments": _field(block, "input")})
        elif kind == "tool_result":
            parts.append({"type": "tool_call_response", "id": _field(block, "tool_use_id"),
                          "response": _field(block, "content")})
        else:
            parts.append({"type": kind if isinstance(kind, str) else "unknown"})
    return parts


def _captured(pipeline: Pipeline, options: Any) -> CapturedContent:
    body = options.json_data if isinstance(options.json_data, Mapping) else {}
    messages = body.get("messages") if isinstance(body.get("messages"), (list, tuple)) else []
    system = body.get("system")
    return CapturedContent(
        mode=pipeline.capture,
        system_instructions=_parts(system) if system else None,
        input_messages=[{"role": _field(m, "role"), "parts": _parts(_field(m, "content"))} for m in messages],
    )


def observe_capturing(rec: StreamRecorder, event: Any, t: float) -> None:
    """`observe`, and the answer's text, thinking and tool input kept for the span."""
    observe(rec, event, t)
    content = rec.content
    if not isinstance(content, CapturedContent):
        return
    try:
        kind = event.type
        if kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                content.text.append(delta.text)
            elif delta.type == "thinking_delta":
                content.reasoning.append(delta.thinking)
            elif delta.type == "input_json_delta":
                content.tool_calls.setdefault(event.index, {"type": "tool_call", "chunks": []})["chunks"].append(
                    delta.partial_json)
        elif kind == "content_block_start" and event.content_block.type == "tool_use":
            block = event.content_block
            content.tool_calls[event.index] = {"type": "tool_call", "id": block.id, "name": block.name, "chunks": []}
    except Exception:
        pass  # a field missing or of another type: nothing to keep


def _observer_of(rec: StreamRecorder) -> Any:
    """The per-event function for this stream: capturing costs nothing unless it is on."""
    return observe if rec.content is None else observe_capturing


# -- how a stream ended -----------------------------------------------------------------------

def _ending(exc: BaseException) -> tuple[End, str | None, str | None]:
    """(end, error type, budget fired) for an exception that ended a stream."""
    import anthropic
    import httpx2

    if isinstance(exc, StreamTimeout):
        return "error", None, exc.budget
    if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit)):
        return "cancelled", None, None
    cause: BaseException = exc
    if isinstance(exc, anthropic.APIConnectionError) and exc.__cause__ is not None:
        cause = exc.__cause__
    if isinstance(cause, httpx2.ReadTimeout):
        return "error", None, "read_timeout"
    if isinstance(exc, anthropic.APIStatusError):
        kind = getattr(exc, "type", None)
        return "error", kind if isinstance(kind, str) and kind else str(exc.status_code), None
    return "error", type(cause).__name__, None


def _fail(rec: StreamRecorder, exc: BaseException) -> None:
    try:
        end, error_type, budget = _ending(exc)
        rec.finish(end, error_type, budget)
        _stop_watch(rec)
    except Exception:
        internal_error("adapter.fail")


def _finish(rec: StreamRecorder, end: End) -> None:
    try:
        rec.finish(end)
        _stop_watch(rec)
    except Exception:
        internal_error("adapter.finish")


def _abandoned(rec: StreamRecorder, pid: int) -> None:
    """The stream was dropped without close: it ended at its last event. Not in a forked child,
    which inherited the object and frees it at its exit: that stream is the parent's."""
    if pid == process_id():
        _finish(rec, "abandoned")


def _stop_watch(rec: StreamRecorder) -> None:
    watch = rec.watch
    if watch is not None:
        watch.stop()  # type: ignore[attr-defined]


def _timeout(rec: StreamRecorder) -> StreamTimeout:
    """The budget that fired on `rec`, as the exception the caller gets; ends the record."""
    budget = rec.fired or "deadline"
    partial = rec.first_content is not None
    after = None if rec.fired_at is None else rec.fired_at - rec.t0
    rec.finish("error", None, budget)
    _stop_watch(rec)
    return StreamTimeout(budget, partial, after)  # type: ignore[arg-type]


# -- events -------------------------------------------------------------------------------------

def _usage(usage: Any, name: str) -> int | None:
    return _int(getattr(usage, name, None)) if usage is not None else None


def _message_start(rec: StreamRecorder, t: float, event: Any) -> None:
    message = getattr(event, "message", None)
    usage = getattr(message, "usage", None)
    rec.message_start(
        t, _str(getattr(message, "id", None)), _str(getattr(message, "model", None)),
        _usage(usage, "input_tokens"), _usage(usage, "cache_read_input_tokens"),
        _usage(usage, "cache_creation_input_tokens"), _usage(usage, "output_tokens"),
    )


def _message_delta(rec: StreamRecorder, t: float, event: Any) -> None:
    usage = getattr(event, "usage", None)
    details = getattr(usage, "output_tokens_details", None) if usage is not None else None
    if isinstance(details, Mapping):
        reasoning = _int(details.get("thinking_tokens"))
    else:
        reasoning = _usage(details, "thinking_tokens")
    rec.message_delta(
        t, _str(getattr(getattr(event, "delta", None), "stop_reason", None)),
        _usage(usage, "output_tokens"), reasoning, _usage(usage, "input_tokens"),
        _usage(usage, "cache_read_input_tokens"), _usage(usage, "cache_creation_input_tokens"),
        usage is not None,
    )


def _block_start(rec: StreamRecorder, t: float, event: Any) -> None:
    block = getattr(event, "content_block", None)
    kind = _str(getattr(block, "type", None))
    if kind is not None and (kind.endswith("tool_use") or kind.endswith("_tool_result")):
        # Server tool runs: the use block's id and name, the result's tool_use_id.
        ident = _str(getattr(block, "id", None)) or _str(getattr(block, "tool_use_id", None))
        rec.block_start(t, kind, ident, _str(getattr(block, "name", None)))
    else:
        rec.block_start(t, kind)


def observe(rec: StreamRecorder, event: Any, t: float) -> None:
    """One parsed event on its way to the caller, delivered at `t`. Never raises: a failure here
    is streamscope's, counted, and the event still reaches the caller."""
    try:
        _dispatch(rec, event, t)
    except Exception:
        internal_error("recorder")


def _dispatch(rec: StreamRecorder, event: Any, t: float) -> None:
    """A dispatch on `.type` (never `isinstance`: unknown event types arrive as mis-typed models)."""
    try:
        kind = event.type
        if kind == "content_block_delta":
            delta = event.delta
            dk = delta.type
            if dk == "text_delta":
                rec.delta(t, len(delta.text))
            elif dk == "input_json_delta":
                rec.delta(t, len(delta.partial_json))
            else:
                rec.delta(t, -1)
            return
    except (AttributeError, TypeError):
        _odd(rec, t, event)  # missing or null fields: malformed input, not a streamscope failure
        return
    if kind == "content_block_start":
        _block_start(rec, t, event)
    elif kind == "content_block_stop":
        rec.block_stop(t)
    elif kind == "message_delta":
        _message_delta(rec, t, event)
    elif kind == "message_start":
        _message_start(rec, t, event)
    elif kind == "message_stop":
        rec.message_stop(t)
    else:
        rec.other(t)


_plain = observe
"""The per-event function without content capture: the generators inline its common case."""


def _odd(rec: StreamRecorder, t: float, event: Any) -> None:
    """An event whose fields are missing or null: recorded for what it plainly is, or ignored."""
    if getattr(event, "type", None) != "content_block_delta":
        rec.other(t)
        return
    delta = getattr(event, "delta", None)
    kind = getattr(delta, "type", None)
    text = getattr(delta, "text" if kind == "text_delta" else "partial_json", None)
    visible = kind in ("text_delta", "input_json_delta")
    rec.delta(t, len(text) if visible and isinstance(text, str) else (0 if visible else -1))


# -- the request hooks ------------------------------------------------------------------------

class _Hooks:
    """The wrapt wrappers, bound to one pipeline."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.pipeline = pipeline

    def _begin(self, client: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> StreamRecorder | None:
        try:
            options, stream = _split_request_args(args, kwargs)
            if _in_call.get() is not None or not _is_message_stream(options, stream):
                return None
            t0 = _now()
            rec = self.pipeline.open(_request_info(self.pipeline, client, options, t0), t0)
            if rec is not None and self.pipeline.capture.on:
                rec.content = _captured(self.pipeline, options)
            sink = _capture.get()
            if sink is not None and rec is not None:
                sink.append(rec)
            return rec
        except Exception:
            internal_error("adapter.request")
            return None

    @staticmethod
    def _opened(rec: StreamRecorder, result: Any) -> None:
        """The SDK returned the stream: headers are in; attach the recorder (and budgets) to it."""
        from anthropic._streaming import AsyncStream, Stream

        try:
            if not isinstance(result, (Stream, AsyncStream)):
                rec.finish("closed")
                _stop_watch(rec)
                return
            t = _now()
            response = result.response
            retries = response.request.headers.get("x-stainless-retry-count")
            rec.headers(t, response.status_code, response.headers.get("request-id"),
                        int(retries) if retries and retries.isdigit() else None)
            result.__dict__[ATTR] = rec
            rec.adapter = weakref.finalize(result, _abandoned, rec, process_id())
            if rec.request.budgets.enforced and isinstance(result, Stream):
                _restore_read_timeout(rec, response)
                sock = _socket_of(response)
                watch = SyncWatch(rec, functools.partial(_shutdown, sock), functools.partial(socket_readable, sock))
                rec.watch = watch
                watchdog().watch(watch)
        except Exception:
            internal_error("adapter.opened")

    @staticmethod
    def _cap_timeout(rec: StreamRecorder, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """Sync: no attempt may wait for its headers past the first budget to expire. The cap
        is for that wait only: `_opened` puts the caller's own read timeout back for the body."""
        try:
            found = expiry(rec)
            if found is None:
                return args
            import httpx2
            from anthropic._models import FinalRequestOptions
            from anthropic._types import NotGiven

            remaining = max(found[0] - _now(), 0.001)
            options = args[1] if len(args) > 1 else kwargs["options"]
            if not isinstance(options, FinalRequestOptions):
                return args
            current = client.timeout if isinstance(options.timeout, NotGiven) else options.timeout
            if isinstance(current, (int, float)) and current <= remaining:
                return args
            if isinstance(current, httpx2.Timeout):
                parts = [x for x in (current.read, current.connect, current.write, current.pool) if x is not None]
                if parts and max(parts) <= remaining:
                    return args
            rec.restore_read = (httpx2.Timeout(current).read,)
            capped = options.model_copy()
            capped.timeout = httpx2.Timeout(remaining)
            if len(args) > 1:
                return (args[0], capped, *args[2:])
            kwargs["options"] = capped
            return args
        except Exception:
            internal_error("adapter.cap_timeout")
            return args

    @staticmethod
    def _failed_before_stream(rec: StreamRecorder, exc: BaseException) -> None:
        try:
            response = getattr(exc, "response", None)
            request = getattr(exc, "request", None) or getattr(response, "request", None)
            retries = request.headers.get("x-stainless-retry-count") if request is not None else None
            rec.resend_count = int(retries) if retries and retries.isdigit() else None
            rec.http_status = getattr(response, "status_code", None)
            rec.request_id = response.headers.get("request-id") if response is not None else None
        except Exception:
            internal_error("adapter.request_error")
        _fail(rec, exc)

    def sync_request(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        rec = self._begin(instance, args, kwargs)
        if rec is None:
            return wrapped(*args, **kwargs)
        if rec.request.budgets.enforced:
            args = self._cap_timeout(rec, instance, args, kwargs)
        token = _in_call.set(rec)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            if rec.fired is None and isinstance(exc, Exception) and _expired(rec):
                raise _timeout(rec) from None  # the capped timeout ran out: that was a budget
            self._failed_before_stream(rec, exc)
            raise
        finally:
            _in_call.reset(token)
        self._opened(rec, result)
        return result

    async def async_request(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        rec = self._begin(instance, args, kwargs)
        if rec is None:
            return await wrapped(*args, **kwargs)
        watch: AsyncWatch | None = None
        task = asyncio.current_task()
        if rec.request.budgets.enforced and task is not None:
            try:  # waiting for the headers is waiting on the stream
                watch = rec.watch = AsyncWatch(rec, asyncio.get_running_loop(), task)
            except Exception:
                internal_error("adapter.watch")
        token = _in_call.set(rec)
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            if watch is not None and _ours(exc, rec, task):
                raise _timeout(rec) from None
            self._failed_before_stream(rec, exc)
            raise
        finally:
            _in_call.reset(token)
        if watch is not None:
            watch.reader = None  # the stream is in the caller's hands: its own time from here
        self._opened(rec, result)
        if watch is not None and watch.attention and rec.fired is not None:
            await result.close()
            raise _timeout(rec)
        return result

    def sleep_for_retry(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Sync: a retry that cannot start before a budget expires is not made."""
        rec = _in_call.get()
        if rec is not None and rec.request.budgets.enforced and _retry_too_late(rec, instance, kwargs):
            raise _timeout(rec)
        return wrapped(*args, **kwargs)

    async def async_sleep_for_retry(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        rec = _in_call.get()
        if rec is not None and rec.request.budgets.enforced and _retry_too_late(rec, instance, kwargs):
            raise _timeout(rec)
        return await wrapped(*args, **kwargs)


def _expired(rec: StreamRecorder) -> bool:
    found = expiry(rec)
    if found is None or found[0] > _now():
        return False
    return rec.fire(found[1], found[0])


def _retry_too_late(rec: StreamRecorder, client: Any, kwargs: Mapping[str, Any]) -> bool:
    """Whether the SDK's next attempt would start after the first budget to expire (fires it)."""
    try:
        found = expiry(rec)
        if found is None:
            return False
        response = kwargs.get("response")
        delay = client._calculate_retry_timeout(
            kwargs["max_retries"] - kwargs["retries_taken"], kwargs["options"],
            response.headers if response is not None else None,
        )
        now = _now()
        if now + delay < found[0]:
            return False
        return rec.fired is not None or rec.fire(found[1], now)
    except Exception:
        internal_error("adapter.retry")
        return False


def _ours(exc: BaseException, rec: StreamRecorder, task: asyncio.Task[Any] | None) -> bool:
    """Whether `exc` is the cancellation our budget timer sent (the asyncio.timeout pattern)."""
    if rec.fired is None or not isinstance(exc, asyncio.CancelledError) or task is None:
        return False
    return task.uncancel() == 0


def _restore_read_timeout(rec: StreamRecorder, response: Any) -> None:
    """Body reads get the caller's own read timeout back (not the cap put on the wait for the
    headers): httpcore reads it from the request when the body is first read, after this."""
    restore = rec.restore_read
    if isinstance(restore, tuple):
        timeouts = response.request.extensions.get("timeout")
        if isinstance(timeouts, dict):
            timeouts["read"] = restore[0]
        rec.restore_read = None


def _socket_of(response: Any) -> Any:
    stream = response.extensions.get("network_stream")
    return stream.get_extra_info("socket") if stream is not None else None


def _shutdown(sock: Any) -> None:
    """How the watchdog wakes a read blocked on the stream: closing the response from another
    thread does not wake it; shutting the socket down does (the read raises at once)."""
    import socket

    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


# -- the stream hooks (module level: they find the recorder on the stream) -------------------------
#
# Per event, on its way to the caller: a clock read (`t`, when it was delivered) and the
# recorder's update; when the caller asks for the next one, a clock read that moves the
# provider's clock past the caller's own time away (`rec.origin += now - rec.held`). Under
# budgets the watch also learns when the caller waits (`reader`) and when it does not.

def _read(events: Iterator[Any], rec: StreamRecorder, watch: SyncWatch | None, stream: Any,
          observe: Any = observe) -> Iterator[Any]:
    """Every event on its way to the caller; under budgets (`watch`), a read the watchdog
    interrupts becomes `StreamTimeout`. Holding `stream` keeps a temporary stream (`for e in
    client.messages.create(...)`) from being collected before its end is recorded.

    A generator the caller left (`break`) and drops later changes nothing: the stream may be read
    on by another loop meanwhile. Once text flows, a text delta takes the fast path:
    `StreamRecorder.delta`'s steady state, inline (a call would be a fifth of the per-event cost);
    `observe` takes everything else."""
    fast, deltas = observe is _plain, layers.deltas
    try:
        rec.origin += _now() - rec.held
        if watch is not None:
            watch.reader = True
            if watch.attention and watch.attend():
                raise _Fired
        for event in events:
            t = _now()
            if watch is not None:
                watch.reader = False
            try:
                if (fast and type(event) in deltas and (d := event.delta.__dict__)["type"] == "text_delta"
                        and rec.first_text is not None):
                    n = len(d["text"])
                    rec.content_events += 1
                    gap = t - rec.origin
                    if gap > rec.max_gap:
                        rec.max_gap = gap
                    rec.last_content = rec.origin = t
                    rec.text_chars += n
                else:
                    observe(rec, event, t)
            except Exception:  # the fast path's look-ups failed, before any write: a delta of another shape
                observe(rec, event, t)
            rec.held = t
            yield event
            rec.origin += _now() - rec.held
            if watch is not None:
                watch.reader = True
                if watch.attention and watch.attend():
                    raise _Fired
    except GeneratorExit:
        raise
    except BaseException as exc:
        if watch is not None:
            watch.reader = False
            if rec.fired is not None and not rec.finished and isinstance(exc, Exception):
                _close_quietly(stream)
                raise _timeout(rec) from None
        _fail(rec, exc)
        raise
    _finish(rec, "done")


async def _aread(events: AsyncIterator[Any], rec: StreamRecorder, watch: AsyncWatch | None, stream: Any,
                 observe: Any = observe) -> AsyncIterator[Any]:
    """`_read`, async: under budgets the stream's timer cancels the reading task, and that
    cancellation becomes `StreamTimeout`. The reading task is looked up at every read: a loop
    left with `break` may be resumed by another task, or the stream read on by a new loop, and the
    budgets follow the stream."""
    fast, deltas = observe is _plain, layers.deltas
    loop = None if watch is None else watch.loop
    task = None
    try:
        rec.origin += _now() - rec.held
        if watch is not None:
            watch.reader = task = current_task(loop)  # type: ignore[arg-type]
            if watch.attention and watch.attend():
                raise _Fired
        async for event in events:
            t = _now()
            if watch is not None:
                watch.reader = None
            try:
                if (fast and type(event) in deltas and (d := event.delta.__dict__)["type"] == "text_delta"
                        and rec.first_text is not None):
                    n = len(d["text"])
                    rec.content_events += 1
                    gap = t - rec.origin
                    if gap > rec.max_gap:
                        rec.max_gap = gap
                    rec.last_content = rec.origin = t
                    rec.text_chars += n
                else:
                    observe(rec, event, t)
            except Exception:
                observe(rec, event, t)
            rec.held = t
            yield event
            rec.origin += _now() - rec.held
            if watch is not None:
                watch.reader = task = current_task(loop)  # type: ignore[arg-type]
                if watch.attention and watch.attend():
                    raise _Fired
    except GeneratorExit:
        raise
    except BaseException as exc:
        if watch is not None:
            watch.reader = None
            if isinstance(exc, _Fired) or _ours(exc, rec, task):
                await _aclose_quietly(stream)
                raise _timeout(rec) from None
        _fail(rec, exc)
        raise
    _finish(rec, "done")


class _Fired(Exception):
    """A budget fired while the caller was away; raised at its next read."""


def _close_quietly(stream: Any) -> None:
    try:
        stream.response.close()
    except Exception:
        internal_error("adapter.close")


async def _aclose_quietly(stream: Any) -> None:
    try:
        await stream.response.aclose()
    except Exception:
        internal_error("adapter.close")


def _iter(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    rec = instance.__dict__.get(ATTR)
    if rec is None:
        return wrapped(*args, **kwargs)
    events = items(instance, False) or wrapped(*args, **kwargs)
    return _read(events, rec, rec.watch, instance, _observer_of(rec))  # type: ignore[arg-type]


def _aiter(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    rec = instance.__dict__.get(ATTR)
    if rec is None:
        return wrapped(*args, **kwargs)
    events = items(instance, True) or wrapped(*args, **kwargs)
    return _aread(events, rec, rec.watch, instance, _observer_of(rec))  # type: ignore[arg-type]


def _next_hook(original: Any) -> Any:
    """`Stream.__next__` for direct `next()` calls: a plain function, not a wrapt wrapper (which
    would cost a bound wrapper and an argument tuple per event)."""

    @functools.wraps(original)
    def __next__(self: Any) -> Any:
        rec = self.__dict__.get(ATTR)
        if rec is None:
            return original(self)
        watch = rec.watch
        rec.origin += _now() - rec.held
        try:
            if watch is not None:
                watch.reader = True
                if watch.attention and watch.attend():
                    raise _Fired
            event = self._iterator.__next__() if layers.next else original(self)
        except StopIteration:
            _finish(rec, "done")
            raise
        except BaseException as exc:
            if watch is not None and rec.fired is not None and not rec.finished and isinstance(exc, Exception):
                _close_quietly(self)
                raise _timeout(rec) from None
            _fail(rec, exc)
            raise
        finally:
            if watch is not None:
                watch.reader = False
        _observe_one(rec, event)
        return event

    return __next__


def _anext_hook(original: Any) -> Any:
    """`AsyncStream.__anext__`, as `_next_hook`."""

    @functools.wraps(original)
    async def __anext__(self: Any) -> Any:
        rec = self.__dict__.get(ATTR)
        if rec is None:
            return await original(self)
        watch = rec.watch
        task = current_task(watch.loop) if watch is not None else None
        rec.origin += _now() - rec.held
        try:
            if watch is not None:
                watch.reader = task
                if watch.attention and watch.attend():
                    raise _Fired
            event = await (self._iterator.__anext__() if layers.anext else original(self))
        except StopAsyncIteration:
            _finish(rec, "done")
            raise
        except BaseException as exc:
            if watch is not None and (isinstance(exc, _Fired) or _ours(exc, rec, task)):
                await _aclose_quietly(self)
                raise _timeout(rec) from None
            _fail(rec, exc)
            raise
        finally:
            if watch is not None:
                watch.reader = None
        _observe_one(rec, event)
        return event

    return __anext__


def _observe_one(rec: StreamRecorder, event: Any) -> None:
    """One event read with `next()`."""
    t = _now()
    _observer_of(rec)(rec, event, t)
    rec.held = t


def _close(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    rec = instance.__dict__.get(ATTR)
    if rec is not None:
        _finish(rec, "closed")
    return wrapped(*args, **kwargs)


async def _aclose(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    rec = instance.__dict__.get(ATTR)
    if rec is not None:
        _finish(rec, "closed")
    return await wrapped(*args, **kwargs)


def _counted(events: Iterator[Any], rec: StreamRecorder) -> Iterator[Any]:
    """Pings counted over `_iter_events`, where the SDK's is not the one `anthropic_layers` knows."""
    for sse in events:
        if sse.event == "ping":
            rec.pinged()
        yield sse


async def _acounted(events: AsyncIterator[Any], rec: StreamRecorder) -> AsyncIterator[Any]:
    async for sse in events:
        if sse.event == "ping":
            rec.pinged()
        yield sse


def _iter_events(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    rec = instance.__dict__.get(ATTR)
    if rec is None:
        return wrapped(*args, **kwargs)
    return server_sent(instance, rec, False) or _counted(wrapped(*args, **kwargs), rec)


def _aiter_events(wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    rec = instance.__dict__.get(ATTR)
    if rec is None:
        return wrapped(*args, **kwargs)
    return server_sent(instance, rec, True) or _acounted(wrapped(*args, **kwargs), rec)


# -- install / uninstall ---------------------------------------------------------------------------

_STREAM_HOOKS = (
    ("Stream", "__iter__", _iter), ("Stream", "close", _close),
    ("Stream", "_iter_events", _iter_events),
    ("AsyncStream", "__aiter__", _aiter), ("AsyncStream", "close", _aclose),
    ("AsyncStream", "_iter_events", _aiter_events),
)
_NEXT_HOOKS = (("Stream", "__next__", _next_hook), ("AsyncStream", "__anext__", _anext_hook))
"""Called once per event by direct `next()`/`anext()`: plain functions in the class, restored at
uninstall (a wrapt wrapper here costs about 0.4 µs per call)."""


class AnthropicAdapter:
    """Installs and removes the hooks on the SDK's classes."""

    def __init__(self, pipeline: Pipeline) -> None:
        self.hooks = _Hooks(pipeline)
        self._tracer_property: Any = None
        self._replaced: list[tuple[type, str, Any, Any]] = []

    def install(self) -> None:
        from anthropic import _base_client, _streaming

        wrapt.wrap_function_wrapper(_base_client, "SyncAPIClient.request", self.hooks.sync_request)
        wrapt.wrap_function_wrapper(_base_client, "AsyncAPIClient.request", self.hooks.async_request)
        wrapt.wrap_function_wrapper(_base_client, "SyncAPIClient._sleep_for_retry", self.hooks.sleep_for_retry)
        wrapt.wrap_function_wrapper(_base_client, "AsyncAPIClient._sleep_for_retry", self.hooks.async_sleep_for_retry)
        original = _base_client.BaseClient.__dict__.get("_tracer")
        if isinstance(original, property) and original.fget is not None:
            getter = original.fget

            def _tracer(client: Any) -> Any:
                # Inside an instrumented call the SDK's tracer makes spans that record nothing and
                # carry streamscope's span context: one span per call (ours), and the SDK sends our
                # trace context with each attempt, as its propagation switch and propagators say.
                return _CONTEXT_TRACER if _in_call.get() is not None else getter(client)

            self._tracer_property = original
            _base_client.BaseClient._tracer = property(_tracer, doc=original.__doc__)  # type: ignore[method-assign]
        # Before the stream hooks wrap what it compares; the SDK's stream observer may be skipped
        # only where its tracer is off inside instrumented calls (above).
        layers.check(sdk_observer_off=self._tracer_property is not None)
        for cls, name, hook in _STREAM_HOOKS:
            wrapt.wrap_function_wrapper(_streaming, f"{cls}.{name}", hook)
        for cls, name, make in _NEXT_HOOKS:
            owner = getattr(_streaming, cls)
            original = owner.__dict__[name]
            replacement = make(original)
            setattr(owner, name, replacement)
            self._replaced.append((owner, name, original, replacement))

    def uninstall(self) -> None:
        from anthropic import _base_client, _streaming
        from opentelemetry.instrumentation.utils import unwrap

        unwrap(_base_client.SyncAPIClient, "request")
        unwrap(_base_client.AsyncAPIClient, "request")
        unwrap(_base_client.SyncAPIClient, "_sleep_for_retry")
        unwrap(_base_client.AsyncAPIClient, "_sleep_for_retry")
        for cls, name, _hook in _STREAM_HOOKS:
            unwrap(getattr(_streaming, cls), name)
        for owner, name, original, replacement in reversed(self._replaced):
            if owner.__dict__.get(name) is replacement:  # else wrapped again since: ours passes through
                setattr(owner, name, original)
        self._replaced.clear()
        if self._tracer_property is not None:
            _base_client.BaseClient._tracer = self._tracer_property  # type: ignore[method-assign]
            self._tracer_property = None


# -- for the retry and result helpers ---------------------------------------------------------

class capture_calls:  # noqa: N801 - a context manager
    """Collects the recorders of the streamed calls started inside (also those that failed
    before a stream existed), for helpers that must know how their call ended."""

    def __enter__(self) -> list[StreamRecorder]:
        self.calls: list[StreamRecorder] = []
        self._token = _capture.set(self.calls)
        return self.calls

    def __exit__(self, *exc_info: object) -> None:
        _capture.reset(self._token)


def recorder_of(stream: Any) -> StreamRecorder | None:
    """The recorder of a raw `Stream`/`AsyncStream` or of a `MessageStream` helper, if instrumented."""
    raw = getattr(stream, "_raw_stream", stream)
    found = getattr(raw, "__dict__", {}).get(ATTR)
    return found if isinstance(found, StreamRecorder) else None


def is_content(event: Any, first_content: str = "text") -> bool:
    """Whether `event` is a content event under the `first_content` setting."""
    if getattr(event, "type", None) != "content_block_delta":
        return False
    if first_content == "any":
        return True
    return getattr(getattr(event, "delta", None), "type", None) in ("text_delta", "input_json_delta")


def text_of(event: Any) -> str:
    """The visible text an event carries (a raw `text_delta`), else ''."""
    if getattr(event, "type", None) == "content_block_delta":
        delta = getattr(event, "delta", None)
        if getattr(delta, "type", None) == "text_delta":
            text = getattr(delta, "text", "")
            return text if isinstance(text, str) else ""
    return ""


def retry_decision(exc: BaseException) -> tuple[bool, float | None]:
    """The one classifier of exceptions for the retry line: (retryable, retry-after seconds).

    Yes: 429, 5xx and 529, an in-band `overloaded_error`/`api_error`, connection failures, a
    first-token stall (streamscope's `first_token` budget, or a read timeout before content).
    No: other 4xx, refusals (never an exception), idle/deadline firings, anything else.
    """
    import anthropic
    import httpx2

    if isinstance(exc, StreamTimeout):
        return (exc.budget == "first_token" and not exc.partial), None
    if isinstance(exc, anthropic.APIStatusError):
        status = exc.status_code
        if status == 200:  # an in-band error event after the 200
            return getattr(exc, "type", None) in ("overloaded_error", "api_error", "rate_limit_error"), None
        if status == 429 or status >= 500:
            return True, _retry_after(exc.response)
        return status in (408, 409), None
    if isinstance(exc, (anthropic.APIConnectionError, httpx2.TransportError)):
        return True, None
    return False, None


def _retry_after(response: Any) -> float | None:
    raw = getattr(response, "headers", {}).get("retry-after") if response is not None else None
    try:
        value = float(raw) if raw else None
    except ValueError:  # an HTTP date: ignored
        return None
    return value if value is not None and value >= 0 else None
