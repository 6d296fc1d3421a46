"""Named OpenAI scenarios: ``chat_*`` for ``/v1/chat/completions``, ``responses_*`` for
``/v1/responses``, ``openai_http_*`` for either (an error status comes before any body).

Prefixed so they merge with the Anthropic catalog (``Simulator()`` serves both). Times are
seconds at ``time_scale=1``; where a scenario's meaning depends on the request, its comment says
what to send.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from .catalog import ANSWER, LONG, words
from .content import TextSpec, ToolUseSpec
from .openai_streams import (
    SERVER_ERROR,
    OpenAIHttpError,
    ReasoningSpec,
    chat_error,
    chat_stream,
    responses_error,
    responses_stream,
)
from .steps import Cut, Scenario, Silence, Step

RATE_LIMITED_429 = OpenAIHttpError(
    429, "requests", "Rate limit reached for gpt-simulator in organization org-sim on requests per min (RPM): "
    "Limit 3, Used 3, Requested 1. Please try again in 1s.", {"retry-after": "1"}, code="rate_limit_exceeded",
)
SERVER_ERROR_500 = OpenAIHttpError(500, "server_error", SERVER_ERROR)
# OpenAI has no 529: an overloaded API answers 503.
OVERLOADED_503 = OpenAIHttpError(503, "server_error", "The engine is currently overloaded, please try again later.")
CONTEXT_TOO_LONG_400 = OpenAIHttpError(
    400, "invalid_request_error", "This model's maximum context length is 128000 tokens. However, your messages "
    "resulted in 215312 tokens. Please reduce the length of the messages.",
    code="context_length_exceeded", param="messages",
)

_hello = TextSpec(["Hello", "! How", " can I", " help", " you today?"], interval=0.02)
_three = ["Streams", " fail", " in"]
_refusal = TextSpec(["I'm sorry,", " but I can't", " help with that."], interval=0.02)
_weather = ToolUseSpec("get_weather", ['{"location":', ' "San Fra', 'ncisco, CA"', ', "unit": "celsius"}'],
                       interval=0.02, id="call_sim_weather")
_summary = ["**Listing failure modes**\n\n", "The user asks how streams fail.", " Stalls, cuts, truncation,",
            " and missing final events."]


def _timed(chunks: Sequence[str | Step], interval: float = 0.03, first_delay: float | None = None) -> TextSpec:
    return TextSpec(chunks, interval=interval, first_delay=first_delay)


_chat = [
    Scenario.single("chat_complete", chat_stream(text=_hello, prompt_tokens=12, completion_tokens=10)),
    # A reasoning model over Chat Completions: 1 s of silence (no byte at all), then the answer.
    Scenario.single("chat_reasoning", chat_stream(first_event_delay=1.0, text=_timed(words(ANSWER), first_delay=0.05),
                                                  reasoning_tokens=256)),
    # Send max_completion_tokens=1024: the answer is cut at the limit.
    Scenario.single("chat_truncated", chat_stream(text=_timed(words(LONG)[:120], 0.005), finish_reason="length",
                                                  completion_tokens=1024)),
    # Send max_completion_tokens=1024 to a reasoning model: the reasoning spends it all, no text.
    Scenario.single("chat_budget_exhausted", chat_stream(first_event_delay=0.5, finish_reason="length",
                                                         completion_tokens=1024, reasoning_tokens=1024)),
    Scenario.single("chat_refusal", chat_stream(refusal=_refusal)),
    Scenario.single("chat_content_filter", chat_stream(text=_timed(_three), finish_reason="content_filter")),
    Scenario.single("chat_tool_call", chat_stream(tool_calls=[_weather], finish_reason="tool_calls",
                                                  completion_tokens=18)),
    Scenario.single("chat_inband_error", chat_stream(text=_timed(_three), interrupt=[chat_error(delay=0.05)])),
    Scenario.single("chat_cut_connection", chat_stream(text=_timed(_three), interrupt=[Cut(0.05)])),
    # Three words, then the body ends: no finish_reason, no usage, no [DONE].
    Scenario.single("chat_incomplete", chat_stream(text=_timed(_three), final=False)),
    # Three words, then nothing at all for 10 s, then the end of the answer.
    Scenario.single("chat_silent_stall", chat_stream(text=_timed([*_three, Silence(10.0), " ways."], 0.05))),
    # Nothing at all (not even the role chunk) for 5 s.
    Scenario.single("chat_silent_start", chat_stream(first_event_delay=5.0, text=_timed(_three, 0.05))),
    # No usage chunk even when the request asks for one.
    Scenario.single("chat_no_usage", chat_stream(text=_hello, include_usage=False)),
]

_responses = [
    Scenario.single("responses_complete", responses_stream(text=_hello, input_tokens=12, output_tokens=10)),
    # Reasoning with a summary (first summary delta at 0.3 s, item closed at 0.5 s), then the answer.
    Scenario.single("responses_reasoning", responses_stream(
        reasoning=ReasoningSpec(_summary, duration=0.5, first_delay=0.3),
        text=_timed(words(ANSWER), first_delay=0.1), reasoning_tokens=120)),
    # Reasoning without a summary: the reasoning item opens, 1 s of silence, then the answer.
    Scenario.single("responses_reasoning_silent", responses_stream(
        reasoning=ReasoningSpec((), duration=1.0), text=_timed(words(ANSWER), first_delay=0.1), reasoning_tokens=256)),
    # Send max_output_tokens=1024: response.incomplete, reason max_output_tokens.
    Scenario.single("responses_truncated", responses_stream(
        text=_timed(words(LONG)[:120], 0.005), status="incomplete", output_tokens=1024)),
    # Send max_output_tokens=1024: the reasoning spends it all, no message (output == reasoning tokens).
    Scenario.single("responses_budget_exhausted", responses_stream(
        reasoning=ReasoningSpec(_summary * 3, duration=0.6), status="incomplete",
        output_tokens=1024, reasoning_tokens=1024)),
    Scenario.single("responses_refusal", responses_stream(refusal=_refusal)),
    Scenario.single("responses_content_filter", responses_stream(
        text=_timed(_three), status="incomplete", incomplete_reason="content_filter")),
    Scenario.single("responses_tool_call", responses_stream(function_calls=[_weather], output_tokens=18)),
    # Three words, then an in-band error event as api.openai.com sends it (the SDK raises APIError).
    Scenario.single("responses_inband_error", responses_stream(
        text=_timed(_three), interrupt=[responses_error(delay=0.05)])),
    # The same error as documented (flat fields): the SDK yields it as an event, raises nothing.
    Scenario.single("responses_inband_error_documented", responses_stream(
        text=_timed(_three), interrupt=[responses_error(shape="documented", delay=0.05)])),
    # Three words, then response.failed (server_error).
    Scenario.single("responses_failed", responses_stream(text=_timed(_three), status="failed")),
    Scenario.single("responses_cut_connection", responses_stream(text=_timed(_three), interrupt=[Cut(0.05)])),
    Scenario.single("responses_incomplete", responses_stream(text=_timed(_three), final=False)),
    Scenario.single("responses_silent_stall", responses_stream(
        text=_timed([*_three, Silence(10.0), " ways."], 0.05))),
    Scenario.single("responses_silent_start", responses_stream(first_event_delay=5.0, text=_timed(_three, 0.05))),
]

_http = [
    Scenario.single("openai_http_429", [RATE_LIMITED_429]),  # retry-after: 1
    Scenario.single("openai_http_500", [SERVER_ERROR_500]),
    Scenario.single("openai_http_503", [OVERLOADED_503]),
    Scenario.single("openai_http_400", [CONTEXT_TOO_LONG_400]),  # not retryable: the request itself is refused
    # No retry-after: the SDK's retry comes after its own short backoff.
    Scenario("chat_http_429_then_ok", [[replace(RATE_LIMITED_429, headers={})], chat_stream(text=_hello)]),
]

OPENAI_SCENARIOS: dict[str, Scenario] = {s.name: s for s in [*_chat, *_responses, *_http]}

OPENAI_DESCRIPTIONS: dict[str, str] = {
    "chat_complete": "a short answer, text every 20 ms",
    "chat_reasoning": "1 s of silence (reasoning shows only as reasoning_tokens), then the answer",
    "chat_truncated": "an answer cut at the limit: finish_reason length (send max_completion_tokens=1024)",
    "chat_budget_exhausted": "reasoning spends every token, no text: finish_reason length",
    "chat_refusal": "a refusal (delta.refusal)",
    "chat_content_filter": "three words, then finish_reason content_filter",
    "chat_tool_call": "a get_weather call whose arguments arrive in fragments",
    "chat_inband_error": "three words, then an error inside the 200 stream",
    "chat_cut_connection": "three words, then the TCP connection drops",
    "chat_incomplete": "three words, then the body ends: no finish_reason, no usage, no [DONE]",
    "chat_silent_stall": "three words, then nothing at all for 10 s, then the end",
    "chat_silent_start": "nothing at all (not even the role chunk) for 5 s",
    "chat_no_usage": "a short answer without a usage chunk, even when asked",
    "responses_complete": "a short answer, text every 20 ms",
    "responses_reasoning": "a reasoning summary streamed over 0.5 s, then the answer",
    "responses_reasoning_silent": "a reasoning item with no summary, 1 s of silence, then the answer",
    "responses_truncated": "an answer cut at the limit: response.incomplete (send max_output_tokens=1024)",
    "responses_budget_exhausted": "reasoning spends every token, no message: response.incomplete",
    "responses_refusal": "a refusal (response.refusal.delta)",
    "responses_content_filter": "three words, then response.incomplete (content_filter)",
    "responses_tool_call": "a get_weather function call whose arguments arrive in fragments",
    "responses_inband_error": "three words, then an error event as the API sends it (the SDK raises)",
    "responses_inband_error_documented": "three words, then an error event with the documented flat fields",
    "responses_failed": "three words, then response.failed (server_error)",
    "responses_cut_connection": "three words, then the TCP connection drops",
    "responses_incomplete": "three words, then the body ends with no terminal event",
    "responses_silent_stall": "three words, then nothing at all for 10 s, then the end",
    "responses_silent_start": "nothing at all for 5 s",
    "openai_http_429": "HTTP 429 rate_limit_exceeded before any stream (retry-after: 1)",
    "openai_http_500": "HTTP 500 server_error before any stream",
    "openai_http_503": "HTTP 503 server_error (overloaded; OpenAI has no 529) before any stream",
    "openai_http_400": "HTTP 400 invalid_request_error (context_length_exceeded) before any stream",
    "chat_http_429_then_ok": "HTTP 429 on the first attempt, a normal answer on the retry",
}
"""One line per scenario, for `streamscope simulate --list`."""
