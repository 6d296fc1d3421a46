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
