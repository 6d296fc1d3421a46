"""Each adapter says which events start a tool call (`Helpers.starts_tool_call`): what a relayed
answer's continuation never resumes. Read off the real SDKs' events, raw and through their
`stream()` helpers, from the simulator: a tool call is seen, a plain answer never is."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from streamscope.adapters.anthropic import HELPERS as ANTHROPIC
from streamscope.adapters.openai import HELPERS as OPENAI
from streamscope.simulator import Simulator

USER = [{"role": "user", "content": "Weather?"}]


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    """Every scenario, OpenAI's included."""
    with Simulator() as simulator:
        yield simulator


def anthropic_events(sim: Simulator, scenario: str, helper: bool) -> list[Any]:
    client = anthropic.Anthropic(base_url=sim.url(scenario), api_key="k", max_retries=0)
    if helper:
        with client.messages.stream(model="claude-sim-1", max_tokens=64, messages=USER) as stream:
            return list(stream)
    return list(client.messages.create(model="claude-sim-1", max_tokens=64, messages=USER, stream=True))


def openai_events(sim: Simulator, scenario: str, api: str, helper: bool) -> list[Any]:
    client = openai.OpenAI(base_url=sim.openai_url(scenario), api_key="k", max_retries=0)
    if api == "chat" and helper:
        with client.chat.completions.stream(model="gpt-sim", messages=USER) as stream:
            return list(stream)
    if api == "chat":
        return list(client.chat.completions.create(model="gpt-sim", messages=USER, stream=True))
    if helper:
        with client.responses.stream(model="gpt-sim", input="Weather?") as stream:
            return list(stream)
    return list(client.responses.create(model="gpt-sim", input="Weather?", stream=True))


@pytest.mark.parametrize("helper", [False, True], ids=["raw", "helper"])
def test_anthropic(sim: Simulator, helper: bool) -> None:
    assert any(ANTHROPIC.starts_tool_call(e) for e in anthropic_events(sim, "tool_use", helper))
    assert not any(ANTHROPIC.starts_tool_call(e) for e in anthropic_events(sim, "complete", helper))


@pytest.mark.parametrize("helper", [False, True], ids=["raw", "helper"])
@pytest.mark.parametrize("api", ["chat", "responses"])
def test_openai(sim: Simulator, api: str, helper: bool) -> None:
    assert any(OPENAI.starts_tool_call(e) for e in openai_events(sim, f"{api}_tool_call", api, helper))
    assert not any(OPENAI.starts_tool_call(e) for e in openai_events(sim, f"{api}_complete", api, helper))
