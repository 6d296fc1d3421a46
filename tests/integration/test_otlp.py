"""OTLP/HTTP: spans and metrics from `streamscope.telemetry.setup()` reach a local receiver that
decodes them with the official protobuf definitions (opentelemetry-proto), and arrive intact: the
same data points and spans an in-memory reader and exporter on the same providers hold."""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_metrics import MIX, run

from streamscope import AnthropicInstrumentor, Budgets
from streamscope.telemetry import setup

BUDGETS = {
    "route:budgeted": Budgets(first_token=0.8, idle=0.3, deadline=3.0),
    "route:deadline": Budgets(deadline=0.8),
}

BESIDE_THE_CALLS = ("streamscope.store.errors", "streamscope.internal_errors")
"""Counters the process adds to on its own threads, not only when a call is made."""


class Receiver(ThreadingHTTPServer):
    """A minimal OTLP/HTTP (binary protobuf) receiver on loopback."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.metrics: list[ExportMetricsServiceRequest] = []
        self.traces: list[ExportTraceServiceRequest] = []
        self.encodings: set[str] = set()
        self.content_types: set[str] = set()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: Receiver

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            body = b"".join(chunks)
        else:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        encoding = self.headers.get("Content-Encoding", "identity")
        self.server.encodings.add(encoding)
        if encoding == "gzip":
            return gzip.decompress(body)
        if encoding == "deflate":
            return zlib.decompress(body)
        return body

    def do_POST(self) -> None:
        body = self._body()
        self.server.content_types.add(self.headers.get("Content-Type", ""))
        if self.path == "/v1/metrics":
            request, response = ExportMetricsServiceRequest(), ExportMetricsServiceResponse()
            request.ParseFromString(body)
            with self.server.lock:
                self.server.metrics.append(request)
        elif self.path == "/v1/traces":
            request, response = ExportTraceServiceRequest(), ExportTraceServiceResponse()
            request.ParseFromString(body)
            with self.server.lock:
                self.server.traces.append(request)
        else:
            self.send_response(404)
            self.end_headers()
            return
        payload = response.SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


def any_value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return tuple(any_value(x) for x in v.array_value.values)
    return getattr(v, kind)


def kv(attributes: Any) -> dict[str, Any]:
    return {a.key: any_value(a.value) for a in attributes}


def frozen(attrs: dict[str, Any]) -> tuple:
    return tuple(sorted(attrs.items()))


def otlp_points(request: ExportMetricsServiceRequest) -> dict[tuple, Any]:
    """(metric name, unit, attributes) -> value / (count, sum, buckets, bounds), scope streamscope."""
    out: dict[tuple, Any] = {}
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            if sm.scope.name != "streamscope":
                continue
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                data = getattr(metric, kind)
                for p in data.data_points:
                    key = (metric.name, metric.unit, frozen(kv(p.attributes)))
                    if kind == "histogram":
                        out[key] = (p.count, pytest.approx(p.sum), tuple(p.bucket_counts), tuple(p.explicit_bounds))
                    else:
                        out[key] = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
    return out


def memory_points(reader: InMemoryMetricReader) -> dict[tuple, Any]:
    out: dict[tuple, Any] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            if sm.scope.name != "streamscope":
                continue
            for metric in sm.metrics:
                for p in metric.data.data_points:
                    key = (metric.name, metric.unit, frozen(dict(p.attributes)))
                    if isinstance(p, HistogramDataPoint):
                        out[key] = (p.count, p.sum, tuple(p.bucket_counts), tuple(p.explicit_bounds))
                    else:
                        out[key] = p.value
    return out


def test_metrics_and_spans_arrive_intact_over_otlp_http(sim, receiver: Receiver, monkeypatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")  # read by the exporters, not by us
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
    reader = InMemoryMetricReader()
    spans = InMemorySpanExporter()
    telemetry = setup("otlp-test", otlp=True, set_global=False, metric_readers=[reader],
                      span_processors=[SimpleSpanProcessor(spans)])
    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider,
                            budgets=BUDGETS)
    try:
        for scenario, route, extra, *_ in MIX:
            run(sim, scenario, route, extra)
        expected = memory_points(reader)
    finally:
        instrumentor.uninstrument()
        telemetry.shutdown()  # flushes: the batch span processor and the final metric export

    assert receiver.encodings == {"gzip"}
    assert receiver.content_types == {"application/x-protobuf"}
    assert receiver.metrics and receiver.traces
    # Metrics: the last cumulative export holds every point, equal to what the in-memory reader held.
    last = receiver.metrics[-1]
    resource = kv(last.resource_metrics[0].resource.attributes)
    assert resource["service.name"] == "otlp-test"
    assert resource["deployment.environment.name"] == "test"
    got = otlp_points(last)
    assert set(got) == set(expected)
    # What the process counts beside the calls (a Redis store of an earlier test in this worker, its
    # server gone, still counts its outage each second) may have grown between the two reads: those
    # points arrive too, cumulative, never smaller.
    for key in [k for k in expected if k[0] in BESIDE_THE_CALLS]:
        assert got.pop(key) >= expected.pop(key), key
    assert got == expected
    names = {name for name, _, _ in got}
    assert {"streamscope.requests", "streamscope.budget.firings", "streamscope.active_streams",
            "gen_ai.client.operation.duration", "gen_ai.client.token.usage",
            "gen_ai.client.operation.time_to_first_chunk", "streamscope.time_to_first_content"} <= names
    classes = {}
    for (name, unit, attrs), value in got.items():
        if name == "streamscope.requests":
            assert unit == "{request}"
            a = dict(attrs)
            key = (a["streamscope.class"], a["streamscope.partial"])
            classes[key] = classes.get(key, 0) + value
    want: dict[tuple, int] = {}
    for *_, label, partial, _ in MIX:
        want[(label, partial)] = want.get((label, partial), 0) + 1
    assert classes == want
    # Temporality: cumulative (what Prometheus and remote write need).
    for rm in last.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                kind = metric.WhichOneof("data")
                if kind in ("sum", "histogram"):
                    assert getattr(metric, kind).aggregation_temporality == 2, metric.name  # CUMULATIVE

    # Spans: one per call, with the attributes and events the in-memory exporter saw.
    exported = {}
    for request in receiver.traces:
        for rs in request.resource_spans:
            assert kv(rs.resource.attributes)["service.name"] == "otlp-test"
            for ss in rs.scope_spans:
                for span in ss.spans:
                    if ss.scope.name == "streamscope":
                        exported[span.span_id] = span
    local = {s.context.span_id.to_bytes(8, "big"): s for s in spans.get_finished_spans()
             if s.instrumentation_scope.name == "streamscope"}
    assert len(local) == len(MIX)
    assert set(exported) == set(local)
    for span_id, span in exported.items():
        mine = local[span_id]
        assert span.name == mine.name
        assert span.kind == 3  # SPAN_KIND_CLIENT
        assert span.trace_id == mine.context.trace_id.to_bytes(16, "big")
        assert (span.start_time_unix_nano, span.end_time_unix_nano) == (mine.start_time, mine.end_time)
        assert kv(span.attributes) == {k: tuple(v) if isinstance(v, (list, tuple)) else v
                                       for k, v in mine.attributes.items()}
        assert [(e.name, e.time_unix_nano, kv(e.attributes)) for e in span.events] == [
            (e.name, e.timestamp, dict(e.attributes)) for e in mine.events]
