"""Anthropic's Messages streams as timed scripts: ``message_stream()`` and its block specs.

The builder writes the API's events in the API's order (``message_start``, the content blocks
with their deltas, ``message_delta``, ``message_stop``), with the JSON shapes of the API and of its
reference ``.sse`` files, from the Step types of steps.py and the content specs of content.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from .content import TextSpec, ToolUseSpec, opened_with_first_delta, timed, timed_fragments
from .steps import Event, Ping, Step, pings, with_delay

DEFAULT_SIGNATURE = "EqQBCgIYAhIMsimulatedsignatureGgxzaW11bGF0b3I="


@dataclass(frozen=True)
class ThinkingSpec:
    """A thinking block: first delta ``first_delay`` s after the block starts, the rest spread
    evenly until ``duration`` s, when the ``signature_delta`` closes it.

    ``display="omitted"`` sends one empty ``thinking_delta`` then the signature, as the API does
    when thinking display is omitted. ``display="redacted"`` sends a ``redacted_thinking`` block
    instead, as the API does when safety systems redact the thinking: nothing for ``duration`` s
    (the model thinks), then the block opens with its encrypted ``data`` and closes at once.
    """

    chunks: Sequence[str] = (
        "The user wants a short answer.",
        " Let me check the facts",
        " and keep it brief.",
    )
    duration: float = 0.5
    first_delay: float = 0.1
    display: Literal["summarized", "omitted", "redacted"] = "summarized"
    signature: str = DEFAULT_SIGNATURE



@dataclass(frozen=True)
class ServerToolSpec:
    """A server-side tool run (web search, web fetch, code execution, ...), as the API streams it:
    a ``server_tool_use`` block whose input arrives as ``input_json_delta`` chunks, then the run
    (``run`` s on the server, with a ping every ``ping_every`` s, or silence if None; with
    ``pings_for``, pings only for that long and then silence: a run that hangs), then the result
    block (``result_type``, its content inline, no deltas)."""

    name: str = "web_search"
    chunks: Sequence[str] = ("", '{"query": "how do', ' streams fail"}')
    run: float = 1.0
    ping_every: float | None = 0.2
    pings_for: float | None = None
    result_type: str = "web_search_tool_result"
    interval: float = 0.02
    first_delay: float | None = None
    id: str | None = None


BlockSpec: TypeAlias = TextSpec | ToolUseSpec | ServerToolSpec


def error_event(error_type: str = "overloaded_error", message: str = "Overloaded", delay: float = 0.0) -> Event:
    """An in-band ``error`` event, as the API sends when it fails after the 200 status."""
    return Event("error", {"type": "error", "error": {"type": error_type, "message": message}}, delay)


def message_stream(
    *,
    model: str | None = None,
    thinking: ThinkingSpec | None = None,
    blocks: Sequence[BlockSpec] = (),
    stop_reason: str = "end_turn",
    stop_sequence: str | None = None,
    stop_details: dict[str, Any] | None = None,
    output_tokens: int | None = None,
    thinking_tokens: int | None = None,
    input_tokens: int = 25,
    cache_read_input_tokens: int | None = None,
    cache_creation_input_tokens: int | None = None,
    cache_creation_1h_input_tokens: int | None = None,
    web_search_requests: int | None = None,
    include_usage: bool = True,
    first_event_delay: float = 0.0,
    ping_every: float | None = None,
    final: bool | Literal["stop_only"] = True,
    interrupt: Sequence[Step] = (),
    unknown_events: bool = False,
) -> list[Step]:
    """A Messages stream: ``message_start``, the thinking block, ``blocks``, ``message_delta``,
    ``message_stop``.

    ``model=None`` and the message id are filled in per request by the server (the request's
    model, ``msg_sim_<n>``). ``output_tokens=None`` estimates it from the text (4 chars a token)
    plus ``thinking_tokens``, which is reported cumulatively in ``message_delta`` as
    ``usage.output_tokens_details.thinking_tokens``. ``final=False`` ends the body cleanly after
    the last block, without ``message_delta``/``message_stop``; ``final="stop_only"`` sends
    ``message_stop`` without the ``message_delta`` before it (no stop reason, no final usage).
    ``interrupt`` steps replace the end of the stream right after the last content chunk (the open
    block is never closed): an in-band error, a ``Cut``, a ``Silence``. ``ping_every`` interleaves
    pings, in time, from the first content step to the end of the body. ``unknown_events`` adds
    events of a type the SDK does not know (``future_event_type``), which clients must ignore.
    ``cache_creation_1h_input_tokens`` splits the cache writes as the API does
    (``usage.cache_creation``: that many 1-hour writes, the rest of ``cache_creation_input_tokens``
    5-minute ones); ``web_search_requests`` goes in the final usage's ``server_tool_use``.
    """
    start_usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": 1}
    for key, value in (
        ("cache_creation_input_tokens", cache_creation_input_tokens),
        ("cache_read_input_tokens", cache_read_input_tokens),
    ):
        if value is not None:
            start_usage[key] = value
    if cache_creation_1h_input_tokens is not None:
        start_usage["cache_creation"] = {
            "ephemeral_5m_input_tokens": (cache_creation_input_tokens or 0) - cache_creation_1h_input_tokens,
            "ephemeral_1h_input_tokens": cache_creation_1h_input_tokens}
    message: dict[str, Any] = {
        "id": None,
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
    }
    if include_usage:
        message["usage"] = start_usage
    head: list[Step] = [Event("message_start", {"type": "message_start", "message": message}, first_event_delay)]
    if unknown_events:
        head.append(_unknown_event(0))

    body: list[Step] = []
    specs: list[ThinkingSpec | BlockSpec] = ([thinking] if thinking else []) + list(blocks)
    index = 0
    for n, spec in enumerate(specs):
        if isinstance(spec, ServerToolSpec):
            body += _server_tool(index, spec)
            index += 1  # the result block: its own index
        else:
            body += _block(index, spec)
        if n == len(specs) - 1 and interrupt:
            break
        body.append(Event("content_block_stop", {"type": "content_block_stop", "index": index}))
        if unknown_events:
            body.append(_unknown_event(index + 1))
        index += 1
    body += interrupt
    if ping_every:
        body = _interleave_pings(body, ping_every)

    if interrupt or not final:
        return head + body
    if final == "stop_only":
        return [*head, *body, Event("message_stop", {"type": "message_stop"})]

    visible = sum(len(c) for spec in blocks for c in spec.chunks if isinstance(c, str) and isinstance(spec, TextSpec))
    thinking_chars = sum(len(c) for c in thinking.chunks) if thinking else 0
    if output_tokens is None:
        output_tokens = max(1, visible // 4 + (thinking_tokens if thinking_tokens is not None else thinking_chars // 4))
    delta: dict[str, Any] = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
    if stop_details is not None:
        delta["stop_details"] = stop_details
    message_delta: dict[str, Any] = {"type": "message_delta", "delta": delta}
    if include_usage:
        # Usage in message_delta is cumulative; the API repeats the input side there too.
        usage: dict[str, Any] = {**start_usage, "output_tokens": output_tokens}
        if thinking_tokens is not None:
            usage["output_tokens_details"] = {"thinking_tokens": thinking_tokens}
        if web_search_requests is not None:
            usage["server_tool_use"] = {"web_search_requests": web_search_requests}
        message_delta["usage"] = usage
    tail: list[Step] = [Event("message_delta", message_delta), Event("message_stop", {"type": "message_stop"})]
    return head + body + tail



def _block(index: int, spec: ThinkingSpec | TextSpec | ToolUseSpec) -> list[Step]:
    """content_block_start and the block's deltas (timed); not the stop. The start event goes
    out with the block's first delta, as the API does: "block opened" and "first delta" coincide."""
    return opened_with_first_delta(_block_events(index, spec), 1)


