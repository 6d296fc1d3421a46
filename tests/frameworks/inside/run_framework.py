"""The inner run: every case of ONE framework, in the framework's own environment, in one process.

    python run_framework.py SPEC.json

Started by ../test_frameworks.py, which runs the simulator (in its own process) and asserts on the
report this writes. streamscope is on (both instrumentors, the spec's budgets) with a real
TracerProvider (SimpleSpanProcessor into an InMemorySpanExporter, and a processor noting when each
span ended) and a real MeterProvider (InMemoryMetricReaders: counters in delta temporality, one
collection per case; the in-flight gauge cumulative). Each case drives the framework as its users
do (`drivers.py`) against the case's own scenario, and reports:

* what the caller received: the text pieces with their times, the exception (its chain, cause by
  cause, and what each link is: a StreamTimeout and its budget, a TimeoutError, the SDK's
  timeout or API error);
* streamscope's spans (name, status, the attributes the test reads, duration, when each ended)
  and counters;
* stages after the caller stopped: `end` (the moment the caller's loop ended: in the `except`
  block for a failure, right after the driver returned otherwise), for the caller that left
  `settled` (0.5 s later; async: with the event loop running, so dropped async generators are
  closed by its finaliser),
  `collected` (after `gc.collect()`), for the abandoned answer `answer_over` (once the rest of the
  answer would have arrived had the framework read on: the event loop running meanwhile), and
  for async `loop_closed` (after `asyncio.run` returned: its tasks cancelled, its generators closed).
  At each: how many spans had ended, the streams streamscope still had in flight, and what was
  still alive of the SDK's stream objects and of the HTTP responses (open ones), so the test can
  tell when the framework let go of the stream and whether the span ended then.
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import logging
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics import Counter, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SETTLE = 0.5
"""Seconds the caller waits after it stopped before the `settled` look."""

KEPT = ("streamscope.class", "streamscope.budget.fired", "error.type", "streamscope.partial",
        "streamscope.failure.code", "gen_ai.provider.name", "gen_ai.request.model", "gen_ai.response.finish_reasons",
        "streamscope.time_to_first_content", "streamscope.budget.first_token", "streamscope.budget.idle",
        "streamscope.budget.deadline", "streamscope.content_events", "streamscope.thinking.start")


class Ends(SpanProcessor):
    """When (time.monotonic()) each span ended: the caller's clock, to put span ends among its stages."""

    def __init__(self) -> None:
        self.at: dict[int, float] = {}

    def on_end(self, span: ReadableSpan) -> None:
        self.at[span.context.span_id] = time.monotonic()


class Capture:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.ends = Ends()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(self.ends)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.counters = InMemoryMetricReader(preferred_temporality={Counter: AggregationTemporality.DELTA})
        self.gauges = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.counters, self.gauges])

    def instrument(self, budgets: dict[str, float]) -> dict[str, bool]:
        import streamscope

        on = {}
        for name, instrumentor in (("anthropic", streamscope.AnthropicInstrumentor()),
                                   ("openai", streamscope.OpenAIInstrumentor())):
            instrumentor.instrument(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider,
                                    budgets=streamscope.Budgets(**budgets))
            on[name] = instrumentor.is_instrumented_by_opentelemetry
        return on

    def ended(self) -> int:
        return sum(1 for s in self.exporter.get_finished_spans() if s.instrumentation_scope.name == "streamscope")

    def in_flight(self) -> int:
        data = self.gauges.get_metrics_data()
        return int(sum(p.value for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics
                       for m in sm.metrics if m.name == "streamscope.active_streams" for p in m.data.data_points))

    def take(self, t0_ns: int) -> dict[str, Any]:
        finished = [s for s in self.exporter.get_finished_spans() if s.instrumentation_scope.name == "streamscope"]
        self.exporter.clear()
        spans = [{
            "name": s.name,
            "status": s.status.status_code.name.lower(),
            "attributes": {k: (list(v) if isinstance(v, tuple) else v) for k, v in (s.attributes or {}).items()
                           if k in KEPT},
            "start": round(((s.start_time or 0) - t0_ns) / 1e9, 3),
            "duration": round(((s.end_time or 0) - (s.start_time or 0)) / 1e9, 3),
            "ended_at": self.ends.at.get(s.context.span_id),
        } for s in sorted(finished, key=lambda s: s.start_time or 0)]
        data = self.counters.get_metrics_data()
        points = [{"metric": m.name, "attributes": dict(p.attributes or {}), "value": p.value}
                  for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics
                  if sm.scope.name == "streamscope" for m in sm.metrics
                  if m.name in ("streamscope.requests", "streamscope.budget.firings", "streamscope.internal_errors")
                  for p in m.data.data_points if p.value]
        return {"spans": spans, "counters": points}


