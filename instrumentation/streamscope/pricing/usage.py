"""One call's billable usage, in one convention whatever the provider reported.

The providers count differently: Anthropic's `input_tokens` leaves out the cache reads and writes,
OpenAI's `prompt_tokens` / `input_tokens` include the cached ones. `Usage` keeps the convention the
recorder and the GenAI conventions already use (`input` counts all input, cached included; the cache
counts and `reasoning` are parts of `input` and `output`), so a count is never priced twice and
never missed. The constructors take plain ints and dicts (or the SDKs' objects, read by attribute),
so an adapter fills it from whatever it holds.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Usage"]


def _count(value: Any) -> int:
    """A provider's count as a non-negative int; anything else (None, a bool, junk) is 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        return 0
    return max(int(value), 0)


def _field(obj: Any, name: str) -> Any:
    """`obj[name]` or `obj.name`: a plain dict and an SDK object read alike; None if absent."""
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


@dataclass(frozen=True, slots=True)
class Usage:
    """Billable counts of one call. `input` is all input tokens (cache reads and writes included,
    as `gen_ai.usage.input_tokens`); `cache_read`, `cache_write_5m` and `cache_write_1h` are the
    parts of it billed apart; `reasoning` is the part of `output` spent thinking (billed as output);
    `web_search_requests` are the server-side searches billed per request."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write_5m: int = 0
    """Cache writes at the model's base write rate: Anthropic's 5-minute writes, OpenAI's writes."""
    cache_write_1h: int = 0
    """Anthropic's 1-hour cache writes (twice the input rate)."""
    reasoning: int = 0
    web_search_requests: int = 0

    @property
    def fresh_input(self) -> int:
        """Input tokens neither read from nor written to the cache (billed at the input rate)."""
        return max(self.input - self.cache_read - self.cache_write_5m - self.cache_write_1h, 0)

    @property
    def empty(self) -> bool:
        return not (self.input or self.output or self.web_search_requests)

    @classmethod
    def from_counts(cls, input_tokens: int | None, output_tokens: int | None, reasoning_tokens: int | None = None,
                    cache_read: int | None = None, cache_write: int | None = None,
                    cache_write_1h: int | None = None, web_search_requests: int | None = None) -> Usage:
        """From the recorder's fields (`input_tokens` counts cached input too; `cache_write` is all
        cache writes, of which `cache_write_1h` were 1-hour writes)."""
        write, long = _count(cache_write), _count(cache_write_1h)
        return cls(input=_count(input_tokens), output=_count(output_tokens), cache_read=_count(cache_read),
                   cache_write_5m=max(write - long, 0), cache_write_1h=long,
                   reasoning=_count(reasoning_tokens), web_search_requests=_count(web_search_requests))

    @classmethod
    def from_anthropic(cls, input_tokens: int | None, output_tokens: int | None,
                       cache_read_input_tokens: int | None = None, cache_creation_input_tokens: int | None = None,
                       cache_creation: Mapping[str, Any] | Any = None, server_tool_use: Mapping[str, Any] | Any = None,
                       thinking_tokens: int | None = None) -> Usage:
        """From a Messages API `usage` (Anthropic, Bedrock, Vertex, Foundry alike). Its `input_tokens`
        leaves out the cache reads and writes, so they are added back to `input`; `cache_creation`
        splits the writes by lifetime (`ephemeral_5m_input_tokens`, `ephemeral_1h_input_tokens`),
        without it every write is a 5-minute one; `server_tool_use.web_search_requests` counts the
        billed searches."""
        read = _count(cache_read_input_tokens)
        five = _count(_field(cache_creation, "ephemeral_5m_input_tokens"))
        hour = _count(_field(cache_creation, "ephemeral_1h_input_tokens"))
        total_write = five + hour if cache_creation_input_tokens is None else _count(cache_creation_input_tokens)
        # The split is the finer account; a total larger than it leaves the rest at the 5-minute rate.
        five = max(total_write - hour, five)
        return cls(input=_count(input_tokens) + read + five + hour, output=_count(output_tokens), cache_read=read,
                   cache_write_5m=five, cache_write_1h=hour, reasoning=_count(thinking_tokens),
                   web_search_requests=_count(_field(server_tool_use, "web_search_requests")))

    @classmethod
    def from_openai_chat(cls, prompt_tokens: int | None, completion_tokens: int | None,
                         prompt_tokens_details: Mapping[str, Any] | Any = None,
                         completion_tokens_details: Mapping[str, Any] | Any = None) -> Usage:
        """From a Chat Completions `usage`: `prompt_tokens` already counts `cached_tokens`, and
        `completion_tokens` the `reasoning_tokens`, so nothing is added."""
        return cls(input=_count(prompt_tokens), output=_count(completion_tokens),
                   cache_read=_count(_field(prompt_tokens_details, "cached_tokens")),
                   reasoning=_count(_field(completion_tokens_details, "reasoning_tokens")))

    @classmethod
    def from_openai_responses(cls, input_tokens: int | None, output_tokens: int | None,
                              input_tokens_details: Mapping[str, Any] | Any = None,
                              output_tokens_details: Mapping[str, Any] | Any = None,
                              web_search_requests: int | None = None) -> Usage:
        """From a Responses API `usage`: `input_tokens` already counts `cached_tokens` (and the
        `cache_write_tokens` newer models report), `output_tokens` the `reasoning_tokens`. The API
        reports web searches as output items (`web_search_call`), not in the usage: the caller counts them."""
        return cls(input=_count(input_tokens), output=_count(output_tokens),
                   cache_read=_count(_field(input_tokens_details, "cached_tokens")),
                   cache_write_5m=_count(_field(input_tokens_details, "cache_write_tokens")),
                   reasoning=_count(_field(output_tokens_details, "reasoning_tokens")),
                   web_search_requests=_count(web_search_requests))
