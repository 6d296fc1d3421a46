"""`DeadlineMiddleware` and `deadline_headers()` behind a real uvicorn server, over real HTTP.

The endpoint streams its body in several chunks and reports what `current_deadline()` was at the
start and at the end of the body: the deadline must hold, unchanged, until the last byte. The
server runs in this process, so the test and the app share the `time.monotonic()` clock; bounds
are causal (between the send and the answer), never tight wall-clock ones.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import math
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx2
import pytest
from served import serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Mount, Route

from streamscope import deadline
from streamscope.core.context import current_deadline
from streamscope.serve import DeadlineMiddleware, deadline_headers

CALLS: list[str] = []  # the `tag` query parameter of every request that reached the app
GATE = threading.Event()  # the /gated body waits for it between its first and last chunk


async def streamed(request: Request) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        yield line(start=current_deadline(), headers=deadline_headers(grpc=True))
        for i in range(3):
            await asyncio.sleep(0.05)
            yield line(chunk=i)
        yield line(end=current_deadline())

    return StreamingResponse(body(), media_type="application/x-ndjson")


async def gated(request: Request) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        yield line(first=True)
        released = await asyncio.to_thread(GATE.wait, 20)
        yield line(released=released)

    return StreamingResponse(body(), media_type="application/x-ndjson")


async def entered_in_handler(request: Request) -> StreamingResponse:
    """`deadline()` entered by the handler, left when the body ends: in the body's task, another Context."""
    block = deadline(5)
    block.__enter__()

    async def body() -> AsyncIterator[bytes]:
        yield line(inside=current_deadline())
        await asyncio.sleep(0.05)
        block.__exit__(None, None, None)
        yield line(after=current_deadline())

    return StreamingResponse(body(), media_type="application/x-ndjson")


def line(**fields: Any) -> bytes:
    return json.dumps(fields).encode() + b"\n"


