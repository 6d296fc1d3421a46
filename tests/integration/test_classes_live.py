"""Every class label that can arise from the stream itself, through the real SDK over loopback.

For each, `classify()` on the exported attributes must give the label written live.
"""

from __future__ import annotations

import asyncio

import anthropic
import pytest

import sdk_lines
import streamscope
from conftest import USER, Telemetry, aclient, client, offline_class
from streamscope.adapters.providers import retry_decision

THINKING = {"type": "enabled", "budget_tokens": 4096}


def run_sync(sim, scenario: str, **kwargs) -> None:
    params = {"model": "claude-sim-1", "max_tokens": 1024, "messages": USER, **kwargs}
    with client(sim, scenario).messages.stream(**params) as stream:
        for _ in stream:
            pass


@pytest.mark.parametrize(
    ("scenario", "request_args", "label", "code"),
    [
        ("complete", {}, "complete", None),
        ("basic_text", {}, "complete", None),
        ("docs_thinking", {"thinking": THINKING}, "complete", None),
        ("thinking", {"thinking": THINKING}, "complete", None),
        ("tool_use", {}, "complete", None),
        ("truncated", {}, "truncated", None),
        ("budget_exhausted", {"thinking": THINKING}, "budget_exhausted", None),
        ("silently_unverified", {"thinking": THINKING}, "silently_unverified", None),
        ("refused", {}, "refused", None),
        ("inband_error", {}, "upstream_error", "upstream_unavailable"),
        ("docs_overloaded", {}, "upstream_error", "upstream_unavailable"),
        ("cut_connection", {}, "upstream_error", "upstream_unreachable"),
        ("incomplete", {}, "upstream_error", "upstream_unreachable"),
        ("http_529", {}, "upstream_error", "upstream_unavailable"),
    ],
)
def test_class_from_the_stream(sim, telemetry: Telemetry, scenario, request_args, label, code) -> None:
    c = client(sim, scenario)
    params = {"model": "claude-sim-1", "max_tokens": 1024, "messages": USER, "stream": True, **request_args}
    raised: BaseException | None = None
    try:
        for _ in c.messages.create(**params):
            pass
    except Exception as exc:
        raised = exc
    span = telemetry.one()
    assert span.attributes["streamscope.class"] == label
    assert offline_class(span) == label
    assert span.attributes["streamscope.verified"] is (label == "complete")
    assert span.attributes.get("streamscope.failure.code") == code
    if raised is not None:  # the retry line's decision on what the caller got says the same code
        decided = retry_decision(raised)
        assert decided is not None and decided.code == code


def test_upstream_error_types(sim, telemetry: Telemetry) -> None:
    """error.type: the provider's type for in-band/HTTP errors, the module-qualified class name for a cut."""
    expected = {"inband_error": "overloaded_error", "http_529": "overloaded_error",
                "cut_connection": sdk_lines.cut_type(), "incomplete": "incomplete_stream"}
    for scenario in expected:
        with pytest.raises(Exception) if scenario != "incomplete" else _nothing():
            for _ in client(sim, scenario).messages.create(model="m", max_tokens=64, messages=USER, stream=True):
                pass
    got = {s.attributes["streamscope.class"]: None for s in telemetry.spans()}
    assert set(got) == {"upstream_error"}
    assert sorted(s.attributes["error.type"] for s in telemetry.spans()) == sorted(expected.values())
    for span in telemetry.spans():
        assert span.attributes["gen_ai.response.finish_reasons"] == ("error",)
        assert "Overloaded" not in str(dict(span.attributes)), "raw provider text must not leak"


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_partial_after_content(sim, telemetry: Telemetry) -> None:
    with pytest.raises(anthropic.APIStatusError):
        run_sync(sim, "inband_error")
    attrs = telemetry.attrs()
    assert attrs["streamscope.partial"] is True
    assert attrs["streamscope.time_to_first_text"] > 0


def test_cancelled_when_the_caller_closes(sim, telemetry: Telemetry) -> None:
    with client(sim, "slow_answer").messages.stream(model="m", max_tokens=64, messages=USER) as stream:
        for event in stream:
            if event.type == "text":
                break
    span = telemetry.one()
    assert span.attributes["streamscope.class"] == "cancelled" == offline_class(span)
    assert span.attributes["error.type"] == "cancelled"
    assert span.attributes["streamscope.partial"] is True
    assert "streamscope.budget.fired" not in span.attributes
    assert "streamscope.failure.code" not in span.attributes  # the caller left: no code


async def test_deadline_in_thinking_when_the_caller_gives_up(sim, telemetry: Telemetry) -> None:
    c = aclient(sim, "slow_thinking")
    with pytest.raises(TimeoutError):
        with streamscope.deadline(0.6):
            async with asyncio.timeout(0.6):
                async with c.messages.stream(model="m", max_tokens=4096, messages=USER, thinking=THINKING) as s:
                    async for _ in s:
                        pass
    span = telemetry.one()
    assert span.attributes["streamscope.class"] == "deadline_in_thinking" == offline_class(span)
    assert span.attributes["streamscope.budget.fired"] == "deadline"
    assert span.attributes["error.type"] == "timeout"
    assert span.attributes["streamscope.failure.code"] == "upstream_timeout"  # gave up past its deadline
    assert "streamscope.time_to_first_text" not in span.attributes
    assert span.attributes["streamscope.thinking.start"] < 0.6


async def test_deadline_in_answer_when_the_caller_gives_up(sim, telemetry: Telemetry) -> None:
    c = aclient(sim, "slow_answer")
    with pytest.raises(TimeoutError):
        with streamscope.deadline(0.8):
            async with asyncio.timeout(0.8):
                stream = await c.messages.create(model="m", max_tokens=64, messages=USER, stream=True)
                async for _ in stream:
                    pass
    span = telemetry.one()
    assert span.attributes["streamscope.class"] == "deadline_in_answer" == offline_class(span)
    assert span.attributes["streamscope.partial"] is True


async def test_cancelled_without_a_deadline(sim, telemetry: Telemetry) -> None:
    c = aclient(sim, "slow_answer")
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            async with c.messages.stream(model="m", max_tokens=64, messages=USER) as s:
                async for _ in s:
                    pass
    span = telemetry.one()
    assert span.attributes["streamscope.class"] == "cancelled" == offline_class(span)
    assert span.attributes["error.type"] == "cancelled"
