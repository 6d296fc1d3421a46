"""Where the sync watchdog thinks a stream's reader is: waiting on the provider, or held up in this
process. Real threads, real sockets, the kernel's own view of each thread (`/proc`): a budget
must never fire on a reader that has its data and only waits to run."""

from __future__ import annotations

import os
import queue
import select
import socket
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from streamscope.adapters.stainless.reading import held_in_process, reader_waits


class _Blocked:
    """A thread blocked in `block()` until `release()`."""

    def __init__(self, block: Callable[[], Any], release: Callable[[], Any]) -> None:
        self.release = release
        self.thread = threading.Thread(target=block, daemon=True)
        self.thread.start()
        time.sleep(0.2)  # well inside the blocking call, on a loaded machine too

    def stop(self) -> None:
        self.release()
        self.thread.join(5)
        assert not self.thread.is_alive()


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    a.settimeout(30)  # as httpcore reads: a timeout, so the wait is a poll on the socket
    yield a, b
    a.close()
    b.close()


def test_a_thread_waiting_in_a_socket_read_is_not_held_up(pair) -> None:
    a, b = pair
    blocked = _Blocked(lambda: a.recv(10), lambda: b.send(b"x"))
    try:
        assert blocked.thread.ident is not None and not held_in_process(blocked.thread.ident)
    finally:
        blocked.stop()


def test_a_thread_waiting_on_a_lock_is_held_up() -> None:
    lock = threading.Lock()
    lock.acquire()
    blocked = _Blocked(lambda: (lock.acquire(), lock.release()), lock.release)
    try:
        assert blocked.thread.ident is not None and held_in_process(blocked.thread.ident)
    finally:
        blocked.stop()


def test_a_thread_that_wants_the_gil_is_held_up() -> None:
    """A busy Python thread, looked at while this one holds the GIL: it waits for it (a futex)
    or is runnable; either way it is not waiting on the network."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    busy = _Blocked(spin, stop.set)
    try:
        assert busy.thread.ident is not None and held_in_process(busy.thread.ident)
    finally:
        busy.stop()


def test_in_a_forked_worker_the_thread_that_forked_is_seen_too() -> None:
    """A preforking server's worker reads its streams on the thread that forked it, whose kernel
    id `threading` (3.11) still gives as the parent's: held up on a lock, it is seen held up."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker: its main thread waits on a lock, another looks at it
        try:
            lock = threading.Lock()
            lock.acquire()
            main, seen = threading.get_ident(), []
            looker = threading.Thread(target=lambda: (time.sleep(0.2), seen.append(held_in_process(main)),
                                                      lock.release()))
            looker.start()
            lock.acquire()
            looker.join()
            os.write(write_end, b"held" if seen == [True] else b"not seen")
        finally:
            os._exit(0)
    os.close(write_end)
    try:
        assert select.select([read_end], [], [], 60)[0], "the worker did not answer"
        assert os.read(read_end, 16) == b"held"
    finally:
        os.close(read_end)
        os.waitpid(pid, 0)


def test_an_unknown_thread_leaves_the_frames_answer() -> None:
    assert held_in_process(-1) is False


class _Stream:
    """What `reader_waits` reads of a stream: the iterator its reader runs."""

    def __init__(self, source: socket.SocketIO) -> None:
        self._iterator = self._read(source)

    @staticmethod
    def _read(source: socket.SocketIO) -> Iterator[bytes]:
        buf = bytearray(10)
        while n := source.readinto(buf):
            yield bytes(buf[:n])


def _reading(stream: _Stream) -> _Blocked:
    return _Blocked(lambda: next(stream._iterator, None), lambda: None)


def test_a_reader_in_a_socket_read_waits(pair) -> None:
    """The stall: the reader's innermost frame is the socket read and the kernel has it in poll."""
    a, b = pair
    stream = _Stream(socket.SocketIO(a, "rb"))  # type: ignore[arg-type]
    reader = _reading(stream)
    try:
        assert reader_waits(weakref.ref(stream))
    finally:
        b.send(b"x")
        reader.stop()


def test_a_reader_in_a_socket_frame_that_waits_to_run_is_not_waiting() -> None:
    """What a reader whose `recv` returned looks like while it waits for the GIL: the socket
    read is still its innermost frame, but the kernel has it on a futex, not on the socket."""
    gil = queue.SimpleQueue()

    class Returned:  # a socket whose recv has its data and only waits to get back into Python
        recv_into = gil.get  # C code that blocks on a futex, called from socket.SocketIO.readinto

    stream = _Stream(socket.SocketIO(Returned(), "rb"))  # type: ignore[arg-type]
    reader = _reading(stream)
    try:
        frames = sys._current_frames()
        assert reader.thread.ident is not None
        assert frames[reader.thread.ident].f_globals["__name__"] == "socket"  # the frame alone says: waiting
        assert not reader_waits(weakref.ref(stream))
    finally:
        gil.put(0)  # the read ends: nothing more
        reader.stop()
