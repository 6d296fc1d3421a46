"""A streamed call another HTTP client posts itself to an SDK's streaming endpoint (LiteLLM's).

Some frameworks never call the SDK: LiteLLM's `anthropic/` provider builds the Messages request
and posts it with its own httpx client, then parses the server-sent events itself. The request
still goes through the HTTP client's `send` (`httpx.Client.send`, `httpx2.Client.send`, and their
async forms), so that is where such a call is recorded: a streamed POST (`send(..., stream=True)`,
a JSON body with `"stream": true`) to a path the adapter knows (`Spec.event_type`: Anthropic's
`/v1/messages`, OpenAI's `/chat/completions` and `/responses`), made outside an SDK call
streamscope already records (`client._in_call`: the SDKs post through the same `send`). From the
headers on, its body is observed as the caller reads it (`body.py`, the same as a raw response's),
each event parsed into the SDK's own model. The request itself is sent as it was: the budgets
only cap a sync request's timeouts for the wait for the headers (as for an SDK's call), and an
async one's wait is bounded by the budgets' timer.
"""

from __future__ import annotations

import functools
import json
import sys
import time
import weakref
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any

from streamscope.budgets.async_watch import cancelled_by_budget
from streamscope.budgets.enforcement import expired, header_wait, process_id, timeout_error
from streamscope.core import failures
from streamscope.core.calls import Call, CallOpener, captured, end
from streamscope.core.guard import internal_error

from .body import body_reader, observe_body
from .body_watch import watch_body, watch_headers
from .client import _abandoned, _in_call, _retries
from .ending import end_with
from .other_libraries import KNOWN, OTHER
from .spec import Spec

_now = time.monotonic
_PASSING = frozenset({"streamscope", "wrapt", "httpx", "httpx2", "httpcore", "httpcore2"})
KNOWN_CALLERS = KNOWN | {"litellm", "langchain_anthropic", "langchain_openai", "pydantic_ai", "agents", "instructor",
                         "llama_index", "anthropic", "openai"}
"""The packages `streamscope.unobserved.by` names for a call posted past streamscope (else `_OTHER`)."""


def _streamed_body(request: Any) -> Mapping[str, Any] | None:
    """The JSON body of a streamed POST (`"stream": true`), else None. Reads only a body the
    request already holds (never a streaming upload)."""
    if request.method != "POST":
        return None
    try:
        content = request.content
    except Exception:  # a streaming upload: not one of these calls
        return None
    if not content or b'"stream"' not in content:
        return None
    try:
        body = json.loads(content)
    except ValueError:
        return None
    return body if isinstance(body, Mapping) and body.get("stream") is True else None


def caller_package() -> str:
    """The top-level package that called `send` (past the HTTP libraries and wrappers), as
    `streamscope.unobserved.by` names it: a known one, else `_OTHER`."""
    frame = sys._getframe(1)
    while frame is not None:
        package = str(frame.f_globals.get("__name__", "")).partition(".")[0]
        if package not in _PASSING:
            return package if package in KNOWN_CALLERS else OTHER
        frame = frame.f_back  # type: ignore[assignment]
    return OTHER


