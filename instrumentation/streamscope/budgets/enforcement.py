"""Budget enforcement: it reads the recorder's clocks and interrupts a read that waited too long.

Nothing here runs per event. The reader marks each read (the caller asked for an event and
waits for it) on the stream's watch, and moves the recorder's provider clock past the time the
caller spent away (`StreamRecorder.asked`); a budget's expiry is computed from that clock only
when a timer fires:

* first-token and idle measure the provider's silence *while the caller waits*: from the
  recorder's `origin`, which never counts the caller's own time between reads. A check that
  finds the caller away (holding an event, or not reading yet) parks the budget until the
  caller asks again. A check that finds an expired wait looks once more before it fires, so
  data already there (in the socket, in the reader's hands, or arriving in the same loop
  turn) is never a stall.
* the deadline is absolute: it fires mid-read, or at the caller's next read at the latest.
* after the provider's final event (`message_stop`, `response.completed`) none fires: the answer
  is whole, and what is left (the body's end) is no one's silence.

This module holds what both kinds of stream decide alike (`decide`, the expiries, the
exception a fired budget becomes); how each kind is watched is its own module: `async_watch`
(one loop timer per stream, which cancels the reading task) and `sync_watch` (one watchdog
thread for every sync stream, which shuts a blocked read's socket down).

Per process: a forked child (gunicorn, Celery prefork, multiprocessing) starts with no watchdog,
and every watch remembers the process that made it (`process_id`): one inherited from the
parent is inert in the child, so the child never acts on, or shuts down, a socket of the
parent's streams.
"""

from __future__ import annotations

import os
import select
from typing import Any, Literal

from streamscope.core.calls import end
from streamscope.core.errors import BudgetName, StreamTimeout
from streamscope.core.guard import internal_error
from streamscope.core.recorder import StreamRecorder

_pid = os.getpid()
"""This process's id, kept current by the at-fork hook below (no system call per stream)."""


def process_id() -> int:
    """This process's id, current after a fork (a watch made elsewhere is the parent's)."""
    return _pid


def _after_fork_in_child() -> None:
    global _pid
    _pid = os.getpid()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def socket_readable(sock: Any) -> bool:
    """Whether `sock` has data waiting (in the kernel, or decrypted in its TLS object): a wait
    that looks expired while this is true is the process being late to read, not a stall."""
    if sock is None:
        return False
    try:
        pending = getattr(sock, "pending", None)
        if pending is not None and pending() > 0:
            return True
        if _poll is None:  # Windows, which has no poll: its select takes a socket of any number
            ready, _, _ = select.select([sock], [], [], 0)
            return bool(ready)
        poller = _poll()
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))  # POLLHUP and POLLERR too: the read would not wait either
    except (OSError, ValueError, TypeError):
        return False


_poll = getattr(select, "poll", None)
"""`poll`, not `select`: select refuses descriptors from 1,024 (FD_SETSIZE) up, which a process
holding a thousand streams soon uses, and the check would then say "nothing waiting" always."""


def waiting_budget(rec: StreamRecorder) -> tuple[float, str] | None:
    """When first-token (before the first content) or idle (after it) expires if the caller
    keeps waiting: the provider clock's `origin` plus the budget. None if it is not set."""
    budgets = rec.request.budgets
    if rec.last_content is None:
        length, name = budgets.first_token, "first_token"
    else:
        length, name = budgets.idle, "idle"
    return None if length is None else (rec.origin + length, name)


def deadline_at(rec: StreamRecorder) -> float | None:
    deadline = rec.request.budgets.deadline
    return None if deadline is None else rec.t0 + deadline


def expiry(rec: StreamRecorder) -> tuple[float, str] | None:
    """(monotonic time, budget name) of the budget that expires first while the caller waits
    (before the headers, inside the SDK's call, it always does), or None if none is set."""
    found = waiting_budget(rec)
    at = deadline_at(rec)
    if at is not None and (found is None or at <= found[0]):
        return at, "deadline"
    return found


def expired(rec: StreamRecorder, now: float) -> bool:
    """Whether a budget expired by `now` (the call is still inside the SDK); fires it if so."""
    found = expiry(rec)
    if found is None or found[0] > now:
        return False
    return rec.fire(found[1], found[0])


def header_wait(rec: StreamRecorder, now: float) -> float | None:
    """Sync: the longest an attempt may wait for its headers before the first budget expires
    (at least 1 ms), or None if no budget is set."""
    found = expiry(rec)
    return None if found is None else max(found[0] - now, 0.001)


def retry_too_late(rec: StreamRecorder, delay: float, now: float) -> bool:
    """Whether the SDK's next attempt, `delay` s from `now`, would start after the first budget
    expires: then it is not made, and that budget fires."""
    found = expiry(rec)
    if found is None or now + delay < found[0]:
        return False
    return rec.fired is not None or rec.fire(found[1], now)


def timeout_error(rec: StreamRecorder) -> StreamTimeout:
    """The budget that fired on `rec`, as the exception the caller gets; ends the record (which
    stops its watch). On an SDK's call it is that SDK's flavour (`rec.timeout_class`): also the
    SDK's `APITimeoutError`, naming the request the hooks kept (`rec.http_request`) or a stand-in."""
    budget: BudgetName = rec.fired or "deadline"  # type: ignore[assignment]
    partial = rec.first_content is not None
    after = None if rec.fired_at is None else rec.fired_at - rec.t0
    sent = rec.http_request  # before `finish` drops it
    end(rec, "error", None, budget)
    if rec.timeout_class is not None:
        try:
            return rec.timeout_class.fired(budget, partial, after, call=rec.request, sent=sent)
        except Exception:
            internal_error("budgets.timeout")  # the SDK's class would not build: a plain one still says it all
    return StreamTimeout(budget, partial, after)


Action = Literal["fire", "stall", "rearm", "park", "none"]


def decide(rec: StreamRecorder, waiting: bool, now: float) -> tuple[Action, str, float | None]:
    """What a due check does, as (action, budget, when):

    * `fire`: the deadline passed (interrupt the read, or raise at the next one);
    * `stall`: the caller waits and first-token/idle expired (confirm, then interrupt);
    * `rearm`: look again at `when`;
    * `park`: the caller is away, first-token/idle wait for its next read; look again at `when`
      (the deadline) if it is not None;
    * `none`: nothing to enforce (none set, or the provider's final event arrived: the answer
      is whole, and the wait for the body's end is neither silence nor the caller's deadline).
    """
    if rec.completed:
        return "none", "", None
    at = deadline_at(rec)
    if at is not None and at <= now:
        return "fire", "deadline", None
    found = waiting_budget(rec)
    if found is None:
        return ("rearm", "", at) if at is not None else ("none", "", None)
    if not waiting:
        return "park", "", at
    when, name = found
    if when <= now:
        return "stall", name, None
    return "rearm", "", when if at is None or when < at else at
