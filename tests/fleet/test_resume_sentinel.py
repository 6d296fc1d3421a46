# ruff: noqa: F811 - the fixtures `sim` and `on` come from test_relay
"""Resume behind Redis Sentinel (Debian's redis-server: a master, a replica, one Sentinel): the
workers are given the client the service builds, `Sentinel(...).master_for(...)` (one the sync
form, one the asyncio form). The master is
killed while a browser follows a generation on the worker that does not run it: Sentinel promotes
the replica within seconds, the owner writes on to the new master (from where the new master's
copy ends), the follower reads on, and the browser gets the whole answer and its one `done`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.sentinel import Sentinel
from redis.sentinel import Sentinel as SyncSentinel
from served import serving
from test_idempotency import ask, worker_app
from test_relay import on, requests_for, sim  # noqa: F401 - fixtures

from redis_server import RedisSentinel
from streamscope.serve import RedisBuffer
from streamscope.simulator import Scenario, Simulator, TextSpec, message_stream
from streamscope.simulator.catalog import LONG, words

LONG_ANSWER = "sentinel_long"
"""60 words 0.1 s apart: the master is killed while it is generated."""


@pytest.fixture
def sentinel(tmp_path: Path) -> Iterator[RedisSentinel]:
    with RedisSentinel(str(tmp_path)) as made:
        yield made


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
