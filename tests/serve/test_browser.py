"""The relay's contract as a real browser sees it: headless Chromium (Debian's, driven by Playwright).

The page (page.html, served by the relay app at `/`) reads each relay endpoint two ways: fetch
with a stream reader and the browser client's SSE parser as the package ships it (`sseParser` of
client.js: it sees the status, the headers and the keep-alive comments), and EventSource (what most
pages use; it sees events only). Each case checks the status before the stream, exactly one terminal event
and that it is last, its code and partial flag, no provider text anywhere the browser got it,
what the page shows, and one log record agreeing with the call's span. Then the browser leaving
(a fetch aborted, a tab closed) and an EventSource that reconnects after a dropped stream.
Chromium comes from `scripts/ensure-chromium`: no browser is downloaded here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, Response, sync_playwright
from relay_app import make_app
from served import serving
from test_relay import PROVIDER_TEXT, agrees, on, requests_for

from streamscope import Budgets
from streamscope.simulator import Scenario, ServerToolSpec, Simulator, TextSpec, message_stream

__all__ = ["on"]  # the fixture, shared with test_relay.py

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    # Without these, Chromium's own background connections are refused by the closed network here.
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
PAGE = Path(__file__).with_name("page.html")
READERS = ["fetch", "eventsource"]

# A server-side web search (not in the catalog): text, a 1 s search pinging every 0.2 s, more text.
WEB_SEARCH = Scenario.single("browser_web_search", message_stream(blocks=[
    TextSpec(["Let me", " look that up."], interval=0.02), ServerToolSpec(run=1.0, ping_every=0.2),
    TextSpec(["Streams fail", " in four ways."], interval=0.02)]))


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        simulator.add(WEB_SEARCH)
        yield simulator


@pytest.fixture(scope="module")
def base(sim: Simulator) -> Iterator[str]:
    with serving(make_app(sim, page=str(PAGE))) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    # Playwright's launch gives Chromium a fresh, empty profile (user-data-dir) of its own.
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@dataclass
class Tab:
    page: Page
    responses: list[Response]

    def read(self, reader: str, path: str, **options: Any) -> Read:
        name = "readWithFetch" if reader == "fetch" else "readWithEventSource"
        run = self.page.evaluate(f"([url, options]) => relayTest.{name}(url, options)", [path, options])
        assert run["finished"], f"the {reader} read of {path} did not finish: {run}"
        return Read(reader, run)

    def responses_for(self, path: str) -> list[Response]:
        return [r for r in self.responses if r.url.endswith(path)]


def opened(context: BrowserContext, base: str) -> Tab:
    page = context.new_page()
    responses: list[Response] = []
    page.on("response", lambda response: responses.append(response))
    page.goto(base + "/")
    return Tab(page, responses)


@pytest.fixture(scope="module")
def context(browser: Browser) -> Iterator[BrowserContext]:
    context = browser.new_context()
    yield context
    context.close()


@pytest.fixture(scope="module")
def shared(context: BrowserContext, base: str) -> Tab:
    return opened(context, base)


@pytest.fixture
def tab(shared: Tab, base: str) -> Tab:
    """The module's tab, the page loaded anew (a tab per test costs more than most tests here)."""
    shared.responses.clear()
    shared.page.goto(base + "/")
    return shared


