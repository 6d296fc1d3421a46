"""`RedisStore`: the circuit breakers' state, one for every worker that names the same Redis.

Redis is never on a request's path. Admission and a call's end read and write only local memory
(`breaker/shared.py`); one daemon thread per process (started with the store, started again
in a forked child) does all the I/O: every `INTERVAL` seconds one pipelined round trip writes the
local moves queued since the last tick and reads the fleet's state of every key this process
used recently, plus the index of the keys open anywhere (so that a worker's first call to a model
the fleet has opened fails fast too). A queued move wakes the thread at once: an open is written
within milliseconds and seen by every worker within one tick (0.2 s, far inside the promised
second: one round trip per process per tick, whatever the number of keys).

In Redis, per (provider, model, route) `K = streamscope:breaker:{<JSON of the three>}` (the
braces, a Redis Cluster hash tag, keep a key's entries in one slot): the hash `K` (`state`
open/closed, `until` the end of the cool-down in the server's clock, so that no two hosts' clocks
are compared; `ver` a random token per change; `gen` a counter), `K:probe` (the probe slot: the
owner's id, `SET NX PX`), `K:want` (another worker is waiting for the slot); and the sorted set
`streamscope:breaker:{open}` of the keys whose cool-down is not over, scored with its end, their
versions beside it in `streamscope:breaker:{open}:ver` (a slot of their own: no script touches
them and a key together, so a cluster serves the store as one Redis does). Each expires by
itself: the hash `KEEP_MS` after its last change (cool-down included), the slot after its lease,
the index `KEEP_MS` after the last cool-down it holds ends, so that dead state never lingers.

The one probe: when the fleet's cool-down is over, the thread of a process that has refused a call
for want of the probe claims the slot (`CLAIM_MS`, renewed while unused unless another worker is
waiting, `PROBE_MS` renewed each tick while the probe runs: a holder that dies frees it within
seconds). Only the holder lets the probe through; its verdict is written with a compare on the
version it probed (`closed`: every worker closes; `reopened`: open for another cool-down).

Unreachable or slow (every operation bounded by `timeout`): the thread marks every view unknown,
so each worker's breaker decides alone, exactly as without a store; `Outage` logs one WARNING
per outage and counts `streamscope.store.errors` (`breaker.sync`); the thread tries again after
0.4, 0.8, then every 1 s, and the first success brings the fleet back by itself.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Final

from streamscope.core.guard import internal_error
from streamscope.core.keywords import checked_class
from streamscope.fleet.link import DEFAULT_TIMEOUT, Link, Outage, check_timeout

from .shared import UNKNOWN, Cell, Change, SharedStore, View

if TYPE_CHECKING:
    from .shared import BreakerState, Key

__all__ = ["RedisStore"]

PREFIX: Final = "streamscope:breaker:"
"""The start of every key name the store writes (`K` above)."""
INDEX: Final = PREFIX + "{open}"
"""The sorted set of the keys open anywhere in the fleet, each scored with the end of its cool-down
(and `:ver`, their versions: one slot, the hash tag's)."""
VERSIONS: Final = INDEX + ":ver"
INTERVAL: Final = 0.2
"""Seconds between two reads: an open reaches every worker well within a second (see above)."""
MAX_BACKOFF: Final = 1.0
"""The longest wait, in seconds, before trying Redis again after a failed tick (0.4, 0.8, then this)."""
CLAIM_MS: Final = 2000
"""The probe slot's lease while claimed and not yet used (renewed each tick unless another waits)."""
PROBE_MS: Final = 5000
"""The probe slot's lease while its probe runs (renewed each tick): a dead holder frees it within this."""
WANT_MS: Final = 1000
"""How long a worker's wish for the slot held elsewhere (`K:want`) stands without being said again."""
KEEP_MS: Final = 600_000
"""How long a key's hash outlives its last change (an open one: the cool-down, then this)."""
CLAIM_AHEAD: Final = 10.0
"""A process that used an open key within these seconds claims the probe slot as soon as the
cool-down is over, before a call asks for it (one that was refused for want of it claims anyway)."""
IDLE: Final = 60.0
"""Seconds without a call after which a closed key is read no more (its next call reads it again)."""
MAX_CELLS: Final = 4096
"""The keys tracked before those closed and idle (`IDLE` seconds) are dropped to make room."""

_NOW = "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) "

_SYNC = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'state', 'until', 'ver')
local state = h[1]
local left = 0
if state == 'open' then left = (tonumber(h[2]) or now) - now end
local holder = redis.call('GET', KEYS[2])
if holder == ARGV[1] then
  if ARGV[3] == '1' then redis.call('PEXPIRE', KEYS[2], ARGV[6])
  elseif redis.call('EXISTS', KEYS[3]) == 0 then redis.call('PEXPIRE', KEYS[2], ARGV[5]) end
