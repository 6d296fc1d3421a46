"""The honest result type (seed 003): a truncated or unverified answer cannot pass for a finished one."""

from __future__ import annotations

import pytest

from conftest import USER, Telemetry, aclient, client
from streamscope import Budgets, acollect, collect, stream_with_retry

THINKING = {"type": "enabled", "budget_tokens": 4096}


@pytest.mark.parametrize(
    ("scenario", "extra", "status", "reason", "partial"),
    [
        ("complete", {}, "ok", "complete", False),
        ("truncated", {}, "degraded", "truncated", False),
        ("silently_unverified", {"thinking": THINKING}, "degraded", "silently_unverified", False),
        ("budget_exhausted", {"thinking": THINKING}, "unavailable", "budget_exhausted", False),
        ("refused", {}, "unavailable", "refused", False),
        ("inband_error", {}, "degraded", "upstream_error", True),
        ("cut_connection", {}, "degraded", "upstream_error", True),
    ],
)
def test_collect(sim, telemetry: Telemetry, scenario: str, extra: dict, status: str, reason: str,
                 partial: bool) -> None:
    with client(sim, scenario).messages.stream(model="m", max_tokens=8192, messages=USER, **extra) as stream:
        result = collect(stream)
    assert (result.status, result.reason, result.partial) == (status, reason, partial)
    assert result.verified is (status == "ok")
    assert (result.error is None) is (reason not in ("upstream_error",))
    want = {"inband_error": "upstream_unavailable", "cut_connection": "upstream_unreachable"}.get(scenario)
    assert result.code == want


async def test_acollect_on_a_stall(sim, instrument) -> None:
    instrument(budgets=Budgets(idle=0.3))
    stream = await aclient(sim, "pinging_stall").messages.create(model="m", max_tokens=64, messages=USER, stream=True)
    result = await acollect(stream)
    assert result.status == "degraded" and result.reason == "stalled_mid_stream" and result.partial
    assert result.text == "Streams fail in" and not result.verified
    assert result.code == "upstream_timeout"


def test_collect_after_retries_that_never_got_through(sim, telemetry: Telemetry) -> None:
    c = client(sim, "http_529")
    result = collect(stream_with_retry(lambda: c.messages.create(model="m", max_tokens=64, messages=USER,
                                                                 stream=True), attempts=2))
    assert (result.status, result.reason, result.text, result.code) == (
        "unavailable", "upstream_error", "", "upstream_unavailable")


def test_collect_complete_text(sim, telemetry: Telemetry) -> None:
    result = collect(client(sim, "complete").messages.create(model="m", max_tokens=64, messages=USER, stream=True))
    assert result.text == "Hello! How can I help you today?"
    assert result.stop_reason == "end_turn"
