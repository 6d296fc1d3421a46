"""`RedisBuffer`: the resume buffer of a fleet, on Redis Streams (extra `streamscope[redis]`).

The worker that runs a generation keeps it locally (its own connections and resumes reaching it
follow it there, as with `MemoryBuffer`) and writes a copy to Redis from a task of its own, so
that no event waits on Redis: one stream per generation (`XADD` with the event's number as its
entry id `0-<n>`, capped at `max_events`), a hash of what a reconnect needs to know, and the
owner's lease (a key it renews every second; it expires `LEASE` seconds after the owner dies). A
reconnect that reaches another worker reads the events after its own from the stream, then follows
new ones (`XREAD BLOCK`), and watches the lease: a generation whose owner is gone ends with one
`error` event, code `upstream_unreachable`.

Keys are `streamscope:resume:<sha256 of the request id>` (and `:meta`, `:owner`, `:follow`): the
request id itself, the capability a reconnect presents, is never stored in a key name.
Redis unreachable or slow: the generation streams as without resume (nothing is ever awaited on
the producer's path), a reconnect elsewhere gets 204, one WARNING per outage, each failed
operation counted in `streamscope.store.errors`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from opentelemetry.trace import SpanContext, TraceFlags

from streamscope.core.guard import internal_error
from streamscope.core.keywords import checked_class
from streamscope.export.fleet_metrics import watch_size
from streamscope.fleet.link import DEFAULT_TIMEOUT, Link, Outage, check_timeout
from streamscope.serve.wire import error_event

from .base import DEFAULT_GRACE, DEFAULT_MAX_BYTES, DEFAULT_MAX_EVENTS, DEFAULT_TTL, Generations, LocalFollow, NotFound
from .generation import Generation

PREFIX = "streamscope:resume:"
LEASE = 3.0
"""Seconds the owner's lease lasts unless renewed; renewed every `RENEW` seconds."""
RENEW = 1.0
BLOCK_MS = 250
"""How long one `XREAD` waits for new events (below the link's timeout, so no read is cut)."""


def _key(request_id: str) -> str:
    return PREFIX + hashlib.sha256(request_id.encode()).hexdigest()


def _number(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[2] or 0)


