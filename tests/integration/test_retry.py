"""The retry line (seed 004): retried before the first content, never after; attempts never start
past the deadline; one classifier of exceptions decides what is worth retrying."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import anthropic
import httpx2
import pytest

import streamscope
from conftest import USER, Telemetry, aclient, client
from streamscope import Backoff, Budgets, StreamTimeout, astream_with_retry, stream_with_retry
from streamscope.core.failures import Failure
from streamscope.helpers.retry import retry_decision
from streamscope.simulator import SCENARIOS, HttpError, Scenario, TextSpec, error_event, message_stream

GOOD = message_stream(blocks=[TextSpec(["Hello", " again."], interval=0.02)])
FAST = Backoff(base=0.05, cap=0.1)


@pytest.fixture(scope="module", autouse=True)
def scenarios(sim):
    sim.add(Scenario("overloaded_before_content_then_ok",
                     [message_stream(blocks=[TextSpec([], interval=0.01)], interrupt=[error_event()]), GOOD]))
    sim.add(Scenario("silent_then_ok", [message_stream(first_event_delay=5.0, blocks=[TextSpec(["late"])]), GOOD]))
    sim.add(Scenario("bad_request", [[HttpError(400, "invalid_request_error", "bad")], GOOD]))
    sim.add(Scenario("always_529", [[HttpError(529, "overloaded_error", "Overloaded")]]))
    sim.add(Scenario("529_then_silent", [[HttpError(529, "overloaded_error", "Overloaded")],
                                         message_stream(first_event_delay=5.0, blocks=[TextSpec(["late"])])]))
    # Its own copy: the simulator counts attempts per scenario name, and other tests use the catalog's.
    sim.add(Scenario("retry_529_then_ok", list(SCENARIOS["http_529_then_ok"].attempts)))


def texts(events) -> list[str]:
    return [e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta"]


@pytest.mark.parametrize(("scenario", "text"), [("retry_529_then_ok", "Hello! How can I help you today?"),
                                               ("overloaded_before_content_then_ok", "Hello again.")])
def test_retried_before_first_content(sim, telemetry: Telemetry, scenario: str, text: str) -> None:
    c = client(sim, scenario)
    events = list(stream_with_retry(lambda: c.messages.create(model="m", max_tokens=64, messages=USER, stream=True),
                                    backoff=FAST))
    assert "".join(texts(events)) == text
    assert [e.type for e in events].count("message_start") == 1  # the failed attempt left nothing behind
    spans = sorted(telemetry.spans(), key=lambda s: s.start_time)
    assert [s.attributes["streamscope.attempts"] for s in spans] == [1, 2]
    assert [s.attributes["streamscope.class"] for s in spans] == ["upstream_error", "complete"]


async def test_retried_after_a_first_token_stall(sim, instrument) -> None:
    telemetry = instrument(budgets=Budgets(first_token=0.5))
    c = aclient(sim, "silent_then_ok")
    retrying = astream_with_retry(lambda: c.messages.create(model="m", max_tokens=64, messages=USER, stream=True),
                                  backoff=FAST)
    events = [e async for e in retrying]
    assert texts(events) == ["Hello", " again."] and retrying.attempts == 2
    classes = [s.attributes["streamscope.class"] for s in sorted(telemetry.spans(), key=lambda s: s.start_time)]
    assert classes == ["stalled_before_first_content", "complete"]


def test_never_retried_after_content(sim, telemetry: Telemetry) -> None:
    c = client(sim, "inband_error")
    seen: list[str] = []
    retrying = stream_with_retry(lambda: c.messages.stream(model="m", max_tokens=64, messages=USER).__enter__(),
                                 backoff=FAST)
    with pytest.raises(anthropic.APIStatusError):
        for event in retrying:
            if event.type == "text":
                seen.append(event.text)
    assert seen and retrying.attempts == 1
    assert telemetry.attrs()["streamscope.partial"] is True


def test_not_retryable_is_not_retried(sim, telemetry: Telemetry) -> None:
    c = client(sim, "bad_request")
    retrying = stream_with_retry(lambda: c.messages.create(model="m", max_tokens=64, messages=USER, stream=True),
                                 backoff=FAST)
    with pytest.raises(anthropic.BadRequestError):
        list(retrying)
    assert retrying.attempts == 1


async def test_attempts_never_start_past_the_deadline(sim, telemetry: Telemetry) -> None:
    c = aclient(sim, "always_529")
    first = len(sim.requests)
    opened: list[float] = []  # when the retry line opened each attempt (the server reads it later)

    def open_attempt():
        opened.append(time.monotonic())
        return c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)

    with streamscope.deadline(1.0) as deadline_at:
        retrying = astream_with_retry(open_attempt, attempts=50, backoff=Backoff(base=0.3, cap=0.3))
        # The retry line ends with the last attempt's 529, or, when that attempt started just before
        # the deadline and was still waiting for its answer, with the deadline itself: both are the
        # caller's to see. Which one depends on where the jittered delays fell (and the machine's load).
        with pytest.raises((anthropic.APIStatusError, StreamTimeout)) as failure:
            async for _ in retrying:
                pass
    started = [log.started for log in sim.requests[first:]]
    assert 1 < len(started) < 50 and len(opened) == retrying.attempts
    assert all(t < deadline_at for t in opened)
    if isinstance(failure.value, StreamTimeout):
        assert failure.value.budget == "deadline" and failure.value.partial is False
        # The cut attempt may not have reached the server before the deadline closed its connection.
        assert retrying.attempts - len(started) in (0, 1)
    else:
        assert retrying.attempts == len(started)


def test_a_wait_that_overruns_the_deadline_starts_no_attempt(sim, instrument) -> None:
    """A busy machine's sleep can end past the deadline it fitted in when it began: the last
    attempt's failure is then the caller's, and no attempt starts late (nor is a retry counted)."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    instrument(meter_provider=MeterProvider(metric_readers=[reader]))
    c = client(sim, "always_529")
    first = len(sim.requests)
    with streamscope.deadline(1.0):
        retrying = stream_with_retry(lambda: c.messages.create(model="m", max_tokens=64, messages=USER, stream=True),
                                     attempts=5, backoff=FAST, sleep=lambda delay: time.sleep(delay + 1.2))
        with pytest.raises(anthropic.APIStatusError) as failure:
            list(retrying)
    assert failure.value.status_code == 529
    assert retrying.attempts == 1 and len(sim.requests) - first == 1
    points = {m.name: m.data.data_points for rm in reader.get_metrics_data().resource_metrics
              for sm in rm.scope_metrics for m in sm.metrics}
    assert "streamscope.retries" not in points
    [attempts] = points["streamscope.attempts"]
    assert (attempts.count, attempts.sum) == (1, 1)


