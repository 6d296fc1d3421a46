"""OpenAI's two streaming formats as timed scripts, for the simulator's OpenAI routes.

Chat Completions sends ``data: {chat.completion.chunk}`` lines with no event name and ends with
``data: [DONE]``; the Responses API sends named events (``event: response.output_text.delta``)
numbered by ``sequence_number`` and ends with its terminal event (no ``[DONE]``). The builders
write the API's JSON shapes in the API's order (tests check every field against the openai SDK's
own types), with the Step types and timing of steps.py: a step's delay is relative to the one
before, and a Step among the text chunks is played as is (a Silence, a Cut, bad bytes).

The server fills per request what a builder leaves None (``personalize``): the completion or
response id, the ``created`` time and the model (echoed from the request, as the API does).
OpenAI sends no keep-alive while the model reasons (not even SSE comments): a reasoning model
is silent on the wire, so scripts use ``Silence`` or ``first_event_delay``, never pings.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from .steps import Event, HttpError, Raw, Step, TextSpec, ToolUseSpec, _with_delay

FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "content_filter"]
SYSTEM_FINGERPRINT = "fp_5im0a1b2c3"
SERVER_ERROR = "The server had an error while processing your request. Sorry about that!"
DONE = Raw(b"data: [DONE]\n\n")
_PAD = "q3ZkT9xWb2LrN8vYc4HsJ6mPd1FgA7eU"


# --------------------------------------------------------------------------- errors


def error_body(message: str, error_type: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    """OpenAI's JSON error body, for error statuses (and, in-band, for Chat Completions)."""
    return {"error": {"message": message, "type": error_type, "param": param, "code": code}}


@dataclass(frozen=True)
class OpenAIHttpError(HttpError):
    """An error status with OpenAI's body, ``{"error": {message, type, param, code}}``: the SDK
    raises the status's ``APIStatusError`` subclass with that object as ``.body``."""

    code: str | None = None
    param: str | None = None

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.error_type, self.code, self.param)


def chat_error(message: str = SERVER_ERROR, error_type: str = "server_error", code: str | None = None,
               delay: float = 0.0) -> Raw:
    """An in-band Chat Completions error after the 200: a data line holding an ``error`` object.
    The SDK raises ``openai.APIError`` (no status code) with that object as ``.body``."""
    return _data_line(error_body(message, error_type, code), delay)


def responses_error(code: str = "server_error", message: str = SERVER_ERROR, *,
                    shape: Literal["live", "documented"] = "live", delay: float = 0.0) -> Event:
    """An in-band Responses ``error`` event.

    ``live`` nests the fields under ``error``, as api.openai.com sends it: the SDK raises
    ``openai.APIError``. ``documented`` puts them at the top, as the API reference and the SDK's
    ``ResponseErrorEvent`` describe it: the SDK yields that event and raises nothing.
    """
    fields = {"code": code, "message": message, "param": None}
    data = {"type": "error", "sequence_number": None}
    data |= {"error": {"type": code, **fields}} if shape == "live" else fields
    return Event("error", data, delay)


# --------------------------------------------------------------------------- Chat Completions


