"""What each OpenAI stream event means, in the recorder's (the GenAI conventions') terms.

One `observe` for both APIs. Chat Completions: every chunk is a `ChatCompletionChunk`; text,
refusal and tool-call arguments arrive in `choices[i].delta`, the finish reason in a chunk of its
own (the provider's final word: [DONE], which the SDK swallows, carries nothing), usage in a last
chunk with no choices (only with `stream_options.include_usage`). Reasoning is not streamed,
except by compatible servers that put it in `delta.reasoning_content` (or `reasoning`).
Responses API: named events; a reasoning item brackets the reasoning phase (summary deltas are
reasoning the user does not see as the answer), hosted tool items bracket a server-side tool run,
and the terminal event carries the status and usage. `response.failed` and the documented
`error` event are yielded, not raised: they end the record here (`failed`), as the error they are.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

from streamscope.adapters.stainless.parsing import int_or_none, str_or_none
from streamscope.adapters.stainless.spec import guarded
from streamscope.core.recorder import StreamRecorder

from .ending import CLIENT_TOOLS, in_band_failure

RESPONSE_SERVICE_TIER = "openai.response.service_tier"
SYSTEM_FINGERPRINT = "openai.response.system_fingerprint"
"""The conventions' names for what the response says of the service tier used and the backend."""
CHAT_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_call", "function_call": "tool_call",
               "content_filter": "content_filter"}
"""Chat Completions finish reasons → the conventions' finish reasons; others pass through."""
INCOMPLETE_FINISH = {"max_output_tokens": "length", "content_filter": "content_filter"}
"""`response.incomplete`'s `incomplete_details.reason` → the conventions' finish reasons."""
REASONING_KEYS = ("reasoning_content", "reasoning")
"""Where compatible servers (DeepSeek, vLLM, ...) stream reasoning in a chat delta's extra fields."""
SERVER_TOOLS = frozenset({"web_search_call", "file_search_call", "code_interpreter_call",
                          "image_generation_call", "mcp_call"})
"""Output items the API runs itself: from `output_item.added` to `.done` is a server tool run."""
CHUNK: type | None = None
TEXT_DELTA: type | None = None
"""The classes of a chat chunk and a Responses text delta (set by `load()`, at install)."""
_fields: Callable[[Any], dict[str, Any]] = vars
"""A pydantic model's field dict, read through `BaseModel`'s own `__dict__` descriptor (set by
`load()`), for the chunk's delta: an attribute read on these models goes through the model's
`__getattr__` hook, whose type look-ups for a choice and then its delta (two classes made one
after the other) collide in CPython 3.11's attribute cache in some process layouts, about 2,000
instructions more per chunk; the descriptor looks nothing up. (For the chunk and the choice the
plain read is cheaper, and measured to collide with nothing.)"""


def load() -> None:
    """The SDK's classes, for the fast path's `type()` test."""
    global CHUNK, TEXT_DELTA, _fields
    from openai.types.chat import ChatCompletionChunk
    from openai.types.responses import ResponseTextDeltaEvent
    from pydantic import BaseModel

    CHUNK, TEXT_DELTA = ChatCompletionChunk, ResponseTextDeltaEvent
    _fields = BaseModel.__dict__["__dict__"].__get__


def text_length(event: Any) -> int:
    """The fast path's test: the visible characters of a plain text delta (a chat chunk whose only
    choice carries content and nothing else; `response.output_text.delta`), found by `type()` and
    the models' `__dict__` (a pydantic attribute read is a full look-up); -1 for anything else."""
    cls = type(event)
    if cls is CHUNK:
        d = event.__dict__
        choices = d["choices"]
        if len(choices) == 1 and d["usage"] is None:
            choice = choices[0].__dict__
            delta = _fields(choice["delta"])
            content = delta["content"]
            if content and choice["finish_reason"] is None and delta["refusal"] is None and delta["tool_calls"] is None:
                return len(content)
    elif cls is TEXT_DELTA:
        d = event.__dict__
        if d["type"] == "response.output_text.delta":
            return len(d["delta"])
    return -1


observe = guarded(sys.modules[__name__])
"""One parsed event on its way to the caller, delivered at `t`: `dispatch`, guarded (never raises)."""


def dispatch(rec: StreamRecorder, event: Any, t: float) -> None:
    """By class for a chat chunk, else on `.type` (never `isinstance`: the SDK parses an unknown
    Responses event into whichever model fits)."""
    try:
        if type(event) is CHUNK:
            _chunk(rec, t, event)
            return
        handler = RESPONSES.get(getattr(event, "type", None))
        if handler is None:
            rec.other(t)
        else:
            handler(rec, t, event)
    except (AttributeError, TypeError):
        rec.other(t)  # missing or null fields: malformed input, not a streamscope failure


