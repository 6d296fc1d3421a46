# ruff: noqa: F811 - the fixtures `sim` and `on` come from test_relay
"""Resume across a fleet on a real Redis (Debian's redis-server): a browser that drops reconnects
to another worker and gets the rest of the same generation; the owner killed mid-stream ends a
resume with one `error`; Redis down or stalled changes nothing for a stream but its resume.

Two workers in this process (two uvicorn servers, each with its own `RedisBuffer`, loop and local
generations) for what the metrics and spans must show; a worker in a process of its own for the
SIGKILL.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx2
import pytest
from relay_app import opener
from served import SseParser, serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from test_relay import get, on, requests_for, sim  # noqa: F401 - fixtures

from redis_server import RedisServer
from streamscope.serve import RedisBuffer, relay
from streamscope.serve.resume import RESUME_HEADER
from streamscope.simulator import Scenario, Simulator, TextSpec, message_stream
from streamscope.simulator.catalog import LONG, words

GRACE = 2.0


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


def worker_app(simulator: Simulator, buffer: RedisBuffer) -> Any:
    async def relayed(request: Request) -> Response:
        p, q = request.path_params, request.query_params
        return await relay(request, opener(simulator, p["sdk"], p["shape"], p["scenario"], q), resume=buffer)

    return Starlette(routes=[Route("/relay/{sdk}/{shape}/{scenario}", relayed)])


@pytest.fixture(scope="module")
def fleet(sim: Simulator, redis: RedisServer) -> Iterator[tuple[str, str, RedisBuffer, RedisBuffer]]:
    a = RedisBuffer(redis.url, grace=GRACE, ttl=30.0)
    b = RedisBuffer(redis.url, grace=GRACE, ttl=30.0)
    with serving(worker_app(sim, a)) as url_a, serving(worker_app(sim, b)) as url_b:
        yield url_a, url_b, a, b


def resume_points(state: Any) -> dict[str, int]:
    return {p.attributes["streamscope.resume.outcome"]: p.value for p in state.points("streamscope.relay.resumes")}


def store_errors(state: Any) -> dict[str, int]:
    return {p.attributes["streamscope.store.operation"]: p.value for p in state.points("streamscope.store.errors")}


@pytest.mark.parametrize("query", ["", "sync=1"])
def test_a_reconnect_to_another_worker_resumes_the_same_generation(fleet: Any, sim: Simulator, on: Any,
                                                                  query: str) -> None:
    url_a, url_b, _, _ = fleet
    state = on()
    since = len(sim.requests)
    first = get(url_a, f"/relay/anthropic/create/slow_answer?{query}", stop_after=3)
    rid = first.headers["x-request-id"]
    time.sleep(0.5)
    again = get(url_b, f"/relay/anthropic/create/slow_answer?{query}", {"Last-Event-ID": f"{rid}:3"})
    assert again.status == 200
    assert again.terminal.event == "done" and again.terminal.json["chunks"] == 30
    assert [e.id for e in again.events] == [f"{rid}:{n}" for n in range(4, 32)]
    assert len(first.tokens + again.tokens) == 30
    assert len(requests_for(sim, "slow_answer", since)) == 1, "a resume starts no provider request"
    assert resume_points(state) == {"resumed": 1}
    assert sum(p.value for p in state.points("streamscope.relay.replayed_events")) == len(again.events)
    [record] = state.wait_for_log()
    assert record.__dict__["outcome"] == "done"
    spans = state.exporter.get_finished_spans()
    [call] = [s for s in spans if s.name != "relay resume"]
    [resumed] = [s for s in spans if s.name == "relay resume"]
    assert [link.context.span_id for link in resumed.links] == [call.context.span_id]
    assert call.attributes["streamscope.class"] == "complete"
    deadline = time.monotonic() + 5
    while record.__dict__.get("resumes") != 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert record.__dict__["resumes"] == 1, "the owner learns of the resume elsewhere"
    assert record.__dict__["delivered"] == 31, "the other worker sent the end: the record says it reached a browser"
    assert record.__dict__["last_event_id"] == f"{rid}:3"


def test_after_the_end_another_worker_replays_the_same_terminal_event(fleet: Any, on: Any) -> None:
    url_a, url_b, _, _ = fleet
    state = on()
    whole = get(url_a, "/relay/anthropic/create/complete")
    rid = whole.headers["x-request-id"]
    time.sleep(0.3)  # the owner's writer has flushed by then (it writes as soon as events come)
    again = get(url_b, "/relay/anthropic/create/complete", {"Last-Event-ID": f"{rid}:1"})
    assert again.events == whole.events[1:]
    at_end = get(url_b, "/relay/anthropic/create/complete", {"Last-Event-ID": whole.terminal.id or ""})
    assert at_end.status == 204
    unknown = get(url_b, "/relay/anthropic/create/complete", {"Last-Event-ID": "f" * 32 + ":2"})
    assert unknown.status == 204
    assert resume_points(state) == {"resumed": 1, "nothing_to_resume": 2}


def test_a_long_generation_is_kept_within_max_bytes(sim: Simulator, redis: RedisServer, on: Any) -> None:
    import redis as redis_py

    small = RedisBuffer(redis.url, grace=GRACE, ttl=30.0, max_bytes=1000)
    with serving(worker_app(sim, small)) as url:
        on()
        whole = get(url, "/relay/anthropic/create/slow_answer")
        rid = whole.headers["x-request-id"]
        time.sleep(0.3)
    client = redis_py.Redis.from_url(redis.url)
    key = next(k for k in client.keys("streamscope:resume:*") if client.type(k) == b"stream"
               and client.xrevrange(k, count=1)[0][1][b"d"].decode().find(rid) >= 0)
    held = client.xrange(key)
    assert sum(len(fields[b"d"]) for _, fields in held) <= 1000
    assert held[-1][1].get(b"t") == b"1" and len(held) < len(whole.events)


def test_keys_do_not_name_the_request_id(fleet: Any, redis: RedisServer, on: Any) -> None:
    import redis as redis_py

    url_a, _, _, _ = fleet
    on()
    whole = get(url_a, "/relay/anthropic/create/complete")
    rid = whole.headers["x-request-id"]
    time.sleep(0.3)
    client = redis_py.Redis.from_url(redis.url)
    keys = [k.decode() for k in client.keys("*")]
    assert keys and not any(rid in k for k in keys)
    ttl = client.pttl(next(k for k in keys if k.startswith("streamscope:resume:") and ":" not in k[19:]))
    assert 0 < ttl <= 30_000, "a finished generation expires ttl after its end"
    assert all(b"Streams" not in v for v in client.hvals(next(k for k in keys if k.endswith(":meta"))))


def test_nobody_back_on_any_worker_closes_the_provider_connection(fleet: Any, sim: Simulator, on: Any) -> None:
    url_a, url_b, _, _ = fleet
    state = on()
    since = len(sim.requests)
    first = get(url_a, "/relay/anthropic/create/slow_answer", stop_after=2)
    left = time.monotonic()
    rid = first.headers["x-request-id"]
    [upstream] = requests_for(sim, "slow_answer", since)
    log = sim.wait_for_outcome(sim.requests.index(upstream), timeout=15)
    assert log.outcome == "disconnected", log.outcome
    assert log.ended is not None and GRACE * 0.9 <= log.ended - left < GRACE + 3.0, log.ended - left
    deadline = time.monotonic() + 10  # the provider may see the close before the span has ended
    while not state.spans() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert state.spans()[-1].attributes["streamscope.resume.abandoned"] is True
    late = get(url_b, "/relay/anthropic/create/slow_answer", {"Last-Event-ID": f"{rid}:2"})
    assert late.status == 204
    assert resume_points(state) == {"nothing_to_resume": 1}


@pytest.fixture
def owner(sim: Simulator, redis: RedisServer) -> Iterator[subprocess.Popen[str]]:
    sim.add(Scenario.single("fleet_slow", message_stream(blocks=[TextSpec(words(LONG)[:60], interval=0.1)])))
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("fleet_worker.py")), redis.url,
                             sim.url("")], stdout=subprocess.PIPE, text=True)
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(10)


def test_a_resume_whose_owner_died_ends_with_one_error(owner: subprocess.Popen[str], fleet: Any, sim: Simulator,
                                                       on: Any) -> None:
    assert owner.stdout is not None
    url_owner = owner.stdout.readline().strip()
    _, url_b, _, _ = fleet
    state = on()
    first = get(url_owner, "/relay/anthropic/create/fleet_slow", stop_after=5)
    rid = first.headers["x-request-id"]
    time.sleep(0.5)
    os.kill(owner.pid, signal.SIGKILL)
    owner.wait(10)
    killed = time.monotonic()
    again = get(url_b, "/relay/anthropic/create/fleet_slow", {"Last-Event-ID": f"{rid}:5"})
    took = time.monotonic() - killed
    assert again.status == 200
    error = again.terminal
    assert error.event == "error" and error.json == {"code": "upstream_unreachable", "request_id": rid,
                                                     "partial": True}
    assert again.tokens, "what the owner had written before it died is replayed"
    assert [e.id for e in again.events] == [f"{rid}:{n}" for n in range(6, 6 + len(again.events))]
    assert took < 15, f"the lost owner is seen within seconds, not {took:.1f} s"
    assert resume_points(state) == {"owner_lost": 1}


def test_redis_down_streams_go_on_and_come_back(sim: Simulator, on: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Its own Redis, stopped: the stream is whole and on time, a reconnect gets 204 within the
    timeout, one WARNING; restarted: resume works again by itself."""
    with RedisServer() as down:
        a = RedisBuffer(down.url, grace=GRACE, ttl=30.0, timeout=0.3)
        b = RedisBuffer(down.url, grace=GRACE, ttl=30.0, timeout=0.3)
        with serving(worker_app(sim, a)) as url_a, serving(worker_app(sim, b)) as url_b:
            state = on()
            down.stop()
            caplog.set_level(logging.WARNING, logger="streamscope")
            for _ in range(3):
                whole = get(url_a, "/relay/anthropic/create/complete")
                assert whole.status == 200 and whole.terminal.event == "done"
            started = time.monotonic()
            lost = get(url_b, "/relay/anthropic/create/complete", {"Last-Event-ID": whole.events[0].id or ""})
            assert lost.status == 204 and time.monotonic() - started < 3
            warnings = [r for r in caplog.records if "Redis at" in r.getMessage()]
            assert len(warnings) == 1, [r.getMessage() for r in warnings]  # one per process and Redis
            assert "relays stream without resume" in warnings[0].getMessage()
            errors = store_errors(state)
            assert errors.get("buffer.append", 0) >= 1 and errors.get("buffer.read", 0) >= 1
            down.start()
            deadline = time.monotonic() + 10
            while True:
                first = get(url_a, "/relay/anthropic/create/slow_answer", stop_after=2)
                time.sleep(0.5)
                again = get(url_b, "/relay/anthropic/create/slow_answer",
                            {"Last-Event-ID": f"{first.headers['x-request-id']}:2"})
                if again.status == 200 or time.monotonic() > deadline:
                    break
            assert again.status == 200 and again.terminal.event == "done", "resume is back with Redis"


