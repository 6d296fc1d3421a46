"""The circuit breaker: the real SDK against the simulator, and the state machine under load.

Retryable failures open it, an open breaker fails fast with `CircuitOpen` and sends nothing, one
probe after the cool-down decides, each (provider, model, route) has its own, its metrics count
every transition. Timings are generous (a loaded machine); no wall-clock bound is asserted.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
import time
import uuid
from typing import Any

import anthropic
import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

import streamscope
from conftest import USER, Telemetry, aclient, client
from streamscope import Breaker, CircuitOpen
from streamscope.adapters.providers import retry_decision
from streamscope.breaker import Breakers, BreakerTable, Ticket
from streamscope.core.failures import code_of
from streamscope.export.metrics import MetricsWriter
from streamscope.pipeline import Pipeline
from streamscope.simulator import SCENARIOS, Scenario, Simulator, TextSpec, message_stream

FAIL_529, COMPLETE = SCENARIOS["http_529_then_ok"].attempts
BAD_400 = SCENARIOS["http_400"].attempts[0]
SLOW = message_stream(blocks=[TextSpec(["slow", " answer"], interval=0.05)])
FAST_COOL = Breaker(failures=2, window=5, cool_down=0.5)


def scenario(sim: Simulator, attempts: list[Any]) -> str:
    """A scenario of its own (the simulator counts attempts per name)."""
    name = f"breaker_{uuid.uuid4().hex[:10]}"
    sim.add(Scenario(name, attempts))
    return name


def sent(sim: Simulator, name: str) -> int:
    return sum(1 for r in sim.requests if r.scenario == name)


def call(sim: Simulator, name: str, model: str = "m") -> str:
    stream = client(sim, name).messages.create(model=model, max_tokens=64, messages=USER, stream=True)
    return "".join(e.delta.text for e in stream if e.type == "content_block_delta" and e.delta.type == "text_delta")


def wait_past(seconds: float) -> None:
    time.sleep(seconds + 0.25)


def metered(instrument: Any, **kwargs: Any) -> tuple[Telemetry, InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    telemetry = instrument(meter_provider=MeterProvider(metric_readers=[reader]), **kwargs)
    return telemetry, reader


def points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    return [p for rm in (data.resource_metrics if data else []) for sm in rm.scope_metrics
            for m in sm.metrics if m.name == name for p in m.data.data_points]


def last_span(telemetry: Telemetry) -> dict[str, Any]:
    return dict(max(telemetry.spans(), key=lambda s: s.start_time).attributes or {})


# -- through the SDK -----------------------------------------------------------------------------------


def test_opens_after_retryable_failures_then_fails_fast(sim, instrument) -> None:
    telemetry = instrument(breaker=Breaker(failures=3, window=5, cool_down=60))
    name = scenario(sim, [FAIL_529])
    for _ in range(3):
        with pytest.raises(anthropic.APIStatusError):
            call(sim, name)
    assert sent(sim, name) == 3
    with pytest.raises(CircuitOpen) as caught:
        call(sim, name)
    assert sent(sim, name) == 3  # nothing sent
    exc = caught.value
    assert isinstance(exc, ConnectionError) and exc.code == "circuit_open" and 0 < exc.retry_after <= 60
    assert retry_decision(exc) is not None and retry_decision(exc).code == "circuit_open"  # type: ignore[union-attr]
    assert not retry_decision(exc).retryable  # type: ignore[union-attr]
    attrs = last_span(telemetry)
    assert attrs["error.type"] == "circuit_open" and attrs["streamscope.failure.code"] == "circuit_open"
    assert attrs["streamscope.class"] == "upstream_error"
    assert len(telemetry.spans()) == 4
    telemetry.assert_each_ended_once()


async def test_async_fails_fast_too(sim, instrument) -> None:
    instrument(breaker=Breaker(failures=2, window=5, cool_down=60))
    name = scenario(sim, [FAIL_529])
    c = aclient(sim, name)
    for _ in range(2):
        with pytest.raises(anthropic.APIStatusError):
            await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    with pytest.raises(CircuitOpen):
        await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    with pytest.raises(CircuitOpen):
        async with c.messages.stream(model="m", max_tokens=64, messages=USER) as s:
            await s.get_final_message()
    assert sent(sim, name) == 2


def test_a_400_never_opens_it(sim, instrument) -> None:
    instrument(breaker=Breaker(failures=2, window=5, cool_down=60))
    name = scenario(sim, [BAD_400])
    for _ in range(5):
        with pytest.raises(anthropic.BadRequestError):
            call(sim, name)
    assert sent(sim, name) == 5


def test_answers_and_cancels_never_open_it(sim, instrument) -> None:
    instrument(breaker=Breaker(failures=1, window=5, cool_down=60))
    name = scenario(sim, [SLOW])
    for _ in range(3):
        assert call(sim, name) == "slow answer"
    for _ in range(3):  # the caller leaves early: counts as nothing
        stream = client(sim, name).messages.create(model="m", max_tokens=64, messages=USER, stream=True)
        next(iter(stream))
        stream.close()
    assert call(sim, name) == "slow answer"


def test_half_open_probe_success_closes_it(sim, instrument) -> None:
    telemetry = instrument(breaker=FAST_COOL)
    failing, ok = scenario(sim, [FAIL_529]), scenario(sim, [COMPLETE])
    for _ in range(2):
        with pytest.raises(anthropic.APIStatusError):
            call(sim, failing)
    with pytest.raises(CircuitOpen) as caught:
        call(sim, ok)  # the same provider and model: the same breaker
    assert sent(sim, ok) == 0
    wait_past(caught.value.retry_after)
    assert call(sim, ok)  # the probe
    assert sent(sim, ok) == 1
    assert call(sim, ok)  # closed
    with pytest.raises(anthropic.APIStatusError):  # counting starts afresh: one failure does not open it
        call(sim, failing)
    assert call(sim, ok)
    assert all((s.attributes or {}).get("streamscope.failure.code") != "circuit_open"
               for s in telemetry.spans()[-4:])


def test_half_open_probe_failure_reopens_it(sim, instrument) -> None:
    instrument(breaker=FAST_COOL)
    failing = scenario(sim, [FAIL_529])
    for _ in range(2):
        with pytest.raises(anthropic.APIStatusError):
            call(sim, failing)
    with pytest.raises(CircuitOpen) as caught:
        call(sim, failing)
    wait_past(caught.value.retry_after)
    with pytest.raises(anthropic.APIStatusError):  # the probe went out, and failed
        call(sim, failing)
    assert sent(sim, failing) == 3
    with pytest.raises(CircuitOpen) as again:
        call(sim, failing)
    assert sent(sim, failing) == 3
    assert again.value.retry_after > 0.1  # a fresh cool-down


def test_one_probe_at_a_time(sim, instrument) -> None:
    instrument(breaker=FAST_COOL)
    failing, slow = scenario(sim, [FAIL_529]), scenario(sim, [SLOW])
    for _ in range(2):
        with pytest.raises(anthropic.APIStatusError):
            call(sim, failing)
    with pytest.raises(CircuitOpen) as caught:
        call(sim, slow)
    wait_past(caught.value.retry_after)
    probe = client(sim, slow).messages.create(model="m", max_tokens=64, messages=USER, stream=True)  # in flight
    results: list[BaseException | str] = []

    def other() -> None:
        try:
            results.append(call(sim, slow))
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=other) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(results) == 12 and all(isinstance(r, CircuitOpen) for r in results)
    assert sent(sim, slow) == 1  # the probe alone
    assert "".join(e.delta.text for e in probe if e.type == "content_block_delta") == "slow answer"
    assert call(sim, slow) == "slow answer"  # the probe answered: closed


def test_a_cancelled_probe_frees_the_slot(sim, instrument) -> None:
    instrument(breaker=FAST_COOL)
    failing, slow = scenario(sim, [FAIL_529]), scenario(sim, [SLOW])
    for _ in range(2):
        with pytest.raises(anthropic.APIStatusError):
            call(sim, failing)
    with pytest.raises(CircuitOpen) as caught:
        call(sim, slow)
    wait_past(caught.value.retry_after)
    probe = client(sim, slow).messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    probe.close()  # decides nothing: still half-open, the next call is the probe
    assert call(sim, slow) == "slow answer"
    assert call(sim, slow) == "slow answer"


def test_keys_are_per_model_and_route(sim, instrument) -> None:
    instrument(breaker=Breaker(failures=2, window=5, cool_down=60))
    failing, ok = scenario(sim, [FAIL_529]), scenario(sim, [COMPLETE])
    for _ in range(2):
        with pytest.raises(anthropic.APIStatusError):
            call(sim, failing, model="model-a")
    with pytest.raises(CircuitOpen):
        call(sim, ok, model="model-a")
    assert call(sim, ok, model="model-b")  # another model: its own breaker
    with streamscope.route("chat"):
        assert call(sim, ok, model="model-a")  # another route: its own breaker
        for _ in range(2):
            with pytest.raises(anthropic.APIStatusError):
                call(sim, failing, model="model-b")
        with pytest.raises(CircuitOpen):
            call(sim, ok, model="model-b")
    assert call(sim, ok, model="model-b")  # no route: still closed


def test_a_scripted_outage_opens_then_the_probe_closes_it(sim, instrument) -> None:
    # Cool-down 2 s: the five fast failures must all fall inside it on a loaded machine.
    telemetry, reader = metered(instrument, breaker=Breaker(failures=3, window=5, cool_down=2.0))
    outage = scenario(sim, [FAIL_529] * 4 + [COMPLETE])
    for _ in range(3):
        with pytest.raises(anthropic.APIStatusError):
            call(sim, outage)
    fast_failed = 0
    for _ in range(5):
        with pytest.raises(CircuitOpen) as caught:
            call(sim, outage)
        fast_failed += 1
    assert sent(sim, outage) == 3
    wait_past(caught.value.retry_after)
    with pytest.raises(anthropic.APIStatusError):  # the provider is still down: the probe re-opens it
        call(sim, outage)
    with pytest.raises(CircuitOpen) as caught:
        call(sim, outage)
    wait_past(caught.value.retry_after)
    assert call(sim, outage) == "Hello! How can I help you today?"  # recovered: closed
    assert call(sim, outage)
    assert sent(sim, outage) == 6

    moves = {p.attributes["streamscope.breaker.to"]: p.value for p in points(reader, "streamscope.breaker.transitions")}
    assert moves == {"open": 2, "half_open": 2, "closed": 1}
    (state,) = points(reader, "streamscope.breaker.state")
    assert state.value == 0 and state.attributes["gen_ai.provider.name"] == "anthropic"
    assert state.attributes["gen_ai.request.model"] == "m"
    requests = {p.attributes.get("streamscope.failure.code"): p.value for p in points(reader, "streamscope.requests")}
    assert requests["circuit_open"] == fast_failed + 1
    spans = telemetry.spans()
    assert sum(1 for s in spans if (s.attributes or {}).get("streamscope.failure.code") == "circuit_open") == 6


def test_metrics_state_gauge_while_open(sim, instrument) -> None:
    _, reader = metered(instrument, breaker=Breaker(failures=1, window=5, cool_down=60))
    with streamscope.route("search"):
        with pytest.raises(anthropic.APIStatusError):
            call(sim, scenario(sim, [FAIL_529]))
    (state,) = points(reader, "streamscope.breaker.state")
    assert state.value == 2 and state.attributes["streamscope.route"] == "search"
    (move,) = points(reader, "streamscope.breaker.transitions")
    assert move.value == 1 and move.attributes["streamscope.breaker.to"] == "open"


# -- configuration -------------------------------------------------------------------------------------


def test_config_in_code(sim, instrument) -> None:
    instrument(breaker={"default": Breaker(failures=50), "model:fragile-*": Breaker(failures=1, cool_down=60),
                        "route:batch": None})
    failing = scenario(sim, [FAIL_529])
    with pytest.raises(anthropic.APIStatusError):
        call(sim, failing, model="fragile-1")
    with pytest.raises(CircuitOpen):
        call(sim, failing, model="fragile-1")
    with streamscope.route("batch"):  # no breaker on this route
        for _ in range(3):
            with pytest.raises(anthropic.APIStatusError):
                call(sim, failing, model="fragile-1")
    for _ in range(3):
        with pytest.raises(anthropic.APIStatusError):
            call(sim, failing, model="sturdy")


@pytest.mark.parametrize(("make", "error", "says"), [
    (lambda: Breaker(failures=0), ValueError, "Breaker.failures must be >= 1"),
    (lambda: Breaker(failures=2.5), TypeError, "Breaker.failures must be a whole number"),
    (lambda: Breaker(window=-1), ValueError, "Breaker.window must be a finite number of seconds > 0"),
    (lambda: Breaker(cool_down="5"), TypeError, "Breaker.cool_down must be a number of seconds"),
    (lambda: BreakerTable.from_config({"modle:x": Breaker()}), ValueError, "unknown key 'modle:x' (did you mean"),
    (lambda: BreakerTable.from_config({"default": 3}), TypeError, "must be a streamscope.Breaker or None"),
    (lambda: BreakerTable.from_config("breaker.toml"), TypeError, "takes a streamscope.Breaker or a mapping"),
])
def test_bad_config_in_code_is_one_line(make: Any, error: type[Exception], says: str) -> None:
    with pytest.raises(error) as caught:
        make()
    assert says in str(caught.value) and "\n" not in str(caught.value)


def test_bad_config_in_code_raises_from_instrument(instrument) -> None:
    with pytest.raises(ValueError, match="unknown key"):
        instrument(breaker={"routes:x": Breaker()})


def test_config_in_the_file(sim, instrument, tmp_path, monkeypatch) -> None:
    path = tmp_path / "streamscope.toml"
    path.write_text('[budgets.default]\nidle = 30\n\n[breaker.default]\nfailures = 2\nwindow = 5\ncool_down = 60\n\n'
                    '[breaker.models."other-*"]\nfailures = 10\n')
    monkeypatch.setenv("STREAMSCOPE_CONFIG", str(path))
    instrument()
    failing = scenario(sim, [FAIL_529])
    for _ in range(2):
        with pytest.raises(anthropic.APIStatusError):
            call(sim, failing)
    with pytest.raises(CircuitOpen):
        call(sim, failing)
    for _ in range(3):
        with pytest.raises(anthropic.APIStatusError):
            call(sim, failing, model="other-1")


def test_a_bad_file_is_one_line_and_no_breaker(sim, instrument, tmp_path, monkeypatch, caplog) -> None:
    path = tmp_path / "streamscope.toml"
    path.write_text("[budgets.default]\nidle = 30\n\n[breaker.default]\nfailures = 0\ncooldown = 1\n")
    monkeypatch.setenv("STREAMSCOPE_CONFIG", str(path))
    with caplog.at_level(logging.ERROR, logger="streamscope"):
        instrument()
    lines = [r.getMessage() for r in caplog.records if "breaker" in r.getMessage()]
    assert len(lines) == 1 and "\n" not in lines[0] and "circuit breaker is OFF" in lines[0]
    assert "[breaker.default] failures = 0" in lines[0] and "did you mean cool_down?" in lines[0]
    assert not [r for r in caplog.records if "budgets are OFF" in r.getMessage()]  # the budgets are fine
    failing = scenario(sim, [FAIL_529])
    for _ in range(4):
        with pytest.raises(anthropic.APIStatusError):
            call(sim, failing)


# -- the state machine, no network ---------------------------------------------------------------------

VALID = {("closed", "open"), ("open", "half_open"), ("half_open", "open"), ("half_open", "closed")}


def hammered() -> tuple[Pipeline, InMemoryMetricReader, list[str], Any]:
    reader = InMemoryMetricReader()
    writer = MetricsWriter(MeterProvider(metric_readers=[reader]).get_meter("t"))
    pipeline = Pipeline(TracerProvider().get_tracer("t"), metrics=writer,
                        breakers=BreakerTable(Breaker(failures=3, window=5, cool_down=0.001)))
    breakers = pipeline.breakers
    assert breakers is not None
    log: list[str] = []
    moved = breakers.on_transition
    assert moved is not None

    def logged(key: Any, to: Any, context: Any) -> None:
        log.append(to)  # under the breaker's lock, in order
        moved(key, to, context)

    breakers.on_transition = logged
    return pipeline, reader, log, pipeline.request(provider="anthropic", model="m")


class Probes:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0

    def enter(self, ticket: Ticket) -> None:
        if ticket.probe:
            with self.lock:
                self.now += 1
                self.most = max(self.most, self.now)

    def leave(self, ticket: Ticket) -> None:
        if ticket.probe:
            with self.lock:
                self.now -= 1


def check(breakers: Breakers, reader: InMemoryMetricReader, log: list[str], probes: Probes) -> None:
    assert probes.most == 1
    assert log and all((a, b) in VALID for a, b in zip(["closed", *log], log, strict=False))
    assert breakers.state(("anthropic", "m", None)) == log[-1]
    counted = {p.attributes["streamscope.breaker.to"]: p.value
               for p in points(reader, "streamscope.breaker.transitions")}
    assert counted == {to: log.count(to) for to in set(log)}
    (state,) = points(reader, "streamscope.breaker.state")
    assert state.value == {"closed": 0, "half_open": 1, "open": 2}[log[-1]]


def test_64_threads_lose_no_transition() -> None:
    pipeline, reader, log, request = hammered()
    breakers = pipeline.breakers
    assert breakers is not None
    probes = Probes()
    start = threading.Barrier(64)

    def work(seed: int) -> None:
        rng = random.Random(seed)
        start.wait()
        for _ in range(400):
            got = breakers.admit("anthropic", "m", None, request)
            if isinstance(got, Ticket):
                probes.enter(got)
                if rng.random() < 0.1:
                    time.sleep(0)
                probes.leave(got)
                breakers.ended(got, rng.choice(["failed", "failed", "succeeded", None]), request)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    check(breakers, reader, log, probes)


async def test_500_tasks_lose_no_transition() -> None:
    pipeline, reader, log, request = hammered()
    breakers = pipeline.breakers
    assert breakers is not None
    probes = Probes()

    async def work(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(40):
            got = breakers.admit("anthropic", "m", None, request)
            if isinstance(got, Ticket):
                probes.enter(got)
                await asyncio.sleep(0)
                probes.leave(got)
                breakers.ended(got, rng.choice(["failed", "failed", "succeeded", None]), request)
            else:
                await asyncio.sleep(0)

    await asyncio.gather(*(work(n) for n in range(500)))
    check(breakers, reader, log, probes)


def test_a_fast_failed_record_has_the_code(sim, instrument) -> None:
    telemetry = instrument(breaker=Breaker(failures=1, window=5, cool_down=60))
    failing = scenario(sim, [FAIL_529])
    with pytest.raises(anthropic.APIStatusError):
        call(sim, failing)
    records: list[Any] = []
    pipeline = streamscope.AnthropicInstrumentor().pipeline
    assert pipeline is not None
    original = pipeline._finished

    def keep(c: Any, rec: Any, record: Any, **kw: Any) -> None:
        records.append(record)
        original(c, rec, record, **kw)

    pipeline._finished = keep  # type: ignore[method-assign]
    try:
        with pytest.raises(CircuitOpen):
            call(sim, failing)
    finally:
        del pipeline._finished
    assert [code_of(r) for r in records] == ["circuit_open"]
    assert last_span(telemetry)["streamscope.failure.code"] == "circuit_open"
