"""A streamed call whose caller got the raw response: the body observed on its way to the caller.

`with_raw_response.create(stream=True)` and `with_streaming_response.create(...)` hand the caller
the SDK's response object, not a stream. The caller then either parses it (`.parse()` builds the
SDK's `Stream` over the same HTTP response: the stream hooks take the call over, `adopt`) or reads
the body itself (`iter_bytes()`, `iter_lines()`, `iter_text()`, `read()`, or the HTTP response's
own readers). Every one of those reads the HTTP response's byte stream, so that is where the call
is observed: `response.stream` is replaced by a body of the same kind (sync, async: httpx's checks
on the kind still hold) that, until a `Stream` adopts the call, decodes the server-sent events in
the bytes it passes on and tells the recorder what the SDK would have parsed (`Spec.sse`), with
the same clocks, budgets and ways out as a parsed stream. What the caller receives is the bytes,
exactly as the transport gave them. Once adopted, it only passes the bytes on.

The same place the SDK's own tracing ends its span for such responses (it wraps `response.stream`
too, and records nothing of the events a caller reads as bytes: this does).
"""

from __future__ import annotations

import functools
import re
import sys
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from streamscope.budgets.async_watch import AsyncWatch, cancelled_by_budget, current_task
from streamscope.budgets.enforcement import timeout_error
from streamscope.budgets.sync_watch import SyncWatch
from streamscope.core.calls import Call, end
from streamscope.core.guard import internal_error

from .ending import end_with
from .spec import Spec

_now = time.monotonic
_LINES = re.compile(rb"\r\n|\r|\n")


class Events:
    """Server-sent events from bytes pushed in as they arrive: (event name, data) per event.

    The SSE rules the SDKs' decoders follow: lines end with CR, LF or CRLF; a blank line ends an
    event; `event:` names it, `data:` lines are joined with LF; comments (`:`) are dropped."""

    __slots__ = ("_cr", "_data", "_name", "_rest")

    def __init__(self) -> None:
        self._rest = b""
        self._cr = False
        self._name: str | None = None
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[tuple[str | None, str]]:
        """The events the bytes so far complete."""
        if self._cr and chunk.startswith(b"\n"):
            chunk = chunk[1:]  # the LF of a CRLF split between two chunks
        buffer = self._rest + chunk
        self._cr = buffer.endswith(b"\r")
        lines = _LINES.split(buffer)
        self._rest = lines.pop()  # a line still arriving (empty after a line break)
        found: list[tuple[str | None, str]] = []
        for raw in lines:
            if not raw:
                if self._data or self._name is not None:
                    found.append((self._name, "\n".join(self._data)))
                self._name, self._data = None, []
                continue
            field, _, value = raw.decode("utf-8", "replace").partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "event":
                self._name = value
            elif field == "data":
                self._data.append(value)
        return found


class Body:
    """What the raw body observer keeps for one call (sync and async share it)."""

    def __init__(self, inner: Any, call: Call, spec: Spec, parse: Callable[[Any], Any]) -> None:
        self.inner = inner
        self.call = call
        self.spec = spec
        self.parse = parse
        """The SDK's own model of one event's data (`_process_response_data` with the stream's type)."""
        self.adopted = False
        """A `Stream` was built over this response: its hooks observe the events from then on."""
        self.drained = False
        """The body was read to its end: a close after it ends nothing."""
        self.events = Events()
        self.reading: weakref.ReferenceType[Any] | None = None
        """The generator reading the body, for the sync watch's "is the reader on the network?"."""

    @property
    def elapsed(self) -> Any:
        """httpx reads `response.elapsed` through the body it wraps; pass it on."""
        return getattr(self.inner, "elapsed", None)

    def closing(self) -> None:
        """The response is being closed: the caller left, unless the body was read to its end, or
        (once adopted) the SDK's stream closes it on its way out with an exception that its hooks
        end the record with."""
        if self.drained or (self.adopted and _raising()):
            return
        end(self.call.recorder, "closed")

    def observe(self, chunk: bytes, t: float) -> None:
        """The events this chunk completes, as the SDK would have parsed them. Never raises."""
        rec = self.call.recorder
        spec = self.spec
        try:
            for name, data in self.events.feed(chunk):
                try:
                    found = spec.sse(rec, name, data, t)  # type: ignore[misc]
                    if found is not None:
                        (spec.observe if rec.content is None else spec.observe_capturing or spec.observe)(
                            rec, self.parse(found), t)
                except ValueError:  # not JSON, or not the SDK's model: delivered, never content
                    rec.other(t)
        except Exception:
            internal_error("adapter.body")


    def before(self, watch: SyncWatch | AsyncWatch | None, reader: Any) -> None:
        """A read is about to start: its clock, and the watch told who reads (`reader`); a budget
        that fired while the caller was away raises here, at the read."""
        self.call.recorder.asked(_now())
        if watch is not None:
            watch.reader = reader
            if watch.attention and watch.attend():
                raise _Fired

    def passed(self, watch: SyncWatch | AsyncWatch | None, chunk: bytes, away: Any) -> None:
        """A chunk was read and is on its way to the caller (`away`: the watch's reader meanwhile)."""
        t = _now()
        if watch is not None:
            watch.reader = away
        self.observe(chunk, t)
        self.call.recorder.held = t

    def failed(self, exc: BaseException, watch: SyncWatch | AsyncWatch | None, away: Any,
               by_budget: Callable[[BaseException], bool]) -> bool:
        """The read raised `exc`: True where a budget's firing caused it (the caller gets the budget's
        timeout instead, `by_budget` asked only then); else the record ends with `exc` (once adopted,
        the stream's hooks end it)."""
        if self.adopted:
            return False
        if watch is not None:
            watch.reader = away
            if by_budget(exc):
                return True
        end_with(self.call.recorder, exc, self.spec.ending)
        return False

    def done(self) -> None:
        """Read to its end (the stream's hooks end an adopted call)."""
        self.drained = True
        if not self.adopted:
            end(self.call.recorder, "done")


