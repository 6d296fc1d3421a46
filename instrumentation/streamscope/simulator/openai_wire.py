"""What OpenAI's two streaming formats share on the wire: the error body, the padding on the
deltas, the data-only SSE line, and what the server fills in per request (``personalize``).

The server fills per request what a builder leaves None: the completion or response id, the
``created`` time and the model (echoed from the request, as the API does).
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .steps import Event, HttpError, Raw, Step

SYSTEM_FINGERPRINT = "fp_5im0a1b2c3"
SERVER_ERROR = "The server had an error while processing your request. Sorry about that!"
_PAD = "q3ZkT9xWb2LrN8vYc4HsJ6mPd1FgA7eU"


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


def obfuscation(text: str) -> str:
    """Padding, as the API adds to each delta so that sizes on the wire do not give the text away
    (observed on Responses deltas: text and padding come to 16 characters)."""
    return _PAD[: max(0, 16 - len(text))]


def data_line(data: Mapping[str, Any], delay: float) -> Raw:
    """A data-only SSE line, as Chat Completions sends each chunk."""
    return Raw(f"data: {json.dumps(data, separators=(',', ':'), ensure_ascii=False)}\n\n".encode(), delay)


def personalize(steps: Sequence[Step], body: Mapping[str, Any], number: int) -> list[Step]:
    """Fill what the builders leave to the request (ids, ``created``, the echoed model and limits)
    and drop what the request did not ask for: usage (Chat Completions sends it only with
    ``stream_options.include_usage``) and ``obfuscation`` (off with ``include_obfuscation: false``)."""
    model = body.get("model") if isinstance(body.get("model"), str) else "gpt-simulator"
    options = body.get("stream_options")
    if not isinstance(options, dict):
        options = {}
    usage, padded = options.get("include_usage") is True, options.get("include_obfuscation") is not False
    now = int(time.time())
    echo = {key: body[key] for key in ("max_output_tokens", "instructions") if isinstance(body.get(key), int | str)}
    out: list[Step] = []
    for step in steps:
        if isinstance(step, Raw) and (chunk := _chunk_of(step.payload)) is not None:
            if not usage and chunk.get("usage") is not None:
                continue  # the usage chunk
            if not usage:
                chunk.pop("usage", None)
            if not padded:
                chunk.pop("obfuscation", None)
            chunk |= {"id": chunk["id"] or f"chatcmpl-sim{number}", "created": chunk["created"] or now,
                      "model": chunk["model"] or model}
            step = data_line(chunk, step.delay)
        elif isinstance(step, Event) and step.name.startswith("response."):
            data = {key: value for key, value in step.data.items() if padded or key != "obfuscation"}
            response = data.get("response")
            if isinstance(response, dict):
                data["response"] = {**response, **echo, "id": response.get("id") or f"resp_sim_{number}",
                                    "created_at": response.get("created_at") or now,
                                    "model": response.get("model") or model}
            step = Event(step.name, data, step.delay)
        out.append(step)
    return out


def _chunk_of(payload: bytes) -> dict[str, Any] | None:
    """The chat.completion.chunk a builder's data line holds (None for any other bytes)."""
    if not payload.startswith(b"data: {"):
        return None
    try:
        data = json.loads(payload[6:])
    except ValueError:
        return None
    return data if isinstance(data, dict) and data.get("object") == "chat.completion.chunk" else None
