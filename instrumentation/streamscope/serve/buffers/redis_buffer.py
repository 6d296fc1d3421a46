"""`RedisBuffer`: the resume buffer of a fleet, on Redis Streams (extra `streamscope[redis]`).

The worker that runs a generation keeps it locally (its own connections and resumes reaching it
follow it there, as with `MemoryBuffer`) and writes a copy to Redis from a task of its own, so
that no event waits on Redis: one stream per generation (`XADD` with the event's number as its
entry id `0-<n>`, capped at `max_events`), a hash of what a reconnect needs to know, and the
owner's lease (a key it renews every second; it expires `LEASE` seconds after the owner dies).
Events are written as they come; the lease, the expiries and what other workers asked (resumes,
a cancel) go with them once every `RENEW` seconds and whenever the state changes, so an event
costs one `XADD`; and the writes of all the worker's generations share one pipeline at a time
(`Batch`): one round trip carries whatever they queued while the last was out. A
reconnect that reaches another worker reads the events after its own from the stream, then follows
new ones (`XREAD BLOCK`), and watches the lease: a generation whose owner is gone ends with one
`error` event, code `upstream_unreachable`.

The key names are `redis_keys`'; a reconnect elsewhere is `redis_follow.RedisFollow`.
Redis unreachable or slow: the generation streams as without resume (nothing is ever awaited on
the producer's path), a reconnect elsewhere gets 204, one WARNING per outage, each failed
operation counted in `streamscope.store.errors`.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
import weakref
from collections import deque
from typing import Any

from opentelemetry.trace import SpanContext

from streamscope.core.guard import internal_error
from streamscope.core.keywords import checked_class
from streamscope.export.fleet_metrics import watch_size
from streamscope.fleet.link import DEFAULT_TIMEOUT, Link, Outage, check_timeout

from .base import (
    DEFAULT_GRACE,
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_EVENTS,
    DEFAULT_TTL,
    Claimed,
    Generations,
    LocalFollow,
    NotFound,
)
from .generation import Generation
from .redis_follow import RedisFollow
from .redis_keys import FAILOVER, LEASE, RELEASE, RENEW, RETRY, Batch, Calls, claim_key, key_of, number


class _Writer:
    """The Redis copy of one generation of this worker: written from a task, never waited on."""

    def __init__(self, buffer: RedisBuffer, generation: Generation) -> None:
        self.buffer = buffer
        self.key = key_of(generation.request_id)
        self.pending: list[tuple[int, bytes, bool]] = []
        self.wake = asyncio.Event()
        self.broken = False
        self.finished = False
        self.span_written = False
        self.remote_resumes = 0
        self.written = 0
        self.kept: deque[tuple[int, int]] = deque()
        """(number, bytes) of the events the Redis stream holds, to keep it within `max_bytes`."""
        self.kept_bytes = 0
        self.renewed = time.monotonic()
        """When the lease, the state and the expiries were last written (with what others asked)."""
        self.leased = False
        """Whether they were ever written (the first write carries them; so does one after failures)."""
        self.meta: tuple[str, int] | None = None
        """The state and tokens flag last written."""
        self.task = asyncio.get_running_loop().create_task(self._run(generation))

    # -- `Backend`: each returns at once -------------------------------------------------------

    def appended(self, generation: Generation, n: int, data: bytes, terminal: bool) -> None:
        if not self.broken:
            self.pending.append((n, data, terminal))
            self.wake.set()

    def ended(self, generation: Generation) -> None:
        self.finished = True
        self.wake.set()

    async def followed_elsewhere(self, generation: Generation) -> bool:
        try:
            found = await self.buffer.client().exists(self.key + ":follow")
            self.buffer.outage.ok()
            return bool(found)
        except Exception as exc:
            self.buffer.outage.failed("lease", exc)
            return False

    async def delivered_elsewhere(self, generation: Generation) -> bool:
        """Whether a reconnect on another worker sent the terminal event (`RedisFollow`), and the
        last event a reconnect acknowledged there."""
        try:
            delivered, acked = await self.buffer.client().hmget(self.key + ":meta", "delivered", "acked")
            self.buffer.outage.ok()
        except Exception as exc:
            self.buffer.outage.failed("read", exc)
            return False
        if acked and int(acked) > generation.acknowledged:
            generation.acknowledged = int(acked)
        return bool(delivered)

    # -- the task ------------------------------------------------------------------------------

    async def _run(self, generation: Generation) -> None:
        """Write what is pending, at once; the lease and the rest at least every `RENEW` seconds
        (`_write`). A failed write is tried again every `RETRY` seconds, for `FAILOVER` seconds (a
        Sentinel promoting a replica, a cluster moving a slot): from what Redis holds then
        (`_resync`, since the new master may lack the last writes, the lease and the state too).
        Past that, the generation streams on without resume elsewhere."""
        buffer = self.buffer
        ttl_ms = int(buffer.bounds.ttl * 1000)
        failing: float | None = None
        """When the writes began to fail (None: they do not)."""
        while True:
            wait = RETRY if failing is not None else max(0.0, self.renewed + RENEW - time.monotonic())
            try:
                await asyncio.wait_for(self.wake.wait(), wait)
            except TimeoutError:
                pass
            self.wake.clear()
            batch, self.pending = self.pending, []
            done = self.finished
            try:
                if failing is not None:
                    self.leased = False  # a new master may lack the lease and the state too
                    batch = await self._resync(generation)
                await self._write(generation, batch, done, ttl_ms)
                buffer.outage.ok()
                failing = None
            except Exception as exc:
                if failing is None:  # counted once a run: its retries are the same failed write
                    buffer.outage.failed("append", exc)
                failing = time.monotonic() if failing is None else failing
                if time.monotonic() - failing > FAILOVER:
                    self.broken = True  # this generation streams on without resume elsewhere
                    return
                continue
            if done:
                buffer.written(self.key, self.written, time.monotonic() + buffer.bounds.ttl)
                return

    async def _resync(self, generation: Generation) -> list[tuple[int, bytes, bool]]:
        """After failed writes: every event this worker keeps that Redis does not hold (its stream's
        last entry read anew), in order."""
        last = await self.buffer.client().xrevrange(self.key, "+", "-", count=1)
        top = number(last[0][0]) if last else 0
        return [(n, generation.events[n - generation.first], generation.ended and n == generation.count)
                for n in range(max(top + 1, generation.first), generation.count + 1)]

    async def _write(self, generation: Generation, batch: list[tuple[int, bytes, bool]], done: bool,
                     ttl_ms: int) -> None:
        """The events, and when due (`RENEW` seconds since, the state changed, the end, the first
        write) the state, the lease, the expiries and what other workers asked: one write (`send`)."""
        buffer = self.buffer
        now = time.monotonic()
        state = "abandoned" if generation.abandoned else "done" if generation.ended else "live"
        meta_now = (state, int(generation.tokens))
        span = generation.span_context
        span_due = not self.span_written and isinstance(span, SpanContext) and span.is_valid
        full = (done or not self.leased or meta_now != self.meta or span_due or (bool(batch) and not self.written)
                or now >= self.renewed + RENEW - 0.01)  # the first events create the stream: its expiry with them
        if not batch and not full:
            return
        pipe = Calls()
        meta = self.key + ":meta"
        for n, data, terminal in batch:
            fields: dict[str, Any] = {"d": data, "t": 1} if terminal else {"d": data}
            pipe.xadd(self.key, fields, id=f"0-{n}", maxlen=buffer.bounds.max_events, approximate=False)
            self.written += len(data)
            self.kept.append((n, len(data)))
            self.kept_bytes += len(data)
        while len(self.kept) > buffer.bounds.max_events:
            self.kept_bytes -= self.kept.popleft()[1]
        if self.kept_bytes > buffer.bounds.max_bytes:
            while len(self.kept) > 1 and self.kept_bytes > buffer.bounds.max_bytes:
                self.kept_bytes -= self.kept.popleft()[1]
            pipe.xtrim(self.key, minid=f"0-{self.kept[0][0]}", approximate=False)
        if not full:
            await buffer.send(pipe)
            return
        values: dict[str, Any] = {"state": state, "tokens": meta_now[1]}
        if span_due and isinstance(span, SpanContext):
            values["span"] = f"{span.trace_id:032x}-{span.span_id:016x}-{int(span.trace_flags):02x}"
        pipe.hset(meta, mapping=values)
        at = len(pipe)
        pipe.hget(meta, "resumes")
        pipe.hget(meta, "cancel")
        names = [self.key, meta]
        claim = claim_key(generation.claim) if generation.claim is not None else None
        if claim is not None and generation.abandoned:
            pipe.delete(claim)  # nothing to resume: the key may start its request again
        elif claim is not None:
            names.append(claim)
        if done:
            pipe.delete(self.key + ":owner")
            for name in names:
                pipe.pexpire(name, ttl_ms)
        else:
            pipe.set(self.key + ":owner", buffer.worker(), px=int(LEASE * 1000))
            for name in names:
                pipe.pexpire(name, ttl_ms + int(LEASE * 1000))
        results = await buffer.send(pipe)
        self.renewed, self.leased, self.meta = now, True, meta_now
        self.span_written = self.span_written or span_due
        remote = int(results[at] or 0)
        while self.remote_resumes < remote:  # resumes on other workers: on the span and the record
            self.remote_resumes += 1
            generation.resumed()
        if results[at + 1] and not generation.ended and not generation.abandoned:
            generation.abandon()  # the browser stopped it on another worker (`cancel`)



def _claim_of(value: bytes) -> tuple[str, str]:
    """A claim's value, `<fingerprint> <request id>`, read."""
    fingerprint, _, request_id = value.decode().partition(" ")
    return fingerprint, request_id


