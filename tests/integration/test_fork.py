"""Fork safety and no stale entries (issue 13, points 1 and 2).

A worker forked from a process that already streamed enforces its own budgets with state of its
own, and never acts on a stream it inherited (the parent's); a finished stream leaves nothing in
the watchdog. Real `os.fork` and `multiprocessing` (fork start method), the real SDK against the
simulator. A child reports over a pipe and leaves with `os._exit` (never back into pytest); every
assertion is made in the parent. Margins are generous: a loaded 2-core machine.
"""

from __future__ import annotations

import asyncio
import gc
import json
import multiprocessing
import os
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import pytest

import streamscope
from conftest import USER, Telemetry, aclient, client
from streamscope import Budgets, StreamTimeout
from streamscope.budgets import sync_watch
from streamscope.budgets.sync_watch import watchdog
from streamscope.core import guard as internal
from streamscope.core.calls import call_of
from streamscope.simulator import Scenario, Silence, TextSpec, message_stream

LATE = 2.5
"""A 0.5 s idle budget caught later than this after the last content is late (the bug: about
3 s, or never: a 5 s stall ran to its end)."""
BUDGETS = {
    "default": Budgets(idle=0.5, deadline=30),
    "route:parent": Budgets(idle=2.0, deadline=30),  # the parent's slow stream: 0.25 s gaps
}
SLOW_DELTAS = 14  # `fork_slow`: one every 0.25 s, 3.5 s in all


@pytest.fixture(scope="module", autouse=True)
def scenarios(sim) -> None:
    sim.add(Scenario.single("fork_stall", message_stream(
        blocks=[TextSpec(["Streams", " fail", " in", Silence(5.0), " ways."], interval=0.05)])))
    sim.add(Scenario.single("fork_slow", message_stream(blocks=[TextSpec(["tok "] * SLOW_DELTAS, interval=0.25)])))


# -- children --------------------------------------------------------------------------------

def in_child(work: Callable[[], Any]) -> tuple[int, int]:
    """Fork: the child runs `work`, sends its result (or its traceback) up a pipe as JSON and
    leaves with `os._exit`. Returns (pid, read end)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            try:
                message = {"ok": work()}
            except BaseException:
                message = {"error": traceback.format_exc()}
            with os.fdopen(write, "w") as out:
                json.dump(message, out)
        finally:
            os._exit(0)
    os.close(write)
    return pid, read


def result_of(child: tuple[int, int], timeout: float = 60.0) -> Any:
    """The child's result; a child that hangs is killed and fails the test."""
    pid, read = child
    data = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([read], [], [], max(left, 0))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                pytest.fail(f"child {pid} hung (no result after {timeout} s)")
            chunk = os.read(read, 65536)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    message = json.loads(data) if data else {"error": "the child sent nothing"}
    if "error" in message:
        pytest.fail(f"child {pid} failed:\n{message['error']}")
    return message["ok"]


def stall(base_url: str) -> dict[str, Any]:
    """A stream that goes silent for 5 s after three deltas: under idle=0.5 it must raise."""
    c = anthropic.Anthropic(base_url=base_url, api_key="test-key", max_retries=0)
    content, last = 0, time.monotonic()
    try:
        for event in c.messages.create(model="m", max_tokens=64, messages=USER, stream=True):
            if event.type == "content_block_delta":
                content, last = content + 1, time.monotonic()
        budget = None
    except StreamTimeout as exc:
        budget = exc.budget
    finally:
        c.close()
    return {"budget": budget, "content": content, "after": time.monotonic() - last}


async def astall(base_url: str) -> dict[str, Any]:
    c = anthropic.AsyncAnthropic(base_url=base_url, api_key="test-key", max_retries=0)
    content, last = 0, time.monotonic()
    try:
        async for event in await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True):
            if event.type == "content_block_delta":
                content, last = content + 1, time.monotonic()
        budget = None
    except StreamTimeout as exc:
        budget = exc.budget
    finally:
        await c.close()
    return {"budget": budget, "content": content, "after": time.monotonic() - last}


def assert_caught(result: dict[str, Any]) -> None:
    assert result["budget"] == "idle" and result["content"] == 3, result
    assert 0.5 - 0.05 <= result["after"] < LATE, result


def consume(sim, scenario: str) -> int:
    content = 0
    for event in client(sim, scenario).messages.create(model="m", max_tokens=64, messages=USER, stream=True):
        content += event.type == "content_block_delta"
    return content


def classes(telemetry: Telemetry, first: int) -> list[str]:
    return [str((s.attributes or {}).get("streamscope.class")) for s in telemetry.spans()[first:]]


