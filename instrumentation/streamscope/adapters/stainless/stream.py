"""The stream hooks: every event on its way to the caller, the clocks, and the budgets' reads.

Per event, on its way to the caller: a clock read (`t`, when it was delivered) and the
recorder's update; when the caller asks for the next one, a clock read that moves the
provider's clock past the caller's own time away (`StreamRecorder.asked`). Under budgets the
watch also learns when the caller waits (`reader`) and when it does not. Every way out of a
stream ends its record through `ending.end` (or `end_with`, for an exception), once.

Where they sit: `Stream.__iter__` / `__next__` (and `AsyncStream.__aiter__` / `__anext__`):
every parsed event passes once, on every path (the SDKs' helpers iterate the raw stream).
`__next__` and `__anext__` run once per event, so they are plain functions, not wrapt's.
`Stream._iter_events`: every server-sent event, keep-alives included (the SDK drops those above
it); where the SDK's is not the form `layers` knows, a sync stream's keep-alives are counted in the
response's bytes instead (`pings.py`), an async one's over it. `Stream.close` / `AsyncStream.close`:
the caller closed it (also via `with` and helpers).
`Stream.__stream__` (where `layers` knows it): the SDK's parser, run as `streamed.py` in its place.
Where the SDK's own layers are the pass-throughs `layers` writes out, these take their place.
A `for` loop over a `Stream` reads through `_reader.c` where it was built (`compiled`): `read`,
step for step, in C; `read` itself where it was not, and for what the compiled one does not take.
"""

from __future__ import annotations

import collections.abc
import functools
import time
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType
from typing import Any

from streamscope.budgets.async_watch import AsyncWatch, cancelled_by_budget, current_task
from streamscope.budgets.enforcement import timeout_error
from streamscope.budgets.sync_watch import SyncWatch
from streamscope.core.calls import ATTR, Call, end
from streamscope.core.guard import internal_error
from streamscope.core.recorder import StreamRecorder

from .body import adopt
from .ending import end_with
from .layers import Layers, items, server_sent
from .pings import count_in_body
from .spec import Observe, Spec
from .unasync import sync_twin

_reader: ModuleType | None
try:
    from . import _reader as _built  # built from _reader.c where a C compiler was

    collections.abc.Generator.register(_built.Reader)  # what `iter(stream)` is, with or without it
    _reader = _built
except ImportError:
    _reader = None

_now = time.monotonic


class _Fired(Exception):
    """A budget fired while the caller was away; raised at its next read."""


def _budget_fired(exc: BaseException, rec: StreamRecorder, task: Any) -> bool:
    """On a thread: the read failed because a budget fired (the watchdog interrupted it, or `_Fired`)."""
    return rec.fired is not None and not rec.finished and isinstance(exc, Exception)


def _abudget_fired(exc: BaseException, rec: StreamRecorder, task: Any) -> bool:
    """On an event loop: the read failed because a budget fired (its timer cancelled `task`, or `_Fired`)."""
    return isinstance(exc, _Fired) or cancelled_by_budget(exc, rec, task)


TWINS = {"aread": "read", "aiter": "iter", "aclose": "close", "aiter_events": "iter_events",
         "anext_hook": "next_hook", "anext": "next", "_acounted": "_counted", "_aclose_quietly": "_close_quietly",
         "_abudget_fired": "_budget_fired", "_afailed": "_failed"}
"""Each hook written once, for `AsyncStream`, and the name of its twin for `Stream` (`unasync`)."""
SYNC_READ = {
    # What a read on a thread does differently: the watchdog needs only to know that its reader
    # waits (True) or not (False); a thread's watch has no loop.
    "watch.reader = task = current_task(loop)  # type: ignore[arg-type]": "watch.reader = True",
    "watch.reader = None": "watch.reader = False",
    "loop = None if watch is None else watch.loop": "loop = None",
}
"""Phrases of `aread` and what `read` says instead (`unasync.sync_source`)."""


