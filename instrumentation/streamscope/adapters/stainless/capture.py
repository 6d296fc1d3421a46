"""Content capture, what every Stainless SDK's adapter reads alike (only when the user opted in).

The request body is the options' `json_data`; its messages and content blocks are dicts as the
caller wrote them, or the SDK's models: `field()` reads either. An adapter says what each kind of
block of its API is, as a message part of the GenAI conventions (`parts()`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from streamscope.core.content import CapturedContent
from streamscope.core.recorder import StreamRecorder

from .spec import Observe

Part = dict[str, Any]


def field(obj: Any, name: str) -> Any:
    """A field of a dict the caller wrote, or of the SDK's model."""
    return obj.get(name) if isinstance(obj, Mapping) else getattr(obj, name, None)


def body(options: Any) -> Mapping[str, Any]:
    """The request's JSON body (empty when the options carry none)."""
    found = options.json_data
    return found if isinstance(found, Mapping) else {}


def parts(content: Any, part: Callable[[Any, Any], Part | None]) -> list[Part]:
    """Message content (a string, or a sequence of blocks) as message parts: `part(kind, block)`
    for a block of a kind the API knows (None: any other kind, kept as its type alone)."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    found: list[Part] = []
    for block in content if isinstance(content, (list, tuple)) else ():
        kind = field(block, "type")
        found.append(part(kind, block) or {"type": kind if isinstance(kind, str) else "unknown"})
    return found


def tool_definition(kind: Any, name: Any, description: Any = None, parameters: Any = None) -> Part:
    """One tool the request offers, as the conventions' `gen_ai.tool.definitions` item: its type
    (`function` for the caller's own tools), name, description and parameters' schema, each where
    the request gives it."""
    found: Part = {"type": kind if isinstance(kind, str) else "function"}
    for key, value in (("name", name), ("description", description), ("parameters", parameters)):
        if value is not None:
            found[key] = value
    return found


def tool_definitions(tools: Any, definition: Callable[[Any], Part]) -> list[Part] | None:
    """The request's `tools` as `gen_ai.tool.definitions` (None: the request offers none)."""
    if not isinstance(tools, (list, tuple)) or not tools:
        return None
    return [definition(tool) for tool in tools]


def capturing(observe: Observe, keep: Callable[[CapturedContent, Any], None]) -> Observe:
    """`observe`, and then `keep` for a stream that captures its answer: what of `event` it keeps
    for the span. A field missing or of another type in the event is nothing to keep."""

    def observe_capturing(rec: StreamRecorder, event: Any, t: float) -> None:
        observe(rec, event, t)
        content = rec.content
        if content is not None:
            try:
                keep(content, event)
            except Exception:
                pass  # a field missing or of another type: nothing to keep

    return observe_capturing


def tool_input(content: CapturedContent, index: Any, chunk: Any) -> None:
    """A fragment of the input of the tool call at `index` (opened here if its start was not seen)."""
    content.tool_calls.setdefault(index, {"type": "tool_call", "chunks": []})["chunks"].append(chunk)


def tool_call(content: CapturedContent, index: Any, call_id: Any, name: Any) -> None:
    """A tool call at `index` starts: its id and name, its input to come in fragments."""
    content.tool_calls[index] = {"type": "tool_call", "id": call_id, "name": name, "chunks": []}