@dataclass
class Read:
    """What the page got from one read (page.html's run, as JSON)."""

    reader: str
    run: dict[str, Any]

    @property
    def events(self) -> list[dict[str, Any]]:
        return list(self.run["events"])

    @property
    def terminal(self) -> dict[str, Any]:
        ends = [e for e in self.events if e["event"] in ("done", "error")]
        assert len(ends) == 1, [e["event"] for e in self.events]
        assert self.events[-1] == ends[0], "the terminal event is the last one"
        return ends[0]

    @property
    def end(self) -> dict[str, Any]:
        return dict(json.loads(self.terminal["data"]))

    @property
    def tokens(self) -> list[str]:
        return [json.loads(e["data"])["text"] for e in self.events if e["event"] == "token"]

    @property
    def request_id(self) -> str:
        """The X-Request-Id header (fetch; for EventSource, the network log's), else the events' ids'."""
        if self.run.get("requestId"):
            return str(self.run["requestId"])
        return str(self.events[0]["id"]).split(":")[0]

    @property
    def got(self) -> Any:
        """What test_relay.agrees reads: the response's request id."""
        return SimpleNamespace(headers={"x-request-id": self.request_id})

    @property
    def everything(self) -> str:
        """All the browser got and showed."""
        data = "\n".join(e["data"] for e in self.events)
        return "\n".join([self.run.get("body", ""), data, self.run["page"]])

    @property
    def marker(self) -> str:
        return str(self.run["marker"])


@dataclass(frozen=True)
class Case:
    path: str
    end: str | None = "done"  # the terminal event; None: an HTTP error before the stream
    status: int = 200
    code: str | None = None  # the error event's code, or the JSON body's
    partial: bool = False
    finish: str | None = None  # done's finish_reason
    label: str = "complete"  # the span's class
    budgets: Any = None
    keep_alives: int = 0  # at least this many keep-alive comments (seen by the fetch reader)
    tries: int = 1  # provider requests
    retry_after: str | None = None  # an HTTP error's Retry-After

    @property
    def scenario(self) -> str:
        return self.path.split("/")[4].split("?")[0]


CASES = {
    "complete": Case("/relay/anthropic/create/complete", finish="end_turn"),
    "thinking": Case("/relay/anthropic/create/thinking?thinking=1", finish="end_turn"),
    "truncated": Case("/relay/anthropic/create/truncated", finish="max_tokens", label="truncated"),
    "refused": Case("/relay/anthropic/create/refused", finish="refusal", label="refused"),
    "web_search": Case("/relay/anthropic/create/browser_web_search?heartbeat=0.25", finish="end_turn",
                       keep_alives=2),
    "slow_thinking": Case("/relay/anthropic/create/slow_thinking?thinking=1&heartbeat=0.25", finish="end_turn",
                          keep_alives=3),  # ~2 s of thinking, a keep-alive every 0.25 s
    "openai_chat": Case("/relay/openai/chat/chat_complete", finish="stop"),
    "openai_responses": Case("/relay/openai/responses/responses_complete", finish="completed"),
    "http_429": Case("/relay/anthropic/create/http_429?attempts=1", end=None, status=429, code="rate_limited",
                     label="upstream_error", retry_after="1"),
    "http_529": Case("/relay/anthropic/create/http_529", end=None, status=503, code="upstream_unavailable",
                     label="upstream_error", tries=3, retry_after="0"),
    "overloaded_mid_answer": Case("/relay/anthropic/create/inband_error", end="error", code="upstream_unavailable",
                                  partial=True, label="upstream_error"),
    "dropped_mid_answer": Case("/relay/anthropic/create/cut_connection", end="error", code="upstream_unreachable",
                               partial=True, label="upstream_error"),
    "stall_before_first_content": Case(
        "/relay/anthropic/create/timed_silent_start?heartbeat=0.3&attempts=1", end="error", code="upstream_timeout",
        label="stalled_before_first_content", budgets=Budgets(first_token=0.8), keep_alives=1),
    "stall_after_first_content": Case(
        "/relay/anthropic/create/timed_pinging_stall", end="error", code="upstream_timeout", partial=True,
        label="stalled_mid_stream", budgets=Budgets(idle=0.4)),
    "openai_chat_inband_error": Case("/relay/openai/chat/chat_inband_error", end="error",
                                     code="upstream_unavailable", partial=True, label="upstream_error"),
}

