"""Named scenarios shared by the demo, the tests and the benchmarks.

Times are seconds at ``time_scale=1``. Where a scenario's meaning depends on the request
(``max_tokens``, a thinking budget), its comment says what the caller should send.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .anthropic_streams import ThinkingSpec, error_event, message_stream
from .content import TextSpec, ToolUseSpec
from .steps import Cut, HttpError, Ping, Raw, Scenario, Silence, Step, from_sse_file, pings


def words(text: str) -> list[str]:
    """Split text into word-sized chunks that join back to it, like text_delta chunks."""
    return re.findall(r"\s*\S+", text)


ANSWER = (
    "Streams fail in ways a single status code cannot describe: they stall, they get cut, "
    "they stop at the token limit, or they end without the final event."
)
LONG = " ".join([ANSWER] * 8)
THOUGHTS = [
    "The user asks how streaming fails.",
    " I should list the failure modes:",
    " stalls, cuts, truncation,",
    " and missing final events.",
    " Keep it to one sentence.",
]
OVERLOADED_529 = HttpError(529, "overloaded_error", "Overloaded", {"retry-after": "0"})
# The errors a service must handle before any stream starts, with the API's own texts, so a test
# can check that none of them reaches the service's users.
RATE_LIMITED_429 = HttpError(
    429, "rate_limit_error", "This request would exceed the rate limit for your organization (org-sim) of 50 "
    "requests per minute. For details, refer to: https://docs.claude.com/en/api/rate-limits. You can see the "
    "response headers for current usage. Please reduce the prompt length or the maximum tokens requested, or try "
    "again later.", {"retry-after": "1"},
)
API_ERROR_500 = HttpError(500, "api_error", "An unexpected error has occurred internal to Anthropic's systems.")
INVALID_REQUEST_400 = HttpError(400, "invalid_request_error", "prompt is too long: 215312 tokens > 200000 maximum")

_complete = message_stream(
    blocks=[TextSpec(["Hello", "! How", " can I", " help", " you today?"], interval=0.02)],
    input_tokens=12,
    output_tokens=10,
)
_three_words = ["Streams", " fail", " in"]
PROSE = ["Streams fail", " in two ways.", " Some stop", " before the first token.", " Others stop", " half",
         " way through a"]
"""Two sentences and half a third: what a continuation trims back to "... first token."."""
PROSE_REST = [" Others stop half", " way through an answer,", " after the page has shown part of it."]


def _timed(chunks: Sequence[str | Step], interval: float, first_delay: float | None = None) -> list[Step]:
    """Streams with exact timings: framing events with no delay, chunks `interval` s apart."""
    return message_stream(blocks=[TextSpec(chunks, interval=interval, first_delay=first_delay)])


def _thought_answer(thinking: ThinkingSpec, thinking_tokens: int, *, first_delay: float = 0.1,
                    interval: float = 0.03, output_tokens: int | None = None) -> list[Step]:
    """A thinking block, then ANSWER word by word."""
    answer = TextSpec(words(ANSWER), first_delay=first_delay, interval=interval)
    return message_stream(thinking=thinking, blocks=[answer], thinking_tokens=thinking_tokens,
                          output_tokens=output_tokens)


_scenarios = [
    # The Anthropic docs' own streams, replayed byte for byte.
    Scenario.single("basic_text", from_sse_file("docs_basic_text.sse", delay=0.02)),
    Scenario.single("docs_thinking", from_sse_file("docs_extended_thinking.sse", delay=0.02)),  # no usage at all
    Scenario.single("docs_overloaded", from_sse_file("docs_error_overloaded.sse")),
    Scenario.single("complete", _complete),
    # First thinking delta at 0.3 s, signature at 0.5 s, first text at 0.6 s.
    Scenario.single("thinking", _thought_answer(ThinkingSpec(THOUGHTS, first_delay=0.3, duration=0.5), 120)),
    Scenario.single(
        "thinking_omitted", _thought_answer(ThinkingSpec(first_delay=0.3, duration=0.5, display="omitted"), 120)
    ),
    Scenario.single(
        "tool_use",
        message_stream(
            blocks=[
                TextSpec(["I'll check", " the weather."], interval=0.02),
                ToolUseSpec(
                    "get_weather",
                    ["", '{"location":', ' "San Fra', 'ncisco, CA"', ', "unit": "celsius"}'],
                    interval=0.02,
                ),
            ],
            stop_reason="tool_use",
            output_tokens=40,
        ),
    ),
    Scenario.single("long_answer", message_stream(blocks=[TextSpec(words(LONG), interval=0.005)])),
    # Send max_tokens=1024: the answer is cut at the limit.
    Scenario.single(
        "truncated",
        message_stream(
            blocks=[TextSpec(words(LONG)[:120], interval=0.005)], stop_reason="max_tokens", output_tokens=1024
        ),
    ),
    # Send max_tokens=1024 with thinking: the thinking spends it all, almost no text.
    Scenario.single(
        "budget_exhausted",
        message_stream(
            thinking=ThinkingSpec(THOUGHTS * 4, first_delay=0.1, duration=0.6),
            blocks=[TextSpec(["Str"], first_delay=0.02)],
            stop_reason="max_tokens",
            thinking_tokens=1020,
            output_tokens=1024,
        ),
    ),
    # Send thinking budget_tokens=4096 (max_tokens=8192): thinking used >= 97 % of the budget,
    # yet the answer ends normally, so nothing says it was cut short.
    Scenario.single(
        "silently_unverified",
        _thought_answer(ThinkingSpec(THOUGHTS, first_delay=0.1, duration=0.4), 4000, first_delay=0.05,
                        interval=0.01, output_tokens=4040),
    ),
    Scenario.single(
        "refused",
        message_stream(
            blocks=[TextSpec(["I can't", " help with", " that."], interval=0.02)],
            stop_reason="refusal",
            stop_details={"type": "refusal", "category": None, "explanation": None},
        ),
    ),
    Scenario.single(
        "inband_error",
        message_stream(blocks=[TextSpec(_three_words, interval=0.03)], interrupt=[error_event(delay=0.05)]),
    ),
    Scenario.single(
        "cut_connection", message_stream(blocks=[TextSpec(_three_words, interval=0.03)], interrupt=[Cut(0.05)])
    ),
    Scenario.single("incomplete", message_stream(blocks=[TextSpec(_three_words, interval=0.03)], final=False)),
    # A continuation's two requests: the first fails mid-prose, every later one answers.
    Scenario("prose_overloaded", [
        message_stream(blocks=[TextSpec(PROSE, interval=0.02)], interrupt=[error_event(delay=0.05)]),
        message_stream(blocks=[TextSpec(PROSE_REST, interval=0.02)]),
    ]),
    Scenario.single("tool_call_cut", message_stream(blocks=[
        TextSpec(["I'll look", " that up."], interval=0.02),
        ToolUseSpec("get_weather", ["", '{"location":', ' "San Fra'], interval=0.02),
    ], interrupt=[Cut(0.05)])),
    # 3 text deltas, then only pings every 0.2 s for 10 s, then the end of the answer.
    Scenario.single(
        "pinging_stall",
        message_stream(blocks=[TextSpec([*_three_words, *pings(0.2, 50), " ways."], interval=0.05)]),
    ),
    # Some text, then nothing at all for 10 s.
    Scenario.single(
        "silent_stall",
        message_stream(blocks=[TextSpec([*_three_words, Silence(10.0), " ways."], interval=0.05)]),
    ),
    # Nothing at all (not even message_start) for 5 s.
    Scenario.single(
        "silent_start", message_stream(first_event_delay=5.0, blocks=[TextSpec(_three_words, interval=0.05)])
    ),
    Scenario.single("http_529", [OVERLOADED_529]),
    Scenario.single("http_429", [RATE_LIMITED_429]),  # retry-after: 1
    Scenario.single("http_500", [API_ERROR_500]),
    Scenario.single("http_400", [INVALID_REQUEST_400]),  # not retryable: the request itself is refused
    Scenario("http_529_then_ok", [[OVERLOADED_529], _complete]),
    Scenario.single(
        "unknown_events",
        message_stream(blocks=[TextSpec(["Hello", " there."], interval=0.02)], unknown_events=True),
    ),
    Scenario.single(
        "malformed_json",
        message_stream(
            blocks=[
                TextSpec(["Hello", Raw(b'event: content_block_delta\ndata: {"type": "content_block_delta", "ind\n\n')])
            ]
        ),
    ),
    # Thinking for ~2 s before any text (deadline tests).
    Scenario.single("slow_thinking", _thought_answer(ThinkingSpec(THOUGHTS * 2, first_delay=0.2, duration=2.0), 400)),
    # First text at 0.2 s, then a delta every 0.1 s for ~3 s.
    Scenario.single("slow_answer", message_stream(blocks=[TextSpec(words(LONG)[:30], first_delay=0.2, interval=0.1)])),
    # Four streams with exact timings (pings before the text, a short pinging stall, a steady
    # answer, a 5 s silent start): what the timing tests measure against.
    Scenario.single("timed_thinking", _timed([Ping(0.2), Ping(0.2), *words(ANSWER)[:5]], interval=0.1)),
    Scenario.single("timed_pinging_stall", _timed([*_three_words, *pings(0.2, 10)], interval=0.05)),
    Scenario.single("timed_long_answer", _timed(words(LONG)[:30], interval=0.05)),
    Scenario.single("timed_silent_start", _timed(["Hello."], interval=0.05, first_delay=5.0)),
]

SCENARIOS: dict[str, Scenario] = {scenario.name: scenario for scenario in _scenarios}

DESCRIPTIONS: dict[str, str] = {
    "basic_text": "the basic text stream of Anthropic's streaming docs, byte for byte",
    "docs_thinking": "the extended-thinking stream of Anthropic's streaming docs (no usage at all)",
    "docs_overloaded": "the overloaded-error stream of Anthropic's streaming docs",
    "complete": "a short answer, text every 20 ms",
    "thinking": "0.5 s of thinking, then the answer",
    "thinking_omitted": "0.5 s of thinking with display omitted, then the answer",
    "tool_use": "text, then a tool_use block whose input arrives as partial JSON",
    "long_answer": "a long answer, text every 5 ms",
    "truncated": "an answer cut at max_tokens (send max_tokens=1024)",
    "budget_exhausted": "thinking spends the whole max_tokens, almost no text",
    "silently_unverified": "thinking uses >= 97 % of budget_tokens=4096, then a normal end",
    "refused": "a refusal (stop_reason refusal)",
    "inband_error": "three words, then an overloaded_error event inside the 200 stream",
    "cut_connection": "three words, then the TCP connection drops",
    "incomplete": "three words, then the body ends without message_delta/message_stop",
    "prose_overloaded": "two and a half sentences, then an overloaded_error event; later requests answer",
    "tool_call_cut": "a sentence, then a tool_use block cut mid-JSON by the TCP connection dropping",
    "pinging_stall": "three words, then only pings every 0.2 s for 10 s, then the end",
    "silent_stall": "three words, then nothing at all for 10 s, then the end",
    "silent_start": "nothing at all (not even the first event) for 5 s",
    "http_529": "HTTP 529 overloaded_error before any stream (retry-after: 0)",
    "http_429": "HTTP 429 rate_limit_error before any stream (retry-after: 1)",
    "http_500": "HTTP 500 api_error before any stream",
    "http_400": "HTTP 400 invalid_request_error (prompt too long) before any stream",
    "http_529_then_ok": "HTTP 529 on the first attempt, a normal answer on the retry",
    "unknown_events": "events of a type the SDK does not know (clients must ignore them)",
    "malformed_json": "an event whose JSON is cut in half",
    "slow_thinking": "thinking for ~2 s before any text",
    "slow_answer": "first text at 0.2 s, then a delta every 0.1 s for ~3 s",
    "timed_thinking": "two pings 0.2 s apart, then text every 0.1 s",
    "timed_pinging_stall": "three words, then ten pings 0.2 s apart",
    "timed_long_answer": "thirty words 0.05 s apart",
    "timed_silent_start": "5 s of silence, then one word",
}
"""One line per scenario, for `streamscope simulate --list`."""
