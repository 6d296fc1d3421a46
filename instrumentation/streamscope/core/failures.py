"""Failure codes: one short, stable code per call that did not end normally, and whether to retry it.

A code is what a service may tell its own clients instead of provider text. It is decided where
retryability is decided, `adapters/providers.retry_decision(exc)` (by this table, with what the adapter
that knows the exception says), so a retry and a code never disagree: both are fields of one
`Failure`. The adapters say what their SDK's exceptions and in-band error types mean
(`Helpers.failure`), in the terms of the decision table below; a record that ended without an
exception (a budget, a body cut short, a caller that left) gets its code from `code_of(record)`.

| what happened | code | retried (before the first content, inside the deadline) |
|---|---|---|
| HTTP 429, in-band `rate_limit_error` | `rate_limited` | yes, after at least `Retry-After` |
| HTTP 5xx and 529, in-band `overloaded_error` / `api_error` | `upstream_unavailable` | yes |
| a budget fired before the first content, HTTP 408/409, a read timeout | `upstream_timeout` | yes |
| the idle or deadline budget fired | `upstream_timeout` | no |
| a connection failed, was reset or dropped; a body without its final event | `upstream_unreachable` | yes |
| any other 4xx, an in-band error of another type | `upstream_rejected` | no |
| the breaker for the provider and model is open | `circuit_open` | no |
| anything else | `internal_error` | no |
| the caller closed, abandoned or cancelled (no deadline expired); a normal end | none | no |
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

if TYPE_CHECKING:
    from .errors import StreamTimeout
    from .record import StreamRecord

Code = Literal["rate_limited", "upstream_unavailable", "upstream_timeout", "upstream_unreachable",
               "upstream_rejected", "circuit_open", "internal_error"]
CODES: Final[tuple[Code, ...]] = ("rate_limited", "upstream_unavailable", "upstream_timeout", "upstream_unreachable",
                                  "upstream_rejected", "circuit_open", "internal_error")
RequestCode = Literal["idempotency_key_reused", "request_in_progress"]
"""The relay's refusals of a browser's request itself (no provider request is made): its
`Idempotency-Key` names another request, or the same request is still starting elsewhere."""
REQUEST_CODES: Final[tuple[RequestCode, ...]] = ("idempotency_key_reused", "request_in_progress")
HTTP_STATUS: Final[dict[str, int]] = {
    "rate_limited": 429, "upstream_unavailable": 503, "upstream_timeout": 504, "upstream_unreachable": 503,
    "upstream_rejected": 502, "circuit_open": 503, "internal_error": 500,
    "idempotency_key_reused": 422, "request_in_progress": 409,
}
"""The status a service answers with when the failure comes before its response started."""
CANCELLED = (asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit)


@dataclass(frozen=True, slots=True)
class Failure:
    """What a failed call means for its caller: a code, whether another attempt may help, and the
    provider's `Retry-After` in seconds where it sent one."""

    code: Code | RequestCode
    retryable: bool
    retry_after: float | None = None


INTERNAL: Final = Failure("internal_error", False)
UNREACHABLE: Final = Failure("upstream_unreachable", True)
TIMED_OUT: Final = Failure("upstream_timeout", True)


def for_status(status: int, retry_after: float | None = None) -> Failure:
    """An HTTP error status from the provider."""
    if status == 429:
        return Failure("rate_limited", True, retry_after)
    if status >= 500:
        return Failure("upstream_unavailable", True, retry_after)
    if status in (408, 409):
        return Failure("upstream_timeout", True, retry_after)
    return Failure("upstream_rejected", False)


def budget_fired(exc: StreamTimeout) -> Failure:
    """A budget's firing (whatever else the exception is: on an SDK's call, also its timeout error):
    a timeout, retried only as a first-token stall before any content."""
    return Failure("upstream_timeout", exc.budget == "first_token" and not exc.partial)


def in_band(status: int | None) -> Failure:
    """An error the provider sent inside the stream, by the HTTP status its type stands for (an
    adapter's table; None for a type it does not know: the provider's trouble, not worth repeating)."""
    return for_status(status) if status is not None else Failure("upstream_rejected", False)


def code_of(record: StreamRecord) -> str | None:
    """The code of a finished call: the one its exception or in-band error was given, or what its
    end says where nothing raised (a budget, a read timeout, a caller past its deadline: a timeout;
    a body that ended without its final event: unreachable). None for a normal end or a caller
    that left before its deadline."""
    if record.budget_fired is not None:
        return "upstream_timeout"
    if record.end == "error":
        return record.failure_code or "internal_error"
    if record.completed and record.finish_reason is not None:
        return None
    if record.end in ("closed", "abandoned", "cancelled") and not record.completed:
        return None
    return "upstream_unreachable"
