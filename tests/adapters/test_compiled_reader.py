"""The sync reader in compiled code (`adapters/stainless/_reader.c`) records what the Python reader
records, raises what it raises, and is the one an instrumented stream gets where it was built.

Each case reads a stream of the simulator's catalog with the real SDK, once through the compiled
reader and once through the Python one (`stream._reader` set to None), and compares what the span
says (every attribute that is not a time or an id) and what the caller got.
"""

from __future__ import annotations

import collections.abc
import gc
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from conftest import USER, Telemetry, client
from streamscope import AnthropicInstrumentor, Budgets, StreamTimeout
from streamscope.adapters.stainless import stream as hooks
from streamscope.simulator import Scenario, TextSpec, message_stream

BUDGETS = Budgets(first_token=3.5, idle=1.0)
"""Generous beside the catalog's healthy gaps (at most 0.1 s, thinking 2 s), short beside its stalls."""
CATALOG = ["basic_text", "docs_thinking", "docs_overloaded", "complete", "thinking", "thinking_omitted", "tool_use",
           "long_answer", "truncated", "budget_exhausted", "refused", "inband_error", "cut_connection", "incomplete",
           "tool_call_cut", "pinging_stall", "silent_stall", "http_529", "http_400", "unknown_events",
           "malformed_json", "slow_thinking", "timed_thinking", "timed_pinging_stall"]
MANY = Scenario.single("compiled_many",
                       message_stream(blocks=[TextSpec([f" w{i}" for i in range(400)], interval=0.001)]))
"""More text deltas than the small ints (256): the counts become numbers only the recorder holds."""
SLOW = Scenario.single("compiled_slow", message_stream(blocks=[TextSpec(["One", " two", " three", " four", " five",
                                                                         " six."], interval=0.15)]))


@pytest.fixture(scope="module", autouse=True)
def _slow(sim: Any) -> None:
    sim.add(SLOW)
    sim.add(MANY)


@pytest.fixture(params=["compiled", "python"])
def reader(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "python":
        monkeypatch.setattr(hooks, "_reader", None)
    return str(request.param)


def said(span: Any) -> dict[str, Any]:
    """What a span says, times and ids left out (they differ from one run to the next), and the
    pings a stall sent before its budget fired (as many as fit in the budget's time on the machine)."""
    attributes = dict(span.attributes or {})
    return {k: v for k, v in attributes.items()
            if not isinstance(v, float) and "id" not in k.split(".")[-1] and "time" not in k
            and not (k == "streamscope.pings" and "streamscope.budget.fired" in attributes)}


def read(sim: Any, scenario: str, consume: Callable[[Any], None] | None = None) -> tuple[list[str], str | None]:
    """The event types the caller got, and what was raised (type and budget)."""
    got: list[str] = []
    c = client(sim, scenario)
    try:
        s = c.messages.create(model="m", max_tokens=1024, messages=USER, stream=True)
        if consume is not None:
            consume(s)
        else:
            for event in s:
                got.append(event.type)
        return got, None
    except StreamTimeout as exc:
        return got, f"StreamTimeout {exc.budget}"
    except Exception as exc:
        return got, type(exc).__name__
    finally:
        c.close()


def both(sim: Any, monkeypatch: pytest.MonkeyPatch, scenario: str, consume: Callable[[Any], None] | None = None,
         budgets: Budgets = BUDGETS, wrapped: bool = False) -> list[Any]:
    """(what the caller got, what the span said) through each reader, compiled first. `wrapped`:
    none of the SDK's layers taken over (as on a release whose streaming module changed), so the
    keep-alives are counted over the SDK's own `_iter_events` (`Counted`, or `_counted`)."""
    results = []
    for compiled in (True, False):
        with monkeypatch.context() as patch:
            if not compiled:
                patch.setattr(hooks, "_reader", None)
            exporter, provider = InMemorySpanExporter(), TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(exporter))
            instrumentor = AnthropicInstrumentor()
            instrumentor.instrument(tracer_provider=provider, budgets=budgets)
            if wrapped:
                instrumentor._adapter.layers.reset()
            try:
                caller = read(sim, scenario, consume)
            finally:
                instrumentor.uninstrument()
            (span,) = exporter.get_finished_spans()
            results.append((caller, said(span)))
    return results