def test_a_stalled_redis_holds_nothing_up(sim: Simulator, on: Any) -> None:
    """Redis stopped with SIGSTOP (connections accepted, nothing answered): a stream is as fast as
    without resume, a reconnect's 204 comes within the timeout."""
    with RedisServer() as stalled:
        a = RedisBuffer(stalled.url, grace=GRACE, ttl=30.0, timeout=0.3)
        b = RedisBuffer(stalled.url, grace=GRACE, ttl=30.0, timeout=0.3)
        with serving(worker_app(sim, a)) as url_a, serving(worker_app(sim, b)) as url_b:
            on()
            get(url_a, "/relay/anthropic/create/complete")  # connections made while Redis answers
            assert stalled.proc is not None
            os.kill(stalled.proc.pid, signal.SIGSTOP)
            try:
                started = time.monotonic()
                whole = get(url_a, "/relay/anthropic/create/slow_answer")
                took = time.monotonic() - started
                assert whole.terminal.event == "done" and len(whole.tokens) == 30
                assert took < 3.2 + 2.0, f"the stream took {took:.1f} s (about 3.2 s without Redis)"
                started = time.monotonic()
                lost = get(url_b, "/relay/anthropic/create/slow_answer",
                           {"Last-Event-ID": f"{whole.headers['x-request-id']}:2"})
                assert lost.status == 204 and time.monotonic() - started < 3
            finally:
                os.kill(stalled.proc.pid, signal.SIGCONT)


