"""Shared fixtures: the real simulator over loopback, real OpenTelemetry SDK exporters.

A skipped test proves nothing, so any skip fails the run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import pytest
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import summaries
from streamscope import AnthropicInstrumentor, classify
from streamscope.simulator import SCENARIOS, Simulator

USER = [{"role": "user", "content": "How do streams fail?"}]


@pytest.fixture(scope="session")
def sim() -> Iterator[Simulator]:
    with Simulator(SCENARIOS) as simulator:
        yield simulator


class EndCounter(SpanProcessor):
    """Counts starts and ends per span, to prove every span ends exactly once."""

    def __init__(self) -> None:
        self.started: list[int] = []
        self.ended: list[int] = []

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        self.started.append(span.context.span_id)

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span.context.span_id)


class Telemetry:
    """One instrumentation session: its tracer provider and the spans it exported."""

    def __init__(self, exporter: InMemorySpanExporter, provider: TracerProvider, ends: EndCounter) -> None:
        self.exporter = exporter
        self.provider = provider
        self.ends = ends

    def assert_each_ended_once(self) -> None:
        assert sorted(self.ends.started) == sorted(self.ends.ended), "a span never ended"
        assert len(set(self.ends.ended)) == len(self.ends.ended), "a span ended twice"

    def clear(self) -> None:
        """Forget every span so far (a run set aside)."""
        self.ends.started.clear()
        self.ends.ended.clear()
        self.exporter.clear()

    def spans(self) -> list[ReadableSpan]:
        return [s for s in self.exporter.get_finished_spans() if s.instrumentation_scope.name == "streamscope"]

    def all_spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def one(self) -> ReadableSpan:
        spans = self.spans()
        assert len(spans) == 1, [s.name for s in self.all_spans()]
        return spans[0]

    def attrs(self) -> dict[str, Any]:
        return dict(self.one().attributes or {})


@pytest.fixture
def instrument() -> Iterator[Callable[..., Telemetry]]:
    """Turn streamscope on (once per test) with an in-memory span exporter."""
    instrumentor = AnthropicInstrumentor()
    made: list[Telemetry] = []

    def start(**kwargs: Any) -> Telemetry:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        ends = EndCounter()
        provider.add_span_processor(ends)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        instrumentor.instrument(tracer_provider=provider, **kwargs)
        made.append(Telemetry(exporter, provider, ends))
        return made[-1]

    yield start
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()


@pytest.fixture
def telemetry(instrument: Callable[..., Telemetry]) -> Telemetry:
    return instrument()


def client(sim: Simulator, scenario: str, **kwargs: Any) -> anthropic.Anthropic:
    kwargs.setdefault("max_retries", 0)
    return anthropic.Anthropic(base_url=sim.url(scenario), api_key="test-key", **kwargs)


def aclient(sim: Simulator, scenario: str, **kwargs: Any) -> anthropic.AsyncAnthropic:
    kwargs.setdefault("max_retries", 0)
    return anthropic.AsyncAnthropic(base_url=sim.url(scenario), api_key="test-key", **kwargs)


def offline_class(span: ReadableSpan) -> str:
    """The classifier run on the span as exported, for comparison with the live label."""
    return classify(dict(span.attributes or {}))


LONGEST = ("tests/deploy/test_benchmarks.py::test_relay_instructions_short_form",
           "tests/matrix/test_sdk_lines.py::test_the_adapter_on_each_line[anthropic", "tests/one_sdk/",
           "tests/matrix/", "tests/peers/", "tests/frameworks/", "tests/deploy/test_benchmarks.py",
           "tests/adapters/test_never_break_the_host.py", "tests/fleet/test_redis_floor.py",
           "tests/tools/test_validate.py", "tests/deploy/test_dashboards_live.py")
"""Minutes each, longest first: under pytest-xdist (`make test`) they start first, so that none of
them starts last. (Each worker is given two modules at the start and one more as it finishes one.)"""
ONE_BY_ONE = ("tests/matrix/test_sdk_lines.py::test_the_adapter_on_each_line[", "tests/deploy/test_benchmarks.py::",
              "tests/one_sdk/test_one_sdk.py::test_with_one_sdk_only[")
"""Tests of one module that may run in different xdist workers at once (minutes each, no shared state)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: next((i for i, p in enumerate(LONGEST) if item.nodeid.startswith(p)), len(LONGEST)))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` (the Makefile): each module's tests in one worker, as its module-scoped
    servers expect, except ONE_BY_ONE's, each on its own. (Not `loadgroup`: pytest 9.2 drops its
    group names from the node ids it schedules by, pytest-xdist issue 1386.)"""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ByModule(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid if nodeid.startswith(ONE_BY_ONE) else super()._split_scope(nodeid)

    return ByModule(config, log)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    summaries.gathered(getattr(node, "workeroutput", {}))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for title, lines in summaries.SHOWN:
        terminalreporter.section(title)
        for line in lines:
            terminalreporter.write_line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = len(reporter.stats.get("skipped", [])) if reporter is not None else 0
    if skipped and exitstatus == 0:
        reporter.write_line(f"{skipped} test(s) skipped: a skipped test proves nothing, failing the run", red=True)
        session.exitstatus = 1
