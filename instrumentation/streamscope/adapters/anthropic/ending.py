"""How an exception ends an Anthropic stream, and the helpers' questions about its events.

`ending` gives the record its end, error type and budget; `retry_decision` is the one
classifier of exceptions for the retry line. Bedrock's in-band exceptions (its event-stream
exception frames, raised as API errors after the 200) are retryable as AWS documents them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from streamscope.core.errors import StreamTimeout
from streamscope.core.record import End

IN_BAND_RETRYABLE = frozenset({
    "overloaded_error", "api_error", "rate_limit_error",
    # Bedrock's exception frames that AWS documents as retryable.
    "internalServerException", "modelStreamErrorException", "throttlingException", "serviceUnavailableException",
})


def ending(exc: BaseException) -> tuple[End, str | None, str | None]:
    """(end, error type, budget fired) for an exception that ended a stream."""
    import anthropic
    import httpx2

    if isinstance(exc, StreamTimeout):
        return "error", None, exc.budget
    if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit)):
        return "cancelled", None, None
    cause: BaseException = exc
    if isinstance(exc, anthropic.APIConnectionError) and exc.__cause__ is not None:
        cause = exc.__cause__
    if isinstance(cause, httpx2.ReadTimeout):
        return "error", None, "read_timeout"
    if isinstance(exc, anthropic.APIStatusError):
        kind = getattr(exc, "type", None)
        return "error", kind if isinstance(kind, str) and kind else str(exc.status_code), None
    return "error", type(cause).__name__, None


class Helpers:
    """What `collect` and the retry line ask about Anthropic events and exceptions."""

    @staticmethod
    def is_content(event: Any, first_content: str = "text") -> bool:
        """Whether `event` is a content event under the `first_content` setting."""
        if getattr(event, "type", None) != "content_block_delta":
            return False
        if first_content == "any":
            return True
        return getattr(getattr(event, "delta", None), "type", None) in ("text_delta", "input_json_delta")

    @staticmethod
    def text_of(event: Any) -> str:
        """The visible text an event carries (a raw `text_delta`), else ''."""
        if getattr(event, "type", None) == "content_block_delta":
            delta = getattr(event, "delta", None)
            if getattr(delta, "type", None) == "text_delta":
                text = getattr(delta, "text", "")
                return text if isinstance(text, str) else ""
        return ""

    @staticmethod
    def retry_decision(exc: BaseException) -> tuple[bool, float | None] | None:
        """Yes: 429, 5xx and 529, a retryable in-band error, connection failures. No: other 4xx,
        anything else of the SDK's. None for an exception neither the SDK nor its transport raised."""
        import anthropic
        import httpx2

        if isinstance(exc, anthropic.APIStatusError):
            status = exc.status_code
            if status == 200:  # an in-band error event after the 200
                return getattr(exc, "type", None) in IN_BAND_RETRYABLE, None
            if status == 429 or status >= 500:
                return True, _retry_after(exc.response)
            return status in (408, 409), None
        if isinstance(exc, (anthropic.APIConnectionError, httpx2.TransportError)):
            return True, None
        if isinstance(exc, anthropic.AnthropicError):
            return False, None
        return None


def _retry_after(response: Any) -> float | None:
    raw = getattr(response, "headers", {}).get("retry-after") if response is not None else None
    try:
        value = float(raw) if raw else None
    except ValueError:  # an HTTP date: ignored
        return None
    return value if value is not None and value >= 0 else None
