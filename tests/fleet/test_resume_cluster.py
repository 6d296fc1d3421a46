# ruff: noqa: F811 - the fixtures `sim` and `on` come from test_relay
"""Resume on a Redis Cluster (Debian's redis-server in cluster mode, three masters, the slots spread
by redis-cli): two workers, one given a sync `RedisCluster` client and one an asyncio one, resume
each other's generations; every key of one generation is in one slot; an idempotency key's repeat
follows on the other worker; a cancel reaches the owner; the cluster gone, streams go on without
resume, as on a single Redis.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_py
from served import serving
from test_idempotency import ask, whole, worker_app
from test_relay import on, requests_for, sim  # noqa: F401 - fixtures

from redis_server import RedisCluster
from streamscope.serve import RedisBuffer
from streamscope.simulator import Simulator

PATH = "/relay/anthropic/create/"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    with RedisCluster(str(tmp_path_factory.mktemp("cluster"))) as made:
        yield made


@pytest.fixture(scope="module")
def fleet(sim: Simulator, cluster: RedisCluster) -> Iterator[tuple[str, str]]:
    a = RedisBuffer(redis_py.RedisCluster.from_url(cluster.url), grace=30.0)
    b = RedisBuffer(redis_py.asyncio.RedisCluster.from_url(cluster.url), grace=30.0)  # used in b's loop alone
    with serving(worker_app(sim, a)) as url_a, serving(worker_app(sim, b)) as url_b:
        yield url_a, url_b


def test_a_reconnect_to_the_other_worker_resumes_across_the_cluster(fleet: Any, sim: Simulator,
                                                                     cluster: RedisCluster) -> None:
    url_a, url_b = fleet
    for first_at, then_at in ((url_a, url_b), (url_b, url_a)):
        since = len(sim.requests)
        first = ask(first_at, PATH + "slow_answer", None, stop_after=3)
        rid = first.headers["x-request-id"]
        time.sleep(0.5)
        again = ask(then_at, PATH + "slow_answer", None, {"Last-Event-ID": f"{rid}:3"})
        assert again.status == 200 and again.events[-1].event == "done", again.body[:300]
        assert [e.id for e in again.events] == [f"{rid}:{n}" for n in range(4, 32)]
        assert len(requests_for(sim, "slow_answer", since)) == 1
    client = redis_py.RedisCluster.from_url(cluster.url)
    keys = [k.decode() for k in client.keys("streamscope:resume:*", target_nodes=redis_py.RedisCluster.ALL_NODES)]
    generations: dict[str, set[int]] = {}
    for key in keys:
        if not key.startswith("streamscope:resume:key:"):
            generations.setdefault(key.split("}")[0], set()).add(client.keyslot(key))
    assert len(generations) >= 2 and all(len(slots) == 1 for slots in generations.values()), generations
    assert len({next(iter(s)) for s in generations.values()}) > 1, "the generations spread over the slots"


def test_the_same_request_again_follows_on_the_other_worker(fleet: Any, sim: Simulator) -> None:
    url_a, url_b = fleet
    since, key = len(sim.requests), str(uuid.uuid4())
    first = ask(url_a, PATH + "slow_answer", key, stop_after=2)
    again = ask(url_b, PATH + "slow_answer", key)
    whole(again)
    assert again.headers["x-request-id"] == first.headers["x-request-id"] and len(again.tokens) == 30
    assert len(requests_for(sim, "slow_answer", since)) == 1


def test_a_cancel_on_the_other_worker_stops_the_generation(fleet: Any, sim: Simulator) -> None:
    url_a, url_b = fleet
    since, key = len(sim.requests), str(uuid.uuid4())
    ask(url_a, PATH + "slow_answer", key, stop_after=2)
    sent = time.monotonic()
    assert ask(url_b, PATH + "slow_answer", key, {"Streamscope-Cancel": "1"}).headers["streamscope-cancel"] == (
        "cancelled")
    [upstream] = requests_for(sim, "slow_answer", since)
    log = sim.wait_for_outcome(sim.requests.index(upstream), timeout=15)
    assert log.outcome == "disconnected" and log.ended is not None and log.ended - sent < 5.0


def test_the_cluster_gone_streams_go_on_without_resume(sim: Simulator, tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    with RedisCluster(str(tmp_path)) as gone:
        buffer = RedisBuffer(redis_py.asyncio.RedisCluster.from_url(gone.url), timeout=0.3)
        with serving(worker_app(sim, buffer)) as url:
            whole(ask(url, PATH + "complete", None))  # resumable while it is up
            gone.stop()
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
    assert said and all("the cluster of 127.0.0.1:" in line for line in said), said
