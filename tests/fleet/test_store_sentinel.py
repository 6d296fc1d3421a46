"""The fleet breaker behind Redis Sentinel (Debian's redis-server: a master, a replica, one
Sentinel), each store given the client the service builds, `Sentinel(...).master_for(...)`.

Secured: every link over TLS (no plain port anywhere), the master and the replica reached only as
an ACL user, the Sentinel only as a user of its own. One worker is given the sync client, the other
the asyncio one, from which its store makes the sync client it uses (the user, password and TLS
settings of the master and of the Sentinel passed on): one worker opening the breaker opens it for
the other. The master killed, Sentinel promotes the replica: what the breakers write after the
promotion is shared again (what was written just before may be lost: replication is asynchronous).
All of Redis gone (the Sentinel too), a breaker decides alone, as with one Redis gone.

Workers are this file run as a program: test_fleet_breaker's worker, its store given the client.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]  # tests/ and tests/fleet/, when run as a worker program

import anthropic  # noqa: E402
import pytest  # noqa: E402
import test_fleet_breaker as fleet  # noqa: E402
from test_fleet_breaker import COMPLETE, FAIL_529, MODEL, Worker, opened_by, scenario, sent, wait_for  # noqa: E402

from conftest import USER  # noqa: E402
from redis_server import RedisSentinel, certificates, sentinel_client  # noqa: E402
from streamscope import Breaker, CircuitOpen  # noqa: E402
from streamscope.breaker.redis_store import RedisStore  # noqa: E402
from streamscope.simulator import Simulator  # noqa: E402

USER_LOGIN = ("breaker", "breaker-password")
SENTINEL_LOGIN = ("watcher", "watcher-password")


def spec(sentinel: RedisSentinel, asynchronous: bool) -> str:
    """What a worker program is told of the Sentinel, to build the service's client itself."""
    return json.dumps({"sentinel": sentinel.sentinel, "asynchronous": asynchronous,
                       "tls": sentinel.tls[0] if sentinel.tls else None, "user": sentinel.user,
                       "sentinel_user": sentinel.sentinel_user})


class SentinelWorker(Worker):
    """test_fleet_breaker's worker, in a process of its own, its store given a `master_for(...)` client."""

    def __init__(self, sentinel: RedisSentinel, sim: Simulator, name: str, asynchronous: bool = False,
                 failures: int = 2, cool_down: float = 2.0) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, __file__, spec(sentinel, asynchronous), sim.url(), name, str(failures), str(cool_down)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


@contextmanager
def workers_of(sentinel: RedisSentinel, sim: Simulator) -> Iterator[Callable[..., SentinelWorker]]:
    """Workers "b" given the asyncio client (its store makes the sync one), the others the sync one."""
    made: list[SentinelWorker] = []

    def make(name: str, **kwargs: Any) -> SentinelWorker:
        made.append(SentinelWorker(sentinel, sim, name, asynchronous=name == "b", **kwargs))
        return made[-1]

    try:
        yield make
    finally:
        for w in made:
            w.stop()


def secured_sentinel(folder: Path) -> RedisSentinel:
    return RedisSentinel(str(folder), tls=certificates(folder), user=USER_LOGIN, sentinel_user=SENTINEL_LOGIN)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisSentinel]:
    with secured_sentinel(tmp_path_factory.mktemp("sentinel-tls")) as made:
        yield made


@pytest.fixture
def secured_workers(secured: RedisSentinel, sim: Simulator) -> Iterator[Callable[..., SentinelWorker]]:
    with workers_of(secured, sim) as make:
        yield make


def test_over_tls_as_acl_users_one_worker_opening_it_opens_it_for_the_other(
        secured_workers: Any, sim: Simulator, secured: RedisSentinel) -> None:
    made: list[SentinelWorker] = []

    def make(name: str, **kwargs: Any) -> SentinelWorker:
        made.append(secured_workers(name, **kwargs))
        return made[-1]

    fleet.test_one_worker_opening_it_opens_it_for_every_worker(make, sim)
    assert "streamscope:breaker:" in secured.master.cli("--scan", "--pattern", "streamscope:breaker:*")
    for w in made:  # never refused, never unreachable: every store reached the master
        assert [line for line in w.ask(op="warnings") if "Redis" in line] == [], w.name


