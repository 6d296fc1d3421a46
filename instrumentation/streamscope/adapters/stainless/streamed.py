"""The SDK's `Stream.__stream__` over its `_iter_events` and `SSEDecoder.iter_bytes`, as one generator.

Between the body and the caller the SDK runs, per event, `__stream__` (which skips keep-alives,
raises an error event, and parses each event's data into the SDK's model) over `_iter_events`
and `iter_bytes` (which decode the body's lines into server-sent events). Where the installed
SDK's code of all three is, to the bytecode, the code written out here (`STREAM`) and in
`layers.KNOWN` (`Layers.stream`, checked at install; `Layers.parsed` decides per stream), an
instrumented stream runs `streamed` below in their place: the same steps in the same order, in
one generator instead of three, reading the events' fields (`_event`, `_data`) where the SDK
reads them through properties, and counting keep-alives as they are decoded. What the caller
receives, what is raised and when the response is closed are the SDK's. The SDK's stream
observer is not told anything: it is None on every instrumented stream (the SDK's tracer is off
inside instrumented calls), which the hook checks before taking a stream over.

Why: two generator steps and five Python-level property and method calls per event cost the
SDK about 3,800 instructions per event under valgrind, more than streamscope's own work per
event (about 3,100 with metrics on); taking them over leaves an instrumented stream cheaper per
event than the bare SDK (docs/performance.md gives both figures).
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from .unasync import sync_twin

STREAM: dict[tuple[str, str], str] = {
    # (class, method): `__stream__` as anthropic 2.17 writes it, and the event's `json()`: where
    # these and `_iter_events` and `iter_bytes` are the known forms, `streamed.py` runs in their place.
    ("Stream", "__stream__"): """
def __stream__(self):
    cast_to = cast(Any, self._cast_to)
    response = self.response
    process_data = self._client._process_response_data
    iterator = self._iter_events()

    if (observer := self._observer) is not None:
        observer.begin()

    try:
        for sse in iterator:
            if sse.event == "ping":
                continue

            if sse.event is None:
                continue

            if sse.event == "error":
                body = sse.data

                try:
                    body = sse.json()
                    err_msg = f"{body}"
                except Exception:
                    err_msg = sse.data or f"Error code: {response.status_code}"

                raise self._client._make_status_error(
                    err_msg,
                    body=body,
                    response=self.response,
                )

            if not sse.data:
                continue

            yield process_data(data=sse.json(), cast_to=cast_to, response=response)
        if (observer := self._observer) is not None:
            observer.end("read")
    except Exception as err:
        if (observer := self._observer) is not None:
            observer.end("failed", err)
        raise
    finally:
        if sys.is_finalizing():
            response.is_closed = True
        else:
            response.close()

import sys  # a module-level import: the compiler calls its functions as the SDK's module does
""",
    ("ServerSentEvent", "json"): """
def json(self):
    return json.loads(self.data)

import json
""",
}
STREAM["AsyncStream", "__stream__"] = (
    STREAM["Stream", "__stream__"].replace("def __stream__", "async def __stream__")
    .replace("for sse in iterator", "async for sse in iterator").replace("response.close()", "await response.aclose()"))
"""The async form is the sync one with the async iteration and close (compared as strictly)."""


async def astreamed(stream: Any, rec: Any, read_body: Any) -> AsyncIterator[Any]:
    """`AsyncStream.__stream__` as `STREAM` has it (anthropic 1.x and 2.x), over `_iter_events` and
    `aiter_bytes` as it has them, keep-alives (`ping`) counted. `read_body`: the SDK's body reader
    that `_iter_events` calls with (response, client), or None for the response's own bytes.
    `streamed`, for `Stream`, is this code not awaiting (`unasync`)."""
    cast_to = stream._cast_to
    response = stream.response
    client = stream._client
    process_data = client._process_response_data
    decoder = stream._decoder
    body = response.aiter_bytes() if read_body is None else read_body(stream.response, stream._client)
    try:
        async for chunk in decoder._aiter_chunks(body):
            for raw_line in chunk.splitlines():
                sse = decoder.decode(raw_line.decode("utf-8"))
                if not sse:
                    continue
                event = sse._event
                if event == "ping":
                    rec.pinged()
                    continue
                if event is None:
                    continue
                if event == "error":
                    raise _error(sse, client, response, stream.response)
                data = sse._data
                if not data:
                    continue
                yield process_data(data=json.loads(data), cast_to=cast_to, response=response)
    finally:
        if sys.is_finalizing():
            response.is_closed = True
        else:
            await response.aclose()


streamed: Callable[[Any, Any, Any], Iterator[Any]] = sync_twin(astreamed, {"astreamed": "streamed"})


def _error(sse: Any, client: Any, response: Any, stream_response: Any) -> Any:
    """The exception `__stream__` raises for an error event, made as it makes it."""
    body = sse.data
    try:
        body = sse.json()
        err_msg = f"{body}"
    except Exception:
        err_msg = sse.data or f"Error code: {response.status_code}"
    return client._make_status_error(err_msg, body=body, response=stream_response)
