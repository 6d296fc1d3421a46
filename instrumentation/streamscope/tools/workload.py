"""The demo's mixed workload, as scripts for the simulator.

Every request is drawn from a seeded generator as one *kind* of stream (a long answer, a thinking
phase, a web search, a stall that keeps pinging, a limit hit during thinking, ...) and knows the class label its
script was written for, so a run can be checked against its design. Times are model seconds; the
simulator and the budgets are scaled by the same factor so a run takes seconds, not an hour.

Every call is priced (`PRICES`, at Claude Sonnet 4.5's rates) but the refusals: the endpoint says
a preview model with no price answered them (`UNPRICED`), so a run has unpriced calls too.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from streamscope.budgets.table import Budgets, BudgetTable
from streamscope.simulator import (
    BlockSpec,
    Event,
    HttpError,
    Ping,
    Scenario,
    ServerToolSpec,
    Silence,
    Step,
    TextSpec,
    ThinkingSpec,
    error_event,
    message_stream,
)

from .spend import SONNET_45

CHAT = "claude-sim-chat"
REASONING = "claude-sim-reasoning"
WORD = "tok "
THOUGHT = "step "
UNPRICED = "claude-sim-chat-preview"
"""The model the simulated endpoint says answered the refusals (`gen_ai.response.model`): `PRICES`
has no price for it, so those calls are unpriced, as a new model's are until its price is known."""
PRICES: dict[str, dict[str, float]] = {CHAT: SONNET_45, REASONING: SONNET_45}
"""`instrument(prices=...)` for the workload: both simulated models at Claude Sonnet 4.5's rates, by
exact name (so `UNPRICED` stays unpriced)."""
CHAT_PROMPT = 1_500
REASONING_PROMPT = 6_000
"""Input tokens of each request to the chat and the reasoning model (a system prompt, tools, the
conversation so far): every call pays them, whatever became of it."""

BUDGETS_MODEL_SECONDS: dict[str, Budgets] = {
    "default": Budgets(first_token=45, idle=20),
    f"model:{REASONING}*": Budgets(first_token=90),
    "route:interactive": Budgets(deadline=90, first_content="any"),
}
"""The three budgets, in model seconds: first-token leaves room for connection set-up and queueing
on a busy machine (the chat model's first text comes within 3 s, the reasoning model's after up to
55 s of thinking); idle is above every healthy gap; only the interactive route has a
deadline, and there thinking deltas count as content (a user watching the thinking sees progress).

Every script keeps clear of the budget that judges it by at least `MARGIN` model seconds, in
either direction: a healthy stream's first content, largest gap and duration stay that far under
its budgets, a failing stream overruns the budget that should catch it by that much. Scheduling
delays on a loaded machine (a busy event loop, a slow first connection) are far smaller than the
margin at the demo's time scale, so every request gets the class it was written for
(tests/tools/test_demo.py checks the margins against the scripts)."""

MARGIN = 15.0
"""Model seconds between every script and the budget that judges it (0.75 s at the default scale)."""


def scaled_budgets(scale: float) -> dict[str, Budgets]:
    def s(value: float | None) -> float | None:
        return None if value is None else value * scale

    return {key: Budgets(s(b.first_token), s(b.idle), s(b.deadline), b.first_content)
            for key, b in BUDGETS_MODEL_SECONDS.items()}


@dataclass(frozen=True)
class Request:
    """One request of the workload: its script, how it is asked for, and the class it should get."""

    number: int
    kind: str
    expect: str
    model: str
    route: str
    steps: tuple[Step, ...]
    thinking_budget: int | None = None
    max_tokens: int = 4096
    give_up_after: int | None = None
    """The caller stops reading after this many text events (a user who navigated away)."""

    @property
    def scenario(self) -> Scenario:
        return Scenario.single(f"demo-{self.number}", self.steps)


def _text(rng: random.Random, seconds: float, gap: tuple[float, float]) -> TextSpec:
    interval = rng.uniform(*gap)
    return TextSpec([WORD] * max(2, int(seconds / interval)), interval=interval, first_delay=rng.uniform(0.5, 3.0))


def _thinking(rng: random.Random, seconds: float) -> ThinkingSpec:
    return ThinkingSpec([THOUGHT] * max(2, int(seconds)), duration=seconds, first_delay=rng.uniform(0.5, 2.0))


def _chat_stream(**options: Any) -> list[Step]:
    return message_stream(input_tokens=CHAT_PROMPT, **options)


def _reasoning_stream(**options: Any) -> list[Step]:
    return message_stream(input_tokens=REASONING_PROMPT, **options)


