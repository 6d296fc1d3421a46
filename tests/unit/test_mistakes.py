"""No silent mistakes: a misspelt keyword is told in one line with what was meant, and the advice for
`deadline_in_thinking` fits a request that never thought.

The instrumentors run against the simulator with the real anthropic and openai SDKs: a typo in
`instrument()` is one warning line and instrumentation goes on (a zero-code loader must not stop
at it); the constructors raise one-line `TypeError`s; the advice reads the span a real call ended with.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from conftest import USER, Telemetry, client
from streamscope import (
    AnthropicInstrumentor,
    Backoff,
    Breaker,
    Budgets,
    OpenAIInstrumentor,
    StreamTimeout,
    classify,
    stream_with_retry,
)
from streamscope.instrumentor import KEYWORDS
from streamscope.simulator import Simulator
from streamscope.tools.advice import ADVICE, SLOW_START, advice, advice_for

ROOT = Path(__file__).resolve().parents[2]
THINKING = {"type": "enabled", "budget_tokens": 4096}


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "streamscope"]


# -- instrument() -----------------------------------------------------------------------------------------


@pytest.fixture
def turned_on() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for instrumentor in made:
        if instrumentor.is_instrumented_by_opentelemetry:
            instrumentor.uninstrument()


def providers() -> dict[str, Any]:
    meter = MeterProvider(metric_readers=[InMemoryMetricReader()])
    return {"tracer_provider": TracerProvider(), "meter_provider": meter}


@pytest.mark.parametrize("kind", [AnthropicInstrumentor, OpenAIInstrumentor])
def test_a_misspelt_instrument_keyword_is_one_warning_and_instrumentation_goes_on(
        kind: Any, turned_on: list[Any], caplog: pytest.LogCaptureFixture) -> None:
    instrumentor = kind()
    turned_on.append(instrumentor)
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        instrumentor.instrument(budget=Budgets(idle=1), **providers())  # `budgets`
    [line] = lines(caplog)
    assert [r.levelno for r in caplog.records if r.name == "streamscope"] == [logging.WARNING]
    assert "\n" not in line
    assert line == (f"streamscope: {kind.__name__}().instrument() ignores the unknown keyword argument 'budget' "
                    f"(did you mean 'budgets'?); it takes {', '.join(KEYWORDS)}")
    assert instrumentor.is_instrumented_by_opentelemetry
    assert instrumentor.pipeline.budgets.resolve("claude-sim-1", None).idle is None  # ignored, as it says


def test_the_keywords_opentelemetry_passes_are_taken_silently(turned_on: list[Any],
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """`opentelemetry-instrument`'s loader passes `skip_dep_check=True`; BaseInstrumentor reads
    `raise_exception_on_conflict` too."""
    instrumentor = AnthropicInstrumentor()
    turned_on.append(instrumentor)
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        instrumentor.instrument(skip_dep_check=True, raise_exception_on_conflict=False, logger_provider=None,
                                budgets=Budgets(idle=30), breaker=None, max_models=8, max_routes=8,
                                stream_logs=False, **providers())
    assert lines(caplog) == []
    assert instrumentor.is_instrumented_by_opentelemetry


def test_a_misspelt_keyword_is_told_even_when_already_on(sim: Simulator, turned_on: list[Any],
                                                         caplog: pytest.LogCaptureFixture) -> None:
    instrumentor = AnthropicInstrumentor()
    turned_on.append(instrumentor)
    telemetry = providers()
    instrumentor.instrument(**telemetry)
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        instrumentor.instrument(tracer_provder=TracerProvider())
    [line] = lines(caplog)
    assert "'tracer_provder' (did you mean 'tracer_provider'?)" in line
    # Still on, as it was: a streamed call through the real SDK is observed.
    with client(sim, "complete").messages.create(model="claude-sim-1", max_tokens=64, messages=USER,
                                                 stream=True) as stream:
        assert list(stream)
    assert instrumentor.pipeline is not None


def test_the_keywords_listed_are_the_keywords_read() -> None:
    source = (ROOT / "instrumentation" / "streamscope" / "instrumentor.py").read_text()
    assert set(re.findall(r'kwargs\.get\("(\w+)"\)', source)) == set(KEYWORDS)


# -- the constructors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "expected"), [
    (lambda: Budgets(idel=1), "Budgets() got an unexpected keyword argument 'idel' (did you mean 'idle'?); "
                              "it takes first_token, idle, deadline, first_content"),
    (lambda: Budgets(first_tokens=5, dedline=30), "Budgets() got unexpected keyword arguments 'first_tokens' "
     "(did you mean 'first_token'?), 'dedline' (did you mean 'deadline'?); it takes first_token, idle, deadline, "
     "first_content"),
    (lambda: Budgets(timeout=5), "Budgets() got an unexpected keyword argument 'timeout'; it takes first_token, "
                                 "idle, deadline, first_content"),
    (lambda: Breaker(cooldown=10), "Breaker() got an unexpected keyword argument 'cooldown' (did you mean "
                                   "'cool_down'?); it takes failures, window, cool_down, shared"),
    (lambda: Backoff(maxwait=5), "Backoff() got an unexpected keyword argument 'maxwait' (did you mean "
                                   "'max_wait'?); it takes base, cap, rng, max_wait"),
    (lambda: stream_with_retry(lambda: None, attempt=2), "stream_with_retry() got an unexpected keyword argument "
     "'attempt' (did you mean 'attempts'?); it takes open_stream, attempts, backoff, sleep"),
])
def test_an_unknown_keyword_is_one_line_with_what_was_meant(make: Callable[[], Any], expected: str) -> None:
    with pytest.raises(TypeError) as raised:
        make()
    assert str(raised.value) == expected


@pytest.mark.parametrize(("make", "error", "words"), [
    (lambda: Budgets(idle="5s"), TypeError, "Budgets.idle must be a number of seconds or None"),
    (lambda: Budgets(idle=0), ValueError, "Budgets.idle must be > 0"),
    (lambda: Budgets(first_content="all"), ValueError, 'Budgets.first_content must be "text" or "any"'),
    (lambda: Breaker(failures=2.5), TypeError, "Breaker.failures must be a whole number"),
    (lambda: Breaker(window=0), ValueError, "Breaker.window must be a finite number of seconds > 0"),
    (lambda: Backoff(base="0.5"), TypeError, "Backoff(base=...) takes a number of seconds >= 0"),
    (lambda: Backoff(cap=-1), ValueError, "Backoff(cap=...) takes a finite number of seconds >= 0"),
    (lambda: Backoff(rng=7), TypeError, "Backoff(rng=...) takes a random.Random"),
    (lambda: stream_with_retry(lambda: None, attempts=0), ValueError, "attempts=... takes a whole number"),
    (lambda: stream_with_retry(lambda: None, backoff=2), TypeError, "backoff=... takes a streamscope.Backoff"),
])
def test_a_wrong_value_is_one_line(make: Callable[[], Any], error: type[Exception], words: str) -> None:
    with pytest.raises(error) as raised:
        make()
    assert words in str(raised.value) and "\n" not in str(raised.value)


def test_good_keywords_still_work() -> None:
    assert Budgets(first_token=5, idle=2, deadline=30, first_content="any").idle == 2.0
    assert Breaker(failures=3, window=10, cool_down=5).cool_down == 5.0
    assert Backoff(0.1, 1.0, max_wait=2).max_wait == 2
    assert Budgets(idle=1).over(Budgets(deadline=3)) == Budgets(idle=1, deadline=3)


# -- advice for deadline_in_thinking ----------------------------------------------------------------------


def cut_by_the_deadline(sim: Simulator, instrument: Callable[..., Telemetry], scenario: str,
                        **params: Any) -> dict[str, Any]:
    telemetry = instrument(budgets=Budgets(deadline=0.6))
    stream = client(sim, scenario).messages.create(model="claude-sim-1", max_tokens=8192, messages=USER,
                                                   stream=True, **params)
    with pytest.raises(StreamTimeout), stream:
        for _ in stream:
            pass
    return telemetry.attrs()


def test_a_silent_start_without_thinking_is_not_told_to_lower_a_thinking_budget(
        sim: Simulator, instrument: Callable[..., Telemetry]) -> None:
    attrs = cut_by_the_deadline(sim, instrument, "timed_silent_start")
    assert attrs["streamscope.class"] == classify(attrs) == "deadline_in_thinking"  # the label stays
    assert "streamscope.thinking.start" not in attrs and "streamscope.thinking.budget_tokens" not in attrs
    said = advice("deadline_in_thinking", attrs)
    assert said == SLOW_START
    assert "budget_tokens" not in said and "thinking budget" not in said
    for words in ("time_to_headers", "time_to_first_content", "provider", "prompt"):
        assert words in said


def test_thinking_cut_by_the_deadline_is_told_to_fit_the_thinking_budget(
        sim: Simulator, instrument: Callable[..., Telemetry]) -> None:
    attrs = cut_by_the_deadline(sim, instrument, "slow_thinking", thinking=THINKING)
    assert attrs["streamscope.class"] == "deadline_in_thinking"
    assert attrs["streamscope.thinking.budget_tokens"] == 4096
    assert advice("deadline_in_thinking", attrs) == ADVICE["deadline_in_thinking"]
    assert "budget_tokens" in ADVICE["deadline_in_thinking"]


def test_a_group_of_both_kinds_gets_both_pieces_of_advice() -> None:
    thought = {"streamscope.thinking.budget_tokens": 4096}
    said = advice_for("deadline_in_thinking", [thought, {}, thought])
    assert said == f"{ADVICE['deadline_in_thinking']} (2); {SLOW_START} (1)"
    assert advice_for("deadline_in_thinking", [{}, {}]) == SLOW_START
    assert advice("deadline_in_thinking", {"openai.request.reasoning_effort": "high"}) == ADVICE["deadline_in_thinking"]
    assert advice("truncated", {}) == ADVICE["truncated"]


def test_the_runbook_and_the_class_table_cover_a_request_without_thinking() -> None:
    runbook = (ROOT / "dashboards" / "runbooks.md").read_text()
    section = runbook.split("## StreamscopeDeadlineInThinkingShareHigh", 1)[1].split("\n## ", 1)[0]
    for words in ("without thinking", "time to headers", "time to first content"):
        assert words in section.lower(), words
    row = next(line for line in (ROOT / "docs" / "classes.md").read_text().splitlines()
               if line.startswith("| 2 | `deadline_in_thinking`"))
    assert "without thinking" in row.lower() and "budget_tokens" in row
