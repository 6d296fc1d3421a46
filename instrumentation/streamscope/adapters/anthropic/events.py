"""What each Anthropic stream event means, in the recorder's (the GenAI conventions') terms.

`message_start` starts the response (usage there is a placeholder); thinking blocks are the
reasoning phase (a redacted one arrives whole, after the model thought); a server tool use
block's end starts a tool run and its result block ends it; `message_delta` carries the stop
reason, mapped here to the conventions' finish reasons, and the final usage (input counted with
the cache, as the conventions count it); `message_stop` is the final event.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from streamscope.adapters.stainless.parsing import int_or_none, str_or_none
from streamscope.adapters.stainless.spec import guarded
from streamscope.core import failures
from streamscope.core.recorder import StreamRecorder

from .ending import IN_BAND_STATUS

FINISH_REASON = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_call",
    "refusal": "content_filter",
}
"""Anthropic stop reasons → the conventions' finish reasons; others pass through as they are."""
THINKING = frozenset({"thinking", "redacted_thinking"})
SERVER_TOOL_USE = frozenset({"server_tool_use", "mcp_tool_use"})
"""Blocks whose end starts a server-side tool run; its result block (`*_tool_result`) ends it."""
DELTAS: frozenset[type] = frozenset()
"""The classes a content delta event arrives as (set by `load()`, at install): the shared fast
path finds a text delta among them by `type()` (a compare, where `.type` on a pydantic model is a
full attribute look-up) and reads its fields from the delta's `__dict__`."""


def load() -> None:
    """The SDK's delta classes, for the fast path's `type()` test."""
    global DELTAS
    from anthropic.types import RawContentBlockDeltaEvent
    from anthropic.types.beta import BetaRawContentBlockDeltaEvent

    DELTAS = frozenset({RawContentBlockDeltaEvent, BetaRawContentBlockDeltaEvent})


observe = guarded(sys.modules[__name__])
"""One parsed event on its way to the caller, delivered at `t`: `dispatch`, guarded (never raises)."""


def dispatch(rec: StreamRecorder, event: Any, t: float) -> None:
    """A dispatch on `.type` (never `isinstance`: unknown event types arrive as mis-typed models)."""
    try:
        kind = event.type
        if kind == "content_block_delta":
            delta = event.delta
            dk = delta.type
            if dk == "text_delta":
                rec.delta(t, len(delta.text))
            elif dk == "input_json_delta":
                rec.delta(t, len(delta.partial_json))
            elif dk == "thinking_delta":
                rec.delta(t, -1 - len(delta.thinking))  # unseen output: what a cut stream is estimated from
            else:
                rec.delta(t, -1)
            return
    except (AttributeError, TypeError):
        _odd(rec, t, event)  # missing or null fields: malformed input, not a streamscope failure
        return
    if kind == "content_block_start":
        _block_start(rec, t, event)
    elif kind == "content_block_stop":
        _block_stop(rec, t)
    elif kind == "message_delta":
        _message_delta(rec, t, event)
    elif kind == "message_start":
        _message_start(rec, t, event)
    elif kind == "message_stop":
        rec.completed_at(t)
    else:
        rec.other(t)


def _odd(rec: StreamRecorder, t: float, event: Any) -> None:
    """An event whose fields are missing or null: recorded for what it plainly is, or ignored."""
    if getattr(event, "type", None) != "content_block_delta":
        rec.other(t)
        return
    delta = getattr(event, "delta", None)
    kind = getattr(delta, "type", None)
    text = getattr(delta, "text" if kind == "text_delta" else "partial_json", None)
    visible = kind in ("text_delta", "input_json_delta")
    rec.delta(t, len(text) if visible and isinstance(text, str) else (0 if visible else -1))


def _usage(usage: Any, name: str) -> int | None:
    return int_or_none(getattr(usage, name, None)) if usage is not None else None


def _hour_writes(usage: Any) -> int | None:
    """The 1-hour cache writes (`cache_creation.ephemeral_1h_input_tokens`), priced apart from the
    5-minute ones; None where the usage does not split the writes."""
    split = getattr(usage, "cache_creation", None)
    if isinstance(split, Mapping):
        return int_or_none(split.get("ephemeral_1h_input_tokens"))
    return _usage(split, "ephemeral_1h_input_tokens")


