"""A framework that retries a failed streamed call itself: each attempt its span, linked to the one before.

What the OpenAI Agents SDK's retry settings, LiteLLM's `num_retries` or a tenacity decorator do,
written out: the same request again, from the same thread or task, under the same parent span.
on the client it holds. The retry's span says which attempt it is (`streamscope.attempt`) and links to the failed
attempt's span (`streamscope.link = previous_attempt`); a call that is not a retry (another
thread, another request, after a success) has neither.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import anthropic
import pytest
from opentelemetry import trace

from conftest import USER, Telemetry, client
from streamscope import Budgets, StreamTimeout
from streamscope.simulator import SCENARIOS, Scenario

PARAMS = {"model": "claude-sim-1", "max_tokens": 256, "messages": USER}


def fresh(sim: Any, name: str) -> str:
    """A private copy of a scenario (its attempts counted from 0)."""
    import uuid

    copy = Scenario(f"{name}-{uuid.uuid4().hex[:8]}", list(SCENARIOS[name].attempts))
    sim.add(copy)
    return sim.url(copy.name)


def sdk(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)


def attempt(c: anthropic.Anthropic, params: dict[str, Any] = PARAMS) -> str:
    """One try, as a framework makes it on the client it holds: the answer's text, or the failure's
    class name."""
    try:
        return "".join(e.delta.text for e in c.messages.create(**params, stream=True)
                       if e.type == "content_block_delta" and e.delta.type == "text_delta")
    except Exception as exc:
        return type(exc).__name__


def by_start(telemetry: Telemetry) -> list[Any]:
    return sorted(telemetry.spans(), key=lambda s: s.start_time)


def test_a_retry_after_an_http_error_links_to_the_failed_attempt(sim, telemetry: Telemetry) -> None:
    c = sdk(fresh(sim, "http_529_then_ok"))
    tracer = telemetry.provider.get_tracer("framework")
    with tracer.start_as_current_span("agent turn"):
        assert attempt(c) in ("APIStatusError", "InternalServerError", "OverloadedError")
        assert attempt(c)  # the framework's retry: the answer
    first, second = by_start(telemetry)
    assert first.attributes["streamscope.class"] == "upstream_error"
    assert "streamscope.attempt" not in first.attributes and not first.links
    assert second.attributes["streamscope.class"] == "complete" and second.attributes["streamscope.attempt"] == 2
    (link,) = second.links
    assert link.context.span_id == first.context.span_id and link.attributes == {"streamscope.link": "previous_attempt"}


def test_a_retry_after_a_budget_fired_mid_stream_is_attempt_two_then_three(sim, instrument: Callable[..., Telemetry]
                                                                          ) -> None:
    telemetry = instrument(budgets=Budgets(idle=0.8))
    c = sdk(sim.url("pinging_stall"))
    for _ in range(3):
        with pytest.raises(StreamTimeout):
            for _ in c.messages.create(**PARAMS, stream=True):
                pass
    spans = by_start(telemetry)
    assert [s.attributes.get("streamscope.attempt") for s in spans] == [None, 2, 3]
    assert [s.links[0].context.span_id for s in spans[1:]] == [s.context.span_id for s in spans[:2]]


def test_not_a_retry(sim, telemetry: Telemetry) -> None:
    """After a success; another request; another thread; another parent span; another client: no
    link. (Each case its own token limit, so that no case's failure is the next one's.)"""
    def params(case: int) -> dict[str, Any]:
        return {**PARAMS, "max_tokens": 100 + case}

    ok, failing = sdk(sim.url("complete")), sdk(sim.url("http_529"))
    assert attempt(ok, params(1)) and attempt(ok, params(1))  # after a success
    assert attempt(failing, params(2)) and attempt(ok, params(3))  # another request
    assert attempt(failing, params(4))
    done: list[str] = []
    thread = threading.Thread(target=lambda: done.append(attempt(failing, params(4))))
    thread.start()
    thread.join(30)
    assert done and done[0]  # the same request on the same client, from another thread
    with trace.get_tracer("t", tracer_provider=telemetry.provider).start_as_current_span("other parent"):
        assert attempt(failing, params(5))
    assert attempt(failing, params(5))  # the failure was under another parent
    assert attempt(failing, params(6)) and attempt(sdk(sim.url("http_529")), params(6))  # another client
    spans = telemetry.spans()
    assert len(spans) == 10
    assert all("streamscope.attempt" not in s.attributes and not s.links for s in spans)


async def test_async_retries_in_one_task_are_linked_across_tasks_not(sim, telemetry: Telemetry) -> None:
    async def one(c: anthropic.AsyncAnthropic) -> str:
        try:
            async for _ in await c.messages.create(**PARAMS, stream=True):
                pass
            return "ok"
        except Exception as exc:
            return type(exc).__name__

    c = anthropic.AsyncAnthropic(base_url=fresh(sim, "http_529_then_ok"), api_key="k", max_retries=0)
    assert await one(c) != "ok"
    assert await one(c) == "ok"  # the same task: a retry
    other = anthropic.AsyncAnthropic(base_url=fresh(sim, "http_529_then_ok"), api_key="k", max_retries=0)
    assert await asyncio.create_task(one(other)) != "ok"
    assert await asyncio.create_task(one(other)) == "ok"  # each in a task of its own: not linked
    attempts = [s.attributes.get("streamscope.attempt") for s in by_start(telemetry)]
    assert attempts == [None, 2, None, None]


def test_streamscopes_own_retry_line_is_left_to_say_its_attempts(sim, telemetry: Telemetry) -> None:
    from streamscope import Backoff, stream_with_retry

    url = fresh(sim, "http_529_then_ok")
    c = client(sim, "complete").with_options(base_url=url)
    result = stream_with_retry(lambda: c.messages.create(**PARAMS, stream=True), attempts=3,
                               backoff=Backoff(base=0.01, cap=0.02))
    for _ in result:
        pass
    spans = telemetry.spans()
    assert len(spans) == 2 and all("streamscope.attempt" not in s.attributes and not s.links for s in spans)