class StreamHooks:
    """The hooks on one SDK's `Stream` and `AsyncStream`, bound to its spec and layers."""

    def __init__(self, spec: Spec, layers: Layers) -> None:
        self.spec = spec
        self.layers = layers
        self.observers = (spec.observe, spec.observe_capturing or spec.observe)
        """The per-event function, by whether the stream captures content (`rec.content`)."""
        self.delta_classes = tuple(spec.deltas) if spec.text_length is None else ()
        """`Spec.deltas` for the compiled reader (which has no `text_length`): empty, none."""
        self.unobserved: Callable[[Any], None] | None = None
        """While installed: told of a stream that reached these hooks without its call."""

    # -- how a stream ends: `ending.end`, the one way out --------------------------------------

    finish = staticmethod(end)

    def _paths(self, rec: StreamRecorder) -> tuple[Observe, frozenset[type], Callable[[Any], int] | None]:
        """(the full path, the fast path's delta classes, its test): no fast path while capturing."""
        observe = self.observers[rec.content is not None]
        if observe is not self.spec.observe:
            return observe, frozenset(), None
        return observe, self.spec.deltas, self.spec.text_length

    # -- the readers ---------------------------------------------------------------------------

    async def aread(self, events: AsyncIterator[Any], call: Call, stream: Any) -> AsyncIterator[Any]:
        """Every event on its way to the caller; under budgets (`watch`), a read the budgets
        interrupt becomes `StreamTimeout` (on an event loop the stream's timer cancels the reading
        task, looked up at every read: a loop left with `break` may be resumed by another task, or
        the stream read on by a new loop, and the budgets follow the stream; on a thread the
        watchdog interrupts the read). Holding `stream` keeps a temporary stream (`for e in
        client.messages.create(...)`) from being collected before its end is recorded. `read`, for
        `Stream`, is this code not awaiting, its reader its own thread (`unasync`, `SYNC_READ`).

        A generator the caller left (`break`) and drops later changes nothing: the stream may be
        read on by another loop meanwhile. Once text flows, a plain text delta takes the fast
        path (`Spec.deltas`, or `Spec.text_length`): `StreamRecorder.delta`'s steady state,
        inline (a call would be a fifth of the per-event cost); `observe` takes everything else.
        For the same reason the clock rule after each event is `StreamRecorder.asked`, inline."""
        rec = call.recorder
        watch = rec.watch if isinstance(rec.watch, AsyncWatch) else None
        observe, deltas, text_length = self._paths(rec)
        loop = None if watch is None else watch.loop
        task = None
        try:
            rec.asked(_now())
            if watch is not None:
                watch.reader = task = current_task(loop)  # type: ignore[arg-type]
                if watch.attention and watch.attend():
                    raise _Fired
            async for event in events:
                t = _now()
                if watch is not None:
                    watch.reader = None
                try:
                    if (type(event) in deltas and (d := event.delta.__dict__)["type"] == "text_delta"
                            and rec.first_text is not None):
                        n = len(d["text"])
                    elif text_length is None or rec.first_text is None or (n := text_length(event)) < 0:
                        observe(rec, event, t)
                        n = -1
                    if n >= 0:  # `StreamRecorder.delta`'s steady state, inline
                        rec.content_events += 1
                        gap = t - rec.origin
                        if gap > rec.max_gap:
                            rec.max_gap = gap
                        if (gaps := rec.gaps) is not None:
                            gaps.append(gap)
                        rec.last_content = rec.origin = t
                        rec.text_chars += n
                except Exception:  # the fast path's look-ups failed, before any write: an event of another shape
                    observe(rec, event, t)
                rec.held = t
                yield event
                rec.origin += _now() - rec.held  # `StreamRecorder.asked`, inline
                if watch is not None:
                    watch.reader = task = current_task(loop)  # type: ignore[arg-type]
                    if watch.attention and watch.attend():
                        raise _Fired
        except GeneratorExit:
            raise
        except BaseException as exc:
            instead = await _afailed(exc, rec, watch, task, stream, self.spec.ending)
            if instead is not None:
                raise instead from None
            raise
        end(rec, "done")

    read = sync_twin(aread, TWINS, SYNC_READ)

    def compiled(self, events: Iterator[Any], call: Call, stream: Any) -> Iterator[Any] | None:
        """`read` in compiled code (`_reader.c`: the same steps, a few hundred instructions per event
        where `read`'s bytecode costs about 1,700), for a stream whose text arrives as `Spec.deltas`
        events and whose content is not captured; None (`read` takes it) where it does not apply or
        the module was not built (a machine without a C compiler: the same records, slower)."""
        rec = call.recorder
        if _reader is None or rec.content is not None or not self.delta_classes:
            return None
        watch = rec.watch if isinstance(rec.watch, SyncWatch) else None
        try:
            fail = functools.partial(_failed, rec=rec, watch=watch, task=None, stream=stream,
                                     ending=self.spec.ending)
            compiled: Iterator[Any] = _reader.Reader(iter(events), rec, self.delta_classes, self.spec.observe, watch,
                                                     _Fired, fail, functools.partial(end, rec, "done"), stream)
            return compiled
        except Exception:
            internal_error("adapter.compiled")
            return None

    # -- the wrapt wrappers ----------------------------------------------------------------------

    def aiter(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = instance.__dict__.get(ATTR)
        if call is None:
            return wrapped(*args, **kwargs)
        events = items(self.layers, instance, True) or wrapped(*args, **kwargs)
        return self.aread(events, call, instance)

    iter = sync_twin(aiter, TWINS, {
        "instance, True)": "instance, False)",
        "return self.aread(": "return self.compiled(events, call, instance) or self.aread("})

    def init(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """`Stream.__init__` / `AsyncStream.__init__`: a stream the caller parses from a raw response
        (`.parse()`) takes over the call its observed body holds (`body.adopt`)."""
        wrapped(*args, **kwargs)
        try:
            call = adopt(instance)
            if call is not None:
                instance.__dict__[ATTR] = call
        except Exception:
            internal_error("adapter.adopt")

    async def aclose(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = instance.__dict__.get(ATTR)
        if call is not None:
            end(call.recorder, "closed")
        return await wrapped(*args, **kwargs)

    close = sync_twin(aclose, TWINS)

    def parse(self, is_async: bool, wrapped: Any, instance: Any, args: tuple[Any, ...],
              kwargs: dict[str, Any]) -> Any:
        """`Stream.__stream__` / `AsyncStream.__stream__` (`is_async`, bound at install), where
        `layers` knows it: `streamed.py` in its place."""
        call = instance.__dict__.get(ATTR)
        found = None if call is None else self.layers.parsed(instance, call.recorder, is_async)
        return wrapped(*args, **kwargs) if found is None else found

    def aiter_events(self, wrapped: Any, instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = instance.__dict__.get(ATTR)
        if call is None:
            self._without_call(instance)
            return wrapped(*args, **kwargs)
        ping = self.spec.ping
        found = server_sent(self.layers, instance, call.recorder, True, ping)
        if found is not None:
            return found
        if ping is None or count_in_body(instance, call.recorder, ping, True):
            return wrapped(*args, **kwargs)
        return _acounted(wrapped(*args, **kwargs), call.recorder, ping)

    iter_events = sync_twin(aiter_events, TWINS, {"call.recorder, True, ping)": "call.recorder, False, ping)",
                                                  "call.recorder, ping, True):": "call.recorder, ping, False):"})

    def _without_call(self, stream: Any) -> None:
        """`_iter_events` starts once per stream: the place to notice one streamscope never saw sent."""
        unobserved = self.unobserved
        if unobserved is not None:
            try:
                unobserved(stream)
            except Exception:
                internal_error("adapter.unobserved")

    # -- `next()` / `anext()`: plain functions in the class ------------------------------------

    def anext_hook(self, original: Any) -> Any:
        """`AsyncStream.__anext__` for direct `anext()` calls: a plain function, not a wrapt wrapper
        (which would cost a bound wrapper and an argument tuple per event). `next_hook`, for
        `Stream.__next__`, is this code not awaiting, its reader its own thread (`unasync`)."""
        hooks, layers = self, self.layers

        @functools.wraps(original)
        async def __anext__(stream: Any) -> Any:
            call = stream.__dict__.get(ATTR)
            if call is None:
                return await original(stream)
            rec = call.recorder
            watch = rec.watch if isinstance(rec.watch, AsyncWatch) else None
            task = current_task(watch.loop) if watch is not None else None
            rec.asked(_now())
            try:
                if watch is not None:
                    watch.reader = task
                    if watch.attention and watch.attend():
                        raise _Fired
                event = await (stream._iterator.__anext__() if layers.anext else original(stream))
            except StopAsyncIteration:
                end(rec, "done")
                raise
            except BaseException as exc:
                if watch is not None and _abudget_fired(exc, rec, task):
                    await _aclose_quietly(stream)
                    raise timeout_error(rec) from None
                end_with(rec, exc, hooks.spec.ending)
                raise
            finally:
                if watch is not None:
                    watch.reader = None
            hooks.observe_one(rec, event)
            return event

        return __anext__

    next_hook = sync_twin(anext_hook, TWINS, {
        "task = current_task(watch.loop) if watch is not None else None": "task = None",
        "watch.reader = task\n": "watch.reader = True\n", "watch.reader = None": "watch.reader = False"})

    def observe_one(self, rec: StreamRecorder, event: Any) -> None:
        """One event read with `next()`: the full dispatch (no fast path)."""
        t = _now()
        self.observers[rec.content is not None](rec, event, t)
        rec.held = t


async def _afailed(exc: BaseException, rec: StreamRecorder, watch: Any, task: Any, stream: Any,
                   ending: Any) -> Exception | None:
    """A read that failed with `exc` (`_Fired`: a budget fired while the caller was away): the
    budgets' timeout to raise in its place, the stream closed, or None, `exc` to be raised as it is;
    either way the record is ended. `_failed`, for `Stream` (and the compiled reader), is this code
    not awaiting."""
    if watch is not None:
        watch.reader = None
        if _abudget_fired(exc, rec, task):
            await _aclose_quietly(stream)
            return timeout_error(rec)
    end_with(rec, exc, ending)
    return None


async def _aclose_quietly(stream: Any) -> None:
    try:
        await stream.response.aclose()
    except Exception:
        internal_error("adapter.close")


async def _acounted(events: AsyncIterator[Any], rec: StreamRecorder, ping: str) -> AsyncIterator[Any]:
    """Keep-alives counted over `_iter_events`, where the SDK's is not the one `layers` knows."""
    async for sse in events:
        if sse.event == ping:
            rec.pinged()
        yield sse


_close_quietly: Callable[[Any], None] = sync_twin(_aclose_quietly, TWINS)
_failed: Callable[..., Exception | None] = sync_twin(_afailed, TWINS, {"watch.reader = None": "watch.reader = False"})
_counted: Callable[[Iterator[Any], StreamRecorder, str], Iterator[Any]] = sync_twin(_acounted, TWINS)
