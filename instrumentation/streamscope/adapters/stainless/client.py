"""The client hooks: where a streamed call starts, gets its headers, and retries.

* `SyncAPIClient.request` / `AsyncAPIClient.request`: every call passes here once, also the
  streaming helpers' (their request is sent from the manager's `__enter__`). The record starts
  here; when it returns, the response headers have arrived and the SDK's own retries are over.
* `_sleep_for_retry`: a retry that could not start before a budget expires is not made; inside
  streamscope's retry line the SDK makes one try per attempt (`_one_try`).
* `BaseClient._tracer` (where the SDK traces itself): *inside* an instrumented call, a tracer
  whose spans record nothing and carry streamscope's span context, so the SDK's own span is
  not emitted twice and the SDK still sends the trace context with each attempt, now ours.

What a budget decides is `enforcement`'s; here is only how the SDK is told: a capped timeout for
the wait for the headers, a socket shut down to wake a blocked read, a task cancelled.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from typing import Any

from streamscope.budgets.async_watch import cancelled_by_budget
from streamscope.budgets.enforcement import expired, header_wait, process_id, retry_too_late, timeout_error
from streamscope.core.calls import ATTR, Call, CallOpener, Started, captured, end
from streamscope.core.guard import internal_error
from streamscope.core.recorder import StreamRecorder

from .body import body_reader, observe_body
from .body_watch import watch_body, watch_headers
from .ending import end_with
from .parsing import header_count
from .propagation import with_trace_context
from .spec import Spec
from .tracing import ContextTracer

_now = time.monotonic
RETRY_COUNT = "x-stainless-retry-count"
_in_call: ContextVar[Call | None] = ContextVar("streamscope_in_call", default=None)
"""The instrumented call in progress (between sending and the headers), whichever SDK made it."""


def _started() -> Started | None:
    call = _in_call.get()
    return call.span if call is not None else None


CONTEXT_TRACER = ContextTracer(_started)


def _split_request_args(args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, bool]:
    """`request(cast_to, options, *, stream=False, stream_cls=None)` → (options, stream)."""
    options = args[1] if len(args) > 1 else kwargs.get("options")
    return options, bool(kwargs.get("stream", False))


def _retries(headers: Any) -> int | None:
    return header_count(headers.get(RETRY_COUNT)) if headers is not None else None


def _abandoned(rec: StreamRecorder, pid: int) -> None:
    """The stream was dropped without close: it ended at its last event. Not in a forked child,
    which inherited the object and frees it at its exit: that stream is the parent's."""
    if pid == process_id():
        end(rec, "abandoned")


