"""How an exception ends an OpenAI stream, and the helpers' questions about its events.

`ending` gives the record its end, error type and budget; `failure` says what an exception means
in failure codes, for the one decision on retries and codes (`adapters.providers.retry_decision`). An
in-band error after the 200 is an `APIError` with no status (Chat Completions' `{"error": ...}`
chunk, the Responses API's live `error` event); a cut is `APIConnectionError`, a read timeout
`APITimeoutError`.
"""

from __future__ import annotations

from typing import Any

from streamscope.adapters.stainless.client import sends_when_called as client_sends
from streamscope.adapters.stainless.ending import Ending, transport_failure
from streamscope.adapters.stainless.ending import ending as stainless_ending
from streamscope.adapters.stainless.parsing import retry_after
from streamscope.adapters.stainless.timeouts import timeout_class
from streamscope.core import failures
from streamscope.core.errors import SDKTimeout, StreamTimeout, exception_type
from streamscope.core.failures import Failure

IN_BAND_STATUS = {
    "server_error": 500, "overloaded_error": 529, "rate_limit_exceeded": 429, "rate_limit_error": 429,
    "invalid_request_error": 400, "invalid_prompt": 400, "context_length_exceeded": 400,
    "insufficient_quota": 429, "vector_store_timeout": 504,
}
"""In-band error codes or types (after the 200: Chat Completions' error chunk, the Responses API's
`error` and `response.failed`) by the HTTP status they stand for."""


def in_band_failure(*names: str | None) -> Failure:
    """An in-band error by its code, else its type (the first of `names` the table knows)."""
    for name in names:
        if name in IN_BAND_STATUS:
            return failures.in_band(IN_BAND_STATUS[name])
    return failures.in_band(None)


CLIENT_TOOLS = frozenset({"function_call", "custom_tool_call", "computer_call", "local_shell_call"})
"""Output items that hand a tool call to the caller: a response that has one finished `tool_call`."""
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
    """An API error's code or type; else its status, or its class (`openai.APIError`) for an in-band
    one (after the 200)."""
    import openai

    if isinstance(exc, openai.APIStatusError):
        return _error_type(exc) or str(exc.status_code)
    if type(exc) is openai.APIError:
        return _error_type(exc) or exception_type(exc)
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
    def starts_tool_call(event: Any) -> bool:
        """A tool call in a chat chunk (raw, or the `stream()` helper's `chunk` event), a helper's
        tool-call event, or a Responses output item that is a call or its arguments."""
        kind = getattr(event, "type", None)
        if kind is None or kind == "chunk":
            chunk = event if kind is None else getattr(event, "chunk", None)
            return any(getattr(getattr(c, "delta", None), "tool_calls", None)
                       for c in getattr(chunk, "choices", None) or ())
        if not isinstance(kind, str):
            return False
        if kind.startswith("tool_calls.") or kind.endswith(("call_arguments.delta", "call_input.delta")):
            return True
        return kind == "response.output_item.added" and getattr(getattr(event, "item", None), "type",
                                                                 None) in CLIENT_TOOLS

    @staticmethod
    def sends_when_called(obj: Any) -> bool | None:
        """For an `openai` client: True for a sync one (a call sends), False for an async one."""
        from openai import _base_client

        return client_sends(obj, _base_client)

    @property
    def timeout_class(self) -> type[SDKTimeout] | None:
        """What a budget's firing raises into openai callers (`timeout_class()`)."""
        return timeout_class("openai")

    @staticmethod
    def failure(exc: BaseException) -> Failure | None:
        """A budget's firing first (also an `APITimeoutError` here, never a read timeout); an HTTP
        error by its status; an in-band error by its code or type; a transport failure: a read
        timeout, else unreachable. Anything else of the SDK's: internal. None for an exception
        neither the SDK nor its transport raised."""
        import sys

        if isinstance(exc, StreamTimeout):
            return failures.budget_fired(exc)
        if "openai" not in sys.modules:  # never imported (or not installed): none of its exceptions exists
            return None
        import openai

        if isinstance(exc, openai.APIStatusError):
            return failures.for_status(exc.status_code, retry_after(exc.response))
        found = transport_failure(exc, openai.APIConnectionError)
        if found is not None:
            return found
        if type(exc) is openai.APIError:
            return in_band_failure(exc.code, exc.type)
        return failures.INTERNAL if isinstance(exc, openai.OpenAIError) else None