class SlowReader:
    """A parent's stream in flight at the fork: read in a thread, slowly (the caller holds each
    event 50 ms); `ready` is set at the third delta."""

    def __init__(self, sim, is_async: bool = False) -> None:
        self.sim, self.is_async = sim, is_async
        self.ready = threading.Event()
        self.stream: Any = None
        self.result: Any = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.result = asyncio.run(self._aread()) if self.is_async else self._read()
        except Exception as exc:
            self.result = repr(exc)
        self.ready.set()

    def _read(self) -> int:
        with streamscope.route("parent"):
            self.stream = client(self.sim, "fork_slow").messages.create(
                model="m", max_tokens=64, messages=USER, stream=True)
        content = 0
        for event in self.stream:
            content += event.type == "content_block_delta"
            if content == 3:
                self.ready.set()
            time.sleep(0.05)
        return content

    async def _aread(self) -> int:
        with streamscope.route("parent"):
            self.stream = await aclient(self.sim, "fork_slow").messages.create(
                model="m", max_tokens=64, messages=USER, stream=True)
        content = 0
        async for event in self.stream:
            content += event.type == "content_block_delta"
            if content == 3:
                self.ready.set()
            await asyncio.sleep(0.05)
        return content

    def wait_in_flight(self) -> None:
        """Until the reader is blocked on the socket, waiting for the next delta (0.25 s apart)."""
        assert self.ready.wait(10), "the parent's stream never started"
        assert self.result is None, self.result
        time.sleep(0.1)

    def finish(self) -> Any:
        self.thread.join(15)
        assert not self.thread.is_alive(), "the parent's stream never ended"
        return self.result


# -- fork safety ----------------------------------------------------------------------------

def test_children_of_a_parent_that_streamed_catch_their_own_stalls(sim, instrument) -> None:
    """The parent ran a budgeted stream and holds another one open (its watchdog waits on it);
    two children at once each catch two 5 s stalls at idle=0.5, with a watchdog of their own."""
    telemetry = instrument(budgets=BUDGETS)
    assert consume(sim, "complete") == 5
    held = client(sim, "fork_slow").messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    next(iter(held))  # a budgeted stream open at the fork, parked (the caller is away)
    parent_dog = watchdog()
    assert parent_dog.watched() == 1
    url = sim.url("fork_stall")

    def work() -> dict[str, Any]:
        first = len(telemetry.spans())
        stalls = [stall(url), stall(url)]
        dog = watchdog()
        return {"stalls": stalls, "fresh": dog is not parent_dog, "dog_pid": dog.pid, "pid": os.getpid(),
                "pending": dog.pending(), "classes": classes(telemetry, first)}

    children = [in_child(work), in_child(work)]
    results = [result_of(child) for child in children]
    for got in results:
        for one in got["stalls"]:
            assert_caught(one)
        assert got["fresh"] and got["dog_pid"] == got["pid"], "the child kept the parent's watchdog"
        assert got["pending"] == 0
        assert got["classes"] == ["stalled_mid_stream"] * 2
    held.close()
    assert parent_dog.pending() == parent_dog.watched() == 0


def test_parent_stream_in_flight_at_fork_is_unharmed(sim, instrument) -> None:
    """A parent stream read slowly in a thread is in flight at the fork; two children catch
    their own stalls and outlive the parent's idle budget (2 s), which their copy of the
    parent's stream would have run out: the parent's stream completes, classed `complete`."""
    telemetry = instrument(budgets=BUDGETS)
    reader = SlowReader(sim)
    reader.wait_in_flight()
    forked = time.monotonic()
    url = sim.url("fork_stall")

    def work() -> dict[str, Any]:
        first = len(telemetry.spans())
        call = call_of(reader.stream)
        rec = call.recorder
        inherited = rec.watch
        caught = stall(url)
        inherited.rearm()  # what a read of the inherited stream would do: refused here
        pending = watchdog().pending()
        time.sleep(max(0.0, forked + 2.6 - time.monotonic()))  # past the inherited idle budget
        fired = rec.fired
        call.finalizer()  # what this child's exit (or a collection) does to the stream it inherited
        return {"stall": caught, "pending": pending, "fired": fired, "finished": rec.finished,
                "classes": classes(telemetry, first)}

    children = [in_child(work), in_child(work)]
    results = [result_of(child) for child in children]
    assert reader.finish() == SLOW_DELTAS, "the parent's stream was harmed"
    for got in results:
        assert_caught(got["stall"])
        assert got["pending"] == 0, "the child's watchdog took the parent's stream"
        assert got["fired"] is None and not got["finished"], "the child acted on the parent's stream"
        assert got["classes"] == ["stalled_mid_stream"], "the child recorded the parent's stream"
    [span] = [s for s in telemetry.spans() if (s.attributes or {}).get("streamscope.route") == "parent"]
    assert span.attributes["streamscope.class"] == "complete"
    assert "streamscope.budget.fired" not in span.attributes


