"""The classifier: a pure function from a span's attributes to one class label.

It reads only exported attributes, so it gives the same label offline (on spans from a file)
as the instrumentation wrote live, and only normalised ones (the conventions' finish reasons,
streamscope's refusal and pause facts, timings, reasoning share), so it reads every provider's
spans alike: each adapter maps its own stop reasons. The rules are a decision table: the first
row that matches wins. `docs/classes.md` prints the same table.

It says what it does not know: `complete` (the only verified class) needs a normal end in the
attributes themselves (no `error.type`, no budget fired, and finish reasons the conventions
define), never "anything else". Attributes that say nothing of how the stream ended (an empty
mapping, a span cut by a crash, a file that lost its attributes, wrong types, a finish reason no
adapter maps) get the class of a stream that ended without its final event, `upstream_error`;
`missing()` names what they lack.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

LABELS = (
    "complete", "truncated", "budget_exhausted", "silently_unverified", "refused", "paused",
    "deadline_in_thinking", "deadline_in_answer", "stalled_before_first_content",
    "stalled_mid_stream", "upstream_error", "cancelled",
)
NEAR_EMPTY_ANSWER_CHARS = 100
"""Below this many visible characters an answer cut at a token limit is "next to none"
(about one sentence): the allowance went on thinking."""
SILENT_TOLERANCE = 0.05
"""Thinking that used at least 95 % of `budget_tokens` used "(nearly) its whole budget"."""
FINISH_REASONS = "gen_ai.response.finish_reasons"
NORMAL_FINISH = frozenset({"stop", "length", "tool_call", "content_filter"})
"""The conventions' finish reasons of a stream that ended normally (`error` is the one they give a
failure). Each adapter maps its provider's stop reasons to these; a reason it does not map passes
through as the provider wrote it, and is not one streamscope can vouch for."""
BUDGETS_FIRED = frozenset({"first_token", "idle", "deadline", "read_timeout"})
"""The values of `streamscope.budget.fired`."""


class Facts(NamedTuple):
    """What the rules look at, read once from the attributes."""

    fired: str | None
    error: str | None
    finish: str | None
    """The first of `gen_ai.response.finish_reasons` (`stop`, `length`, `content_filter`, ...)."""
    normal: bool
    """A normal end, as the attributes tell it: no `error.type`, no budget fired, and finish
    reasons (an array of strings) that are all among `NORMAL_FINISH`."""
    refusal: bool
    paused: bool
    content: bool
    answered: bool
    thought: bool
    text_chars: float
    thinking_share: float | None


def _num(value: Any) -> float | None:
    """A finite number, or None (exported attributes can hold anything)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def thinking_share(attributes: Mapping[str, Any]) -> float | None:
    """Reasoning tokens / budget_tokens: reported usage where present, else estimated as the
    thinking phase's duration times the stream's decode rate."""
    budget = _num(attributes.get("streamscope.thinking.budget_tokens"))
    if not budget or budget <= 0:
        return None
    used = _num(attributes.get("gen_ai.usage.reasoning.output_tokens"))
    if used is None:
        start = _num(attributes.get("streamscope.thinking.start"))
        end = _num(attributes.get("streamscope.thinking.end"))
        rate = _num(attributes.get("streamscope.decode_rate"))
        if start is None or end is None or rate is None:
            return None
        used = max(end - start, 0.0) * rate
    return used / budget


def _reasons(value: Any) -> tuple[str, ...] | None:
    """`gen_ai.response.finish_reasons` as exported (an array of strings), or None: absent,
    empty, or not an array of strings (a bare string is not the attribute's type either)."""
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(r, str) for r in value):
        return None
    return tuple(value)


def facts(attributes: Mapping[str, Any]) -> Facts:
    get = attributes.get
    fired, error = get("streamscope.budget.fired"), get("error.type")
    reasons = _reasons(get(FINISH_REASONS))
    finish = reasons[0] if reasons else None
    reasoning = _num(get("gen_ai.usage.reasoning.output_tokens"))
    chars = _num(get("streamscope.text_chars"))
    return Facts(
        fired=fired if isinstance(fired, str) else None,
        error=error if isinstance(error, str) else None,
        finish=finish,
        normal=error is None and fired is None and reasons is not None and NORMAL_FINISH.issuperset(reasons),
        refusal=get("streamscope.refusal") is True or finish == "content_filter",
        paused=get("streamscope.paused") is True,
        content=_num(get("streamscope.time_to_first_content")) is not None,
        answered=_num(get("streamscope.time_to_first_text")) is not None,
        thought=_num(get("streamscope.thinking.start")) is not None or bool(reasoning),
        text_chars=chars if chars is not None else 0.0,
        thinking_share=thinking_share(attributes),
    )


