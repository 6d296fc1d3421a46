# ruff: noqa: F811 - the fixtures `sim` and `on` come from test_relay
"""Resume behind Redis Sentinel (Debian's redis-server: a master, a replica, one Sentinel): the
workers are given the client the service builds, `Sentinel(...).master_for(...)` (one the sync
form, one the asyncio form). The master is
killed while a browser follows a generation on the worker that does not run it: Sentinel promotes
the replica within seconds, the owner writes on to the new master (from where the new master's
copy ends), the follower reads on, and the browser gets the whole answer and its one `done`.

Secured, every link over TLS (no plain port anywhere), the master and replica reached only as an
ACL user and the Sentinel only as a user of its own: a buffer given the sync client makes its
asyncio client with the same user, password and TLS settings, and the Sentinel's own, and resumes
what the other worker (given the asyncio client) began, and the other way round. All of Redis
gone (the Sentinel too), streams go on without resume, as on one Redis.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.sentinel import Sentinel
from redis.sentinel import Sentinel as SyncSentinel
from served import serving
from test_idempotency import ask, whole, worker_app
from test_relay import on, requests_for, sim  # noqa: F401 - fixtures

from redis_server import RedisSentinel, certificates
from streamscope.serve import RedisBuffer
from streamscope.simulator import Scenario, Simulator, TextSpec, message_stream
from streamscope.simulator.catalog import LONG, words

LONG_ANSWER = "sentinel_long"
"""60 words 0.1 s apart: the master is killed while it is generated."""
PATH = "/relay/anthropic/create/"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisSentinel]:
    """TLS alone on every port; the master and replica's one user, the Sentinel's own."""
    folder = tmp_path_factory.mktemp("sentinel-tls")
    with RedisSentinel(str(folder), tls=certificates(folder), user=("relay", "relay-password"),
                       sentinel_user=("watcher", "watcher-password")) as made:
        yield made


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[RedisSentinel]:
    with RedisSentinel(str(tmp_path)) as made:
        yield made


def buffer_errors(state: Any) -> list[Any]:
    """The buffers' store errors (a store of another test may still count its own into this meter)."""
    return [p for p in state.points("streamscope.store.errors")
            if str(p.attributes["streamscope.store.operation"]).startswith("buffer.")]


def buffer(sentinel: RedisSentinel, kind: Any) -> RedisBuffer:
    """A buffer given `kind`'s `master_for(...)` client (sync: the buffer asks the same Sentinel
    for an asyncio one)."""
    client = kind([sentinel.sentinel], socket_timeout=0.5).master_for(RedisSentinel.name, socket_timeout=0.5)
    return RedisBuffer(client, grace=30.0)


def test_the_master_killed_mid_stream_the_resumed_stream_completes(sim: Simulator, sentinel: RedisSentinel,
                                                                   on: Any) -> None:
    sim.add(Scenario.single(LONG_ANSWER, message_stream(blocks=[TextSpec(words(LONG)[:60], interval=0.1)])))
    path = f"/relay/anthropic/create/{LONG_ANSWER}"
    state = on()
    since = len(sim.requests)
    with serving(worker_app(sim, buffer(sentinel, SyncSentinel))) as url_a, \
            serving(worker_app(sim, buffer(sentinel, Sentinel))) as url_b:
        first = ask(url_a, path, None, stop_after=3)
        rid = first.headers["x-request-id"]
        got: list[Any] = []
        follower = threading.Thread(target=lambda: got.append(ask(url_b, path, None, {"Last-Event-ID": f"{rid}:3"})))
        follower.start()
        time.sleep(1.0)  # the follower reads the Redis copy on b
        old = sentinel.master.port
        sentinel.master.stop()
        killed = time.monotonic()
        follower.join(60)
        assert not follower.is_alive(), "the follower hung"
        took = time.monotonic() - killed
        promoted = sentinel.master_port()
    [again] = got
    assert promoted is not None and promoted != old, "Sentinel promoted the replica"
    assert again.status == 200, again.body[:300]
    assert [e.id for e in again.events] == [f"{rid}:{n}" for n in range(4, 62)], (took, again.body[-500:])
    assert again.events[-1].event == "done"
    assert len(requests_for(sim, LONG_ANSWER, since)) == 1
    deadline = time.monotonic() + 10  # counted when the resumed connection's body ends
    while not state.points("streamscope.relay.resumes") and time.monotonic() < deadline:
        time.sleep(0.05)
    outcomes = {p.attributes["streamscope.resume.outcome"]: p.value for p in state.points("streamscope.relay.resumes")}
    assert outcomes == {"resumed": 1}, "resumed, the owner never taken for lost"
    print(f"the answer completed {took:.1f} s after the master was killed")


def test_over_tls_as_acl_users_a_stream_resumes_on_the_other_worker(sim: Simulator, secured: RedisSentinel,
                                                                    on: Any) -> None:
    state = on()
    made_here = RedisBuffer(secured.client(), grace=30.0)  # its asyncio client made from the sync one
    given = RedisBuffer(secured.client(asynchronous=True), grace=30.0)  # used as given
    with serving(worker_app(sim, made_here)) as url_a, serving(worker_app(sim, given)) as url_b:
        for first_at, then_at in ((url_a, url_b), (url_b, url_a)):
            since = len(sim.requests)
            first = ask(first_at, PATH + "slow_answer", None, stop_after=3)
            rid = first.headers["x-request-id"]
            time.sleep(0.5)
            again = ask(then_at, PATH + "slow_answer", None, {"Last-Event-ID": f"{rid}:3"})
            assert again.status == 200 and again.events[-1].event == "done", again.body[:300]
            assert [e.id for e in again.events] == [f"{rid}:{n}" for n in range(4, 32)]
            assert len(requests_for(sim, "slow_answer", since)) == 1
    assert buffer_errors(state) == [], "never refused, never unreachable"
    assert "streamscope:resume:" in secured.master.cli("--scan", "--pattern", "streamscope:resume:*")


def test_all_of_redis_gone_streams_go_on_without_resume(sim: Simulator, tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    with RedisSentinel(str(tmp_path)) as gone:
        buffer = RedisBuffer(gone.client(), timeout=0.3)  # the asyncio client made from the sync one
        with serving(worker_app(sim, buffer)) as url:
            whole(ask(url, PATH + "complete", None))  # resumable while it is up
            gone.stop()  # the Sentinel, the master and the replica
            caplog.set_level(logging.WARNING, logger="streamscope")
            started = time.monotonic()
            got = ask(url, PATH + "complete", None)
            whole(got)
            rid = got.headers["x-request-id"]
            assert ask(url, PATH + "complete", None, {"Last-Event-ID": f"{rid}:1"}).status in (200, 204)
            assert time.monotonic() - started < 20
            said: list[str] = []
            while not said and time.monotonic() - started < 20:  # the copy to Redis fails off the stream's path
                time.sleep(0.1)
                said = [r.getMessage() for r in caplog.records if "cannot be reached" in r.getMessage()]
    assert said and all("the master 'streamscope' of Sentinel 127.0.0.1:" in line for line in said), said
