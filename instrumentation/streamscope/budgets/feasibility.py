"""The deadline arithmetic: can a thinking budget finish inside a deadline at a measured decode rate?

A deadline is set in seconds, usually by whoever owns the calling service; a thinking budget in
tokens, by whoever owns the prompt. The decode rate is the exchange rate between the two, so once
it is measured they stop being independent knobs and become one constraint. Retries inside a
shared deadline divide it: the waits between attempts (the backoff, at its longest) come off
first, each attempt gets an equal share of the rest, and pays its own reserve for network and
queueing.

The rule, in token units so that the largest budget that fits is exact::

    fits  <=>  thinking_budget + answer_tokens <= ((deadline - backoff) / attempts - reserve - ttft) * decode_rate

An attempt whose share is shorter than the measured p99.9 time to first token is cut before its
first token on the slow requests that retries exist for (`attempt_too_short`). `pool_headroom` is
Little's law on the worker pool: in-flight requests = arrival rate x time each holds its slot.

`budget_unreachable` is the same rule for one attempt with no reserve and no answer, which is what
the metrics count as "requests whose deadline could never fit their thinking budget".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streamscope.core.record import StreamRecord

MIN_THINKING_BUDGET = 1024
"""The API's smallest `budget_tokens`: below it extended thinking cannot be switched on at all."""


def per_attempt_seconds(deadline: float, retries: int = 0, backoff: float = 0.0) -> float:
    """Each attempt's share of a deadline that the first try and `retries` retries share, once
    `backoff` (the longest the waits between them can add up to) is set aside."""
    if retries < 0:
        raise ValueError("retries must be >= 0")
    return (deadline - backoff) / (retries + 1)


def generation_seconds(allowance: float, reserve: float = 0.0, time_to_first_token: float = 0.0) -> float:
    """What an attempt's allowance leaves for generation (negative: the overhead alone overruns it)."""
    return allowance - reserve - time_to_first_token


def capacity_tokens(seconds: float, decode_rate: float) -> float:
    """How many tokens `seconds` of generation produce at `decode_rate` tokens per second."""
    if not decode_rate > 0:
        raise ValueError("decode_rate must be > 0 tokens per second")
    return seconds * decode_rate


def tokens_fit(tokens: float, seconds: float, decode_rate: float) -> bool:
    """The one comparison every rule here uses: `tokens` can be generated within `seconds`."""
    return tokens <= capacity_tokens(seconds, decode_rate)


def budget_unreachable(thinking_budget: float, decode_rate: float, time_to_first_chunk: float,
                       deadline: float) -> bool:
    """`thinking_budget / decode_rate + time_to_first_chunk > deadline`: the deadline could never
    fit the thinking budget, answer aside. Shared with the metrics so both count the same requests."""
    return not tokens_fit(thinking_budget, deadline - time_to_first_chunk, decode_rate)


def largest_thinking_budget(capacity: float, answer_tokens: int) -> int | None:
    """The largest whole thinking budget that fits with the answer; None when the answer alone does not."""
    largest = math.floor(capacity) - answer_tokens
    return largest if largest >= 0 else None


@dataclass(frozen=True, slots=True)
class Feasibility:
    """The inputs, every intermediate number, and the verdict."""

    deadline: float
    reserve: float
    decode_rate: float
    answer_tokens: int
    thinking_budget: int
    retries: int
    time_to_first_token: float
    backoff: float
    """The longest the waits between the attempts can add up to, set aside before the split."""
    ttft_p999: float | None
    """The measured p99.9 time to first token, when given."""
    attempts: int
    per_attempt: float
    generation: float
    capacity: float
    needed_tokens: int
    needed_seconds: float
    largest_thinking: int | None
    fits: bool

    @property
    def attempt_too_short(self) -> bool:
        """Each attempt's share is below the measured p99.9 time to first token: attempts are cut
        before their first token on exactly the slow requests that the retries are for."""
        return self.ttft_p999 is not None and self.per_attempt < self.ttft_p999

    def attempt_warning(self) -> str | None:
        """One sentence when `attempt_too_short`, else None."""
        if not self.attempt_too_short:
            return None
        return (f"Each attempt has {self.per_attempt:.1f} s, below the measured p99.9 time to first token "
                f"({self.ttft_p999:.1f} s): the slowest requests are cut before their first token. Fewer "
                "retries or a longer deadline.")

    @property
    def whole_tokens(self) -> int:
        """The whole tokens that fit in an attempt's generation time (what the sentence reports)."""
        return max(0, math.floor(self.capacity))

    @property
    def verdict(self) -> str:
        return "can finish" if self.fits else "cannot finish"

    def sentence(self) -> str:
        """The verdict as one plain sentence."""
        each = f"each of the {self.attempts} attempts" if self.attempts > 1 else "the attempt"
        if self.generation > 0:
            room = (f"{each} has {self.generation:.1f} s of generation, room for {self.whole_tokens:,} tokens "
                    f"at {self.decode_rate:g} tokens/s")
        else:
            room = f"the reserve and time to first token use up all {self.per_attempt:.1f} s {each} has"
        if self.largest_thinking is None:
            return f"It cannot finish: not even the {self.answer_tokens:,}-token answer fits, since {room}."
        largest = f"the largest thinking budget that fits is {self.largest_thinking:,} tokens"
        if self.largest_thinking < MIN_THINKING_BUDGET:
            largest += (f", below the API's minimum budget_tokens of {MIN_THINKING_BUDGET:,}: "
                        "extended thinking cannot be on within this deadline")
        needs = (f"{self.thinking_budget:,} thinking + {self.answer_tokens:,} answer tokens need "
                 f"{self.needed_seconds:.1f} s")
        if self.fits:
            return f"It can finish: {needs} and {room}; {largest}."
        return f"It cannot finish once thinking uses its budget: {needs}, but {room}; {largest}."


