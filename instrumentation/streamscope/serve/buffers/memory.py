"""`MemoryBuffer`: the embedded resume buffer, for a service of one worker (nothing to install).

Generations live in this process: a reconnect that reaches another worker finds nothing (204);
for a fleet, `RedisBuffer`. Finished generations are dropped `ttl` seconds after their terminal
event, looked at whenever a generation starts (no timer of its own).
"""

from __future__ import annotations

from streamscope.core.keywords import checked_class
from streamscope.export.fleet_metrics import watch_size

from .base import DEFAULT_GRACE, DEFAULT_MAX_BYTES, DEFAULT_MAX_EVENTS, DEFAULT_TTL, Generations, LocalFollow, NotFound
from .generation import Generation


@checked_class
class MemoryBuffer(Generations):
    """Keeps each relayed generation in this process for `ttl` seconds after its end; `grace`:
    seconds a generation keeps running once its browser has gone; `max_events` / `max_bytes`: what
    one generation keeps at most (older events are dropped: a reconnect from before them gets 204)."""

    backend = "memory"

    def __init__(self, *, ttl: float = DEFAULT_TTL, grace: float = DEFAULT_GRACE,
                 max_events: int = DEFAULT_MAX_EVENTS, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        super().__init__(type(self).__name__, ttl, grace, max_events, max_bytes)
        watch_size(self, self.backend)

    def size(self) -> int:
        return sum(g.size for g in list(self._generations.values()))

    def start(self, request_id: str) -> Generation:
        return self._new(request_id)

    async def find(self, request_id: str, after: int) -> LocalFollow | NotFound:
        """A reconnect from event `after` of `request_id`."""
        found = self._local(request_id, after)
        return "nothing_to_resume" if found is None else found