# -- what is still alive of the stream ------------------------------------------------------------------


def _stream_classes() -> tuple[type, ...]:
    found: list[type] = []
    for sdk in ("anthropic", "openai"):
        module = sys.modules.get(f"{sdk}._streaming")
        if module is not None:
            found += [module.Stream, module.AsyncStream]
    return tuple(found)


def _response_classes() -> tuple[type, ...]:
    return tuple(sys.modules[name].Response for name in ("httpx", "httpx2") if name in sys.modules)


def alive(before: set[int] | None = None) -> dict[str, Any]:
    """The SDK stream objects alive, and the HTTP responses alive and still open (ids, to leave out
    what was alive before the case)."""
    streams, responses = _stream_classes(), _response_classes()
    sdk_streams, open_responses = [], []
    for obj in gc.get_objects():
        if streams and isinstance(obj, streams):
            sdk_streams.append(id(obj))
        elif responses and isinstance(obj, responses) and not getattr(obj, "is_closed", True):
            open_responses.append(id(obj))
    before = before or set()
    return {"sdk_streams": [i for i in sdk_streams if i not in before],
            "open_responses": [i for i in open_responses if i not in before]}


# -- the caller -------------------------------------------------------------------------------------------


class Caller:
    """What the caller got: the pieces of text, when, and whether it wants more."""

    def __init__(self, leave_after: int | None) -> None:
        self.pieces: list[str] = []
        self.times: list[float] = []
        self.leave_after = leave_after

    def take(self, delta: str) -> bool:
        if delta:
            self.pieces.append(delta)
            self.times.append(time.monotonic())
        return not (self.leave_after is not None and len(self.pieces) >= self.leave_after)

    def now(self, text: str) -> bool:
        have = "".join(self.pieces)
        return self.take(text[len(have):] if text.startswith(have) else "")


def normalised(text: str) -> str:
    return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text)[:400]


def describe(exc: BaseException) -> list[dict[str, Any]]:
    """The exception and its chain, as Python prints it: each link's class, how it is linked to the one
    before (`cause`: raise ... from; `context`: raised while handling), and what it is."""
    sdk_timeouts = tuple(sys.modules[s].APITimeoutError for s in ("anthropic", "openai") if s in sys.modules)
    sdk_errors = tuple(sys.modules[s].APIError for s in ("anthropic", "openai") if s in sys.modules)
    chain: list[dict[str, Any]] = []
    seen: set[int] = set()
    link: BaseException | None = exc
    via = "raised"
    while link is not None and id(link) not in seen and len(chain) < 12:
        seen.add(id(link))
        kind = type(link)
        chain.append({
            "type": f"{kind.__module__}.{kind.__qualname__}",
            "via": via,
            "message": normalised(str(link)),
            "stream_timeout": kind.__name__ == "StreamTimeout" and hasattr(link, "budget"),
            "budget": getattr(link, "budget", None) if kind.__name__ == "StreamTimeout" else None,
            "timeout_error": isinstance(link, TimeoutError),
            "sdk_timeout": bool(sdk_timeouts) and isinstance(link, sdk_timeouts),
            "sdk_error": bool(sdk_errors) and isinstance(link, sdk_errors),
        })
        if link.__cause__ is not None:
            link, via = link.__cause__, "cause"
        elif link.__context__ is not None and not link.__suppress_context__:
            link, via = link.__context__, "context"
        else:
            link = None
    return chain


class Logs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.name.startswith("streamscope"):
            self.records.append(f"{record.levelname}: {normalised(record.getMessage())}")

    def take(self) -> list[str]:
        taken, self.records = self.records, []
        return taken


# -- one case ---------------------------------------------------------------------------------------------