elseif ARGV[2] == '1' then
  if not holder and ((state == 'open' and left <= 0) or (not state and ARGV[4] == '1')) then
    redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[5])
    holder = ARGV[1]
  elseif holder then
    redis.call('SET', KEYS[3], '1', 'PX', ARGV[7])
  end
end
local mine = 0
if holder == ARGV[1] then mine = 1 elseif holder then mine = 2 end
return {state or '', left, h[3] or '', mine}
"""
"""KEYS: hash, slot, want. ARGV: owner, wants the slot, probe running, open locally, CLAIM_MS,
PROBE_MS, WANT_MS. Returns state, ms left of the cool-down, version, 1 slot held here / 2 elsewhere."""

_PUBLISH = _NOW + """
local h = redis.call('HMGET', KEYS[1], 'state', 'ver')
if ARGV[1] == 'opened' then
  if h[1] == 'open' then return 0 end
else
  if redis.call('GET', KEYS[2]) == ARGV[5] then redis.call('DEL', KEYS[2]) end
  if h[2] and h[2] ~= ARGV[4] then return 0 end
end
redis.call('HINCRBY', KEYS[1], 'gen', 1)
if ARGV[1] == 'closed' then
  redis.call('HSET', KEYS[1], 'state', 'closed', 'until', now, 'ver', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
else
  local cool = tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], 'state', 'open', 'until', now + cool, 'ver', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], cool + tonumber(ARGV[6]))
end
return 1
"""
"""KEYS: hash, slot (one slot: the key's hash tag). ARGV: kind, version, cool-down ms, version
probed, owner, KEEP_MS. `opened` is dropped if the fleet is open already (the first open stands);
a verdict frees the slot and is dropped if the fleet moved on since the probe was sent."""

_INDEX = _NOW + """
local s = redis.call('ZSCORE', KEYS[1], ARGV[2])
if s and tonumber(s) <= now then s = nil end
if not s or ARGV[1] ~= 'opened' then
  local cool = tonumber(ARGV[3])
  local keep = cool + tonumber(ARGV[4])
  redis.call('ZADD', KEYS[1], now + cool, ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[5])
  for _, k in ipairs(KEYS) do
    if redis.call('PTTL', k) < keep then redis.call('PEXPIRE', k, keep) end
  end
end
return 1
"""
"""KEYS: index, its versions. ARGV: kind (`opened`, `reopened`), member, cool-down ms, KEEP_MS,
version. The index scores each key with the end of its cool-down (the server's clock) and keeps
its version beside; the first open stands."""

_OPEN = _NOW + """
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)) do
  redis.call('ZREM', KEYS[1], member)
  redis.call('HDEL', KEYS[2], member)
end
local out = {}
local found = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
for i = 1, #found, 2 do
  table.insert(out, {found[i], tonumber(found[i + 1]) - now, redis.call('HGET', KEYS[2], found[i]) or ''})
