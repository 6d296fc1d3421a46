"""How the lab judges an attempt: a timeout policy as a pure function from the attempt's event
times to an outcome (completed, ended by a rule, or a stall nobody detected), and a request as
its attempts tried in turn under the retry rules."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from .lab_streams import Attempt, Request


@dataclass(frozen=True, slots=True)
class Policy:
    """How a client decides to give up. `None` = that rule is not used.

    `total` and `read_timeout` are per attempt (an HTTP client's settings); `deadline` is the
    caller's, shared by every attempt. `pings=False` judges the world where the server never
    pings, the only difference a read timeout can see.
    """

    name: str
    kind: Literal["total", "read", "budgets"]
    total: float | None = None
    read_timeout: float | None = None
    pings: bool = True
    first_token: float | None = None
    idle: float | None = None
    deadline: float | None = None


Status = Literal["completed", "ended", "undetected"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one attempt: `ended` means a rule fired (a kill, or a stall detected)."""

    status: Status
    at: float
    rule: str | None = None
    partial: bool = False
    """Content had already reached the caller (retrying it restarts visible text)."""


def _first_overrun(times: Iterable[float], limit: float, open_end: bool) -> float | None:
    """When a silence longer than `limit` first starts to overrun between sorted `times`;
    with `open_end`, the silence after the last one never ends."""
    last = None
    for t in times:
        if last is not None and t - last > limit:
            return last + limit
        last = t
    return last + limit if open_end and last is not None else None


def judge(attempt: Attempt, policy: Policy, horizon: float, deadline_left: float | None = None) -> Outcome:
    """The earliest rule that fires on this attempt, or its completion, or nothing until the horizon."""
    fires: list[tuple[float, str]] = []
    content = attempt.content
    if policy.total is not None:
        fires.append((policy.total, "total"))
    if policy.deadline is not None:
        fires.append((policy.deadline if deadline_left is None else deadline_left, "deadline"))
    if policy.first_token is not None and (not content or content[0] > policy.first_token):
        fires.append((policy.first_token, "first_token"))
    if policy.idle is not None and content:
        at = _first_overrun(content, policy.idle, open_end=attempt.stalled)
        if at is not None:
            fires.append((at, "idle"))
    if policy.read_timeout is not None:
        pings = attempt.pings if policy.pings else ()
        arrivals = heapq.merge((0.0, attempt.headers), content, pings)
        silent_end = attempt.stalled and not (attempt.stall_pings and policy.pings)
        at = _first_overrun(arrivals, policy.read_timeout, open_end=silent_end)
        if at is not None:
            fires.append((at, "read_timeout"))
    at, rule = min(fires, default=(math.inf, None))
    if at < attempt.end and at < horizon:
        return Outcome("ended", at, rule, partial=bool(content) and content[0] < at)
    if attempt.end <= horizon:
        return Outcome("completed", attempt.end)
    return Outcome("undetected", horizon)


@dataclass(frozen=True, slots=True)
class RequestOutcome:
    request: Request
    outcomes: tuple[Outcome, ...]

    @property
    def latency(self) -> float:
        """Seconds until the caller had its final answer or gave up (no backoff modelled)."""
        return sum(o.at for o in self.outcomes)

    @property
    def completed(self) -> bool:
        return self.outcomes[-1].status == "completed"


def run_request(request: Request, policy: Policy, retries: int, horizon: float,
                retry_partial: bool = True) -> RequestOutcome:
    """Try a request, retrying whatever a rule ended, up to `retries` times.

    A stall nobody detected is never retried (the caller is still waiting), nor is a request
    whose shared deadline is spent; with `retry_partial=False` neither is an attempt that had
    delivered content (the retry line).
    """
    outcomes: list[Outcome] = []
    elapsed = 0.0
    for attempt in request.attempts[: retries + 1]:
        left = None if policy.deadline is None else policy.deadline - elapsed
        outcome = judge(attempt, policy, horizon, left)
        outcomes.append(outcome)
        elapsed += outcome.at
        if outcome.status != "ended" or outcome.rule == "deadline" or (outcome.partial and not retry_partial):
            break
    return RequestOutcome(request, tuple(outcomes))
