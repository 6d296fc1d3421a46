"""What every resume buffer takes and answers: its bounds, and what a reconnect finds.

A buffer keeps each relayed generation under its request id (`start`), and answers a reconnect
(`find`) with a way to follow the generation from an event on, or with why there is nothing to
follow (the reconnect then gets HTTP 204, counted by outcome).
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
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


class Generations:
    """The generations this worker runs, by request id, each kept `ttl` seconds after its end
    (looked at whenever one starts: no timer), with the bounds every buffer takes."""

    def __init__(self, owner: str, ttl: float, grace: float, max_events: int, max_bytes: int) -> None:
        check_bounds(owner, ttl, grace, max_events, max_bytes)
        self.bounds = Bounds(float(ttl), float(grace), max_events, max_bytes)
        self._generations: dict[str, Generation] = {}

    def _new(self, request_id: str) -> Generation:
        """A new generation under `request_id` (a request id already in use: the new one replaces it)."""
        now = time.monotonic()
        for key in [k for k, g in self._generations.items() if g.expires is not None and g.expires <= now]:
            del self._generations[key]
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
