"""Keep-alives counted in the body's bytes, for an SDK whose event layers streamscope does not know.

The SDK drops keep-alives (`event: ping`) before the caller sees them. Where its `_iter_events`
and decoder are the forms `layers.py` knows, streamscope's own copy of the decoder counts them as
it decodes. Anywhere else (an SDK release whose streaming module changed) the SDK's layers run as
they are, and streamscope used to count keep-alives in a generator over `_iter_events`: a Python
frame and the event's `event` property per server-sent event. Here instead the HTTP response's
byte stream is read through `_reader.Pings` (compiled), which passes every chunk on untouched and
finds the keep-alive lines in it: no code of the SDK's is assumed, only the HTTP library's byte
stream (httpx's or httpx2's `response.stream`, which every reader of the body reads).

Where it does not apply (an async stream, a body that is not server-sent events as sent, such as
Bedrock's binary event stream or a compressed body, a response of another HTTP library, or a
machine where `_reader` was not built), `count_in_body` says so and the hooks count over
`_iter_events` as before.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

from streamscope.core.guard import internal_error

from .body import http_library

_reader: ModuleType | None
try:
    from . import _reader
except ImportError:
    _reader = None


class CountedBody:
    """`response.stream`, its chunks read through `_reader.Pings`; everything else passed on."""

    def __init__(self, inner: Any, pinged: Callable[[], None]) -> None:
        self.inner = inner
        self.pinged = pinged

    def __iter__(self) -> Iterator[bytes]:
        assert _reader is not None  # made only where it was built
        counted: Iterator[bytes] = _reader.Pings(iter(self.inner), self.pinged)
        return counted

    def close(self) -> None:
        self.inner.close()

    @property
    def elapsed(self) -> Any:
        """The HTTP library reads `response.elapsed` through the body it wraps; pass it on."""
        return getattr(self.inner, "elapsed", None)


@functools.cache
def _kind(transport: ModuleType) -> type:
    """A `CountedBody` that is the transport's `SyncByteStream`, as its readers check."""
    return type("CountedBody", (CountedBody, transport.SyncByteStream), {})


def count_in_body(stream: Any, rec: Any, ping: str, is_async: bool) -> bool:
    """Count the stream's keep-alives (events named `ping`) in its response's bytes (`rec.pinged`
    per one), before the SDK's `_iter_events` reads them; False where that does not apply (nothing
    changed). Never raises."""
    if is_async or _reader is None or ping != "ping":
        return False
    try:
        response = stream.response
        headers = response.headers
        if (not headers.get("content-type", "").startswith("text/event-stream")
                or headers.get("content-encoding", "identity") != "identity"):
            return False  # not server-sent events (Bedrock's binary event stream), or compressed
        inner = response.stream
        if isinstance(inner, CountedBody):
            return True  # counted already: `_iter_events` called again on the same response
        transport = http_library(response)
        if not isinstance(inner, getattr(transport, "SyncByteStream", ())):
            return False
        response.stream = _kind(transport)(inner, rec.pinged)
        return True
    except Exception:
        internal_error("adapter.pings")
        return False
