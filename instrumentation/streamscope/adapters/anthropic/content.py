"""Content capture for Anthropic calls (only when the user opted in): the prompt from the
request, the answer's text, thinking and tool input from the events, as the conventions' parts."""

from __future__ import annotations

from typing import Any

from streamscope.adapters.stainless import capture
from streamscope.adapters.stainless.capture import Part, field, parts
from streamscope.core.calls import CallOpener
from streamscope.core.content import CapturedContent

from .events import observe


def _part(kind: Any, block: Any) -> Part | None:
    """One Anthropic content block as a message part (None: a kind without one)."""
    if kind == "text":
        return {"type": "text", "content": field(block, "text")}
    if kind == "thinking":
        return {"type": "reasoning", "content": field(block, "thinking")}
    if kind == "tool_use":
        return {"type": "tool_call", "id": field(block, "id"), "name": field(block, "name"),
                "arguments": field(block, "input")}
    if kind == "tool_result":
        return {"type": "tool_call_response", "id": field(block, "tool_use_id"), "response": field(block, "content")}
    return None


def _tool(tool: Any) -> Part:
    """A tool of the request: the caller's own (a JSON schema for its input) a `function`; a server
    tool (web search, code execution...) by its versioned type and name."""
    kind = field(tool, "type")
    schema = field(tool, "input_schema")
    if schema is not None or kind in (None, "custom"):
        return capture.tool_definition("function", field(tool, "name"), field(tool, "description"), schema)
    return capture.tool_definition(kind, field(tool, "name"))


def captured(pipeline: CallOpener, options: Any) -> CapturedContent:
    found = capture.body(options)
    messages = found.get("messages")
    messages = messages if isinstance(messages, (list, tuple)) else []
    system = found.get("system")
    return CapturedContent(
        mode=pipeline.capture,
        system_instructions=parts(system, _part) if system else None,
        input_messages=[{"role": field(m, "role"), "parts": parts(field(m, "content"), _part)} for m in messages],
        tool_definitions=capture.tool_definitions(found.get("tools"), _tool),
    )


def keep(content: CapturedContent, event: Any) -> None:
    """What of an event the span keeps: the answer's text, thinking and tool input."""
    kind = event.type
    if kind == "content_block_delta":
        delta = event.delta
        if delta.type == "text_delta":
            content.text.append(delta.text)
        elif delta.type == "thinking_delta":
            content.reasoning.append(delta.thinking)
        elif delta.type == "input_json_delta":
            capture.tool_input(content, event.index, delta.partial_json)
    elif kind == "content_block_start" and event.content_block.type == "tool_use":
        block = event.content_block
        capture.tool_call(content, event.index, block.id, block.name)


observe_capturing = capture.capturing(observe, keep)
"""`observe`, and the answer kept for the span (content capture on)."""