class ClientHooks:
    """The wrapt wrappers on one SDK's clients, bound to a pipeline."""

    def __init__(self, pipeline: CallOpener, spec: Spec) -> None:
        self.pipeline = pipeline
        self.spec = spec
        self.active = False
        """False once uninstalled: a hook another library wrapped since stays under theirs, and passes through."""
        self.inject: str | None = None
        """On an SDK line that sends no trace context itself, the switch's environment variable:
        each request gets streamscope's trace context (`propagation.py`); None elsewhere."""

    def is_ours(self, found: Any) -> bool:
        """Whether `found` is one of these hooks, as wrapt put it on a class (or bound it)."""
        wrapper = getattr(found, "_self_wrapper", None)
        return getattr(wrapper, "__self__", None) is self

    def _begin(self, client: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Call | None:
        try:
            if not self.active or _in_call.get() is not None:
                return None
            options, stream = _split_request_args(args, kwargs)
            t0 = _now()
            request = self.spec.request(self.pipeline, client, options, stream, t0)
            if request is None:
                if stream:  # a stream from an endpoint this adapter does not know the events of
                    path = str(getattr(options, "url", "") or "").split("?", 1)[0]
                    self.pipeline.unobserved(self.spec.name, self.spec.name, "path", _route(path))
                return None
            # The client's HTTP client: shared by its copies (`with_options`), as a framework's retries are.
            call = self.pipeline.open(request, t0, self.spec.helpers, getattr(client, "_client", client))
            if call is None:
                return None
            if self.pipeline.capture.on and self.spec.capture is not None:
                call.recorder.content = self.spec.capture(self.pipeline, options)
            captured(call)
            return call
        except Exception:
            internal_error("adapter.request")
            return None

    def _opened(self, call: Call, result: Any, is_async: bool = False) -> None:
        """The SDK returned the stream (or, for a raw-response call, its response): headers are
        in; attach the call (and budgets) to it. A raw response's body is observed where every
        reader of it reads (`body.py`); a `Stream` the caller parses from it takes the call over."""
        rec = call.recorder
        streaming = self.spec.streaming
        try:
            parsed = isinstance(result, (streaming.Stream, streaming.AsyncStream))
            response = result.response if parsed else _http_response(result)
            if response is None:
                end(rec, "closed")
                return
            t = _now()
            rec.headers(t, response.status_code, self.spec.request_id(response.headers),
                        _retries(response.request.headers))
            rec.http_request = response.request  # what a budget's `StreamTimeout` names, as the SDK's timeout
            if parsed:
                result.__dict__[ATTR] = call
                owner, reader = result, None
                call.finalizer = weakref.finalize(result, _abandoned, rec, process_id())
            else:
                owner = observe_body(response, call, self.spec, _parser(self.spec, result))
                reader = body_reader
                call.finalizer = weakref.finalize(response, _abandoned, rec, process_id())
            watch_body(call, response, owner, reader, is_async)
        except Exception:
            internal_error("adapter.opened")

    def _cap_timeout(self, call: Call, client: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """Sync: no attempt may wait for its headers past the first budget to expire. The cap
        is for that wait only: `_opened` puts the caller's own read timeout back for the body."""
        try:
            remaining = header_wait(call.recorder, _now())
            if remaining is None:
                return args
            base = self.spec.base_client
            transport = transport_of(base)
            options = args[1] if len(args) > 1 else kwargs["options"]
            if not isinstance(options, base.FinalRequestOptions):
                return args
            current = client.timeout if isinstance(options.timeout, base.NotGiven) else options.timeout
            if isinstance(current, (int, float)) and current <= remaining:
                return args
            if isinstance(current, transport.Timeout):
                parts = [x for x in (current.read, current.connect, current.write, current.pool) if x is not None]
                if parts and max(parts) <= remaining:
                    return args
            call.restore_read = (transport.Timeout(current).read,)
            capped = options.model_copy()
            capped.timeout = transport.Timeout(remaining)
            if len(args) > 1:
                return (args[0], capped, *args[2:])
            kwargs["options"] = capped
            return args
        except Exception:
            internal_error("adapter.cap_timeout")
            return args

    def _carry_context(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """On an SDK line that sends no trace context itself, the request's options with streamscope's."""
        switch = self.inject
        if switch is None:
            return args
        try:
            options = args[1] if len(args) > 1 else kwargs["options"]
            if not isinstance(options, self.spec.base_client.FinalRequestOptions):
                return args
            carried = with_trace_context(call, options, switch)
            if len(args) > 1:
                return (args[0], carried, *args[2:])
            kwargs["options"] = carried
            return args
        except Exception:
            internal_error("adapter.trace_context")
            return args

    def _one_try(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """Inside streamscope's retry line (an attempt number is set) the SDK makes one try: the
        line retries, and the SDK's own retries would multiply its attempts (3 × 3 requests)."""
        if call.recorder.request.attempts is None:
            return args
        try:
            options = args[1] if len(args) > 1 else kwargs["options"]
            if not isinstance(options, self.spec.base_client.FinalRequestOptions) or options.max_retries == 0:
                return args
            once = options.model_copy()
            once.max_retries = 0
            if len(args) > 1:
                return (args[0], once, *args[2:])
            kwargs["options"] = once
            return args
        except Exception:
            internal_error("adapter.one_try")
            return args

    def _failed_before_stream(self, call: Call, exc: BaseException) -> None:
        rec = call.recorder
        try:
            response = getattr(exc, "response", None)
            request = getattr(exc, "request", None) or getattr(response, "request", None)
            rec.resend_count = _retries(request.headers) if request is not None else None
            rec.http_status = getattr(response, "status_code", None)
            rec.request_id = self.spec.request_id(response.headers) if response is not None else None
        except Exception:
            internal_error("adapter.request_error")
        end_with(rec, exc, self.spec.ending)

    def _refused(self, call: Call, refused: BaseException) -> BaseException:
        """The breaker is open: the call is recorded as failed fast (code `circuit_open`) and its
        `CircuitOpen` goes to the caller, deliberately (the feature, not streamscope failing);
        nothing was sent."""
        end_with(call.recorder, refused, self.spec.ending)
        return refused

    # -- the wrappers ------------------------------------------------------------------------

    def sync_request(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = self._begin(instance, args, kwargs)
        if call is None:
            return wrapped(*args, **kwargs)
        if call.refused is not None:
            raise self._refused(call, call.refused)
        rec = call.recorder
        args = self._carry_context(call, self._one_try(call, args, kwargs), kwargs)
        if rec.request.budgets.enforced:
            args = self._cap_timeout(call, instance, args, kwargs)
        token = _in_call.set(call)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            if rec.fired is None and isinstance(exc, Exception) and expired(rec, _now()):
                raise timeout_error(rec) from None  # the capped timeout ran out: that was a budget
            self._failed_before_stream(call, exc)
            raise
        finally:
            _in_call.reset(token)
        self._opened(call, result)
        return result

    async def async_request(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = self._begin(instance, args, kwargs)
        if call is None:
            return await wrapped(*args, **kwargs)
        if call.refused is not None:
            raise self._refused(call, call.refused)
        rec = call.recorder
        args = self._carry_context(call, self._one_try(call, args, kwargs), kwargs)
        watch, task = watch_headers(rec)
        token = _in_call.set(call)
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            if watch is not None and cancelled_by_budget(exc, rec, task):
                raise timeout_error(rec) from None
            self._failed_before_stream(call, exc)
            raise
        finally:
            _in_call.reset(token)
        if watch is not None:
            watch.reader = None  # the stream is in the caller's hands: its own time from here
        self._opened(call, result, is_async=True)
        if watch is not None and watch.attention and rec.fired is not None:
            if isinstance(result, self.spec.streaming.AsyncStream):
                await result.close()
            elif (response := _http_response(result)) is not None:
                await response.aclose()
            raise timeout_error(rec)
        return result

    def _too_late(self, client: Any, kwargs: Mapping[str, Any]) -> Call | None:
        """The call whose next attempt would start after a budget expires (fired), or None."""
        call = _in_call.get()
        if call is None or not call.recorder.request.budgets.enforced:
            return None
        try:
            response = kwargs.get("response")
            delay = client._calculate_retry_timeout(
                kwargs["max_retries"] - kwargs["retries_taken"], kwargs["options"],
                response.headers if response is not None else None,
            )
            return call if retry_too_late(call.recorder, delay, _now()) else None
        except Exception:
            internal_error("adapter.retry")
            return None

    def sleep_for_retry(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Sync: a retry that cannot start before a budget expires is not made."""
        late = self._too_late(instance, kwargs)
        if late is not None:
            raise timeout_error(late.recorder)
        return wrapped(*args, **kwargs)

    async def async_sleep_for_retry(self, wrapped: Any, instance: Any, args: tuple[Any, ...],
                                    kwargs: dict[str, Any]) -> Any:
        late = self._too_late(instance, kwargs)
        if late is not None:
            raise timeout_error(late.recorder)
        return await wrapped(*args, **kwargs)

    @staticmethod
    def tracer_property(original: property) -> property:
        """`BaseClient._tracer`: inside an instrumented call, spans that record nothing and carry
        streamscope's span context (one span per call, ours; the SDK sends our trace context with
        each attempt, as its propagation switch and propagators say)."""
        getter = original.fget

        def _tracer(client: Any) -> Any:
            return CONTEXT_TRACER if _in_call.get() is not None else getter(client)  # type: ignore[misc]

        return property(_tracer, doc=original.__doc__)


def _route(path: str) -> str:
    """A request path with its ids left out (`/responses/{id}`), for a message said once per route."""
    parts = [p if not any(c.isdigit() for c in p) or (p.startswith("v") and p[1:].isdigit()) else "{id}"
             for p in path.split("/")]
    return "/".join(parts)


def _http_response(result: Any) -> Any:
    """The HTTP response of a raw-response call's result (`with_raw_response`, or
    `with_streaming_response`'s), whose body the caller has yet to read; None for anything else."""
    response = getattr(result, "http_response", None)
    return response if hasattr(response, "stream") and hasattr(response, "request") else None


def _parser(spec: Spec, result: Any) -> Callable[[Any], Any]:
    """One event's data as the SDK's model, as the `Stream` its raw response would build parses it."""
    client = result._client
    stream_cls = getattr(result, "_stream_cls", None) or client._default_stream_cls
    cast_to = spec.streaming.extract_stream_chunk_type(stream_cls)
    return functools.partial(_parse, client._process_response_data, cast_to, result.http_response)


def _parse(process: Callable[..., Any], cast_to: Any, response: Any, data: Any) -> Any:
    return process(data=data, cast_to=cast_to, response=response)


def transport_of(base_client: Any) -> Any:
    """The HTTP library the SDK's `_base_client` module reads through: httpx2 (anthropic >= 1,
    openai >= 3) or httpx (the older lines); only the one the SDK imported need be installed."""
    return getattr(base_client, "httpx2", None) or base_client.httpx


def sends_when_called(obj: object, base_client: Any) -> bool | None:
    """For a client of a Stainless SDK (its `_base_client` module given): whether a call on it
    sends the request when called (a sync client) or only once awaited or entered (an async one).
    None for anything else."""
    if isinstance(obj, base_client.AsyncAPIClient):
        return False
    if isinstance(obj, base_client.SyncAPIClient):
        return True
    return None

