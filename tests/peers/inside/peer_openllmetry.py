"""OpenLLMetry (Traceloop) as the peer: `opentelemetry-instrumentation-anthropic` / `-openai`, each
instrumentor given a tracer and meter provider of its own (wrapt wrappers on the SDKs' resources)."""

from __future__ import annotations

from typing import Any

from capture import Capture

NAME = "openllmetry"
REQUIREMENTS = ["opentelemetry-instrumentation-anthropic", "opentelemetry-instrumentation-openai"]
SDKS = ("anthropic", "openai")

_capture = Capture()


def enable() -> None:
    from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    for instrumentor in (AnthropicInstrumentor(), OpenAIInstrumentor()):
        instrumentor.instrument(tracer_provider=_capture.tracer_provider, meter_provider=_capture.meter_provider)


def records() -> list[dict[str, Any]]:
    return _capture.records()


def reset() -> None:
    _capture.reset()