@checked_class
class RedisBuffer(Generations):
    """The resume buffer a fleet shares: `url_or_client` a `redis://` URL or a redis client (a
    Redis Cluster's too: one generation's keys share a hash tag). `ttl`, `grace`, `max_events`,
    `max_bytes` as `MemoryBuffer`'s; `timeout`: seconds any one Redis operation may take (a
    reconnect waits at most about twice that before its 204)."""

    backend = "redis"

    def __init__(self, url_or_client: object, *, ttl: float = DEFAULT_TTL, grace: float = DEFAULT_GRACE,
                 max_events: int = DEFAULT_MAX_EVENTS, max_bytes: int = DEFAULT_MAX_BYTES,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__(type(self).__name__, ttl, grace, max_events, max_bytes)
        self.timeout = check_timeout(type(self).__name__, timeout)
        self.link = Link(type(self).__name__, url_or_client, self.timeout)
        self.outage = Outage.of("buffer", self.link.where(), "relays stream without resume")
        self._written: dict[str, tuple[int, float]] = {}
        self._batches: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Batch] = weakref.WeakKeyDictionary()
        self._worker = (os.getpid(), uuid.uuid4().hex)
        watch_size(self, self.backend)

    def client(self) -> Any:
        return self.link.asyncio()

    async def send(self, calls: Calls) -> list[Any]:
        """`calls` sent with the other writes of this worker's generations from this loop (on a
        cluster, alone and at once: generations live on different nodes, one node's trouble its own)."""
        if self.link.cluster:
            return await Batch.alone(self.client(), calls)
        loop = asyncio.get_running_loop()
        batch = self._batches.get(loop) or self._batches.setdefault(loop, Batch())
        return await batch.send(self.client(), calls)

    def worker(self) -> str:
        """This worker's token in the lease (a forked child has its own)."""
        if self._worker[0] != os.getpid():
            self._worker = (os.getpid(), uuid.uuid4().hex)
        return self._worker[1]

    def written(self, key: str, size: int, expires: float) -> None:
        self._written[key] = (size, expires)

    def size(self) -> int:
        """Bytes this worker holds or wrote to Redis that have not expired yet."""
        now = time.monotonic()
        for key in [k for k, (_, at) in self._written.items() if at <= now]:
            self._written.pop(key, None)
        live = sum(g.size for g in list(self._generations.values()) if not g.ended)
        return live + sum(size for size, _ in self._written.values())

    def start(self, request_id: str) -> Generation:
        generation = self._new(request_id)
        try:
            generation.backend = _Writer(self, generation)
        except Exception:
            internal_error("serve.resume.redis")
        return generation

    async def find(self, request_id: str, after: int) -> LocalFollow | RedisFollow | NotFound:
        local = self._local(request_id, after)
        if local is not None:
            return local
        key = key_of(request_id)
        try:
            pipe = self.client().pipeline(transaction=False)
            pipe.hgetall(key + ":meta")
            pipe.xrange(key, "-", "+", count=1)
            pipe.xrevrange(key, "+", "-", count=1)
            meta_raw, first, last = await asyncio.wait_for(pipe.execute(), self.timeout * 2)
            self.outage.ok()
        except Exception as exc:
            self.outage.failed("read", exc)
            return "nothing_to_resume"
        meta = {k.decode(): v.decode() for k, v in meta_raw.items()}
        if not meta or meta.get("state") == "abandoned" or meta.get("cancel"):
            return "nothing_to_resume"
        # A live generation's copy may be behind the browser: its owner sends each event to its own
        # browser first, and writes the copy with the next round trip to Redis. A browser back
        # within that time is ahead of the copy: it follows from its own event.
        live = meta.get("state") == "live"
        if not last:  # started, no event copied yet
            if not live:
                return "nothing_to_resume"
        elif number(first[0][0]) > after + 1:
            return "expired"
        elif (after > number(last[0][0]) and not live) or (after == number(last[0][0]) and last[0][1].get(b"t")):
            return "nothing_to_resume"
        try:
            pipe = self.client().pipeline(transaction=False)
            pipe.hincrby(key + ":meta", "resumes", 1)
            pipe.hset(key + ":meta", "acked", after)  # the last event the browser says it has
            pipe.set(key + ":follow", 1, px=int(LEASE * 1000))
            await asyncio.wait_for(pipe.execute(), self.timeout * 2)
        except Exception as exc:
            self.outage.failed("read", exc)
        return RedisFollow(self, request_id, after, meta)

    # -- idempotency keys, fleet-wide (this worker's own claims when Redis cannot be reached) ----

    async def claim(self, key: str, fingerprint: str, request_id: str, hold: float) -> tuple[Claimed, str]:
        """Idempotency key `key` for a request (`fingerprint`) that would run as `request_id`: one
        `SET NX` (held `hold` seconds plus a lease until its generation's writer keeps it)."""
        name, value = claim_key(key), f"{fingerprint} {request_id}"
        try:
            for _ in range(2):  # a claim that expires between the two commands: once more
                pipe = self.client().pipeline(transaction=False)
                pipe.set(name, value, nx=True, px=int((hold + LEASE) * 1000))
                pipe.get(name)
                made, found = await asyncio.wait_for(pipe.execute(), self.timeout * 2)
                self.outage.ok()
                if made:
                    return "new", request_id
                if found is not None:
                    theirs, their_id = _claim_of(found)
                    return ("same" if theirs == fingerprint else "other"), their_id
        except Exception as exc:
            self.outage.failed("claim", exc)
        return self._claim_here(key, fingerprint, request_id, hold)

    async def claimed(self, key: str, fingerprint: str) -> str | None:
        try:
            found = await asyncio.wait_for(self.client().get(claim_key(key)), self.timeout * 2)
            self.outage.ok()
        except Exception as exc:
            self.outage.failed("claim", exc)
            return self._claimed_here(key, fingerprint)
        if found is None:
            return None
        theirs, their_id = _claim_of(found)
        return their_id if theirs == fingerprint else None

    async def release(self, key: str, request_id: str) -> None:
        """The request of a claim started no generation (refused, or its browser left first)."""
        self._release_here(key, request_id)
        try:
            await asyncio.wait_for(self.client().eval(RELEASE, 1, claim_key(key), request_id), self.timeout * 2)
            self.outage.ok()
        except Exception as exc:
            self.outage.failed("claim", exc)

    async def cancel(self, request_id: str) -> bool:
        """The browser stopped the answer (`abort()`): given up here at once if this worker runs
        it, else marked in Redis for its owner, which gives it up within `RENEW` seconds."""
        here = self._cancel_here(request_id)
        if here is not None:
            return here
        meta = key_of(request_id) + ":meta"
        try:
            state = await asyncio.wait_for(self.client().hget(meta, "state"), self.timeout * 2)
            if state == b"live":
                await asyncio.wait_for(self.client().hset(meta, "cancel", 1), self.timeout * 2)
            self.outage.ok()
        except Exception as exc:
            self.outage.failed("claim", exc)
            return False
        return bool(state == b"live")