async def test_an_async_wait_that_overruns_the_deadline_starts_no_attempt(sim, telemetry: Telemetry) -> None:
    """The async form (and so the relay): the loop is busy elsewhere for longer than the deadline
    while the line waits between attempts; when the wait ends, nothing more starts."""
    import random

    loop = asyncio.get_running_loop()

    class BusyLoop(random.Random):
        def uniform(self, a: float, b: float) -> float:  # drawn just before the wait begins
            loop.call_soon(time.sleep, 3.5)  # another task holds the loop past the deadline
            return super().uniform(a, b)

    c = aclient(sim, "always_529")
    first = len(sim.requests)
    with streamscope.deadline(3.0):
        retrying = astream_with_retry(lambda: c.messages.create(model="m", max_tokens=64, messages=USER, stream=True),
                                      attempts=5, backoff=Backoff(base=0.05, cap=0.1, rng=BusyLoop(1)))
        with pytest.raises(anthropic.APIStatusError) as failure:
            async for _ in retrying:
                pass
    assert failure.value.status_code == 529
    assert retrying.attempts == 1 and len(sim.requests) - first == 1


async def test_the_deadline_cutting_the_last_attempt_is_the_callers(sim, telemetry: Telemetry) -> None:
    c = aclient(sim, "529_then_silent")
    first = len(sim.requests)
    with streamscope.deadline(2.0):  # the second attempt's silence lasts 5 s
        retrying = astream_with_retry(lambda: c.messages.create(model="m", max_tokens=64, messages=USER,
                                                                stream=True),
                                      attempts=50, backoff=FAST)
        with pytest.raises(StreamTimeout) as failure:
            async for _ in retrying:
                pass
    assert (failure.value.budget, failure.value.partial) == ("deadline", False)
    assert retrying.attempts == 2 == len(sim.requests[first:])  # a deadline is never retried


