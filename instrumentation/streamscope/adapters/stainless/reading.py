"""Whether the thread reading a sync stream waits on its socket, or is busy with bytes it holds.

The watchdog fires first-token or idle only on a reader that waits for the provider. "Nothing
readable on the socket" is not enough: the transport may already hold the rest of the answer
(a burst arrives in one `recv`) while the reading thread is held up in our own process (a
garbage collection, another thread holding the GIL, a preempted thread on a loaded machine).
Shutting the socket down then would end a healthy stream, and a record of a stall the
provider never had. So the watchdog also asks where the reader is: inside the transport's
socket read (the innermost Python frame of its thread is httpcore's backend, `ssl` or
`socket`), or anywhere else (parsing, building events, a collection: it holds data and will
make progress).

The frame alone cannot tell a read that is still waiting from one whose `recv` has returned
with the data while its thread waits to run Python again (for the GIL, held by another thread
for up to its 5 ms switch interval, or for a CPU on a loaded machine): both show the socket
read as the innermost frame. Where Linux says what the thread is doing (`/proc`), a thread
that is runnable, or waits on a futex (the GIL, a lock) rather than in `poll`/`recv`, is held
up in this process, not waiting for the provider.

It runs only when a budget looks expired (never per event): `sys._current_frames()`, a walk
of each thread's stack to the one running the stream's iterator, and two small reads of
`/proc` for that thread.
"""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

NETWORK_MODULES = ("ssl", "socket", "selectors")
NETWORK_PREFIXES = ("httpcore._backends.", "httpcore2._backends.")
"""Where a thread blocked on the network has its innermost Python frame, for the transports
the Stainless SDKs use (httpx and httpx2 over httpcore), plain or TLS."""
MAX_DEPTH = 200


def waiting_on(owner: Any, response: Any,
               reader: Callable[[Any], Any] | None = None) -> Callable[[], bool] | None:
    """For a sync stream (or an observed raw body, `owner`): a check of whether its reader waits on
    the network. `reader(owner)` is the generator that reads it (default: the stream's iterator).
    None where the transport is not httpcore's: it cannot tell (the watchdog then fires on an
    unreadable socket alone)."""
    network = response.extensions.get("network_stream")
    module = type(network).__module__ if network is not None else ""
    if not module.startswith(NETWORK_PREFIXES) or not hasattr(sys, "_current_frames"):
        return None
    ref = weakref.ref(owner)
    return lambda: reader_waits(ref, reader or _iterator)


def _iterator(stream: Any) -> Any:
    return stream.__dict__.get("_iterator")


def reader_waits(ref: weakref.ReferenceType[Any], reader: Callable[[Any], Any] = _iterator) -> bool:
    """Whether the thread running the reader's generator is inside a socket read. False when no
    thread runs it (the reader is in the SDK's layers above it, or in ours: not waiting)."""
    owner = ref()
    iterator = None if owner is None else reader(owner)
    frame = getattr(iterator, "gi_frame", None)
    if frame is None or not getattr(iterator, "gi_running", False):
        return False
    for ident, top in sys._current_frames().items():
        if _runs(top, frame):
            return on_network(top) and not held_in_process(ident)
    return False


def _runs(top: FrameType, frame: FrameType) -> bool:
    f: FrameType | None = top
    for _ in range(MAX_DEPTH):
        if f is None:
            return False
        if f is frame:
            return True
        f = f.f_back
    return False


def held_in_process(ident: int) -> bool:
    """Whether the kernel says the thread `ident` is not waiting on I/O: runnable (`R`), or
    asleep on a futex (the GIL after its `recv` returned, or a lock). False where it cannot
    tell (no `/proc`, a thread `threading` does not know, a kernel that hides `wchan`): the
    frame's answer stands. In a forked child the thread that forked is the main thread, whose
    kernel id is the process's own."""
    thread = next((t for t in threading.enumerate() if t.ident == ident), None)
    if thread is None:
        return False
    task = f"/proc/self/task/{thread.native_id}/"
    if thread is threading.main_thread() and not os.path.exists(task):
        task = f"/proc/self/task/{os.getpid()}/"  # a forked child's: 3.11 keeps the parent's id for it
    try:
        with open(task + "stat", "rb") as f:
            stat = f.read()
        if stat[stat.rindex(b")") + 2:][:1] == b"R":
            return True
        with open(task + "wchan", "rb") as f:
            return b"futex" in f.read()
    except (OSError, ValueError):
        return False


def on_network(frame: FrameType) -> bool:
    """Whether a thread's innermost frame is a socket read (the GIL released in `recv`)."""
    module = frame.f_globals.get("__name__", "")
    return module in NETWORK_MODULES or module.startswith(NETWORK_PREFIXES)

