"""What the lab's attempts cost: the tokens each one is billed for, at a model's rates.

Tokens follow the clock. A request's output is `decode_rate` tokens per second of its thinking and
its answer (a retry resends the same request, so a retried answer is just as many tokens); an
attempt's pace stretches its seconds, not its tokens. An attempt is billed

* its input (`input_tokens`) once its headers arrived: the provider accepted it, and `message_start`
  reports that input. Every retry pays it again;
* the output generated until it ended: all of it for an attempt that completed; for one a rule
  ended, what was generated before the cut (thinking included); for a stall, what was generated
  before the server stopped.

An attempt that did not complete bought no answer: its whole cost is waste, as the instrumentation
counts the classes a cut stream ends in (`streamscope.pricing.cost.WASTE`).
"""

from __future__ import annotations

import math

from streamscope.pricing import Usage

from .lab_policies import Outcome
from .lab_streams import Attempt, Request, StreamModel


def output_tokens(model: StreamModel, request: Request) -> int:
    """The output a completed attempt at `request` is billed: its thinking and its answer."""
    return round(model.decode_rate * (request.thinking + request.answer))


def attempt_usage(model: StreamModel, request: Request, attempt: Attempt, outcome: Outcome) -> Usage:
    """What one attempt is billed, given how it ended (nothing when it ended before its headers)."""
    if outcome.at < attempt.headers:
        return Usage()
    total = output_tokens(model, request)
    if outcome.status == "completed":
        out = total
    else:
        stop = outcome.at if attempt.stall_at is None else min(outcome.at, attempt.stall_at)
        out = min(total, math.floor(model.decode_rate * max(0.0, stop - attempt.start) / attempt.pace))
    thinking = min(out, round(model.decode_rate * request.thinking))
    return Usage(input=model.input_tokens, output=out, reasoning=thinking)
