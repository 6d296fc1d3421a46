"""Opt-in content capture, the semantic conventions' way. Off unless the user asks.

`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` (read when `instrument()` runs):
`SPAN_ONLY` or `true` put the prompt, the tools the request offers and the answer on the span as
`gen_ai.system_instructions`, `gen_ai.input.messages`, `gen_ai.tool.definitions` and
`gen_ai.output.messages` (JSON strings, the semconv message schema); `EVENT_ONLY` puts them in the
`gen_ai.client.inference.operation.details` event instead (an OpenTelemetry log record with that
event name and the span's trace context; the content is its body, in structured form);
`SPAN_AND_EVENT` does both; anything else (the default, `NO_CONTENT`, `false`) captures nothing
and allocates nothing per event.

`OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT` (`true` / `false`, any case), as opentelemetry-util-genai
reads it: whether the details event is emitted at all. Unset (or any other value), it follows the
capture mode: emitted under `EVENT_ONLY` and `SPAN_AND_EVENT`, not otherwise. Set, it wins: `true`
emits the event for every call, with the content in its body only where the capture mode puts
content in the event (else the event carries the call's attributes alone); `false` emits none,
and `EVENT_ONLY` then captures nothing.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
EMIT_ENV = "OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT"
EVENT_NAME = "gen_ai.client.inference.operation.details"
SYSTEM = "gen_ai.system_instructions"
INPUT = "gen_ai.input.messages"
OUTPUT = "gen_ai.output.messages"
TOOLS = "gen_ai.tool.definitions"
_log = logging.getLogger("streamscope")


@dataclass(frozen=True)
class CaptureMode:
    span: bool = False
    """Content on the span (JSON strings)."""
    event: bool = False
    """Content in the details event's body (structured)."""
    emit: bool = False
    """The details event is emitted at all (`OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT`)."""

    @property
    def on(self) -> bool:
        """Content is captured (somewhere it goes out)."""
        return self.span or self.event


def emit_event(content_in_event: bool, value: str | None = None) -> bool:
    """`OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT` as opentelemetry-util-genai reads it: `true` or
    `false` (any case, spaces stripped) wins; unset, empty or anything else (logged), the default:
    whether the capture mode puts content in the event."""
    raw = (os.environ.get(EMIT_ENV, "") if value is None else value).strip().lower()
    if raw == "true":
        return True
    if raw == "false":
        return False
    if raw:
        _log.warning("streamscope: %s=%r is neither true nor false; the capture mode decides.", EMIT_ENV, raw)
    return content_in_event


def capture_mode(value: str | None = None, emit: str | None = None) -> CaptureMode:
    raw = (os.environ.get(ENV, "") if value is None else value).strip().upper()
    span = raw in ("TRUE", "SPAN_ONLY", "SPAN_AND_EVENT")
    in_event = raw in ("EVENT_ONLY", "SPAN_AND_EVENT")
    emitted = emit_event(in_event, emit)
    return CaptureMode(span=span, event=in_event and emitted, emit=emitted)


def to_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@dataclass
class CapturedContent:
    """The prompt (already in semconv form) and the answer as it streams (only when capture is on)."""

    mode: CaptureMode
    system_instructions: list[dict[str, Any]] | None
    input_messages: list[dict[str, Any]]
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    tool_definitions: list[dict[str, Any]] | None = None
    """The tools the request offers the model, in the conventions' form (`{"type": "function",
    "name", "description", "parameters"}`, another kind of tool by its type and name)."""

    def attributes(self) -> dict[str, str]:
        """The span's form: each content attribute a JSON string."""
        return {key: to_json(value) for key, value in self.messages().items()}

    def messages(self) -> dict[str, Any]:
        """The event's form: each content attribute structured (lists and mappings). The output
        message carries no `finish_reason` (deprecated: `gen_ai.response.finish_reasons` says it)."""
        parts: list[dict[str, Any]] = []
        if self.reasoning:
            parts.append({"type": "reasoning", "content": "".join(self.reasoning)})
        if self.text:
            parts.append({"type": "text", "content": "".join(self.text)})
        for call in self.tool_calls.values():
            raw = "".join(call.get("chunks", []))
            try:
                arguments: Any = json.loads(raw) if raw else {}
            except ValueError:
                arguments = raw
            parts.append({**{k: v for k, v in call.items() if k != "chunks"}, "arguments": arguments})
        attrs: dict[str, Any] = {INPUT: self.input_messages, OUTPUT: [{"role": "assistant", "parts": parts}]}
        if self.system_instructions:
            attrs[SYSTEM] = self.system_instructions
        if self.tool_definitions:
            attrs[TOOLS] = self.tool_definitions
        return attrs
