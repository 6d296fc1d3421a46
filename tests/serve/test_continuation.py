# ruff: noqa: F811 - the fixtures `sim` and `on` come from test_relay
"""Continuing a relayed answer from its partial text (`relay(..., continuation=...)`): an answer
that fails mid-prose is carried on by a new request from its last clean sentence, the page told
where the seam is; a tool call, a deadline, structured output and the limit end it as before.

Real uvicorn, the real anthropic SDK (async and sync) against the simulator.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from served import serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from test_relay import Got, get, on, requests_for, sim  # noqa: F401 - fixtures

from streamscope.core.errors import StreamTimeout
from streamscope.core.failures import Failure
from streamscope.serve import MemoryBuffer, continuation_messages, relay, trim_to_sentence
from streamscope.serve.continuation import refusal
from streamscope.simulator import SCENARIOS, Scenario, Simulator
from streamscope.simulator.catalog import PROSE, PROSE_REST

USER = [{"role": "user", "content": "How do streams fail?"}]
BUFFER = MemoryBuffer(grace=1.0, ttl=30.0)
KEPT = "Streams fail in two ways. Some stop before the first token."
_names = itertools.count()


def app(simulator: Simulator) -> Any:
    async def relayed(request: Request) -> Response:
        scenario, q = request.path_params["scenario"], request.query_params
        kind = anthropic.Anthropic if q.get("sync") == "1" else anthropic.AsyncAnthropic
        client = kind(base_url=simulator.url(scenario), api_key="test-key", max_retries=0)
        params: dict[str, Any] = {"model": "claude-sim-1", "max_tokens": 1024}
        if q.get("json") == "1":
            params["output_config"] = {"format": {"type": "json_schema", "schema": {"type": "object"}}}

        def opened(messages: list[dict[str, Any]]) -> Any:
            return client.messages.create(**params, messages=messages, stream=True)

        return await relay(request, lambda: opened(USER),
                           continuation=lambda partial: opened(continuation_messages(USER, partial)),
                           continuations=int(q.get("continuations", "2")),
                           resume=BUFFER if q.get("resume") == "1" else None)

    return Starlette(routes=[Route("/continue/{scenario}", relayed)])


@pytest.fixture(scope="module")
def base(sim: Simulator) -> Iterator[str]:
    with serving(app(sim)) as url:
        yield url


def fresh(sim: Simulator, like: str, attempts: list[Any] | None = None) -> str:
    """A scenario of its own for one test (the simulator counts requests per scenario)."""
    name = f"{like}_{next(_names)}"
    sim.add(Scenario(name, attempts if attempts is not None else list(SCENARIOS[like].attempts)))
    return name


def shown(got: Got) -> str:
    """What the page shows: the tokens, each seam dropping the characters it says."""
    text = ""
    for event in got.events:
        if event.event == "token":
            text += event.json["text"]
        elif event.event == "seam":
            text = text[: len(text) - event.json["drop"]]
    return text


@pytest.mark.parametrize("query", ["", "?sync=1"])
def test_a_failure_mid_prose_is_continued_from_its_last_sentence(base: str, sim: Simulator, on: Any,
                                                                  query: str) -> None:
    state = on(prices={"claude-sim-*": {"input": 1.0, "output": 2.0}})
    since = len(sim.requests)
    name = fresh(sim, "prose_overloaded")
    got = get(base, f"/continue/{name}{query}")
    assert got.status == 200 and got.terminal.event == "done"
    [seam] = [e for e in got.events if e.event == "seam"]
    assert seam.json["continuation"] == 1 and seam.json["drop"] == len("".join(PROSE)) - len(KEPT)
    assert shown(got) == KEPT + "".join(PROSE_REST), "no half sentence, nothing twice"
    ids = [e.id for e in got.events]
    rid = got.headers["x-request-id"]
    assert ids == [f"{rid}:{n}" for n in range(1, len(ids) + 1)], "one numbering across the seam"
    first, again = requests_for(sim, name, since)
    assert again.body["messages"] == continuation_messages(USER, KEPT) and first.body["messages"] == USER
    spans = state.spans()
    assert [s.attributes.get("streamscope.continuation") for s in spans] == [None, 1]
    assert spans[0].attributes["streamscope.class"] != "complete" and spans[1].attributes["streamscope.class"] == \
        "complete"
    assert spans[1].context.trace_id == spans[0].context.trace_id, "one trace"
    assert spans[1].parent is not None and spans[1].parent.span_id == spans[0].context.span_id
    [record] = state.wait_for_log()
    fields = record.__dict__
    assert (fields["outcome"], fields["continuations"], fields["attempts"]) == ("done", 1, 2)
    costs = [s.attributes["streamscope.cost.usd"] for s in spans]
    assert all(cost > 0 for cost in costs) and fields["cost"] == pytest.approx(sum(costs), rel=1e-12)
    points = {p.attributes["streamscope.relay.outcome"]: p.value
              for p in state.points("streamscope.relay.continuations")}
    assert points == {"done": 1}


def test_a_continued_answer_resumes_across_its_seam(base: str, sim: Simulator, on: Any) -> None:
    """With a resume buffer too: the seam is one more event of the generation, a reconnect after it
    gets the rest, and the record (written once the end reached the browser) counts the continuation."""
    state = on()
    name = fresh(sim, "prose_overloaded")
    whole = get(base, f"/continue/{name}?resume=1")
    assert whole.terminal.event == "done"
    rid = whole.headers["x-request-id"]
    seam = next(n for n, e in enumerate(whole.events) if e.event == "seam")
    again = get(base, f"/continue/{name}?resume=1", {"Last-Event-ID": f"{rid}:{seam}"})
    assert again.events == whole.events[seam:], "the seam and what followed it, replayed"
    [record] = state.wait_for_log()
    fields = record.__dict__
    assert (fields["outcome"], fields["continuations"], fields["delivered"]) == ("done", 1, len(whole.events))


def test_a_tool_call_is_never_continued(base: str, sim: Simulator, on: Any) -> None:
    state = on()
    since = len(sim.requests)
    name = fresh(sim, "tool_call_cut")
    got = get(base, f"/continue/{name}")
    assert got.terminal.event == "error" and got.terminal.json["partial"] is True
    assert not [e for e in got.events if e.event == "seam"]
    assert len(requests_for(sim, name, since)) == 1, "the half-streamed call is discarded, not continued"
    [record] = state.wait_for_log()
    assert (record.__dict__["outcome"], record.__dict__["continuations"]) == ("error", 0)
    assert state.points("streamscope.relay.continuations") == []


def test_structured_output_is_never_continued(base: str, sim: Simulator, on: Any) -> None:
    on()
    since = len(sim.requests)
    name = fresh(sim, "prose_overloaded")
    got = get(base, f"/continue/{name}?json=1")
    assert got.terminal.event == "error" and len(requests_for(sim, name, since)) == 1


def test_continuations_stop_at_the_limit(base: str, sim: Simulator, on: Any) -> None:
    """A provider failing mid-prose every time: one continuation (the limit set), then `error`."""
    state = on()
    since = len(sim.requests)
    failing = SCENARIOS["prose_overloaded"].attempts[0]
    name = fresh(sim, "prose_overloaded", [failing])
    got = get(base, f"/continue/{name}?continuations=1")
    assert got.terminal.event == "error" and got.terminal.json["partial"] is True
    assert [e.json["continuation"] for e in got.events if e.event == "seam"] == [1]
    assert len(requests_for(sim, name, since)) == 2
    [record] = state.wait_for_log()
    assert (record.__dict__["outcome"], record.__dict__["continuations"]) == ("error", 1)
    points = {p.attributes["streamscope.relay.outcome"]: p.value
              for p in state.points("streamscope.relay.continuations")}
    assert points == {"error": 1}


def test_a_wrong_continuation_option_is_one_line() -> None:
    import asyncio

    with pytest.raises(TypeError, match=r"^relay\(continuation=...\) takes a function"):
        asyncio.run(relay(None, lambda: None, continuation="yes"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^relay\(continuations=...\) takes a whole number >= 0, not -1$"):
        asyncio.run(relay(None, lambda: None, continuations=-1))  # type: ignore[arg-type]


# -- the rules, as a table ---------------------------------------------------------------------


def test_the_partial_text_is_cut_back_to_its_last_clean_sentence() -> None:
    assert trim_to_sentence("".join(PROSE)) == KEPT
    assert trim_to_sentence("One. Two! Three? Fou") == "One. Two! Three?"
    assert trim_to_sentence('He said "stop." Then') == 'He said "stop."'
    assert trim_to_sentence("First paragraph\n\nsecond one, half") == "First paragraph\n\n"
    assert trim_to_sentence("It costs 3.5 dollars and") == "", "a decimal point ends no sentence"
    assert trim_to_sentence("No end at all") == ""
    assert trim_to_sentence("Ends here.") == "Ends here."


@pytest.mark.parametrize(("failure", "exc", "options", "why"), [
    (Failure("upstream_unavailable", True), Exception(), {}, None),
    (Failure("upstream_timeout", True), StreamTimeout("idle", True), {}, None),
    (Failure("upstream_unreachable", True), Exception(), {}, None),
    (Failure("rate_limited", True), Exception(), {}, None),
    (Failure("upstream_timeout", False), StreamTimeout("deadline", True), {}, "deadline"),
    (Failure("internal_error", False), Exception(), {}, "not_continuable"),
    (Failure("bad_request", False), Exception(), {}, "not_continuable"),
    (None, Exception(), {}, "not_continuable"),
    (Failure("upstream_unavailable", True), Exception(), {"tool_call": True}, "tool_call"),
    (Failure("upstream_unavailable", True), Exception(), {"structured": True}, "structured_output"),
    (Failure("upstream_unavailable", True), Exception(), {"made": 2}, "limit"),
])
def test_what_is_continued(failure: Failure | None, exc: BaseException, options: dict[str, Any],
                           why: str | None) -> None:
    settings = {"tool_call": False, "structured": False, "made": 0, "allowed": 2, **options}
    assert refusal(failure, exc, **settings) == why


def test_the_continuation_messages_are_the_conversation_then_the_partial_answer() -> None:
    made = continuation_messages(USER, KEPT)
    assert made[:1] == USER and made[1] == {"role": "assistant", "content": KEPT}
    assert made[2] == {"role": "user", "content": "Continue exactly where you stopped. Do not repeat earlier text."}
    assert continuation_messages(USER, "") == USER
