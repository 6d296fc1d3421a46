"""Content capture for OpenAI calls (only when the user opted in): the prompt from the request
(chat `messages`; Responses `instructions` and `input`), the answer's text, reasoning and tool
arguments from the events, as the conventions' message parts."""

from __future__ import annotations

from typing import Any

from streamscope.adapters.stainless import capture
from streamscope.adapters.stainless.capture import Part, field, parts
from streamscope.core.calls import CallOpener
from streamscope.core.content import CapturedContent

from . import events
from .events import REASONING_KEYS, observe

TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}
"""Content part types whose text is kept, and the field it is in."""


def _part(kind: Any, part: Any) -> Part | None:
    """One OpenAI content part as a message part (None: a kind whose text is not kept)."""
    return {"type": "text", "content": field(part, TEXT_PARTS[kind])} if kind in TEXT_PARTS else None


def _message(item: Any) -> dict[str, Any]:
    """A chat message or a Responses input item, as one semconv message."""
    kind, role = field(item, "type"), field(item, "role")
    if kind in ("function_call", "custom_tool_call"):
        return {"role": "assistant", "parts": [{"type": "tool_call", "id": field(item, "call_id"),
                                                "name": field(item, "name"),
                                                "arguments": field(item, "arguments") or field(item, "input")}]}
    if kind in ("function_call_output", "custom_tool_call_output") or role == "tool":
        return {"role": "tool", "parts": [{"type": "tool_call_response",
                                           "id": field(item, "call_id") or field(item, "tool_call_id"),
                                           "response": field(item, "output") or field(item, "content")}]}
    if kind == "reasoning":
        summary = "".join(field(s, "text") or "" for s in field(item, "summary") or ())
        return {"role": "assistant", "parts": [{"type": "reasoning", "content": summary}]}
    found = parts(field(item, "content"), _part)
    for call in field(item, "tool_calls") or ():
        function = field(call, "function")
        found.append({"type": "tool_call", "id": field(call, "id"), "name": field(function, "name"),
                      "arguments": field(function, "arguments")})
    return {"role": role if isinstance(role, str) else "user", "parts": found}


def _tool(tool: Any) -> Part:
    """A tool of the request: Chat Completions' nests a function's or custom tool's fields under
    its type (`{"type": "function", "function": {...}}`), the Responses API's does not; a hosted
    tool (web search, file search...) is its type alone."""
    kind = field(tool, "type")
    nested = field(tool, kind) if isinstance(kind, str) and kind in ("function", "custom") else None
    fields = nested if nested is not None else tool
    if kind in ("function", "custom"):
        return capture.tool_definition(kind, field(fields, "name"), field(fields, "description"),
                                       field(fields, "parameters"))
    return capture.tool_definition(kind, field(tool, "name"))


def captured(pipeline: CallOpener, options: Any) -> CapturedContent:
    found = capture.body(options)
    messages = found.get("messages")
    if messages is None:  # the Responses API
        given = found.get("input")
        messages = [{"role": "user", "content": given}] if isinstance(given, str) else given
    instructions = found.get("instructions")
    return CapturedContent(
        mode=pipeline.capture,
        system_instructions=parts(instructions, _part) if instructions else None,
        input_messages=[_message(m) for m in messages] if isinstance(messages, (list, tuple)) else [],
        tool_definitions=capture.tool_definitions(found.get("tools"), _tool),
    )


def keep(content: CapturedContent, event: Any) -> None:
    """What of an event the span keeps: the answer's text, reasoning and tool arguments."""
    if type(event) is events.CHUNK:
        _keep_chunk(content, event)
        return
    kind = event.type
    if kind in ("response.output_text.delta", "response.refusal.delta"):
        content.text.append(event.delta)
    elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
        content.reasoning.append(event.delta)
    elif kind == "response.output_item.added" and event.item.type == "function_call":
        capture.tool_call(content, event.output_index, event.item.call_id, event.item.name)
    elif kind == "response.function_call_arguments.delta":
        capture.tool_input(content, event.output_index, event.delta)


def _keep_chunk(content: CapturedContent, chunk: Any) -> None:
    """The first choice's text, refusal, reasoning and tool-call fragments (one output message)."""
    for choice in chunk.choices:
        if choice.index != 0:
            continue
        delta = choice.delta
        for text in (delta.content, delta.refusal):
            if text:
                content.text.append(text)
        extra = delta.model_extra or {}
        content.reasoning.extend(extra[k] for k in REASONING_KEYS if isinstance(extra.get(k), str) and extra[k])
        for call in delta.tool_calls or ():
            kept = content.tool_calls.setdefault(call.index, {"type": "tool_call", "chunks": []})
            if call.id:
                kept["id"] = call.id
            if call.function is not None:
                if call.function.name:
                    kept["name"] = call.function.name
                if call.function.arguments:
                    kept["chunks"].append(call.function.arguments)


observe_capturing = capture.capturing(observe, keep)
"""`observe`, and the answer kept for the span (content capture on)."""
