"""What every resume buffer takes and answers: its bounds, and what a reconnect finds.

A buffer keeps each relayed generation under its request id (`start`), and answers a reconnect
(`find`) with a way to follow the generation from an event on, or with why there is nothing to
follow (the reconnect then gets HTTP 204, counted by outcome).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Literal, Protocol

from streamscope.core.keywords import real_number, whole_number

from .generation import Bounds, Generation

DEFAULT_TTL = 60.0
"""Seconds a finished generation stays resumable: a browser that lost its connection in the last
moments of an answer reconnects within a few seconds (EventSource waits about 3 s by default)."""
DEFAULT_GRACE = 15.0
"""Seconds a generation keeps running with nobody reading it: EventSource reconnects after about
3 s, a phone changing networks or a laptop waking takes several more; longer only pays for tokens
nobody may read."""
DEFAULT_MAX_EVENTS = 10_000
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
"""Per generation: a long answer (tens of thousands of tokens) fits; more is dropped from the front."""

NotFound = Literal["nothing_to_resume", "expired"]
Claimed = Literal["new", "same", "other"]
"""What a claim of an idempotency key found: free (now this request's), the same request's, another's."""


class Resumable(Protocol):
    """A reconnect's way in: `follow()` yields the framed events; `outcome` is set at its end
    (`resumed`, or `owner_lost` when the generating worker died)."""

    outcome: str
    replayed: int
    span_context: object | None

    def follow(self) -> AsyncIterator[bytes]: ...
    async def close(self) -> None: ...


class ResumeBuffer(Protocol):
    """What `relay(resume=...)` takes: `MemoryBuffer` or `RedisBuffer`."""

    def start(self, request_id: str) -> Generation: ...
    async def find(self, request_id: str, after: int) -> Resumable | NotFound: ...
    async def claim(self, key: str, fingerprint: str, request_id: str, hold: float) -> tuple[Claimed, str]: ...
    async def claimed(self, key: str, fingerprint: str) -> str | None: ...
    async def release(self, key: str, request_id: str) -> None: ...
    async def cancel(self, request_id: str) -> bool: ...


def check_bounds(owner: str, ttl: object, grace: object, max_events: object, max_bytes: object) -> None:
    """One line for a wrong value, at the buffer's construction."""
    for name, value in (("ttl", ttl), ("grace", grace)):
        if not 0 < real_number(f"{owner}({name}=...)", value, "seconds (a number)") < math.inf:
            raise ValueError(f"{owner}({name}=...) takes seconds > 0, not {value!r}")
    for name, value in (("max_events", max_events), ("max_bytes", max_bytes)):
        if whole_number(f"{owner}({name}=...)", value, "a whole number") < 1:
            raise ValueError(f"{owner}({name}=...) takes a whole number >= 1, not {value!r}")


def parse_last_event_id(value: str) -> tuple[str, int] | None:
    """`<request_id>:<n>` → (request_id, n); None for anything else."""
    request_id, sep, number = value.rpartition(":")
    if not sep or not request_id or not number.isdigit() or len(number) > 9:
        return None
    return request_id, int(number)


class LocalFollow:
    """Following a generation of this worker."""

    def __init__(self, generation: Generation, after: int) -> None:
        self.generation = generation
        self.after = after
        self.outcome = "resumed"
        self.replayed = 0
        self.span_context = generation.span_context
        generation.resumed(after)
        generation.restart_grace()  # the grace starts again: this connection follows it, or it ends

    async def follow(self) -> AsyncIterator[bytes]:
        self.generation.join()
        try:
            async for data in self.generation.follow(self.after):
                self.replayed += 1
                yield data
        finally:
            self.generation.leave()

    async def close(self) -> None:
        return None


@dataclass(slots=True)
class Claim:
    """An idempotency key this worker holds: the request it names, and until when it holds it
    with no generation yet (the request's wait for its first content)."""

    fingerprint: str
    request_id: str
    pending_until: float


class Generations:
    """The generations this worker runs, by request id, each kept `ttl` seconds after its end
    (looked at whenever one starts: no timer), with the bounds every buffer takes; and the
    idempotency keys claimed here, each as long as its request's generation is resumable."""

    def __init__(self, owner: str, ttl: float, grace: float, max_events: int, max_bytes: int) -> None:
        check_bounds(owner, ttl, grace, max_events, max_bytes)
        self.bounds = Bounds(float(ttl), float(grace), max_events, max_bytes)
        self._generations: dict[str, Generation] = {}
        self._claims: dict[str, Claim] = {}

    def _new(self, request_id: str) -> Generation:
        """A new generation under `request_id` (a request id already in use: the new one replaces it)."""
        now = time.monotonic()
        for key in [k for k, g in self._generations.items() if g.expires is not None and g.expires <= now]:
            del self._generations[key]
        for key in [k for k, c in self._claims.items() if not self._holds(c, now)]:
            del self._claims[key]
        generation = Generation(request_id, self.bounds, on_end=self._ended)
        self._generations[request_id] = generation
        return generation

    def _ended(self, generation: Generation) -> None:
        if generation.abandoned:
            self._generations.pop(generation.request_id, None)
        else:
            generation.expires = time.monotonic() + self.bounds.ttl

    def _local(self, request_id: str, after: int) -> LocalFollow | NotFound | None:
        """A reconnect to a generation of this worker (None: not one of its own, or expired)."""
        generation = self._generations.get(request_id)
        if generation is None or (generation.expires is not None and generation.expires <= time.monotonic()):
            return None
        if generation.first > after + 1:
            return "expired"  # what followed `after` was dropped past the bounds
        return LocalFollow(generation, after) if generation.available(after) else "nothing_to_resume"

    # -- idempotency keys held by this worker --------------------------------------------------

    def _holds(self, claim: Claim, now: float) -> bool:
        """A claim holds while its request waits for a first content, then while its generation is
        resumable (an abandoned one is dropped at once: the key may start the request again)."""
        if now < claim.pending_until:
            return True
        generation = self._generations.get(claim.request_id)
        return generation is not None and not generation.abandoned and (
            generation.expires is None or generation.expires > now)

    def _claim_here(self, key: str, fingerprint: str, request_id: str, hold: float) -> tuple[Claimed, str]:
        now = time.monotonic()
        found = self._claims.get(key)
        if found is None or not self._holds(found, now):
            self._claims[key] = Claim(fingerprint, request_id, now + hold)
            return "new", request_id
        return ("same" if found.fingerprint == fingerprint else "other"), found.request_id

    async def claim(self, key: str, fingerprint: str, request_id: str, hold: float) -> tuple[Claimed, str]:
        """Idempotency key `key` for a request (`fingerprint`) that would run as `request_id`,
        waiting at most `hold` seconds for its first content: this worker's claims (`MemoryBuffer`)."""
        return self._claim_here(key, fingerprint, request_id, hold)

    async def claimed(self, key: str, fingerprint: str) -> str | None:
        return self._claimed_here(key, fingerprint)

    async def release(self, key: str, request_id: str) -> None:
        """The request of a claim started no generation (refused, or its browser left first)."""
        self._release_here(key, request_id)

    async def cancel(self, request_id: str) -> bool:
        """The browser stopped the answer (`abort()`): give the generation up now."""
        return bool(self._cancel_here(request_id))

    def _claimed_here(self, key: str, fingerprint: str) -> str | None:
        found = self._claims.get(key)
        if found is None or found.fingerprint != fingerprint or not self._holds(found, time.monotonic()):
            return None
        return found.request_id

    def _release_here(self, key: str, request_id: str) -> None:
        found = self._claims.get(key)
        if found is not None and found.request_id == request_id:
            del self._claims[key]

    def _cancel_here(self, request_id: str) -> bool | None:
        """Give up a generation of this worker now (None: not one of its own)."""
        generation = self._generations.get(request_id)
        if generation is None:
            return None
        if generation.ended or generation.abandoned:
            return False
        generation.abandon()
        return True