def _message_start(rec: StreamRecorder, t: float, event: Any) -> None:
    message = getattr(event, "message", None)
    usage = getattr(message, "usage", None)
    rec.started(t, str_or_none(getattr(message, "id", None)), str_or_none(getattr(message, "model", None)))
    if usage is not None:  # a placeholder until message_delta's: never reported as usage
        fresh, read, write = (_usage(usage, n) for n in
                              ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
        total = None if fresh is None else fresh + (read or 0) + (write or 0)
        rec.usage(total, _usage(usage, "output_tokens"), None, read, write, final=False,
                  cache_write_1h=_hour_writes(usage))


def _message_delta(rec: StreamRecorder, t: float, event: Any) -> None:
    usage = getattr(event, "usage", None)
    rec.other(t)
    if usage is not None:
        fresh, read, write = (_usage(usage, n) for n in
                              ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"))
        # The final usage may repeat only some counts: the others stand as message_start gave them.
        if fresh is None and rec.input_tokens is not None and (read is not None or write is not None):
            fresh = rec.input_tokens - (rec.cache_read or 0) - (rec.cache_write or 0)
        total = None if fresh is None else (fresh + ((rec.cache_read if read is None else read) or 0)
                                            + ((rec.cache_write if write is None else write) or 0))
        details = getattr(usage, "output_tokens_details", None)
        reasoning = int_or_none(details.get("thinking_tokens")) if isinstance(details, Mapping) \
            else _usage(details, "thinking_tokens")
        searches = getattr(usage, "server_tool_use", None)
        searches = int_or_none(searches.get("web_search_requests")) if isinstance(searches, Mapping) \
            else _usage(searches, "web_search_requests")
        rec.usage(total, _usage(usage, "output_tokens"), reasoning, read, write, final=True,
                  cache_write_1h=_hour_writes(usage), web_searches=searches)
    stop = str_or_none(getattr(getattr(event, "delta", None), "stop_reason", None))
    if stop is not None:
        rec.stop(t, FINISH_REASON.get(stop, stop), stop, refusal=stop == "refusal", paused=stop == "pause_turn")


def _block_start(rec: StreamRecorder, t: float, event: Any) -> None:
    block = getattr(event, "content_block", None)
    kind = str_or_none(getattr(block, "type", None))
    rec.other(t)
    ident = name = None
    if kind in THINKING:
        # A thinking block opens when the model starts writing it; a redacted one arrives whole,
        # after the model already thought: its thinking began when the previous event arrived.
        rec.reasoning_started(t if kind == "thinking" else rec.held)
    elif kind is not None and kind.endswith(("tool_use", "_tool_result")):
        # Server tool runs: the use block's id and name, the result's tool_use_id.
        ident = str_or_none(getattr(block, "id", None)) or str_or_none(getattr(block, "tool_use_id", None))
        name = str_or_none(getattr(block, "name", None))
        if kind.endswith("_tool_result"):
            rec.tool_run_ended(t, ident)
    rec.item_kind, rec.item_id, rec.item_name = kind, ident, name


def _block_stop(rec: StreamRecorder, t: float) -> None:
    kind = rec.item_kind
    if kind in THINKING:
        rec.reasoning_ended(t)  # the thinking that precedes the answer closed
    elif kind in SERVER_TOOL_USE:
        rec.tool_run_started(t, rec.item_id, rec.item_name)
    else:
        rec.other(t)
    rec.item_kind = None


def sse(rec: StreamRecorder, name: str | None, data: str, t: float) -> Any:
    """One server-sent event of a body the caller reads as bytes, as the SDK's `Stream` would take
    it: a keep-alive is counted, an unnamed or empty event skipped, an `error` event ends the
    record as the in-band error it is (the SDK would raise it); any other event's data is returned,
    to be parsed into the SDK's model and observed. None where nothing is left to observe."""
    if name == "ping":
        rec.pinged()
        return None
    if name is None or not data:
        return None
    body = json.loads(data)
    if name == "error":
        error = body.get("error") if isinstance(body, dict) else None
        kind = str_or_none(error.get("type")) if isinstance(error, dict) else None
        rec.failed(t, kind or "error", failures.in_band(IN_BAND_STATUS.get(kind) if kind else None).code)
        return None
    return body