class SyncBody(Body):
    """`response.stream` for a sync response."""

    def __iter__(self) -> Iterator[bytes]:
        reading = self._read()
        self.reading = weakref.ref(reading)
        return reading

    def close(self) -> None:
        self.closing()
        self.inner.close()

    def _read(self) -> Iterator[bytes]:
        rec = self.call.recorder
        watch = rec.watch if isinstance(rec.watch, SyncWatch) else None
        chunks = iter(self.inner)
        try:
            while not self.adopted:
                self.before(watch, True)
                try:
                    chunk = next(chunks)
                except StopIteration:
                    break
                self.passed(watch, chunk, False)
                yield chunk
            else:
                yield from chunks
        except GeneratorExit:
            raise
        except BaseException as exc:
            if self.failed(exc, watch, False,
                           lambda e: rec.fired is not None and not rec.finished and isinstance(e, Exception)):
                _quietly(self.inner.close)
                raise timeout_error(rec) from None
            raise
        self.done()


class AsyncBody(Body):
    """`response.stream` for an async response."""

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._aread()

    async def aclose(self) -> None:
        self.closing()
        await self.inner.aclose()

    async def _aread(self) -> AsyncIterator[bytes]:
        rec = self.call.recorder
        watch = rec.watch if isinstance(rec.watch, AsyncWatch) else None
        task = None
        chunks = self.inner.__aiter__()
        try:
            while not self.adopted:
                if watch is not None:
                    task = current_task(watch.loop)
                self.before(watch, task)
                try:
                    chunk = await chunks.__anext__()
                except StopAsyncIteration:
                    break
                self.passed(watch, chunk, None)
                yield chunk
            else:
                async for chunk in chunks:
                    yield chunk
        except GeneratorExit:
            raise
        except BaseException as exc:
            if self.failed(exc, watch, None, lambda e: isinstance(e, _Fired) or cancelled_by_budget(e, rec, task)):
                await _aquietly(self.inner.aclose)
                raise timeout_error(rec) from None
            raise
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                await _aquietly(aclose)
        self.done()


def _raising() -> bool:
    """Whether an exception (other than a generator being closed) is on its way out here."""
    found = sys.exc_info()[1]
    return found is not None and not isinstance(found, GeneratorExit)


class _Fired(Exception):
    """A budget fired while the caller was away; raised at its next read."""


def _quietly(close: Callable[[], Any]) -> None:
    try:
        close()
    except Exception:
        internal_error("adapter.close")


async def _aquietly(close: Callable[[], Any]) -> None:
    try:
        await close()
    except Exception:
        internal_error("adapter.close")


@functools.cache
def _kinds(transport: Any) -> tuple[type, type, type]:
    """(sync, async, both) body classes deriving from this transport's byte stream classes, so that
    httpx's `isinstance` checks on `response.stream` hold as they did for the body they wrap."""
    sync = type("SyncBody", (SyncBody, transport.SyncByteStream), {})
    asynchronous = type("AsyncBody", (AsyncBody, transport.AsyncByteStream), {})
    both = type("Body", (SyncBody, AsyncBody, transport.SyncByteStream, transport.AsyncByteStream), {})
    return sync, asynchronous, both


def http_library(response: Any) -> Any:
    """The HTTP library a response is from (httpx2, or httpx: an SDK may be given another
    library's client), whose byte stream classes a body in place of `response.stream` must be."""
    return sys.modules[type(response).__module__.partition(".")[0]]


def observe_body(response: Any, call: Call, spec: Spec, parse: Callable[[Any], Any]) -> Body:
    """Put an observed body in place of `response.stream`, where a `Stream` built over the response
    later finds it (`adopt`). The byte stream classes are those of the
    HTTP library the response is from (an SDK may be given another library's client)."""
    inner = response.stream
    transport = http_library(response)
    sync, asynchronous, both = _kinds(transport)
    is_sync, is_async = isinstance(inner, transport.SyncByteStream), isinstance(inner, transport.AsyncByteStream)
    kind = both if is_sync and is_async else sync if is_sync else asynchronous
    body: Body = kind(inner, call, spec, parse)
    response.stream = body
    return body


def body_reader(body: Body) -> Any:
    """The generator reading an observed sync body (for `reading.waiting_on`), or None."""
    return None if body.reading is None else body.reading()


def adopt(stream: Any) -> Call | None:
    """A `Stream` built over a response whose body is observed takes the call over (its hooks
    observe the parsed events); the body only passes the bytes on from then. Read as the response's
    `stream` attribute, never through its `__dict__`: reading an object's `__dict__` makes CPython
    3.11 give it a dict of its own, and every attribute the HTTP library then stores on it per chunk
    (httpx counts the bytes read) takes the interpreter's slow path: some 800 instructions per event
    on every plain `create(stream=True)`, measured with callgrind."""
    body = getattr(getattr(stream, "response", None), "stream", None)
    if not isinstance(body, Body) or body.adopted:
        return None
    body.adopted = True
    return body.call
