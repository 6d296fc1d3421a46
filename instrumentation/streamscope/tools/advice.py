"""What to look at first for each class, fitted to the request where the label alone would mislead.

`deadline_in_thinking` says *when* the deadline fired (before the answer started), not that the
model was thinking: a request with no thinking at all whose start was slow gets the same label
(the labels are a fixed set, and `classify()` stays a function of how the stream ended). Advising
"lower the thinking budget" for it sends the on-call engineer after a setting the request does not
have, so the advice reads the span's attributes: with no sign of thinking it points at what made
the start slow instead. Pure functions of exported attributes, like the classifier.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ADVICE = {
    "stalled_mid_stream": "streams start and then hang (idle budget): look at the provider's status and at "
                          "`streamscope_max_gap_seconds`; pings do not count as progress",
    "stalled_before_first_content": "nothing arrives before the first-token budget: queueing/overload, or a "
                                    "first-token budget too tight for the model's thinking (compare its p99)",
    "deadline_in_thinking": "thinking the deadline cannot hold: lower budget_tokens (or the reasoning effort) or "
                            "raise the deadline (`streamscope check`)",
    "deadline_in_answer": "healthy answers cut by the deadline: more time, or shorter answers",
    "budget_exhausted": "the token allowance went on thinking: raise max_tokens or lower the thinking budget; "
                        "more time will not help",
    "silently_unverified": "answers whose thinking used its whole budget: the checking pass was likely cut; "
                           "raise budget_tokens or treat them as unverified",
    "truncated": "answers cut at max_tokens: raise max_tokens or ask for less",
    "upstream_error": "provider or network errors: check error types (overloaded_error, dropped connections)",
    "refused": "refusals: retrying will not change them",
    "paused": "long server-tool turns the server paused: not an error, but no answer yet; make sure the calling "
              "code sends the turn back (the assistant's content as is) to continue it, with a bound on "
              "continuations",
    "cancelled": "callers giving up: not a provider problem",
}
"""The advice per class, for a request that fits the label's usual reading."""

SLOW_START = ("no thinking was asked for or seen, so the start itself was slow: compare "
              "`streamscope.time_to_headers` (connection, queueing, the SDK's own retries) with "
              "`streamscope.time_to_first_content` (the provider's latency for this prompt); then the provider's "
              "status, and whether the deadline is too short for the prompt's size")
"""`deadline_in_thinking` on a request with no thinking: there is no thinking budget to lower."""

THINKING_FACTS = ("streamscope.thinking.start", "streamscope.thinking.budget_tokens",
                  "gen_ai.usage.reasoning.output_tokens", "gen_ai.request.reasoning.level",
                  "openai.request.reasoning_effort")
"""Attributes that say the request thought, or asked to (a thinking budget, a reasoning effort)."""


def thinking(attributes: Mapping[str, Any]) -> bool:
    """Whether the span shows thinking: seen, asked for with a budget or an effort, or reasoning tokens."""
    if any(attributes.get(key) not in (None, 0, "") for key in THINKING_FACTS):
        return True
    kind = attributes.get("anthropic.thinking.type")
    return isinstance(kind, str) and kind not in ("", "disabled")


def advice(label: str, attributes: Mapping[str, Any] | None = None) -> str:
    """The advice for one call of class `label`, fitted to its attributes where they change it."""
    if label == "deadline_in_thinking" and attributes is not None and not thinking(attributes):
        return SLOW_START
    return ADVICE.get(label, "")


def advice_for(label: str, calls: Iterable[Mapping[str, Any]]) -> str:
    """The advice for a group of calls of one class: each distinct advice once, the most common
    first, with how many calls it fits where they differ."""
    counts: dict[str, int] = {}
    for attributes in calls:
        text = advice(label, attributes)
        counts[text] = counts.get(text, 0) + 1
    if len(counts) < 2:
        return next(iter(counts), advice(label))
    return "; ".join(f"{text} ({counts[text]})" for text in sorted(counts, key=lambda text: -counts[text]))
