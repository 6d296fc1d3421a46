"""With `opentelemetry-instrument` and no code change, `OTEL_METRICS_EXPORTER=prometheus`, `otlp`,
or both, just work: a process running real streams serves them on `/metrics` and exports them
over OTLP, over HTTP (`OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf`) and over gRPC (the distro's
default protocol)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import urllib.request
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceResponse
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from prometheus_client.parser import text_string_to_metric_families
from test_otlp import Receiver, kv

from streamscope.simulator import Simulator

SCRIPT = textwrap.dedent(
    """
    import sys, anthropic
    for url in sys.argv[1:]:
        client = anthropic.Anthropic(base_url=url, api_key="test-key", max_retries=0)
        try:
            for _ in client.messages.create(model="claude-auto", max_tokens=64, stream=True,
                                            messages=[{"role": "user", "content": "hi"}]):
                pass
        except Exception as exc:
            print("ERROR", type(exc).__name__)
    print("DONE", flush=True)
    sys.stdin.read()  # stay up (serving /metrics) until the test closes stdin
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


class GrpcReceiver:
    """OTLP/gRPC metrics and traces services, decoded by the generated opentelemetry-proto code."""

    def __init__(self) -> None:
        self.metrics: list = []
        self.traces: list = []
        receiver = self

        class Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
            def Export(self, request, context):
                receiver.metrics.append(request)
                return ExportMetricsServiceResponse()

        class Traces(trace_service_pb2_grpc.TraceServiceServicer):
            def Export(self, request, context):
                receiver.traces.append(request)
                return ExportTraceServiceResponse()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(Metrics(), self.server)
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


class Instrumented:
    """`opentelemetry-instrument python app.py URL...` as a child process."""

    def __init__(self, tmp_path: Path, urls: list[str], **env: str) -> None:
        script = tmp_path / "app.py"
        script.write_text(SCRIPT)
        launcher = Path(sys.executable).with_name("opentelemetry-instrument")
        environment = {
            **os.environ,
            "OTEL_SERVICE_NAME": "autoinstrument-metrics",
            "OTEL_TRACES_EXPORTER": "none",
            "OTEL_LOGS_EXPORTER": "none",
            "OTEL_METRIC_EXPORT_INTERVAL": "600000",  # only the export at exit
            **env,
        }
        self.proc = subprocess.Popen([str(launcher), sys.executable, str(script), *urls], env=environment,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=tmp_path)
        self.stdout: list[str] = []

    def wait_done(self, timeout: float = 60) -> None:
        timer = threading.Timer(timeout, self.proc.kill)
        timer.start()
        try:
            for line in self.proc.stdout:
                self.stdout.append(line)
                if line.startswith("DONE"):
                    return
        finally:
            timer.cancel()
        raise AssertionError(f"the app never finished: {self.stdout} {self.proc.stderr.read()}")

    def stop(self, timeout: float = 60) -> str:
        """Close stdin (the app exits, flushing its exporters); returns stderr."""
        _, err = self.proc.communicate(input="", timeout=timeout)
        assert self.proc.returncode == 0, err
        return err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def requests_by_class(request) -> dict[str, float]:
    out: dict[str, float] = {}
    for rm in request.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == "streamscope.requests":
                    for p in metric.sum.data_points:
                        label = kv(p.attributes)["streamscope.class"]
                        out[label] = out.get(label, 0) + p.as_int
    return out


def test_prometheus_and_otlp_http_together(tmp_path: Path, receiver: Receiver) -> None:
    port = free_port()
    with Simulator() as sim:
        app = Instrumented(
            tmp_path, [sim.url("complete"), sim.url("inband_error")],
            OTEL_METRICS_EXPORTER="prometheus,otlp",
            OTEL_TRACES_EXPORTER="otlp",
            OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
            OTEL_EXPORTER_PROMETHEUS_HOST="127.0.0.1",
            OTEL_EXPORTER_PROMETHEUS_PORT=str(port),
        )
        try:
            app.wait_done()
            samples = scrape(port)
            err = app.stop()
        finally:
            app.kill()
    requests = {s.labels["streamscope_class"]: s.value for s in samples["streamscope_requests_total"]}
    assert requests == {"complete": 1.0, "upstream_error": 1.0}, err
    [partial] = [s for s in samples["streamscope_requests_total"] if s.labels["streamscope_class"] == "upstream_error"]
    assert partial.labels["streamscope_partial"] == "true"
    assert partial.labels["gen_ai_request_model"] == "claude-auto"
    bounds = {s.labels["le"] for s in samples["streamscope_time_to_first_content_seconds_bucket"]}
    assert bounds >= {"0.05", "1.0", "300.0", "+Inf"}
    # The same process also exported over OTLP/HTTP when it exited.
    assert receiver.metrics, err
    assert requests_by_class(receiver.metrics[-1]) == {"complete": 1, "upstream_error": 1}
    spans = [s for r in receiver.traces for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]
    assert sorted(s.name for s in spans) == ["chat claude-auto", "chat claude-auto"]


def test_otlp_with_the_distros_default_protocol(tmp_path: Path) -> None:
    """`OTEL_METRICS_EXPORTER=otlp` alone: the distro picks gRPC, which streamscope installs."""
    grpc_receiver = GrpcReceiver()
    try:
        with Simulator() as sim:
            app = Instrumented(tmp_path, [sim.url("complete")], OTEL_METRICS_EXPORTER="otlp",
                               OTEL_TRACES_EXPORTER="otlp", OTEL_EXPORTER_OTLP_ENDPOINT=grpc_receiver.endpoint)
            try:
                app.wait_done()
                err = app.stop()
            finally:
                app.kill()
    finally:
        grpc_receiver.server.stop(grace=1)
    assert grpc_receiver.metrics, err
    assert requests_by_class(grpc_receiver.metrics[-1]) == {"complete": 1}
    assert grpc_receiver.traces, err
