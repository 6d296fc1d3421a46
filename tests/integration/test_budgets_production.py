"""Budgets as production uses them: they never end a healthy stream and never let a stall through.

Over the real SDK and the local endpoint, sync and async, `create(stream=True)` and `stream()`:

* sync body reads are bounded by streamscope's budgets, not by the cap put on the wait for the
  headers (first-token below, equal to and above idle);
* a caller that has not asked for the next event is never charged for its own time, down to
  10 ms idle budgets with a consumer slower than the budget;
* budgets follow the stream: break and resume (same task, another task, `anext()`/`next()`
  mixed with loops) keeps every budget;
* `streamscope.max_gap` is the provider's silence while the caller waited.

Budgets and margins are scaled for a loaded 2-core machine: a healthy gap sits well under its
budget, and a stall must be caught within its budget plus `MARGIN`.
"""

from __future__ import annotations

import asyncio
import gc
import ssl
import sys
import time
from collections.abc import Callable
from typing import Any

import anthropic
import pytest

import sdk_lines
from conftest import USER, Telemetry, aclient, client
from streamscope import AnthropicInstrumentor, Budgets, StreamTimeout
from streamscope.simulator import Scenario, Silence, Simulator, TextSpec, message_stream

MARGIN = 1.5
"""Late firing allowed on a loaded machine; the stalls last 5 s, so a budget that fired at all is inside it."""
WORDS = ["Streams", " fail", " in", " ways"]

SCENARIOS = [
    # A healthy stream with one 0.4 s gap between text deltas.
    Scenario.single("gap_0_4", message_stream(blocks=[TextSpec([*WORDS, Silence(0.4), *WORDS], interval=0.02)])),
    # Four deltas, then nothing for 5 s.
    Scenario.single("stall", message_stream(blocks=[TextSpec([*WORDS, Silence(5.0), " more"], interval=0.02)])),
    # Headers at once, then nothing for 5 s.
    Scenario.single("late_start", message_stream(first_event_delay=5.0, blocks=[TextSpec(WORDS)])),
    # Everything at once: 60 deltas back to back.
    Scenario.single("burst", message_stream(blocks=[TextSpec(["tok "] * 60, interval=0.0)])),
    # 40 deltas 2 ms apart, then an 8 s silence (longer than a slow consumer takes over the 40, even
    # on a loaded machine: at 3 s, 40 sleeps of 25 ms once outlasted it), then the rest.
    Scenario.single("fast_then_stall", message_stream(
        blocks=[TextSpec([*(["tok "] * 40), Silence(8.0), *(["tok "] * 3)], interval=0.002)])),
    # 15 deltas 10 ms apart.
    Scenario.single("steady", message_stream(blocks=[TextSpec(["tok "] * 15, interval=0.01)])),
    # The whole answer and its final event, then 2.5 s before the body ends (a loaded server, a
    # proxy slow to pass the last chunk on).
    Scenario.single("slow_body_end", [*message_stream(blocks=[TextSpec(WORDS, interval=0.02)]), Silence(2.5)]),
    # A delta, a 0.5 s silence, a delta.
    Scenario.single("one_pause", message_stream(blocks=[TextSpec(["a", Silence(0.5), "b"], interval=0.02)])),
]

BUDGET_SHAPES = {
    # first_token below the healthy 0.4 s gap (the old per-read cap would end it), with room for a
    # loaded 2-core CI machine to deliver the first token: 0.2 s was once exceeded there.
    "first_token<idle": Budgets(first_token=0.3, idle=1.0),
    "first_token=idle": Budgets(first_token=0.7, idle=0.7),
    "first_token>idle": Budgets(first_token=1.0, idle=0.7),
}


@pytest.fixture(scope="module", autouse=True)
def _scenarios(sim) -> None:
    for scenario in SCENARIOS:
        sim.add(scenario)


@pytest.fixture
def instrument(instrument: Callable[..., Telemetry]) -> Callable[..., Telemetry]:
    """As conftest's, callable again within a test: each call starts a fresh session."""

    def again(**kwargs: Any) -> Telemetry:
        instrumentor = AnthropicInstrumentor()
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()
        return instrument(**kwargs)

    return again


