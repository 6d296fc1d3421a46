"""The provider's side of a relayed request: its events, through the retry line, sync SDK or async.

`open_stream()` may be any call streamscope instruments: an async one (a coroutine, an async
`stream()` manager) or a sync one (a raw `Stream`, a sync `stream()` manager). Which it is shows
only once it is called, and a sync call sends its request when called, so it is called on a worker
thread, unless the SDK clients it names (the variables it closes over and the globals it reads:
`lambda: client.messages.stream(...)`) are all async ones, whose calls send nothing until awaited
or entered: it is called on the event loop then, and a burst of requests starts no thread per
request (each thread holds tens of KiB). Within a request, each retry is opened where its kind
needs. What it
opened is checked before any event is read (`mistakes.not_a_stream`, `observed.check_opened`).
A sync stream is read one event at a time on a worker thread, so the event loop never blocks on
the provider.

The relay's threads are its own (anyio's worker threads under a limiter of `SYNC_THREADS` per
event loop), not the loop's default executor: a sync read holds its thread for as long as the
provider is silent, and the default executor has a handful of threads (cores + 4) that the rest of
the application (`asyncio.to_thread`, `run_in_executor`, DNS look-ups) shares. Past the limit, a
sync stream's next read waits for a thread; it is not in the socket then, so no budget counts it.

Closing a sync stream while its worker waits on a silent socket: closing the response from another
thread does not wake the read, and would race the reader inside the HTTP client. The call is
ended as cancelled first (the caller left: that is what happened), then the socket is shut down,
which wakes the read at once; the reading thread then closes the response itself.
"""

from __future__ import annotations

import asyncio
import inspect
import socket
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from streamscope.adapters import providers
from streamscope.core.calls import call_of
from streamscope.core.guard import internal_error
from streamscope.helpers.retry import Backoff, astream_with_retry

from .mistakes import NotAStream, not_a_stream, report
from .observed import check_opened

_END = object()
SYNC_THREADS = 256
"""How many sync reads (and opens) the relays of one event loop run at once, each on a thread."""
T = TypeVar("T")
_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = weakref.WeakKeyDictionary()


async def in_thread(func: Callable[..., T], *args: Any) -> T:
    """`func(*args)` on one of the relay's threads. A cancel does not wait for it (as
    `asyncio.to_thread`): a read pending on a silent socket is woken by `Threaded.close`."""
    loop = asyncio.get_running_loop()
    limiter = _limiters.get(loop)
    if limiter is None:
        limiter = _limiters[loop] = anyio.CapacityLimiter(SYNC_THREADS)
    return await anyio.to_thread.run_sync(func, *args, abandon_on_cancel=True, limiter=limiter)


def _entered_sync(open_stream: Callable[[], Any]) -> Any:
    """Call `open_stream` (on a worker thread); a sync `stream()` manager is entered there too."""
    made = open_stream()
    if hasattr(made, "__enter__") and not hasattr(made, "__iter__") and not hasattr(made, "__aenter__"):
        made = made.__enter__()
    return made


def on_async_clients(open_stream: Callable[[], Any]) -> bool:
    """Whether every SDK client `open_stream` names (its closure's variables, the globals its code
    reads) is an async one, and it names one: calling it then sends nothing (see the module)."""
    try:
        code = getattr(open_stream, "__code__", None)
        if code is None:
            return False
        named = []
        for cell in getattr(open_stream, "__closure__", None) or ():
            try:
                named.append(cell.cell_contents)
            except ValueError:  # a variable not yet assigned
                pass
        found = getattr(open_stream, "__globals__", {})
        named += [found[name] for name in code.co_names if name in found]
        kinds = set()
        for value in named:
            helpers = providers.helpers_for(value)
            if helpers is not None:
                kinds.add(helpers.sends_when_called(value))
        return kinds == {False}
    except Exception:
        internal_error("serve.open")
        return False


class Threaded:
    """A sync stream read on worker threads, one event per hop; `close()` wakes a pending read."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self._raw_stream = getattr(stream, "_raw_stream", stream)
        """What `call_of` looks for: this is the call's stream, as the helpers find it."""
        self._events = iter(stream)
        self._busy = threading.Lock()
        self._closed = False

    def __aiter__(self) -> Threaded:
        return self

    def _next(self) -> Any:
        with self._busy:
            if self._closed:
                return _END
            return next(self._events, _END)

    async def __anext__(self) -> Any:
        event = await in_thread(self._next)
        if event is _END:
            raise StopAsyncIteration
        return event

    async def close(self) -> None:
        self._closed = True
        if self._busy.acquire(blocking=False):  # no read in flight: close it on a worker thread
            try:
                await in_thread(self.stream.close)
            finally:
                self._busy.release()
            return
        _cancel_and_wake(self._raw_stream)


def _cancel_and_wake(raw: Any) -> None:
    """A read is in flight on a worker thread: end the call as cancelled, then wake the read."""
    try:
        call = call_of(raw)
        if call is not None:
            call.end("cancelled")
        network = raw.response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    except Exception:
        internal_error("serve.close")


class Source:
    """The events of one relayed request: `open_stream` retried before the first content
    (`astream_with_retry`), each attempt one provider request."""

    def __init__(self, open_stream: Callable[[], Any], attempts: int, backoff: Backoff | None) -> None:
        self._open_stream = open_stream
        self._sync: bool | None = None
        self.line = astream_with_retry(self._open, attempts=attempts, backoff=backoff)

    async def _open(self) -> Any:
        if self._sync is False or (self._sync is None and on_async_clients(self._open_stream)):
            made = self._open_stream()
            if hasattr(made, "__enter__") and not hasattr(made, "__iter__") and not hasattr(made, "__aenter__"):
                made = await in_thread(made.__enter__)  # a sync manager sends when entered: on a thread
        else:
            made = await in_thread(_entered_sync, self._open_stream)
        if inspect.isawaitable(made):
            made = await made
        if hasattr(made, "__aenter__") and not hasattr(made, "__aiter__"):
            made = await made.__aenter__()
        mistake = not_a_stream(made)
        if mistake is not None:
            report(mistake)
            raise NotAStream(mistake)
        check_opened(made)
        if hasattr(made, "__aiter__"):
            self._sync = False
            return made
        self._sync = True
        return Threaded(made)
