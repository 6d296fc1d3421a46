"""Responses API streams as timed scripts: ``responses_stream()`` and the in-band ``responses_error()``.

The Responses API sends named events (``event: response.output_text.delta``) numbered by
``sequence_number`` and ends with its terminal event (no ``[DONE]``). OpenAI sends no keep-alive
while the model reasons (not even SSE comments): a reasoning model is silent on the wire, so
scripts use ``Silence`` or ``first_event_delay``, never pings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from .content import TextSpec, ToolUseSpec, chars, joined, opened_with_first_delta, timed, timed_fragments
from .openai_wire import SERVER_ERROR, obfuscation
from .steps import Event, Step, with_delay


def responses_error(code: str = "server_error", message: str = SERVER_ERROR, *,
                    shape: Literal["live", "documented"] = "live", delay: float = 0.0) -> Event:
    """An in-band Responses ``error`` event.

    ``live`` nests the fields under ``error``, as api.openai.com sends it: the SDK raises
    ``openai.APIError``. ``documented`` puts them at the top, as the API reference and the SDK's
    ``ResponseErrorEvent`` describe it: the SDK yields that event and raises nothing.
    """
    fields = {"code": code, "message": message, "param": None}
    data: dict[str, Any] = {"type": "error", "sequence_number": None}
    data |= {"error": {"type": code, **fields}} if shape == "live" else fields
    return Event("error", data, delay)


@dataclass(frozen=True)
class ReasoningSpec:
    """A reasoning item: opens at once, its ``summary`` deltas (first ``first_delay`` s after it
    opens, the rest spread evenly) until it closes at ``duration`` s. An empty ``summary`` is
    reasoning without a summary (the request asked for none): the item opens, nothing is sent
    for ``duration`` s, the item closes."""

    summary: Sequence[str] = ("**Checking the question**\n\n", "The user wants a short answer,", " so keep it brief.")
    duration: float = 0.5
    first_delay: float = 0.1


@dataclass
class _Item:
    """One output item of a Responses stream: how it opens and streams, and how it closes."""

    index: int
    body: list[Step]  # output_item.added and the deltas
    closing: list[Event]  # the *.done events before output_item.done
    item: dict[str, Any]  # the item as closed
    close_delay: float = 0.0


def responses_stream(
    *,
    reasoning: ReasoningSpec | None = None,
    text: TextSpec | None = None,
    refusal: TextSpec | None = None,
    function_calls: Sequence[ToolUseSpec] = (),
    status: Literal["completed", "incomplete", "failed"] = "completed",
    incomplete_reason: Literal["max_output_tokens", "content_filter"] = "max_output_tokens",
    error: tuple[str, str] = ("server_error", SERVER_ERROR),
    model: str | None = None,
    input_tokens: int = 25,
    cached_tokens: int = 0,
    output_tokens: int | None = None,
    reasoning_tokens: int = 0,
    first_event_delay: float = 0.0,
    final: bool = True,
    interrupt: Sequence[Step] = (),
) -> list[Step]:
    """A Responses stream: ``response.created`` and ``response.in_progress``, the output items in
    turn (a reasoning item, a message with ``text`` and/or ``refusal`` parts, a ``function_call``
    item per call), then the terminal event with the whole response and its usage.

    ``status="incomplete"`` ends with ``response.incomplete`` (``incomplete_details.reason`` is
    ``incomplete_reason``; the last message or call closes as incomplete). ``status="failed"``
    leaves the last item open and ends with ``response.failed`` carrying ``error`` (code, message)
    and no usage. ``output_tokens=None`` estimates it from the text (4 chars a token) plus
    ``reasoning_tokens``. ``final=False`` ends the body after the last delta (the item open, no
    terminal event); ``interrupt`` steps (``responses_error()``, ``Cut()``, ``Silence(s)``)
    replace that end. Every event's ``sequence_number`` counts from 0, interrupt events included.
    """
    items = [_reasoning_item(reasoning)] if reasoning is not None else []
    message = _message_item(len(items), text, refusal)
    if message is not None:
        items.append(message)
    items += [_function_call_item(len(items) + n, n, call) for n, call in enumerate(function_calls)]

    settings = {"effort": "medium", "summary": "auto" if reasoning.summary else None} if reasoning else None
    head = _response(model, "in_progress", [], None, settings)
    steps: list[Step] = [_ev("response.created", first_event_delay, response=head),
                         _ev("response.in_progress", response=head)]
    ended = bool(interrupt) or not final or status == "failed"  # the last item is left open
    if items and status == "incomplete" and "status" in items[-1].item:
        items[-1].item["status"] = "incomplete"  # cut while being written
    for n, it in enumerate(items):
        steps += it.body
        if n < len(items) - 1 or not ended:
            tail = [*it.closing, _ev("response.output_item.done", output_index=it.index, item=it.item)]
            steps += [with_delay(tail[0], it.close_delay), *tail[1:]]
    if interrupt or not final:
        return _numbered([*steps, *interrupt])
    closed = [it.item for it in items[:-1]] if status == "failed" else [it.item for it in items]
    if status == "failed":
        failed = _response(model, "failed", closed, None, settings, error={"code": error[0], "message": error[1]})
        return _numbered([*steps, _ev("response.failed", response=failed)])
    visible = chars(text) + chars(refusal) + sum(len(c) for call in function_calls for c in call.chunks)
    output = output_tokens if output_tokens is not None else max(1, visible // 4 + reasoning_tokens)
    usage = {"input_tokens": input_tokens,
             "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
             "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
             "total_tokens": input_tokens + output}
    incomplete = {"reason": incomplete_reason} if status == "incomplete" else None
    last = _response(model, status, closed, usage, settings, incomplete=incomplete)
    return _numbered([*steps, _ev(f"response.{status}", response=last)])


def _response(model: str | None, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None,
              reasoning: dict[str, Any] | None, *, error: dict[str, Any] | None = None,
              incomplete: dict[str, Any] | None = None) -> dict[str, Any]:
    """The Response object the lifecycle events carry (request echoes are filled per request)."""
    return {
        "id": None, "object": "response", "created_at": None, "status": status, "background": False,
        "error": error, "incomplete_details": incomplete, "instructions": None, "max_output_tokens": None,
        "max_tool_calls": None, "model": model, "output": output, "parallel_tool_calls": True,
        "previous_response_id": None, "prompt_cache_key": None,
        "reasoning": reasoning or {"effort": None, "summary": None}, "safety_identifier": None,
        "service_tier": "auto" if status == "in_progress" else "default", "store": True, "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"}, "tool_choice": "auto", "tools": [],
        "top_logprobs": 0, "top_p": 1.0, "truncation": "disabled", "usage": usage, "user": None, "metadata": {},
    }


def _ev(kind: str, delay: float = 0.0, **fields: Any) -> Event:
    """A Responses event; its ``sequence_number`` is set once the stream is whole (``_numbered``)."""
    return Event(kind, {"type": kind, "sequence_number": None, **fields}, delay)


def _reasoning_item(reasoning: ReasoningSpec) -> _Item:
    """The reasoning item (always the first): its summary part and deltas, if it has a summary."""
    where: dict[str, Any] = {"item_id": "rs_sim_00", "output_index": 0, "summary_index": 0}
    summary = "".join(reasoning.summary)
    item: dict[str, Any] = {"id": "rs_sim_00", "type": "reasoning", "summary": []}
    body: list[Step] = [_ev("response.output_item.added", output_index=0, item=item)]
    closing: list[Event] = []
    gap = reasoning.duration
    if reasoning.summary:
        gap = (reasoning.duration - reasoning.first_delay) / len(reasoning.summary)
        part = {"type": "summary_text", "text": ""}
        deltas = [_ev("response.reasoning_summary_text.delta", reasoning.first_delay if n == 0 else gap, **where,
                      delta=piece, obfuscation=obfuscation(piece)) for n, piece in enumerate(reasoning.summary)]
        body += opened_with_first_delta([_ev("response.reasoning_summary_part.added", **where, part=part), *deltas], 1)
        closing = [_ev("response.reasoning_summary_text.done", **where, text=summary),
                   _ev("response.reasoning_summary_part.done", **where, part={**part, "text": summary})]
    item = {**item, "summary": [{"type": "summary_text", "text": summary}] if summary else []}
    return _Item(0, body, closing, item, gap)


def _message_item(index: int, text: TextSpec | None, refusal: TextSpec | None) -> _Item | None:
    """The message item, with a part for ``text`` and one for ``refusal`` (None: neither)."""
    parts = [(spec, kind) for spec, kind in ((text, "output_text"), (refusal, "refusal")) if spec is not None]
    if not parts:
        return None
    item_id = "msg_sim_00"
    item: dict[str, Any] = {"id": item_id, "type": "message", "status": "in_progress", "content": [],
                            "role": "assistant"}
    body: list[Step] = [_ev("response.output_item.added", output_index=index, item=item)]
    closing: list[Event] = []
    content: list[dict[str, Any]] = []
    for n, (spec, kind) in enumerate(parts):
        where: dict[str, Any] = {"item_id": item_id, "output_index": index, "content_index": n}
        empty, full, deltas, done = _content_part(spec, kind, where)
        body += [_ev("response.content_part.added", **where, part=empty), *deltas]
        closing += [done, _ev("response.content_part.done", **where, part=full)]
        content.append(full)
    return _Item(index, opened_with_first_delta(body, 2), closing, {**item, "status": "completed", "content": content})


def _content_part(spec: TextSpec, kind: str, where: dict[str, Any],
                  ) -> tuple[dict[str, Any], dict[str, Any], list[Step], Event]:
    """A message's ``output_text`` or ``refusal`` part: as it opens (empty) and as it closes (whole),
    its deltas, and the ``*.done`` event that closes it."""
    field = "text" if kind == "output_text" else "refusal"
    prefix = f"response.{kind}"
    logprobs: dict[str, Any] = {"logprobs": []} if kind == "output_text" else {}
    if kind == "output_text":
        empty: dict[str, Any] = {"type": kind, "annotations": [], "logprobs": [], "text": ""}
    else:
        empty = {"type": kind, "refusal": ""}
    full = {**empty, field: joined(spec)}
    deltas = timed(spec, lambda piece, delay: _ev(f"{prefix}.delta", delay, **where, delta=piece, **logprobs,
                                                  obfuscation=obfuscation(piece)))
    return empty, full, deltas, _ev(f"{prefix}.done", **where, **{field: full[field]}, **logprobs)


def _function_call_item(index: int, n: int, call: ToolUseSpec) -> _Item:
    """The ``n``-th function call's item: its arguments arrive as ``function_call_arguments`` deltas."""
    item_id = f"fc_sim_{n:02d}"
    where: dict[str, Any] = {"item_id": item_id, "output_index": index}
    item: dict[str, Any] = {"id": item_id, "type": "function_call", "status": "in_progress", "arguments": "",
                            "call_id": call.id or f"call_sim_{n:02d}", "name": call.name}
    deltas = timed_fragments(call, lambda piece, delay: _ev("response.function_call_arguments.delta", delay, **where,
                                                            delta=piece, obfuscation=obfuscation(piece)))
    arguments = "".join(call.chunks)
    closing = [_ev("response.function_call_arguments.done", **where, arguments=arguments)]
    body = opened_with_first_delta([_ev("response.output_item.added", output_index=index, item=item), *deltas], 1)
    return _Item(index, body, closing, {**item, "status": "completed", "arguments": arguments})


def _numbered(steps: list[Step]) -> list[Step]:
    """Number the Responses events in order of the wire, from 0."""
    out: list[Step] = []
    number = 0
    for step in steps:
        if isinstance(step, Event) and "sequence_number" in step.data:
            step = Event(step.name, {**step.data, "sequence_number": number}, step.delay)
            number += 1
        out.append(step)
    return out
