"""The cardinality guard: a cap on the distinct values one metric attribute may take.

Model and route names come from the caller's code and configuration, so they are usually few;
but a bug (a model name built from user input, a route per tenant) must not turn every request
into a new time series. A guard lets the first `limit` distinct values through and folds every
later one into a single overflow value (`other`). Once a value is let through it stays through,
and once it is folded it stays folded, so the `+1` and the `-1` of one stream always land on the
same series (`streamscope.active_streams`).

Per call: one set lookup; the lock is taken only the first time a value is seen.
"""

from __future__ import annotations

import logging
import os
import threading

from streamscope.core.guard import renew_lock_after_fork

logger = logging.getLogger("streamscope")

OTHER = "other"
"""What a value beyond the cap becomes."""
DEFAULT_MAX_MODELS = 64
DEFAULT_MAX_ROUTES = 64
MAX_MODELS_ENV = "STREAMSCOPE_MAX_MODELS"
MAX_ROUTES_ENV = "STREAMSCOPE_MAX_ROUTES"


class CardinalityGuard:
    """Lets the first `limit` distinct values of one attribute through; later ones become `other`.

    Thread-safe; O(1) per call. `limit=0` folds everything.
    """

    __slots__ = ("__weakref__", "_lock", "_seen", "_warned", "folded", "limit", "name", "overflow")

    def __init__(self, name: str, limit: int, overflow: str = OTHER) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise ValueError(f"the cap on distinct {name} values must be an int >= 0, not {limit!r}")
        self.name = name
        self.limit = limit
        self.overflow = overflow
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        renew_lock_after_fork(self)
        self.folded = 0
        """Calls whose value was folded into `overflow` (a count, for diagnostics)."""
        self._warned = False

    def __call__(self, value: str) -> str:
        if value in self._seen:  # the hot path: a set lookup, atomic under the GIL
            return value
        with self._lock:
            if value in self._seen:
                return value
            if len(self._seen) < self.limit:
                self._seen.add(value)
                return value
            self.folded += 1
            warn = not self._warned
            self._warned = True
        if warn:
            logger.warning(
                "streamscope: more than %d distinct %s values; later ones are counted as %r in metrics "
                "(spans keep the real value). Raise the cap if this is expected.",
                self.limit, self.name, self.overflow,
            )
        return self.overflow

    @property
    def admitted(self) -> frozenset[str]:
        """The values let through so far."""
        with self._lock:
            return frozenset(self._seen)


def limit_from(value: int | None, env: str, default: int) -> int:
    """The cap: the argument if given, else the environment variable `env`, else `default`."""
    if value is not None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{env.lower().removeprefix('streamscope_')} must be an int >= 0, not {value!r}")
        return value
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    try:
        parsed = int(raw)
        if parsed < 0:
            raise ValueError(raw)
        return parsed
    except ValueError:
        logger.warning("streamscope: ignoring %s=%r (not an int >= 0); using %d", env, raw, default)
        return default
