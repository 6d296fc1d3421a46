"""What either provider's streams carry, and how it is timed: shared by the Messages builder
(anthropic_streams.py) and the OpenAI builders (openai_streams.py).

A ``TextSpec`` is text sent in chunks, a ``ToolUseSpec`` a tool call whose arguments arrive in
JSON fragments. A Step among a text's chunks is played as is (a stall, a ping, bad bytes).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .steps import Event, Step, with_delay


@dataclass(frozen=True)
class TextSpec:
    """A text block: ``chunks`` sent ``interval`` s apart, the first after ``first_delay``
    (default ``interval``). A Step among the chunks is played as is (stalls, pings, bad bytes)."""

    chunks: Sequence[str | Step]
    interval: float = 0.05
    first_delay: float | None = None


@dataclass(frozen=True)
class ToolUseSpec:
    """A tool_use block whose input arrives as ``input_json_delta`` partial JSON chunks."""

    name: str
    chunks: Sequence[str]
    interval: float = 0.05
    first_delay: float | None = None
    id: str | None = None


def timed(spec: TextSpec, make: Callable[[str, float], Step]) -> list[Step]:
    """``make(piece, delay)`` per text chunk, timed as TextSpec says; a Step among them as is."""
    first = spec.interval if spec.first_delay is None else spec.first_delay
    steps: list[Step] = []
    sent = False
    for chunk in spec.chunks:
        if isinstance(chunk, str):
            steps.append(make(chunk, spec.interval if sent else first))
            sent = True
        else:
            steps.append(chunk)
    return steps


def timed_fragments(spec: ToolUseSpec, make: Callable[[str, float], Step]) -> list[Step]:
    """``make(fragment, delay)`` per argument fragment of a tool call, timed as ToolUseSpec says."""
    first = spec.interval if spec.first_delay is None else spec.first_delay
    return [make(chunk, first if i == 0 else spec.interval) for i, chunk in enumerate(spec.chunks)]


def opened_with_first_delta(steps: list[Step], framing: int) -> list[Step]:
    """The ``framing`` events that open a block, an item or a part go out with its first delta, as
    the APIs send them (a block opens when the model begins producing it): the first delta's delay
    moves to the first of them."""
    first_delta = steps[framing] if len(steps) > framing else None
    if isinstance(first_delta, Event) and first_delta.delay:
        return [with_delay(steps[0], first_delta.delay), *steps[1:framing], with_delay(first_delta, 0.0),
                *steps[framing + 1:]]
    return steps


def joined(spec: TextSpec) -> str:
    """A text's characters, its Steps left out."""
    return "".join(c for c in spec.chunks if isinstance(c, str))


def chars(spec: TextSpec | None) -> int:
    return len(joined(spec)) if spec else 0
