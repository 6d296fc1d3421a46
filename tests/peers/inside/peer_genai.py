"""OpenTelemetry's own GenAI instrumentation of Anthropic as the peer:
`opentelemetry-instrumentation-genai-anthropic`, with a tracer and meter provider of its own.

A pre-release only (1.3b0): pip takes a pre-release when a project has no final one, so no `--pre`
is needed (which would also let pre-releases of every dependency in). Its OpenAI sibling,
`opentelemetry-instrumentation-openai-v2`, cannot share this overlay: it needs
`opentelemetry.util.genai.instruments`, which `opentelemetry-util-genai` 1.2b0 removed, while this
one needs util-genai >= 1.3b0. It is the peer `genai_openai` (peer_genai_openai.py).
"""

from __future__ import annotations

from typing import Any

from capture import Capture

NAME = "genai"
REQUIREMENTS = ["opentelemetry-instrumentation-genai-anthropic"]
SDKS = ("anthropic",)

_capture = Capture()


def enable() -> None:
    from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor

    AnthropicInstrumentor().instrument(tracer_provider=_capture.tracer_provider, meter_provider=_capture.meter_provider)


def records() -> list[dict[str, Any]]:
    return _capture.records()


def reset() -> None:
    _capture.reset()