@pytest.mark.parametrize(("args", "options", "error", "words"), [
    (("localhost:6379",), {}, ValueError, "RedisBuffer() takes a redis:// (or rediss://, unix://) URL"),
    ((6379,), {}, TypeError,
     "RedisBuffer() takes a redis:// URL or a redis.Redis / redis.asyncio.Redis or RedisCluster client, not int"),
    (("redis://127.0.0.1:6379/0",), {"timeout": 0}, ValueError, "RedisBuffer(timeout=...) takes seconds"),
    (("redis://127.0.0.1:6379/0",), {"grace": -1}, ValueError, "RedisBuffer(grace=...) takes seconds > 0"),
    (("redis://127.0.0.1:6379/0",), {"ttll": 5}, TypeError, "did you mean 'ttl'"),
    (("redis://127.0.0.1:6379/0",), {"ttl": "60"}, TypeError, "RedisBuffer(ttl=...) takes seconds (a number), not str"),
    (("redis://127.0.0.1:6379/0",), {"timeout": "1"}, TypeError, "RedisBuffer(timeout=...) takes seconds (a number)"),
    (("redis://user:secret@127.0.0.1:6379/0?max_connections=many",), {}, ValueError,
     "RedisBuffer() cannot use '127.0.0.1:6379/0?max_connections=many': Invalid value for "),  # then redis-py's quoting
])
def test_a_wrong_buffer_argument_is_one_line(args: tuple[Any, ...], options: dict[str, Any], error: type[Exception],
                                             words: str) -> None:
    with pytest.raises(error) as raised:
        RedisBuffer(*args, **options)
    assert words in str(raised.value) and "\n" not in str(raised.value) and "secret" not in str(raised.value)