def read_sync(sim, scenario: str, path: str, *, before: float = 0.0, each: float = 0.0,
              on_event: Callable[[Any], None] | None = None, **client_args: Any) -> tuple[str, float]:
    """Read a stream to its end: ("complete" | the budget that fired | an exception's class, seconds)."""
    c = client(sim, scenario, **client_args)
    start = time.monotonic()
    try:
        if path == "create":
            stream = c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
            time.sleep(before)
            for event in stream:
                if on_event is not None:
                    on_event(event)
                time.sleep(each)
        else:
            with c.messages.stream(model="m", max_tokens=64, messages=USER) as s:
                time.sleep(before)
                for event in s:
                    if on_event is not None:
                        on_event(event)
                    time.sleep(each)
        return "complete", time.monotonic() - start
    except StreamTimeout as exc:
        return exc.budget, time.monotonic() - start
    except Exception as exc:  # a raw transport error is exactly what must not happen
        return type(exc).__name__, time.monotonic() - start
    finally:
        c.close()


async def read_async(sim, scenario: str, path: str, *, before: float = 0.0, each: float = 0.0,
                     on_event: Callable[[Any], None] | None = None) -> tuple[str, float]:
    c = aclient(sim, scenario)
    start = time.monotonic()
    try:
        if path == "create":
            stream = await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
            await asyncio.sleep(before)
            async for event in stream:
                if on_event is not None:
                    on_event(event)
                await asyncio.sleep(each)
        else:
            async with c.messages.stream(model="m", max_tokens=64, messages=USER) as s:
                await asyncio.sleep(before)
                async for event in s:
                    if on_event is not None:
                        on_event(event)
                    await asyncio.sleep(each)
        return "complete", time.monotonic() - start
    except StreamTimeout as exc:
        return exc.budget, time.monotonic() - start
    except Exception as exc:
        return type(exc).__name__, time.monotonic() - start
    finally:
        await c.close()


def assert_fired(telemetry: Telemetry, budget: str, label: str) -> None:
    attrs = telemetry.attrs()
    assert attrs["streamscope.budget.fired"] == budget
    assert attrs["streamscope.class"] == label
    assert attrs["error.type"] == "timeout"


# -- 1. sync: the cap on the wait for the headers ends with the headers ------------------------------

@pytest.mark.parametrize("path", ["create", "stream"])
@pytest.mark.parametrize("shape", list(BUDGET_SHAPES))
def test_sync_healthy_gap_between_first_token_and_idle_completes(sim, instrument, shape: str, path: str) -> None:
    """A 0.4 s gap: above first_token=0.3 (the old per-read cap), below every idle budget."""
    runs = 4 if shape == "first_token=idle" else 1  # where the cap used to race the watchdog
    for _ in range(runs):
        telemetry = instrument(budgets=BUDGET_SHAPES[shape])
        outcome, _ = read_sync(sim, "gap_0_4", path)
        assert outcome == "complete"
        assert telemetry.attrs()["streamscope.class"] == "complete"
        # The gap the caller waited through: less than the script's 0.4 s when a loaded machine made
        # the caller late to read the event before it (the next one was then already on its way).
        assert 0.25 <= telemetry.attrs()["streamscope.max_gap"] < 0.4 + MARGIN


@pytest.mark.parametrize("path", ["create", "stream"])
@pytest.mark.parametrize("shape", list(BUDGET_SHAPES))
def test_sync_stalls_are_stream_timeouts_with_the_right_name(sim, instrument, shape: str, path: str) -> None:
    budgets = BUDGET_SHAPES[shape]
    telemetry = instrument(budgets=budgets)
    outcome, elapsed = read_sync(sim, "stall", path)
    assert outcome == "idle"  # never ReadTimeout, RemoteProtocolError or an anthropic exception
    assert_fired(telemetry, "idle", "stalled_mid_stream")
    assert elapsed <= 0.1 + budgets.idle + MARGIN

    telemetry = instrument(budgets=budgets)
    outcome, elapsed = read_sync(sim, "late_start", path)
    assert outcome == "first_token"
    assert_fired(telemetry, "first_token", "stalled_before_first_content")
    assert budgets.first_token <= elapsed <= budgets.first_token + MARGIN