def _status_error(status: int, headers: dict[str, str] | None = None, body: object = None) -> anthropic.APIStatusError:
    request = httpx2.Request("POST", "http://127.0.0.1/v1/messages")
    response = httpx2.Response(status, headers=headers or {}, request=request)
    return anthropic.APIStatusError("error", response=response, body=body)


def _in_band(kind: str) -> anthropic.APIStatusError:
    return _status_error(200, body={"type": "error", "error": {"type": kind}})


@pytest.mark.parametrize(
    ("exc", "code", "retryable", "after"),
    [
        (_status_error(429, {"retry-after": "2"}), "rate_limited", True, 2.0),
        (_status_error(529, {"retry-after": "3"}), "upstream_unavailable", True, 3.0),
        (_status_error(500), "upstream_unavailable", True, None),
        (_status_error(503), "upstream_unavailable", True, None),
        (_status_error(408), "upstream_timeout", True, None),
        (_status_error(409), "upstream_timeout", True, None),
        (_status_error(400), "upstream_rejected", False, None),
        (_status_error(401), "upstream_rejected", False, None),
        (_status_error(404), "upstream_rejected", False, None),
        (_status_error(413), "upstream_rejected", False, None),
        (_in_band("overloaded_error"), "upstream_unavailable", True, None),
        (_in_band("api_error"), "upstream_unavailable", True, None),
        (_in_band("rate_limit_error"), "rate_limited", True, None),
        (_in_band("invalid_request_error"), "upstream_rejected", False, None),
        (_in_band("an_error_type_from_the_future"), "upstream_rejected", False, None),
        (_in_band("throttlingException"), "rate_limited", True, None),
        (_in_band("modelStreamErrorException"), "upstream_unavailable", True, None),
        (httpx2.RemoteProtocolError("peer closed"), "upstream_unreachable", True, None),
        (httpx2.ConnectError("refused"), "upstream_unreachable", True, None),
        (httpx2.ReadTimeout("read"), "upstream_timeout", True, None),
        (StreamTimeout("first_token", partial=False), "upstream_timeout", True, None),
        (StreamTimeout("idle", partial=True), "upstream_timeout", False, None),
        (StreamTimeout("deadline", partial=False), "upstream_timeout", False, None),
        (ValueError("a bug"), "internal_error", False, None),
    ],
)
def test_one_decision_on_retries_and_codes(exc: BaseException, code: str, retryable: bool,
                                           after: float | None) -> None:
    assert retry_decision(exc) == Failure(code, retryable, after)  # type: ignore[arg-type]


@pytest.mark.parametrize("exc", [asyncio.CancelledError(), KeyboardInterrupt(), GeneratorExit()])
def test_a_cancel_has_no_code_and_is_never_retried(exc: BaseException) -> None:
    assert retry_decision(exc) is None


def test_a_budget_firing_says_its_code() -> None:
    assert StreamTimeout("idle", partial=True).code == "upstream_timeout"


def test_backoff_is_full_jitter_and_honours_retry_after() -> None:
    import random

    backoff = Backoff(base=0.5, cap=8.0, rng=random.Random(7))
    delays = [backoff.delay(n) for n in range(1, 8) for _ in range(50)]
    assert min(delays) >= 0 and max(delays) <= 8.0
    assert max(backoff.delay(1) for _ in range(200)) <= 0.5
    assert backoff.delay(1, retry_after=3.0) >= 3.0