# kind: (weight, expected class, builder(rng) -> (steps, model, route, thinking_budget, max_tokens, give_up))
Built = tuple[list[Step], str, str, int | None, int, int | None]
Builder = Callable[[random.Random], Built]


def _chat(rng: random.Random) -> Built:
    return _chat_stream(blocks=[_text(rng, rng.uniform(3, 20), (0.05, 0.3))]), CHAT, "chat", None, 4096, None


def _long(rng: random.Random) -> Built:
    return _chat_stream(blocks=[_text(rng, rng.uniform(40, 110), (0.1, 0.3))]), CHAT, "chat", None, 8192, None


def _thinking_answer(rng: random.Random) -> Built:
    steps = _reasoning_stream(thinking=_thinking(rng, rng.uniform(15, 50)),
                              blocks=[_text(rng, rng.uniform(5, 20), (0.05, 0.2))],
                              thinking_tokens=rng.randint(500, 2500), ping_every=5.0)
    return steps, REASONING, "agent", 4096, 8192, None


def _pinging_stall(rng: random.Random) -> Built:
    stall = [Ping(5.0) for _ in range(24)]  # 120 s of pings and no content
    steps = _chat_stream(blocks=[TextSpec([*[WORD] * rng.randint(3, 30), *stall], interval=0.1)])
    return steps, CHAT, "chat", None, 4096, None


def _silent_stall(rng: random.Random) -> Built:
    steps = _chat_stream(blocks=[TextSpec([*[WORD] * rng.randint(3, 30), Silence(120.0), WORD], interval=0.1)])
    return steps, CHAT, "chat", None, 4096, None


def _silent_start(rng: random.Random) -> Built:
    return _chat_stream(first_event_delay=120.0, blocks=[TextSpec([WORD] * 5)]), CHAT, "chat", None, 4096, None


def _overloaded(rng: random.Random) -> Built:
    if rng.random() < 0.5:
        return [HttpError(529, "overloaded_error", "Overloaded")], CHAT, "chat", None, 4096, None
    steps = _chat_stream(blocks=[TextSpec([WORD] * rng.randint(3, 20), interval=0.1)],
                         interrupt=[error_event(delay=0.2)])
    return steps, CHAT, "chat", None, 4096, None


def _limit_in_thinking(rng: random.Random) -> Built:
    steps = _reasoning_stream(thinking=_thinking(rng, rng.uniform(10, 30)),
                              blocks=[TextSpec(["The"], first_delay=0.2)], stop_reason="max_tokens",
                              thinking_tokens=2040, output_tokens=2048, ping_every=5.0)
    return steps, REASONING, "agent", 2000, 2048, None


def _limit_in_answer(rng: random.Random) -> Built:
    steps = _chat_stream(blocks=[_text(rng, rng.uniform(10, 30), (0.05, 0.2))], stop_reason="max_tokens")
    return steps, CHAT, "chat", None, 1024, None


def _whole_budget(rng: random.Random) -> Built:
    steps = _reasoning_stream(thinking=_thinking(rng, rng.uniform(20, 45)),
                              blocks=[_text(rng, rng.uniform(5, 15), (0.05, 0.2))], thinking_tokens=4096,
                              ping_every=5.0)
    return steps, REASONING, "agent", 4096, 8192, None


def _refusal(rng: random.Random) -> Built:
    steps = _chat_stream(model=UNPRICED, blocks=[TextSpec(["I can't", " help", " with that."], interval=0.1)],
                         stop_reason="refusal")
    return steps, CHAT, "chat", None, 4096, None


def _deadline_in_thinking(rng: random.Random) -> Built:
    steps = _reasoning_stream(thinking=_thinking(rng, rng.uniform(130, 170)), blocks=[TextSpec([WORD] * 10)],
                              ping_every=5.0)
    return steps, REASONING, "interactive", 8192, 16384, None


def _deadline_in_answer(rng: random.Random) -> Built:
    return _chat_stream(blocks=[_text(rng, 150, (0.1, 0.2))]), CHAT, "interactive", None, 8192, None


def _unreachable_but_quick(rng: random.Random) -> Built:
    """A thinking budget the deadline could never reach had thinking used it; this time it did not."""
    steps = _reasoning_stream(thinking=_thinking(rng, rng.uniform(5, 15)),
                              blocks=[_text(rng, rng.uniform(3, 8), (0.05, 0.2))],
                              thinking_tokens=rng.randint(300, 800), ping_every=5.0)
    return steps, REASONING, "interactive", 32000, 40000, None