# -- Chat Completions ----------------------------------------------------------------------------


def _chunk(rec: StreamRecorder, t: float, chunk: Any) -> None:
    if rec.t_first_chunk is None:  # every chunk repeats the response's id, model, tier and fingerprint
        rec.started(t, str_or_none(chunk.id), str_or_none(chunk.model))
        rec.response_attribute(RESPONSE_SERVICE_TIER, str_or_none(chunk.service_tier))
        rec.response_attribute(SYSTEM_FINGERPRINT, str_or_none(chunk.system_fingerprint))
    if chunk.usage is not None:
        _chat_usage(rec, chunk.usage)
    seen = False
    for choice in chunk.choices or ():
        if choice.delta is not None and _chat_delta(rec, t, choice.delta):
            seen = True
        finish = str_or_none(choice.finish_reason)
        if finish is not None:
            rec.stop(t, CHAT_FINISH.get(finish, finish), finish)
            rec.completed_at(t)  # [DONE] follows, which the SDK never yields
            seen = True
    if not seen:
        rec.other(t)  # the role chunk, the usage chunk


def _chat_delta(rec: StreamRecorder, t: float, delta: Any) -> bool:
    """The delta's parts, each as the content it is; whether it carried any."""
    found = False
    extra = delta.model_extra or {}
    reasoning = sum(len(v) for k in REASONING_KEYS if isinstance(v := extra.get(k), str))
    if reasoning:
        rec.reasoning_started(t)
        rec.delta(t, -1 - reasoning)  # unseen output: what a cut stream is estimated from
        found = True
    for visible, refusal in ((delta.content, False), (delta.refusal, True)):
        if visible and isinstance(visible, str):
            _answering(rec, t)
            rec.delta(t, len(visible))
            if refusal:
                rec.stop(t, None, None, refusal=True)
            found = True
    if delta.tool_calls:
        _answering(rec, t)
        rec.delta(t, sum(len(c.function.arguments or "") for c in delta.tool_calls if c.function is not None))
        found = True
    return found


def _answering(rec: StreamRecorder, t: float) -> None:
    """The first output after streamed reasoning: the reasoning phase ended."""
    if rec.thinking_start is not None and rec.thinking_end is None:
        rec.reasoning_ended(t)


def _chat_usage(rec: StreamRecorder, usage: Any) -> None:
    """`prompt_tokens` already counts the cached ones (the conventions' input), so nothing is added."""
    cached = getattr(usage.prompt_tokens_details, "cached_tokens", None)
    reasoning = getattr(usage.completion_tokens_details, "reasoning_tokens", None)
    rec.usage(int_or_none(usage.prompt_tokens), int_or_none(usage.completion_tokens), int_or_none(reasoning),
              int_or_none(cached), None, final=True)


# -- Responses API -------------------------------------------------------------------------------


def _created(rec: StreamRecorder, t: float, event: Any) -> None:
    response = event.response
    rec.started(t, str_or_none(response.id), str_or_none(response.model))


def _item_added(rec: StreamRecorder, t: float, event: Any) -> None:
    item = event.item
    kind = str_or_none(item.type)
    rec.other(t)
    if kind == "reasoning":
        rec.reasoning_started(t)
    elif kind in SERVER_TOOLS:
        rec.tool_run_started(t, str_or_none(item.id), kind)


def _item_done(rec: StreamRecorder, t: float, event: Any) -> None:
    item = event.item
    kind = str_or_none(item.type)
    if kind == "reasoning":
        rec.reasoning_ended(t)  # reasoning that precedes the answer closed
    elif kind in SERVER_TOOLS:
        rec.tool_run_ended(t, str_or_none(item.id))
    else:
        rec.other(t)


def _reasoning_delta(rec: StreamRecorder, t: float, event: Any) -> None:
    rec.reasoning_started(t)
    text = event.delta
    rec.delta(t, -1 - len(text) if isinstance(text, str) else -1)


def _visible_delta(rec: StreamRecorder, t: float, event: Any) -> None:
    rec.delta(t, len(event.delta))


def _refusal_delta(rec: StreamRecorder, t: float, event: Any) -> None:
    rec.delta(t, len(event.delta))
    rec.stop(t, None, None, refusal=True)


