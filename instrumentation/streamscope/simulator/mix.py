"""The mix: a scenario drawn per request, for clients that cannot choose one by URL.

An SDK or an app pointed at the plain base URL (``/v1/messages``, ``/v1/chat/completions``,
``/v1/responses``) cannot put a scenario name in its path, so each request gets one drawn from
weighted names, by a seeded ``random.Random``: the same seed and the same requests give the same
scenarios, so a run repeats.

A mix may name either catalog's scenario for the same behaviour (``complete`` or ``chat_complete``,
``http_429`` or ``openai_http_429``): each route plays the counterpart that exists for its API
(COUNTERPARTS; Anthropic's ``http_529`` is ``openai_http_503`` on OpenAI's routes, which have no 529).
A name without a counterpart plays only on its own API's routes, told by its prefix as the catalogs
name them: ``chat_*`` on Chat Completions, ``responses_*`` on Responses, ``openai_*`` on both,
any other name on Messages; the other routes leave it out of their draw.
"""

from __future__ import annotations

import difflib
import math
import random
import threading
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import Literal

Route = Literal["messages", "chat", "responses"]
ROUTES: tuple[Route, ...] = ("messages", "chat", "responses")

DEFAULT_MIX: Mapping[str, float] = MappingProxyType(
    {"complete": 0.8, "http_429": 0.05, "http_529": 0.05, "http_500": 0.05, "http_400": 0.05}
)
"""Mostly successes, and 5 % each of the errors a service must handle before any stream."""

COUNTERPARTS: tuple[tuple[str, str, str], ...] = (
    # (Messages, Chat Completions, Responses)
    ("complete", "chat_complete", "responses_complete"),
    ("http_429", "openai_http_429", "openai_http_429"),
    ("http_529", "openai_http_503", "openai_http_503"),
    ("http_500", "openai_http_500", "openai_http_500"),
    ("http_400", "openai_http_400", "openai_http_400"),
    ("thinking", "chat_reasoning", "responses_reasoning"),
    ("tool_use", "chat_tool_call", "responses_tool_call"),
    ("truncated", "chat_truncated", "responses_truncated"),
    ("budget_exhausted", "chat_budget_exhausted", "responses_budget_exhausted"),
    ("refused", "chat_refusal", "responses_refusal"),
    ("inband_error", "chat_inband_error", "responses_inband_error"),
    ("cut_connection", "chat_cut_connection", "responses_cut_connection"),
    ("incomplete", "chat_incomplete", "responses_incomplete"),
    ("silent_stall", "chat_silent_stall", "responses_silent_stall"),
    ("silent_start", "chat_silent_start", "responses_silent_start"),
)
"""The same behaviour on each API, so one mix serves Anthropic and OpenAI clients alike."""

_GROUP = {name: group for group in COUNTERPARTS for name in group}


def on_route(name: str, route: Route) -> str | None:
    """The scenario that plays ``name``'s behaviour on ``route``, or None if it has none there."""
    group = _GROUP.get(name)
    if group is not None:
        return group[ROUTES.index(route)]
    if name.startswith("chat_"):
        own: tuple[Route, ...] = ("chat",)
    elif name.startswith("responses_"):
        own = ("responses",)
    elif name.startswith("openai_"):
        own = ("chat", "responses")
    else:
        own = ("messages",)
    return name if route in own else None


def unknown(name: str, served: Collection[str]) -> str:
    """One line: the bad name, the nearest good one, and every valid one."""
    close = difflib.get_close_matches(name, list(served), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"no scenario named {name!r}{hint}; valid names: {', '.join(sorted(served))}"


class Mix:
    """Weighted scenario names, checked against the names served, drawn per request and route.

    Weights are relative (they need not sum to 1). One ``random.Random(seed)`` draws for every
    route, in the order requests arrive.
    """

    def __init__(self, weights: Mapping[str, float], served: Collection[str], seed: int | None = 0) -> None:
        if not weights:
            raise ValueError("the mix is empty: give at least one scenario name with a weight > 0")
        for name, weight in weights.items():
            if name not in served:
                raise ValueError(unknown(name, served))
            if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) \
                    or weight < 0:
                raise ValueError(f"weight {weight!r} for {name!r}: give a finite number >= 0")
        if not any(weights.values()):
            raise ValueError("every weight in the mix is 0: give at least one scenario a weight > 0")
        self.weights: dict[str, float] = dict(weights)
        """The weights as given."""
        self._tables: dict[Route, dict[str, float]] = {}
        for route in ROUTES:
            table: dict[str, float] = {}
            for name, weight in weights.items():
                target = on_route(name, route)
                if target is not None and target in served and weight > 0:
                    table[target] = table.get(target, 0.0) + float(weight)
            self._tables[route] = table
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    @classmethod
    def default(cls, served: Collection[str], seed: int | None = 0) -> Mix | None:
        """DEFAULT_MIX, less the names not served (None if none is: the plain routes then answer 404)."""
        weights = {name: weight for name, weight in DEFAULT_MIX.items() if name in served}
        return cls(weights, served, seed) if weights else None

    def on(self, route: Route) -> dict[str, float]:
        """What ``route`` draws from: scenario name → share (the shares sum to 1; empty if none)."""
        table = self._tables[route]
        total = sum(table.values())
        return {name: weight / total for name, weight in table.items()}

    def draw(self, route: Route) -> str | None:
        """The next request's scenario on ``route``, or None if the mix has none for it."""
        table = self._tables[route]
        if not table:
            return None
        with self._lock:
            return self._random.choices(list(table), weights=list(table.values()))[0]