def test_async_stream_in_flight_at_fork_is_unharmed(sim, instrument) -> None:
    """The same with an async parent stream (its budget is a timer of a loop in the parent's
    thread): the child's copy of that timer does nothing, the child's own async and sync stalls
    are caught, and the parent's stream completes."""
    telemetry = instrument(budgets=BUDGETS)
    reader = SlowReader(sim, is_async=True)
    reader.wait_in_flight()
    forked = time.monotonic()
    url = sim.url("fork_stall")

    def work() -> dict[str, Any]:
        first = len(telemetry.spans())
        call = call_of(reader.stream)
        rec = call.recorder
        watch = rec.watch
        caught = [asyncio.run(astall(url)), stall(url)]
        time.sleep(max(0.0, forked + 2.6 - time.monotonic()))  # the inherited idle budget ran out
        watch._check()  # the inherited loop's timer, fired here: the stream is the parent's
        call.finalizer()
        return {"stalls": caught, "fired": rec.fired, "armed": watch.handle is not None,
                "finished": rec.finished, "classes": classes(telemetry, first)}

    got = result_of(in_child(work))
    assert reader.finish() == SLOW_DELTAS, "the parent's stream was harmed"
    for one in got["stalls"]:
        assert_caught(one)
    assert got["fired"] is None and not got["armed"] and not got["finished"], got
    assert got["classes"] == ["stalled_mid_stream"] * 2
    [span] = [s for s in telemetry.spans() if (s.attributes or {}).get("streamscope.route") == "parent"]
    assert span.attributes["streamscope.class"] == "complete"


def test_locks_held_at_fork_do_not_hang_the_child(sim, instrument) -> None:
    """Threads of the parent may hold streamscope's locks at the fork (the watchdog's, the
    internal-error log's): the child has its own, its own error count and its own log-once."""
    instrument(budgets=BUDGETS)
    consume(sim, "complete")
    url = sim.url("fork_stall")

    def work() -> dict[str, Any]:
        caught = stall(url)
        try:
            raise RuntimeError("a streamscope failure in the child")
        except RuntimeError:
            internal.internal_error("test_fork")
        return {"stall": caught, "count": internal.count}

    with watchdog()._cond, sync_watch._watchdog_lock, internal._lock:
        child = in_child(work)
    got = result_of(child, timeout=30)
    assert_caught(got["stall"])
    assert got["count"] == 1


def test_exporter_locks_held_at_fork_do_not_hang_the_child() -> None:
    """The cardinality guard's lock (first use of a new model or route value) and the
    multiprocess exporter's series lock, held by a parent thread at the fork."""
    from streamscope.export import prometheus_multiprocess
    from streamscope.export.cardinality import CardinalityGuard

    guard = CardinalityGuard("model", 5)

    def work() -> dict[str, Any]:
        with prometheus_multiprocess._series_lock:
            pass
        return {"folded": guard("claude-new")}

    with guard._lock, prometheus_multiprocess._series_lock:
        child = in_child(work)
    assert result_of(child, timeout=30) == {"folded": "claude-new"}


def _pool_task(url: str) -> dict[str, Any]:
    got = stall(url)
    got.update(pid=os.getpid(), pending=watchdog().pending())
    return got


def test_multiprocessing_fork_pool(sim, instrument) -> None:
    """A `multiprocessing` pool forked after a budgeted stream: each of four tasks (two per
    worker, so a worker's second stream uses the watchdog its first one started) is caught."""
    instrument(budgets=BUDGETS)
    consume(sim, "complete")
    with multiprocessing.get_context("fork").Pool(2) as pool:
        results = pool.map(_pool_task, [sim.url("fork_stall")] * 4, chunksize=1)
    for got in results:
        assert_caught(got)
        assert got["pending"] == 0
    assert os.getpid() not in {got["pid"] for got in results}


# -- no stale entries -----------------------------------------------------------------------

def test_finished_streams_leave_nothing_in_the_watchdog(sim, instrument) -> None:
    """Budgets reaching minutes ahead, every way a stream ends (done, closed early, dropped
    unread, stalled), from 8 threads: while they run the heap holds at most two entries per
    stream watched, and when they have ended it is empty."""
    instrument(budgets={"default": Budgets(first_token=60, idle=60, deadline=600),
                        "route:stall": Budgets(idle=0.3)})
    dog = watchdog()
    errors: list[BaseException] = []
    worst: list[tuple[int, int]] = []

    def ways_out() -> None:
        try:
            for _ in range(3):
                consume(sim, "complete")
                stream = client(sim, "slow_answer").messages.create(model="m", max_tokens=64, messages=USER,
                                                                    stream=True)
                for event in stream:
                    if event.type == "content_block_delta":
                        break
                stream.close()
                client(sim, "slow_answer").messages.create(model="m", max_tokens=64, messages=USER, stream=True)
                gc.collect()  # dropped unread: ended by its finalizer
                with streamscope.route("stall"), pytest.raises(StreamTimeout):
                    consume(sim, "fork_stall")
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ways_out) for _ in range(8)]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        with dog._cond:
            worst.append((len(dog._heap), dog._live))
        time.sleep(0.01)
    assert not errors, errors
    assert all(entries <= 2 * live for entries, live in worst), max(worst)
    gc.collect()
    assert (dog.pending(), dog.watched()) == (0, 0)


def test_stale_benchmark_short_form() -> None:
    """benchmarks/stale.py in small: the watchdog ends empty and memory stays flat."""
    bench = Path(__file__).resolve().parents[2] / "benchmarks"
    out = subprocess.run([sys.executable, str(bench / "stale.py"), "--streams", "2000", "--marks", "4"],
                         capture_output=True, text=True, timeout=300, cwd=bench)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "flat: yes" in out.stdout, out.stdout