def test_forked_workers_do_not_wait_in_step() -> None:
    """The default jitter comes from one generator per process, seeded afresh in each forked
    worker: workers forked from one parent draw different waits (and so does the parent again)."""
    import os

    def draws() -> list[float]:
        backoff = Backoff(base=1.0, cap=8.0)
        return [backoff.delay(4) for _ in range(4)]

    got = []
    for _ in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: its draws to the parent, then out without running any cleanup
            os.write(write, repr(draws()).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            got.append(pipe.read())
        assert os.waitpid(pid, 0)[1] == 0
    got.append(repr(draws()))
    assert len(set(got)) == 3, got


@pytest.mark.parametrize("is_async", [False, True])
async def test_n_attempts_are_n_provider_requests_and_are_counted(sim, instrument, is_async: bool) -> None:
    """The SDK's own retries (its default `max_retries=2`) do not multiply the line's attempts:
    inside the line the SDK makes one try per attempt. Attempts and retries are counted once."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    instrument(meter_provider=MeterProvider(metric_readers=[reader]))
    first = len(sim.requests)
    params = dict(model="m", max_tokens=64, messages=USER, stream=True)
    with pytest.raises(anthropic.APIStatusError):
        if is_async:
            c = anthropic.AsyncAnthropic(base_url=sim.url("always_529"), api_key="k")  # the SDK's default retries
            async for _ in astream_with_retry(lambda: c.messages.create(**params), backoff=FAST):
                pass
        else:
            s = anthropic.Anthropic(base_url=sim.url("always_529"), api_key="k")
            for _ in stream_with_retry(lambda: s.messages.create(**params), backoff=FAST, sleep=lambda _: None):
                pass
    assert len(sim.requests) - first == 3  # three attempts, three provider requests
    points = {m.name: m.data.data_points for rm in reader.get_metrics_data().resource_metrics
              for sm in rm.scope_metrics for m in sm.metrics}
    [attempts] = points["streamscope.attempts"]
    assert (attempts.count, attempts.sum) == (1, 3)  # one logical request, three attempts
    [retries] = points["streamscope.retries"]
    assert retries.value == 2 and retries.attributes["streamscope.failure.code"] == "upstream_unavailable"


@pytest.mark.parametrize("form", ["seconds", "date", "ms"])
@pytest.mark.parametrize("is_async", [False, True])
async def test_a_retry_after_beyond_the_ceiling_fails_at_once(sim, telemetry: Telemetry, is_async: bool,
                                                              form: str) -> None:
    """`Retry-After: 120` is more than the 30 s a retry may wait: no sleep, the failure is the
    caller's now, with its code and the provider's retry-after. The same two minutes as an HTTP
    date, or as the SDKs' `retry-after-ms`."""
    name = f"rate_limited_for_two_minutes_{is_async}_{form}"
    header = {"seconds": {"retry-after": "120"},
              "date": {"retry-after": format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)},
              "ms": {"retry-after-ms": "120000"}}[form]
    sim.add(Scenario(name, [[HttpError(429, "rate_limit_error", "slow down", header)]]))
    slept: list[float] = []
    started = time.monotonic()
    params = dict(model="m", max_tokens=64, messages=USER, stream=True)
    with pytest.raises(anthropic.RateLimitError) as caught:
        if is_async:
            ac = aclient(sim, name)
            async for _ in astream_with_retry(lambda: ac.messages.create(**params)):
                pass
        else:
            c = client(sim, name)
            for _ in stream_with_retry(lambda: c.messages.create(**params), sleep=slept.append):
                pass
    assert slept == [] and time.monotonic() - started < 30  # nothing slept (the async form would sleep 120 s)
    assert retry_decision(caught.value) == Failure("rate_limited", True, pytest.approx(120.0, abs=10))
    assert [s.attributes["streamscope.failure.code"] for s in telemetry.spans()] == ["rate_limited"]


def test_backoff_settings_are_checked() -> None:
    for bad, error in ((dict(max_wait=-1), ValueError), (dict(base=float("nan")), ValueError),
                       (dict(cap="8"), TypeError)):  # not a number: a TypeError, as for Budgets and Breaker
        with pytest.raises(error, match="Backoff"):
            Backoff(**bad)  # type: ignore[arg-type]
