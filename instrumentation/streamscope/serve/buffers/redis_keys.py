"""The names `RedisBuffer` keeps a generation under, the timings of its owner's lease, and how
the writes of a worker's generations go out together (`Batch`).

Keys are `streamscope:resume:{<sha256 of the request id>}` (and `:meta`, `:owner`, `:follow`), an
idempotency key's claim `streamscope:resume:key:{<sha256 of the key>}`: the request id and the key,
the capabilities a browser presents, are never stored in a key name. The braces are a Redis
Cluster hash tag: every key of one generation is in one slot, so each pipeline a generation sends
goes to one node; a claim is one key of its own.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any

PREFIX = "streamscope:resume:"
LEASE = 3.0
"""Seconds the owner's lease lasts unless renewed; renewed every `RENEW` seconds."""
RENEW = 1.0
FAILOVER = 10.0
"""Seconds the owner's writes and a follower's reads are tried again after they start to fail (a
Sentinel's failover takes a few): past that, an outage (the stream goes on without resume)."""
RETRY = 0.25
"""Seconds between two tries meanwhile."""
BLOCK_MS = 250
"""How long one `XREAD` waits for new events (below the link's timeout, so no read is cut)."""


RELEASE = ("local v = redis.call('get', KEYS[1]) "
           "if v and string.sub(v, -string.len(ARGV[1]) - 1) == ' ' .. ARGV[1] then "
           "return redis.call('del', KEYS[1]) end return 0")
"""Drop a claim (`<fingerprint> <request id>`) only if it still names the request that releases it."""


def key_of(request_id: str) -> str:
    """A generation's stream, `streamscope:resume:{<sha256>}`: the braces are a Redis Cluster hash
    tag, so the stream and its `:meta`, `:owner` and `:follow` keys live in one slot."""
    return PREFIX + "{" + hashlib.sha256(request_id.encode()).hexdigest() + "}"


def claim_key(key: str) -> str:
    """An idempotency key's claim: `streamscope:resume:key:{<sha256>}` (the key is never stored in a name)."""
    return PREFIX + "key:{" + hashlib.sha256(key.encode()).hexdigest() + "}"


def number(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[2] or 0)


class Calls(list[tuple[str, tuple[Any, ...], dict[str, Any]]]):
    """A pipeline's commands, recorded (`calls.xadd(...)`) to go out with other writes (`Batch`)."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self.append((name, args, kwargs))


class Batch:
    """The writes to one Redis from one event loop, one pipeline out at a time: those queued while
    it is out go together in the next, one round trip for any number of the worker's generations."""

    def __init__(self) -> None:
        self.queued: list[tuple[Calls, asyncio.Future[list[Any]]]] = []
        self.task: asyncio.Task[None] | None = None

    async def send(self, client: Any, calls: Calls) -> list[Any]:
        """The replies to `calls`; the first error among them raised."""
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self.queued.append((calls, future))
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._flush(client))
        return raised(await future)

    @staticmethod
    async def alone(client: Any, calls: Calls) -> list[Any]:
        """`calls` in a pipeline of their own, at once; the first error among the replies raised."""
        return raised((await pipelined(client, [calls]))[0])

    async def _flush(self, client: Any) -> None:
        try:
            while self.queued:
                batch, self.queued = self.queued, []
                for (_, future), replies in zip(batch, await pipelined(client, [calls for calls, _ in batch])):
                    if not future.done():
                        future.set_result(replies)
        finally:
            self.task = None


async def pipelined(client: Any, batch: list[Calls]) -> list[list[Any]]:
    """Each of `batch`'s replies, sent in one pipeline (an error in place of a reply; in place of
    every reply if the pipeline failed: Redis unreachable, or slow)."""
    try:
        pipe = client.pipeline(transaction=False)
        for calls in batch:
            for name, args, kwargs in calls:
                getattr(pipe, name)(*args, **kwargs)
        replies = list(await pipe.execute(raise_on_error=False))
    except Exception as exc:
        replies = [exc] * sum(len(calls) for calls in batch)
    split = []
    for calls in batch:
        split.append(replies[:len(calls)])
        replies = replies[len(calls):]
    return split


def raised(replies: list[Any]) -> list[Any]:
    """`replies`, or the first error among them raised (as a pipeline that raises on error does)."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies
