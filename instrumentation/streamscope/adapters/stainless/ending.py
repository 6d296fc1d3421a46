"""How a stream's record ends, whichever way out, and what the exception that ended it says.

One path out: the stream's end, an exception, a budget, `close`, a dropped stream (its
finalizer), a cancel all call `core.calls.end()` (or `end_with()` here, for an exception), which
ends the record once (`StreamRecorder.finish`, which also stops the budgets' watch) and never
raises into the caller. `ending()` is what every Stainless SDK's exceptions say alike; an adapter
adds only how its own API errors name their type. An exception's own name is its module-qualified
class name (`core.errors.exception_type`), as OpenTelemetry writes it: `httpx2.RemoteProtocolError`,
a builtin bare.
"""

from __future__ import annotations

from collections.abc import Callable

from streamscope.adapters.providers import retry_decision
from streamscope.core import failures
from streamscope.core.calls import end
from streamscope.core.errors import CircuitOpen, StreamTimeout, exception_type
from streamscope.core.failures import CANCELLED, Failure
from streamscope.core.guard import internal_error
from streamscope.core.record import End
from streamscope.core.recorder import StreamRecorder

Ending = tuple[End, str | None, str | None]
"""(end, error type, budget fired)."""


def end_with(rec: StreamRecorder, exc: BaseException, ending: Callable[[BaseException], Ending]) -> None:
    """The stream ended with `exc`, as the SDK's adapter reads it (`Spec.ending`), with the failure
    code the retry line decides for the same exception. Never raises."""
    try:
        how, error_type, budget = ending(exc)
        failure = retry_decision(exc)
        end(rec, how, error_type, budget, code=failure.code if failure is not None else None, exc=exc)
    except Exception:
        internal_error("adapter.fail")


def is_read_timeout(exc: BaseException) -> bool:
    """A transport's read timeout: httpx2's, or httpx's where the caller brought an httpx client."""
    return any(cls.__name__ == "ReadTimeout" for cls in type(exc).__mro__)


def is_transport_error(exc: BaseException) -> bool:
    """One of the transport's own errors: httpx2's (anthropic >= 1, openai >= 3) or httpx's (the
    older lines), whichever the installed SDK reads through; neither needs to be importable."""
    return any(cls.__name__ == "TransportError" and cls.__module__.partition(".")[0] in ("httpx", "httpx2")
               for cls in type(exc).__mro__)


def transport_failure(exc: BaseException, connection_error: type[BaseException]) -> Failure | None:
    """A failure of the connection (the SDK's wrapped one, or the transport's own mid-stream): a
    read timeout is a timeout (the SDK's `APITimeoutError` with no transport cause too), anything
    else unreachable (a connect timeout included). None for any other exception."""
    if not (isinstance(exc, connection_error) or is_transport_error(exc)):
        return None
    if isinstance(exc, connection_error) and exc.__cause__ is not None:
        return failures.TIMED_OUT if is_read_timeout(exc.__cause__) else failures.UNREACHABLE
    timed_out = is_read_timeout(exc) or type(exc).__name__ == "APITimeoutError"
    return failures.TIMED_OUT if timed_out else failures.UNREACHABLE


def ending(exc: BaseException, connection_error: type[BaseException],
           api_error_type: Callable[[BaseException], str | None]) -> Ending:
    """What an exception that ended a stream says, for an SDK whose transport failures come wrapped
    in `connection_error` (their cause is the transport's) and whose own API errors
    `api_error_type` names (None for any other exception)."""
    if isinstance(exc, StreamTimeout):
        return "error", None, exc.budget
    if isinstance(exc, CANCELLED):
        return "cancelled", None, None
    if isinstance(exc, CircuitOpen):
        return "error", "circuit_open", None
    cause: BaseException = exc
    if isinstance(exc, connection_error) and exc.__cause__ is not None:
        cause = exc.__cause__
    if is_read_timeout(cause):
        return "error", None, "read_timeout"
    return "error", api_error_type(exc) or exception_type(cause), None