def chat_stream(
    *,
    text: TextSpec | None = None,
    refusal: TextSpec | None = None,
    tool_calls: Sequence[ToolUseSpec] = (),
    finish_reason: FinishReason = "stop",
    model: str | None = None,
    prompt_tokens: int = 25,
    cached_tokens: int = 0,
    completion_tokens: int | None = None,
    reasoning_tokens: int = 0,
    include_usage: bool = True,
    first_event_delay: float = 0.0,
    final: bool = True,
    interrupt: Sequence[Step] = (),
) -> list[Step]:
    """A Chat Completions stream: the role chunk, ``text`` (``delta.content``), ``refusal``
    (``delta.refusal``), ``tool_calls`` (``delta.tool_calls``: a header chunk with id and name,
    then argument fragments), the ``finish_reason`` chunk, the usage chunk, ``[DONE]``.

    The role chunk goes out at ``first_event_delay``: a reasoning model sends nothing before it
    (its reasoning shows only as ``reasoning_tokens`` in the usage). ``include_usage=False`` plays
    a stream without usage; with True, the server still sends usage only to a request that asks
    for it (``stream_options.include_usage``), as the API does. ``completion_tokens=None``
    estimates it from the text (4 chars a token) plus ``reasoning_tokens``. ``final=False`` ends
    the body after the last content chunk (no finish reason, no ``[DONE]``); ``interrupt`` steps
    (``chat_error()``, ``Cut()``, ``Silence(s)``) replace that end.
    """

    def chunk(delta: dict[str, Any], delay: float = 0.0, finish: str | None = None) -> Raw:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _chat_chunk(model, [choice], include_usage, _obfuscation(_text_of(delta)), delay)

    role: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
    if refusal is not None and text is None:
        role |= {"content": None, "refusal": ""}
    merged = bool(tool_calls) and text is None and refusal is None  # the first call rides on the role chunk
    if merged:
        role = {"role": "assistant", "content": None, "tool_calls": [_tool_header(0, tool_calls[0])], "refusal": None}
    steps: list[Step] = [chunk(role, first_event_delay)]

    for spec, key in ((text, "content"), (refusal, "refusal")):
        if spec is not None:
            steps += _timed(spec, lambda piece, delay, key=key: chunk({key: piece}, delay))
    for i, call in enumerate(tool_calls):
        pieces = [] if merged and i == 0 else [{"tool_calls": [_tool_header(i, call)]}]
        pieces += [{"tool_calls": [{"index": i, "function": {"arguments": part}}]} for part in call.chunks]
        first = call.interval if call.first_delay is None else call.first_delay
        steps += [chunk(piece, first if n == 0 else call.interval) for n, piece in enumerate(pieces)]

    if interrupt or not final:
        return steps + list(interrupt)
    steps.append(chunk({}, finish=finish_reason))
    if include_usage:
        visible = _chars(text) + _chars(refusal) + sum(len(c) for call in tool_calls for c in call.chunks)
        completion = completion_tokens if completion_tokens is not None else max(1, visible // 4 + reasoning_tokens)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
        }
        steps.append(_chat_chunk(model, [], True, _obfuscation(""), 0.0, usage))
    return [*steps, DONE]


def _chat_chunk(model: str | None, choices: list[dict[str, Any]], include_usage: bool, pad: str, delay: float,
                usage: dict[str, Any] | None = None) -> Raw:
    data: dict[str, Any] = {"id": None, "object": "chat.completion.chunk", "created": None, "model": model,
                            "service_tier": "default", "system_fingerprint": SYSTEM_FINGERPRINT, "choices": choices}
    if include_usage:
        data["usage"] = usage  # null on every chunk but the last, when usage is on
    data["obfuscation"] = pad
    return _data_line(data, delay)


def _tool_header(index: int, call: ToolUseSpec) -> dict[str, Any]:
    return {"index": index, "id": call.id or f"call_sim_{index:02d}", "type": "function",
            "function": {"name": call.name, "arguments": ""}}