def test_sync_the_callers_own_read_timeout_still_applies(sim, instrument) -> None:
    """Where the caller set a read timeout itself, body reads keep it (a 0.4 s gap, read=0.2)."""
    import httpx2

    telemetry = instrument(budgets=Budgets(first_token=5, idle=5))
    outcome, _ = read_sync(sim, "gap_0_4", "create", timeout=httpx2.Timeout(5.0, read=0.2))
    assert outcome == sdk_lines.read_timeout().__name__
    assert_fired(telemetry, "read_timeout", "stalled_mid_stream")


@pytest.mark.parametrize("shape", list(BUDGET_SHAPES))
async def test_async_shapes(sim, instrument, shape: str) -> None:
    budgets = BUDGET_SHAPES[shape]
    for scenario, want in (("gap_0_4", "complete"), ("stall", "idle"), ("late_start", "first_token")):
        instrument(budgets=budgets)
        outcome, _ = await read_async(sim, scenario, "create")
        assert outcome == want, scenario


# -- 3. the caller's own time is never charged --------------------------------------------------------

@pytest.mark.parametrize("path", ["create", "stream"])
def test_sync_a_caller_that_reads_late_is_not_a_stall(sim, instrument, path: str) -> None:
    """The whole answer is in the socket; the caller starts reading 2 s after the headers, twice
    the first-token budget (which also covers the wait for the headers: 1 s leaves a loaded
    machine room for that)."""
    telemetry = instrument(budgets=Budgets(first_token=1.0, idle=0.3))
    assert read_sync(sim, "burst", path, before=2.0)[0] == "complete"
    assert telemetry.attrs()["streamscope.class"] == "complete"


@pytest.mark.parametrize("path", ["create", "stream"])
async def test_async_a_caller_that_reads_late_is_not_a_stall(sim, instrument, path: str) -> None:
    telemetry = instrument(budgets=Budgets(first_token=1.0, idle=0.3))
    assert (await read_async(sim, "burst", path, before=2.0))[0] == "complete"
    assert telemetry.attrs()["streamscope.class"] == "complete"


@pytest.mark.parametrize("path", ["create", "stream"])
def test_sync_a_consumer_slower_than_a_10ms_budget(sim, instrument, path: str) -> None:
    """The server sends faster than the caller reads (25 ms per event, idle 10 ms; first-token
    0.5 s, the caller 0.6 s late): no false firing, and the real stall at the end is still caught."""
    budgets = Budgets(first_token=0.5, idle=0.01)
    for _ in range(3):
        telemetry = instrument(budgets=budgets)
        assert read_sync(sim, "burst", path, before=0.6, each=0.025)[0] == "complete"
        assert telemetry.attrs()["streamscope.class"] == "complete"
    telemetry = instrument(budgets=budgets)
    outcome, _ = read_sync(sim, "fast_then_stall", path, each=0.025)
    assert outcome == "idle"
    assert telemetry.attrs()["streamscope.content_events"] == 40  # every delta before the stall


