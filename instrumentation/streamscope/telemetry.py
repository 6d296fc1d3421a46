"""One call that sets up OpenTelemetry for code that configures telemetry itself.

    from streamscope import AnthropicInstrumentor
    from streamscope.telemetry import setup

    telemetry = setup("my-service", prometheus_port=9464)
    AnthropicInstrumentor().instrument(tracer_provider=telemetry.tracer_provider,
                                       meter_provider=telemetry.meter_provider)
    ...
    telemetry.shutdown()  # flushes spans and metrics, stops the /metrics server

OTLP goes over HTTP/protobuf, configured by the exporters themselves from the standard variables
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_{TRACES,METRICS}_ENDPOINT`, `..._HEADERS`,
`..._TIMEOUT`, `..._COMPRESSION`, `..._CERTIFICATE`, `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`,
...); the resource from `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`; the metric export
interval from `OTEL_METRIC_EXPORT_INTERVAL`; span batching from `OTEL_BSP_*`. Nothing here parses
them. With `opentelemetry-instrument` none of this is needed: see docs/metrics.md.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor


@dataclass
class Telemetry:
    """What `setup()` made: the two providers, and the /metrics server if one was asked for."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    prometheus_port: int | None = None
    """The port `/metrics` is served on (the real one when `prometheus_port=0` was asked for)."""
    prometheus_registry: Any = None
    """The `prometheus_client.CollectorRegistry` behind `/metrics`, if any."""
    _server: Any = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _closed: bool = field(default=False, repr=False)

    def force_flush(self, timeout_millis: int = 10_000) -> None:
        """Export what is buffered now (spans, then metrics)."""
        self.tracer_provider.force_flush(timeout_millis)
        self.meter_provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        """Flush and shut down both providers and stop the /metrics server. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.tracer_provider.shutdown()
        finally:
            try:
                self.meter_provider.shutdown()
            finally:
                if self._server is not None:
                    self._server.shutdown()
                    self._server.server_close()
                if self._thread is not None:
                    self._thread.join(timeout=5)


def setup(
    service_name: str | None = None,
    *,
    otlp: bool = True,
    prometheus_port: int | None = None,
    prometheus_host: str = "127.0.0.1",
    console: bool = False,
    set_global: bool = True,
    metric_readers: Sequence[MetricReader] = (),
    span_processors: Sequence[SpanProcessor] = (),
) -> Telemetry:
    """Tracer and meter providers with OTLP/HTTP exporters and, on request, a Prometheus endpoint.

    - `service_name`: the resource's `service.name` (else `OTEL_SERVICE_NAME`, else the SDK's
      `unknown_service`); other resource attributes come from `OTEL_RESOURCE_ATTRIBUTES`.
    - `otlp`: export spans (batched) and metrics (every `OTEL_METRIC_EXPORT_INTERVAL` ms, default
      60 s) over OTLP/HTTP to `OTEL_EXPORTER_OTLP_ENDPOINT` (default `http://localhost:4318`).
    - `prometheus_port`: serve `/metrics` (prometheus-client's HTTP server) on this port; 0 picks
      a free one (read it back from `Telemetry.prometheus_port`). The page uses its own registry,
      so two `setup()` calls never expose each other's series.
    - `prometheus_host`: the address to bind (loopback by default; `0.0.0.0` to be scraped from
      elsewhere).
    - `console`: also print spans and metrics to stdout (debugging).
    - `set_global`: make the providers the global ones (`opentelemetry.trace` / `.metrics`), so
      `AnthropicInstrumentor().instrument()` and other instrumentations find them without
      arguments. OpenTelemetry allows this once per process.
    - `metric_readers` / `span_processors`: more readers and processors to attach (an
      `InMemoryMetricReader` for a live table, say).
    """
    resource = Resource.create({SERVICE_NAME: service_name} if service_name else {})

    readers: list[MetricReader] = list(metric_readers)
    server = thread = registry = None
    port: int | None = None
    if prometheus_port is not None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry, start_http_server

        registry = CollectorRegistry()
        try:
            reader = PrometheusMetricReader(registry=registry)
        except TypeError:  # exporter releases before the `registry` argument: the global registry
            from prometheus_client import REGISTRY

            registry = REGISTRY
            reader = PrometheusMetricReader()
        readers.append(reader)
        server, thread = start_http_server(prometheus_port, addr=prometheus_host, registry=registry)
        port = server.server_port

    tracer_provider = TracerProvider(resource=resource)
    if otlp:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
    if console:
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
    for processor in span_processors:
        tracer_provider.add_span_processor(processor)

    meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider, meter_provider, port, registry, server, thread)
