"""Opt-in content capture, the semantic conventions' way. Off unless the user asks.

`OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` (read when `instrument()` runs):
`SPAN_ONLY` or `true` put the prompt and the answer on the span as `gen_ai.system_instructions`,
`gen_ai.input.messages` and `gen_ai.output.messages` (JSON strings, the semconv message schema);
`EVENT_ONLY` puts them in a `gen_ai.client.inference.operation.details` event instead (an
OpenTelemetry log record with that event name and the span's trace context, the same attributes
in structured form); `SPAN_AND_EVENT` does both; anything else (the default, `NO_CONTENT`,
`false`) captures nothing and allocates nothing per event.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any

ENV = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
EVENT_NAME = "gen_ai.client.inference.operation.details"
SYSTEM = "gen_ai.system_instructions"
INPUT = "gen_ai.input.messages"
OUTPUT = "gen_ai.output.messages"


@dataclass(frozen=True)
class CaptureMode:
    span: bool = False
    event: bool = False

    @property
    def on(self) -> bool:
        return self.span or self.event


def capture_mode(value: str | None = None) -> CaptureMode:
    raw = (os.environ.get(ENV, "") if value is None else value).strip().upper()
    if raw in ("TRUE", "SPAN_ONLY"):
        return CaptureMode(span=True)
    if raw == "EVENT_ONLY":
        return CaptureMode(event=True)
    if raw == "SPAN_AND_EVENT":
        return CaptureMode(span=True, event=True)
    return CaptureMode()


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

    def attributes(self, finish_reason: str) -> dict[str, str]:
        """The span's form: each message attribute a JSON string."""
        return {key: to_json(value) for key, value in self.messages(finish_reason).items()}

    def messages(self, finish_reason: str) -> dict[str, Any]:
        """The event's form: each message attribute structured (lists and mappings)."""
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
        attrs: dict[str, Any] = {INPUT: self.input_messages,
                                 OUTPUT: [{"role": "assistant", "parts": parts, "finish_reason": finish_reason}]}
        if self.system_instructions:
            attrs[SYSTEM] = self.system_instructions
        return attrs