def _search(rng: random.Random, seconds: float) -> ServerToolSpec:
    """A web search of `seconds` on the server, pinging every 1-2 s as the API does meanwhile."""
    return ServerToolSpec(name="web_search", chunks=("", '{"query": "how do', ' streams fail"}'), run=seconds,
                          ping_every=rng.uniform(1.0, 2.0), result_type="web_search_tool_result")


def _web_search(rng: random.Random) -> Built:
    """Text, a search of a few seconds (shorter than the idle budget, and pinging: either alone
    keeps a healthy search clear of it), then the answer."""
    blocks: list[BlockSpec] = [
        TextSpec(["I'll ", "search ", "for ", "that."], interval=0.1, first_delay=rng.uniform(0.5, 2.0)),
        _search(rng, rng.uniform(3, 10)),
        _text(rng, rng.uniform(5, 20), (0.05, 0.3)),
    ]
    return _chat_stream(blocks=blocks), CHAT, "chat", None, 4096, None


def _paused_turn(rng: random.Random) -> Built:
    """A long server-tool turn the server paused: text, a search, more text, stop `pause_turn`.
    The answer continues only when the caller sends the turn back."""
    blocks: list[BlockSpec] = [
        TextSpec(["Searching ", "first."], interval=0.1, first_delay=rng.uniform(0.5, 2.0)),
        _search(rng, rng.uniform(3, 10)),
        _text(rng, rng.uniform(2, 6), (0.05, 0.3)),
    ]
    return _chat_stream(blocks=blocks, stop_reason="pause_turn"), CHAT, "agent", None, 4096, None


def _cancelled(rng: random.Random) -> Built:
    return _chat_stream(blocks=[_text(rng, 30, (0.1, 0.3))]), CHAT, "chat", None, 4096, rng.randint(3, 20)


KINDS: dict[str, tuple[float, str, Builder]] = {
    "chat answer": (0.24, "complete", _chat),
    "long answer": (0.20, "complete", _long),
    "thinking, then answer": (0.10, "complete", _thinking_answer),
    "pinging stall": (0.03, "stalled_mid_stream", _pinging_stall),
    "silent stall": (0.02, "stalled_mid_stream", _silent_stall),
    "silent start": (0.02, "stalled_before_first_content", _silent_start),
    "overloaded": (0.05, "upstream_error", _overloaded),
    "limit during thinking": (0.05, "budget_exhausted", _limit_in_thinking),
    "limit during the answer": (0.05, "truncated", _limit_in_answer),
    "thinking used its whole budget": (0.05, "silently_unverified", _whole_budget),
    "refusal": (0.03, "refused", _refusal),
    "deadline during thinking": (0.03, "deadline_in_thinking", _deadline_in_thinking),
    "deadline during the answer": (0.03, "deadline_in_answer", _deadline_in_answer),
    "caller gave up": (0.04, "cancelled", _cancelled),
    "thinking budget beyond the deadline": (0.02, "complete", _unreachable_but_quick),
    "web search, then answer": (0.04, "complete", _web_search),
    "paused turn": (0.02, "paused", _paused_turn),
}
"""A production-like mix (a fifth long answers, a tenth thinking, 5 % stalls of which half keep pinging),
plus a share of every other failure streamscope tells apart, and of turns with a server-side
tool run (a web search that answers, a long turn the server paused)."""


def workload(count: int = 150, seed: int = 7) -> list[Request]:
    """`count` requests; every kind appears at least once, the rest drawn by weight."""
    rng = random.Random(seed)
    names = list(KINDS)
    kinds = names + rng.choices(names, weights=[KINDS[k][0] for k in names], k=max(count - len(names), 0))
    rng.shuffle(kinds)
    requests = []
    for number, kind in enumerate(kinds[:count]):
        _, expect, build = KINDS[kind]
        steps, model, route, thinking_budget, max_tokens, give_up = build(rng)
        requests.append(Request(number, kind, expect, model, route, tuple(steps), thinking_budget, max_tokens, give_up))
    return requests


def expected_mix(requests: Sequence[Request]) -> dict[str, int]:
    mix: dict[str, int] = {}
    for request in requests:
        mix[request.expect] = mix.get(request.expect, 0) + 1
    return mix


def tour(seed: int = 7) -> list[Request]:
    """One request of every kind, in a fixed order: every class label once or more."""
    rng = random.Random(seed)
    requests = []
    for number, (kind, (_, expect, build)) in enumerate(KINDS.items()):
        steps, model, route, thinking_budget, max_tokens, give_up = build(rng)
        requests.append(Request(number, kind, expect, model, route, tuple(steps), thinking_budget, max_tokens, give_up))
    return requests


