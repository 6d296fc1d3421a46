"""The breaker's side of a state shared by a fleet (`Breaker(shared=...)`): what a store must do,
and how a worker's breaker follows the fleet without ever waiting on the store.

The store (`streamscope.serve.RedisStore`, `redis_store.py`: only the serving layer imports it) keeps, per
breaker key, a `Cell` that its own thread fills in: `Cell.view`, the fleet's state as last read
(open until when, its version, whether this process holds the fleet's one probe slot). Admission
and a call's end only compare against that view and queue changes (`SharedStore.publish`), under
the breaker's lock and without I/O: the store is never on a request's path. When the view is not
usable (the store unreachable, not read for `STALE` seconds, or this worker's own change not yet
written), the worker's breaker is what it is without a store: its own state decides.

Following the fleet happens at admission, like every other move of the state machine (no timer):
a worker that learns of an open moves to `open`, counts the transition and fails fast; once the
fleet's cool-down is over, only the worker whose store holds the probe slot moves to half-open and
sends the probe; the others stay open and fail fast until the probe's verdict reaches them.
"""

from __future__ import annotations

import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeVar

Key = tuple[str, str | None, str | None]
"""(provider, model, route)."""
StateName = Literal["closed", "half_open", "open"]


class _Settings(Protocol):
    @property
    def cool_down(self) -> float: ...


class BreakerState(Protocol):
    """What the fleet's side reads and moves of one breaker's state (`breaker._State`), under its lock."""

    key: Key
    lock: threading.Lock
    cell: Cell | None

    @property
    def config(self) -> _Settings: ...

    state: StateName
    failures: deque[float]
    opened_at: float
    probing: bool

STALE: Final = 3.0
"""Seconds after which a view no longer read counts as unknown (the store's thread stalled or
stopped): the worker's own state decides. Far above the store's tick and timeout."""
HOLD_FRESH: Final = 1.0
"""Seconds a view saying "this process holds the probe slot" is trusted: half the slot's unused
lease (`redis_store.CLAIM_MS`), so that the slot cannot have passed to another worker."""
WAIT_FOR_CLAIM: Final = 0.2
"""The `retry_after` of a call refused while no worker holds the probe slot yet: about one tick."""

FleetState = Literal["open", "closed"]
ChangeKind = Literal["opened", "closed", "reopened"]


@dataclass(frozen=True, slots=True)
class View:
    """The fleet's state of one key as the store last read it (replaced whole, never mutated)."""

    live: bool = False
    """Read from the store at `read_at` (False: unknown, the store unreachable or never read)."""
    read_at: float = 0.0
    """`time.monotonic()` of the read."""
    covers: int = 0
    """This worker's changes of the key written before the read (compared with `Cell.published`)."""
    state: FleetState | None = None
    """None: the store has no state for the key (never opened, expired, or the store restarted)."""
    probe_at: float = 0.0
    """`time.monotonic()` when the fleet's cool-down ends (state `open`)."""
    version: str | None = None
    """Changes with every open and close (a random token: comparable across a store restart)."""
    holding: bool = False
    """This process holds the fleet's probe slot."""
    others_hold: bool = False
    """Another worker holds it (a probe may be in flight there)."""


UNKNOWN: Final = View()


@dataclass(frozen=True, slots=True)
class Change:
    """A local move to publish: `opened` (failures; kept only if the fleet is not open already),
    `closed` / `reopened` (a probe's verdict; kept only if the fleet is still at `probed`)."""

    kind: ChangeKind
    version: str
    probed: str | None
    seq: int


class Cell:
    """One breaker key's link between a worker's state machine and the store. `view`, `sent` and
    `registered` are written by the store; the rest under the breaker's lock."""

    __slots__ = ("applied", "key", "probed", "published", "registered", "seen", "sent", "state", "store", "view",
                 "wants")

    def __init__(self, store: SharedStore, key: Key, state: BreakerState) -> None:
        self.store = store
        self.key = key
        self.state = state
        self.view: View = UNKNOWN
        self.applied: str | None = None
        """The fleet version the local state follows."""
        self.published = 0
        self.sent = 0
        self.probed: str | None = None
        """The version the local probe was sent under (its verdict applies only to it)."""
        self.wants: str | None = None
        """The version under which a call was refused for want of the probe slot (asks the store
        to claim it)."""
        self.seen = time.monotonic()
        self.registered = False


class SharedStore(ABC):
    """What `Breaker(shared=...)` takes: a store every worker of a fleet names."""

    @abstractmethod
    def cell(self, key: Key, state: BreakerState) -> Cell:
        """The link for one breaker's state (registered to be read from now on; never blocks)."""

    @abstractmethod
    def track(self, cell: Cell) -> None:
        """Read `cell` again (it was dropped as idle); never blocks."""

    @abstractmethod
    def publish(self, cell: Cell, change: Change) -> None:
        """Write a local move (queued for the store's thread; never blocks)."""

    @abstractmethod
    def nudge(self) -> None:
        """Ask the store's thread for a read now (a probe starts, a call wants the probe slot)."""


S = TypeVar("S", bound=BreakerState)


def follow(st: S, move: Callable[[S, StateName, Any], None], context: Any) -> View | None:
    """Bring the local state to the fleet's (under `st.lock`, at admission). The view when the
    fleet decides (it then also decides who probes), None when this worker decides alone."""
    cell = st.cell
    assert cell is not None
    cell.seen = now = time.monotonic()
    if not cell.registered:
        cell.store.track(cell)
    view = cell.view
    if not view.live or view.covers != cell.published:
        return None
    if now - view.read_at > STALE:
        cell.store.nudge()
        return None
    if view.version is not None and view.version != cell.applied and not st.probing:
        cell.applied = view.version  # a local probe in flight: its verdict is compared with the fleet's
        st.failures.clear()
        if view.state == "open":
            st.opened_at = view.probe_at - st.config.cool_down
            if st.state != "open":
                move(st, "open", context)
        elif st.state != "closed":
            move(st, "closed", context)
    return view


def fleet_wait(st: BreakerState, view: View, now: float) -> float | None:
    """The probe is due here: None if this process holds the fleet's probe slot, else the seconds
    the call is told to wait (and the wish for the slot, which the store's thread claims when it is
    free)."""
    cell = st.cell
    assert cell is not None
    if view.holding and now - view.read_at <= HOLD_FRESH:
        cell.store.nudge()  # the slot's lease is renewed while the probe runs
        return None
    if cell.wants != (view.version or ""):
        cell.wants = view.version or ""
        cell.store.nudge()
    return st.config.cool_down if view.others_hold else WAIT_FOR_CLAIM


def publish(st: BreakerState, kind: ChangeKind) -> None:
    """Queue a local move for the fleet (under `st.lock`): an open by failures, a probe's verdict."""
    cell = st.cell
    assert cell is not None
    version = secrets.token_hex(8)
    cell.published += 1
    change = Change(kind, version, cell.probed if kind != "opened" else None, cell.published)
    cell.applied = version
    cell.store.publish(cell, change)
