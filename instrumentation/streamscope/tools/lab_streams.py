"""The lab's workload: seeded synthetic requests, each with its pre-drawn attempts as event times.

A *request* has intrinsic properties: whether its answer is long, how long the answer takes to
generate, and whether (and how long) the model thinks first; a retry resends the same request.
An *attempt* is one try at it, drawn fresh: its time to first content, its pace, its gaps, an
occasional slow gap, and whether it stalls. See `streamscope.tools.lab` for the whole model.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any


def _knob(default: float, help: str) -> Any:
    """A model parameter; its help becomes the CLI flag's help (`streamscope lab --help`)."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True, slots=True)
class StreamModel:
    """The synthetic workload. Defaults are docs/lab.md's reference run; every field is a `lab` flag."""

    streams: int = _knob(200, "requests in the workload")
    seed: int = _knob(7, "random seed (same seed, same streams)")
    long_share: float = _knob(0.20, "share of requests with a long answer")
    long_min: float = _knob(40.0, "shortest long answer, seconds of generation")
    long_max: float = _knob(110.0, "longest long answer, seconds of generation")
    answer_min: float = _knob(3.0, "shortest ordinary answer, seconds of generation")
    answer_max: float = _knob(30.0, "longest ordinary answer, seconds of generation")
    thinking_share: float = _knob(0.10, "share of requests that think before answering")
    thinking_min: float = _knob(15.0, "shortest thinking phase, seconds")
    thinking_max: float = _knob(50.0, "longest thinking phase, seconds")
    ttft_min: float = _knob(0.5, "shortest time to first content without thinking, seconds")
    ttft_max: float = _knob(4.0, "longest time to first content without thinking, seconds")
    gap_max: float = _knob(1.0, "longest ordinary gap between content events, seconds")
    slow_gap_share: float = _knob(0.06, "share of attempts with one slow gap mid-answer")
    slow_gap_min: float = _knob(5.0, "shortest slow gap, seconds")
    slow_gap_max: float = _knob(10.0, "longest slow gap, seconds")
    pace_jitter: float = _knob(0.10, "an attempt's pace varies by up to this fraction")
    stall_share: float = _knob(0.05, "share of attempts that stall")
    pinging_share: float = _knob(0.5, "share of stalls that keep sending pings")
    ping_every: float = _knob(5.0, "seconds between server pings (0: the server never pings)")
    horizon: float = _knob(600.0, "seconds the lab watches an attempt before calling a stall undetected")
    input_tokens: int = _knob(4000, "input tokens of each request, billed again on every attempt")
    decode_rate: float = _knob(75.0, "output tokens per second of generation, thinking included")

    def __post_init__(self) -> None:
        if self.streams < 1:
            raise ValueError("streams must be at least 1")
        for name in ("long_share", "thinking_share", "slow_gap_share", "stall_share", "pinging_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1")
        for low, high in (("long_min", "long_max"), ("answer_min", "answer_max"),
                          ("thinking_min", "thinking_max"), ("ttft_min", "ttft_max"),
                          ("slow_gap_min", "slow_gap_max")):
            if not 0.0 < getattr(self, low) <= getattr(self, high):
                raise ValueError(f"need 0 < {low} <= {high}")
        if not 0.0 < self.gap_max or not 0.0 <= self.pace_jitter < 1.0:
            raise ValueError("gap_max must be > 0 and pace_jitter in [0, 1)")
        if self.ping_every < 0:
            raise ValueError("ping_every must be >= 0")
        if self.input_tokens < 0 or not self.decode_rate > 0:
            raise ValueError("input_tokens must be >= 0 and decode_rate > 0")
        if self.horizon <= self.longest_healthy:
            raise ValueError(f"horizon must exceed the longest healthy attempt ({self.longest_healthy:.0f} s), "
                             "or a slow answer would be taken for a stall")

    @property
    def longest_healthy(self) -> float:
        """An upper bound on how long an attempt that does not stall can take."""
        generation = (self.thinking_max + max(self.long_max, self.answer_max)) * (1.0 + self.pace_jitter)
        return self.ttft_max + generation + self.gap_max + self.slow_gap_max


@dataclass(frozen=True, slots=True)
class Attempt:
    """One try at a request, as event times in seconds from the moment it was sent."""

    headers: float
    content: tuple[float, ...]
    pings: tuple[float, ...]
    stall_at: float | None = None
    """When the server stopped generating (None: it did not stall)."""
    stall_pings: bool = False
    start: float = 0.0
    """When generation starts (thinking, else the answer): the output billed is generated from here."""
    pace: float = 1.0
    """This attempt's seconds per second of the request's generation (its pace jitter)."""

    @property
    def stalled(self) -> bool:
        return self.stall_at is not None

    @property
    def end(self) -> float:
        """When the last event arrives; never, for a stall."""
        return math.inf if self.stalled else self.content[-1]


@dataclass(frozen=True, slots=True)
class Request:
    """What a retry keeps: the answer's length and the thinking it needs."""

    index: int
    long: bool
    answer: float
    thinking: float
    attempts: tuple[Attempt, ...]


def _pings(start: float, stop: float, every: float) -> tuple[float, ...]:
    if every <= 0:
        return ()
    return tuple(start + k * every for k in range(1, int((stop - start) / every) + 1))


def draw_attempt(model: StreamModel, answer: float, thinking: float, rng: random.Random) -> Attempt:
    """One fresh attempt at a request with this answer length and thinking need."""
    pace = rng.uniform(1.0 - model.pace_jitter, 1.0 + model.pace_jitter)
    ttft = rng.uniform(model.ttft_min, model.ttft_max)
    headers = ttft * rng.uniform(0.2, 0.5)  # message_start arrives early in the wait
    gaps, length = [0.0], 0.0
    while length < answer * pace:
        gaps.append(rng.uniform(0.05, model.gap_max))
        length += gaps[-1]
    if rng.random() < model.slow_gap_share and len(gaps) > 2:
        gaps[rng.randrange(1, len(gaps) - 1)] = rng.uniform(model.slow_gap_min, model.slow_gap_max)
    t, content = ttft + thinking * pace, []
    for gap in gaps:
        t += gap
        content.append(t)
    if rng.random() >= model.stall_share:
        return Attempt(headers, tuple(content), _pings(headers, content[-1], model.ping_every), start=ttft, pace=pace)
    stall_at = rng.uniform(headers, content[-1])
    pinging = rng.random() < model.pinging_share
    ping_stop = model.horizon if pinging else stall_at
    return Attempt(
        headers, tuple(c for c in content if c <= stall_at),
        _pings(headers, ping_stop, model.ping_every), stall_at, pinging, start=ttft, pace=pace,
    )


def generate(model: StreamModel, attempts: int = 1) -> tuple[Request, ...]:
    """The workload: `model.streams` requests with `attempts` pre-drawn attempts each.

    Each request and each attempt has its own seeded generator, so attempt k of request i is the
    same whatever the retry count, and every policy judges the very same streams.
    """
    requests = []
    for i in range(model.streams):
        rng = random.Random(f"{model.seed}/{i}")
        long = rng.random() < model.long_share
        answer = (rng.uniform(model.long_min, model.long_max) if long
                  else rng.uniform(model.answer_min, model.answer_max))
        thinking = rng.uniform(model.thinking_min, model.thinking_max) if rng.random() < model.thinking_share else 0.0
        tries = tuple(draw_attempt(model, answer, thinking, random.Random(f"{model.seed}/{i}/{k}"))
                      for k in range(attempts))
        requests.append(Request(i, long, answer, thinking, tries))
    return tuple(requests)
