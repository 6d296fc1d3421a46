"""The async budget watch's confirmation rule, on a real loop and a real socket pair.

A wait that looks expired while bytes wait in the stream's socket is the loop being late to
read them (a busy loop, hundreds of streams on one worker), not the provider silent: the watch
looks again instead of cancelling the reader. Once the socket is empty and a loop turn brings
nothing, the same wait fires. (End to end, with the SDKs, in tests/integration.)
"""

from __future__ import annotations

import asyncio
import functools
import socket
import time

from streamscope.budgets.async_watch import AsyncWatch
from streamscope.budgets.enforcement import socket_readable
from streamscope.core.record import CallBudgets, RequestInfo
from streamscope.core.recorder import StreamRecorder


def _expired_recorder(idle: float) -> StreamRecorder:
    """A stream with its first content 1 s ago, so the idle budget expired long since."""
    now = time.monotonic()
    rec = StreamRecorder(RequestInfo(provider="test", model="m", budgets=CallBudgets(idle=idle)), t0=now - 2.0)
    rec.first_content = rec.last_content = rec.origin = rec.held = now - 1.0
    return rec


async def _run(watch: AsyncWatch, reader: asyncio.Task[None], seconds: float) -> None:
    watch.rearm()
    await asyncio.wait([reader], timeout=seconds)


async def test_bytes_waiting_in_the_socket_keep_an_expired_wait_from_firing() -> None:
    mine, theirs = socket.socketpair()
    try:
        theirs.sendall(b"event: content_block_delta\n\n")
        rec = _expired_recorder(idle=0.05)
        reader = asyncio.get_running_loop().create_task(asyncio.sleep(30))
        watch = AsyncWatch(rec, asyncio.get_running_loop(), None)
        watch.reader = reader
        watch.readable = functools.partial(socket_readable, mine)
        await _run(watch, reader, 0.3)
        assert rec.fired is None and not reader.done()

        mine.recv(4096)  # read: the socket is empty, and nothing else arrives
        await _run(watch, reader, 1.0)
        assert rec.fired == "idle"
        assert reader.cancelled()
    finally:
        mine.close()
        theirs.close()


async def test_without_a_socket_an_expired_wait_fires_after_one_loop_turn() -> None:
    rec = _expired_recorder(idle=0.05)
    reader = asyncio.get_running_loop().create_task(asyncio.sleep(30))
    watch = AsyncWatch(rec, asyncio.get_running_loop(), reader)
    await _run(watch, reader, 1.0)
    assert rec.fired == "idle" and reader.cancelled()


async def test_after_the_final_event_nothing_fires() -> None:
    rec = _expired_recorder(idle=0.05)
    rec.completed_at(time.monotonic())
    reader = asyncio.get_running_loop().create_task(asyncio.sleep(30))
    try:
        watch = AsyncWatch(rec, asyncio.get_running_loop(), reader)
        await _run(watch, reader, 0.3)
        assert rec.fired is None and not reader.done()
    finally:
        reader.cancel()


def _numbered_from(low: int, sock: socket.socket) -> socket.socket:
    """`sock`'s descriptor copied to one numbered `low` or higher (the soft limit raised to allow it)."""
    import fcntl
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < low + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(low + 64, hard), hard))
    return socket.socket(fileno=fcntl.fcntl(sock.fileno(), fcntl.F_DUPFD, low))


def test_a_socket_numbered_past_1024_is_seen_readable() -> None:
    """A worker holding a thousand streams has sockets numbered past FD_SETSIZE, which
    `select.select` refuses: the check must still see the bytes waiting there."""
    mine, theirs = socket.socketpair()
    high = _numbered_from(1500, mine)
    try:
        assert high.fileno() >= 1500
        assert not socket_readable(high)
        theirs.sendall(b"data: {}\n\n")
        assert socket_readable(high)
    finally:
        for s in (high, mine, theirs):
            s.close()


async def _fired_after_a_busy_loop(readable: bool) -> float:
    """A healthy wait (idle 0.1 s) whose check comes due while the loop is busy for 1 s, with
    nothing arriving: how long after the loop is free again the budget fires."""
    mine, theirs = socket.socketpair()
    try:
        now = time.monotonic()
        rec = StreamRecorder(RequestInfo(provider="test", model="m", budgets=CallBudgets(idle=0.1)), t0=now - 1.0)
        rec.first_content = rec.last_content = rec.origin = rec.held = now
        reader = asyncio.get_running_loop().create_task(asyncio.sleep(30))
        watch = AsyncWatch(rec, asyncio.get_running_loop(), reader)
        if readable:
            watch.readable = functools.partial(socket_readable, mine)
        time.sleep(1.0)  # the loop is busy past the budget's due time
        free = time.monotonic()
        await asyncio.wait([reader], timeout=5.0)
        assert rec.fired == "idle" and reader.cancelled()
        assert rec.fired_at is not None
        return rec.fired_at - free
    finally:
        mine.close()
        theirs.close()


async def test_after_the_headers_a_late_check_fires_after_one_loop_turn() -> None:
    """With the socket to look at, a busy loop's late check does not wait as long again: what has
    not been read is in the socket, and what has been read is ahead of the check in the loop."""
    assert await _fired_after_a_busy_loop(readable=True) < 0.5


async def test_before_the_headers_a_late_check_gives_the_loop_as_long_again() -> None:
    assert await _fired_after_a_busy_loop(readable=False) >= 0.9
