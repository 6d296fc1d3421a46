"""The SDK's per-event layers that the stream hooks take the place of, written out.

Every Stainless-generated SDK (`anthropic`, `openai`) has the same `_streaming` module. Between
the network and the caller the SDK runs a few generators per event that only pass
items along: `Stream.__iter__` and `__next__` re-yield the shared iterator (anthropic's also tell
the SDK's own stream observer, off inside an instrumented call since its tracer is None there;
openai's tell nobody), `Stream._iter_events` re-yields what the decoder decodes, and
`SSEDecoder.iter_bytes` decodes lines into server-sent events (reading the body directly, or,
from anthropic 2.17, through the SDK's `iter_response_bytes`, which wraps transport failures in
the SDK's own exceptions: the takeover reads through that same function). A generator step per event is a
good part of streamscope's per-event budget, so where the installed SDK's methods are, to the
bytecode, the ones below (`check()`, at install), the hooks iterate what those iterate instead of
wrapping them: streamscope's observer takes the place of `__iter__`, and the ping counter is this
module's copy of `iter_bytes` with one compare added (`decoded`), in place of `iter_bytes` and
`_iter_events` both. Where an SDK has changed any of them, the hooks wrap them as they are.
"""

from __future__ import annotations

import types
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from streamscope.core.guard import internal_error

from .streamed import STREAM, astreamed, streamed
from .unasync import sync_twin

KNOWN: dict[tuple[str, str], str] = {
    # (class, method): the SDK's own code (anthropic 2.14), compiled and compared at install.
    # Another SDK (or version) whose code differs in any of them has that layer wrapped instead.
    ("Stream", "__iter__"): """
def __iter__(self):
    for item in self._iterator:
        if (observer := self._observer) is not None:
            observer.item(item)
        yield item
""",
    ("AsyncStream", "__aiter__"): """
async def __aiter__(self):
    async for item in self._iterator:
        if (observer := self._observer) is not None:
            observer.item(item)
        yield item
""",
    ("Stream", "__next__"): """
def __next__(self):
    item = self._iterator.__next__()
    if (observer := self._observer) is not None:
        observer.item(item)
    return item
""",
    ("AsyncStream", "__anext__"): """
async def __anext__(self):
    item = await self._iterator.__anext__()
    if (observer := self._observer) is not None:
        observer.item(item)
    return item
""",
    ("Stream", "_iter_events"): """
def _iter_events(self):
    yield from self._decoder.iter_bytes(self.response.iter_bytes())
""",
    ("AsyncStream", "_iter_events"): """
async def _iter_events(self):
    async for sse in self._decoder.aiter_bytes(self.response.aiter_bytes()):
        yield sse
""",
    ("SSEDecoder", "iter_bytes"): """
def iter_bytes(self, iterator):
    for chunk in self._iter_chunks(iterator):
        for raw_line in chunk.splitlines():
            line = raw_line.decode("utf-8")
            sse = self.decode(line)
            if sse:
                yield sse
""",
    ("SSEDecoder", "aiter_bytes"): """
async def aiter_bytes(self, iterator):
    async for chunk in self._aiter_chunks(iterator):
        for raw_line in chunk.splitlines():
            line = raw_line.decode("utf-8")
            sse = self.decode(line)
            if sse:
                yield sse
""",
}

READ_THROUGH_SDK: dict[tuple[str, str], tuple[str, str]] = {
    # (class, method): `_iter_events` as anthropic 2.17 writes it, reading the body through the
    # SDK's own `iter_response_bytes`, which turns a transport failure into the SDK's
    # APIConnectionError / APITimeoutError (the transport error kept as its `__cause__`). Taken
    # over the same way, the body read through that same function: (the method, the function's name).
    ("Stream", "_iter_events"): ("""
def _iter_events(self):
    yield from self._decoder.iter_bytes(iter_response_bytes(self.response, self._client))
""", "iter_response_bytes"),
    ("AsyncStream", "_iter_events"): ("""
async def _iter_events(self):
    async for sse in self._decoder.aiter_bytes(async_iter_response_bytes(self.response, self._client)):
        yield sse
""", "async_iter_response_bytes"),
}