class Case:
    def __init__(self, spec: dict[str, Any], capture: Capture) -> None:
        self.spec = spec
        self.capture = capture
        self.caller = Caller(spec["leave_after"])
        self.error: list[dict[str, Any]] | None = None
        self.stages: dict[str, dict[str, Any]] = {}
        self.before: set[int] = set()
        self.started = 0.0
        self.stopped = 0.0

    def look(self, stage: str) -> None:
        self.stages[stage] = {"t": time.monotonic(), "spans_ended": self.capture.ended(),
                              "in_flight": self.capture.in_flight(), **alive(self.before)}

    def failed(self, exc: BaseException) -> None:
        self.stopped = time.monotonic()
        self.error = describe(exc)
        self.look("end")  # the exception (and the frames it holds) still alive, as in the caller's except block

    def returned(self) -> None:
        self.stopped = time.monotonic()
        self.look("end")

    def run_sync(self, drive: Any) -> None:
        try:
            drive(self.spec["url"], self.caller, self.spec["thinking"])
        except Exception as exc:
            self.failed(exc)
        else:
            self.returned()
        if self.spec["leave_after"] is not None:
            time.sleep(SETTLE)
            self.look("settled")
        gc.collect()
        self.look("collected")
        if self.spec["answer_over"] is not None:
            time.sleep(max(0.0, self.started + self.spec["answer_over"] - time.monotonic()))
            self.look("answer_over")

    async def _run_async(self, drive: Any) -> None:
        try:
            await drive(self.spec["url"], self.caller, self.spec["thinking"])
        except Exception as exc:
            self.failed(exc)
        else:
            self.returned()
        if self.spec["leave_after"] is not None:
            await asyncio.sleep(SETTLE)
            self.look("settled")
        gc.collect()
        await asyncio.sleep(0.2)  # what the collection finalised may need the loop to close
        self.look("collected")
        if self.spec["answer_over"] is not None:
            await asyncio.sleep(max(0.0, self.started + self.spec["answer_over"] - time.monotonic()))
            self.look("answer_over")

    def run_async(self, drive: Any) -> None:
        asyncio.run(self._run_async(drive))
        self.look("loop_closed")

    def report(self, logs: list[str], t0_ns: int) -> dict[str, Any]:
        return {
            "started": self.started,
            "stopped": self.stopped,
            "pieces": self.caller.pieces,
            "times": [round(t - self.started, 3) for t in self.caller.times],
            "text": "".join(self.caller.pieces),
            "error": self.error,
            "stages": {k: {**v, "t": round(v["t"] - self.started, 3),
                           "sdk_streams": len(v["sdk_streams"]), "open_responses": len(v["open_responses"])}
                       for k, v in self.stages.items()},
            **self.capture.take(t0_ns),
            "logs": logs,
        }


def run(spec: dict[str, Any]) -> dict[str, Any]:
    import drivers

    capture = Capture()
    logs = Logs()
    logging.getLogger().addHandler(logs)
    began = time.monotonic()
    on = capture.instrument(spec["budgets"])
    report: dict[str, Any] = {"framework": spec["framework"], "instrumented": on, "cases": {},
                              "setup_logs": logs.take()}
    for path in {c["path"] for c in spec["cases"]}:
        if (spec["framework"], path) not in drivers.DRIVERS:
            raise LookupError(f"drivers.py has no driver for {spec['framework']} {path}")
    for module in drivers.WARM[spec["framework"]]:
        importlib.import_module(module)
    gc.collect()
    gc.freeze()  # what is here now lives on: each case's collections and searches look at its own objects only
    report["ready_after"] = round(time.monotonic() - began, 2)
    for entry in spec["cases"]:
        drive = drivers.DRIVERS[(spec["framework"], entry["path"])]
        case = Case(entry, capture)
        gc.collect()
        case.before = set().union(*alive().values())
        t0_ns = time.time_ns()
        case.started = time.monotonic()
        try:
            if asyncio.iscoroutinefunction(drive):
                case.run_async(drive)
            else:
                case.run_sync(drive)
        except Exception:  # the harness itself, not the framework
            case.error = [{"type": "harness", "via": "raised", "message": traceback.format_exc()[-3000:]}]
        gc.collect()
        report["cases"][entry["id"]] = case.report(logs.take(), t0_ns)
    report["seconds"] = round(time.monotonic() - began, 2)
    report["versions"] = versions(spec["packages"])
    return report


def versions(names: list[str]) -> dict[str, str | None]:
    import importlib.metadata as metadata

    found: dict[str, str | None] = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def main(argv: list[str]) -> int:
    spec = json.loads(Path(argv[1]).read_text())
    out = Path(spec["out"])
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    try:
        report = run(spec)
    except Exception:
        out.write_text(json.dumps({"fatal": traceback.format_exc()}))
        return 2
    out.write_text(json.dumps(report, indent=1, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
