"""How an exception ends an Anthropic stream, and the helpers' questions about its events.

`ending` gives the record its end, error type and budget; `retry_decision` is the one
classifier of exceptions for the retry line. Bedrock's in-band exceptions (its event-stream
exception frames, raised as API errors after the 200) are retryable as AWS documents them.
"""

from __future__ import annotations

from typing import Any

from streamscope.adapters.stainless.ending import Ending
from streamscope.adapters.stainless.ending import ending as stainless_ending
from streamscope.adapters.stainless.parsing import retry_after

IN_BAND_RETRYABLE = frozenset({
    "overloaded_error", "api_error", "rate_limit_error",
    # Bedrock's exception frames that AWS documents as retryable.
    "internalServerException", "modelStreamErrorException", "throttlingException", "serviceUnavailableException",
})


def ending(exc: BaseException) -> Ending:
    """(end, error type, budget fired) for an exception that ended a stream."""
    import anthropic

    return stainless_ending(exc, anthropic.APIConnectionError, _api_error_type)


def _api_error_type(exc: BaseException) -> str | None:
    """An API error's type (an in-band one's from its body: `overloaded_error`), else its status."""
    import anthropic

    if isinstance(exc, anthropic.APIStatusError):
        kind = getattr(exc, "type", None)
        return kind if isinstance(kind, str) and kind else str(exc.status_code)
    return None


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
                return True, retry_after(exc.response)
            return status in (408, 409), None
        if isinstance(exc, (anthropic.APIConnectionError, httpx2.TransportError)):
            return True, None
        if isinstance(exc, anthropic.AnthropicError):
            return False, None
        return None