@dataclass(frozen=True)
class Rule:
    label: str
    when: str
    test: Callable[[Facts], bool]


RULES: tuple[Rule, ...] = (
    Rule("deadline_in_answer",
         "the deadline fired (or the caller gave up after its deadline) once the answer had started",
         lambda f: f.fired == "deadline" and f.answered),
    Rule("deadline_in_thinking", "the deadline fired before the answer started",
         lambda f: f.fired == "deadline"),
    Rule("stalled_before_first_content", "the first-token budget fired, or a read timeout before first content",
         lambda f: f.fired == "first_token"
         or (f.fired in ("read_timeout", None) and f.error == "timeout" and not f.content)),
    Rule("stalled_mid_stream", "the idle budget fired, or a read timeout after first content",
         lambda f: f.fired in ("idle", "read_timeout") or f.error == "timeout"),
    Rule("cancelled", "the caller closed, abandoned or cancelled the stream, no deadline expired",
         lambda f: f.error == "cancelled"),
    Rule("upstream_error", "any other `error.type` (an in-band error event, an HTTP error, a dropped connection, no "
                           "final event), or no normal end in the attributes: they do not say the stream ended "
                           "normally (finish reasons missing, malformed, `error`, or none the conventions define)",
         lambda f: f.error is not None or not f.normal),
    Rule("refused", "the model refused (`streamscope.refusal`, or finish reason `content_filter`)",
         lambda f: f.refusal),
    Rule("paused", "the provider paused a long turn (`streamscope.paused`); it continues only when the caller "
                   "sends the turn back",
         lambda f: f.paused),
    Rule("budget_exhausted", f"finish reason `length` after thinking, with under {NEAR_EMPTY_ANSWER_CHARS} visible "
                             "characters",
         lambda f: f.finish == "length" and f.thought and f.text_chars < NEAR_EMPTY_ANSWER_CHARS),
    Rule("truncated", "finish reason `length` with a real answer cut short",
         lambda f: f.finish == "length"),
    Rule("silently_unverified", f"a normal end, but thinking used >= {1 - SILENT_TOLERANCE:.0%} of budget_tokens",
         lambda f: f.thinking_share is not None and f.thinking_share >= 1 - SILENT_TOLERANCE),
    Rule("complete", "a normal end (no `error.type`, no budget fired, finish reasons `stop`, `length`, `tool_call` "
                     "or `content_filter`) and nothing above applies",
         lambda f: f.normal),
)


def _label(f: Facts) -> str:
    for rule in RULES:
        if rule.test(f):
            return rule.label
    return "upstream_error"  # unreachable (a normal end is `complete`, any other end an earlier row): never verified


def classify(attributes: Mapping[str, Any]) -> str:
    """The class label of a streamed call, from its span attributes (live or exported)."""
    return _label(facts(attributes))


def missing(attributes: Mapping[str, Any]) -> tuple[str, ...]:
    """What the attributes lack for a class of their own: empty when they say how the stream
    ended (an `error.type`, a budget that fired, or a normal end); else the attributes that are
    absent or unreadable, each with what is wrong where it is there. Such attributes get the
    catch-all `upstream_error` row, never `complete`: not verified."""
    f = facts(attributes)
    if f.error is not None or _label(f) != "upstream_error":
        return ()
    get = attributes.get
    error, fired, value = get("error.type"), get("streamscope.budget.fired"), get(FINISH_REASONS)
    lacking: list[str] = []
    if error is not None:
        lacking.append("error.type (not a string)")
    if fired is not None and not (isinstance(fired, str) and fired in BUDGETS_FIRED):
        lacking.append(f"streamscope.budget.fired (not a budget: {str(fired)[:40]!r})")
    reasons = _reasons(value)
    if value is None:
        lacking.append(FINISH_REASONS)
    elif reasons is None:
        lacking.append(f"{FINISH_REASONS} (not an array of strings)")
    elif "error" in reasons:
        if error is None:
            lacking.append("error.type")  # the finish reason says it failed, nothing says how
    else:
        unknown = [r for r in reasons if r not in NORMAL_FINISH]
        if unknown:
            lacking.append(f"{FINISH_REASONS} (a reason the conventions do not define: {unknown[0][:40]!r})")
    return tuple(lacking) or (FINISH_REASONS,)
