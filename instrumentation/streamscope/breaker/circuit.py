"""The circuit breaker: a provider and model in trouble get no more calls for a while.

Each (provider, model, route) has a breaker of its own (route where the call has one,
`streamscope.route()`); its settings come from a `BreakerTable`, like the budgets: the most
specific entry wins, `route:<name>`, then the longest matching `model:<glob>`, then `default`
(a whole `Breaker` per entry: fields are not merged across entries). No entry: no breaker.

    closed ──`failures` retryable failures within `window` s──▶ open
    open ──`cool_down` s later, the next call is the probe──▶ half-open
    half-open ──the probe answers──▶ closed
    half-open ──the probe fails (retryable)──▶ open (for another `cool_down`)

While open, and while a probe is in flight, calls fail fast with `CircuitOpen` (code
`circuit_open`): nothing is sent. A probe that ends any other way (cancelled by its caller, a
non-retryable failure such as a 400) decides nothing: the breaker stays half-open and the next
call is the probe.

What feeds it is the end of each call, once (`Pipeline._finished`), by its failure code
(`core/failures.code_of`), with the retry line's rule: `rate_limited`, `upstream_unavailable`,
`upstream_timeout` and `upstream_unreachable` are failures; an answer (the final event reached)
is a success; a cancel, a non-retryable failure (`upstream_rejected`, a refusal is an answer),
an internal error and a fast-failed call are nothing. An idle or deadline budget that fires after
content is `upstream_timeout` too and counts: a provider that stalls mid-answer is a provider in
trouble (the retry line does not repeat such a call, but the breaker is about the provider).

State is per process (a `threading.Lock` per breaker; sync and async callers alike, since no
lock is held across an await) unless `Breaker(shared=...)` names a store the fleet shares
(`breaker/shared.py`): without one, every worker of a fleet decides on its own, and the
`streamscope.breaker.state` gauge (with the multiprocess metrics) shows each one's state. The
state moves only when a call starts or ends (no timer): the gauge says `open` until the first
call after the cool-down makes it half-open.

Why not a library (pybreaker, aiobreaker, purgatory): they wrap the call (a decorator or a
context manager around a function), with sync and async in separate packages or APIs, and decide
success by "did it raise". Here the decision is made at two separate moments (admission where
the request is sent, the verdict when the stream ends, possibly much later and in another task)
and by the failure code, with per-key state and transitions reported to the metrics under the
same lock: a small state machine says that directly.
"""

from __future__ import annotations

import difflib
import fnmatch
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal, NamedTuple

from streamscope.budgets.config_file import CONFIG_ENV, BudgetFileError, read_toml
from streamscope.budgets.keys import split_keys
from streamscope.core.errors import CircuitOpen
from streamscope.core.guard import internal_error
from streamscope.core.keywords import checked_class

from . import shared
from .shared import Key, SharedStore, StateName

__all__ = ["Breaker", "BreakerFileError", "BreakerTable", "Breakers", "CircuitOpen", "Key", "StateName", "Ticket",
           "verdict"]

STATE_VALUE: Final[dict[str, int]] = {"closed": 0, "half_open": 1, "open": 2}
"""The `streamscope.breaker.state` gauge's values."""
FAILED_CODES: Final = frozenset({"rate_limited", "upstream_unavailable", "upstream_timeout", "upstream_unreachable"})
"""The failure codes that count against a breaker (the retryable ones, see `core/failures.py`)."""
FIELDS: Final = ("failures", "window", "cool_down")
_TABLES = '[breaker.default], [breaker.routes.<name>] and [breaker.models."<glob>"]'
_MAX_KEYS = 4096


