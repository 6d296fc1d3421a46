"""The inner run's fixtures (a pytest plugin, `-p one_sdk`), inside an environment with ONE of the
two SDKs installed (see ../test_one_sdk.py, and pytest.ini here).

Nothing here is collected by the main run (its files are check_*.py, and this is no conftest.py):
these tests run under the one-SDK environment's own Python, with its own pytest, against the real
simulator and the real SDK that is there. `STREAMSCOPE_ONE_SDK` names the SDK the environment was
built with; the first test checks that it is the only one.

A skipped test proves nothing, so any skip fails the run (as in the main suite).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from streamscope.simulator import Scenario, Simulator

SDKS = ("anthropic", "openai")
PRESENT = os.environ.get("STREAMSCOPE_ONE_SDK", "")
if PRESENT not in SDKS:
    raise pytest.UsageError(f"STREAMSCOPE_ONE_SDK must name the one SDK installed here ({' or '.join(SDKS)}), "
                            f"got {PRESENT!r}")
MISSING = next(name for name in SDKS if name != PRESENT)
INSTRUMENTORS = {"anthropic": "AnthropicInstrumentor", "openai": "OpenAIInstrumentor"}
USER = [{"role": "user", "content": "How do streams fail?"}]


@dataclass(frozen=True)
class Sdk:
    """The one SDK installed here, as the tests drive it: a streamed call to a simulator scenario."""

    name: str
    complete: str
    """A short healthy answer."""
    cut: str
    """Three words, then the connection drops (the SDK's connection error)."""
    error_then_ok: str
    """A retryable error status (529 / 429), then a healthy answer."""
    sim: Simulator

    def fresh(self, name: str) -> str:
        """A private copy of scenario `name` (its attempts counted from 0); its name."""
        from streamscope.simulator import SCENARIOS
        from streamscope.simulator.openai_catalog import OPENAI_SCENARIOS

        scenario = {**SCENARIOS, **OPENAI_SCENARIOS}[name]
        copy = Scenario(f"{name}-{uuid.uuid4().hex[:8]}", scenario.attempts)
        self.sim.add(copy)
        return copy.name

    def client(self, scenario: str) -> Any:
        if self.name == "anthropic":
            import anthropic

            return anthropic.Anthropic(base_url=self.sim.url(scenario), api_key="test-key", max_retries=0)
        import openai

        return openai.OpenAI(base_url=self.sim.openai_url(scenario), api_key="test-key", max_retries=0, timeout=15)

    def aclient(self, scenario: str) -> Any:
        if self.name == "anthropic":
            import anthropic

            return anthropic.AsyncAnthropic(base_url=self.sim.url(scenario), api_key="test-key", max_retries=0)
        import openai

        return openai.AsyncOpenAI(base_url=self.sim.openai_url(scenario), api_key="test-key", max_retries=0,
                                  timeout=15)

    def create(self, client: Any) -> Any:
        """A raw streamed call (awaitable with an async client)."""
        if self.name == "anthropic":
            return client.messages.create(model="m", max_tokens=1024, messages=USER, stream=True)
        return client.chat.completions.create(model="gpt-sim", messages=USER, stream=True,
                                              stream_options={"include_usage": True})

    def open(self, scenario: str) -> Any:
        return self.create(self.client(scenario))

    def text_of(self, event: Any) -> str:
        if self.name == "anthropic":
            delta = getattr(event, "delta", None)
            return delta.text if event.type == "content_block_delta" and delta.type == "text_delta" else ""
        choices = getattr(event, "choices", None) or ()
        return (choices[0].delta.content or "") if choices else ""


@pytest.fixture(scope="session")
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        yield simulator


@pytest.fixture(scope="session")
def sdk(sim: Simulator) -> Sdk:
    if PRESENT == "anthropic":
        return Sdk("anthropic", "complete", "cut_connection", "http_529_then_ok", sim)
    return Sdk("openai", "chat_complete", "chat_cut_connection", "chat_http_429_then_ok", sim)


class Spans:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.instrumentation_scope.name == "streamscope"]


def instrumentor(name: str) -> Any:
    import streamscope

    return getattr(streamscope, INSTRUMENTORS[name])()


@pytest.fixture
def telemetry() -> Iterator[Spans]:
    """The present SDK's instrumentor on, with an in-memory span exporter."""
    spans = Spans()
    on = instrumentor(PRESENT)
    on.instrument(tracer_provider=spans.provider, meter_provider=MeterProvider())
    assert on.is_instrumented_by_opentelemetry
    yield spans
    on.uninstrument()


@pytest.fixture
def no_sleep() -> Callable[[float], None]:
    return lambda seconds: None


@pytest.fixture(autouse=True)
def _the_missing_sdk_stays_missing(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """After every test: the missing SDK was never imported, and nothing of streamscope's was logged as an error."""
    caplog.set_level(logging.INFO)
    yield
    import sys

    assert MISSING not in sys.modules
    errors = [r for r in caplog.records if r.name.startswith("streamscope") and r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter is not None else 0
    if skipped and exitstatus == 0:
        reporter.write_line(f"{skipped} test(s) skipped: a skipped test proves nothing, failing the run", red=True)
        session.exitstatus = 1