class Shutdowns:
    """How often the watchdog shut a stream's socket down (the adapter's own function, counted
    and still run)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from streamscope.adapters.stainless import body_watch as hooks

        self.count = 0
        original = hooks.shutdown

        def counted(sock: Any) -> None:
            self.count += 1
            original(sock)

        monkeypatch.setattr(hooks, "shutdown", counted)


@pytest.fixture
def shutdowns(monkeypatch: pytest.MonkeyPatch) -> Shutdowns:
    return Shutdowns(monkeypatch)


class HeldUp:
    """Garbage collections in the SDK's parsing of the stream that take 40 ms each (a gc
    callback sleeps), the way a large process's full collection, or a thread preempted on a
    loaded machine, holds a reader up while the rest of the answer sits in its transport."""

    def __init__(self, pause: float = 0.04, times: int = 6) -> None:
        self.pause, self.left, self.paused = pause, times, 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start" and self.left > 0 and _parsing(sys._getframe(1)):
            self.left -= 1
            self.paused += 1
            time.sleep(self.pause)

    def __enter__(self) -> HeldUp:
        self.threshold = gc.get_threshold()
        gc.set_threshold(10, 10, 10)
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gc.callbacks.remove(self)
        gc.set_threshold(*self.threshold)


def _parsing(frame: Any) -> bool:
    """Whether the SDK's stream parser (`Stream.__stream__`, or streamscope's `streamed` in its
    place: adapters/stainless/streamed.py) is on the stack."""
    while frame is not None:
        if frame.f_code.co_name in ("__stream__", "streamed"):
            return True
        frame = frame.f_back
    return False


@pytest.mark.parametrize("path", ["create", "stream"])
def test_sync_a_reader_held_up_with_the_answer_in_hand_is_not_a_stall(sim, instrument, shutdowns, path: str) -> None:
    """40 ms pauses in the reading thread while it parses an answer that arrived at once (idle
    budget 10 ms, nothing left on the socket): the watchdog sees the reader busy outside the
    socket read, and fires nothing; a real stall read through the same pauses still fires."""
    budgets = Budgets(first_token=0.5, idle=0.01)
    for _ in range(2):
        telemetry = instrument(budgets=budgets)
        with HeldUp() as held:
            assert read_sync(sim, "burst", path)[0] == "complete"
        assert held.paused > 0  # the pauses happened
        assert shutdowns.count == 0  # the watchdog never shut the socket
        assert telemetry.attrs()["streamscope.class"] == "complete"
        assert "streamscope.budget.fired" not in telemetry.attrs()
    telemetry = instrument(budgets=budgets)
    with HeldUp(times=3):
        outcome, _ = read_sync(sim, "fast_then_stall", path)
    assert outcome == "idle"
    assert shutdowns.count == 1
    assert telemetry.attrs()["streamscope.content_events"] == 40


def test_sync_a_firing_that_comes_to_nothing_is_not_recorded(sim, instrument) -> None:
    """Where the reader's wait cannot be told (a transport other than httpcore's: an unreadable
    socket is then enough), a held-up reader can still be fired on; the shut-down socket ends
    nothing when the rest of the answer is already in the transport, and the stream that ends
    normally is recorded complete, as the caller received it, not as a stall."""
    from streamscope.core.calls import ATTR

    telemetry = instrument(budgets=Budgets(first_token=0.5, idle=0.01))
    c = client(sim, "burst")
    try:
        stream = c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
        stream.__dict__[ATTR].recorder.watch.waiting = lambda: True  # as with an unknown transport
        with HeldUp() as held:
            events = sum(1 for _ in stream)
    finally:
        c.close()
    assert held.paused > 0
    assert events == 65  # message_start, block start, 60 deltas, block stop, message_delta, message_stop
    attrs = telemetry.attrs()
    assert attrs["streamscope.class"] == "complete"
    assert "streamscope.budget.fired" not in attrs


@pytest.fixture(scope="module")
def tls_sim(tmp_path_factory) -> Any:
    """The same scenarios served over HTTPS (a test CA's certificate for 127.0.0.1): a blocked
    read then waits inside `ssl`, not in the transport's plain socket read."""
    import trustme

    ca = trustme.CA()
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    issued = ca.issue_cert("127.0.0.1")
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    context = ssl.create_default_context()
    ca.configure_trust(context)
    with Simulator(SCENARIOS, tls=(str(cert), str(key))) as simulator:
        simulator.client_context = context  # type: ignore[attr-defined]
        yield simulator


@pytest.mark.parametrize("path", ["create", "stream"])
def test_sync_over_tls_stalls_fire_and_a_held_up_reader_does_not(tls_sim, instrument, shutdowns, path: str) -> None:
    """Over HTTPS, as production reads: a stall still fires idle in time, first-token too, and
    a reader held up while parsing an answer that arrived at once still fires nothing."""
    def verify() -> dict[str, Any]:  # a client's own (read_sync closes the client, and with it this)
        return {"http_client": anthropic.DefaultHttpxClient(verify=tls_sim.client_context)}

    budgets = Budgets(first_token=0.5, idle=0.3)
    telemetry = instrument(budgets=budgets)
    outcome, elapsed = read_sync(tls_sim, "stall", path, **verify())
    assert outcome == "idle"
    assert_fired(telemetry, "idle", "stalled_mid_stream")
    assert elapsed <= 0.1 + budgets.idle + MARGIN

    telemetry = instrument(budgets=budgets)
    outcome, elapsed = read_sync(tls_sim, "late_start", path, **verify())
    assert outcome == "first_token"
    assert_fired(telemetry, "first_token", "stalled_before_first_content")
    assert budgets.first_token <= elapsed <= budgets.first_token + MARGIN

    # first-token 1 s: it also covers the TLS handshake, slow on a loaded machine; idle 10 ms.
    telemetry = instrument(budgets=Budgets(first_token=1.0, idle=0.01))
    with HeldUp(times=12) as held:
        shut = shutdowns.count
        assert read_sync(tls_sim, "burst", path, **verify())[0] == "complete"
    assert held.paused > 0
    assert shutdowns.count == shut  # the watchdog never shut the socket
    assert telemetry.attrs()["streamscope.class"] == "complete"


@pytest.mark.parametrize("path", ["create", "stream"])
async def test_async_a_consumer_slower_than_a_10ms_budget(sim, instrument, path: str) -> None:
    budgets = Budgets(first_token=0.5, idle=0.01)
    for _ in range(3):
        telemetry = instrument(budgets=budgets)
        assert (await read_async(sim, "burst", path, before=0.6, each=0.025))[0] == "complete"
        assert telemetry.attrs()["streamscope.class"] == "complete"
    telemetry = instrument(budgets=budgets)
    outcome, _ = await read_async(sim, "fast_then_stall", path, each=0.025)
    assert outcome == "idle"
    assert telemetry.attrs()["streamscope.content_events"] == 40


@pytest.mark.parametrize("path", ["create", "stream"])
def test_sync_after_the_final_event_no_budget_fires(sim, instrument, path: str) -> None:
    """After `message_stop` the answer is whole: the wait for the body's end (2.5 s here, eight
    idle budgets and past the deadline) is not the provider's silence, and the answer is complete.
    The deadline (1.5 s) leaves a loaded machine room to deliver the answer itself before it."""
    telemetry = instrument(budgets=Budgets(first_token=1.0, idle=0.3, deadline=1.5))
    assert read_sync(sim, "slow_body_end", path)[0] == "complete"
    assert telemetry.attrs()["streamscope.class"] == "complete"
    assert "streamscope.budget.fired" not in telemetry.attrs()


@pytest.mark.parametrize("path", ["create", "stream"])
async def test_async_after_the_final_event_no_budget_fires(sim, instrument, path: str) -> None:
    telemetry = instrument(budgets=Budgets(first_token=1.0, idle=0.3, deadline=1.5))
    assert (await read_async(sim, "slow_body_end", path))[0] == "complete"
    assert telemetry.attrs()["streamscope.class"] == "complete"
    assert "streamscope.budget.fired" not in telemetry.attrs()


# -- 2. budgets follow the stream, not the loop that reads it ------------------------------------------

def _first_delta(stream: Any) -> None:
    for event in stream:
        if event.type == "content_block_delta":
            break


async def _afirst_delta(stream: Any) -> None:
    async for event in stream:
        if event.type == "content_block_delta":
            break


async def test_async_break_then_resume_in_the_same_task(sim, instrument) -> None:
    telemetry = instrument(budgets=Budgets(idle=0.4))
    c = aclient(sim, "stall")
    stream = await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    await _afirst_delta(stream)  # the dropped loop is closed a moment later, while the next one reads
    gc.collect()
    start = time.monotonic()
    with pytest.raises(StreamTimeout) as caught:
        async for _ in stream:
            pass
    assert caught.value.budget == "idle"
    assert time.monotonic() - start <= 0.4 + MARGIN
    assert_fired(telemetry, "idle", "stalled_mid_stream")
    await c.close()


async def test_async_break_then_resume_in_another_task(sim, instrument) -> None:
    telemetry = instrument(budgets=Budgets(idle=0.4))
    c = aclient(sim, "stall")
    stream = await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    await asyncio.create_task(_afirst_delta(stream))

    async def rest() -> str:
        try:
            async for _ in stream:
                pass
        except StreamTimeout as exc:
            return exc.budget
        return "complete"

    assert await asyncio.create_task(rest()) == "idle"
    assert_fired(telemetry, "idle", "stalled_mid_stream")
    await c.close()


async def test_async_anext_mixed_with_async_for(sim, instrument) -> None:
    telemetry = instrument(budgets=Budgets(idle=0.4))
    c = aclient(sim, "stall")
    stream = await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    await anext(stream)  # message_start
    seen = 0
    with pytest.raises(StreamTimeout) as caught:
        async for event in stream:
            seen += event.type == "content_block_delta"
            if seen == 2:
                await anext(stream)  # the third delta, read inside the loop
                seen += 1
    assert caught.value.budget == "idle" and seen == 4
    assert_fired(telemetry, "idle", "stalled_mid_stream")
    await c.close()


async def test_async_a_resumed_loop_still_completes_a_healthy_stream(sim, instrument) -> None:
    telemetry = instrument(budgets=Budgets(first_token=0.3, idle=0.3))
    c = aclient(sim, "steady")
    stream = await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    await _afirst_delta(stream)
    await asyncio.sleep(0.6)  # the caller's own time: never charged
    await asyncio.create_task(_afirst_delta(stream))
    async for _ in stream:
        pass
    assert telemetry.attrs()["streamscope.class"] == "complete"
    await c.close()


def test_sync_break_then_resume_and_next_mixed(sim, instrument) -> None:
    for resume in ("loop", "next()"):
        telemetry = instrument(budgets=Budgets(idle=0.4))
        c = client(sim, "stall")
        stream = c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
        _first_delta(stream)
        gc.collect()
        start = time.monotonic()
        with pytest.raises(StreamTimeout) as caught:
            if resume == "loop":
                for _ in stream:
                    pass
            else:
                while True:
                    next(stream)
        assert caught.value.budget == "idle", resume
        assert time.monotonic() - start <= 0.4 + MARGIN
        assert_fired(telemetry, "idle", "stalled_mid_stream")
        c.close()


# -- 4. max_gap: the provider's silence while the caller waited -----------------------------------------

@pytest.mark.parametrize("budgets", [None, Budgets(idle=5)], ids=["observe-only", "budgets"])
def test_sync_max_gap_is_not_the_callers_own_time(sim, instrument, budgets) -> None:
    """15 deltas 10 ms apart, the caller works 0.15 s on each: no gap near 0.15 s."""
    telemetry = instrument(budgets=budgets)

    def work(event: Any) -> None:
        if event.type == "content_block_delta":
            time.sleep(0.15)

    assert read_sync(sim, "steady", "create", on_event=work)[0] == "complete"
    assert telemetry.attrs()["streamscope.max_gap"] < 0.06


@pytest.mark.parametrize("budgets", [None, Budgets(idle=5)], ids=["observe-only", "budgets"])
async def test_async_max_gap_counts_only_the_wait(sim, instrument, budgets) -> None:
    """A 0.5 s silence; the caller spends 0.2 s of it on the delta before: the gap is the 0.3 s it waited."""
    telemetry = instrument(budgets=budgets)

    def work(event: Any) -> None:
        if event.type == "content_block_delta" and event.delta.text == "a":
            time.sleep(0.2)  # blocks the loop: the caller is busy

    assert (await read_async(sim, "one_pause", "create", on_event=work))[0] == "complete"
    assert 0.2 <= telemetry.attrs()["streamscope.max_gap"] <= 0.45  # stamped at delivery, it would be 0.5

    telemetry = instrument(budgets=budgets)
    assert (await read_async(sim, "one_pause", "create"))[0] == "complete"
    assert 0.45 <= telemetry.attrs()["streamscope.max_gap"] <= 0.5 + MARGIN


# -- 5. a busy loop is not a silent provider --------------------------------------------------------------

@pytest.mark.parametrize("block_at", [0.01, 0.05, 0.2])
async def test_a_loop_blocked_while_the_provider_answers_is_no_stall(sim, instrument, block_at: float) -> None:
    """Another task holds the loop for 1.5 s (CPU work, a sync call) from `block_at` s after the
    request: the headers and the answer arrive meanwhile, unread. When the loop comes back the
    budgets' checks run 1 s late: they give the loop as long again to read what came, rather than
    take its backlog for the provider's silence (which they did: one more loop turn was not enough
    before the headers, when there is no socket to look at yet)."""
    telemetry = instrument(budgets=Budgets(first_token=0.5, idle=0.5))
    asyncio.get_running_loop().call_later(block_at, time.sleep, 1.5)
    outcome, _ = await read_async(sim, "steady", "create")
    assert outcome == "complete", outcome
    assert "streamscope.budget.fired" not in telemetry.attrs()
