"""Phase times come out where the script put them (generous margins: a loaded 2-core machine),
and pings never count as content."""

from __future__ import annotations

from typing import Any

from conftest import USER, Telemetry, aclient, client
from streamscope.simulator import SCENARIOS, Event, Ping

EARLY = 0.25
"""How much earlier than the script a time may be measured (a gap shrinks when its first event was late)."""
LATE = 0.6
"""How much later: a loaded 2-core machine (six test workers) delivers events late, never early."""


def scripted(name: str) -> dict[str, float]:
    """When the script sends each phase's event, in seconds after the request."""
    t = 0.0
    times: dict[str, float] = {}
    kind = None
    gaps: list[float] = []
    last_text: float | None = None
    for step in SCENARIOS[name].steps_for(0):
        t += step.delay
        if isinstance(step, Ping):
            times.setdefault("first_ping", t)
        if not isinstance(step, Event):
            continue
        data: dict[str, Any] = step.data
        if step.name == "content_block_start":
            kind = data["content_block"]["type"]
            if kind == "thinking":
                times.setdefault("thinking_start", t)
        elif step.name == "content_block_stop" and kind == "thinking" and "first_text" not in times:
            times["thinking_end"] = t
        elif step.name == "content_block_delta" and data["delta"]["type"] != "text_delta":
            times.setdefault("first_delta", t)
        elif step.name == "content_block_delta" and data["delta"]["type"] == "text_delta":
            times.setdefault("first_text", t)
            if last_text is not None:
                gaps.append(t - last_text)
            last_text = t
    times["max_text_gap"] = max(gaps) if gaps else 0.0
    return times


def near(measured: float, expected: float) -> bool:
    return expected - EARLY <= measured <= expected + LATE


def test_thinking_phases_match_the_script(sim, telemetry: Telemetry) -> None:
    script = scripted("thinking")
    assert near(script["first_text"], 0.6), script  # the scenario is what the test says it is
    with client(sim, "thinking").messages.stream(model="m", max_tokens=4096, messages=USER,
                                                 thinking={"type": "enabled", "budget_tokens": 2048}) as s:
        s.until_done()
    a = telemetry.attrs()
    for attribute, key in [("streamscope.thinking.start", "thinking_start"),
                           ("streamscope.thinking.end", "thinking_end"),
                           ("streamscope.time_to_first_text", "first_text")]:
        assert near(a[attribute], script[key]), (attribute, a[attribute], script[key])
    assert a["streamscope.thinking.start"] < a["streamscope.thinking.end"] < a["streamscope.time_to_first_text"]
    assert a["streamscope.time_to_first_content"] == a["streamscope.time_to_first_text"]  # default: "text"
    assert a["streamscope.max_gap"] <= script["max_text_gap"] + LATE
    assert 0 <= a["streamscope.time_to_headers"] <= a["gen_ai.response.time_to_first_chunk"]
    assert a["gen_ai.response.time_to_first_chunk"] < a["streamscope.thinking.start"]
    assert a["gen_ai.usage.reasoning.output_tokens"] == 120
    assert a["streamscope.decode_rate"] > 0
    events = {e.name: e for e in telemetry.one().events}
    assert set(events) == {"streamscope.first_content", "streamscope.thinking_done"}
    start = telemetry.one().start_time
    assert near((events["streamscope.thinking_done"].timestamp - start) / 1e9, script["thinking_end"])


async def test_first_content_any_counts_thinking(sim, instrument) -> None:
    from streamscope import Budgets

    telemetry = instrument(budgets=Budgets(first_content="any"))
    async with aclient(sim, "thinking").messages.stream(model="m", max_tokens=4096, messages=USER) as s:
        await s.until_done()
    a = telemetry.attrs()
    script = scripted("thinking")
    assert a["streamscope.time_to_first_content"] < a["streamscope.time_to_first_text"]
    assert near(a["streamscope.time_to_first_content"], script["first_delta"])


def test_pings_are_counted_never_content(sim, telemetry: Telemetry) -> None:
    """seed 000's thinking stream: two pings 0.2 s apart, then five text deltas 0.1 s apart."""
    for _ in client(sim, "timed_thinking").messages.create(model="m", max_tokens=64, messages=USER, stream=True):
        pass
    a = telemetry.attrs()
    assert a["streamscope.pings"] == 2
    assert a["streamscope.content_events"] == 5
    assert near(a["streamscope.time_to_first_content"], 0.5)  # not 0.2: a ping is not content
    assert a["streamscope.max_gap"] < 0.1 + LATE


def test_a_pinging_pause_is_a_gap(sim, telemetry: Telemetry) -> None:
    """Three text deltas, pings for 1 s, one more delta: the largest gap is the pause, pings or not."""
    from streamscope.simulator import Scenario, TextSpec, message_stream, pings

    sim.add(Scenario.single("pinging_pause", message_stream(
        blocks=[TextSpec(["a", "b", "c", *pings(0.2, 5), "d"], interval=0.05)])))
    for _ in client(sim, "pinging_pause").messages.create(model="m", max_tokens=64, messages=USER, stream=True):
        pass
    a = telemetry.attrs()
    assert a["streamscope.pings"] == 5
    assert a["streamscope.content_events"] == 4
    assert near(a["streamscope.max_gap"], 1.05)


def test_a_stall_is_not_a_gap(sim, telemetry: Telemetry) -> None:
    """seed 000's pinging stall never resumes: its wait is the span's, not a gap between events."""
    for _ in client(sim, "timed_pinging_stall").messages.create(model="m", max_tokens=64, messages=USER, stream=True):
        pass
    a = telemetry.attrs()
    assert a["streamscope.pings"] == 10 and a["streamscope.content_events"] == 3
    assert a["streamscope.max_gap"] < 0.05 + LATE