def test_a_reconnect_ahead_of_the_copy_follows_the_live_generation(fleet: Any, on: Any) -> None:
    """The owner sends each event to its browser before its copy reaches Redis. A browser back on
    another worker within that time has events the copy lacks: it follows from its own, where it
    used to get 204 and lose the rest of the answer. (Event 20 is 1.6 s away when it is back.)"""
    url_a, url_b, _, _ = fleet
    on()
    first = get(url_a, "/relay/anthropic/create/slow_answer", stop_after=3)
    rid = first.headers["x-request-id"]
    again = get(url_b, "/relay/anthropic/create/slow_answer", {"Last-Event-ID": f"{rid}:20"})
    assert again.status == 200
    assert [e.id for e in again.events] == [f"{rid}:{n}" for n in range(21, 32)]
    assert again.terminal.event == "done" and again.terminal.json["chunks"] == 30


def test_a_reconnect_past_a_live_generations_end_is_let_go_when_it_ends(fleet: Any, on: Any) -> None:
    """An event id beyond anything the generation will send: followed while it is live, then the
    connection ends with nothing, and the next reconnect, the generation over, gets 204."""
    url_a, url_b, _, _ = fleet
    on()
    first = get(url_a, "/relay/anthropic/create/slow_answer", stop_after=3)
    rid = first.headers["x-request-id"]
    began = time.monotonic()
    beyond = get(url_b, "/relay/anthropic/create/slow_answer", {"Last-Event-ID": f"{rid}:500"})
    assert beyond.status == 200 and beyond.events == []
    assert time.monotonic() - began < 20, "the follow outlived the generation"
    after = get(url_b, "/relay/anthropic/create/slow_answer", {"Last-Event-ID": f"{rid}:500"})
    assert after.status == 204