def _block_events(index: int, spec: ThinkingSpec | TextSpec | ToolUseSpec) -> list[Step]:

    def delta(payload: dict[str, Any], delay: float) -> Event:
        return Event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": payload}, delay)

    def start(block: dict[str, Any]) -> Event:
        return Event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})

    if isinstance(spec, ThinkingSpec) and spec.display == "redacted":
        data = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}
        return [with_delay(start(data), spec.duration)]
    if isinstance(spec, ThinkingSpec):
        chunks = list(spec.chunks) if spec.display == "summarized" else [""]
        gap = (spec.duration - spec.first_delay) / len(chunks) if chunks else 0.0
        steps: list[Step] = [start({"type": "thinking", "thinking": ""})]
        for i, chunk in enumerate(chunks):
            steps.append(delta({"type": "thinking_delta", "thinking": chunk}, spec.first_delay if i == 0 else gap))
        # The signature closes the block at `duration` after its start.
        sig_delay = gap if chunks else spec.duration
        steps.append(delta({"type": "signature_delta", "signature": spec.signature}, sig_delay))
        return steps
    if isinstance(spec, ToolUseSpec):
        block = {"type": "tool_use", "id": spec.id or f"toolu_sim_{index:02d}", "name": spec.name, "input": {}}
        return [start(block), *timed_fragments(
            spec, lambda chunk, delay: delta({"type": "input_json_delta", "partial_json": chunk}, delay))]
    return [start({"type": "text", "text": ""}),
            *timed(spec, lambda chunk, delay: delta({"type": "text_delta", "text": chunk}, delay))]


