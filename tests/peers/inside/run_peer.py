"""The inner run: ONE configuration of streamscope and ONE peer, in the peer's overlay, in a fresh process.

    python run_peer.py SPEC.json

Started by ../test_peers.py (under `opentelemetry-instrument` for `zero-code`), which compares the
reports of the configurations. Configurations: `neither`, `streamscope` (streamscope only), `peer`
(peer only), `peer-first` (the peer on, then streamscope), `streamscope-first`, and `zero-code`
(streamscope on by `opentelemetry-instrument` through its entry points before this script runs, its
budgets from `STREAMSCOPE_CONFIG`; here the peer on in code, then the global providers set before the
first call: where the peer claimed them first, as Logfire does, streamscope records through the peer's).

Every case runs against the real simulator with the real SDK clients (no retries), and the report
says per case what the caller received, what streamscope recorded (spans and counters, without ids
and timings) and what the peer recorded. A fresh process per configuration: instrumentors patch
classes for good, and a peer's import alone may change an SDK.
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import Counter, MeterProvider
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader, Sum
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

CONFIGURATIONS = ("neither", "streamscope", "peer", "peer-first", "streamscope-first", "zero-code")
WITH_STREAMSCOPE = ("streamscope", "peer-first", "streamscope-first", "zero-code")
WITH_PEER = ("peer", "peer-first", "streamscope-first", "zero-code")

MODEL = "claude-sim"
USER = [{"role": "user", "content": "How do streams fail?"}]
STOP_AFTER = 5
"""The caller that gives up: it breaks out after this many events and closes the stream."""

ANTHROPIC_SCENARIOS = ("complete", "pinging_stall", "inband_error", "slow_thinking", "cut_connection", "http_529")
CHAT_SCENARIOS = ("chat_complete", "chat_cut_connection", "chat_inband_error")

_KEPT = re.compile(r"^(streamscope\.|gen_ai\.|error\.type$|http\.response\.status_code$)")
_DROPPED = re.compile(r"(\.id$|time_to|duration|max_gap|decode_rate|^streamscope\.thinking\.(start|end)$"
                      r"|^streamscope\.pings$)")
"""Span attributes compared: streamscope's own, the GenAI conventions', the error and the HTTP status
(not what a peer owning the provider may add); less what differs from run to run by nature: ids,
timings, and the pings counted before a budget fired (which depends on when it fired)."""


_MARGINS = ("streamscope.time_to_first_content", "streamscope.max_gap")
"""Timings kept apart from the comparison (in the report's `timings`): how near the budgets healthy streams come."""


@dataclass(frozen=True)
class Case:
    sdk: str
    shape: str
    """How the caller streams: `sync-create` / `async-create` (`messages.create(stream=True)`),
    `sync-stream` / `async-stream` (`messages.stream()`), `sync-chat` / `async-chat`,
    `sync-responses` / `async-responses`."""
    scenario: str
    stop_after: int | None = None

    @property
    def id(self) -> str:
        return f"{self.shape}/{self.scenario}" + ("+break" if self.stop_after else "")

    @property
    def is_async(self) -> bool:
        return self.shape.startswith("async-")


def cases(sdks: tuple[str, ...]) -> list[Case]:
    """Every Anthropic scenario in one sync and one async shape, `complete` and the early break in
    all four; OpenAI's Chat Completions scenarios sync and async, and a complete Responses stream."""
    found: list[Case] = []
    if "anthropic" in sdks:
        for shape in ("sync-create", "async-stream"):
            found += [Case("anthropic", shape, scenario) for scenario in ANTHROPIC_SCENARIOS]
            found.append(Case("anthropic", shape, "complete", STOP_AFTER))
        for shape in ("sync-stream", "async-create"):
            found += [Case("anthropic", shape, "complete"), Case("anthropic", shape, "complete", STOP_AFTER)]
    if "openai" in sdks:
        for shape in ("sync-chat", "async-chat"):
            found += [Case("openai", shape, scenario) for scenario in CHAT_SCENARIOS]
        found += [Case("openai", shape, "responses_complete") for shape in ("sync-responses", "async-responses")]
    return found


def normalised(text: str) -> str:
    """A message without what changes by run: the simulator's port, measured seconds."""
    return re.sub(r"\d+\.\d+", "<n>", re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:<port>", text))


@dataclass
class Caller:
    """What the caller received: every event's kind in order, the answer text, the exception."""

    events: list[str] = field(default_factory=list)
    text: str = ""
    error: dict[str, Any] | None = None

    def add(self, event: Any) -> None:
        kind = getattr(event, "type", None)
        if kind is None:  # a Chat Completions chunk: no type of its own
            choice = event.choices[0] if event.choices else None
            parts = ([] if choice is None else [name for name, value in (
                ("role", choice.delta.role), ("content", choice.delta.content),
                (f"finish:{choice.finish_reason}", choice.finish_reason)) if value])
            kind = "chunk[" + ",".join(parts + (["usage"] if event.usage else [])) + "]"
            self.text += (choice.delta.content or "") if choice is not None else ""
        elif kind == "content_block_delta" and event.delta.type == "text_delta":
            self.text += event.delta.text
        elif kind == "response.output_text.delta":
            self.text += event.delta
        self.events.append(kind)

    def failed(self, exc: BaseException) -> None:
        self.error = {"type": f"{type(exc).__module__}.{type(exc).__qualname__}", "message": normalised(str(exc))}
        for name in ("budget", "partial"):
            if hasattr(exc, name):
                self.error[name] = getattr(exc, name)

    def report(self) -> dict[str, Any]:
        return {"events": self.events, "text": self.text, "error": self.error}

    def enough(self, stop_after: int | None) -> bool:
        return stop_after is not None and len(self.events) >= stop_after


def _sync_call(case: Case, url: str, openai_url: str, caller: Caller) -> None:
    if case.sdk == "anthropic":
        import anthropic

        with anthropic.Anthropic(base_url=url, api_key="test-key", max_retries=0) as client:
            if case.shape == "sync-create":
                _read(client.messages.create(model=MODEL, max_tokens=1024, messages=USER, stream=True), case, caller)
            else:
                with client.messages.stream(model=MODEL, max_tokens=1024, messages=USER) as stream:
                    _read(stream, case, caller)
        return
    import openai

    with openai.OpenAI(base_url=openai_url, api_key="test-key", max_retries=0, timeout=15) as oclient:
        if case.shape == "sync-chat":
            _read(oclient.chat.completions.create(model="gpt-sim", messages=USER, stream=True,
                                                  stream_options={"include_usage": True}), case, caller)
        else:
            _read(oclient.responses.create(model="gpt-sim", input="How do streams fail?", stream=True), case, caller)


def _read(stream: Any, case: Case, caller: Caller) -> None:
    for event in stream:
        caller.add(event)
        if caller.enough(case.stop_after):
            stream.close()
            break


async def _async_call(case: Case, url: str, openai_url: str, caller: Caller) -> None:
    if case.sdk == "anthropic":
        import anthropic

        async with anthropic.AsyncAnthropic(base_url=url, api_key="test-key", max_retries=0) as client:
            if case.shape == "async-create":
                await _aread(await client.messages.create(model=MODEL, max_tokens=1024, messages=USER, stream=True),
                             case, caller)
                return
            async with client.messages.stream(model=MODEL, max_tokens=1024, messages=USER) as stream:
                await _aread(stream, case, caller)
        return
    import openai

    async with openai.AsyncOpenAI(base_url=openai_url, api_key="test-key", max_retries=0, timeout=15) as oclient:
        if case.shape == "async-chat":
            opened = await oclient.chat.completions.create(model="gpt-sim", messages=USER, stream=True,
                                                           stream_options={"include_usage": True})
        else:
            opened = await oclient.responses.create(model="gpt-sim", input="How do streams fail?", stream=True)
        await _aread(opened, case, caller)


async def _aread(stream: Any, case: Case, caller: Caller) -> None:
    async for event in stream:
        caller.add(event)
        if caller.enough(case.stop_after):
            await stream.close()
            break


class Logs(logging.Handler):
    """Warnings and errors logged during a case: streamscope's, and everyone else's (the peer's)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def take(self, streamscope: bool) -> list[str]:
        mine = [r for r in self.records if r.name.startswith("streamscope") == streamscope]
        return [f"{r.name} {r.levelname}: {normalised(r.getMessage())}" for r in mine]


class Streamscope:
    """streamscope's own capture: a TracerProvider and a MeterProvider of its own (real SDK parts);
    counters in delta temporality, so each collection holds one case's points."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = self._reader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.globals = ""
        """Whose global providers streamscope records through in zero-code: `streamscope's` or `the peer's`."""

    @staticmethod
    def _reader() -> InMemoryMetricReader:
        return InMemoryMetricReader(preferred_temporality={Counter: AggregationTemporality.DELTA})

    def on_globals(self) -> None:
        """Set this capture's providers as the global ones; where another's are in force already (OpenTelemetry
        sets them once), read streamscope's spans and counters from those (an SDK provider, or a wrapper of
        one that forwards `add_span_processor` and keeps the SDK's meter provider as `provider`, as Logfire's)."""
        trace.set_tracer_provider(self.tracer_provider)
        metrics.set_meter_provider(self.meter_provider)
        tracer_provider, meter_provider = trace.get_tracer_provider(), metrics.get_meter_provider()
        if tracer_provider is self.tracer_provider and meter_provider is self.meter_provider:
            self.globals = "streamscope's"
            return
        self.globals = "the peer's"
        if tracer_provider is not self.tracer_provider:
            tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        if meter_provider is not self.meter_provider:
            sdk_provider = meter_provider if hasattr(meter_provider, "add_metric_reader") else meter_provider.provider
            self.reader = self._reader()
            sdk_provider.add_metric_reader(self.reader)

    def instrument(self, budgets: Mapping[str, float]) -> None:
        import streamscope

        for instrumentor in (streamscope.AnthropicInstrumentor(), streamscope.OpenAIInstrumentor()):
            instrumentor.instrument(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider,
                                    budgets=streamscope.Budgets(**budgets))

    def take(self) -> dict[str, Any]:
        finished = list(self.exporter.get_finished_spans())
        self.exporter.clear()
        spans = sorted((_span(s) for s in finished if s.instrumentation_scope.name == "streamscope"),
                       key=lambda s: json.dumps(s, sort_keys=True))
        # Spans of others on streamscope's own provider: a peer writing where it should not. (On a
        # peer's provider, in zero-code beside a peer that owns the globals, the peer's are expected.)
        others = [s for s in finished if s.instrumentation_scope.name != "streamscope"]
        stray = sorted(f"{s.instrumentation_scope.name}: {s.name}" for s in others if self.globals != "the peer's")
        margins = {k: round(v, 3) for s in finished if s.instrumentation_scope.name == "streamscope"
                   for k, v in (s.attributes or {}).items() if k in _MARGINS and isinstance(v, float)}
        return {"spans": spans, "stray": stray, "metrics": self._points(), "margins": margins}

    def _points(self) -> list[dict[str, Any]]:
        data = self.reader.get_metrics_data()
        points = [{"metric": m.name, "attributes": _plain(dict(p.attributes or {})), "value": p.value}
                  for rm in (data.resource_metrics if data else ()) for sm in rm.scope_metrics
                  if sm.scope.name == "streamscope" for m in sm.metrics
                  if isinstance(m.data, Sum) and m.data.is_monotonic for p in m.data.data_points if p.value]
        return sorted(points, key=lambda p: json.dumps(p, sort_keys=True))


def _plain(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(attributes.items())}


def _span(span: ReadableSpan) -> dict[str, Any]:
    kept = {k: v for k, v in (span.attributes or {}).items() if _KEPT.search(k) and not _DROPPED.search(k)}
    return {"name": span.name, "status": span.status.status_code.name.lower(), "attributes": _plain(kept),
            "events": [e.name for e in span.events]}


def _streamscope_on() -> dict[str, bool]:
    import streamscope

    return {"anthropic": streamscope.AnthropicInstrumentor().is_instrumented_by_opentelemetry,
            "openai": streamscope.OpenAIInstrumentor().is_instrumented_by_opentelemetry}


def setup(config: str, peer_name: str, budgets: Mapping[str, float]) -> tuple[Streamscope | None, ModuleType | None]:
    """Turn on what `config` asks for, in its order; streamscope's capture and the peer's driver (None if off)."""
    capture = Streamscope() if config in WITH_STREAMSCOPE else None
    peer = importlib.import_module(f"peer_{peer_name}") if config in WITH_PEER else None
    if config == "zero-code":
        assert capture is not None and peer is not None
        # Under opentelemetry-instrument streamscope is already on, on the global (proxy) providers.
        # The program turns the peer on, then sets the global providers before its first call: a
        # peer that claimed them first (Logfire does, when none is set) keeps them, and streamscope
        # records through the peer's, as it would in production.
        peer.enable()
        capture.on_globals()
    elif config == "peer-first":
        assert capture is not None and peer is not None
        peer.enable()
        capture.instrument(budgets)
    elif config == "streamscope-first":
        assert capture is not None and peer is not None
        capture.instrument(budgets)
        peer.enable()
    elif config == "streamscope":
        assert capture is not None
        capture.instrument(budgets)
    elif config == "peer":
        assert peer is not None
        peer.enable()
    return capture, peer


def run(config: str, peer_name: str, sdks: tuple[str, ...], time_scale: float,
        budgets: Mapping[str, float]) -> dict[str, Any]:
    from streamscope.simulator import Simulator

    started = time.monotonic()
    capture, peer = setup(config, peer_name, budgets)
    on = _streamscope_on() if "streamscope" in sys.modules else {"anthropic": False, "openai": False}
    logs = Logs()
    logging.getLogger().addHandler(logs)
    report: dict[str, Any] = {"peer": peer_name, "config": config, "streamscope_on": on, "cases": {},
                              "globals": capture.globals if capture is not None else "",
                              "timings": {}}
    if peer is not None:
        peer.reset()
    for sdk in sdks:
        importlib.import_module(sdk)
    with Simulator(time_scale=time_scale) as sim:
        gc.freeze()  # what is here now lives on: each case's collection below looks at that case's objects only
        for case in cases(sdks):
            caller, began, timing = Caller(), time.monotonic(), {}
            try:
                if case.is_async:
                    asyncio.run(_async_call(case, sim.url(case.scenario), sim.openai_url(case.scenario), caller))
                else:
                    _sync_call(case, sim.url(case.scenario), sim.openai_url(case.scenario), caller)
            except Exception as exc:
                caller.failed(exc)
            gc.collect()  # a span ended by a finaliser belongs to this case, not the next
            entry: dict[str, Any] = {"caller": caller.report()}
            if capture is not None:
                entry["streamscope"] = {**capture.take(), "logs": logs.take(streamscope=True)}
                timing["streamscope"] = entry["streamscope"].pop("margins")
            if peer is not None:
                entry["peer"] = {"records": peer.records(), "logs": logs.take(streamscope=False)}
                peer.reset()
            logs.records.clear()
            report["cases"][case.id] = entry
            report["timings"][case.id] = {"seconds": round(time.monotonic() - began, 3), **timing}
    report["seconds"] = round(time.monotonic() - started, 2)
    return report


def main(argv: list[str]) -> int:
    """`run_peer.py SPEC.json`: the spec says `peer`, `sdks`, `config`, `time_scale`, `budgets` and `out`
    (the report's path). A file, not options: `opentelemetry-instrument` reads its own options
    (`--config...`) anywhere on the command line, this script's too."""
    spec = json.loads(Path(argv[1]).read_text())
    out = Path(spec["out"])
    try:
        report = run(spec["config"], spec["peer"], tuple(spec["sdks"]), spec["time_scale"], spec["budgets"])
    except Exception:
        out.write_text(json.dumps({"fatal": traceback.format_exc()}))
        return 2
    out.write_text(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