class PostedHooks:
    """The wrappers on an HTTP library's `Client.send` / `AsyncClient.send` for one SDK's endpoints."""

    def __init__(self, pipeline: CallOpener, spec: Spec) -> None:
        self.pipeline = pipeline
        self.spec = spec
        self.active = False

    def _begin(self, request: Any, stream: bool, sender: object = None) -> tuple[Call, Any] | None:
        """The call of a streamed POST to one of the SDK's endpoints made outside an SDK call, and
        the SDK's model of its events; None for anything else (passed through)."""
        if not self.active or _in_call.get() is not None:
            return None
        event_type = self.spec.event_type
        try:
            found = event_type(request.url.path) if event_type is not None else None
            if found is None:
                return None
            body = _streamed_body(request)
            if body is None:
                return None
            if not stream:  # the client reads the whole body inside `send`: nobody waits on a stream
                self.pipeline.unobserved(self.spec.name, caller_package(), "read_whole")
                return None
            t0 = _now()
            options = SimpleNamespace(method="post", url=request.url.path, json_data=body, headers={})
            client = SimpleNamespace(base_url=request.url)
            info = self.spec.request(self.pipeline, client, options, True, t0)
            if info is None:
                return None
            call = self.pipeline.open(info, t0, self.spec.helpers, sender)
            if call is None:
                return None
            captured(call)
            return call, found
        except Exception:
            internal_error("adapter.posted")
            return None

    def _cap(self, call: Call, client: Any, request: Any) -> None:
        """Sync: no wait for the headers past the first budget to expire; the read timeout goes
        back to the caller's for the body (`body_watch.restore_read_timeout`)."""
        try:
            remaining = header_wait(call.recorder, _now())
            if remaining is None:
                return
            current = request.extensions.get("timeout") or client.timeout.as_dict()
            capped = {k: remaining if v is None or v > remaining else v for k, v in current.items()}
            if capped != current:
                call.restore_read = (current.get("read"),)
                request.extensions = {**request.extensions, "timeout": capped}
        except Exception:
            internal_error("adapter.posted_cap")

    def _opened(self, call: Call, event_type: Any, response: Any, is_async: bool) -> None:
        """The headers are in: an error status ends the call (the caller reads the body); a
        stream's body is observed from here, as a raw response's."""
        rec = call.recorder
        try:
            t = _now()
            rec.headers(t, response.status_code, self.spec.request_id(response.headers),
                        _retries(response.request.headers))  # where an SDK sent it (a peer's request past ours)
            if response.status_code >= 400:
                status = response.status_code
                end(rec, "error", str(status), None, code=failures.for_status(status).code)
                return
            rec.http_request = response.request
            parse = functools.partial(self.spec.base_client.construct_type, type_=event_type)
            body = observe_body(response, call, self.spec, lambda data: parse(value=data))
            call.finalizer = weakref.finalize(response, _abandoned, rec, process_id())
            watch_body(call, response, body, body_reader, is_async)
        except Exception:
            internal_error("adapter.posted_opened")

    # -- the wrappers ------------------------------------------------------------------------

    def send(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        request = args[0] if args else kwargs.get("request")
        found = self._begin(request, bool(kwargs.get("stream", False)), instance) if request is not None else None
        if found is None:
            return wrapped(*args, **kwargs)
        call, event_type = found
        rec = call.recorder
        if call.refused is not None:
            end_with(rec, call.refused, self.spec.ending)
            raise call.refused
        if rec.request.budgets.enforced:
            self._cap(call, instance, request)
        try:
            response = wrapped(*args, **kwargs)
        except BaseException as exc:
            if rec.fired is None and isinstance(exc, Exception) and expired(rec, _now()):
                raise timeout_error(rec) from None  # the capped timeout ran out: that was a budget
            end_with(rec, exc, self.spec.ending)
            raise
        self._opened(call, event_type, response, False)
        return response

    async def async_send(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        request = args[0] if args else kwargs.get("request")
        found = self._begin(request, bool(kwargs.get("stream", False)), instance) if request is not None else None
        if found is None:
            return await wrapped(*args, **kwargs)
        call, event_type = found
        rec = call.recorder
        if call.refused is not None:
            end_with(rec, call.refused, self.spec.ending)
            raise call.refused
        watch, task = watch_headers(rec)
        try:
            response = await wrapped(*args, **kwargs)
        except BaseException as exc:
            if watch is not None and cancelled_by_budget(exc, rec, task):
                raise timeout_error(rec) from None
            end_with(rec, exc, self.spec.ending)
            raise
        if watch is not None:
            watch.reader = None  # the body is in the caller's hands: its own time from here
        self._opened(call, event_type, response, True)
        if watch is not None and watch.attention and rec.fired is not None:
            await response.aclose()
            raise timeout_error(rec)
        return response


class BelowFloorHooks:
    """An SDK installed below the oldest release streamscope supports is left alone (nothing of it
    is hooked), but its streamed calls are not let go silently: each streamed POST to one of its
    endpoints (`paths`) passing its HTTP library's `send` is counted (`count`), never changed."""

    def __init__(self, paths: tuple[str, ...], count: Callable[[], None]) -> None:
        self.paths = paths
        self.count = count
        self.active = True

    def _seen(self, request: Any, stream: bool) -> None:
        try:
            if self.active and stream and request.url.path.rstrip("/").endswith(self.paths) \
                    and _streamed_body(request) is not None:
                self.count()
        except Exception:
            internal_error("adapter.below_floor")

    def send(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        request = args[0] if args else kwargs.get("request")
        if request is not None:
            self._seen(request, bool(kwargs.get("stream", False)))
        return wrapped(*args, **kwargs)

    async def async_send(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        request = args[0] if args else kwargs.get("request")
        if request is not None:
            self._seen(request, bool(kwargs.get("stream", False)))
        return await wrapped(*args, **kwargs)
