"""The names `RedisBuffer` keeps a generation under, and the timings of its owner's lease.

Keys are `streamscope:resume:{<sha256 of the request id>}` (and `:meta`, `:owner`, `:follow`), an
idempotency key's claim `streamscope:resume:key:{<sha256 of the key>}`: the request id and the key,
the capabilities a browser presents, are never stored in a key name. The braces are a Redis
Cluster hash tag: every key of one generation is in one slot, so each pipeline a generation sends
goes to one node; a claim is one key of its own.
"""

from __future__ import annotations

import hashlib

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