def _server_tool(index: int, spec: ServerToolSpec) -> list[Step]:
    """The ``server_tool_use`` block, its stop, the run, and the result block (not its stop)."""
    tool_id = spec.id or f"srvtoolu_sim_{index:02d}"
    steps = _block(index, ToolUseSpec(spec.name, spec.chunks, spec.interval, spec.first_delay, tool_id))
    block = {"type": "server_tool_use", "id": tool_id, "name": spec.name, "input": {}}
    steps[0] = Event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block},
                     steps[0].delay)
    steps.append(Event("content_block_stop", {"type": "content_block_stop", "index": index}))
    if spec.ping_every:
        pinging = spec.run if spec.pings_for is None else min(spec.pings_for, spec.run)
        count = int(pinging / spec.ping_every + 1e-9)
        steps += pings(spec.ping_every, count)
        rest = spec.run - count * spec.ping_every
    else:
        rest = spec.run
    result = {"type": spec.result_type, "tool_use_id": tool_id, "content": _tool_result_content(spec.result_type)}
    steps.append(Event("content_block_start", {"type": "content_block_start", "index": index + 1,
                                               "content_block": result}, max(rest, 0.0)))
    return steps


def _tool_result_content(result_type: str) -> Any:
    if result_type == "web_search_tool_result":
        return [{"type": "web_search_result", "title": "How streams fail", "url": "https://example.com/streams",
                 "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5LTQ1NGUtODgxNC1kNjNjNTk1ZWI3Y2YSDKk",
                 "page_age": "November 2, 2026"}]
    if result_type == "web_fetch_tool_result":
        return {"type": "web_fetch_result", "url": "https://example.com/streams",
                "retrieved_at": "2026-11-02T00:00:00Z",
                "content": {"type": "document",
                            "source": {"type": "text", "media_type": "text/plain", "data": "Streams fail."}}}
    return {"type": "code_execution_result", "stdout": "ok\n", "stderr": "", "return_code": 0, "content": []}


def _unknown_event(n: int) -> Event:
    return Event("future_event_type", {"type": "future_event_type", "sequence": n, "detail": {"note": "ignore me"}})


def _interleave_pings(steps: Sequence[Step], period: float) -> list[Step]:
    """Insert a Ping every ``period`` s of script time, splitting the delays they fall into."""
    out: list[Step] = []
    since = 0.0
    for step in steps:
        remaining = step.delay
        while since + remaining >= period - 1e-9:
            wait = max(0.0, period - since)
            out.append(Ping(wait))
            remaining, since = max(0.0, remaining - wait), 0.0
        out.append(with_delay(step, remaining))
        since += remaining
    return out

