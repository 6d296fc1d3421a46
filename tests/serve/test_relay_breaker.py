"""The relay with the circuit breaker on: an open breaker is a 503 with `Retry-After` (seconds to
the next probe) and code `circuit_open`, and the provider gets nothing."""

from __future__ import annotations

from typing import Any

import httpx2
from test_relay import base, get, no_provider_text, on, requests_for, sim  # noqa: F401 (fixtures)

from streamscope import Breaker
from streamscope.simulator import SCENARIOS, Scenario, Simulator


def test_an_open_breaker_is_a_503_with_retry_after(base: str, sim: Simulator, on: Any) -> None:  # noqa: F811
    state = on(breaker=Breaker(failures=2, window=30, cool_down=60))
    sim.add(Scenario("breaker_relay_529", [SCENARIOS["http_529"].attempts[0]]))
    since = len(sim.requests)
    # The relay's attempts: two 529s open the breaker, the third fails fast.
    first = get(base, "/relay/anthropic/create/breaker_relay_529")
    assert len(requests_for(sim, "breaker_relay_529", since)) == 2
    assert first.status == 503
    assert httpx2.Response(503, content=first.body).json()["code"] == "circuit_open"
    assert 55 <= int(first.headers["retry-after"]) <= 60
    again = get(base, "/relay/anthropic/create/breaker_relay_529")
    assert again.status == 503
    assert httpx2.Response(503, content=again.body).json() == {"code": "circuit_open",
                                                               "request_id": again.headers["x-request-id"]}
    assert 55 <= int(again.headers["retry-after"]) <= 60
    assert len(requests_for(sim, "breaker_relay_529", since)) == 2  # nothing more sent
    no_provider_text(again)
    codes = [(s.attributes or {}).get("streamscope.failure.code") for s in state.spans()]
    assert codes.count("circuit_open") == 2
