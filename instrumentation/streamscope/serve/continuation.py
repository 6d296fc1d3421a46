"""Continuing a relayed answer from its partial text, when the stream fails mid-prose.

Once tokens have reached the browser, a failure has four answers: fail clearly (`error`, partial),
resume from a buffer (`resume=`, for a browser that dropped), regenerate, or continue: start a new
request with the answer so far and ask the model to carry on. The last suits plain prose only, so
the relay continues (`relay(..., continuation=...)`) only when all of this holds (`refusal`):

* the failure is one a new request can fix: a stall (the idle or first-token budget, a read
  timeout), the provider overloaded or failing (`upstream_unavailable`, `rate_limited`), the
  connection cut (`upstream_unreachable`). Never the caller's deadline, a refusal or `max_tokens`
  (those end normally, with their finish reason), a browser that left, or streamscope's own error;
* no tool call started: a half-streamed call is not a call, and guessing one can do harm. It is
  discarded and the failure is the browser's, as without continuation;
* the request asked for no structured output (JSON): a truncated object is not repaired;
* fewer than `continuations` continuations were made for this request.

The partial text is cut back to its last clean sentence end (`trim_to_sentence`): the browser is
told how many characters to drop (the `seam` event) so the page shows no half sentence twice.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.trace import NonRecordingSpan, Span, SpanContext, get_current_span

from streamscope.adapters import providers
from streamscope.adapters.providers import retry_decision
from streamscope.core.attributes import OUTPUT_TYPE
from streamscope.core.calls import Call, cost_of
from streamscope.core.errors import StreamTimeout
from streamscope.core.failures import Failure
from streamscope.helpers.retry import Backoff

from .source import Source

CONTINUABLE = frozenset({"upstream_timeout", "upstream_unavailable", "upstream_unreachable", "rate_limited"})
"""The failure codes a new request can fix (a deadline firing aside: it is the caller's time)."""
DEFAULT_CONTINUATIONS = 2
"""Each continuation sends the prompt and the partial answer again (its input grows) and adds a seam
the reader may notice: two cover a transient failure and one more; a provider failing a third time
for one answer is degraded, and an honest `error` serves the page better."""
INSTRUCTION = "Continue exactly where you stopped. Do not repeat earlier text."
_SENTENCE_END = re.compile(r"[.!?…][)\"'\]’”]*(?=\s|$)|\n[ \t]*\n")


def trim_to_sentence(text: str) -> str:
    """`text` up to its last clean sentence end (`.`, `!`, `?` before a space or the end, or a
    paragraph break), '' where it has none: what a continuation carries on from."""
    ends = [found.end() for found in _SENTENCE_END.finditer(text)]
    return text[: ends[-1]] if ends else ""


def continuation_messages(messages: Sequence[Mapping[str, Any]], partial: str, *,
                          instruction: str = INSTRUCTION) -> list[dict[str, Any]]:
    """The messages of a continuation request: the conversation as sent, the answer so far as the
    assistant's turn, then the instruction to carry on (Anthropic's Messages and OpenAI's Chat
    Completions take this shape). With no partial text, the conversation as sent."""
    made = [dict(m) for m in messages]
    if partial:
        made += [{"role": "assistant", "content": partial}, {"role": "user", "content": instruction}]
    return made


def refusal(failure: Failure | None, exc: BaseException, *, tool_call: bool, structured: bool, made: int,
            allowed: int) -> str | None:
    """Why this failure is not continued (None: it is): `not_continuable`, `deadline`,
    `tool_call`, `structured_output` or `limit`, the first that applies."""
    if failure is None or failure.code not in CONTINUABLE:
        return "not_continuable"
    if isinstance(exc, StreamTimeout) and exc.budget == "deadline":
        return "deadline"
    if tool_call:
        return "tool_call"
    if structured:
        return "structured_output"
    if made >= allowed:
        return "limit"
    return None


class Chain:
    """The retry lines of one relayed request, the first and one per continuation, as one line to
    the relay and its generation: the current attempt's `call`, the `cost` and `attempts` of all."""

    def __init__(self, first: Any) -> None:
        self.lines = [first]

    @property
    def call(self) -> Call | None:
        return self.lines[-1].call  # type: ignore[no-any-return]

    @property
    def cost(self) -> float | None:
        return cost_of([call for line in self.lines for call in line.calls])

    @property
    def attempts(self) -> int:
        return sum(line.attempts for line in self.lines)

    async def close(self) -> None:
        await self.lines[-1].close()


class Continuing:
    """One relayed request's continuations (`relay(..., continuation=...)`): the text its `token`
    events carried to the browser, whether a tool call started, and the next line when a failure
    is continued. `continuation(partial)` opens the stream that carries on from `partial`."""

    def __init__(self, continuation: Callable[[str], Any], allowed: int, attempts: int,
                 backoff: Backoff | None) -> None:
        self.continuation = continuation
        self.allowed = allowed
        self.attempts = attempts
        self.backoff = backoff
        self.made = 0
        self.refused: str | None = None
        """Why the last failure was not continued (`refusal`), for the record."""
        self.text: list[str] = []
        self.tool_call = False
        self.first: SpanContext | None = None
        """The span context of the answer's first call: the parent of its continuations' calls."""

    def parent(self) -> Span:
        """The span a continuation's calls start under: the current one where there is one (the
        request's, from a server instrumentation), else the answer's first call's."""
        current = get_current_span()
        if current.get_span_context().is_valid or self.first is None:
            return current
        return NonRecordingSpan(self.first)

    def saw(self, event: Any, sent: Iterable[tuple[str, Mapping[str, Any]]]) -> None:
        """One provider event and what the relay sent for it."""
        if not self.tool_call:
            helpers = providers.helpers_for(event)
            self.tool_call = helpers is not None and helpers.starts_tool_call(event)
        for name, data in sent:
            if name == "token" and isinstance(text := data.get("text"), str):
                self.text.append(text)

    def next(self, exc: BaseException, chain: Chain) -> tuple[int, AsyncIterator[Any]] | None:
        """After `exc` ended the current line: (the characters the page drops at the seam, the next
        line's events), or None where it is not continued (`refused` says why)."""
        call = chain.call
        if call is None:  # not observed (the instrumentation off): what it asked for is not known
            self.refused = "unobserved"
            return None
        if self.first is None:
            found = call.span_context
            self.first = found if isinstance(found, SpanContext) and found.is_valid else None
        structured = dict(call.recorder.request.attributes).get(OUTPUT_TYPE) == "json"
        self.refused = refusal(retry_decision(exc), exc, tool_call=self.tool_call, structured=structured,
                               made=self.made, allowed=self.allowed)
        if self.refused is not None:
            return None
        text = "".join(self.text)
        kept = trim_to_sentence(text)
        self.text = [kept]
        self.made += 1
        line = Source(lambda: self.continuation(kept), self.attempts, self.backoff).line
        chain.lines.append(line)
        return len(text) - len(kept), line.__aiter__()