def test_the_master_killed_what_is_written_after_the_promotion_is_shared_again(
        sim: Simulator, tmp_path: Path) -> None:
    with secured_sentinel(tmp_path) as sentinel, workers_of(sentinel, sim) as make:
        a, b = make("a", cool_down=2.0), make("b", cool_down=2.0)
        ok = scenario(sim, COMPLETE)
        for w in (a, b):
            assert w.ask(op="call", scenario=ok)["result"] == "ok"
        opened_by(a, sim)
        wait_for(lambda: b.ask(op="view")["fleet"] == "open", 5.0)
        before = b.ask(op="view")["version"]
        old = sentinel.master.port
        sentinel.master.stop()
        promoted = wait_for(lambda: sentinel.master_port() not in (None, old), 60.0)
        # Each decides alone meanwhile; after the cool-down a probe closes each (the open may or
        # may not have reached the replica before the master died: either way it closes).
        for w in (a, b):
            wait_for(lambda w=w: w.ask(op="call", scenario=ok)["result"] == "ok", 30.0)
        opened_by(a, sim)  # written to the promoted replica
        took = wait_for(lambda: b.ask(op="view")["fleet"] == "open", 15.0)
        assert b.ask(op="view")["version"] != before, "the open written after the promotion"
        refused = scenario(sim, COMPLETE)
        assert b.ask(op="call", scenario=refused)["result"] == "circuit_open"
        assert sent(sim, refused) == [] and b.ask(op="view")["state"] == "open"
        assert sentinel.replica is not None and "streamscope:breaker:" in sentinel.replica.cli(
            "--scan", "--pattern", "streamscope:breaker:*"), "written to the promoted replica"
    print(f"promoted {promoted:.1f} s after the master was killed; b saw the new open after {took:.2f} s")


def test_all_of_redis_gone_the_breaker_decides_alone(sim: Simulator, tmp_path: Path, instrument: Any,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    """Master, replica and Sentinel stopped: this process's breaker opens on its own failures,
    refuses without waiting on the store, probes on its own after the cool-down; one warning."""
    from conftest import client

    with RedisSentinel(str(tmp_path)) as sentinel:
        store = RedisStore(sentinel.client(asynchronous=True), timeout=3.0)  # the sync client made from it
        instrument(breaker=Breaker(failures=2, window=30, cool_down=2.0, shared=store))
        ok, failing = scenario(sim, COMPLETE), scenario(sim, FAIL_529)
        retry_after = [0.0]

        def call(name: str) -> tuple[str, float]:
            started = time.monotonic()
            try:
                for _ in client(sim, name).messages.create(model=MODEL, max_tokens=64, messages=USER, stream=True):
                    pass
                return "ok", time.monotonic() - started
            except CircuitOpen as exc:
                retry_after[0] = exc.retry_after
                return "circuit_open", time.monotonic() - started
            except anthropic.APIStatusError:
                return "failed", time.monotonic() - started

        assert call(ok)[0] == "ok"
        time.sleep(0.5)  # the store's thread has synced once
        with caplog.at_level(logging.INFO, logger="streamscope"):
            sentinel.stop()
            for _ in range(2):
                assert call(failing)[0] == "failed"
            refused = [call(ok) for _ in range(10)]
            assert all(r == "circuit_open" for r, _ in refused), refused
            assert max(t for _, t in refused) < 2.0  # never waits on the store (its timeout here: 3 s)
            time.sleep(retry_after[0] + 0.25)
            assert call(ok)[0] == "ok" and call(ok)[0] == "ok"  # its own probe closed it
            wait_for(lambda: any("cannot be reached" in r.getMessage() for r in caplog.records), 10.0)
            time.sleep(1.0)  # several failed ticks: still one warning
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "Redis" in r.getMessage()]
    assert len(lines) == 1 and "the master 'streamscope' of Sentinel 127.0.0.1:" in lines[0], lines
    assert len(sent(sim, ok)) == 3, "the call before, the probe and the one after"


def worker_main(given: str, *args: str) -> None:
    """A worker whose store is given the client the service builds (sync or asyncio)."""
    told = json.loads(given)

    def store(_: str) -> RedisStore:
        return RedisStore(sentinel_client(tuple(told["sentinel"]), asynchronous=told["asynchronous"], tls=told["tls"],
                                          user=told["user"] and tuple(told["user"]),
                                          sentinel_user=told["sentinel_user"] and tuple(told["sentinel_user"])),
                          timeout=1.0)

    fleet.RedisStore = store  # the worker's one way to its store
    fleet.worker(given, args[0], args[1], int(args[2]), float(args[3]))


if __name__ == "__main__":
    worker_main(*sys.argv[1:])
