"""How an exception ends an OpenAI stream, and the helpers' questions about its events.

`ending` gives the record its end, error type and budget; `retry_decision` is the one
classifier of openai's exceptions for the retry line. An in-band error after the 200 is an
`APIError` with no status (Chat Completions' `{"error": ...}` chunk, the Responses API's live
`error` event); a cut is `APIConnectionError`, a read timeout `APITimeoutError`.
"""

from __future__ import annotations

from typing import Any

from streamscope.adapters.stainless.ending import Ending
from streamscope.adapters.stainless.ending import ending as stainless_ending
from streamscope.adapters.stainless.parsing import retry_after

IN_BAND_RETRYABLE = frozenset({"server_error", "rate_limit_exceeded", "rate_limit_error", "overloaded_error"})
"""In-band error types or codes worth another attempt (the server's trouble, not the request's)."""
TEXT_EVENTS = frozenset({"response.output_text.delta", "content.delta"})
"""Events that carry visible answer text: the raw Responses delta, the chat helper's."""
CONTENT_EVENTS = TEXT_EVENTS | {"response.refusal.delta", "response.function_call_arguments.delta",
                                "response.custom_tool_call_input.delta", "refusal.delta",
                                "tool_calls.function.arguments.delta"}
"""Content under `first_content = "text"`: text, a refusal, tool input (raw and helper events)."""
REASONING_EVENTS = frozenset({"response.reasoning_summary_text.delta", "response.reasoning_text.delta"})


def _error_type(exc: Any) -> str | None:
    """The error's code, else its type, as OpenAI's error body gives them."""
    for name in ("code", "type"):
        value = getattr(exc, name, None)
        if isinstance(value, str) and value:
            return value
    return None


def ending(exc: BaseException) -> Ending:
    """(end, error type, budget fired) for an exception that ended a stream."""
    import openai

    return stainless_ending(exc, openai.APIConnectionError, _api_error_type)


def _api_error_type(exc: BaseException) -> str | None:
    """An API error's code or type; else its status, or `APIError` for an in-band one (after the 200)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return _error_type(exc) or str(exc.status_code)
    if type(exc) is openai.APIError:
        return _error_type(exc) or "APIError"
    return None


def _chat_text(chunk: Any) -> str:
    choices = getattr(chunk, "choices", None) or ()
    text = getattr(getattr(choices[0], "delta", None), "content", None) if choices else None
    return text if isinstance(text, str) else ""


class Helpers:
    """What `collect` and the retry line ask about OpenAI events (raw, or the `stream()` helpers')
    and exceptions."""

    @staticmethod
    def is_content(event: Any, first_content: str = "text") -> bool:
        """Whether `event` is a content event under the `first_content` setting."""
        kind = getattr(event, "type", None)
        if kind is None:  # a raw chat chunk
            for choice in getattr(event, "choices", None) or ():
                delta = getattr(choice, "delta", None)
                if getattr(delta, "content", None) or getattr(delta, "refusal", None) or \
                        getattr(delta, "tool_calls", None):
                    return True
                extra = getattr(delta, "model_extra", None) or {}
                if first_content == "any" and any(extra.get(k) for k in ("reasoning_content", "reasoning")):
                    return True
            return False
        return kind in CONTENT_EVENTS or (first_content == "any" and kind in REASONING_EVENTS)

    @staticmethod
    def text_of(event: Any) -> str:
        """The visible answer text an event carries (raw or a helper's text delta), else ''."""
        kind = getattr(event, "type", None)
        if kind in TEXT_EVENTS:
            text = getattr(event, "delta", "")
            return text if isinstance(text, str) else ""
        return _chat_text(event) if kind is None else ""

    @staticmethod
    def retry_decision(exc: BaseException) -> tuple[bool, float | None] | None:
        """Yes: 429 and 5xx (and 408, 409), a retryable in-band error, connection failures and
        timeouts. No: other 4xx, anything else of the SDK's. None for an exception neither the SDK
        nor its transport raised."""
        import sys

        if "openai" not in sys.modules:  # never imported (or not installed): none of its exceptions exists
            return None
        import httpx2
        import openai

        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            if status == 429 or status >= 500:
                return True, retry_after(exc.response)
            return status in (408, 409), None
        if isinstance(exc, (openai.APIConnectionError, httpx2.TransportError)):
            return True, None
        if type(exc) is openai.APIError:
            return (exc.code in IN_BAND_RETRYABLE or exc.type in IN_BAND_RETRYABLE), None
        if isinstance(exc, openai.OpenAIError):
            return False, None
        return None