class _Writer:
    """The Redis copy of one generation of this worker: written from a task, never waited on."""

    def __init__(self, buffer: RedisBuffer, generation: Generation) -> None:
        self.buffer = buffer
        self.key = _key(generation.request_id)
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
        """Whether a reconnect on another worker sent the terminal event (`_RedisFollow`), and the
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
        buffer = self.buffer
        ttl_ms = int(buffer.bounds.ttl * 1000)
        while True:
            try:
                await asyncio.wait_for(self.wake.wait(), RENEW)
            except TimeoutError:
                pass
            self.wake.clear()
            batch, self.pending = self.pending, []
            done = self.finished
            try:
                await self._write(generation, batch, done, ttl_ms)
                buffer.outage.ok()
            except Exception as exc:
                buffer.outage.failed("append", exc)
                self.broken = True  # this generation streams on without resume elsewhere
                return
            if done:
                buffer.written(self.key, self.written, time.monotonic() + buffer.bounds.ttl)
                return

    async def _write(self, generation: Generation, batch: list[tuple[int, bytes, bool]], done: bool,
                     ttl_ms: int) -> None:
        buffer = self.buffer
        pipe = buffer.client().pipeline(transaction=False)
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
        state = "abandoned" if generation.abandoned else "done" if generation.ended else "live"
        values: dict[str, Any] = {"state": state, "tokens": int(generation.tokens)}
        span = generation.span_context
        if not self.span_written and isinstance(span, SpanContext) and span.is_valid:
            values["span"] = f"{span.trace_id:032x}-{span.span_id:016x}-{int(span.trace_flags):02x}"
            self.span_written = True
        pipe.hset(meta, mapping=values)
        at = len(pipe)
        pipe.hget(meta, "resumes")
        if done:
            pipe.delete(self.key + ":owner")
            for name in (self.key, meta):
                pipe.pexpire(name, ttl_ms)
        else:
            pipe.set(self.key + ":owner", buffer.worker(), px=int(LEASE * 1000))
            for name in (self.key, meta):
                pipe.pexpire(name, ttl_ms + int(LEASE * 1000))
        results = await pipe.execute()
        remote = int(results[at] or 0)
        while self.remote_resumes < remote:  # resumes on other workers: on the span and the record
            self.remote_resumes += 1
            generation.resumed()


class _RedisFollow:
    """A reconnect on a worker that does not run the generation: the stream's events after
    `after`, then new ones as they come, to the terminal event, or an `error` if the owner dies."""

    def __init__(self, buffer: RedisBuffer, request_id: str, after: int, meta: dict[str, str]) -> None:
        self.buffer = buffer
        self.request_id = request_id
        self.key = _key(request_id)
        self.after = after
        self.tokens = meta.get("tokens") == "1"
        self.outcome = "resumed"
        self.replayed = 0
        self.span_context = _span_context(meta.get("span"))

    async def follow(self) -> AsyncIterator[bytes]:
        client = self.buffer.client()
        position = self.after
        looked = 0.0
        while True:
            now = time.monotonic()
            lost = False
            try:
                if now - looked >= RENEW:
                    looked = now
                    pipe = client.pipeline(transaction=False)
                    pipe.set(self.key + ":follow", 1, px=int(LEASE * 1000))
                    pipe.exists(self.key + ":owner")
                    pipe.hget(self.key + ":meta", "state")
                    _, owner, state = await pipe.execute()
                    lost = not owner and state in (None, b"live")  # no lease, no terminal event: gone
                if lost:  # what the stream holds, then the error
                    found = [(self.key, await client.xrange(self.key, f"(0-{position}", "+"))]
                else:
                    found = await client.xread({self.key: f"0-{position}"}, count=500, block=BLOCK_MS)
                self.buffer.outage.ok()
            except Exception as exc:
                self.buffer.outage.failed("read", exc)
                return  # the browser reconnects from its last event, once Redis answers again
            for _, entries in found or []:
                for entry_id, fields in entries:
                    position = _number(entry_id)
                    self.replayed += 1
                    yield fields[b"d"]
                    if fields.get(b"t"):  # sent: the generating worker's record says it reached a browser
                        await self._delivered(client)
                        return
            if lost:
                self.outcome = "owner_lost"
                self.replayed += 1
                yield self._lost(position + 1)
                return

    async def _delivered(self, client: Any) -> None:
        try:
            await client.hset(self.key + ":meta", "delivered", 1)
            self.buffer.outage.ok()
        except Exception as exc:
            self.buffer.outage.failed("read", exc)

    def _lost(self, n: int) -> bytes:
        return error_event(self.request_id, n, "upstream_unreachable", self.tokens).encode()

    async def close(self) -> None:
        return None


def _span_context(value: str | None) -> SpanContext | None:
    try:
        if not value:
            return None
        trace_id, span_id, flags = value.split("-")
        return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(int(flags, 16)))
    except ValueError:
        return None


@checked_class
class RedisBuffer(Generations):
    """The resume buffer a fleet shares: `url_or_client` a `redis://` URL or a redis client. `ttl`,
    `grace`, `max_events`, `max_bytes` as `MemoryBuffer`'s; `timeout`: seconds any one Redis
    operation may take (a reconnect waits at most about twice that before its 204)."""

    backend = "redis"

    def __init__(self, url_or_client: object, *, ttl: float = DEFAULT_TTL, grace: float = DEFAULT_GRACE,
                 max_events: int = DEFAULT_MAX_EVENTS, max_bytes: int = DEFAULT_MAX_BYTES,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        super().__init__(type(self).__name__, ttl, grace, max_events, max_bytes)
        self.timeout = check_timeout(type(self).__name__, timeout)
        self.link = Link(type(self).__name__, url_or_client, self.timeout)
        self.outage = Outage.of("buffer", self.link.where(), "relays stream without resume")
        self._written: dict[str, tuple[int, float]] = {}
        self._worker = (os.getpid(), uuid.uuid4().hex)
        watch_size(self, self.backend)

    def client(self) -> Any:
        return self.link.asyncio()

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

    async def find(self, request_id: str, after: int) -> LocalFollow | _RedisFollow | NotFound:
        local = self._local(request_id, after)
        if local is not None:
            return local
        key = _key(request_id)
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
        if not meta or meta.get("state") == "abandoned" or not last:
            return "nothing_to_resume"
        if _number(first[0][0]) > after + 1:
            return "expired"
        top = _number(last[0][0])
        if after > top or (after == top and last[0][1].get(b"t")):
            return "nothing_to_resume"
        try:
            pipe = self.client().pipeline(transaction=False)
            pipe.hincrby(key + ":meta", "resumes", 1)
            pipe.hset(key + ":meta", "acked", after)  # the last event the browser says it has
            pipe.set(key + ":follow", 1, px=int(LEASE * 1000))
            await asyncio.wait_for(pipe.execute(), self.timeout * 2)
        except Exception as exc:
            self.outage.failed("read", exc)
        return _RedisFollow(self, request_id, after, meta)