def test_an_instrumented_stream_is_read_by_the_compiled_reader(sim: Any, telemetry: Telemetry) -> None:
    """Where the module was built (a C compiler at install, as here), it is the reader: were it
    missing, every stream would quietly take the Python reader and nothing else would say so."""
    assert hooks._reader is not None, "streamscope.adapters.stainless._reader was not built at install"
    c = client(sim, "complete")
    with c.messages.create(model="m", max_tokens=64, messages=USER, stream=True) as s:
        it = iter(s)
        assert type(it) is hooks._reader.Reader
        assert len(list(it)) > 5
    assert telemetry.attrs()["streamscope.class"] == "complete"


@pytest.mark.parametrize("scenario", CATALOG)
def test_both_readers_record_the_same(sim: Any, monkeypatch: pytest.MonkeyPatch, scenario: str) -> None:
    compiled, python = both(sim, monkeypatch, scenario)
    assert compiled == python


@pytest.mark.parametrize("scenario", ["basic_text", "docs_thinking", "complete", "inband_error", "cut_connection",
                                      "pinging_stall", "timed_pinging_stall", "unknown_events"])
def test_with_no_sdk_layer_taken_over_both_readers_record_the_same(
        sim: Any, monkeypatch: pytest.MonkeyPatch, scenario: str) -> None:
    compiled, python = both(sim, monkeypatch, scenario, wrapped=True)
    assert compiled == python