# The caller's deadline comes in a request header (`request-timeout-ms`, read by DeadlineMiddleware).
# EventSource cannot send headers, so these two are read with fetch only.
DEADLINES = {
    "deadline_in_thinking": Case("/relay/anthropic/create/slow_thinking?thinking=1&heartbeat=0.3", end="error",
                                 code="upstream_timeout", label="deadline_in_thinking", keep_alives=1),
    # Its words come faster than the heartbeat: no keep-alive is owed.
    "deadline_in_answer": Case("/relay/anthropic/create/slow_answer?thinking=1&heartbeat=0.3", end="error",
                               code="upstream_timeout", partial=True, label="deadline_in_answer"),
}


def check(tab: Tab, sim: Simulator, state: Any, case: Case, got: Read, since: int) -> None:
    for text in PROVIDER_TEXT:
        assert text not in got.everything, f"provider text {text!r} reached the browser"
    if got.reader == "fetch":
        assert got.run["status"] == case.status
        assert got.run["failure"] is None, got.run["failure"]
    else:
        # What EventSource cannot show, the browser's network log can: the one response's status.
        [response] = tab.responses_for(case.path)
        assert response.status == case.status
        got.run["requestId"] = response.headers["x-request-id"]
    if case.end is None:
        check_http_error(case, got)
    else:
        check_stream(case, got)
    assert len(requests_for(sim, case.scenario, since)) == case.tries
    fields = agrees(state, got.got, case.end or "error")
    assert fields["attempts"] == case.tries
    assert state.spans()[-1].attributes["streamscope.class"] == case.label


def check_http_error(case: Case, got: Read) -> None:
    """Before the first content a failure is a real HTTP error: fetch sees it; EventSource fails."""
    assert got.events == []
    if got.reader == "fetch":
        assert got.run["contentType"] == "application/json"
        assert got.run["json"] == {"code": case.code, "request_id": got.run["requestId"]}
        assert got.run["retryAfter"] == case.retry_after
    else:
        # WHATWG: a non-200 response fails the connection: readyState CLOSED, one error event,
        # never opened, and no reconnection.
        assert got.run["opens"] == 0
        assert got.run["readyState"] == 2
        assert [e["readyState"] for e in got.run["errors"]] == [2]
    assert "[failed:" in got.marker


def check_stream(case: Case, got: Read) -> None:
    if got.reader == "fetch":
        assert got.run["contentType"].startswith("text/event-stream")
        assert got.run["comments"].count("keep-alive") >= case.keep_alives
    else:
        assert got.run["opens"] == 1
        assert got.run["readyState"] == 2  # the page closed it on the terminal event
        assert got.run["errors"] == []
    rid = got.request_id
    assert [e["id"] for e in got.events] == [f"{rid}:{n}" for n in range(1, len(got.events) + 1)]
    assert got.terminal["event"] == case.end
    if case.end == "done":
        assert got.end == {"request_id": rid, "chunks": len(got.tokens), "finish_reason": case.finish,
                           "class": case.label, "verified": case.label == "complete"}
        if case.label != "refused":
            assert got.tokens, "the answer's text reached the page"
        assert got.marker == ""
    else:
        assert got.end == {"code": case.code, "request_id": rid, "partial": case.partial}
        assert bool(got.tokens) is case.partial
        assert got.marker == (f"[incomplete: {case.code}]" if case.partial else f"[failed: {case.code}]")
    assert "".join(got.tokens) in got.run["page"], "the page shows the answer's text"


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("name", list(CASES))
def test_the_contract_in_the_browser(tab: Tab, sim: Simulator, on: Any, name: str, reader: str) -> None:
    case = CASES[name]
    state = on(case.budgets)
    since = len(sim.requests)
    got = tab.read(reader, case.path)
    check(tab, sim, state, case, got, since)


@pytest.mark.parametrize("name", list(DEADLINES))
def test_the_callers_deadline_in_the_browser(tab: Tab, sim: Simulator, on: Any, name: str) -> None:
    case = DEADLINES[name]
    state = on()
    since = len(sim.requests)
    got = tab.read("fetch", case.path, headers={"request-timeout-ms": "1500"})
    check(tab, sim, state, case, got, since)