end
return out
"""
"""KEYS: index, its versions. The keys whose cool-down is not over anywhere in the fleet, each with
its ms left and version: a key is closed only by a probe, after its cool-down, so the end of the
cool-down is when it leaves the index (each key's own hash is read key by key, `_SYNC`)."""


def encode(key: Key) -> str:
    """The stable form of (provider, model, route) in key names."""
    return json.dumps(list(key), separators=(",", ":"), ensure_ascii=False)


def _decode(member: Any) -> Key | None:
    try:
        provider, model, route = json.loads(member)
        return (str(provider), model, route)
    except (ValueError, TypeError):
        return None


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@checked_class
class RedisStore(SharedStore):
    """The shared state of `Breaker(shared=...)`: `url_or_client` a `redis://` URL or a
    `redis.Redis` (or a Redis Cluster's `redis.RedisCluster`) the service has; `timeout` the seconds
    any one store operation may take (on the store's own thread: never a request's)."""

    def __init__(self, url_or_client: object, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.timeout = check_timeout("RedisStore", timeout)
        self._link = Link("RedisStore", url_or_client, self.timeout)
        self._outage = Outage("breaker", self._link.where(), "each worker's breaker decides alone")
        self._cells: dict[int, Cell] = {}
        self._fleet_open: dict[Key, View] = {}
        """Open in the fleet, for keys this process has not used yet (a first call fails fast too)."""
        self._scripts: dict[str, Any] = {}
        self._reset()
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _forked(ref))
        self._started()  # reading the fleet's open keys now: a worker's first call may already be refused

    def _reset(self) -> None:
        """The thread state of this process (at start, and in a forked child: none of the parent's)."""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._queue: deque[tuple[Cell, Change]] = deque()
        self._pending: dict[int, tuple[Cell, Change]] = {}
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._failures = 0
        self._owner = f"{socket.gethostname()}:{self._pid}:{secrets.token_hex(4)}"
        self._loaded: tuple[Any, set[str]] = (None, set())  # a client, the scripts it is known to hold
        for cell in list(self._cells.values()):
            cell.view = UNKNOWN
            cell.sent = cell.published  # the parent's queued moves are the parent's to write
        self._fleet_open = {}

    def __repr__(self) -> str:
        return f"RedisStore({self._link.where()!r}, timeout={self.timeout})"

    # -- what the breakers call (never blocks: a dict, a deque, an event) -------------------------

    def cell(self, key: Key, state: BreakerState) -> Cell:
        cell = Cell(self, key, state)
        found = self._fleet_open.get(key)
        if found is not None:
            cell.view = found
        self.track(cell)
        return cell

    def track(self, cell: Cell) -> None:
        self._started()
        with self._lock:
            if len(self._cells) >= MAX_CELLS:
                old = time.monotonic() - IDLE
                for k in [k for k, c in self._cells.items() if c.seen < old and c.state.state == "closed"]:
                    self._cells.pop(k).registered = False
            self._cells[id(cell)] = cell
            cell.registered = True
        self._wake.set()

    def publish(self, cell: Cell, change: Change) -> None:
        self._started()
        self._queue.append((cell, change))
        self._wake.set()

    def nudge(self) -> None:
        self._wake.set()

    def _started(self) -> None:
        if self._pid != os.getpid():
            self._reset()
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=_run, args=(weakref.ref(self), self._wake),
                                                    name="streamscope-breaker-store", daemon=True)
                    self._thread.start()

    # -- the thread's tick ---------------------------------------------------------------------------

    def tick(self, again: bool = False) -> float:
        """One round trip: write the queued moves, read the fleet. The seconds until the next."""
        now = time.monotonic()
        with self._lock:
            while self._queue:
                cell, change = self._queue.popleft()
                self._pending[id(cell)] = (cell, change)
            pending = list(self._pending.values())
            cells = [c for c in self._cells.values() if now - c.seen < IDLE or c.state.state != "closed"]
        # Each key read on its own only where something is going on (open here, in the fleet, or
        # being written): the others' state is in the index of open keys, read once for all.
        changing = {id(cell) for cell, _ in pending}
        read = [c for c in cells if id(c) in changing or c.state.state != "closed" or c.view.state == "open"
                or c.key in self._fleet_open]
        try:
            client = self._link.sync()
            pipe = client.pipeline(transaction=False)
            run, used = self._runner(client, pipe)
            written = 0
            for cell, change in pending:
                cool_ms = self._cool_ms(cell, now)
                run("publish", _PUBLISH, _keys(cell.key)[:2], [change.kind, change.version, cool_ms,
                                                               change.probed or "", self._owner, KEEP_MS])
                written += 1
                if change.kind != "closed":  # the index of open keys: a key of its own slot
                    run("index", _INDEX, [INDEX, VERSIONS], [change.kind, encode(cell.key), cool_ms, KEEP_MS,
                                                             change.version])
                    written += 1
            run("open", _OPEN, [INDEX, VERSIONS], [])
            for cell in read:
                run("sync", _SYNC, _keys(cell.key), self._sync_args(cell, now))
            replies = pipe.execute()
        except Exception as exc:
            self._loaded = (None, set())  # Redis may come back without them; if it lost them since the
            if not again and type(exc).__name__ == "NoScriptError":  # last tick (restarted): loaded anew
                return self.tick(again=True)
            if not _unreachable(exc):
                internal_error("breaker.store")
            self._outage.failed("sync", exc)
            for cell in cells:
                cell.view = UNKNOWN
            self._fleet_open = {}
            self._failures += 1
            return float(min(MAX_BACKOFF, INTERVAL * 2 ** self._failures))
        self._outage.ok()
        self._failures = 0
        self._loaded = (client, (self._loaded[1] if self._loaded[0] is client else set()) | used)
        read_at = time.monotonic()
        with self._lock:
            for cell, change in pending:
                cell.sent = max(cell.sent, change.seq)
                del self._pending[id(cell)]
        fleet_open: dict[Key, View] = {}
        for member, left, version in replies[written]:
            key = _decode(member)
            if key is not None:
                fleet_open[key] = View(True, read_at, 0, "open", now + int(left) / 1000, _text(version) or None)
        self._fleet_open = fleet_open
        for cell, (state, left, version, slot) in zip(read, replies[written + 1:]):
            state = _text(state)
            cell.view = View(True, read_at, cell.sent, "open" if state == "open" else "closed" if state else None,
                             now + int(left) / 1000, _text(version) or None, slot == 1, slot == 2)
        done = {id(c) for c in read}
        for cell in cells:
            if id(cell) not in done:  # closed here, and (last read) in the fleet
                found = fleet_open.get(cell.key)
                previous = cell.view
                cell.view = (View(True, read_at, cell.sent, "open", found.probe_at, found.version) if found else
                             View(True, read_at, cell.sent, previous.state, previous.probe_at, previous.version))
        return INTERVAL

    def _runner(self, client: Any, pipe: Any) -> tuple[Any, set[str]]:
        """`run(name, text, keys, args)` queues a script on `pipe`: its text on a cluster (a cluster pipeline
        loads none; EVAL goes to the keys' node), else its digest: alone once this client holds it, else as
        a script object, which the pipeline checks first (`SCRIPT EXISTS`: a round trip more) and `used` says."""
        loaded, used = self._loaded[1] if self._loaded[0] is client else set(), set()

        def run(name: str, text: str, keys: list[str], args: list[Any]) -> Any:
            if self._link.cluster:
                return pipe.execute_command("EVAL", text, len(keys), *keys, *args)
            script = self._scripts.get(name)
            if script is None or script.registered_client is not client:
                script = self._scripts[name] = client.register_script(text)
            if name in loaded:
                return pipe.evalsha(script.sha, len(keys), *keys, *args)
            used.add(name)
            return script(keys=keys, args=args, client=pipe)

        return run, used

    @staticmethod
    def _cool_ms(cell: Cell, now: float) -> int:
        """What is left of the cell's cool-down, in ms (at least 1)."""
        st = cell.state
        return max(1, int((st.opened_at + st.config.cool_down - now) * 1000))

    def _sync_args(self, cell: Cell, now: float) -> list[Any]:
        st, view = cell.state, cell.view
        wants = ((cell.wants is not None and cell.wants == (view.version or ""))
                 or (st.state != "closed" and now - cell.seen < CLAIM_AHEAD))
        return [self._owner, int(wants), int(st.probing and view.holding), int(st.state != "closed"),
                CLAIM_MS, PROBE_MS, WANT_MS]


def _keys(key: Key) -> list[str]:
    return [(base := f"{PREFIX}{{{encode(key)}}}"), base + ":probe", base + ":want"]


def _unreachable(exc: BaseException) -> bool:
    """Redis down, slow or refusing (an outage), not a bug here; a cluster's own errors too
    (`RedisClusterException`, outside `RedisError`: no node answers, a slot no node serves)."""
    import redis

    return isinstance(exc, (redis.RedisError, redis.exceptions.RedisClusterException, OSError))


def _run(ref: weakref.ref[RedisStore], wake: threading.Event) -> None:
    """The store's thread: a tick, then a wait (cut short by a queued move or a nudge)."""
    delay = INTERVAL
    while True:
        wake.wait(delay)
        wake.clear()
        store = ref()
        if store is None or store._wake is not wake:
            return  # the store is gone (or this is the thread of a process the store left)
        try:
            delay = store.tick()
        except Exception:  # never dies: the breakers fall back to their own state meanwhile
            internal_error("breaker.store")
            delay = MAX_BACKOFF
        del store


def _forked(ref: weakref.ref[RedisStore]) -> None:
    store = ref()
    if store is not None:
        store._reset()
