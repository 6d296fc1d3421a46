"""One call that sets up OpenTelemetry for code that configures telemetry itself.

    from streamscope import AnthropicInstrumentor
    from streamscope.telemetry import setup

    telemetry = setup("my-service", prometheus_port=9464)
    AnthropicInstrumentor().instrument(tracer_provider=telemetry.tracer_provider,
                                       meter_provider=telemetry.meter_provider)
    ...
    telemetry.shutdown()  # flushes spans, metrics and logs, stops the /metrics server

OTLP goes over HTTP/protobuf, configured by the exporters themselves from the standard variables
(`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_{TRACES,METRICS,LOGS}_ENDPOINT`, `..._HEADERS`,
`..._TIMEOUT`, `..._COMPRESSION`, `..._CERTIFICATE`, `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`,
...); the resource from `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`; the metric export
interval from `OTEL_METRIC_EXPORT_INTERVAL`; span and log batching from `OTEL_BSP_*` and
`OTEL_BLRP_*`. Nothing here parses them. With `opentelemetry-instrument` none of this is needed: see docs/metrics.md.

Several worker processes (gunicorn, `uvicorn --workers`, Celery prefork, `multiprocessing`): with
`PROMETHEUS_MULTIPROC_DIR` set, every process writes its metrics there and `/metrics` serves the
sum of all of them (`serve_metrics()` from a parent that streams nothing, `worker_exit()` when a
worker ends). See docs/metrics.md, "Several worker processes".

Exemplars: the histograms' buckets on `/metrics` carry the trace id and span id of a recent stream
that landed in them (OpenTelemetry's exemplar filter, `OTEL_METRICS_EXEMPLAR_FILTER`, trace-based
by default), in the OpenMetrics format Prometheus asks for (export/exemplars.py; docs/deploy.md,
"From a latency spike to its trace").
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from opentelemetry import _logs, metrics, trace
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import SERVICE_INSTANCE_ID, SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

from .core.guard import internal_error, logger
from .export import stream_log

__all__ = ["MetricsServer", "Telemetry", "serve_metrics", "setup", "worker_exit"]

_ENV = "PROMETHEUS_MULTIPROC_DIR"

if TYPE_CHECKING:
    from .export.prometheus_multiprocess import MultiprocessMeterProvider


@dataclass
class Telemetry:
    """What `setup()` made: the providers, and the /metrics server if one was asked for."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider | MultiprocessMeterProvider
    """The SDK's provider; with `PROMETHEUS_MULTIPROC_DIR`, one whose meters also write every
    worker's files (its `sdk_provider` is the SDK's)."""
    prometheus_port: int | None = None
    """The port `/metrics` is served on (the real one when `prometheus_port=0` was asked for); None
    when none was asked for, or when a sibling worker already serves the port."""
    prometheus_registry: Any = None
    """The `prometheus_client.CollectorRegistry` behind `/metrics`, if any. With
    `PROMETHEUS_MULTIPROC_DIR` it always exists and collects the sum of every worker, so an app
    can also serve it itself (`prometheus_client.make_asgi_app(registry)`)."""
    multiprocess_dir: str | None = None
    """The `PROMETHEUS_MULTIPROC_DIR` in use, if any."""
    logger_provider: LoggerProvider | None = None
    """The SDK's logger provider exporting over OTLP (None without OTLP): the stream log records
    (`streamscope.streams`) and the opt-in content event go there."""
    _log_handler: logging.Handler | None = field(default=None, repr=False)
    _server: Any = field(default=None, repr=False)
    _thread: threading.Thread | None = field(default=None, repr=False)
    _pid: int = field(default_factory=os.getpid, repr=False)
    _closed: bool = field(default=False, repr=False)

    def force_flush(self, timeout_millis: int = 10_000) -> None:
        """Export what is buffered now (spans, then metrics, then logs)."""
        self.tracer_provider.force_flush(timeout_millis)
        self.meter_provider.force_flush(timeout_millis)
        if self.logger_provider is not None:
            self.logger_provider.force_flush(timeout_millis)

    def shutdown(self) -> None:
        """Flush and shut down the providers (the log handler taken off `streamscope.streams`) and
        stop the /metrics server. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self.tracer_provider.shutdown()
        finally:
            try:
                self.meter_provider.shutdown()
            finally:
                try:
                    if self._log_handler is not None:
                        stream_log.LOGGER.removeHandler(self._log_handler)
                    if self.logger_provider is not None:
                        self.logger_provider.shutdown()
                finally:
                    _stop(self._server, self._thread, self._pid)


@dataclass
class MetricsServer:
    """A `/metrics` server started by `serve_metrics()`."""

    port: int
    registry: Any
    _server: Any = field(repr=False)
    _thread: threading.Thread | None = field(repr=False)
    _pid: int = field(default_factory=os.getpid, repr=False)

    def close(self) -> None:
        """Stop serving (in the process that started it; a forked child has nothing to stop)."""
        _stop(self._server, self._thread, self._pid)
        self._server = self._thread = None


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
    multiprocess_dir: str | os.PathLike[str] | None = None,
) -> Telemetry:
    """Tracer, meter and logger providers with OTLP/HTTP exporters and, on request, a Prometheus endpoint.

    - `service_name`: the resource's `service.name` (else `OTEL_SERVICE_NAME`, else the SDK's
      `unknown_service`); other resource attributes come from `OTEL_RESOURCE_ATTRIBUTES`. Unless
      set there, `service.instance.id` is a fresh UUID per call, so each worker pushing OTLP is a
      series of its own.
    - `otlp`: export spans (batched) and metrics (every `OTEL_METRIC_EXPORT_INTERVAL` ms, default
      60 s) over OTLP/HTTP to `OTEL_EXPORTER_OTLP_ENDPOINT` (default `http://localhost:4318`), and
      logs (batched): a logger provider (`Telemetry.logger_provider`) receives the `streamscope.streams`
      logger's records (a handler on that logger only, not on the root logger; the logger is set to
      INFO unless a level was set on it already) and the opt-in content event. Without `otlp` no
      logger provider is made.
    - `prometheus_port`: serve `/metrics` (prometheus-client's HTTP server) on this port; 0 picks
      a free one (read it back from `Telemetry.prometheus_port`). The page uses its own registry,
      so two `setup()` calls never expose each other's series. With `PROMETHEUS_MULTIPROC_DIR` it
      serves the sum of every process writing there, and a port a sibling worker already serves
      is not an error: one line is logged and this process serves nothing itself.
    - `prometheus_host`: the address to bind (loopback by default; `0.0.0.0` to be scraped from
      elsewhere).
    - `console`: also print spans and metrics to stdout (debugging).
    - `set_global`: make the providers the global ones (`opentelemetry.trace` / `.metrics` /
      `._logs`), so
      `AnthropicInstrumentor().instrument()` and other instrumentations find them without
      arguments. OpenTelemetry allows this once per process.
    - `metric_readers` / `span_processors`: more readers and processors to attach (an
      `InMemoryMetricReader` for a live table, say).
    - `multiprocess_dir`: the directory for prometheus-client's multiprocess mode when
      `PROMETHEUS_MULTIPROC_DIR` is not set (it is then set, for this process and its children).
      A directory that is missing or not writable is logged in one line, and Prometheus is off.
    """
    resource = _resource(service_name)
    readers: list[MetricReader] = list(metric_readers)
    server = thread = registry = None
    port: int | None = None
    directory = None
    asked = _multiprocess().requested(multiprocess_dir) if _multiprocess_asked(multiprocess_dir) else None
    if asked is not None:
        directory, registry = _use_multiprocess(asked, resource)
        if directory is not None and prometheus_port is not None:
            served = _serve(prometheus_port, prometheus_host, registry, directory)
            if served is not None:
                server, thread = served
                port = server.server_port
    elif prometheus_port is not None:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry, start_http_server

        from .export.exemplars import exemplar_reader

        registry = CollectorRegistry()
        try:
            reader = exemplar_reader(registry)
        except TypeError:  # exporter releases before the `registry` argument: the global registry, no exemplars
            from prometheus_client import REGISTRY

            registry = REGISTRY
            reader = PrometheusMetricReader()
        readers.append(reader)
        server, thread = start_http_server(prometheus_port, addr=prometheus_host, registry=registry)
        _started(server)
        port = server.server_port

    tracer_provider = TracerProvider(resource=resource)
    logger_provider = handler = None
    if otlp:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter()))
        logger_provider = LoggerProvider(resource=resource)
        logger_provider.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter()))
        handler = _bridge_stream_logs(logger_provider)
    if console:
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        tracer_provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
        readers.append(PeriodicExportingMetricReader(ConsoleMetricExporter()))
    for processor in span_processors:
        tracer_provider.add_span_processor(processor)

    meter_provider: MeterProvider | MultiprocessMeterProvider = MeterProvider(resource=resource, metric_readers=readers)
    if directory is not None:
        meter_provider = _multiprocess().MultiprocessMeterProvider(meter_provider, forward=bool(readers))
    if set_global:
        trace.set_tracer_provider(tracer_provider)
        metrics.set_meter_provider(meter_provider)
        if logger_provider is not None:
            _logs.set_logger_provider(logger_provider)
    return Telemetry(tracer_provider, meter_provider, prometheus_port=port, prometheus_registry=registry,
                     multiprocess_dir=directory, logger_provider=logger_provider, _log_handler=handler,
                     _server=server, _thread=thread)


def serve_metrics(port: int, host: str = "127.0.0.1", *, multiprocess_dir: str | os.PathLike[str] | None = None,
                  service_name: str | None = None) -> MetricsServer | None:
    """Serve the sum of every worker's metrics (`PROMETHEUS_MULTIPROC_DIR`) on `port` from a
    process that runs no streams itself: gunicorn's master (`when_ready`), the parent of a
    `multiprocessing` pool. 0 picks a free port (`MetricsServer.port`). A missing directory or a
    port in use is logged in one line and gives None; nothing raises."""
    mp = _multiprocess()
    directory = mp.requested(multiprocess_dir)
    if directory is None:
        logger.warning("streamscope: serve_metrics() needs %s (the directory every worker writes to); "
                       "set it before the server starts; no /metrics served", mp.ENV)
        return None
    if not mp.usable(directory, write=False):
        return None
    try:
        registry = mp.aggregate_registry(directory, _resource(service_name).attributes)
    except Exception:
        internal_error("serve_metrics")
        return None
    served = _serve(port, host, registry, directory)
    if served is None:
        return None
    return MetricsServer(served[0].server_port, registry, served[0], served[1])


def worker_exit(pid: int, *, multiprocess_dir: str | os.PathLike[str] | None = None) -> None:
    """Tell the multiprocess files that worker `pid` has exited (gunicorn's `child_exit`): its
    in-flight streams leave `streamscope_active_streams`; its counts stay in every counter.
    Never raises; without a directory it does nothing."""
    mp = _multiprocess()
    directory = mp.requested(multiprocess_dir)
    if directory is None:
        return
    try:
        mp.mark_dead(pid, directory)
    except Exception:
        internal_error("worker_exit")


# -- internals -------------------------------------------------------------------------------------


def _bridge_stream_logs(logger_provider: LoggerProvider) -> logging.Handler:
    """The `streamscope.streams` records into `logger_provider` (that logger only: the service's own
    logs are its business), with the logger at INFO unless a level was set on it."""
    handler = stream_log.OTelHandler(logger_provider)
    stream_log.LOGGER.addHandler(handler)
    if stream_log.LOGGER.level == logging.NOTSET:
        stream_log.LOGGER.setLevel(logging.INFO)
    return handler


def _multiprocess() -> Any:
    """The multiprocess exporter, imported when first needed (it imports prometheus-client)."""
    from .export import prometheus_multiprocess

    return prometheus_multiprocess


def _multiprocess_asked(explicit: object) -> bool:
    """Whether multiprocess mode is asked for (checked without importing prometheus-client)."""
    return explicit is not None or bool(os.environ.get(_ENV) or os.environ.get(_ENV.lower()))


def _resource(service_name: str | None) -> Resource:
    """The resource, with a fresh `service.instance.id` per call unless the user set one
    (`OTEL_RESOURCE_ATTRIBUTES`, a resource detector): each provider pushing OTLP must be a series
    of its own, or workers (and two `setup()`s in one process) overwrite each other's points.
    Recent SDKs give one id per process and a new one in a forked child; older ones none."""
    resource = Resource.create({SERVICE_NAME: service_name} if service_name else {})
    current = resource.attributes.get(SERVICE_INSTANCE_ID)
    if current is None or current == _sdk_default_instance_id():
        resource = resource.merge(Resource({SERVICE_INSTANCE_ID: str(uuid.uuid4())}))
    return resource


def _sdk_default_instance_id() -> object:
    """The id the SDK's own detector gives this process (not one the user chose), if it has one."""
    try:
        from opentelemetry.sdk.resources import ServiceInstanceIdResourceDetector

        return ServiceInstanceIdResourceDetector().detect().attributes.get(SERVICE_INSTANCE_ID)
    except Exception:  # an SDK without the detector
        return None


def _use_multiprocess(path: str, resource: Resource) -> tuple[str | None, Any]:
    """Switch this process to the multiprocess files in `path`; the directory and the registry
    of every process's sum, or (None, None) after one line (a bad directory) or an internal error."""
    mp = _multiprocess()
    try:
        if not mp.usable(path, write=True):
            return None, None
        mp.use_directory(path)
        return path, mp.aggregate_registry(path, resource.attributes)
    except Exception:
        internal_error("setup: multiprocess metrics")
        return None, None


def _serve(port: int, host: str, registry: Any, directory: str) -> tuple[Any, threading.Thread] | None:
    """Serve `registry` (the sum of every worker); a port already in use is one log line: a sibling
    worker serves the same sum there."""
    from prometheus_client import start_http_server

    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            logger.warning("streamscope: /metrics port %s:%s is in use (by a sibling worker, which serves the "
                           "sum of all workers from %s); this process serves none itself", host, port, directory)
        else:
            logger.warning("streamscope: cannot serve /metrics on %s:%s (%s); this process's metrics are still "
                           "written to %s for whichever process serves them", host, port, exc, directory)
        return None
    except Exception:
        internal_error("serving /metrics")
        return None
    _started(server)
    return server, thread


_servers: list[Any] = []
"""/metrics servers this process started (a forked child's copies are closed at the fork)."""


def _started(server: Any) -> None:
    _servers.append(server)


def _stop(server: Any, thread: threading.Thread | None, pid: int) -> None:
    """Stop a /metrics server, in the process that runs it: a forked child has no serving thread,
    and `shutdown()` there would wait for it forever."""
    if server is None or pid != os.getpid():
        return
    server.shutdown()
    server.server_close()
    if server in _servers:
        _servers.remove(server)
    if thread is not None:
        thread.join(timeout=5)


def _after_fork_in_child() -> None:
    """A forked child inherits the listening sockets of its parent's /metrics servers but not the
    threads that serve them: close its copies (the parent serves on), so a port is never held by
    a process that does not answer on it."""
    for server in _servers:
        try:
            server.socket.close()
        except OSError:
            pass
    _servers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