def test_a_partial_answer_is_shown_as_incomplete(tab: Tab, on: Any) -> None:
    on()
    got = tab.read("fetch", "/relay/anthropic/create/inband_error")
    assert got.end["partial"] is True
    shown = tab.page.inner_text("body")
    assert "".join(got.tokens) in tab.page.inner_text("#answer")
    assert "[incomplete: upstream_unavailable]" in shown
    assert tab.page.get_attribute("#marker", "class") == "incomplete"
    for text in PROVIDER_TEXT:
        assert text not in shown


def monotonic_of(epoch_ms: float) -> float:
    """A browser's Date.now() as this process's time.monotonic() (the same machine's clock)."""
    return time.monotonic() - (time.time() - epoch_ms / 1000)


def provider_request_ended(sim: Simulator, scenario: str, since: int) -> Any:
    [upstream] = requests_for(sim, scenario, since)
    return sim.wait_for_outcome(sim.requests.index(upstream), timeout=10)


def left_and_was_cancelled(state: Any, rid: str, log: Any, left: float) -> None:
    assert log.outcome == "disconnected"
    assert log.ended is not None and log.ended - left < 1.0, "the provider saw the connection end within a second"
    fields = agrees(state, SimpleNamespace(headers={"x-request-id": rid}), "client_disconnect")
    assert state.spans()[-1].attributes["streamscope.class"] == "cancelled"
    assert fields["streamscope.failure.code"] is None


def test_an_aborted_fetch_closes_the_provider_connection(tab: Tab, sim: Simulator, on: Any) -> None:
    state = on()
    since = len(sim.requests)
    got = tab.read("fetch", "/relay/anthropic/create/slow_answer", abortAfter=2)
    left = monotonic_of(got.run["abortedAt"])  # Date.now() just before the abort call
    assert got.run["aborted"] and len(got.tokens) == 2
    assert not any(e["event"] in ("done", "error") for e in got.events)
    left_and_was_cancelled(state, got.request_id, provider_request_ended(sim, "slow_answer", since), left)


def test_closing_the_tab_closes_the_provider_connection(context: BrowserContext, base: str, sim: Simulator,
                                                        on: Any) -> None:
    tab = opened(context, base)
    state = on()
    since = len(sim.requests)
    run = tab.page.evaluate("url => relayTest.startEventSource(url)", "/relay/anthropic/create/slow_answer")
    tab.page.wait_for_function("id => relayTest.state(id).tokens >= 2", arg=run, timeout=10_000)
    rid = tab.page.evaluate("id => relayTest.state(id).events[0].id", run).split(":")[0]
    left = time.monotonic()
    tab.page.close()
    left_and_was_cancelled(state, rid, provider_request_ended(sim, "slow_answer", since), left)


def test_an_eventsource_reconnecting_gets_204_and_stops(tab: Tab, sim: Simulator, on: Any) -> None:
    """The stream drops mid-answer; a naive EventSource (not closed on the terminal event) reconnects
    with Last-Event-ID: the relay answers 204, starts no generation, and the EventSource is CLOSED."""
    state = on()
    since = len(sim.requests)
    path = "/relay/anthropic/create/cut_connection"
    got = tab.read("eventsource", path, closeOnTerminal=False, timeoutMs=15_000)
    end = got.terminal
    assert end["event"] == "error" and got.end["partial"] is True
    assert got.run["opens"] == 1
    # The first response ended (CONNECTING: it reconnects), then the reconnect failed (CLOSED).
    assert [e["readyState"] for e in got.run["errors"]] == [0, 2]
    assert got.run["readyState"] == 2
    first, again = tab.responses_for(path)
    assert (first.status, again.status) == (200, 204)
    assert again.request.all_headers().get("last-event-id") == end["id"]
    assert again.headers["x-request-id"] != got.request_id
    time.sleep(0.5)
    assert len(requests_for(sim, "cut_connection", since)) == 1, "the reconnect started no generation"
    assert len(tab.responses_for(path)) == 2, "the EventSource stopped reconnecting"
    agrees(state, got.got, "error")
