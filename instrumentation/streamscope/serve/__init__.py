"""Serving streams to browsers (extra `streamscope[serve]`): the relay and the caller's deadline.

`relay()` turns one instrumented provider stream into a Server-Sent Events response with a stable
error contract; `client_routes()` serves the browser client that reads it (`client.js`);
`DeadlineMiddleware` turns the time left that a caller sent into a `deadline()` for the whole
request, streamed body included; `deadline_headers()` passes the time left on.
The names load on first use, so that a missing extra is one clear error where it is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamscope.breaker.redis_store import RedisStore

    from .bad_input import bad_request
    from .buffers.memory import MemoryBuffer
    from .buffers.redis_buffer import RedisBuffer
    from .client_files import ALLOW_HEADERS, EXPOSE_HEADERS, client_routes
    from .continuation import continuation_messages, trim_to_sentence
    from .deadline import DeadlineMiddleware, deadline_headers
    from .stream_relay import EventMap, relay, text_events

_LAZY = {
    "relay": ".stream_relay",
    "text_events": ".stream_relay",
    "EventMap": ".stream_relay",
    "DeadlineMiddleware": ".deadline",
    "bad_request": ".bad_input",
    "deadline_headers": ".deadline",
    "MemoryBuffer": ".buffers.memory",
    "RedisBuffer": ".buffers.redis_buffer",
    "RedisStore": "streamscope.breaker.redis_store",
    "client_routes": ".client_files",
    "ALLOW_HEADERS": ".client_files",
    "EXPOSE_HEADERS": ".client_files",
    "continuation_messages": ".continuation",
    "trim_to_sentence": ".continuation",
}

_EXTRA = frozenset({"starlette", "anyio"})
"""What the `serve` extra installs: missing, it is one line that says how to install it."""

__all__ = ["ALLOW_HEADERS", "EXPOSE_HEADERS", "DeadlineMiddleware", "EventMap", "MemoryBuffer", "RedisBuffer",
           "RedisStore", "bad_request", "client_routes", "continuation_messages", "deadline_headers", "relay",
           "text_events", "trim_to_sentence"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        found = importlib.import_module(module, __name__)
    except ModuleNotFoundError as error:
        if error.name not in _EXTRA:
            raise
        raise ModuleNotFoundError(f"streamscope.serve needs {error.name}, which is not installed: "
                                  f"pip install 'streamscope[serve]'", name=error.name) from None
    value = getattr(found, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
