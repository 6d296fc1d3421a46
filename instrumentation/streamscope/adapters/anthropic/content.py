"""Content capture for Anthropic calls (only when the user opted in): the prompt from the
request, the answer's text, thinking and tool input from the events, as the conventions' parts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamscope.core.calls import CallOpener
from streamscope.core.content import CapturedContent
from streamscope.core.recorder import StreamRecorder

from .events import observe


def _field(block: Any, name: str) -> Any:
    return block.get(name) if isinstance(block, Mapping) else getattr(block, name, None)


def parts(content: Any) -> list[dict[str, Any]]:
    """Anthropic content (a string or blocks) as semconv message parts."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    found: list[dict[str, Any]] = []
    for block in content if isinstance(content, (list, tuple)) else ():
        kind = _field(block, "type")
        if kind == "text":
            found.append({"type": "text", "content": _field(block, "text")})
        elif kind == "thinking":
            found.append({"type": "reasoning", "content": _field(block, "thinking")})
        elif kind == "tool_use":
            found.append({"type": "tool_call", "id": _field(block, "id"), "name": _field(block, "name"),
                          "arguments": _field(block, "input")})
        elif kind == "tool_result":
            found.append({"type": "tool_call_response", "id": _field(block, "tool_use_id"),
                          "response": _field(block, "content")})
        else:
            found.append({"type": kind if isinstance(kind, str) else "unknown"})
    return found


def captured(pipeline: CallOpener, options: Any) -> CapturedContent:
    body = options.json_data if isinstance(options.json_data, Mapping) else {}
    messages = body.get("messages") if isinstance(body.get("messages"), (list, tuple)) else []
    system = body.get("system")
    return CapturedContent(
        mode=pipeline.capture,
        system_instructions=parts(system) if system else None,
        input_messages=[{"role": _field(m, "role"), "parts": parts(_field(m, "content"))} for m in messages],
    )


def observe_capturing(rec: StreamRecorder, event: Any, t: float) -> None:
    """`observe`, and the answer's text, thinking and tool input kept for the span."""
    observe(rec, event, t)
    content = rec.content
    if content is None:
        return
    try:
        kind = event.type
        if kind == "content_block_delta":
            delta = event.delta
            if delta.type == "text_delta":
                content.text.append(delta.text)
            elif delta.type == "thinking_delta":
                content.reasoning.append(delta.thinking)
            elif delta.type == "input_json_delta":
                content.tool_calls.setdefault(event.index, {"type": "tool_call", "chunks": []})["chunks"].append(
                    delta.partial_json)
        elif kind == "content_block_start" and event.content_block.type == "tool_use":
            block = event.content_block
            content.tool_calls[event.index] = {"type": "tool_call", "id": block.id, "name": block.name, "chunks": []}
    except Exception:
        pass  # a field missing or of another type: nothing to keep
