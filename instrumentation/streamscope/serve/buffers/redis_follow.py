"""A reconnect on a worker that does not run the generation: it reads the Redis copy.

The stream's events after the reconnect's own, then new ones as they come (`XREAD BLOCK`), to
the terminal event; the owner's lease is watched, and a generation whose owner died ends with one
`error` event, code `upstream_unreachable`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from opentelemetry.trace import SpanContext, TraceFlags

from streamscope.serve.wire import error_event

from .redis_keys import BLOCK_MS, FAILOVER, LEASE, RENEW, RETRY, key_of, number


class RedisFollow:
    """A reconnect on a worker that does not run the generation: the stream's events after
    `after`, then new ones as they come, to the terminal event, or an `error` if the owner dies."""

    def __init__(self, buffer: Any, request_id: str, after: int, meta: dict[str, str]) -> None:
        self.buffer = buffer
        self.request_id = request_id
        self.key = key_of(request_id)
        self.after = after
        self.tokens = meta.get("tokens") == "1"
        self.outcome = "resumed"
        self.replayed = 0
        self.span_context = span_context(meta.get("span"))

    async def follow(self) -> AsyncIterator[bytes]:
        """Failed reads are tried again every `RETRY` seconds for `FAILOVER` seconds (a failover:
        the owner's lease is then given `LEASE` seconds to reach the new master before it counts
        as lost); past that, the connection ends and the browser reconnects from its last event."""
        client = self.buffer.client()
        position = self.after
        looked = 0.0
        failing: float | None = None
        trust_lease_after = 0.0
        ended = False  # the generation's end is in the copy: a read after learning it sees its last event
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
                    # no lease, no terminal event: gone
                    lost = not owner and state in (None, b"live") and now >= trust_lease_after
                    ended = state not in (None, b"live")
                if lost:  # what the stream holds, then the error
                    found = [(self.key, await client.xrange(self.key, f"(0-{position}", "+"))]
                else:
                    found = await self._read(client, position)
                self.buffer.outage.ok()
                if failing is not None:
                    failing, trust_lease_after = None, time.monotonic() + LEASE
            except Exception as exc:
                if failing is None:  # counted once a run: its retries are the same failed read
                    self.buffer.outage.failed("read", exc)
                failing = now if failing is None else failing
                if now - failing > FAILOVER:
                    return  # the browser reconnects from its last event, once Redis answers again
                await asyncio.sleep(RETRY)
                continue
            for _, entries in found or []:
                for entry_id, fields in entries:
                    position = number(entry_id)
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
            if ended and not any(entries for _, entries in found or []):
                return  # ended before the browser's event: nothing for it (its reconnect gets 204)

    async def _read(self, client: Any, position: int) -> Any:
        """The events after `position`, waiting up to `BLOCK_MS` for one. On a cluster, sent to the
        key's node: redis-py would ask the server for an `XREAD`'s keys first (`COMMAND GETKEYS`, one
        round trip more per read); a slot that moved is followed as for any command."""
        if self.buffer.link.cluster:
            try:
                node = client.get_node_from_key(self.key)
            except Exception:  # the slots not known yet: the client finds the node itself
                node = None
            if node is not None:
                return await client.execute_command("XREAD", "COUNT", 500, "BLOCK", BLOCK_MS, "STREAMS", self.key,
                                                    f"0-{position}", target_nodes=node)
        return await client.xread({self.key: f"0-{position}"}, count=500, block=BLOCK_MS)

    async def _delivered(self, client: Any) -> None:
        try:
            await client.hset(self.key + ":meta", "delivered", 1)
            self.buffer.outage.ok()
        except Exception as exc:
            self.buffer.outage.failed("read", exc)

    def _lost(self, n: int) -> bytes:
        return bytes(error_event(self.request_id, n, "upstream_unreachable", self.tokens))

    async def close(self) -> None:
        return None


def span_context(value: str | None) -> SpanContext | None:
    try:
        if not value:
            return None
        trace_id, span_id, flags = value.split("-")
        return SpanContext(int(trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=TraceFlags(int(flags, 16)))
    except ValueError:
        return None