async def test_a_worker_follows_more_streams_than_a_default_pool_holds(
        sim: Simulator, redis: RedisServer, on: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Each stream a worker follows for a reconnected browser holds one Redis connection while it
    waits; redis-py's default pool holds 100, and refused the 101st (its resume got 204, the rest
    of its answer lost). 120 browsers coming back to one worker over 10 s (while the answer goes on
    for 15 s) all get the rest of the answer and its `done`. The test is about the pool, so a store
    operation may take 5 s here (on a loaded machine 106 of the 120 first reads once took longer
    than the default 0.5 s, each rightly an outage and a 204), and the generation waits 10 s for
    its first reconnect (115 were once told `nothing_to_resume`: the first reconnect had taken
    longer than a 2 s grace to reach the buffer, and the generation was rightly given up)."""
    on()
    a = RedisBuffer(redis.url, grace=10.0, ttl=30.0, timeout=5.0)
    b = RedisBuffer(redis.url, grace=10.0, ttl=30.0, timeout=5.0)
    with serving(worker_app(sim, a)) as url_a, serving(worker_app(sim, b)) as url_b:
        # 15 s of answer at five events a second: 120 followers of it are 600 events a second to
        # send on a loaded machine, the fewest that keep the answer going while all come back.
        sim.add(Scenario.single("fleet_answer", message_stream(blocks=[TextSpec(words(LONG)[:75], interval=0.2)])))
        path = "/relay/anthropic/create/fleet_answer"
        first = await asyncio.to_thread(get, url_a, path, stop_after=3)
        rid = first.headers["x-request-id"]

        async def back(client: httpx2.AsyncClient, i: int) -> tuple[int, list[str | None], str | None, str]:
            await asyncio.sleep(i / 12)
            parser = SseParser()
            async with client.stream("GET", url_b + path, headers={"Last-Event-ID": f"{rid}:3"}) as response:
                async for text in response.aiter_text():
                    parser.feed(text)
            last = parser.events[-1].event if parser.events else None
            return response.status_code, [e.id for e in parser.events], last, response.headers.get(RESUME_HEADER, "")

        with caplog.at_level(logging.WARNING, logger="streamscope"):
            async with httpx2.AsyncClient(timeout=30, limits=httpx2.Limits(max_connections=200)) as client:
                got = await asyncio.gather(*(back(client, i) for i in range(120)))
        want = [f"{rid}:{n}" for n in range(4, 77)]
        assert [g[0] for g in got] == [200] * 120, (Counter((g[0], g[3]) for g in got),
                                                    [r.getMessage()[:300] for r in caplog.records][:5])
        assert all(ids == want and end == "done" for _, ids, end, _ in got), [len(ids) for _, ids, _, _ in got]


def test_a_given_client_with_a_full_pool_is_one_error_naming_max_connections(
        sim: Simulator, redis: RedisServer, on: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A client the service gave, whose pool holds fewer connections than the streams a worker
    follows: an ERROR that says which setting to raise, not an outage's warning."""
    import redis.asyncio as redis_asyncio

    on()
    sim.add(Scenario.single("fleet_long", message_stream(blocks=[TextSpec(words(LONG)[:80], interval=0.1)])))
    owner = RedisBuffer(redis.url, grace=GRACE, ttl=30.0)
    small = RedisBuffer(redis_asyncio.Redis.from_url(redis.url, max_connections=2), grace=GRACE, ttl=30.0)
    with serving(worker_app(sim, owner)) as url_a, serving(worker_app(sim, small)) as url_s, \
            caplog.at_level(logging.WARNING, logger="streamscope"):
        first = get(url_a, "/relay/anthropic/create/fleet_long", stop_after=3)
        rid = first.headers["x-request-id"]
        with ThreadPoolExecutor(5) as pool:
            list(pool.map(lambda _: get(url_s, "/relay/anthropic/create/fleet_long", {"Last-Event-ID": f"{rid}:3"}),
                          range(5)))
    words_of_it = ("MaxConnectionsError", "Too many", "pool is full")
    said = [r for r in caplog.records if any(w in r.getMessage() for w in words_of_it)]
    assert said and all(r.levelno == logging.ERROR and "max_connections=" in r.getMessage() for r in said), \
        [r.getMessage() for r in said]
