"""The size of a request's prompt, counted when it is sent: what its input is priced from when the
provider never reports the input (an OpenAI stream cut before its final usage, an Anthropic one
cut before its first event). A count of characters, never the text."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

BINARY = frozenset({"data", "image_url", "file_data", "url", "b64_json", "input_audio", "file_id", "source",
                    "signature", "encrypted_content", "cache_control"})
"""Keys whose strings are not prompt text (images, files and audio as base64 or links, signatures):
left out, they would count a picture as thousands of tokens of text."""

_DEPTH = 12


def prompt_chars(body: Mapping[str, Any], keys: Iterable[str]) -> int:
    """Characters of text under `keys` of the request body (messages, system prompt, tool
    definitions), the strings of binary parts left out."""
    return sum(_chars(body.get(key), 0) for key in keys)


def _chars(value: Any, depth: int) -> int:
    if isinstance(value, str):
        return len(value)
    if depth >= _DEPTH:
        return 0
    if isinstance(value, Mapping):
        return sum(_chars(v, depth + 1) for k, v in value.items() if k not in BINARY)
    if isinstance(value, list | tuple):
        return sum(_chars(v, depth + 1) for v in value)
    return 0
