# ruff: noqa: F811 - the fixtures `sim` and `on` come from test_relay
"""A client the service built, given to `RedisBuffer` or `RedisStore`, of the kind each does not
use: the buffer makes its asyncio client from a sync `redis.Redis`, the store its sync client from
a `redis.asyncio.Redis`, with the same address, database, user, password and TLS settings (redis-py
keeps no `ssl` flag in a pool: TLS is read from its connection class). A real Redis on TLS alone
(no plain port), its default user off: only the ACL user gets in. The same for a Redis Cluster's
clients (three masters, the cluster bus over TLS too).
"""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_py
from served import serving
from test_idempotency import ask, worker_app
from test_relay import on, requests_for, sim  # noqa: F401 - fixtures

from redis_server import RedisCluster, RedisServer, certificates
from streamscope import Breaker, CircuitOpen
from streamscope.breaker import Breakers, BreakerTable
from streamscope.breaker.redis_store import INTERVAL, RedisStore
from streamscope.core import guard
from streamscope.serve import RedisBuffer
from streamscope.simulator import Simulator

USER = ("relay", "relay-password")
SLOW = 5.0
"""Seconds a buffer's store operation may take here: the tests are about the given clients, and on
a loaded machine a first read over TLS to a cluster once took longer than the default 0.5 s (an
outage, rightly, and a resume refused)."""
PATH = "/relay/anthropic/create/"


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, str]]:
    """The Redis, and the path of the certificate it presents (its own authority)."""
    folder: Path = tmp_path_factory.mktemp("tls")
    tls = certificates(folder)
    with RedisServer(tls=tls, user=USER) as server:
        yield server, tls[0]


def settings(server: RedisServer, cert: str) -> dict[str, Any]:
    return {"host": "localhost", "port": server.port, "db": 3, "ssl": True, "ssl_ca_certs": cert,
            "username": USER[0], "password": USER[1], "socket_timeout": SLOW}


def buffer_errors(state: Any) -> list[Any]:
    """The buffers' store errors (a store of another test may still count its own into this meter)."""
    return [p for p in state.points("streamscope.store.errors")
            if str(p.attributes["streamscope.store.operation"]).startswith("buffer.")]


def resumed_both_ways(sim: Simulator, url_a: str, url_b: str) -> None:
    """A stream left on one worker is resumed on the other, and the other way round: one generation each."""
    for first_at, then_at in ((url_a, url_b), (url_b, url_a)):
        since = len(sim.requests)
        first = ask(first_at, PATH + "slow_answer", None, stop_after=3)
        rid = first.headers["x-request-id"]
        time.sleep(0.5)
        again = ask(then_at, PATH + "slow_answer", None, {"Last-Event-ID": f"{rid}:3"})
        assert again.status == 200 and again.events[-1].event == "done", again.body[:300]
        assert [e.id for e in again.events] == [f"{rid}:{n}" for n in range(4, 32)]
        assert len(requests_for(sim, "slow_answer", since)) == 1


def test_a_buffer_given_a_sync_client_resumes_what_a_buffer_by_url_began(
        sim: Simulator, on: Any, secured: tuple[RedisServer, str]) -> None:
    server, cert = secured
    state = on()
    given = RedisBuffer(redis_py.Redis(**settings(server, cert)), grace=30.0, timeout=SLOW)
    by_url = RedisBuffer(f"rediss://{USER[0]}:{USER[1]}@localhost:{server.port}/3?ssl_ca_certs={cert}", grace=30.0,
                         timeout=SLOW)
    with serving(worker_app(sim, given)) as url_a, serving(worker_app(sim, by_url)) as url_b:
        resumed_both_ways(sim, url_a, url_b)
    assert buffer_errors(state) == [], "never refused, never unreachable"
    assert "streamscope:resume:" in server.cli("-n", "3", "--scan", "--pattern", "streamscope:resume:*")


def test_a_store_given_an_asyncio_client_shares_the_breaker_with_a_store_by_url(
        secured: tuple[RedisServer, str]) -> None:
    server, cert = secured
    given = RedisStore(redis_py.asyncio.Redis(**settings(server, cert)))  # its sync client made from this one
    by_url = RedisStore(f"rediss://{USER[0]}:{USER[1]}@localhost:{server.port}/3?ssl_ca_certs={cert}")
    shared(given, by_url)
    assert "streamscope:breaker:" in server.cli("-n", "3", "--scan", "--pattern", "streamscope:breaker:*")


def test_on_a_cluster_the_clients_made_from_the_given_ones_reach_it(sim: Simulator, on: Any, tmp_path: Path) -> None:
    """A buffer given the sync cluster client resumes what one given the asyncio client began (and
    the other way round); a store given the asyncio client shares the breaker with one given the sync."""
    state = on()
    tls = certificates(tmp_path)
    with RedisCluster(str(tmp_path), tls=tls, user=USER) as cluster:
        given_settings = {"host": "localhost", "port": cluster.nodes[0].port, "ssl": True, "ssl_ca_certs": tls[0],
                    "username": USER[0], "password": USER[1], "socket_timeout": SLOW}
        # The first one's asyncio client is made here, from the given sync one.
        made_here = RedisBuffer(redis_py.RedisCluster(**given_settings), grace=30.0, timeout=SLOW)
        given = RedisBuffer(redis_py.asyncio.RedisCluster(**given_settings), grace=30.0, timeout=SLOW)
        with serving(worker_app(sim, made_here)) as url_a, serving(worker_app(sim, given)) as url_b:
            resumed_both_ways(sim, url_a, url_b)
        assert buffer_errors(state) == [], "never refused, never unreachable"
        stores = (RedisStore(redis_py.asyncio.RedisCluster(**given_settings)),  # its sync client made here
                  RedisStore(redis_py.RedisCluster(**given_settings)))
        shared(*stores)
    # The cluster gone, each store's tick is an outage (the cluster client's own errors are not
    # redis-py's RedisError): counted unreachable, never an internal error of streamscope.
    internal = guard.count
    ticks = [store.tick() for store in stores]
    assert all(wait > INTERVAL for wait in ticks), ticks  # backing off
    assert guard.count == internal
    assert any(p.attributes["streamscope.store.operation"] == "breaker.sync"
               and p.attributes["streamscope.store.problem"] == "unreachable"
               for p in state.points("streamscope.store.errors"))
    # Let go (their threads end when the stores are collected): no other test sees their outage.
    gone = [weakref.ref(store) for store in stores]
    del stores
    deadline = time.monotonic() + 10
    while any(ref() is not None for ref in gone) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert all(ref() is None for ref in gone), "a store outlived the test"


def shared(one_store: RedisStore, other_store: RedisStore) -> None:
    """One store's breaker opening opens the other's, both ways."""
    one, other = (Breakers(BreakerTable(Breaker(failures=1, window=30, cool_down=60, shared=store)))
                  for store in (one_store, other_store))
    for n, (opening, learning) in enumerate(((one, other), (other, one))):
        key = ("anthropic", f"given-clients-{n}", None)
        for breakers in (one, other):  # both have used the key
            breakers.ended(breakers.admit(*key), "succeeded")  # type: ignore[arg-type]
        opening.ended(opening.admit(*key), "failed")  # type: ignore[arg-type]
        assert opening.state(key) == "open"
        deadline = time.monotonic() + 10  # a second or so; a loaded machine allowed for
        while not isinstance(got := learning.admit(*key), CircuitOpen):
            learning.ended(got, None)  # type: ignore[arg-type]
            assert time.monotonic() < deadline, "the other store never saw the open"
            time.sleep(0.05)
