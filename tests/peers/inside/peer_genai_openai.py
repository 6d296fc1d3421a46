"""OpenTelemetry's own GenAI instrumentation of OpenAI as the peer: `opentelemetry-instrumentation-openai-v2`,
with a tracer and meter provider of its own.

Two pins, both the peer's packaging, each documented where it bites:
* `opentelemetry-util-genai==1.1b0`: openai-v2 (2.4b0, the newest) imports
  `opentelemetry.util.genai.instruments`, gone from util-genai 1.2b0 on, yet it asks only for
  util-genai >= 0.4b0, so pip takes 1.3b0 and `enable()` fails with ModuleNotFoundError. 1.1b0 is the
  newest that has it (an exact pre-release version: pip needs no `--pre` for that).
* `httpx`: openai-v2's `utils` imports `httpx.URL`, which the openai SDK used to bring and no longer
  does (openai 3.x is on httpx2): `ModuleNotFoundError: No module named 'httpx'` without it.
"""

from __future__ import annotations

from typing import Any

from capture import Capture

NAME = "genai_openai"
REQUIREMENTS = ["opentelemetry-instrumentation-openai-v2", "opentelemetry-util-genai==1.1b0", "httpx"]
SDKS = ("openai",)

_capture = Capture()


def enable() -> None:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    OpenAIInstrumentor().instrument(tracer_provider=_capture.tracer_provider, meter_provider=_capture.meter_provider)


def records() -> list[dict[str, Any]]:
    return _capture.records()


def reset() -> None:
    _capture.reset()
