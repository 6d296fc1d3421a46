# ruff: noqa: F811 - the fixtures `on` and `sim` come from test_relay
"""Idempotency keys and cancels, over real HTTP, on one worker (`MemoryBuffer`) and on two workers
sharing a real Redis (`RedisBuffer`): the same request again follows the answer it started (on
whichever worker), a key used for another request is refused, a request that started nothing
gives its key back, a repeat of a request still starting elsewhere gets 409, and a cancel stops
the generation at once, on whichever worker runs it.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
import redis as redis_py
from relay_app import opener
from served import Sse, SseParser, serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from test_relay import on, requests_for  # noqa: F401 - fixtures

from redis_server import RedisServer
from streamscope.serve import MemoryBuffer, RedisBuffer, relay
from streamscope.serve.buffers.redis_keys import claim_key
from streamscope.serve.idempotency import fingerprint
from streamscope.simulator import Scenario, Simulator, TextSpec, message_stream
from streamscope.simulator.catalog import LONG, words

GRACE = 30.0
"""Long: a generation that ends sooner than this was stopped by a cancel, not by its grace."""
LATE = "idem_late_first"
"""A first token 1.5 s after the request: a repeat arrives while the first waits for it."""
PATH = "/relay/anthropic/create/"


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        simulator.add(Scenario.single(LATE, message_stream(blocks=[TextSpec(words(LONG)[:12], first_delay=1.5,
                                                                            interval=0.05)])))
        yield simulator


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def worker_app(simulator: Simulator, buffer: Any) -> Any:
    async def relayed(request: Request) -> Response:
        p, q = request.path_params, request.query_params
        return await relay(request, opener(simulator, p["sdk"], p["shape"], p["scenario"], q),
                           heartbeat=float(q.get("heartbeat", "15")), attempts=int(q.get("attempts", "3")),
                           resume=None if q.get("resume") == "0" else buffer)

    return Starlette(routes=[Route("/relay/{sdk}/{shape}/{scenario}", relayed, methods=["GET", "POST"])])


@pytest.fixture(scope="module", params=["memory", "redis"])
def fleet(request: Any, sim: Simulator, redis: RedisServer) -> Iterator[tuple[str, str, Any]]:
    """Two URLs: the same worker twice (memory), or two workers sharing Redis."""
    if request.param == "memory":
        buffer = MemoryBuffer(grace=GRACE)
        with serving(worker_app(sim, buffer)) as url:
            yield url, url, buffer
        return
    a, b = RedisBuffer(redis.url, grace=GRACE), RedisBuffer(redis.url, grace=GRACE)
    with serving(worker_app(sim, a)) as url_a, serving(worker_app(sim, b)) as url_b:
        yield url_a, url_b, b


class Got:
    def __init__(self, status: int, headers: Any, events: list[Sse], body: str) -> None:
        self.status, self.headers, self.events, self.body = status, headers, events, body

    @property
    def tokens(self) -> list[str]:
        return [e.json["text"] for e in self.events if e.event == "token"]


def ask(base: str, path: str, key: str | None, headers: dict[str, str] | None = None, *, method: str = "GET",
        body: bytes = b"", stop_after: int | None = None) -> Got:
    """One request as the browser client sends it (`Idempotency-Key`); `stop_after` tokens: it leaves."""
    sent = {**({"Idempotency-Key": key} if key else {}), **(headers or {})}
    parser = SseParser()
    text = ""
    with httpx2.Client(timeout=30) as client, \
            client.stream(method, base + path, headers=sent, content=body) as response:
        for piece in response.iter_text():
            text += piece
            parser.feed(piece)
            if stop_after is not None and sum(e.event == "token" for e in parser.events) >= stop_after:
                break
    return Got(response.status_code, response.headers, parser.events, text)


def whole(got: Got) -> None:
    assert got.status == 200 and got.events[-1].event == "done", (got.status, got.body[:300])
    rid = got.events[0].id.split(":")[0]  # type: ignore[union-attr]
    assert [e.id for e in got.events] == [f"{rid}:{n}" for n in range(1, len(got.events) + 1)]


def test_the_same_request_again_follows_the_answer_it_started(fleet: Any, sim: Simulator, on: Any) -> None:
    url_a, url_b, _ = fleet
    state = on()
    since, key = len(sim.requests), str(uuid.uuid4())
    first = ask(url_a, PATH + "slow_answer", key, stop_after=3)  # the page is reloaded here
    again = ask(url_b, PATH + "slow_answer", key)
    whole(again)
    assert again.headers["x-request-id"] == first.headers["x-request-id"]
    assert len(again.tokens) == 30 and again.tokens[:3] == first.tokens, "the answer from its first token"
    assert len(requests_for(sim, "slow_answer", since)) == 1, "no second provider request"
    if url_a == url_b:  # another worker's delivery is learnt at the end of the grace (30 s here)
        [record] = state.wait_for_log()
        assert record.__dict__["outcome"] == "done" and record.__dict__["resumes"] == 1


def test_a_repeat_while_the_first_waits_for_its_first_content_follows_it(fleet: Any, sim: Simulator) -> None:
    url_a, url_b, _ = fleet
    since, key = len(sim.requests), str(uuid.uuid4())
    got: list[Got] = []
    first = threading.Thread(target=lambda: got.append(ask(url_a, PATH + LATE, key)))
    first.start()
    time.sleep(0.4)  # the first request waits 1.5 s for its first token
    again = ask(url_b, PATH + LATE, key)
    first.join(30)
    whole(again)
    whole(got[0])
    assert [e.data for e in again.events] == [e.data for e in got[0].events]
    assert len(requests_for(sim, LATE, since)) == 1, "one generation for the two"


def test_a_key_used_for_another_request_is_refused(fleet: Any, sim: Simulator, on: Any) -> None:
    url_a, url_b, _ = fleet
    state = on()
    key = str(uuid.uuid4())
    whole(ask(url_a, PATH + "complete", key, method="POST", body=b'{"q": "one"}'))
    since = len(sim.requests)
    other = ask(url_b, PATH + "complete", key, method="POST", body=b'{"q": "two"}')
    assert other.status == 422 and '"code": "idempotency_key_reused"' in other.body.replace('":"', '": "')
    assert not requests_for(sim, "complete", since), "nothing opened"
    counted = {(p.attributes.get("streamscope.failure.code"), p.attributes["http.response.status_code"])
               for p in state.points("streamscope.relay.streams")}
    assert ("idempotency_key_reused", 422) in counted


def test_a_request_refused_before_its_stream_gives_its_key_back(fleet: Any, sim: Simulator) -> None:
    url_a, url_b, _ = fleet
    since, key = len(sim.requests), str(uuid.uuid4())
    first = ask(url_a, PATH + "http_529?attempts=1", key)
    assert first.status == 503
    tries = len(requests_for(sim, "http_529", since))  # the SDK's own retries
    time.sleep(0.3)  # the key is given back from a task of its own
    again = ask(url_b, PATH + "http_529?attempts=1", key)
    assert again.status == 503 and '"upstream_unavailable"' in again.body, "tried again, not 409 or 204"
    assert len(requests_for(sim, "http_529", since)) == 2 * tries


def test_a_repeat_of_a_request_still_starting_elsewhere_is_409(fleet: Any, redis: RedisServer, sim: Simulator) -> None:
    url_a, _, buffer = fleet
    key, path = str(uuid.uuid4()), PATH + "complete?heartbeat=0.5"
    scope = {"type": "http", "method": "GET", "path": PATH + "complete", "query_string": b"heartbeat=0.5",
             "headers": []}

    async def body() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    printed = asyncio.run(fingerprint(Request(scope, body)))
    if isinstance(buffer, MemoryBuffer):  # a request of this worker that never got its first content
        asyncio.run(buffer.claim(key, printed, "elsewhere", 30.0))
    else:  # a worker that claimed the key and died before its first content
        redis_py.Redis.from_url(redis.url).set(claim_key(key), f"{printed} elsewhere", px=30_000)
    since = len(sim.requests)
    started = time.monotonic()
    got = ask(url_a, path, key)
    assert got.status == 409 and '"request_in_progress"' in got.body and got.headers["retry-after"] == "1"
    assert time.monotonic() - started >= 0.5, "it waited for the first request's generation first"
    assert not requests_for(sim, "complete", since)


def test_a_cancel_stops_the_generation_on_any_worker(fleet: Any, sim: Simulator, on: Any) -> None:
    url_a, url_b, _ = fleet
    state = on()
    since, key = len(sim.requests), str(uuid.uuid4())
    ask(url_a, PATH + "slow_answer", key, stop_after=2)  # abort(): the fetch first, then the cancel
    cancelled = ask(url_b, PATH + "slow_answer", key, {"Streamscope-Cancel": "1"})
    sent = time.monotonic()
    assert cancelled.status == 204 and cancelled.headers["streamscope-cancel"] == "cancelled"
    [upstream] = requests_for(sim, "slow_answer", since)
    log = sim.wait_for_outcome(sim.requests.index(upstream), timeout=15)
    assert log.outcome == "disconnected" and log.ended is not None
    assert log.ended - sent < 5.0, f"closed {log.ended - sent:.1f} s after the cancel (the grace is {GRACE} s)"
    [record] = state.wait_for_log()
    assert record.__dict__["outcome"] == "client_disconnect"
    assert ask(url_b, PATH + "slow_answer", key, {"Streamscope-Cancel": "1"}).headers["streamscope-cancel"] == (
        "nothing_to_cancel")
    again = ask(url_a, PATH + "slow_answer", key, stop_after=1)
    assert again.status == 200 and len(requests_for(sim, "slow_answer", since)) == 2, "a cancelled answer starts anew"


def test_a_cancel_without_the_body_stops_the_generation_its_last_event_id_names(fleet: Any, sim: Simulator) -> None:
    url_a, url_b, _ = fleet
    since, key = len(sim.requests), str(uuid.uuid4())
    first = ask(url_a, PATH + "slow_answer", key, method="POST", body=b'{"q": "long"}', stop_after=2)
    last = first.events[-1].id
    assert last is not None
    cancelled = ask(url_b, PATH + "slow_answer", key, {"Streamscope-Cancel": "1", "Last-Event-ID": last},
                    method="POST")  # a page too large to send its body again as it closes
    assert cancelled.headers["streamscope-cancel"] == "cancelled"
    [upstream] = requests_for(sim, "slow_answer", since)
    assert sim.wait_for_outcome(sim.requests.index(upstream), timeout=15).outcome == "disconnected"


def test_a_cancel_never_starts_a_generation(fleet: Any, sim: Simulator) -> None:
    url_a, _, _ = fleet
    since = len(sim.requests)
    for headers in ({"Streamscope-Cancel": "1"}, {"Streamscope-Cancel": "1", "Last-Event-ID": "nope:3"}):
        got = ask(url_a, PATH + "complete", str(uuid.uuid4()), headers)
        assert got.status == 204 and got.headers["streamscope-cancel"] == "nothing_to_cancel"
    got = ask(url_a, PATH + "complete?resume=0", str(uuid.uuid4()), {"Streamscope-Cancel": "1"})
    assert got.status == 204 and got.headers["streamscope-cancel"] == "resume_off"
    assert not requests_for(sim, "complete", since)


def test_without_resume_the_key_is_not_looked_at(fleet: Any, sim: Simulator) -> None:
    url_a, _, _ = fleet
    since, key = len(sim.requests), str(uuid.uuid4())
    for _ in range(2):
        whole(ask(url_a, PATH + "complete?resume=0", key))
    assert len(requests_for(sim, "complete", since)) == 2


def test_a_key_that_is_not_one_runs_without_one(fleet: Any, sim: Simulator) -> None:
    url_a, _, _ = fleet
    since = len(sim.requests)
    for _ in range(2):
        whole(ask(url_a, PATH + "complete", "x" * 300))
    assert len(requests_for(sim, "complete", since)) == 2


def test_the_fingerprint_is_method_path_query_and_body() -> None:
    def printed(method: str, path: str, query: bytes, body: bytes) -> str:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        scope = {"type": "http", "method": method, "path": path, "query_string": query, "headers": []}
        return asyncio.run(fingerprint(Request(scope, receive)))

    base = printed("POST", "/chat", b"a=1", b"{}")
    assert base == printed("POST", "/chat", b"a=1", b"{}")
    assert len({base, printed("GET", "/chat", b"a=1", b"{}"), printed("POST", "/chat2", b"a=1", b"{}"),
                printed("POST", "/chat", b"a=2", b"{}"), printed("POST", "/chat", b"a=1", b"[]")}) == 5
    assert len(base) == len(hashlib.sha256().hexdigest())
