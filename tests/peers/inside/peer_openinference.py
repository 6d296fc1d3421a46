"""OpenInference (Arize Phoenix) as the peer: `openinference-instrumentation-anthropic` / `-openai`,
with a tracer provider of its own (they patch the SDKs' `request`/resources through wrapt)."""

from __future__ import annotations

from typing import Any

from capture import Capture

NAME = "openinference"
REQUIREMENTS = ["openinference-instrumentation-anthropic", "openinference-instrumentation-openai"]
SDKS = ("anthropic", "openai")

_capture = Capture()


def enable() -> None:
    from openinference.instrumentation.anthropic import AnthropicInstrumentor
    from openinference.instrumentation.openai import OpenAIInstrumentor

    for instrumentor in (AnthropicInstrumentor(), OpenAIInstrumentor()):
        instrumentor.instrument(tracer_provider=_capture.tracer_provider)


def records() -> list[dict[str, Any]]:
    return _capture.records()


def reset() -> None:
    _capture.reset()
