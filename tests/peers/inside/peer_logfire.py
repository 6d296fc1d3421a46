"""Pydantic Logfire as the peer: `logfire.configure()` (no network, no console) and its
`instrument_anthropic()` / `instrument_openai()`, its spans into an in-memory exporter of its own.

Logfire replaces `request` on the SDK client classes themselves (not the resources), and makes its
own provider the global one when none is set yet: the two ways it can meet streamscope.
"""

from __future__ import annotations

from typing import Any

from capture import Capture

NAME = "logfire"
REQUIREMENTS = ["logfire"]
SDKS = ("anthropic", "openai")

_capture = Capture()


def enable() -> None:
    import logfire

    logfire.configure(send_to_logfire=False, console=False, additional_span_processors=[_capture.processor])
    logfire.instrument_anthropic()
    logfire.instrument_openai()


def records() -> list[dict[str, Any]]:
    return _capture.records()


def reset() -> None:
    _capture.reset()
