"""Every stream, one log record: with `stream_logs` on, each streamed call of the plain
instrumentation writes one record on the `streamscope.streams` logger that agrees with its span
field by field (INFO for answers and for a caller that left, WARNING for failures); off by default;
switched by `instrument(stream_logs=)`, `STREAMSCOPE_STREAM_LOGS` and the config file's `[logs]`;
none for the relay's own calls (the relay writes one per relayed request); through OpenTelemetry's
logs with the span's trace and span ids and the fields as attributes; never content."""

from __future__ import annotations

import asyncio
import logging
import textwrap
import threading
import warnings
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext
from test_metrics import BUDGETS, MIX, run

from conftest import USER, Telemetry, aclient, client
from streamscope import AnthropicInstrumentor, Backoff, Budgets, astream_with_retry, stream_with_retry
from streamscope.adapters.anthropic.request import REQUEST_ID
from streamscope.budgets.table import BudgetFileError, BudgetTable
from streamscope.core.context import relaying
from streamscope.export.stream_log import KEYS
from streamscope.simulator import SCENARIOS, Scenario, Simulator
from streamscope.telemetry import setup

SPAN_FIELDS = ("gen_ai.request.model", "streamscope.route", "streamscope.failure.code", "streamscope.class",
               "streamscope.budget.fired")
SECRET = "PROMPT-SECRET-51c0: the vault code is 424242"
FAST = Backoff(base=0.01, cap=0.02)


class Records(logging.Handler):
    """The `streamscope.streams` records, each with the span context current when it was logged."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.got: list[tuple[logging.LogRecord, SpanContext]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.got.append((record, trace.get_current_span().get_span_context()))

    @property
    def records(self) -> list[logging.LogRecord]:
        return [record for record, _ in self.got]


@pytest.fixture
def records() -> Iterator[Records]:
    logger = logging.getLogger("streamscope.streams")
    handler, level = Records(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(level)


@pytest.fixture(autouse=True)
def no_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMSCOPE_STREAM_LOGS", raising=False)
    monkeypatch.delenv("STREAMSCOPE_CONFIG", raising=False)


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str], Path]:
    def write(text: str) -> Path:
        path = tmp_path / "streamscope.toml"
        path.write_text(textwrap.dedent(text))
        monkeypatch.setenv("STREAMSCOPE_CONFIG", str(path))
        return path

    return write


def fields_of(record: logging.LogRecord) -> dict[str, Any]:
    missing = [key for key in KEYS if key not in record.__dict__]
    assert not missing, missing
    return {key: record.__dict__[key] for key in KEYS}


def outcome_for(label: str, code: str | None) -> str:
    return "error" if code is not None else "client_disconnect" if label == "cancelled" else "done"


def one_call(sim: Simulator, scenario: str = "complete") -> None:
    """One streamed call, read to its end; the scenario's own failure is the caller's, not the test's."""
    try:
        for _ in client(sim, scenario).messages.create(model="claude-sim-1", max_tokens=64, messages=USER,
                                                       stream=True):
            pass
    except Exception:
        pass


# -- one record per call, agreeing with its span ----------------------------------------------------------


def test_one_record_per_call_agreeing_with_its_span(sim: Simulator, instrument: Callable[..., Telemetry],
                                                    records: Records) -> None:
    telemetry = instrument(budgets=BUDGETS, stream_logs=True)
    for scenario, route, extra, *_ in MIX:
        run(sim, scenario, route, extra)
    spans = sorted(telemetry.spans(), key=lambda s: s.start_time)
    assert len(spans) == len(MIX) == len(records.got)
    by_span = {context.span_id: record for record, context in records.got}
    assert len(by_span) == len(MIX), "each record is logged with its own call's span current"
    outcomes = []
    for span, (scenario, _, _, label, partial, fired) in zip(spans, MIX):
        attrs = dict(span.attributes)
        record = by_span[span.context.span_id]
        fields = fields_of(record)
        for key in SPAN_FIELDS:
            assert fields[key] == attrs.get(key), (scenario, key)
        assert fields["streamscope.partial"] is attrs["streamscope.partial"] is partial, scenario
        assert (fields["streamscope.class"], fields["streamscope.budget.fired"]) == (label, fired), scenario
        assert fields["provider_request_id"] == attrs.get(REQUEST_ID), scenario
        assert fields["request_id"] is None
        assert fields["attempts"] == 1
        assert fields["chunks"] == attrs["streamscope.content_events"]
        assert fields["duration"] == pytest.approx((span.end_time - span.start_time) / 1e9, abs=2e-6), scenario
        code = attrs.get("streamscope.failure.code")
        assert fields["outcome"] == outcome_for(label, code), scenario
        assert record.levelno == (logging.WARNING if code else logging.INFO), scenario
        assert record.name == "streamscope.streams"
        outcomes.append(fields["outcome"])
    assert outcomes.count("done") == 7 and outcomes.count("client_disconnect") == 1
    assert outcomes.count("error") == 7
    assert any(record.__dict__["provider_request_id"] for record in records.records), "the simulator sends ids"


