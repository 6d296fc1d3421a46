"""A non-streaming Messages answer: the Message a script's stream events assemble to, or the
error status an in-band ``error`` event stands for, as the API would have answered."""

from __future__ import annotations

import copy
import json
from typing import Any

_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


def parse_sse(payload: bytes) -> list[tuple[str, dict[str, Any]]]:
    """The well-formed events in raw SSE bytes (best effort, for non-streaming answers)."""
    events: list[tuple[str, dict[str, Any]]] = []
    for block in payload.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = None, []
        for line in block.decode("utf-8", "replace").split("\n"):
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                name = value
            elif field == "data":
                data.append(value)
        if name and data:
            try:
                events.append((name, json.loads("\n".join(data))))
            except ValueError:
                pass
    return events


def assemble(events: list[tuple[str, dict[str, Any]]]) -> tuple[int, dict[str, Any]]:
    """Fold stream events into (status, non-streaming body), as the API would have answered."""
    message: dict[str, Any] | None = None
    partial_json: dict[int, str] = {}
    for name, data in events:
        if name == "error":
            return _ERROR_STATUS.get(data.get("error", {}).get("type"), 500), data
        if name == "message_start":
            message = {**copy.deepcopy(data["message"]), "content": []}
        elif message is None:
            continue
        elif name == "content_block_start":
            message["content"].append(copy.deepcopy(data["content_block"]))
        elif name == "content_block_delta":
            index, delta = data["index"], data["delta"]
            block = message["content"][index]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            elif delta["type"] == "input_json_delta":
                partial_json[index] = partial_json.get(index, "") + delta["partial_json"]
        elif name == "content_block_stop" and data["index"] in partial_json:
            message["content"][data["index"]]["input"] = json.loads(partial_json.pop(data["index"]) or "{}")
        elif name == "message_delta":
            message.update(data.get("delta", {}))
            if "usage" in data:
                message["usage"] = {**message.get("usage", {}), **data["usage"]}
    if message is None:
        return 500, {"type": "error", "error": {"type": "api_error", "message": "the script sent no message"}}
    return 200, message
