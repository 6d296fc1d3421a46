"""The simulator's scripts for the frameworks matrix: five scenarios in each wire shape a framework
speaks, registered once per (framework, path) so each case's requests are counted on their own.

Shapes: `text` (Anthropic Messages, a text answer), `tool` (Anthropic Messages, the answer as a
forced tool call whose input is `{"answer": ...}`, as instructor asks for it), `runner` (Anthropic
Messages: a `lookup` tool call on the first request, the text answer on the second, as the SDK's tool
runner goes round), `chat` (OpenAI Chat Completions), `responses` (OpenAI Responses).

Scenarios: `healthy`, `stall` (three words, then no content for 10 s: pings on Anthropic, as its API
sends them; silence on OpenAI, which sends nothing), `thinking` (thinking or reasoning, then the
answer), `inband_error` (three words, then an error event inside the 200 stream: Anthropic's
`overloaded_error`, OpenAI's `server_error`, its overloaded engine's type) and `abandon` (a slow
answer, a word every 0.1 s for 3 s, that the caller leaves after a few words).
"""

from __future__ import annotations

from dataclasses import dataclass

from streamscope.simulator import (
    Scenario,
    TextSpec,
    ThinkingSpec,
    ToolUseSpec,
    error_event,
    message_stream,
    pings,
)
from streamscope.simulator.catalog import ANSWER, LONG, SCENARIOS, THOUGHTS, words
from streamscope.simulator.openai_catalog import OPENAI_SCENARIOS
from streamscope.simulator.openai_streams import (
    ReasoningSpec,
    chat_error,
    chat_stream,
    responses_error,
    responses_stream,
)

SCENARIOS_RUN = ("healthy", "stall", "thinking", "inband_error", "abandon")
SHAPES = ("text", "tool", "runner", "chat", "responses")

HELLO = "Hello! How can I help you today?"
THREE = "Streams fail in"
"""What the caller has when the stall starts, the in-band error arrives, or (abandon) it leaves."""
SLOW = words(LONG)[:30]
"""The abandoned answer: thirty words, one every 0.1 s."""
STALL = 10.0
"""How long the stall lasts before the rest of the answer would come (the budget must fire well inside it)."""
TOOL_NAME = "Answer"
"""The response model instructor is given (its tool is named after the class)."""
LOOKUP = "lookup"
"""The runner's tool: called once, on the first request."""


@dataclass(frozen=True)
class Expected:
    """What a scenario should give the caller and the span (for its shape)."""

    text: str
    """The answer text the caller should have when it stops (the partial text where it fails or leaves)."""
    error_type: str | None
    """`error.type` on the span of the request that fails."""
    klass: str
    fired: str | None


def expected(shape: str, scenario: str) -> Expected:
    openai = shape in ("chat", "responses")
    return {
        "healthy": Expected(HELLO, None, "complete", None),
        "thinking": Expected(ANSWER, None, "complete", None),
        "stall": Expected(THREE, "timeout", "stalled_mid_stream", "idle"),
        "inband_error": Expected(THREE, "server_error" if openai else "overloaded_error", "upstream_error", None),
        "abandon": Expected("", "cancelled", "cancelled", None),
    }[scenario]


def _fragments(text: list[str]) -> list[str]:
    """`{"answer": "<text>"}` as partial JSON fragments, one per word."""
    return ['{"answer": "', *text, '"}']


def _tool(chunks: list[str], *, interval: float = 0.02, first_delay: float | None = None) -> ToolUseSpec:
    return ToolUseSpec(TOOL_NAME, _fragments(chunks), interval=interval, first_delay=first_delay,
                       id="toolu_sim_answer")


def _lookup() -> list:
    """The runner's first turn: a short text, then a `lookup` call (stop reason `tool_use`)."""
    return message_stream(blocks=[TextSpec(["Let me", " look."], interval=0.02),
                                  ToolUseSpec(LOOKUP, ['{"topic":', ' "streams"}'], interval=0.02,
                                              id="toolu_sim_lookup")],
                          stop_reason="tool_use", output_tokens=20)


