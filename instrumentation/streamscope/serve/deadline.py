"""The caller's time left, in and out: `DeadlineMiddleware` reads it, `deadline_headers()` passes it on.

Each hop receives a duration, not an instant (the hosts' clocks differ), and keeps a margin of it
for itself: the budget shrinks along the chain, so the innermost call fails first and every outer
layer still has time to answer its caller with a clean error rather than being cut off.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections.abc import Callable

from starlette.types import ASGIApp, Receive, Scope, Send

from streamscope.core.context import current_deadline, deadline
from streamscope.core.keywords import checked_class, real_number

HEADER = "request-timeout-ms"
ENVOY_HEADER = "x-envoy-expected-rq-timeout-ms"
GRPC_HEADER = "grpc-timeout"

_MS = re.compile(r"[0-9]{1,10}(?:\.[0-9]+)?")  # at most 10 integer digits (115 days), as Connect-Timeout-Ms
_GRPC = re.compile(r"([0-9]{1,8})([HMSmun])")  # the gRPC over HTTP/2 spec: at most 8 digits and a unit
_GRPC_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_MS_FORMAT = "milliseconds left, digits with an optional decimal part (e.g. 2500 or 2500.5)"
_GRPC_FORMAT = "at most 8 digits and a unit H, M, S, m, u or n (e.g. 100m)"

_Reader = Callable[[str], float | None]


@checked_class
class DeadlineMiddleware:
    """Runs each HTTP request, streamed body included, under `deadline(time left - margin)`.

    A pure ASGI middleware: it wraps the whole `await app(...)` call, so the deadline holds until
    the last byte of a streamed body, and it never buffers the body.

    Reads the time left from `header` (milliseconds; default `request-timeout-ms`, None to skip
    it), Envoy's `x-envoy-expected-rq-timeout-ms` (milliseconds; `envoy=True`: a proxy that sets it
    also cuts the request then) and gRPC's `grpc-timeout` (`grpc=False`: only gRPC tooling sends it).
    `request-timeout-ms` rather than `x-deadline-ms` or `x-request-timeout-ms`: it carries a
    duration, as `grpc-timeout`, Envoy's header and Connect's `connect-timeout-ms` do ("deadline"
    reads as an instant, "connect" as the TCP connect), and new headers drop `x-` (RFC 6648).

    The earliest of the headers sent wins. The margin kept is `max(margin, margin_fraction × time
    left)`: 0.1 s covers writing the error and its trip back; 5% grows with long budgets without
    taking much generation time from them (60 s keeps 3 s). No header: `default` seconds, or none.
    A malformed header is answered 400 `bad_request` and time left ≤ margin 504 `upstream_timeout`,
    both at once, without calling the app.
    """

    def __init__(self, app: ASGIApp, header: str | None = HEADER, *, envoy: bool = True, grpc: bool = False,
                 margin: float = 0.1, margin_fraction: float = 0.05, default: float | None = None) -> None:
        if header is not None and not isinstance(header, str):
            raise TypeError(f"DeadlineMiddleware(header=...) takes a header name or None, not {header!r}")
        for name, flag in (("envoy", envoy), ("grpc", grpc)):
            if not isinstance(flag, bool):
                raise TypeError(f"DeadlineMiddleware({name}=...) takes True or False, not {flag!r}")
        if not math.isfinite(real_number("DeadlineMiddleware(margin=...)", margin, "seconds (a number)")) or margin < 0:
            raise ValueError(f"DeadlineMiddleware(margin=...) must be seconds >= 0, not {margin!r}")
        fraction = real_number("DeadlineMiddleware(margin_fraction=...)", margin_fraction, "a number")
        if not math.isfinite(fraction) or not 0 <= fraction < 1:
            raise ValueError(f"DeadlineMiddleware(margin_fraction=...) must be >= 0 and < 1, not {margin_fraction!r}")
        if default is not None and (not math.isfinite(real_number(
                "DeadlineMiddleware(default=...)", default, "seconds (a number) or None")) or default <= 0):
            raise ValueError(f"DeadlineMiddleware(default=...) must be seconds > 0 or None, not {default!r}")
        self.app = app
        self.margin, self.margin_fraction, self.default = float(margin), float(margin_fraction), default
        self._readers: dict[bytes, tuple[str, _Reader]] = {}
        if header is not None:
            self._readers[header.lower().encode("latin-1")] = (_MS_FORMAT, _milliseconds)
        if envoy:
            self._readers.setdefault(ENVOY_HEADER.encode(), (_MS_FORMAT, _milliseconds))
        if grpc:
            self._readers.setdefault(GRPC_HEADER.encode(), (_GRPC_FORMAT, _grpc_timeout))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = [(bytes(name).lower(), bytes(value).decode("latin-1").strip()) for name, value in scope["headers"]]
        request_id = next((value for name, value in headers if name == b"x-request-id" and value), None)
        left: float | None = None
        for name, text in headers:
            reader = self._readers.get(name)
            if reader is None:
                continue
            seconds = reader[1](text)
            if seconds is None:
                detail = f"malformed {name.decode('latin-1')} header {text[:32]!r}: expected {reader[0]}"
                await _answer(send, 400, {"code": "bad_request", "detail": detail}, request_id)
                return
            left = seconds if left is None else min(left, seconds)
        if left is None:
            if self.default is None:
                await self.app(scope, receive, send)
                return
            budget = float(self.default)
        else:
            budget = left - max(self.margin, self.margin_fraction * left)
            if budget <= 0:
                await _answer(send, 504, {"code": "upstream_timeout"}, request_id)
                return
        with deadline(budget):
            await self.app(scope, receive, send)


def deadline_headers(header: str | None = None, *, grpc: bool = False) -> dict[str, str]:
    """The headers that carry the time left now under `deadline()`, for the service's own calls.

    `header` (default `request-timeout-ms`) in whole milliseconds, rounded down so that the callee
    never gets more than there is; `grpc=True` adds `grpc-timeout`. 0 once expired, `{}` outside any
    `deadline()`. No margin is taken here: the receiving side keeps its own.
    """
    at = current_deadline()
    if at is None:
        return {}
    ms = max(0, math.floor((at - time.monotonic()) * 1000))
    headers = {header or HEADER: str(ms)}
    if grpc:
        headers[GRPC_HEADER] = _grpc_value(ms)
    return headers


def _milliseconds(text: str) -> float | None:
    return float(text) / 1000 if _MS.fullmatch(text) else None


def _grpc_timeout(text: str) -> float | None:
    match = _GRPC.fullmatch(text)
    return int(match[1]) * _GRPC_UNITS[match[2]] if match else None


def _grpc_value(ms: int) -> str:
    """`ms` in the finest unit that fits gRPC's 8 digits, rounded down."""
    for unit, per in (("m", 1), ("S", 1000), ("M", 60_000), ("H", 3_600_000)):
        if ms // per <= 99_999_999:
            return f"{ms // per}{unit}"
    return "99999999H"


async def _answer(send: Send, status: int, body: dict[str, str], request_id: str | None) -> None:
    """The whole answer at once, in the relay's JSON error shape, echoing or minting the request id."""
    rid = request_id or uuid.uuid4().hex
    data = json.dumps({**body, "request_id": rid}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()),
               (b"x-request-id", rid.encode("latin-1"))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})
