"""Chat Completions streams as timed scripts: ``chat_stream()`` and the in-band ``chat_error()``.

Chat Completions sends ``data: {chat.completion.chunk}`` lines with no event name and ends with
``data: [DONE]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

from .content import TextSpec, ToolUseSpec, chars, timed
from .openai_wire import SERVER_ERROR, SYSTEM_FINGERPRINT, data_line, error_body, obfuscation
from .steps import Raw, Step

FinishReason: TypeAlias = Literal["stop", "length", "tool_calls", "content_filter"]
DONE = Raw(b"data: [DONE]\n\n")


def chat_error(message: str = SERVER_ERROR, error_type: str = "server_error", code: str | None = None,
               delay: float = 0.0) -> Raw:
    """An in-band Chat Completions error after the 200: a data line holding an ``error`` object.
    The SDK raises ``openai.APIError`` (no status code) with that object as ``.body``."""
    return data_line(error_body(message, error_type, code), delay)



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
        return _chat_chunk(model, [choice], include_usage, obfuscation(_text_of(delta)), delay)

    role: dict[str, Any] = {"role": "assistant", "content": "", "refusal": None}
    if refusal is not None and text is None:
        role |= {"content": None, "refusal": ""}
    merged = bool(tool_calls) and text is None and refusal is None  # the first call rides on the role chunk
    if merged:
        role = {"role": "assistant", "content": None, "tool_calls": [_tool_header(0, tool_calls[0])], "refusal": None}
    steps: list[Step] = [chunk(role, first_event_delay)]

    def piece_of(key: str) -> Callable[[str, float], Step]:
        return lambda piece, delay: chunk({key: piece}, delay)

    for spec, key in ((text, "content"), (refusal, "refusal")):
        if spec is not None:
            steps += timed(spec, piece_of(key))
    for i, call in enumerate(tool_calls):
        pieces = [] if merged and i == 0 else [{"tool_calls": [_tool_header(i, call)]}]
        pieces += [{"tool_calls": [{"index": i, "function": {"arguments": part}}]} for part in call.chunks]
        first = call.interval if call.first_delay is None else call.first_delay
        steps += [chunk(piece, first if n == 0 else call.interval) for n, piece in enumerate(pieces)]

    if interrupt or not final:
        return steps + list(interrupt)
    steps.append(chunk({}, finish=finish_reason))
    if include_usage:
        visible = chars(text) + chars(refusal) + sum(len(c) for call in tool_calls for c in call.chunks)
        completion = completion_tokens if completion_tokens is not None else max(1, visible // 4 + reasoning_tokens)
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": reasoning_tokens, "audio_tokens": 0,
                                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0},
        }
        steps.append(_chat_chunk(model, [], True, obfuscation(""), 0.0, usage))
    return [*steps, DONE]


def _chat_chunk(model: str | None, choices: list[dict[str, Any]], include_usage: bool, pad: str, delay: float,
                usage: dict[str, Any] | None = None) -> Raw:
    data: dict[str, Any] = {"id": None, "object": "chat.completion.chunk", "created": None, "model": model,
                            "service_tier": "default", "system_fingerprint": SYSTEM_FINGERPRINT, "choices": choices}
    if include_usage:
        data["usage"] = usage  # null on every chunk but the last, when usage is on
    data["obfuscation"] = pad
    return data_line(data, delay)


def _tool_header(index: int, call: ToolUseSpec) -> dict[str, Any]:
    return {"index": index, "id": call.id or f"call_sim_{index:02d}", "type": "function",
            "function": {"name": call.name, "arguments": ""}}


def _text_of(delta: Mapping[str, Any]) -> str:
    """The text a chat delta carries (content, refusal or argument fragments)."""
    arguments = [(call.get("function") or {}).get("arguments") or "" for call in delta.get("tool_calls") or []]
    return (delta.get("content") or "") + (delta.get("refusal") or "") + "".join(arguments)