def _terminal(rec: StreamRecorder, t: float, event: Any) -> None:
    """`response.completed` or `response.incomplete`: the final event, its usage and why it stopped."""
    response = event.response
    _responses_usage(rec, response.usage)
    # The tier used: the final response says it (`response.created` echoes the request's).
    rec.response_attribute(RESPONSE_SERVICE_TIER, str_or_none(response.service_tier))
    if event.type == "response.completed":
        calls = any(getattr(item, "type", None) in CLIENT_TOOLS for item in response.output or ())
        finish, stop = ("tool_call" if calls else "stop"), "completed"
    else:
        reason = str_or_none(getattr(response.incomplete_details, "reason", None)) or "incomplete"
        finish, stop = INCOMPLETE_FINISH.get(reason, reason), reason
    rec.stop(t, finish, stop)
    rec.completed_at(t)


def _failed(rec: StreamRecorder, t: float, event: Any) -> None:
    """`response.failed`: the provider's error, as a raised in-band error would end the record."""
    response = event.response
    _responses_usage(rec, response.usage)
    rec.response_attribute(RESPONSE_SERVICE_TIER, str_or_none(response.service_tier))
    code = str_or_none(getattr(response.error, "code", None))
    rec.failed(t, code or "response.failed", in_band_failure(code).code)


def _error(rec: StreamRecorder, t: float, event: Any) -> None:
    """The documented `error` event (flat fields), which the SDK yields rather than raises."""
    code = str_or_none(getattr(event, "code", None))
    rec.failed(t, code or "error", in_band_failure(code).code)


def _named_apart(rec: StreamRecorder, t: float, event: Any) -> None:
    """An event with no `type`: the openai 1.x line yields an SSE event whose name is not
    `response.*` as `{"data": ..., "event": name}` in a model's extras, its own fields empty; the
    documented `error` event reaches the caller that way there. Anything else is `other`."""
    extra = getattr(event, "__pydantic_extra__", None)
    data = extra.get("data") if isinstance(extra, dict) and extra.get("event") == "error" else None
    if isinstance(data, dict):
        _error(rec, t, _Fields(data))
    else:
        rec.other(t)


class _Fields:
    """A mapping's keys read as attributes (the wrapped `error` event's fields)."""

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        return self._data.get(name)


def _responses_usage(rec: StreamRecorder, usage: Any) -> None:
    """`input_tokens` already counts the cached ones (the conventions' input), so nothing is added.
    The web searches billed per call are the response's `web_search_call` items, not in its usage."""
    if usage is None:
        return
    details, out = usage.input_tokens_details, usage.output_tokens_details
    rec.usage(int_or_none(usage.input_tokens), int_or_none(usage.output_tokens),
              int_or_none(getattr(out, "reasoning_tokens", None)), int_or_none(getattr(details, "cached_tokens", None)),
              int_or_none(getattr(details, "cache_write_tokens", None)), final=True,
              web_searches=sum(1 for name, _, _ in rec.tool_runs or () if name == "web_search_call") or None)


RESPONSES: dict[Any, Callable[[StreamRecorder, float, Any], None]] = {
    "response.created": _created,
    "response.output_item.added": _item_added,
    "response.output_item.done": _item_done,
    "response.reasoning_summary_text.delta": _reasoning_delta,
    "response.reasoning_text.delta": _reasoning_delta,
    "response.output_text.delta": _visible_delta,
    "response.function_call_arguments.delta": _visible_delta,
    "response.custom_tool_call_input.delta": _visible_delta,
    "response.refusal.delta": _refusal_delta,
    "response.completed": _terminal,
    "response.incomplete": _terminal,
    "response.failed": _failed,
    "error": _error,
    None: _named_apart,
}
"""Responses event types the recorder hears of; any other is `other` (delivered, never content)."""


def sse(rec: StreamRecorder, name: str | None, data: str, t: float) -> Any:
    """One server-sent event of a body the caller reads as bytes, as the SDK's `Stream` would take
    it: `[DONE]` carries nothing; a chat error chunk (`{"error": ...}`) ends the record as the
    in-band error the SDK would raise; a Responses event (named `response.*`, or `error`) and a
    chat chunk are returned as they are, any other named event as the SDK wraps it (`{"data",
    "event"}`), to be parsed into the SDK's model and observed. None where nothing is left."""
    if data.startswith("[DONE]"):
        return None
    body = json.loads(data)
    if name is None and isinstance(body, Mapping) and body.get("error"):
        error = body["error"]
        code = str_or_none(error.get("code")) if isinstance(error, Mapping) else None
        kind = str_or_none(error.get("type")) if isinstance(error, Mapping) else None
        rec.failed(t, code or kind or "openai.APIError", in_band_failure(code, kind).code)
        return None
    if name is None or name == "error" or name.startswith("response."):
        return body
    return {"data": body, "event": name}