def test_each_attempt_of_the_retry_line_is_a_call(sim: Simulator, instrument: Callable[..., Telemetry],
                                                  records: Records) -> None:
    sim.add(Scenario("stream_logs_529_then_ok", list(SCENARIOS["http_529_then_ok"].attempts)))
    telemetry = instrument(stream_logs=True)
    c = client(sim, "stream_logs_529_then_ok")
    list(stream_with_retry(lambda: c.messages.create(model="m", max_tokens=64, messages=USER, stream=True),
                           backoff=FAST))
    spans = sorted(telemetry.spans(), key=lambda s: s.start_time)
    got = [(r.__dict__["attempts"], r.__dict__["outcome"], r.__dict__["streamscope.failure.code"], r.levelno)
           for r in records.records]
    assert got == [(1, "error", "upstream_unavailable", logging.WARNING), (2, "done", None, logging.INFO)]
    assert [s.attributes["streamscope.attempts"] for s in spans] == [1, 2]


# -- switched on and off -----------------------------------------------------------------------------------


def test_off_by_default(sim: Simulator, instrument: Callable[..., Telemetry], records: Records) -> None:
    telemetry = instrument()
    one_call(sim)
    one_call(sim, "inband_error")
    assert len(telemetry.spans()) == 2
    assert records.records == []


