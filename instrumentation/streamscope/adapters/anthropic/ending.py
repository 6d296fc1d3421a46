"""How an exception ends an Anthropic stream, and the helpers' questions about its events.

`ending` gives the record its end, error type and budget; `failure` says what an exception means
in failure codes, for the one decision on retries and codes (`adapters.providers.retry_decision`).
Bedrock's in-band exceptions (its event-stream exception frames, raised as API errors after the
200) count as the statuses AWS documents for them.
"""

from __future__ import annotations

from typing import Any

from streamscope.adapters.stainless.client import sends_when_called as client_sends
from streamscope.adapters.stainless.ending import Ending, transport_failure
from streamscope.adapters.stainless.ending import ending as stainless_ending
from streamscope.adapters.stainless.parsing import retry_after
from streamscope.adapters.stainless.timeouts import timeout_class
from streamscope.core import failures
from streamscope.core.errors import SDKTimeout, StreamTimeout
from streamscope.core.failures import Failure

IN_BAND_STATUS = {
    # Anthropic's error types, by the status each stands for when it is not in the stream.
    "invalid_request_error": 400, "authentication_error": 401, "billing_error": 402, "permission_error": 403,
    "not_found_error": 404, "request_too_large": 413, "rate_limit_error": 429, "api_error": 500,
    "timeout_error": 504, "overloaded_error": 529,
    # Bedrock's exception frames, by the status AWS documents for each.
    "validationException": 400, "throttlingException": 429, "internalServerException": 500,
    "modelStreamErrorException": 500, "serviceUnavailableException": 503,
}
"""In-band error types (after the 200) by the HTTP status they stand for: the failure code and the
retry decision follow from it (`failures.for_status`)."""


def ending(exc: BaseException) -> Ending:
    """(end, error type, budget fired) for an exception that ended a stream."""
    import anthropic

    return stainless_ending(exc, anthropic.APIConnectionError, _api_error_type)


def _api_error_type(exc: BaseException) -> str | None:
    """An API error's type (an in-band one's from its body: `overloaded_error`), else its status."""
    import anthropic

    if isinstance(exc, anthropic.APIStatusError):
        kind = error_type(exc)
        return kind if kind is not None else str(exc.status_code)
    return None


def error_type(exc: Any) -> str | None:
    """An API error's type (`overloaded_error`): the SDK's `.type` where it has one (anthropic >= 1),
    else read from the error's body, `{"type": "error", "error": {"type": ...}}` (0.x)."""
    kind = getattr(exc, "type", None)
    if isinstance(kind, str) and kind:
        return kind
    body = getattr(exc, "body", None)
    inner = body.get("error") if isinstance(body, dict) else None
    kind = inner.get("type") if isinstance(inner, dict) else None
    return kind if isinstance(kind, str) and kind else None


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
    def starts_tool_call(event: Any) -> bool:
        """A `tool_use` block starting (the caller's tools, or the server's: web search, MCP, ...)."""
        if getattr(event, "type", None) != "content_block_start":
            return False
        kind = getattr(getattr(event, "content_block", None), "type", None)
        return isinstance(kind, str) and kind.endswith("tool_use")

    @staticmethod
    def sends_when_called(obj: Any) -> bool | None:
        """For an `anthropic` client: True for a sync one (a call sends), False for an async one."""
        from anthropic import _base_client

        return client_sends(obj, _base_client)

    @property
    def timeout_class(self) -> type[SDKTimeout] | None:
        """What a budget's firing raises into anthropic callers (`timeout_class()`)."""
        return timeout_class("anthropic")

    @staticmethod
    def failure(exc: BaseException) -> Failure | None:
        """A budget's firing first (also an `APITimeoutError` here, never a read timeout); an HTTP
        error by its status; an in-band error (after the 200) by its type's status; a transport
        failure: a read timeout, else unreachable. Anything else of the SDK's: internal. None for
        an exception neither the SDK nor its transport raised."""
        if isinstance(exc, StreamTimeout):
            return failures.budget_fired(exc)
        import anthropic

        if isinstance(exc, anthropic.APIStatusError):
            status = exc.status_code
            if status == 200:
                kind = error_type(exc)
                return failures.in_band(IN_BAND_STATUS.get(kind) if kind is not None else None)
            return failures.for_status(status, retry_after(exc.response))
        found = transport_failure(exc, anthropic.APIConnectionError)
        if found is not None:
            return found
        return failures.INTERNAL if isinstance(exc, anthropic.AnthropicError) else None