def _anthropic_text(scenario: str) -> list:
    return list({
        "healthy": SCENARIOS["complete"],
        "stall": SCENARIOS["pinging_stall"],
        "thinking": SCENARIOS["thinking"],
        "inband_error": SCENARIOS["inband_error"],
        "abandon": SCENARIOS["slow_answer"],
    }[scenario].steps_for(0))


def _anthropic_tool(scenario: str) -> list:
    hello, three = words(HELLO), words(THREE)
    if scenario == "healthy":
        return message_stream(blocks=[_tool(hello)], stop_reason="tool_use", output_tokens=20)
    if scenario == "stall":  # three fragments of the answer, then only pings
        return message_stream(blocks=[_tool(three, interval=0.05)], interrupt=[*pings(0.2, int(STALL / 0.2))])
    if scenario == "thinking":
        return message_stream(thinking=ThinkingSpec(THOUGHTS, first_delay=0.3, duration=0.5),
                              blocks=[_tool(words(ANSWER), interval=0.03, first_delay=0.1)],
                              stop_reason="tool_use", thinking_tokens=120)
    if scenario == "inband_error":
        return message_stream(blocks=[_tool(three, interval=0.03)], interrupt=[error_event(delay=0.05)])
    return message_stream(blocks=[_tool(SLOW, interval=0.1, first_delay=0.2)], stop_reason="tool_use")


def _chat(scenario: str) -> list:
    if scenario == "abandon":
        return chat_stream(text=TextSpec(SLOW, interval=0.1, first_delay=0.2))
    if scenario == "inband_error":  # OpenAI's overloaded engine, inside the stream
        return chat_stream(text=TextSpec(words(THREE), interval=0.03),
                           interrupt=[chat_error("The engine is currently overloaded, please try again later.",
                                                 delay=0.05)])
    return list(OPENAI_SCENARIOS[{"healthy": "chat_complete", "stall": "chat_silent_stall",
                                  "thinking": "chat_reasoning"}[scenario]].steps_for(0))


def _responses(scenario: str) -> list:
    if scenario == "abandon":
        return responses_stream(text=TextSpec(SLOW, interval=0.1, first_delay=0.2))
    if scenario == "inband_error":
        return responses_stream(text=TextSpec(words(THREE), interval=0.03),
                                interrupt=[responses_error(message="The engine is currently overloaded, please try "
                                                                   "again later.", delay=0.05)])
    if scenario == "thinking":
        return responses_stream(reasoning=ReasoningSpec(["Listing failure modes.", " Stalls, cuts."], duration=0.5,
                                                        first_delay=0.3),
                                text=TextSpec(words(ANSWER), interval=0.03, first_delay=0.1), reasoning_tokens=120)
    return list(OPENAI_SCENARIOS[{"healthy": "responses_complete", "stall": "responses_silent_stall"}[scenario]]
                .steps_for(0))


def attempts(shape: str, scenario: str) -> list[list]:
    """The scripts of one case, one per request (the last repeats)."""
    if shape == "text":
        return [_anthropic_text(scenario)]
    if shape == "tool":
        return [_anthropic_tool(scenario)]
    if shape == "runner":
        return [_lookup(), _anthropic_text(scenario)]
    if shape == "chat":
        return [_chat(scenario)]
    if shape == "responses":
        return [_responses(scenario)]
    raise ValueError(f"unknown shape {shape!r}")


def requests_expected(shape: str) -> int:
    """Provider requests one case makes: the runner's two turns, one otherwise."""
    return 2 if shape == "runner" else 1


def scenario_name(framework: str, path: str, scenario: str) -> str:
    return f"fw-{framework}-{path}-{scenario}"


def register(framework: str, path: str, shape: str) -> list[Scenario]:
    """One scenario per case of this (framework, path)."""
    return [Scenario(scenario_name(framework, path, scenario), attempts(shape, scenario))
            for scenario in SCENARIOS_RUN]

