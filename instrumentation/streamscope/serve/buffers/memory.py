"""`MemoryBuffer`: the embedded resume buffer, for a service of one worker (nothing to install).

Generations live in this process: a reconnect that reaches another worker finds nothing (204);
for a fleet, `RedisBuffer`. Finished generations are dropped `ttl` seconds after their terminal
event, looked at whenever a generation starts (no timer of its own).
"""

from __future__ import annotations

import time

from streamscope.core.keywords import checked_class
from streamscope.export.fleet_metrics import watch_size

from .base import DEFAULT_GRACE, DEFAULT_MAX_BYTES, DEFAULT_MAX_EVENTS, DEFAULT_TTL, LocalFollow, NotFound, check_bounds
from .generation import Generation


@checked_class
class MemoryBuffer:
    """Keeps each relayed generation in this process for `ttl` seconds after its end; `grace`:
    seconds a generation keeps running once its browser has gone; `max_events` / `max_bytes`: what
    one generation keeps at most (older events are dropped: a reconnect from before them gets 204)."""

    backend = "memory"

    def __init__(self, *, ttl: float = DEFAULT_TTL, grace: float = DEFAULT_GRACE,
                 max_events: int = DEFAULT_MAX_EVENTS, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        check_bounds(type(self).__name__, ttl, grace, max_events, max_bytes)
        self.ttl = float(ttl)
        self.grace = float(grace)
        self.max_events = max_events
        self.max_bytes = max_bytes
        self._generations: dict[str, Generation] = {}
        watch_size(self, self.backend, self.size)

    def size(self) -> int:
        return sum(g.size for g in list(self._generations.values()))

    def start(self, request_id: str) -> Generation:
        """A new generation under `request_id` (a request id already in use: the new one replaces it)."""
        self._prune()
        generation = Generation(request_id, grace=self.grace, max_events=self.max_events, max_bytes=self.max_bytes,
                                on_end=self._ended)
        self._generations[request_id] = generation
        return generation

    def _ended(self, generation: Generation) -> None:
        if generation.abandoned:
            self._generations.pop(generation.request_id, None)
        else:
            generation.expires = time.monotonic() + self.ttl

    def _prune(self) -> None:
        now = time.monotonic()
        gone = [key for key, g in self._generations.items() if g.expires is not None and g.expires <= now]
        for key in gone:
            del self._generations[key]

    async def find(self, request_id: str, after: int) -> LocalFollow | NotFound:
        """A reconnect from event `after` of `request_id`."""
        generation = self._generations.get(request_id)
        if generation is None:
            return "nothing_to_resume"
        if generation.expires is not None and generation.expires <= time.monotonic():
            return "expired"
        if generation.first > after + 1:
            return "expired"  # what followed `after` was dropped past the bounds
        if not generation.available(after):
            return "nothing_to_resume"
        return LocalFollow(generation, after)
