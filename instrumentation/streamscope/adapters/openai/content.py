"""Content capture for OpenAI calls (only when the user opted in): the prompt from the request
(chat `messages`; Responses `instructions` and `input`), the answer's text, reasoning and tool
arguments from the events, as the conventions' message parts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from streamscope.core.calls import CallOpener
from streamscope.core.content import CapturedContent
from streamscope.core.recorder import StreamRecorder

from . import events
from .events import REASONING_KEYS, observe

TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text", "refusal": "refusal"}
"""Content part types whose text is kept, and the field it is in."""


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def parts(content: Any) -> list[dict[str, Any]]:
    """OpenAI message content (a string or content parts) as semconv message parts."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    found: list[dict[str, Any]] = []
    for part in content if isinstance(content, (list, tuple)) else ():
        kind = _field(part, "type")
        if kind in TEXT_PARTS:
            found.append({"type": "text", "content": _field(part, TEXT_PARTS[kind])})
        else:
            found.append({"type": kind if isinstance(kind, str) else "unknown"})
    return found


def _message(item: Any) -> dict[str, Any]:
    """A chat message or a Responses input item, as one semconv message."""
    kind, role = _field(item, "type"), _field(item, "role")
    if kind in ("function_call", "custom_tool_call"):
        return {"role": "assistant", "parts": [{"type": "tool_call", "id": _field(item, "call_id"),
                                                "name": _field(item, "name"),
                                                "arguments": _field(item, "arguments") or _field(item, "input")}]}
    if kind in ("function_call_output", "custom_tool_call_output") or role == "tool":
        return {"role": "tool", "parts": [{"type": "tool_call_response",
                                           "id": _field(item, "call_id") or _field(item, "tool_call_id"),
                                           "response": _field(item, "output") or _field(item, "content")}]}
    if kind == "reasoning":
        summary = "".join(_field(s, "text") or "" for s in _field(item, "summary") or ())
        return {"role": "assistant", "parts": [{"type": "reasoning", "content": summary}]}
    found = parts(_field(item, "content"))
    for call in _field(item, "tool_calls") or ():
        function = _field(call, "function")
        found.append({"type": "tool_call", "id": _field(call, "id"), "name": _field(function, "name"),
                      "arguments": _field(function, "arguments")})
    return {"role": role if isinstance(role, str) else "user", "parts": found}


def captured(pipeline: CallOpener, options: Any) -> CapturedContent:
    body = options.json_data if isinstance(options.json_data, Mapping) else {}
    messages = body.get("messages")
    if messages is None:  # the Responses API
        given = body.get("input")
        messages = [{"role": "user", "content": given}] if isinstance(given, str) else given
    instructions = body.get("instructions")
    return CapturedContent(
        mode=pipeline.capture,
        system_instructions=parts(instructions) if instructions else None,
        input_messages=[_message(m) for m in messages] if isinstance(messages, (list, tuple)) else [],
    )


def observe_capturing(rec: StreamRecorder, event: Any, t: float) -> None:
    """`observe`, and the answer's text, reasoning and tool arguments kept for the span."""
    observe(rec, event, t)
    content = rec.content
    if content is None:
        return
    try:
        if type(event) is events.CHUNK:
            _keep_chunk(content, event)
            return
        kind = event.type
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            content.text.append(event.delta)
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            content.reasoning.append(event.delta)
        elif kind == "response.output_item.added" and event.item.type == "function_call":
            content.tool_calls[event.output_index] = {"type": "tool_call", "id": event.item.call_id,
                                                      "name": event.item.name, "chunks": []}
        elif kind == "response.function_call_arguments.delta":
            content.tool_calls.setdefault(event.output_index, {"type": "tool_call", "chunks": []})["chunks"].append(
                event.delta)
    except Exception:
        pass  # a field missing or of another type: nothing to keep


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