# --------------------------------------------------------------------------- Responses API


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

    def ev(kind: str, delay: float = 0.0, **fields: Any) -> Event:
        return Event(kind, {"type": kind, "sequence_number": None, **fields}, delay)

    items: list[_Item] = []
    if reasoning is not None:
        where = {"item_id": "rs_sim_00", "output_index": 0, "summary_index": 0}
        summary = "".join(reasoning.summary)
        item: dict[str, Any] = {"id": "rs_sim_00", "type": "reasoning", "summary": []}
        body: list[Step] = [ev("response.output_item.added", output_index=0, item=item)]
        closing: list[Event] = []
        gap = reasoning.duration
        if reasoning.summary:
            gap = (reasoning.duration - reasoning.first_delay) / len(reasoning.summary)
            part = {"type": "summary_text", "text": ""}
            deltas = [ev("response.reasoning_summary_text.delta", reasoning.first_delay if n == 0 else gap, **where,
                         delta=piece, obfuscation=_obfuscation(piece)) for n, piece in enumerate(reasoning.summary)]
            body += _open([ev("response.reasoning_summary_part.added", **where, part=part), *deltas], 1)
            closing = [ev("response.reasoning_summary_text.done", **where, text=summary),
                       ev("response.reasoning_summary_part.done", **where, part={**part, "text": summary})]
        item = {**item, "summary": [{"type": "summary_text", "text": summary}] if summary else []}
        items.append(_Item(0, body, closing, item, gap))

    parts = [(spec, kind) for spec, kind in ((text, "output_text"), (refusal, "refusal")) if spec is not None]
    if parts:
        index, item_id = len(items), "msg_sim_00"
        item = {"id": item_id, "type": "message", "status": "in_progress", "content": [], "role": "assistant"}
        body = [ev("response.output_item.added", output_index=index, item=item)]
        closing, content = [], []
        for n, (spec, kind) in enumerate(parts):
            where = {"item_id": item_id, "output_index": index, "content_index": n}
            if kind == "output_text":
                empty: dict[str, Any] = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
                full = {**empty, "text": _joined(spec)}
                deltas = _timed(spec, lambda piece, delay, where=where: ev(
                    "response.output_text.delta", delay, **where, delta=piece, logprobs=[],
                    obfuscation=_obfuscation(piece)))
                closing.append(ev("response.output_text.done", **where, text=full["text"], logprobs=[]))
            else:
                empty = {"type": "refusal", "refusal": ""}
                full = {**empty, "refusal": _joined(spec)}
                deltas = _timed(spec, lambda piece, delay, where=where: ev(
                    "response.refusal.delta", delay, **where, delta=piece, obfuscation=_obfuscation(piece)))
                closing.append(ev("response.refusal.done", **where, refusal=full["refusal"]))
            body += [ev("response.content_part.added", **where, part=empty), *deltas]
            closing.append(ev("response.content_part.done", **where, part=full))
            content.append(full)
        items.append(_Item(index, _open(body, 2), closing, {**item, "status": "completed", "content": content}))

    for n, call in enumerate(function_calls):
        index, item_id = len(items), f"fc_sim_{n:02d}"
        where = {"item_id": item_id, "output_index": index}
        item = {"id": item_id, "type": "function_call", "status": "in_progress", "arguments": "",
                "call_id": call.id or f"call_sim_{n:02d}", "name": call.name}
        first = call.interval if call.first_delay is None else call.first_delay
        deltas = [ev("response.function_call_arguments.delta", first if i == 0 else call.interval, **where,
                     delta=piece, obfuscation=_obfuscation(piece)) for i, piece in enumerate(call.chunks)]
        arguments = "".join(call.chunks)
        closing = [ev("response.function_call_arguments.done", **where, arguments=arguments)]
        body = _open([ev("response.output_item.added", output_index=index, item=item), *deltas], 1)
        items.append(_Item(index, body, closing, {**item, "status": "completed", "arguments": arguments}))

    settings = {"effort": "medium", "summary": "auto" if reasoning.summary else None} if reasoning else None
    head = _response(model, "in_progress", [], None, settings)
    steps: list[Step] = [ev("response.created", first_event_delay, response=head),
                         ev("response.in_progress", response=head)]
    ended = bool(interrupt) or not final or status == "failed"  # the last item is left open
    if items and status == "incomplete" and "status" in items[-1].item:
        items[-1].item["status"] = "incomplete"  # cut while being written
    for n, it in enumerate(items):
        steps += it.body
        if n < len(items) - 1 or not ended:
            tail = [*it.closing, ev("response.output_item.done", output_index=it.index, item=it.item)]
            steps += [_with_delay(tail[0], it.close_delay), *tail[1:]]
    if interrupt or not final:
        return _numbered([*steps, *interrupt])
    closed = [it.item for it in items[:-1]] if status == "failed" else [it.item for it in items]
    if status == "failed":
        failed = _response(model, "failed", closed, None, settings, error={"code": error[0], "message": error[1]})
        return _numbered([*steps, ev("response.failed", response=failed)])
    visible = _chars(text) + _chars(refusal) + sum(len(c) for call in function_calls for c in call.chunks)
    output = output_tokens if output_tokens is not None else max(1, visible // 4 + reasoning_tokens)
    usage = {"input_tokens": input_tokens,
             "input_tokens_details": {"cached_tokens": cached_tokens, "cache_write_tokens": 0},
             "output_tokens": output, "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
             "total_tokens": input_tokens + output}
    incomplete = {"reason": incomplete_reason} if status == "incomplete" else None
    last = _response(model, status, closed, usage, settings, incomplete=incomplete)
    return _numbered([*steps, ev(f"response.{status}", response=last)])


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


# --------------------------------------------------------------------------- per request


def personalize(steps: Sequence[Step], body: Mapping[str, Any], number: int) -> list[Step]:
    """Fill what the builders leave to the request (ids, ``created``, the echoed model and limits)
    and drop what the request did not ask for: usage (Chat Completions sends it only with
    ``stream_options.include_usage``) and ``obfuscation`` (off with ``include_obfuscation: false``)."""
    model = body.get("model") if isinstance(body.get("model"), str) else "gpt-simulator"
    options = body.get("stream_options") if isinstance(body.get("stream_options"), dict) else {}
    usage, obfuscation = options.get("include_usage") is True, options.get("include_obfuscation") is not False
    now = int(time.time())
    echo = {key: body[key] for key in ("max_output_tokens", "instructions") if isinstance(body.get(key), int | str)}
    out: list[Step] = []
    for step in steps:
        if isinstance(step, Raw) and (chunk := _chunk_of(step.payload)) is not None:
            if not usage and chunk.get("usage") is not None:
                continue  # the usage chunk
            if not usage:
                chunk.pop("usage", None)
            if not obfuscation:
                chunk.pop("obfuscation", None)
            chunk |= {"id": chunk["id"] or f"chatcmpl-sim{number}", "created": chunk["created"] or now,
                      "model": chunk["model"] or model}
            step = _data_line(chunk, step.delay)
        elif isinstance(step, Event) and step.name.startswith("response."):
            data = {key: value for key, value in step.data.items() if obfuscation or key != "obfuscation"}
            response = data.get("response")
            if isinstance(response, dict):
                data["response"] = {**response, **echo, "id": response.get("id") or f"resp_sim_{number}",
                                    "created_at": response.get("created_at") or now,
                                    "model": response.get("model") or model}
            step = Event(step.name, data, step.delay)
        out.append(step)
    return out


# --------------------------------------------------------------------------- helpers


def _data_line(data: Mapping[str, Any], delay: float) -> Raw:
    """A data-only SSE line, as Chat Completions sends each chunk."""
    return Raw(f"data: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n".encode(), delay)


def _chunk_of(payload: bytes) -> dict[str, Any] | None:
    """The chat.completion.chunk a builder's data line holds (None for any other bytes)."""
    if not payload.startswith(b"data: {"):
        return None
    try:
        data = json.loads(payload[6:])
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("object") == "chat.completion.chunk" else None


def _timed(spec: TextSpec, make: Callable[[str, float], Step]) -> list[Step]:
    """``make(piece, delay)`` per text chunk, timed as TextSpec says; a Step among them as is."""
    first = spec.interval if spec.first_delay is None else spec.first_delay
    steps: list[Step] = []
    sent = False
    for chunk in spec.chunks:
        if isinstance(chunk, str):
            steps.append(make(chunk, spec.interval if sent else first))
            sent = True
        else:
            steps.append(chunk)
    return steps


def _open(steps: list[Step], framing: int) -> list[Step]:
    """The ``framing`` events that open an item or part go out with its first delta, as the API
    sends them: the first delta's delay moves to the first of them."""
    if len(steps) > framing and isinstance(steps[framing], Event) and steps[framing].delay:
        steps = [_with_delay(steps[0], steps[framing].delay), *steps[1:framing],
                 _with_delay(steps[framing], 0.0), *steps[framing + 1:]]
    return steps


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


def _obfuscation(text: str) -> str:
    """Padding, as the API adds to each delta so that sizes on the wire do not give the text away
    (observed on Responses deltas: text and padding come to 16 characters)."""
    return _PAD[: max(0, 16 - len(text))]


def _text_of(delta: Mapping[str, Any]) -> str:
    """The text a chat delta carries (content, refusal or argument fragments)."""
    arguments = [(call.get("function") or {}).get("arguments") or "" for call in delta.get("tool_calls") or []]
    return (delta.get("content") or "") + (delta.get("refusal") or "") + "".join(arguments)


def _joined(spec: TextSpec) -> str:
    return "".join(c for c in spec.chunks if isinstance(c, str))


def _chars(spec: TextSpec | None) -> int:
    return len(_joined(spec)) if spec else 0
