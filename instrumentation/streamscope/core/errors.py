"""The exceptions streamscope raises into user code: a budget fired, a breaker is open."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

if TYPE_CHECKING:
    from .record import RequestInfo

BudgetName = Literal["first_token", "idle", "deadline"]


class StreamTimeout(TimeoutError):
    """A streamscope budget fired while the caller was reading a stream.

    A subclass of `TimeoutError`, so code that already handles timeouts keeps working.
    `budget` says which budget fired; `partial` is true when the first content event had
    already reached the caller (what arrived is a fragment, not an answer).
    """

    def __init__(self, budget: BudgetName, partial: bool, after: float | None = None) -> None:
        self.budget = budget
        self.partial = partial
        self.after = after
        when = f" after {after:.3f} s" if after is not None else ""
        super().__init__(f"streamscope {budget} budget fired{when} (partial={partial})")

    @property
    def code(self) -> str:
        """The failure code (`streamscope.failure.code`): a budget firing is always `upstream_timeout`."""
        return "upstream_timeout"

    def __reduce__(self) -> tuple[type[StreamTimeout], tuple[BudgetName, bool, float | None]]:
        # Picklable with its attributes (the default would call __init__ with the message alone).
        return (type(self), (self.budget, self.partial, self.after))


class SDKTimeout(StreamTimeout):
    """What a `StreamTimeout` adds where it is also an SDK's own `APITimeoutError`: the base of
    the class each adapter makes once for its SDK (`sdk_timeout`), so that frameworks keyed on the
    SDK's errors (fallbacks, retries of network errors) treat a budget's firing as the SDK's timeout.

    Built as the SDK builds its own (its `request`, `message`, `body`, and whatever else its line
    sets), then as a `StreamTimeout`: `str()`, `message`, `code`, `budget`, `partial` and `after`
    are streamscope's. The SDK's class is the adapter's to give: core imports no SDK.
    """

    api_timeout_error: ClassVar[type[Exception]]
    """The SDK's `APITimeoutError`, the other base."""
    new_request: ClassVar[Callable[[str], object]]
    """A request of the SDK's HTTP library, `POST` to a URL: the stand-in where the real one is not at hand."""
    rebuilt: ClassVar[Callable[[BudgetName, bool, float | None], StreamTimeout]]
    """A module-level function of the adapter that makes one again (unpickling: the class itself is
    made at run time, so pickle cannot name it)."""
    message: str

    def __init__(self, budget: BudgetName, partial: bool, after: float | None = None, request: object = None) -> None:
        cls = type(self)
        cls.api_timeout_error.__init__(self, request if request is not None else cls.new_request(stand_in_url(None)))
        StreamTimeout.__init__(self, budget, partial, after)
        self.message = str(self)

    @classmethod
    def fired(cls, budget: BudgetName, partial: bool, after: float | None, *, call: RequestInfo | None = None,
              sent: object = None) -> SDKTimeout:
        """A budget fired on `call`, whose HTTP request (`sent`) the hooks may have kept; the
        stand-in names the call's server where they did not."""
        return cls(budget, partial, after, sent if sent is not None else cls.new_request(stand_in_url(call)))

    @property
    def code(self) -> str:
        """The failure code, `upstream_timeout`, as on every `StreamTimeout`."""
        return "upstream_timeout"

    @code.setter
    def code(self, value: object) -> None:
        """Ignored: the SDK's own `__init__` sets `code` (openai: the error body's, None here)."""

    def __reduce__(self) -> tuple[Any, tuple[BudgetName, bool, float | None]]:
        return (type(self).rebuilt, (self.budget, self.partial, self.after))


def sdk_timeout(api_timeout_error: type[Exception], new_request: Callable[[str], object],
                rebuilt: Callable[[BudgetName, bool, float | None], StreamTimeout], module: str) -> type[SDKTimeout]:
    """The `StreamTimeout` of one SDK's calls: also its `APITimeoutError` (and so its
    `APIConnectionError` and `APIError`), still a `TimeoutError`. Named `StreamTimeout`, in the
    adapter's `module`. Made once per SDK by its adapter (each call makes a new class)."""
    namespace = {"__module__": module, "__qualname__": "StreamTimeout", "__doc__": StreamTimeout.__doc__,
                 "api_timeout_error": api_timeout_error, "new_request": staticmethod(new_request),
                 "rebuilt": staticmethod(rebuilt)}
    return cast("type[SDKTimeout]", type("StreamTimeout", (SDKTimeout, api_timeout_error), namespace))


def stand_in_url(call: RequestInfo | None) -> str:
    """The URL an SDK timeout's stand-in request names: the call's server (`server.address`,
    `server.port`; no scheme where the port does not say it), or a host that cannot exist."""
    host = call.server_address if call is not None else None
    if not host:
        return "https://streamscope.invalid/"
    host = f"[{host}]" if ":" in host else host
    port = call.server_port if call is not None else None
    if port == 443:
        return f"https://{host}/"
    if port == 80:
        return f"http://{host}/"
    return f"//{host}:{port}/" if port is not None else f"//{host}/"


class CircuitOpen(ConnectionError):
    """The breaker for this provider and model (and route) is open: the call failed fast, and
    nothing was sent to the provider.

    A subclass of `ConnectionError`: to its caller the provider is as unreachable as when a
    connection is refused (code that already handles "cannot reach the service" keeps working),
    and it is not a `TimeoutError` (nothing was waited for). `code` is always `circuit_open`;
    `retry_after` is the seconds until the breaker lets its next probe call through (while a
    probe is in flight: its cool-down, the longest the probe can keep it open).
    """

    def __init__(self, retry_after: float, key: tuple[str, str | None, str | None] | None = None) -> None:
        self.retry_after = max(float(retry_after), 0.0)
        self.key = key
        where = f" for {key[0]} model {key[1]!r}" + (f" route {key[2]!r}" if key[2] is not None else "") if key else ""
        super().__init__(f"streamscope circuit breaker open{where}: failing fast, nothing sent "
                         f"(next probe in {self.retry_after:.3f} s)")

    @property
    def code(self) -> str:
        """The failure code (`streamscope.failure.code`): always `circuit_open`."""
        return "circuit_open"

    def __reduce__(self) -> tuple[type[CircuitOpen], tuple[float, tuple[str, str | None, str | None] | None]]:
        return (type(self), (self.retry_after, self.key))


def exception_type(exc: BaseException) -> str:
    """An exception's type as OpenTelemetry names it (the SDK's `record_exception`, and
    opentelemetry-util-genai's `error.type` and `exception.type`): `module.QualName`, a builtin's
    bare (`ValueError`). The SDKs and their transport give their public classes the package's
    name as their module (`anthropic.RateLimitError`, `httpx2.RemoteProtocolError`)."""
    cls = type(exc)
    module = cls.__module__
    return f"{module}.{cls.__qualname__}" if module and module != "builtins" else cls.__qualname__
