"""What the installed SDK lines raise, as the tests read it.

A stream cut mid-body or a read that timed out reaches the caller as each SDK line raises it: up to
anthropic 2.16 (and openai 2.x) the transport's own exception (`httpx2.RemoteProtocolError`, or
`httpx.…` on the lines that read through httpx); from anthropic 2.17 (and openai 3.x) the SDK's
`APIConnectionError` / `APITimeoutError` with the transport's exception as its `__cause__`.
streamscope never changes which: its span names the transport's class either way. The tests ask
here instead of writing one line's types down.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any


def _sdk(name: str) -> ModuleType:
    return __import__(name)


def transport(sdk: str = "anthropic") -> ModuleType:
    """The HTTP library the installed SDK reads through: httpx2, or httpx on the older lines."""
    base = _sdk(sdk)._base_client
    return getattr(base, "httpx2", None) or base.httpx


def wraps_body_errors(sdk: str = "anthropic") -> bool:
    """Whether the installed SDK wraps a failure to read a stream's body in its own exceptions."""
    streaming = _sdk(sdk)._streaming
    if hasattr(streaming, "iter_response_bytes"):  # anthropic >= 2.17
        return True
    source = inspect.getsource(streaming.Stream._iter_events)
    return "APIConnectionError" in source  # openai >= 3


def cut_type(sdk: str = "anthropic") -> str:
    """`error.type` of a cut connection on the installed line: the transport's class, module-qualified."""
    return f"{transport(sdk).__name__}.RemoteProtocolError"


def cut(sdk: str = "anthropic") -> type[BaseException]:
    """What the caller catches when the connection is cut mid-stream."""
    return _sdk(sdk).APIConnectionError if wraps_body_errors(sdk) else transport(sdk).RemoteProtocolError


def read_timeout(sdk: str = "anthropic") -> type[BaseException]:
    """What the caller catches when the transport's read timeout ends a stream."""
    return _sdk(sdk).APITimeoutError if wraps_body_errors(sdk) else transport(sdk).ReadTimeout


def is_cut(caught: Any, sdk: str = "anthropic") -> bool:
    """`caught` is a mid-stream cut as the installed line raises it (and, wrapped, caused by one)."""
    if not isinstance(caught, cut(sdk)):
        return False
    return not wraps_body_errors(sdk) or isinstance(caught.__cause__, transport(sdk).RemoteProtocolError)


def is_read_timeout(caught: Any, sdk: str = "anthropic") -> bool:
    """`caught` is the transport's read timeout as the installed line raises it."""
    if not isinstance(caught, read_timeout(sdk)):
        return False
    return not wraps_body_errors(sdk) or isinstance(caught.__cause__, transport(sdk).ReadTimeout)


def traces_itself(sdk: str = "anthropic") -> bool:
    """Whether the installed SDK traces itself (anthropic >= 2.10: `BaseClient._tracer`, the
    `open_telemetry` client option); where it does not, streamscope sends the trace context."""
    return "_tracer" in vars(_sdk(sdk)._base_client.BaseClient)
