"""Serving streams to browsers (extra `streamscope[serve]`): the relay and the caller's deadline.

`relay()` turns one instrumented provider stream into a Server-Sent Events response with a stable
error contract; `DeadlineMiddleware` turns the time left that a caller sent into a `deadline()`
for the whole request, streamed body included; `deadline_headers()` passes the time left on.
The names load on first use, so that a missing extra is one clear error where it is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bad_input import bad_request
    from .deadline import DeadlineMiddleware, deadline_headers
    from .stream_relay import EventMap, relay, text_events

_LAZY = {
    "relay": ".stream_relay",
    "text_events": ".stream_relay",
    "EventMap": ".stream_relay",
    "DeadlineMiddleware": ".deadline",
    "bad_request": ".bad_input",
    "deadline_headers": ".deadline",
}

__all__ = ["DeadlineMiddleware", "EventMap", "bad_request", "deadline_headers", "relay", "text_events"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