@checked_class
@dataclass(frozen=True, slots=True)
class Breaker:
    """`failures` retryable failures within `window` seconds open the breaker; `cool_down` seconds
    later one probe call decides whether it closes again. `shared`: a store every worker names
    (`streamscope.serve.RedisStore(url)`) makes the state one for the fleet (`shared.py`).
    An unknown keyword raises a one-line `TypeError` with the field probably meant."""

    failures: int = 5
    window: float = 60.0
    cool_down: float = 30.0
    shared: SharedStore | None = None

    def __post_init__(self) -> None:
        if isinstance(self.failures, bool) or not isinstance(self.failures, int):
            raise TypeError(f"Breaker.failures must be a whole number of failures >= 1, not {self.failures!r}")
        if self.failures < 1:
            raise ValueError(f"Breaker.failures must be >= 1, not {self.failures!r}")
        for name in ("window", "cool_down"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Breaker.{name} must be a number of seconds, not {value!r}")
            if math.isnan(value) or math.isinf(value) or value <= 0:
                raise ValueError(f"Breaker.{name} must be a finite number of seconds > 0, not {value!r}")
            object.__setattr__(self, name, float(value))
        if self.shared is not None and not isinstance(self.shared, SharedStore):
            raise TypeError(f"Breaker.shared takes a store the workers share, streamscope.serve.RedisStore(url), "
                            f"or None, not {type(self.shared).__name__}")


class BreakerFileError(BudgetFileError):
    """The `[breaker]` tables of the config file cannot be used (the message names every problem)."""


class BreakerTable:
    """Breakers by route and model pattern (a `None` entry: no breaker there), resolved per call."""

    def __init__(self, default: Breaker | None = None, routes: Mapping[str, Breaker | None] | None = None,
                 models: Mapping[str, Breaker | None] | None = None) -> None:
        self.default = default
        self.routes = dict(routes or {})
        self.models = sorted((models or {}).items(), key=lambda item: -len(item[0]))  # longest first
        self._cache: dict[tuple[str | None, str | None], Breaker | None] = {}

    @property
    def empty(self) -> bool:
        """No breaker anywhere."""
        return self.default is None and not any(self.routes.values()) and not any(b for _, b in self.models)

    def resolve(self, model: str | None, route: str | None) -> Breaker | None:
        key = (model, route)
        if key in self._cache:
            return self._cache[key]
        found = self.default
        if route is not None and route in self.routes:
            found = self.routes[route]
        else:
            for pattern, breaker in self.models:
                if model is not None and fnmatch.fnmatchcase(model, pattern):
                    found = breaker
                    break
        if len(self._cache) < 4096:
            self._cache[key] = found
        return found

    @classmethod
    def from_config(cls, config: Breaker | Mapping[str, Breaker | None] | BreakerTable | None) -> BreakerTable:
        """From `instrument(breaker=...)`: one `Breaker`, or keys `default`, `route:<name>`, `model:<glob>`
        (a `None` value: no breaker there). A bad one raises a one-line `TypeError` / `ValueError`."""
        if config is None:
            return cls()
        if isinstance(config, BreakerTable):
            return config
        if isinstance(config, Breaker):
            return cls(default=config)
        if not isinstance(config, Mapping):
            raise TypeError(f"instrument(breaker=...) takes a streamscope.Breaker or a mapping with keys \"default\", "
                            f"\"route:<name>\", \"model:<glob>\", not {type(config).__name__}")
        def check(key: str, value: object) -> Breaker | None:
            if value is not None and not isinstance(value, Breaker):
                hint = (f"; {key} is a field of Breaker: breaker=Breaker({key}=...)" if key in FIELDS else "")
                raise TypeError(f"instrument(breaker=...): breaker[{key!r}] must be a streamscope.Breaker or None, "
                                f"not {type(value).__name__}{hint}")
            return value

        default, routes, models = split_keys(config, "breaker", check)
        return cls(default, routes, models)

    @classmethod
    def from_toml(cls, path: str | os.PathLike[str], env: str | None = None) -> BreakerTable:
        """The `[breaker.default]`, `[breaker.routes.<name>]`, `[breaker.models."<glob>"]` tables of a
        TOML file (no `[breaker]` table: no breaker). Raises `BreakerFileError` (a `ValueError`)
        naming the file and every problem in its breaker tables; `BudgetFileError` for a file that
        cannot be read or parsed."""
        shown = os.fspath(path)
        data = read_toml(shown, env)
        problems: list[str] = []
        table = _check(data.get("breaker"), problems)
        if problems:
            raise BreakerFileError(shown, problems, env)
        return table

    @classmethod
    def from_environment(cls) -> BreakerTable:
        """The breaker tables of the file named by `STREAMSCOPE_CONFIG`, or none (unset or empty)."""
        path = os.environ.get(CONFIG_ENV)
        return cls.from_toml(path, env=CONFIG_ENV) if path else cls()


def _check(section: Any, problems: list[str]) -> BreakerTable:
    if section is None:
        return BreakerTable()
    if not isinstance(section, dict):
        problems.append(f"breaker = a value: breaker is a table of tables, {_TABLES}")
        return BreakerTable()
    default: Breaker | None = None
    routes: dict[str, Breaker | None] = {}
    models: dict[str, Breaker | None] = {}
    for key, value in section.items():
        if key == "default":
            default = _entry(value, "[breaker.default]", problems)
        elif key in ("routes", "models"):
            generic = "[breaker.routes.<name>]" if key == "routes" else '[breaker.models."<glob>"]'
            if not isinstance(value, dict):
                problems.append(f"[breaker] {key}: each entry is a table of its own, {generic}")
                continue
            out = routes if key == "routes" else models
            for name, table in value.items():
                out[name] = _entry(table, f"[breaker.{key}.{_quoted(name)}]", problems)
        elif key in FIELDS:
            problems.append(f"[breaker] {key}: breaker fields go in a table of their own, [breaker.default] for "
                            f"every call (or [breaker.routes.<name>], [breaker.models.\"<glob>\"])")
        else:
            close = difflib.get_close_matches(key.lower(), ["default", "routes", "models"], n=1)
            hint = f"did you mean [breaker.{close[0]}]? " if close else ""
            problems.append(f"[breaker] {_quoted(key)}: unknown table; {hint}the breaker tables are {_TABLES}")
    return BreakerTable(default, routes, models)


def _entry(table: Any, header: str, problems: list[str]) -> Breaker | None:
    if not isinstance(table, dict):
        problems.append(f"{header}: must be a table of breaker fields ({', '.join(FIELDS)})")
        return None
    fields: dict[str, Any] = {}
    bad = False
    for key, value in table.items():
        if key == "failures":
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                problems.append(f"{header} failures = {value!r}: must be a whole number of failures >= 1")
                bad = True
                continue
        elif key in ("window", "cool_down"):
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value)
                    or math.isinf(value) or value <= 0):
                problems.append(f"{header} {key} = {value!r}: must be a number of seconds > 0")
                bad = True
                continue
        else:
            close = difflib.get_close_matches(key.lower(), FIELDS, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            problems.append(f"{header} {_quoted(key)}: unknown key; {hint}the breaker fields are {', '.join(FIELDS)}")
            bad = True
            continue
        fields[key] = value
    return None if bad else Breaker(**fields)


def _quoted(name: str) -> str:
    return name if name.replace("_", "").replace("-", "").isalnum() else '"' + name.replace('"', '\\"') + '"'


# -- the state machine -------------------------------------------------------------------------------


class _State:
    """One breaker's state; every field is read and written under `lock`."""

    __slots__ = ("cell", "config", "failures", "key", "lock", "opened_at", "probing", "state")

    def __init__(self, key: Key, config: Breaker) -> None:
        self.key = key
        self.config = config
        self.lock = threading.Lock()
        self.state: StateName = "closed"
        self.failures: deque[float] = deque(maxlen=config.failures)
        """When the latest retryable failures ended (at most `config.failures` of them)."""
        self.opened_at = 0.0
        self.probing = False
        self.cell: shared.Cell | None = config.shared.cell(key, self) if config.shared is not None else None
        """The link to the fleet's state (`Breaker(shared=...)`), None without one."""


class Ticket(NamedTuple):
    """A call the breaker let through: its breaker, and whether it is the half-open probe."""

    state: _State
    probe: bool


Transition = Callable[[Key, StateName, Any], None]
"""Called (under the breaker's lock, in order) with the key, the new state and the caller's context."""


class Breakers:
    """Every breaker of one pipeline, by (provider, model, route)."""

    def __init__(self, table: BreakerTable, on_transition: Transition | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.table = table
        self.on_transition = on_transition
        self.clock = clock
        self._states: dict[Key, _State] = {}
        self._lock = threading.Lock()

    def state(self, key: Key) -> StateName:
        """The breaker's current state (closed if it has none yet)."""
        found = self._states.get(key)
        return found.state if found is not None else "closed"

    def _get(self, key: Key, config: Breaker) -> _State:
        found = self._states.get(key)
        if found is not None and found.config is config:
            return found
        with self._lock:
            found = self._states.get(key)
            if found is None or found.config is not config:
                if len(self._states) >= _MAX_KEYS:  # forget the breakers that hold nothing
                    for k in [k for k, s in self._states.items() if s.state == "closed" and not s.failures]:
                        del self._states[k]
                found = self._states[key] = _State(key, config)
            return found

    def _move(self, st: _State, to: StateName, context: Any) -> None:
        st.state = to
        if self.on_transition is not None:
            try:
                self.on_transition(st.key, to, context)
            except Exception:
                internal_error("breaker.transition")

    def admit(self, provider: str, model: str | None, route: str | None,
              context: Any = None) -> Ticket | CircuitOpen | None:
        """A call is about to be sent: a `Ticket` to send it, a `CircuitOpen` to fail it fast (not
        raised), or None where no breaker applies."""
        config = self.table.resolve(model, route)
        if config is None:
            return None
        st = self._get((provider, model, route), config)
        with st.lock:
            fleet = shared.follow(st, self._move, context) if st.cell is not None else None
            if st.state == "closed":
                return Ticket(st, False)
            wait = self._wait(st, config, fleet)
            if wait is None:
                if st.state == "open":
                    self._move(st, "half_open", context)
                st.probing = True
                if st.cell is not None:
                    st.cell.probed = st.cell.applied
                return Ticket(st, True)
        return CircuitOpen(wait, st.key)

    def _wait(self, st: _State, config: Breaker, fleet: shared.View | None) -> float | None:
        """Seconds an open breaker tells a call to wait (under `st.lock`), or None: this call is
        the probe."""
        now = self.clock()
        if st.state == "open" and now < st.opened_at + config.cool_down:
            return st.opened_at + config.cool_down - now
        if st.probing:
            return config.cool_down
        if fleet is not None:
            return shared.fleet_wait(st, fleet, now)  # another worker probes (or will): this one stays open
        return None

    def ended(self, ticket: Ticket, outcome: Literal["failed", "succeeded"] | None, context: Any = None) -> None:
        """A call let through ended: a retryable failure, an answer, or neither (None)."""
        st = ticket.state
        with st.lock:
            if ticket.probe:
                st.probing = False
                if st.state != "half_open" or outcome is None:
                    return
                st.failures.clear()
                if outcome == "failed":
                    st.opened_at = self.clock()
                    self._move(st, "open", context)
                else:
                    self._move(st, "closed", context)
                if st.cell is not None:
                    shared.publish(st, "reopened" if outcome == "failed" else "closed")
                return
            if outcome != "failed" or st.state != "closed":
                return  # the probe decides a half-open breaker; an open one counts nothing
            now = self.clock()
            st.failures.append(now)
            if len(st.failures) >= st.config.failures and now - st.failures[0] <= st.config.window:
                st.failures.clear()
                st.opened_at = now
                self._move(st, "open", context)
                if st.cell is not None:
                    shared.publish(st, "opened")


def verdict(code: str | None, answered: bool) -> Literal["failed", "succeeded"] | None:
    """What a finished call says of its provider: `failed` for a retryable failure code, `succeeded`
    for an answer (no code, the final event reached), else None (a cancel, a refusal by the
    provider of this request, an internal error, a fast-failed call)."""
    if code in FAILED_CODES:
        return "failed"
    if code is None and answered:
        return "succeeded"
    return None