def test_the_environment_variable(sim: Simulator, instrument: Callable[..., Telemetry], records: Records,
                                  monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    cases = [("true", None, 1), ("TRUE", None, 1), ("false", None, 0), ("true", False, 0),
                          ("false", True, 1)]
    for value, code, want in cases:
        monkeypatch.setenv("STREAMSCOPE_STREAM_LOGS", value)
        records.got.clear()
        telemetry = instrument(**({} if code is None else {"stream_logs": code}))
        one_call(sim)
        assert len(records.records) == want, (value, code)
        assert len(telemetry.spans()) == 1
        AnthropicInstrumentor().uninstrument()
    monkeypatch.setenv("STREAMSCOPE_STREAM_LOGS", "yes")
    caplog.set_level(logging.WARNING, logger="streamscope")
    records.got.clear()
    instrument()
    one_call(sim)
    assert records.records == []
    [line] = [r.getMessage() for r in caplog.records if r.name == "streamscope"]
    assert line.startswith("streamscope: ignoring STREAMSCOPE_STREAM_LOGS='yes' (it takes true or false)"), line


def test_code_must_say_true_or_false(instrument: Callable[..., Telemetry]) -> None:
    with pytest.raises(TypeError, match=r"instrument\(stream_logs=...\) takes True or False, not str 'yes'"):
        instrument(stream_logs="yes")


def test_the_config_file(sim: Simulator, instrument: Callable[..., Telemetry], records: Records,
                         config: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch) -> None:
    config("""
        [logs]
        streams = true

        [budgets.default]
        idle = 30
        """)
    instrument()
    one_call(sim)
    assert len(records.records) == 1
    AnthropicInstrumentor().uninstrument()
    # The variable beats the file, and code beats both.
    for env, code, want in (("false", None, 0), (None, False, 0), ("false", True, 1)):
        if env is None:
            monkeypatch.delenv("STREAMSCOPE_STREAM_LOGS", raising=False)
        else:
            monkeypatch.setenv("STREAMSCOPE_STREAM_LOGS", env)
        records.got.clear()
        instrument(**({} if code is None else {"stream_logs": code}))
        one_call(sim)
        assert len(records.records) == want, (env, code)
        AnthropicInstrumentor().uninstrument()
    monkeypatch.delenv("STREAMSCOPE_STREAM_LOGS", raising=False)
    config("[logs]\nstreams = false\n")
    records.got.clear()
    instrument()
    one_call(sim)
    assert records.records == []


@pytest.mark.parametrize(("text", "problem"), [
    ("[logs]\nstream = true\n", "[logs] stream: unknown key; did you mean streams? [logs] has one key, "
                                "streams = true or false (one log record per streamed call)"),
    ("[logs]\nstreams = \"true\"\n", '[logs] streams = "true": must be true or false (write it without quotes: '
                                     "streams = true)"),
    ("[logs]\nstreams = 1\n", "[logs] streams = 1: must be true or false"),
    ("logs = true\n", "logs = true: logs is a table; write [logs] and under it streams = true"),
    ("streams = true\n", "top-level key streams: it goes in the [logs] table: [logs] then, on the next line, "
                         "streams = true"),
    ("[log]\nstreams = true\n", "unknown table [log]; did you mean [logs]?"),
])
def test_a_bad_logs_table_is_one_line_saying_what_to_write(text: str, problem: str,
                                                           config: Callable[[str], Path]) -> None:
    path = config(text)
    with pytest.raises(BudgetFileError) as raised:
        BudgetTable.from_environment()
    message = str(raised.value)
    assert message.startswith(f"budget file {path} (STREAMSCOPE_CONFIG): {problem}"), message
    assert "\n" not in message


def test_a_bad_logs_table_through_the_instrumentor(sim: Simulator, instrument: Callable[..., Telemetry],
                                                   records: Records, config: Callable[[str], Path],
                                                   caplog: pytest.LogCaptureFixture) -> None:
    """The file cannot be used: one error line, no budgets, no records; with `budgets=` in code
    the file is read for `[logs]` only, and its problem is still one line."""
    config("[logs]\nstreems = true\n")
    caplog.set_level(logging.WARNING, logger="streamscope")
    instrument()
    one_call(sim)
    lines = [r.getMessage() for r in caplog.records if r.name == "streamscope"]
    assert len(lines) == 1 and lines[0].startswith("streamscope: budgets are OFF"), lines
    assert "[logs] streems: unknown key; did you mean streams?" in lines[0]
    assert records.records == []
    AnthropicInstrumentor().uninstrument()
    caplog.clear()
    instrument(budgets=Budgets(idle=30))
    lines = [r.getMessage() for r in caplog.records if r.name == "streamscope"]
    assert len(lines) == 1 and lines[0].startswith("streamscope: stream log records are OFF until this is fixed"), lines


# -- the relay's calls --------------------------------------------------------------------------------------


def test_calls_inside_relaying_write_no_record_of_their_own(sim: Simulator, instrument: Callable[..., Telemetry],
                                                            records: Records) -> None:
    """What `relay()` marks: the attempts it opens (all inside its first read) write nothing; the
    relay writes one record per relayed request itself (tests/serve)."""
    sim.add(Scenario("stream_logs_relayed_529_then_ok", list(SCENARIOS["http_529_then_ok"].attempts)))
    telemetry = instrument(stream_logs=True)
    c = client(sim, "stream_logs_relayed_529_then_ok")

    async def relayed() -> int:
        a = aclient(sim, "stream_logs_relayed_529_then_ok")
        line = astream_with_retry(lambda: a.messages.create(model="m", max_tokens=64, messages=USER, stream=True),
                                  backoff=FAST)
        flow = line.__aiter__()
        with relaying():
            first = asyncio.ensure_future(anext(flow))
        await first
        rest = [event async for event in flow]  # read on outside the block: decided when each call opened
        return len(rest) + 1

    assert asyncio.run(relayed()) > 1
    assert len(telemetry.spans()) == 2 and records.records == []
    with relaying():
        one_call(sim)
    assert records.records == []
    for _ in c.messages.create(model="m", max_tokens=64, messages=USER, stream=True):
        pass
    assert len(records.records) == 1, "outside relaying() a call writes its record"


# -- through OpenTelemetry's logs ---------------------------------------------------------------------------


def private_call(sim: Simulator) -> str:
    """A call with a secret prompt; returns the answer text the caller received."""
    with client(sim, "thinking").messages.stream(model="claude-sim-1", max_tokens=8192,
                                                  messages=[{"role": "user", "content": SECRET}],
                                                  thinking={"type": "enabled", "budget_tokens": 4096}) as s:
        return s.get_final_text()


def assert_no_content(exported: list[Any], answer: str) -> None:
    blob = "\n".join(str(r.log_record.body) + repr(dict(r.log_record.attributes or {})) for r in exported)
    assert SECRET not in blob and "424242" not in blob
    for i in range(0, max(len(answer) - 20, 0) + 1, 10):
        assert answer[i:i + 20] not in blob, "answer text in a log record"


def test_the_sdk_logging_handler_links_the_record_to_its_span(sim: Simulator, instrument: Callable[..., Telemetry],
                                                               records: Records) -> None:
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the SDK's handler, deprecated for another package's
        handler = LoggingHandler(logger_provider=provider)
    logger = logging.getLogger("streamscope.streams")
    logger.addHandler(handler)
    try:
        telemetry = instrument(stream_logs=True)
        answer = private_call(sim)
        one_call(sim, "http_529")
    finally:
        logger.removeHandler(handler)
    spans = sorted(telemetry.spans(), key=lambda s: s.start_time)
    exported = [r for r in exporter.get_finished_logs() if r.log_record.attributes.get("outcome")]
    assert len(exported) == 2
    for span, got in zip(spans, exported):
        log = got.log_record
        assert (log.trace_id, log.span_id) == (span.context.trace_id, span.context.span_id)
        attrs = dict(log.attributes)
        assert attrs["streamscope.class"] == span.attributes["streamscope.class"]
        assert attrs["gen_ai.request.model"] == "claude-sim-1"
        assert attrs["provider_request_id"] == span.attributes.get(REQUEST_ID)
    assert [r.log_record.severity_text for r in exported] == ["INFO", "WARN"]
    assert exported[1].log_record.attributes["streamscope.failure.code"] == "upstream_unavailable"
    assert_no_content(exported, answer)


class _Logs(BaseHTTPRequestHandler):
    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/v1/logs":
            request = ExportLogsServiceRequest()
            request.ParseFromString(body)
            self.server.logs.append(request)
            payload = ExportLogsServiceResponse().SerializeToString()
        else:
            payload = b""
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def receiver() -> Iterator[Any]:
    server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Logs)
    server.daemon_threads = True
    server.logs = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_setup_sends_the_records_over_otlp(sim: Simulator, receiver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`setup()` bridges `streamscope.streams` (only) into its logger provider: the span's ids, the
    fields as attributes with the ones that have no value left out, and nothing of the content."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{receiver.server_address[1]}")
    logger = logging.getLogger("streamscope.streams")
    level = logger.level
    logger.setLevel(logging.NOTSET)
    telemetry = setup("stream-logs-test", set_global=False)
    memory = InMemoryLogRecordExporter()
    assert telemetry.logger_provider is not None
    telemetry.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(memory))
    spans = InMemorySpanExporter()
    telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider,
                            logger_provider=telemetry.logger_provider, stream_logs=True)
    try:
        assert logger.level == logging.INFO
        assert not [h for h in logging.getLogger().handlers if type(h).__name__ == "OTelHandler"]
        answer = private_call(sim)
        one_call(sim, "inband_error")
    finally:
        instrumentor.uninstrument()
        telemetry.shutdown()
        logger.setLevel(level)
    assert not [h for h in logger.handlers if type(h).__name__ == "OTelHandler"], "shutdown() takes it off"
    mine = sorted((s for s in spans.get_finished_spans() if s.instrumentation_scope.name == "streamscope"),
                  key=lambda s: s.start_time)
    # The failed call's `gen_ai.client.operation.exception` event goes out on the same logger provider.
    everything = memory.get_finished_logs()
    exported = [r for r in everything if r.instrumentation_scope.name == "streamscope.streams"]
    assert [r.log_record.event_name for r in everything if r not in exported] == ["gen_ai.client.operation.exception"]
    assert len(exported) == len(mine) == 2
    for span, got in zip(mine, exported):
        log = got.log_record
        assert (log.trace_id, log.span_id) == (span.context.trace_id, span.context.span_id)
        attrs = dict(log.attributes)
        assert None not in attrs.values()
        assert "request_id" not in attrs and "streamscope.route" not in attrs
        assert attrs["streamscope.class"] == span.attributes["streamscope.class"]
        assert attrs["chunks"] == span.attributes["streamscope.content_events"]
        assert set(attrs) <= set(KEYS)
    assert [r.log_record.severity_text for r in exported] == ["INFO", "WARN"]
    assert exported[1].log_record.attributes["streamscope.failure.code"] == "upstream_unavailable"
    assert_no_content(exported, answer)
    # And over OTLP/HTTP: the same two records, with their span ids.
    over = [(r.span_id, {a.key for a in r.attributes}) for request in receiver.logs for rl in request.resource_logs
            for sl in rl.scope_logs if sl.scope.name == "streamscope.streams" for r in sl.log_records]
    assert [span_id for span_id, _ in over] == [s.context.span_id.to_bytes(8, "big") for s in mine]
    assert all("outcome" in keys and "streamscope.class" in keys for _, keys in over)
