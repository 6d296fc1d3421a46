"""The budgets' watch on a stream's body, from its headers on: how the SDK's read is told.

Sync: the one watchdog thread, given how to wake a blocked read (the socket shut down: closing
the response from another thread does not wake it) and whether the reader waits on the socket;
the caller's own read timeout put back for the body. Async: the call's timer, given how to see
bytes already waiting in the socket. What a budget decides is `budgets.enforcement`'s.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from streamscope.budgets.async_watch import AsyncWatch
from streamscope.budgets.enforcement import socket_readable as readable
from streamscope.budgets.sync_watch import SyncWatch, watchdog
from streamscope.core.calls import Call
from streamscope.core.guard import internal_error
from streamscope.core.recorder import StreamRecorder

from .reading import waiting_on


def watch_headers(rec: StreamRecorder) -> tuple[AsyncWatch | None, asyncio.Task[Any] | None]:
    """Async, before the request is sent: waiting for the headers is waiting on the stream, so the
    call's timer starts now (where budgets are enforced and a task runs the call); the watch and
    the task (None, None: not watched)."""
    task = asyncio.current_task()
    if not rec.request.budgets.enforced or task is None:
        return None, task
    try:
        watch = AsyncWatch(rec, asyncio.get_running_loop(), task)
    except Exception:
        internal_error("adapter.watch")
        return None, task
    rec.watch = watch
    return watch, task


def watch_body(call: Call, response: Any, owner: Any, reader: Callable[[Any], Any] | None, is_async: bool) -> None:
    """The budgets' watch on a stream's body, from its headers on: sync, the watchdog, told how to
    wake a blocked read (the socket shut down) and whether the reader (`reader(owner)`) waits on
    it; async, the call's timer, told how to see bytes already waiting in the socket."""
    rec = call.recorder
    if rec.request.budgets.enforced and not is_async:
        restore_read_timeout(call, response)
        sock = socket_of(response)
        watch = SyncWatch(rec, functools.partial(shutdown, sock), functools.partial(readable, sock),
                          waiting_on(owner, response, reader))
        rec.watch = watch
        watchdog().watch(watch)
    elif isinstance(rec.watch, AsyncWatch):
        sock = socket_of(response)
        if sock is not None:  # (without one, the watch keeps the slower look a late loop gets)
            rec.watch.readable = functools.partial(readable, sock)


def restore_read_timeout(call: Call, response: Any) -> None:
    """Body reads get the caller's own read timeout back (not the cap put on the wait for the
    headers): httpcore reads it from the request when the body is first read, after this."""
    restore = call.restore_read
    if restore is not None:
        timeouts = response.request.extensions.get("timeout")
        if isinstance(timeouts, dict):
            timeouts["read"] = restore[0]
        call.restore_read = None


def socket_of(response: Any) -> Any:
    stream = response.extensions.get("network_stream")
    return stream.get_extra_info("socket") if stream is not None else None


def shutdown(sock: Any) -> None:
    """How the watchdog wakes a read blocked on the stream: closing the response from another
    thread does not wake it; shutting the socket down does (the read raises at once)."""
    import socket

    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
