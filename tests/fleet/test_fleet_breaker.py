"""The fleet breaker: worker processes sharing one real Redis (`tests/redis_server.py`), the real
SDK against the simulator. One worker opening the breaker opens it for all; after the cool-down
exactly one probe goes out across the workers (counted by the server); its verdict reaches all;
Redis killed or hung, each worker decides alone without a call waiting on it, says so once,
counts the errors, and syncs again by itself when Redis is back.

Workers are this file run as a program (`worker` below): each its own instrumentor and store,
driven over stdin/stdout with one JSON line per command. Every request a worker sends carries
`x-worker: <name>`, so the simulator's log says who sent what. Timings are generous (a loaded
two-core machine); bounds are asserted on what the design promises (1 s) with a 3 s margin.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import anthropic
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE)]  # tests/, when run as a worker program

from conftest import USER  # noqa: E402
from redis_server import RedisCluster, RedisServer  # noqa: E402
from streamscope import Breaker, CircuitOpen  # noqa: E402
from streamscope.breaker.redis_store import PREFIX, RedisStore, encode  # noqa: E402
from streamscope.simulator import SCENARIOS, Scenario, Simulator, TextSpec, message_stream  # noqa: E402

FAIL_529 = SCENARIOS["http_529"].attempts[0]
COMPLETE = SCENARIOS["http_529_then_ok"].attempts[1]
SLOW = message_stream(blocks=[TextSpec(["slow", " probe", " answer"], interval=0.4)])
MODEL = "fleet-model"
CLUSTER = "cluster+"
"""A worker's Redis URL that starts so is a cluster's node: its store is given a `RedisCluster`."""


# -- a worker process ----------------------------------------------------------------------------------


def worker(redis_url: str, base: str, name: str, failures: int, cool_down: float) -> None:
    """One worker of the fleet: its own instrumentor, breaker and store; commands on stdin."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    from streamscope import AnthropicInstrumentor

    warnings: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                warnings.append(record.getMessage())

    logging.getLogger("streamscope").addHandler(Keep())
    reader = InMemoryMetricReader()
    instrumentor = AnthropicInstrumentor()
    if redis_url.startswith(CLUSTER):  # a Redis Cluster: the store given the service's cluster client
        import redis as redis_py

        store = RedisStore(redis_py.RedisCluster.from_url(redis_url.removeprefix(CLUSTER), socket_timeout=0.5))
    else:
        store = RedisStore(redis_url)
    instrumentor.instrument(tracer_provider=TracerProvider(), meter_provider=MeterProvider(metric_readers=[reader]),
                            breaker=Breaker(failures=failures, window=30, cool_down=cool_down, shared=store))

    def call(scenario: str) -> dict[str, Any]:
        client = anthropic.Anthropic(base_url=f"{base}/s/{scenario}", api_key="k", max_retries=0,
                                     default_headers={"x-worker": name})
        started = time.monotonic()
        try:
            stream = client.messages.create(model=MODEL, max_tokens=64, messages=USER, stream=True)
            for _ in stream:
                pass
            result: dict[str, Any] = {"result": "ok"}
        except CircuitOpen as exc:
            result = {"result": "circuit_open", "retry_after": exc.retry_after, "took": time.monotonic() - started}
        except anthropic.APIStatusError as exc:
            result = {"result": f"http_{exc.status_code}"}
        return result

    def burst(scenario: str, seconds: float, threads: int) -> dict[str, int]:
        counts: dict[str, int] = {}
        lock = threading.Lock()
        until = time.monotonic() + seconds

        def run() -> None:
            while time.monotonic() < until:
                got = call(scenario)["result"]
                with lock:
                    counts[got] = counts.get(got, 0) + 1
                time.sleep(0.02)

        pool = [threading.Thread(target=run) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        return counts

    def view() -> dict[str, Any]:
        pipeline = instrumentor.pipeline
        assert pipeline is not None and pipeline.breakers is not None
        st = pipeline.breakers._states.get(("anthropic", MODEL, None))
        if st is None or st.cell is None:  # never called: what the store's index of open keys says
            return {"state": "closed", "fleet": None, "version": None,
                    "indexed": ("anthropic", MODEL, None) in store._fleet_open}
        return {"state": st.state, "fleet": st.cell.view.state if st.cell.view.live else None,
                "version": st.cell.view.version}

    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        if op == "call":
            reply: Any = call(command["scenario"])
        elif op == "burst":
            reply = burst(command["scenario"], command["seconds"], command["threads"])
        elif op == "view":
            reply = view()
        elif op == "warnings":
            reply = warnings
        else:
            break
        print(json.dumps(reply), flush=True)


class Worker:
    def __init__(self, redis: RedisServer, sim: Simulator, name: str, failures: int = 2,
                 cool_down: float = 2.0) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, __file__, redis.url, sim.url(), name, str(failures), str(cool_down)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def send(self, **command: Any) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def read(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"worker {self.name} exited ({self.proc.poll()})"
        return json.loads(line)

    def ask(self, **command: Any) -> Any:
        self.send(**command)
        return self.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.send(op="quit")
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture
def workers(redis: RedisServer, sim: Simulator) -> Iterator[Any]:
    made: list[Worker] = []

    def make(name: str, **kwargs: Any) -> Worker:
        made.append(Worker(redis, sim, name, **kwargs))
        return made[-1]

    yield make
    for w in made:
        w.stop()


@pytest.fixture
def cluster_workers(sim: Simulator, tmp_path: Any) -> Iterator[Any]:
    """Workers whose stores share a real Redis Cluster (three masters)."""
    with RedisCluster(str(tmp_path)) as cluster:
        made: list[Worker] = []

        def make(name: str, **kwargs: Any) -> Worker:
            made.append(Worker(SimpleNamespace(url=CLUSTER + cluster.url), sim, name, **kwargs))  # type: ignore[arg-type]
            return made[-1]

        yield make
        for w in made:
            w.stop()


def scenario(sim: Simulator, attempt: Any) -> str:
    name = f"fleet_{uuid.uuid4().hex[:10]}"
    sim.add(Scenario(name, [attempt]))
    return name


def sent(sim: Simulator, name: str, by: str | None = None) -> list[Any]:
    return [r for r in sim.requests if r.scenario == name and (by is None or r.headers.get("x-worker") == by)]


def wait_for(check: Any, seconds: float) -> float:
    """Seconds until `check()` held (fails after `seconds`)."""
    start = time.monotonic()
    while not check():
        assert time.monotonic() - start < seconds, "not within the bound"
        time.sleep(0.02)
    return time.monotonic() - start


def opened_by(a: Worker, sim: Simulator, failures: int = 2) -> str:
    failing = scenario(sim, FAIL_529)
    for _ in range(failures):
        assert a.ask(op="call", scenario=failing)["result"] == "http_529"
    assert a.ask(op="view")["state"] == "open"
    return failing


# -- through worker processes --------------------------------------------------------------------------


def test_one_worker_opening_it_opens_it_for_every_worker(workers: Any, sim: Simulator) -> None:
    a, b, fresh = workers("a"), workers("b"), workers("fresh")
    ok = scenario(sim, COMPLETE)
    for w in (a, b):
        assert w.ask(op="call", scenario=ok)["result"] == "ok"  # both have used the key
    assert fresh.ask(op="view")["state"] == "closed"  # up, and has never called this model
    opened_by(a, sim)
    took = wait_for(lambda: b.ask(op="view")["fleet"] == "open", 3.0)
    b_side = scenario(sim, COMPLETE)
    got = b.ask(op="call", scenario=b_side)
    assert got["result"] == "circuit_open" and 0 < got["retry_after"] <= 2.0
    assert got["took"] < 2.0  # failed fast (microseconds; a loaded machine aside): no wait on the store
    assert b.ask(op="view")["state"] == "open"
    # A worker that never called this model: its first call fails fast as well, once its store's
    # thread has read the fleet's index of open keys (within a second; 3 s allowed under load).
    wait_for(lambda: fresh.ask(op="view")["indexed"], 3.0)
    assert fresh.ask(op="call", scenario=b_side)["result"] == "circuit_open"
    assert sent(sim, b_side) == []  # nothing sent by either
    print(f"worker b saw the open after {took:.2f} s")


def test_after_the_cool_down_one_probe_goes_out_and_its_answer_closes_every_worker(
        workers: Any, sim: Simulator) -> None:
    a, b = workers("a", cool_down=2.0), workers("b", cool_down=2.0)
    warm = scenario(sim, COMPLETE)
    for w in (a, b):
        assert w.ask(op="call", scenario=warm)["result"] == "ok"
    opened_by(a, sim)
    wait_for(lambda: b.ask(op="view")["fleet"] == "open", 3.0)
    slow = scenario(sim, SLOW)  # the probe streams for ~1.2 s: every other call meanwhile must fail fast
    for w in (a, b):
        w.send(op="burst", scenario=slow, seconds=6.0, threads=4)
    counts = [a.read(), b.read()]
    requests = sent(sim, slow)
    probe = requests[0]
    assert probe.ended is not None
    assert [r for r in requests if r.started < probe.ended] == [probe]  # exactly one probe, fleet-wide
    assert all(c.get("circuit_open", 0) > 0 for c in counts), counts
    # Its answer closed every worker: both sent calls after it, and both read closed.
    assert {r.headers.get("x-worker") for r in requests[1:]} == {"a", "b"}, counts
    for w in (a, b):
        assert w.ask(op="view")["state"] == "closed"
        assert w.ask(op="call", scenario=warm)["result"] == "ok"


def test_a_failed_probe_opens_it_again_for_every_worker(workers: Any, sim: Simulator) -> None:
    cool = 3.0
    a, b = workers("a", cool_down=cool), workers("b", cool_down=cool)
    warm = scenario(sim, COMPLETE)
    for w in (a, b):
        assert w.ask(op="call", scenario=warm)["result"] == "ok"
    opened_by(a, sim)
    wait_for(lambda: b.ask(op="view")["fleet"] == "open", 3.0)
    first = b.ask(op="view")["version"]
    failing = scenario(sim, FAIL_529)
    for w in (a, b):
        w.send(op="burst", scenario=failing, seconds=cool + 2.0, threads=4)
    counts = [a.read(), b.read()]
    requests = sent(sim, failing)
    probe = requests[0]
    assert probe.ended is not None
    # The probe failed: open again for another cool-down, for every worker: nothing else went out.
    assert [r for r in requests if r.started < probe.ended + cool - 0.5] == [probe], counts
    for w in (a, b):
        seen = w.ask(op="view")
        assert seen["state"] == "open" and seen["fleet"] == "open" and seen["version"] != first
        assert w.ask(op="call", scenario=warm)["result"] == "circuit_open"
    assert len(sent(sim, warm, "a")) == len(sent(sim, warm, "b")) == 1  # the warm-up calls only


def test_a_dead_worker_probe_slot_passes_on(workers: Any, sim: Simulator) -> None:
    a, b = workers("a", cool_down=1.0), workers("b", cool_down=1.0)
    warm = scenario(sim, COMPLETE)
    for w in (a, b):
        assert w.ask(op="call", scenario=warm)["result"] == "ok"
    opened_by(a, sim)
    wait_for(lambda: b.ask(op="view")["fleet"] == "open", 3.0)
    hang = scenario(sim, message_stream(blocks=[TextSpec(["never", " ends"], interval=60)]))
    a.send(op="burst", scenario=hang, seconds=60, threads=1)  # fails fast until its probe goes out, and hangs
    wait_for(lambda: bool(sent(sim, hang, "a")), 10.0)
    a.proc.kill()
    a.proc.wait(10)
    ok = scenario(sim, COMPLETE)
    # b fails fast until a's lease runs out (5 s), then b probes, and its answer closes it.
    wait_for(lambda: b.ask(op="call", scenario=ok)["result"] == "ok", 15.0)
    assert len(sent(sim, ok, "b")) == 1


# -- Redis down, hung, back ----------------------------------------------------------------------------


def metric_sum(reader: Any, name: str) -> dict[str, int]:
    data = reader.get_metrics_data()
    out: dict[str, int] = {}
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                if m.name == name:
                    for p in m.data.data_points:
                        key = str(p.attributes.get("streamscope.store.operation"))
                        out[key] = out.get(key, 0) + p.value
    return out


def test_on_a_cluster_one_worker_opening_it_opens_it_for_every_worker(cluster_workers: Any, sim: Simulator) -> None:
    """The same, the store on a Redis Cluster: a key's entries in one slot, the index in another."""
    test_one_worker_opening_it_opens_it_for_every_worker(cluster_workers, sim)


def test_on_a_cluster_one_probe_goes_out_and_its_answer_closes_every_worker(cluster_workers: Any,
                                                                            sim: Simulator) -> None:
    test_after_the_cool_down_one_probe_goes_out_and_its_answer_closes_every_worker(cluster_workers, sim)


def test_redis_down_each_worker_decides_alone_then_syncs_again(
        redis: RedisServer, workers: Any, sim: Simulator, instrument: Any, caplog: Any) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from conftest import client

    reader = InMemoryMetricReader()
    instrument(meter_provider=MeterProvider(metric_readers=[reader]),
               breaker=Breaker(failures=2, window=30, cool_down=3.0, shared=RedisStore(redis.url, timeout=3.0)))
    b = workers("b", cool_down=3.0)
    ok, failing = scenario(sim, COMPLETE), scenario(sim, FAIL_529)
    clients = {name: client(sim, name) for name in (ok, failing)}
    retry_after = [0.0]

    def call(name: str) -> tuple[str, float]:
        started = time.monotonic()
        try:
            for _ in clients[name].messages.create(model=MODEL, max_tokens=64, messages=USER, stream=True):
                pass
            return "ok", time.monotonic() - started
        except CircuitOpen as exc:
            retry_after[0] = exc.retry_after
            return "circuit_open", time.monotonic() - started
        except anthropic.APIStatusError:
            return "failed", time.monotonic() - started

    assert call(ok)[0] == "ok" and b.ask(op="call", scenario=ok)["result"] == "ok"
    time.sleep(0.5)
    with caplog.at_level(logging.INFO, logger="streamscope"):
        redis.stop()
        for _ in range(2):  # this process opens it on its own
            assert call(failing)[0] == "failed"
        refused = [call(ok) for _ in range(10)]
        assert all(r == "circuit_open" for r, _ in refused), refused
        assert max(t for _, t in refused) < 2.0  # never waits on the store (its timeout here: 3 s)
        time.sleep(retry_after[0] + 0.25)  # the cool-down: the probe is this process's own, as without a store
        assert call(ok)[0] == "ok" and call(ok)[0] == "ok"
        assert b.ask(op="view")["state"] == "closed"  # b never heard: it decides alone too
        time.sleep(1.0)  # several failed ticks: still one warning
        lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "Redis" in r.getMessage()]
        assert len(lines) == 1 and "\n" not in lines[0] and "breaker.sync" in lines[0], lines
        assert metric_sum(reader, "streamscope.store.errors").get("breaker.sync", 0) >= 2

        redis.start()  # empty, as after a crash
        wait_for(lambda: any("reachable again" in r.getMessage() for r in caplog.records), 5.0)
    for _ in range(2):
        assert call(failing)[0] == "failed"
    wait_for(lambda: b.ask(op="view")["fleet"] == "open", 3.0)  # synced again, both ways
    assert b.ask(op="call", scenario=ok)["result"] == "circuit_open"
    assert len(sent(sim, ok, "b")) == 1  # its first call only
    warned = b.ask(op="warnings")
    assert len([w for w in warned if "Redis" in w]) == 1, warned


def test_a_hung_redis_holds_no_call(redis: RedisServer, sim: Simulator, instrument: Any) -> None:
    from conftest import client

    instrument(breaker=Breaker(failures=2, window=30, cool_down=60, shared=RedisStore(redis.url, timeout=0.3)))
    ok = scenario(sim, COMPLETE)
    for _ in client(sim, ok).messages.create(model=MODEL, max_tokens=64, messages=USER, stream=True):
        pass
    assert redis.proc is not None
    os.kill(redis.proc.pid, signal.SIGSTOP)  # accepts nothing, answers nothing
    try:
        took = []
        for _ in range(10):
            started = time.monotonic()
            for _ in client(sim, ok).messages.create(model=MODEL, max_tokens=64, messages=USER, stream=True):
                pass
            took.append(time.monotonic() - started)
            time.sleep(0.1)
        assert max(took) < 2.0  # a streamed answer (~0.1 s) on a loaded machine; never the store's 0.3 s × n
    finally:
        os.kill(redis.proc.pid, signal.SIGCONT)


# -- the store on its own ------------------------------------------------------------------------------


def test_a_forked_child_syncs_with_its_own_thread(redis: RedisServer) -> None:
    import redis as redis_py

    from streamscope.breaker import Breakers, BreakerTable

    store = RedisStore(redis.url)
    breakers = Breakers(BreakerTable(Breaker(failures=1, window=30, cool_down=60, shared=store)))
    key = ("anthropic", "forked", None)
    breakers.ended(breakers.admit(*key), "succeeded")  # type: ignore[arg-type]
    time.sleep(0.3)  # the parent's thread runs
    pid = os.fork()
    if pid == 0:  # the child: only its own thread can write its open
        code = 1
        try:
            breakers.ended(breakers.admit(*key), "failed")  # type: ignore[arg-type]
            client = redis_py.Redis.from_url(redis.url, socket_timeout=1)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                if client.hget(f"{PREFIX}{{{encode(key)}}}", "state") == b"open":
                    code = 0
                    break
                time.sleep(0.05)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    wait_for(lambda: breakers.state(key) == "open" or isinstance(breakers.admit(*key), CircuitOpen), 3.0)


def test_shared_takes_a_store() -> None:
    with pytest.raises(TypeError) as caught:
        Breaker(shared="redis://localhost:6379")  # type: ignore[arg-type]
    message = str(caught.value)
    assert "Breaker.shared takes a store" in message and "RedisStore(url)" in message and "\n" not in message
    with pytest.raises(ValueError, match="timeout"):
        RedisStore("redis://localhost:6379", timeout=0)
    with pytest.raises(TypeError, match=r"^RedisStore\(\) got an unexpected keyword argument 'timout' \(did you mean"):
        RedisStore("redis://localhost:6379", timout=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^RedisStore\(timeout=...\) takes seconds \(a number\), not str '1'$"):
        RedisStore("redis://localhost:6379", timeout="1")  # type: ignore[arg-type]


if __name__ == "__main__":
    worker(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