@dataclass(frozen=True)
class Timeline:
    """When a script's content arrives, in model seconds from the request (what budgets judge)."""

    first_content: float | None
    """The first text or thinking delta (what a first-token budget with `first_content="any"` waits for)."""
    first_thinking: float | None
    first_text: float | None
    gaps: tuple[tuple[float, float], ...]
    """(start, length) of every silence between progress: deltas and block boundaries, and the
    pings of a server-tool run (a run pings while the server works; other pings are no progress)."""
    end: float


TIMED = ("stalled_before_first_content", "stalled_mid_stream", "deadline_in_thinking", "deadline_in_answer")
"""The classes a budget decides: their scripts overrun one budget on purpose."""


def timeline(request: Request) -> Timeline | None:
    """The script's timeline up to where its caller stops reading; None for an HTTP error answer."""
    if request.steps and isinstance(request.steps[0], HttpError):
        return None
    t = last = 0.0
    first: dict[str, float] = {}
    gaps: list[tuple[float, float]] = []
    texts, in_tool = 0, False
    for step in request.steps:
        t += step.delay
        if not isinstance(step, Event):
            if in_tool and isinstance(step, Ping):
                gaps.append((last, t - last))
                last = t
            continue
        data = step.data
        if step.name == "content_block_start":
            in_tool = data.get("content_block", {}).get("type") == "server_tool_use"
        elif step.name == "content_block_delta":
            kind = {"text_delta": "text", "thinking_delta": "thinking"}.get(data.get("delta", {}).get("type"))
            if kind is not None:
                first.setdefault(kind, t)
            if kind == "text":
                texts += 1
        elif step.name != "content_block_stop":
            continue
        gaps.append((last, t - last))
        last = t
        if request.give_up_after is not None and texts >= request.give_up_after:
            break
    content = min(first.values(), default=None)
    return Timeline(content, first.get("thinking"), first.get("text"), tuple(gaps), t)


def margin(request: Request, budgets: BudgetTable | None = None) -> float:
    """How far (model seconds) the request's script stays from the budget decisions that would give
    it another class than the one it was written for: the smallest distance, in either direction.

    A healthy script must end every wait before its budget; a script written to be caught by one
    budget must overrun it, and stay clear of the others until then. `inf` where no budget judges.
    """
    table = budgets or BudgetTable.from_config(BUDGETS_MODEL_SECONDS)
    b = table.resolve(request.model, request.route)
    line = timeline(request)
    if line is None:
        return math.inf
    first_wait = line.first_content if b.first_content == "any" else line.first_text
    deadline = b.deadline if b.deadline is not None else math.inf
    # Only what happens before the deadline counts once the deadline is what ends the stream.
    cutoff = deadline if request.expect in ("deadline_in_thinking", "deadline_in_answer") else math.inf
    # Idle judges the silences after the first content; before it, first-token does.
    after = first_wait if first_wait is not None else math.inf
    gaps = [length for start, length in line.gaps if after <= start < cutoff]
    stall = max(gaps, default=0.0)
    room: list[float] = []
    if request.expect == "stalled_before_first_content":
        room.append((first_wait if first_wait is not None else line.end) - _set(b.first_token))
    elif request.expect == "stalled_mid_stream":
        room += [stall - _set(b.idle), _clear(b.first_token, first_wait)]
        room += [_set(b.idle) - g for g in sorted(gaps)[:-1]]  # only the stall overruns idle
    elif request.expect == "deadline_in_thinking":
        room += [(line.first_text or line.end) - deadline, deadline - (line.first_thinking or math.inf)]
        room += [_clear(b.first_token, first_wait), _clear(b.idle, stall)]
    elif request.expect == "deadline_in_answer":
        room += [deadline - (line.first_text or math.inf), line.end - deadline]
        room += [_clear(b.first_token, first_wait), _clear(b.idle, stall)]
    else:
        room += [_clear(b.first_token, first_wait), _clear(b.idle, stall), _clear(b.deadline, line.end)]
    return min(room)


def _set(budget: float | None) -> float:
    if budget is None:
        raise ValueError("a timed script needs the budget it is written for")
    return budget


def _clear(budget: float | None, elapsed: float | None) -> float:
    """Room between an elapsed wait and a budget (inf when either is absent)."""
    return math.inf if budget is None or elapsed is None else budget - elapsed