PLAIN: dict[tuple[str, str], str] = {
    # (class, method): a layer that only re-yields, telling nobody (openai 3.57): taken over
    # wherever it is the installed code, whatever the SDK's tracer does.
    ("Stream", "__iter__"): """
def __iter__(self):
    for item in self._iterator:
        yield item
""",
    ("AsyncStream", "__aiter__"): """
async def __aiter__(self):
    async for item in self._iterator:
        yield item
""",
    ("Stream", "__next__"): """
def __next__(self):
    return self._iterator.__next__()
""",
    ("AsyncStream", "__anext__"): """
async def __anext__(self):
    return await self._iterator.__anext__()
""",
}

_FUTURE_FLAGS = 0xFFFF  # co_flags above these bits are `from __future__` imports, not the code


def same_code(func: Any, reference: str) -> bool:
    """Whether `func` is a plain function that compiles to what `reference` compiles to under this
    Python (its docstring, annotations, comments and line numbers aside).

    Only a plain function counts: another library's wrapper in its place (a wrapt proxy forwards
    `__code__` to what it wraps) is not the SDK's code, and skipping it would skip that library."""
    if type(func) is not types.FunctionType:
        return False
    code = func.__code__
    if isinstance(func.__doc__, str):  # the docstring is a constant of the code: give the reference the same
        head, _, body = reference.strip("\n").partition("\n")
        reference = f"{head}\n    {func.__doc__!r}\n{body}\n"
    ref = next(c for c in compile(reference, "<streamscope>", "exec").co_consts if isinstance(c, types.CodeType))
    return (code.co_code, code.co_names, code.co_varnames, code.co_consts, code.co_flags & _FUTURE_FLAGS) == (
        ref.co_code, ref.co_names, ref.co_varnames, ref.co_consts, ref.co_flags & _FUTURE_FLAGS)


FLAGS = ("iter", "aiter", "next", "anext", "events", "aevents", "stream", "astream")


class Layers:
    """Which layers of one SDK's `_streaming` the hooks take the place of (`FLAGS`), decided by
    `check()` at install."""

    __slots__ = (*FLAGS, "_iter_bytes", "_aiter_bytes", "_body", "_abody", "_classes")

    def __init__(self) -> None:
        self.iter = self.aiter = self.next = self.anext = self.events = self.aevents = False
        self.stream = self.astream = False
        self._iter_bytes: Any = None
        self._aiter_bytes: Any = None
        # How the known `_iter_events` reads the body: None = `response.iter_bytes()`, else the
        # SDK's own reader, called with (response, client).
        self._body: Any = None
        self._abody: Any = None
        self._classes: tuple[Any, Any] = (None, None)  # the SDK's Stream and AsyncStream

    def check(self, _streaming: Any, sdk_observer_off: bool = True) -> None:
        """`_streaming`: the SDK's module. `sdk_observer_off`: the SDK's stream observer is None on
        every instrumented stream (its tracer is off inside instrumented calls), so the layers that
        only tell it may be skipped."""

        def known(cls: str, name: str, forms: dict[tuple[str, str], str] = KNOWN) -> bool:
            return same_code(getattr(_streaming, cls).__dict__.get(name), forms[cls, name])

        def telling_nobody(cls: str, name: str) -> bool:  # re-yields, telling nobody or an observer that is off
            return known(cls, name, PLAIN) or (sdk_observer_off and known(cls, name))

        self.iter, self.aiter = telling_nobody("Stream", "__iter__"), telling_nobody("AsyncStream", "__aiter__")
        self.next, self.anext = telling_nobody("Stream", "__next__"), telling_nobody("AsyncStream", "__anext__")
        # `decoded` reads `ServerSentEvent._event`, the field under the public `event` property.
        fields = getattr(_streaming.ServerSentEvent(event="ping"), "_event", None) == "ping"
        decoder = _streaming.SSEDecoder
        self.events, self._body = _body_reader(_streaming, "Stream")
        self.aevents, self._abody = _body_reader(_streaming, "AsyncStream")
        self.events = fields and self.events and known("SSEDecoder", "iter_bytes")
        self.aevents = fields and self.aevents and known("SSEDecoder", "aiter_bytes")
        # `streamed.py` also reads `ServerSentEvent._data`, under the public `data` property.
        parsed = sdk_observer_off and getattr(_streaming.ServerSentEvent(data="{}"), "_data", None) == "{}" and known(
            "ServerSentEvent", "json", STREAM)
        self.stream = parsed and self.events and known("Stream", "__stream__", STREAM)
        self.astream = parsed and self.aevents and known("AsyncStream", "__stream__", STREAM)
        self._iter_bytes, self._aiter_bytes = decoder.iter_bytes, decoder.aiter_bytes
        self._classes = (_streaming.Stream, _streaming.AsyncStream)

    def parsed(self, stream: Any, rec: Any, is_async: bool) -> Any:
        """The stream's parsed events, as its known `__stream__` yields them (`streamed.py`); None
        to run the SDK's (a subclass with its own `_iter_events`, a decoder of another kind, the
        SDK's stream observer set)."""
        if not (self.astream if is_async else self.stream):
            return None
        try:
            base = self._classes[is_async]
            own = next(c for c in type(stream).__mro__ if "_iter_events" in c.__dict__)
            decoder = type(stream._decoder)
            if own is not base or stream._observer is not None:
                return None
            if is_async:
                if decoder.aiter_bytes is self._aiter_bytes:
                    return astreamed(stream, rec, self._abody)
            elif decoder.iter_bytes is self._iter_bytes:
                return streamed(stream, rec, self._body)
        except Exception:
            internal_error("adapter.layers")
        return None

    def reset(self) -> None:
        """Nothing taken over (after uninstall, or an install that failed)."""
        self.__init__()  # type: ignore[misc]