def check(deadline: float, decode_rate: float, thinking_budget: int, answer_tokens: int = 0,
          reserve: float = 0.0, retries: int = 0, time_to_first_token: float = 0.0, backoff: float = 0.0,
          ttft_p999: float | None = None) -> Feasibility:
    """Whether a request that uses its whole thinking budget can finish inside the deadline.

    Worst case on purpose: a thinking budget the deadline cannot hold lets the model start work it
    cannot finish, and every such request pays for the tokens generated before the client hung up.
    """
    for name, value in (("deadline", deadline), ("decode_rate", decode_rate)):
        if not value > 0:
            raise ValueError(f"{name} must be > 0")
    for name, value in (("reserve", reserve), ("time_to_first_token", time_to_first_token),
                        ("thinking_budget", thinking_budget), ("answer_tokens", answer_tokens),
                        ("backoff", backoff)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0")
    allowance = per_attempt_seconds(deadline, retries, backoff)
    generation = generation_seconds(allowance, reserve, time_to_first_token)
    capacity = capacity_tokens(generation, decode_rate)
    needed = thinking_budget + answer_tokens
    return Feasibility(
        deadline=deadline, reserve=reserve, decode_rate=decode_rate, answer_tokens=answer_tokens,
        thinking_budget=thinking_budget, retries=retries, time_to_first_token=time_to_first_token,
        backoff=backoff, ttft_p999=ttft_p999, attempts=retries + 1, per_attempt=allowance, generation=generation,
        capacity=capacity,
        needed_tokens=needed, needed_seconds=needed / decode_rate,
        largest_thinking=largest_thinking_budget(capacity, answer_tokens),
        fits=tokens_fit(needed, generation, decode_rate),
    )


@dataclass(frozen=True, slots=True)
class PoolHeadroom:
    """Little's law on a worker pool: how many requests are in flight at a request rate when each
    holds its slot for the normal latency, and for the slow one (a slowdown, or doomed requests
    that only the deadline cuts)."""

    pool_size: int
    rate: float
    latency: float
    slow_latency: float

    @property
    def normal_in_flight(self) -> float:
        return self.rate * self.latency

    @property
    def slow_in_flight(self) -> float:
        return self.rate * self.slow_latency

    @property
    def exhausted(self) -> bool:
        """In a slowdown more requests are in flight than the pool has slots: the queue grows
        without bound."""
        return self.slow_in_flight > self.pool_size

    def sentence(self) -> str:
        normal = f"{self.normal_in_flight:.0f} in flight normally, {self.slow_in_flight:.0f} in a slowdown"
        if self.exhausted:
            return (f"The pool runs out in a slowdown: {normal}, for {self.pool_size} slots; the queue grows "
                    "without bound. Cut doomed requests sooner (first-token and idle budgets), or size the pool "
                    f"for {self.slow_in_flight:.0f}.")
        return f"The pool holds: {normal}, for {self.pool_size} slots."


def record_unreachable(record: StreamRecord) -> bool:
    """A thinking request whose deadline could never fit its thinking budget at this stream's
    decode rate: `budget_tokens / decode_rate + time_to_first_chunk > deadline` (the rule
    `streamscope check` uses, `budget_unreachable`)."""
    budget_tokens = record.request.thinking_budget
    deadline = record.request.budgets.deadline
    rate = record.decode_rate
    if not budget_tokens or deadline is None or not rate or rate <= 0:
        return False
    return budget_unreachable(budget_tokens, rate, record.time_to_first_chunk or 0.0, deadline)