def test_a_budget_that_fires_while_the_caller_holds_an_event(sim: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deadline passes while the caller is busy with an event: the next read raises the budget's
    timeout, and the record says the deadline ended it, through either reader."""
    def slow_caller(s: Any) -> None:
        for event in s:
            if event.type == "content_block_delta":
                time.sleep(1.0)

    compiled, python = both(sim, monkeypatch, "compiled_slow", slow_caller, Budgets(deadline=0.6))
    assert compiled == python
    (_, raised), attrs = compiled
    assert raised == "StreamTimeout deadline" and attrs["streamscope.budget.fired"] == "deadline"


def test_a_caller_that_breaks_and_reads_on(sim: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def break_then_resume(s: Any) -> None:
        for n, _ in enumerate(s):
            if n == 3:
                break
        for _ in s:
            pass

    compiled, python = both(sim, monkeypatch, "complete", break_then_resume)
    assert compiled == python
    assert compiled[1]["streamscope.class"] == "complete"


def test_a_second_thread_cannot_read_while_the_first_waits(sim: Any, telemetry: Telemetry, reader: str) -> None:
    """As with a generator: a `next()` from another thread while one read waits on the network is a
    ValueError for that thread alone; the stream and its record go on."""
    c = client(sim, "silent_stall")
    s = c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    it = iter(s)
    texts: list[str] = []
    failures: list[BaseException] = []

    def first() -> None:
        try:
            for event in it:
                if event.type == "content_block_delta":
                    texts.append(event.delta.text)
        except BaseException as exc:  # the stream closed under it, below
            failures.append(exc)

    worker = threading.Thread(target=first)
    worker.start()
    deadline = time.monotonic() + 10
    while len(texts) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)  # the first thread now waits out the 10 s of silence inside its read
    with pytest.raises(ValueError, match="already executing"):
        next(it)
    assert not telemetry.spans(), "the second thread's read ended the record"
    s.close()
    worker.join(10)
    c.close()
    assert len(texts) == 3 and telemetry.attrs()["streamscope.content_events"] == 3


def test_a_reader_in_a_cycle_is_collected(sim: Any, telemetry: Telemetry, reader: str) -> None:
    """A caller that keeps the iterator on the stream (a cycle through the reader) and drops both:
    the collector frees them, and the stream's end is recorded."""
    c = client(sim, "complete")
    s = c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    s.kept = iter(s)  # type: ignore[attr-defined]
    next(s.kept)  # type: ignore[attr-defined]
    gone = weakref.ref(s)
    del s
    gc.collect()
    assert gone() is None
    assert len(telemetry.spans()) == 1
    c.close()


def test_a_recorder_slot_of_another_type_takes_the_python_steps(sim: Any, telemetry: Telemetry) -> None:
    """The compiled reader writes the recorder's slots only where they hold what the recorder puts
    there: a clock given as an int (a caller's own `t0`) takes `asked` and `observe` in Python."""
    from streamscope.core import recorder

    made = recorder.StreamRecorder.__init__

    def with_int_clock(self: Any, *args: Any, **kwargs: Any) -> None:
        made(self, *args, **kwargs)
        self.origin = int(self.origin)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(recorder.StreamRecorder, "__init__", with_int_clock)
        got, raised = read(sim, "complete")
    assert raised is None and got.count("content_block_delta") == telemetry.attrs()["streamscope.content_events"]
    assert telemetry.attrs()["streamscope.class"] == "complete"


def test_the_generator_methods_do_what_they_do_on_a_generator(sim: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`iter(stream)` is a generator without streamscope; callers may close it, throw into it or
    send to it, and get what a generator does, through either reader."""
    def close_early(s: Any) -> None:
        it = iter(s)
        assert isinstance(it, collections.abc.Generator)
        for _ in range(3):
            next(it)
        it.close()
        assert next(it, "over") == "over"
        s.close()

    def throw_in(s: Any) -> None:
        it = iter(s)
        it.send(None)
        it.throw(RuntimeError("the caller's own"))

    for consume in (close_early, throw_in):
        compiled, python = both(sim, monkeypatch, "complete", consume)
        assert compiled == python
    assert compiled[0][1] == "RuntimeError" and compiled[1]["error.type"] == "RuntimeError"


NUMBERS = ("origin", "held", "last_content", "max_gap", "content_events", "text_chars")
"""The recorder's slots the compiled reader changes in place where nothing else holds the number."""


@pytest.mark.parametrize("metrics", [True, False])
def test_a_number_someone_holds_never_changes(sim: Any, instrument: Callable[..., Telemetry], metrics: bool) -> None:
    """The compiled reader changes a clock or a count in place only where the recorder's slot alone
    holds it: a number read from the recorder mid-stream (as the budgets' watch and the relay read
    them) keeps its value, and the record's own are those of the Python steps (every delta counted,
    every character, the greatest gap), past the small ints, with the chunk metric's gaps kept or not."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from streamscope.core.calls import ATTR

    telemetry = instrument(meter_provider=MeterProvider(metric_readers=[InMemoryMetricReader()]) if metrics else None)
    held: list[tuple[str, Any, Any]] = []
    texts: list[str] = []
    c = client(sim, "compiled_many")
    with c.messages.create(model="m", max_tokens=1024, messages=USER, stream=True) as s:
        rec = s.__dict__[ATTR].recorder
        assert (rec.gaps is not None) is metrics
        for i, event in enumerate(s):
            if event.type == "content_block_delta":
                texts.append(event.delta.text)
            if event.type == "content_block_stop" and metrics:  # the gaps go to the metric at the end
                assert rec.max_gap == max(rec.gaps) and len(rec.gaps) == len(texts) - 1
            if i % 3 == 0:  # some held, some not: both ways, in turn
                numbers = [(name, getattr(rec, name)) for name in NUMBERS]
                held.extend((name, number, repr(number)) for name, number in numbers if number is not None)
        assert rec.content_events == len(texts) > 256 and rec.text_chars == sum(len(t) for t in texts)
    c.close()
    changed = [(name, was, repr(number)) for name, number, was in held if repr(number) != was]
    assert changed == [], "a number read from the recorder changed after it was read"
    attrs = telemetry.attrs()
    assert attrs["streamscope.content_events"] == len(texts) and attrs["streamscope.class"] == "complete"