def _body_reader(_streaming: Any, cls: str) -> tuple[bool, Any]:
    """Whether `cls._iter_events` is one of the known forms, and the SDK's body reader it calls
    (None: the response's own `iter_bytes`/`aiter_bytes`)."""
    method = getattr(_streaming, cls).__dict__.get("_iter_events")
    if same_code(method, KNOWN[cls, "_iter_events"]):
        return True, None
    through, name = READ_THROUGH_SDK[cls, "_iter_events"]
    reader = getattr(_streaming, name, None)
    if same_code(method, through) and callable(reader):
        return True, reader
    return False, None


def items(layers: Layers, stream: Any, is_async: bool) -> Any:
    """The stream's parsed events, as its known `__iter__` re-yields them; None to wrap it."""
    if layers.aiter if is_async else layers.iter:
        try:
            return stream._iterator
        except Exception:
            internal_error("adapter.layers")
    return None


def server_sent(layers: Layers, stream: Any, rec: Any, is_async: bool, ping: str | None) -> Any:
    """The stream's server-sent events, as its known `_iter_events` re-yields them, pings counted
    as they are decoded; None to wrap `_iter_events` (an SDK that differs, or a decoder of another
    kind: Bedrock's, or a subclass with its own `iter_bytes`). `ping`: the event name of the
    provider's keep-alive (None: it sends none; nothing is counted)."""
    if ping is None:
        return None
    if layers.aevents if is_async else layers.events:
        try:
            decoder = stream._decoder
            if is_async:
                if type(decoder).aiter_bytes is layers._aiter_bytes:
                    reader = layers._abody
                    body = stream.response.aiter_bytes() if reader is None else reader(stream.response, stream._client)
                    return adecoded(decoder, body, rec, ping)
            elif type(decoder).iter_bytes is layers._iter_bytes:
                reader = layers._body
                body = stream.response.iter_bytes() if reader is None else reader(stream.response, stream._client)
                return decoded(decoder, body, rec, ping)
        except Exception:
            internal_error("adapter.layers")
    return None


async def adecoded(decoder: Any, iterator: AsyncIterator[bytes], rec: Any, ping: str) -> AsyncIterator[Any]:
    """`SSEDecoder.aiter_bytes` as `KNOWN` has it, counting pings as it decodes them; `decoded`,
    for `iter_bytes`, is this code not awaiting (`unasync`)."""
    async for chunk in decoder._aiter_chunks(iterator):
        for raw_line in chunk.splitlines():
            line = raw_line.decode("utf-8")
            sse = decoder.decode(line)
            if sse:
                if sse._event == ping:
                    rec.pinged()
                yield sse


decoded: Callable[[Any, Iterator[bytes], Any, str], Iterator[Any]] = sync_twin(adecoded, {"adecoded": "decoded"})