def counted(app: Any) -> Any:
    async def asgi(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            CALLS.append(scope["query_string"].decode())
        await app(scope, receive, send)

    return asgi


INNER = counted(Starlette(routes=[Route("/stream", streamed), Route("/gated", gated),
                                      Route("/handler", entered_in_handler)]))
APP = Starlette(routes=[
    Mount("/plain", app=DeadlineMiddleware(INNER)),
    Mount("/grpc", app=DeadlineMiddleware(INNER, grpc=True)),
    Mount("/custom", app=DeadlineMiddleware(INNER, "X-Deadline-Ms", envoy=False, margin=0.5, margin_fraction=0)),
    Mount("/fallback", app=DeadlineMiddleware(INNER, default=30)),
])


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with serving(APP) as url:
        yield url


class Seen:
    """One request: its tag, the monotonic times around it, the response and its body's lines."""

    def __init__(self, base_url: str, path: str, headers: dict[str, str]) -> None:
        self.tag = uuid.uuid4().hex
        self.sent = time.monotonic()
        with httpx2.Client(timeout=20) as client:
            self.response = client.get(f"{base_url}{path}?tag={self.tag}", headers=headers)
        self.answered = time.monotonic()
        self.lines = [json.loads(x) for x in self.response.text.splitlines()] if self.response.is_success else []

    @property
    def called(self) -> bool:
        return f"tag={self.tag}" in CALLS

    def deadline(self) -> float | None:
        """The deadline the body saw: the same at its start and at its end."""
        assert len(self.lines) == 5, self.lines
        start, end = self.lines[0]["start"], self.lines[-1]["end"]
        assert start == end
        return start

    def assert_deadline(self, seconds: float) -> None:
        """Set `seconds` after the request arrived (between its sending and its answer)."""
        at = self.deadline()
        assert at is not None
        assert self.sent + seconds - 1e-6 <= at <= self.answered + seconds + 1e-6


def get(base_url: str, path: str = "/plain/stream", **headers: str) -> Seen:
    return Seen(base_url, path, {k.replace("_", "-"): v for k, v in headers.items()})


def test_the_deadline_holds_for_the_whole_streamed_body(base_url: str) -> None:
    seen = get(base_url, request_timeout_ms="20000")
    assert seen.response.status_code == 200 and seen.called
    seen.assert_deadline(20 - 1.0)  # the margin: max(0.1 s, 5% of 20 s)
    assert [x.get("chunk") for x in seen.lines[1:4]] == [0, 1, 2]


def test_a_decimal_value_and_the_fixed_margin(base_url: str) -> None:
    get(base_url, request_timeout_ms="1500.5").assert_deadline(1.5005 - 0.1)  # 5% of 1.5 s < 0.1 s


def test_envoy_header(base_url: str) -> None:
    get(base_url, x_envoy_expected_rq_timeout_ms="8000").assert_deadline(8 - 0.4)


@pytest.mark.parametrize(("value", "seconds"), [
    ("10S", 10), ("9000m", 9), ("1M", 60), ("1H", 3600), ("7000000u", 7), ("00000012S", 12),
])
def test_grpc_timeout(base_url: str, value: str, seconds: float) -> None:
    get(base_url, "/grpc/stream", grpc_timeout=value).assert_deadline(seconds * 0.95)


def test_grpc_timeout_is_not_read_unless_asked(base_url: str) -> None:
    assert get(base_url, grpc_timeout="5S").deadline() is None
    seen = get(base_url, grpc_timeout="garbage")
    assert seen.response.status_code == 200 and seen.deadline() is None


def test_the_earliest_header_wins(base_url: str) -> None:
    headers = {"request_timeout_ms": "30000", "x_envoy_expected_rq_timeout_ms": "10000", "grpc_timeout": "20S"}
    get(base_url, "/grpc/stream", **headers).assert_deadline(10 * 0.95)
    get(base_url, "/grpc/stream", **{**headers, "grpc_timeout": "4S"}).assert_deadline(4 * 0.95)


def test_a_custom_header_name_and_margin(base_url: str) -> None:
    get(base_url, "/custom/stream", x_deadline_ms="10000").assert_deadline(10 - 0.5)
    others = get(base_url, "/custom/stream", request_timeout_ms="1000", x_envoy_expected_rq_timeout_ms="1000")
    assert others.deadline() is None  # neither is read there


def test_no_header_no_deadline(base_url: str) -> None:
    seen = get(base_url)
    assert seen.deadline() is None and seen.lines[0]["headers"] == {}


def test_no_header_the_default(base_url: str) -> None:
    get(base_url, "/fallback/stream").assert_deadline(30)  # the service's own budget: no margin taken
    get(base_url, "/fallback/stream", request_timeout_ms="5000").assert_deadline(5 - 0.25)


@pytest.mark.parametrize(("path", "header", "value"), [
    ("/plain/stream", "request-timeout-ms", "abc"),
    ("/plain/stream", "request-timeout-ms", "-5"),
    ("/plain/stream", "request-timeout-ms", "NaN"),
    ("/plain/stream", "request-timeout-ms", "inf"),
    ("/plain/stream", "request-timeout-ms", "1e3"),
    ("/plain/stream", "request-timeout-ms", "1_000"),
    ("/plain/stream", "request-timeout-ms", "12345678901"),
    ("/plain/stream", "request-timeout-ms", ""),
    ("/plain/stream", "x-envoy-expected-rq-timeout-ms", "soon"),
    ("/grpc/stream", "grpc-timeout", "123456789m"),
    ("/grpc/stream", "grpc-timeout", "6000000000n"),
    ("/grpc/stream", "grpc-timeout", "100"),
    ("/grpc/stream", "grpc-timeout", "10s"),
    ("/grpc/stream", "grpc-timeout", "-1S"),
    ("/grpc/stream", "grpc-timeout", "1.5S"),
])
def test_a_malformed_header_is_a_400(base_url: str, path: str, header: str, value: str) -> None:
    seen = Seen(base_url, path, {header: value, "x-request-id": "req-42"})
    assert seen.response.status_code == 400 and not seen.called
    assert seen.response.headers["content-type"] == "application/json"
    assert seen.response.headers["x-request-id"] == "req-42"
    body = seen.response.json()
    assert body.keys() == {"code", "detail", "request_id"}
    assert body["code"] == "bad_request" and body["request_id"] == "req-42"
    assert header in body["detail"] and "expected" in body["detail"] and "\n" not in body["detail"]
    assert "Traceback" not in seen.response.text


@pytest.mark.parametrize(("path", "headers"), [
    ("/plain/stream", {"request-timeout-ms": "0"}),
    ("/plain/stream", {"request-timeout-ms": "100"}),  # exactly the margin: nothing left
    ("/plain/stream", {"request-timeout-ms": "60000", "x-envoy-expected-rq-timeout-ms": "40"}),
    ("/grpc/stream", {"grpc-timeout": "0m"}),
    ("/grpc/stream", {"grpc-timeout": "90000u"}),
    ("/grpc/stream", {"grpc-timeout": "99999999n"}),  # 8 digits of nanoseconds never exceed 0.1 s
])
def test_expired_on_arrival_is_a_504_without_calling_the_app(base_url: str, path: str,
                                                               headers: dict[str, str]) -> None:
    seen = Seen(base_url, path, {**headers, "x-request-id": "req-7"})
    assert seen.response.status_code == 504 and not seen.called
    assert seen.response.json() == {"code": "upstream_timeout", "request_id": "req-7"}
    assert seen.response.headers["x-request-id"] == "req-7"


def test_a_request_id_is_minted_when_none_is_sent(base_url: str) -> None:
    seen = get(base_url, request_timeout_ms="0")
    assert seen.response.status_code == 504 and not seen.called
    request_id = seen.response.json()["request_id"]
    assert seen.response.headers["x-request-id"] == request_id
    assert uuid.UUID(hex=request_id).version == 4 and len(request_id) == 32


def test_deadline_headers_inside_the_request(base_url: str) -> None:
    seen = get(base_url, request_timeout_ms="20000")
    headers = seen.lines[0]["headers"]
    assert headers.keys() == {"request-timeout-ms", "grpc-timeout"}
    ms = int(headers["request-timeout-ms"])
    took = math.ceil((seen.answered - seen.sent) * 1000)
    assert 19000 - took - 1 <= ms <= 19000
    assert headers["grpc-timeout"].endswith("m") and abs(int(headers["grpc-timeout"][:-1]) - ms) <= took + 1


def test_the_streamed_body_is_not_buffered(base_url: str) -> None:
    """The first chunk arrives while the last one waits for the test: nothing holds the body back."""
    GATE.clear()
    with httpx2.Client(timeout=20) as client, client.stream(
        "GET", f"{base_url}/plain/gated", headers={"request-timeout-ms": "30000"}
    ) as response:
        chunks = response.iter_lines()
        assert json.loads(next(chunks)) == {"first": True}
        assert not GATE.is_set()
        GATE.set()
        assert json.loads(next(chunks)) == {"released": True}


def test_a_deadline_left_in_another_task_than_the_handler(base_url: str) -> None:
    """Left in the body's task, the handler's `deadline(5)` gives the middleware's back, never a ValueError."""
    seen = get(base_url, "/plain/handler", request_timeout_ms="20000")
    assert seen.response.status_code == 200
    inside, after = seen.lines[0]["inside"], seen.lines[1]["after"]
    assert seen.sent + 5 <= inside <= seen.answered + 5
    assert seen.sent + 19 <= after <= seen.answered + 19


def test_deadline_headers_outside_a_request() -> None:
    assert deadline_headers() == {}
    with deadline(5):
        headers = deadline_headers("x-deadline-ms", grpc=True)
        assert headers.keys() == {"x-deadline-ms", "grpc-timeout"} and 0 < int(headers["x-deadline-ms"]) <= 5000
    with deadline(0.01):
        time.sleep(0.05)
        assert deadline_headers(grpc=True) == {"request-timeout-ms": "0", "grpc-timeout": "0m"}  # never negative
    with deadline(200_000):  # 2e8 ms does not fit gRPC's 8 digits: seconds
        grpc = deadline_headers(grpc=True)["grpc-timeout"]
        assert grpc.endswith("S") and 199_000 <= int(grpc[:-1]) <= 200_000


async def test_other_scopes_pass_through_untouched() -> None:
    seen: list[tuple[Any, Any, Any]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append((scope, receive, send))

    async def receive() -> dict[str, Any]:
        return {"type": "lifespan.startup"}

    async def send(message: Any) -> None:
        raise AssertionError("the middleware answered by itself")

    middleware = DeadlineMiddleware(app, grpc=True)
    for kind in ("lifespan", "websocket"):
        scope = {"type": kind, "headers": [(b"request-timeout-ms", b"garbage"), (b"grpc-timeout", b"0m")]}
        await middleware(scope, receive, send)
        assert seen[-1] == (scope, receive, send)
        assert scope == {"type": kind, "headers": [(b"request-timeout-ms", b"garbage"), (b"grpc-timeout", b"0m")]}


@pytest.mark.parametrize("kwargs", [
    {"margin": -1}, {"margin": math.nan}, {"margin": math.inf}, {"margin_fraction": 1}, {"margin_fraction": -0.1},
    {"default": 0}, {"default": -3}, {"default": math.nan},
])
def test_bad_settings_fail_at_construction(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        DeadlineMiddleware(INNER, **kwargs)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"heder": "x"}, "DeadlineMiddleware() got an unexpected keyword argument 'heder' (did you mean 'header'?)"),
    ({"margin": "0.1"}, "DeadlineMiddleware(margin=...) takes seconds (a number), not str '0.1'"),
    ({"default": True}, "DeadlineMiddleware(default=...) takes seconds (a number) or None, not bool True"),
    ({"margin_fraction": None}, "DeadlineMiddleware(margin_fraction=...) takes a number, not NoneType None"),
    ({"envoy": "yes"}, "DeadlineMiddleware(envoy=...) takes True or False, not 'yes'"),
    ({"header": 5}, "DeadlineMiddleware(header=...) takes a header name or None, not 5"),
])
def test_a_wrong_type_or_keyword_is_a_one_line_type_error(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(TypeError) as raised:
        DeadlineMiddleware(INNER, **kwargs)
    assert str(raised.value).startswith(words) and "\n" not in str(raised.value)


def test_the_context_is_left_clean() -> None:
    """The test thread's context never sees a request's deadline (each request has its own)."""
    assert contextvars.copy_context().run(current_deadline) is None and current_deadline() is None
