"""A peer's own in-memory capture: a TracerProvider and a MeterProvider of its own, never streamscope's.

The drivers of OpenTelemetry-based peers hand these to the peer, so the peer's spans and
streamscope's are counted apart even when both are on in one process (and the global providers,
which zero-code streamscope uses, stay out of the peer's reach).
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class Capture:
    """The peer's spans, as `records()` reports them: name and status, sorted (timings and ids differ by run)."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.processor = SimpleSpanProcessor(self.exporter)
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(self.processor)
        self.meter_provider = MeterProvider()

    def records(self) -> list[dict[str, Any]]:
        """The peer's spans: streamscope's are left out, which reach this exporter too where the peer
        owns the global provider and streamscope records through it (zero-code beside Logfire)."""
        return sorted(({"name": span.name, "status": span.status.status_code.name.lower()}
                       for span in self.exporter.get_finished_spans()
                       if span.instrumentation_scope.name != "streamscope"),
                      key=lambda record: (record["name"], record["status"]))

    def reset(self) -> None:
        self.exporter.clear()
