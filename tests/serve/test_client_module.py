# ruff: noqa: F811 - the browser fixture comes from test_browser
"""The browser client (streamscope/serve/client.js) in headless Chromium, against a scripted server.

No relay here: a small Starlette app (real uvicorn) answers each request with the next response the
test planned for its path (a stream of exact bytes that then ends, drops the connection or idles
until the browser leaves; or a status with a body) and records what the client sent, so each
behaviour of the client is checked exactly: the ending, every callback call, what the page shows and
every request's method, headers and body. The page (client_page.html) imports the module as the
package ships it. Last, client_usage.ts is type-checked against client.d.ts with Debian's tsc
(`scripts/ensure-typescript`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from email.utils import formatdate
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page
from served import serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, Response, StreamingResponse
from starlette.routing import Route
from test_browser import browser  # noqa: F401 - the fixture

HERE = Path(__file__).parent
MODULE = resources.files("streamscope.serve").joinpath("client.js")
DECLARATIONS = resources.files("streamscope.serve").joinpath("client.d.ts")
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
RID = "r1"
CUT_LINGER = 0.3
"""Seconds between a stream's last chunk and the connection's drop (Chromium drops the body data
still unread when the connection fails, as a real network would)."""
WAIT = 10.0
"""Seconds to wait for something the server should see (generous: a loaded 2-core machine)."""


def event(name: str, data: Any, n: int, rid: str = RID, end: str = "\r\n") -> str:
    """One event as the relay frames it: `id: <rid>:<n>`, the name, the JSON data, a blank line."""
    return f"id: {rid}:{n}{end}event: {name}{end}data: {json.dumps(data)}{end}{end}"


def token(text: str, n: int) -> str:
    return event("token", {"text": text}, n)


def done(n: int, chunks: int, finish: str = "end_turn") -> str:
    return event("done", {"request_id": RID, "chunks": chunks, "finish_reason": finish, "class": "complete",
                          "verified": True}, n)


@dataclass
class Stream:
    """A 200 `text/event-stream` answer: `chunks` sent one by one, `pause` seconds apart; then the body
    ends (`end`), the connection drops with the body unfinished (`cut`), or keep-alive comments go on
    until the browser leaves (`idle`)."""

    chunks: list[str]
    then: str = "end"
    pause: float = 0.01
    headers: dict[str, str] = field(default_factory=lambda: {"X-Request-Id": RID})


@dataclass
class Answer:
    """Any other answer: a status, a body (JSON, or `text` as `media_type`), headers."""

    status: int
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    text: str | None = None
    media_type: str = "application/json"


@dataclass
class Seen:
    path: str
    method: str
    headers: dict[str, str]
    body: str
    at: float


class Cut(Exception):
    """Raised in a stream's body: uvicorn drops the connection with the chunked body unfinished."""


@dataclass
class Script:
    plans: dict[str, list[Stream | Answer]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    closed: list[str] = field(default_factory=list)
    """The paths whose stream's body was closed (ended, cut, or the browser left)."""

    def plan(self, path: str, *answers: Stream | Answer) -> str:
        self.plans[path] = list(answers)
        return "/s/" + path

    def requests(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.path == path]


def make_app(script: Script) -> Starlette:
    async def scripted(request: Request) -> Response:
        path = request.path_params["path"]
        sent = await request.body()
        script.seen.append(Seen(path, request.method, dict(request.headers), sent.decode(), time.monotonic()))
        if request.headers.get("streamscope-cancel") == "1":
            return Response(status_code=202)
        plans = script.plans.get(path) or [Answer(418, {"code": "unplanned", "request_id": RID})]
        plan = plans.pop(0)
        if isinstance(plan, Answer):
            content = plan.text if plan.text is not None else json.dumps(plan.json) if plan.json is not None else None
            return Response(content, plan.status, headers=plan.headers, media_type=plan.media_type)

        async def body() -> AsyncIterator[bytes]:
            try:
                for chunk in plan.chunks:
                    yield chunk.encode()
                    await asyncio.sleep(plan.pause)
                if plan.then == "cut":
                    if plan.chunks:  # the browser reads what was sent before the drop, as a rule
                        await asyncio.sleep(CUT_LINGER)
                    raise Cut(path)
                while plan.then == "idle":
                    yield b": keep-alive\r\n\r\n"
                    await asyncio.sleep(0.1)
            finally:
                script.closed.append(path)

        return StreamingResponse(body(), headers=plan.headers, media_type="text/event-stream")

    async def page(request: Request) -> Response:
        return FileResponse(HERE / "client_page.html", headers={"Cache-Control": "no-store"})

    async def module(request: Request) -> Response:
        return Response(MODULE.read_text(), media_type="text/javascript", headers={"Cache-Control": "no-store"})

    return Starlette(routes=[Route("/", page), Route("/client.js", module),
                             Route("/s/{path}", scripted, methods=["GET", "POST"])])


@pytest.fixture(scope="module")
def script() -> Script:
    return Script()


@pytest.fixture(scope="module")
def base(script: Script) -> Iterator[str]:
    with serving(make_app(script)) as url:
        yield url


@pytest.fixture(scope="module")
def console() -> list[ConsoleMessage]:
    return []


@pytest.fixture(scope="module")
def page(browser: Browser, base: str, console: list[ConsoleMessage]) -> Iterator[Page]:
    """One page for the module, the client imported once."""
    context = browser.new_context()
    page = context.new_page()
    page.on("console", lambda message: console.append(message))
    page.goto(base + "/")
    page.wait_for_function("window.clientTest !== undefined", timeout=10_000)
    yield page
    context.close()


def read(page: Page, path: str, **options: Any) -> dict[str, Any]:
    """client_page.html's read: the ending, the callbacks' calls, what the page shows."""
    run: dict[str, Any] = page.evaluate("([url, options]) => clientTest.read(url, options)", [path, options])
    assert run["finished"], f"the stream of {path} did not end: {run}"
    return run


def calls(run: dict[str, Any], name: str) -> list[list[Any]]:
    return [call[1:] for call in run["calls"] if call[0] == name]


def tokens(run: dict[str, Any]) -> list[str]:
    return [text for text, _ in calls(run, "onToken")]


def wait_for(check: Any, what: str) -> None:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < WAIT, f"the server did not see {what} within {WAIT} s"
        time.sleep(0.02)


POST = {"body": json.dumps({"question": "How do streams fail?"}),
        "headers": {"Content-Type": "application/json", "X-Page": "chat"}}
"""A page's POST: a JSON body and headers of its own, sent again on every request."""


def test_tokens_then_done(page: Page, script: Script) -> None:
    path = script.plan("complete", Stream([": keep-alive\r\n\r\n", token("Streams", 1), event("thinking", {"t": 1}, 2),
                                           token(" fail in", 3), token(" four ways.", 4), done(5, chunks=4)]))
    run = read(page, path)
    text = "Streams fail in four ways."
    assert run["ending"] == {"type": "done", "requestId": RID, "finishReason": "end_turn", "class": "complete",
                             "verified": True, "chunks": 4, "text": text}
    assert run["shown"] == run["text"] == text
    assert tokens(run) == ["Streams", " fail in", " four ways."]
    assert [stream["text"] for _, stream in calls(run, "onToken")] == ["Streams", "Streams fail in", text]
    assert [(name, id_) for name, _, id_ in calls(run, "onEvent")] == [
        ("token", "r1:1"), ("thinking", "r1:2"), ("token", "r1:3"), ("token", "r1:4"), ("done", "r1:5")]
    assert calls(run, "onEvent")[1][1] == {"t": 1}, "an event of another name passes through, its data parsed"
    assert calls(run, "onOpen") == [[{"status": 200, "requestId": RID, "reconnect": 0}]]
    assert calls(run, "onReconnect") == []
    assert (run["requestId"], run["lastEventId"]) == (RID, "r1:5")
    [request] = script.requests("complete")
    assert request.method == "GET" and request.body == ""
    assert request.headers["accept"] == "text/event-stream"
    assert request.headers["idempotency-key"] == run["key"]
    assert "last-event-id" not in request.headers and "streamscope-cancel" not in request.headers


def test_the_idempotency_key(page: Page, script: Script) -> None:
    """A random v4 UUID per stream (crypto.randomUUID, or getRandomValues without it), or the page's."""
    whole = [token("a", 1), done(2, chunks=1)]
    path = script.plan("keys", *(Stream(list(whole)) for _ in range(4)))
    keys = [read(page, path)["key"], read(page, path)["key"], read(page, path, noRandomUUID=True)["key"],
            read(page, path, idempotencyKey="page-kept-key")["key"]]
    assert all(UUID4.match(key) for key in keys[:3]), keys
    assert len(set(keys)) == 4
    assert keys[3] == "page-kept-key"
    assert [s.headers["idempotency-key"] for s in script.requests("keys")] == keys


def test_a_get_with_a_body_throws_at_once(page: Page) -> None:
    thrown = page.evaluate("""async () => {
        const {relayStream} = await import("/client.js");
        try { relayStream("/s/never", {method: "GET", body: "x"}); } catch (error) { return String(error); }
        return null;
    }""")
    assert thrown is not None and thrown.startswith("TypeError: relayStream: a GET request cannot have a body")


@pytest.mark.parametrize(("options", "said"), [
    ({"retires": 3}, 'relayStream() has no option "retires"; did you mean "retries"?'),
    ({"onopen": None}, 'relayStream() has no option "onopen"; did you mean "onOpen"?'),
    ({"backoff": {"intial": 1}}, 'relayStream()\'s backoff has no option "intial"; did you mean "initial"?'),
    ({"zzzzzzzz": 1}, 'relayStream() has no option "zzzzzzzz"; it takes method, body, headers, idempotencyKey,'),
    ({"retries": "3"}, 'relayStream: option "retries" takes a number, not string'),
    ({"retries": 1.5}, 'relayStream: option "retries" takes a whole number >= 0, not 1.5'),
    ({"onToken": "show"}, 'relayStream: option "onToken" takes a function, not string'),
    ({"backoff": {"initial": 2, "max": 1}}, 'relayStream: option "backoff" takes seconds with 0 < initial <= max'),
])
def test_a_wrong_option_throws_one_line(page: Page, options: dict[str, Any], said: str) -> None:
    thrown = page.evaluate("""async options => {
        const {relayStream} = await import("/client.js");
        try { relayStream("/s/never", options); } catch (error) { return String(error); }
        return null;
    }""", options)
    assert thrown is not None and thrown.startswith("TypeError: " + said), thrown
    assert "\n" not in thrown


@pytest.mark.parametrize("then", ["end", "cut"])
def test_a_dropped_stream_resumes_after_the_last_event(page: Page, script: Script, then: str) -> None:
    """The body ends (`end`) or errors (`cut`) after two events: one reconnect with Last-Event-ID, the
    same key, method, body and headers; the reply repeats event 2, which is not shown twice."""
    name = f"resume_{then}"
    path = script.plan(name, Stream([token("Streams", 1), token(" fail", 2)], then=then),
                       Stream([token(" fail", 2), token(" in four ways.", 3), done(4, chunks=3)]))
    run = read(page, path, **POST, backoff={"initial": 0.05, "max": 0.1})
    assert run["ending"]["type"] == "done", run["ending"]
    assert tokens(run) == ["Streams", " fail", " in four ways."]
    assert run["shown"] == "Streams fail in four ways."
    assert [id_ for *_, id_ in calls(run, "onEvent")] == ["r1:1", "r1:2", "r1:3", "r1:4"]
    [[reconnect]] = calls(run, "onReconnect")
    assert reconnect["attempt"] == 1 and reconnect["lastEventId"] == "r1:2" and reconnect["reason"] == "network"
    assert 0 <= reconnect["delay"] <= 0.05
    assert [info["reconnect"] for [info] in calls(run, "onOpen")] == [0, 1]
    first, again = script.requests(name)
    assert "last-event-id" not in first.headers
    assert again.headers["last-event-id"] == "r1:2"
    for request in (first, again):
        assert request.method == "POST" and request.body == POST["body"]
        assert request.headers["idempotency-key"] == run["key"]
        assert request.headers["content-type"] == "application/json" and request.headers["x-page"] == "chat"
        assert request.headers["accept"] == "text/event-stream"


@pytest.mark.parametrize("first", [Stream([], then="cut"), Stream([": keep-alive\r\n\r\n"], then="end")],
                         ids=["cut", "ended"])
def test_a_stream_dropped_before_any_event_reconnects_with_the_key_alone(page: Page, script: Script,
                                                                        first: Stream) -> None:
    name = f"early_{first.then}"
    path = script.plan(name, first, Stream([token("whole", 1), done(2, chunks=1)]))
    run = read(page, path, **POST, backoff={"initial": 0.05, "max": 0.1})
    assert run["ending"]["type"] == "done" and run["shown"] == "whole"
    [[reconnect]] = calls(run, "onReconnect")
    assert reconnect["lastEventId"] is None
    one, two = script.requests(name)
    assert "last-event-id" not in one.headers and "last-event-id" not in two.headers
    assert one.headers["idempotency-key"] == two.headers["idempotency-key"] == run["key"]
    assert two.body == POST["body"]


def test_a_form_body_is_the_same_bytes_on_every_request(page: Page, script: Script) -> None:
    """A FormData gets a new multipart boundary per fetch: the client fixes its bytes once, so a
    reconnect (and the cancel) is the same request to the relay's idempotency key."""
    path = script.plan("form", Stream([], then="cut"), Stream([token("formed", 1)], then="idle"))
    run = read(page, path, form={"question": "How do streams fail?"}, abortAfter=1, backoff={"initial": 0.02})
    assert run["ending"]["type"] == "aborted" and run["shown"] == "formed"
    wait_for(lambda: len(script.requests("form")) == 3, "the cancel")
    requests = script.requests("form")
    assert "streamscope-cancel" in requests[2].headers
    assert requests[0].headers["content-type"].startswith("multipart/form-data; boundary=")
    assert 'name="question"' in requests[0].body and "How do streams fail?" in requests[0].body
    for request in requests[1:]:
        assert request.method == "POST"
        assert request.body == requests[0].body
        assert request.headers["content-type"] == requests[0].headers["content-type"]


def http_date(seconds_from_now: float) -> str:
    return formatdate(time.time() + seconds_from_now, usegmt=True)


FAILURES = {
    # name: (the answer, the ending's code, retryAfter: (at least, at most), the client's options)
    "circuit_open": (Answer(503, {"code": "circuit_open", "request_id": "r9"}, {"Retry-After": "20"}),
                     "circuit_open", (20, 20), {}),
    "key_reused": (Answer(422, {"code": "idempotency_key_reused", "request_id": "r9"}), "idempotency_key_reused",
                   None, {}),
    "rate_limited_date": (Answer(429, {"code": "rate_limited", "request_id": "r9"}, {"Retry-After": "DATE+30"}),
                          "rate_limited", (20, 31), {}),
    "in_progress_no_retries": (Answer(409, {"code": "request_in_progress", "request_id": "r9"}, {"Retry-After": "1"}),
                               "request_in_progress", (1, 1), {"retries": 0}),
    "html_502": (Answer(502, text="<html>Bad gateway</html>", media_type="text/html"), "bad_response", None, {}),
    "json_200": (Answer(200, {"ok": True}), "bad_response", None, {}),
}


@pytest.mark.parametrize("name", list(FAILURES))
def test_a_failure_before_the_stream_is_the_ending(page: Page, script: Script, name: str) -> None:
    answer, code, retry_after, options = FAILURES[name]
    if answer.headers.get("Retry-After") == "DATE+30":  # made now: the module may run long after its import
        answer = dataclasses.replace(answer, headers={"Retry-After": http_date(30)})
    path = script.plan(name, answer, Stream([token("never", 1), done(2, chunks=1)]))
    run = read(page, path, **options)
    ending = run["ending"]
    assert ending["type"] == "error" and ending["code"] == code
    assert ending["status"] == answer.status
    assert ending["partial"] is False and ending["text"] == "" and "reason" not in ending
    assert ending["requestId"] == ("r9" if code != "bad_response" else None)
    if retry_after is None:
        assert ending["retryAfter"] is None
    else:
        assert retry_after[0] <= ending["retryAfter"] <= retry_after[1]
        assert f"in {ending['retryAfter']} s" in ending["message"]
    if name == "circuit_open":
        assert ending["message"] == "The model is unavailable; try again in 20 s."
    assert ending["message"].endswith(".") and code not in ending["message"]
    assert calls(run, "onOpen") == [] and calls(run, "onReconnect") == []
    time.sleep(0.3)
    assert len(script.requests(name)) == 1, "no further request"


def test_request_in_progress_is_retried_after_retry_after(page: Page, script: Script) -> None:
    path = script.plan("in_progress", Answer(409, {"code": "request_in_progress", "request_id": RID},
                                             {"Retry-After": "1"}),
                       Stream([token("at last", 1), done(2, chunks=1)]))
    run = read(page, path, **POST, backoff={"initial": 0.05, "max": 0.1})
    assert run["ending"]["type"] == "done" and run["shown"] == "at last"
    [[reconnect]] = calls(run, "onReconnect")
    assert reconnect["reason"] == "request_in_progress" and reconnect["delay"] >= 1
    first, again = script.requests("in_progress")
    assert again.at - first.at >= 0.9, "the retry waited Retry-After"
    assert again.headers["idempotency-key"] == first.headers["idempotency-key"] == run["key"]
    assert "last-event-id" not in again.headers and again.body == POST["body"]


@pytest.mark.parametrize(("headers", "reason"), [({"Streamscope-Resume": "expired"}, "expired"), ({}, "network")])
def test_nothing_to_resume_is_connection_lost(page: Page, script: Script, headers: dict[str, str],
                                              reason: str) -> None:
    name = f"nothing_{reason}"
    path = script.plan(name, Stream([token("Half", 1), token(" an answer", 2)], then="cut"),
                       Answer(204, headers=headers))
    run = read(page, path, backoff={"initial": 0.05, "max": 0.1})
    assert run["ending"] == {"type": "error", "code": "connection_lost", "status": 204, "reason": reason,
                             "partial": True, "retryAfter": None, "requestId": RID, "text": "Half an answer",
                             "message": "The connection was lost before the answer was complete."}
    assert script.requests(name)[1].headers["last-event-id"] == "r1:2"


def test_reconnects_stop_after_retries(page: Page, script: Script) -> None:
    """Every reconnect is cut before any event: exactly `retries` of them, each waiting at most the
    full-jitter bound, then connection_lost. A plan for one more request is never asked for."""
    initial, most = 0.03, 0.05
    path = script.plan("hopeless", Stream([token("One", 1)], then="cut"), *(Stream([], then="cut") for _ in range(3)),
                       Stream([token(" more", 2), done(3, chunks=2)]))
    run = read(page, path, retries=3, backoff={"initial": initial, "max": most})
    assert run["ending"] == {"type": "error", "code": "connection_lost", "status": 0, "reason": "network",
                             "partial": True, "retryAfter": None, "requestId": RID, "text": "One",
                             "message": "The connection was lost before the answer was complete."}
    reconnects = [info for [info] in calls(run, "onReconnect")]
    assert [r["attempt"] for r in reconnects] == [1, 2, 3]
    for r in reconnects:
        assert 0 <= r["delay"] <= min(most, initial * 2 ** (r["attempt"] - 1))
        assert r["lastEventId"] == "r1:1" and r["reason"] == "network"
    time.sleep(0.3)
    requests = script.requests("hopeless")
    assert len(requests) == 4
    assert all(r.headers["last-event-id"] == "r1:1" for r in requests[1:])


def test_a_rejected_fetch_is_retried_then_connection_lost(page: Page) -> None:
    """fetch itself rejects (the page's `fetch` option): retries, then connection_lost, not partial."""
    run = read(page, "/s/unreachable", failFetch=True, retries=2, backoff={"initial": 0.02, "max": 0.02})
    ending = run["ending"]
    assert (ending["code"], ending["reason"], ending["status"], ending["partial"]) == ("connection_lost", "network",
                                                                                       0, False)
    assert [info["attempt"] for [info] in calls(run, "onReconnect")] == [1, 2]
    assert len(run["fetches"]) == 3
    assert all(f["headers"]["idempotency-key"] == run["key"] and "last-event-id" not in f["headers"]
               for f in run["fetches"])


def test_retries_count_reconnects_in_a_row(page: Page, script: Script) -> None:
    """An event between two drops resets the count: with retries=1, four drops each after an event
    still reach the end."""
    path = script.plan("flaky", *(Stream([token(w, n)], then="cut") for n, w in enumerate(["a", "b", "c", "d"], 1)),
                       Stream([done(5, chunks=4)]))
    run = read(page, path, retries=1, backoff={"initial": 0.02, "max": 0.02})
    assert run["ending"]["type"] == "done" and run["shown"] == "abcd"
    assert [info["attempt"] for [info] in calls(run, "onReconnect")] == [1, 1, 1, 1]
    assert [s.headers.get("last-event-id") for s in script.requests("flaky")] == [None, "r1:1", "r1:2", "r1:3", "r1:4"]


def test_a_seam_drops_code_points_not_utf16_units(page: Page, script: Script) -> None:
    kept, half = "The answer: ", "🌍🌏 is ro"
    drop = len(half)  # Python's len: code points (the emoji are two UTF-16 units each)
    path = script.plan("seam", Stream([token(kept, 1), token(half, 2),
                                       event("seam", {"request_id": RID, "continuation": 1, "drop": drop}, 3),
                                       token("the world is round.", 4), done(5, chunks=4)]))
    run = read(page, path)
    assert run["ending"]["type"] == "done"
    assert run["shown"] == run["ending"]["text"] == "The answer: the world is round."
    assert calls(run, "onSeam") == [[{"drop": drop, "continuation": 1}, {"text": kept}]]


def test_abort_tells_the_relay_to_stop(page: Page, script: Script) -> None:
    path = script.plan("abort", Stream([token("Streams", 1), token(" fail", 2)], then="idle"))
    run = read(page, path, **POST, abortAfter=2)
    assert run["ending"] == {"type": "aborted", "requestId": RID, "partial": True, "text": "Streams fail"}
    wait_for(lambda: any("streamscope-cancel" in s.headers for s in script.requests("abort")), "the cancel")
    wait_for(lambda: "abort" in script.closed, "the aborted fetch's connection close")
    stream, cancel = script.requests("abort")
    assert cancel.headers["streamscope-cancel"] == "1"
    assert cancel.headers["idempotency-key"] == stream.headers["idempotency-key"] == run["key"]
    assert cancel.headers["last-event-id"] == "r1:2"
    assert cancel.method == "POST" and cancel.body == POST["body"] and cancel.headers["x-page"] == "chat"
    assert calls(run, "onReconnect") == []
    time.sleep(0.3)
    assert len(script.requests("abort")) == 2, "no reconnect after abort()"


# The parser's cases: CRLF, CR and LF line endings, multi-line data, comments, an id kept for the next
# event, `data:` with an empty value, an event without data (not dispatched), an unfinished last event.
WIRE = ("\ufeff: hello\r\nid: r:1\r\nevent: token\r\ndata: {\"text\": \"a\"}\r\n\r\n"
        "data: line one\rdata: line two\r\r"
        "id: r:3\nevent: custom\ndata:\ndata:x\n\n"
        ":keep-alive\n\n"
        "event: nothing\nretry: 10\n\n"
        "data: last\r\n\r\n"
        "data: never finished\r\n")
PARSED = {"events": [["token", '{"text": "a"}', "r:1"], ["message", "line one\nline two", "r:1"],
                     ["custom", "\nx", "r:3"], ["message", "last", "r:3"]],
          "comments": ["hello", "keep-alive"]}


def test_the_parser_at_every_split(page: Page) -> None:
    """Fed whole, in two pieces split at every position (a CRLF pair split among them), and one
    character at a time: the same events and comments."""
    feeds = [[WIRE], list(WIRE)] + [[WIRE[:i], WIRE[i:]] for i in range(1, len(WIRE))]
    results = page.evaluate("feeds => feeds.map(pieces => clientTest.parse(pieces))", feeds)
    for pieces, got in zip(feeds, results):
        assert got == PARSED, pieces


def test_line_endings_split_across_reads(page: Page, script: Script) -> None:
    """The server flushes `...\\r` and `\\n...` apart (a CRLF pair split between two reads, inside an
    event), then CR-only and LF-only events, multi-line data, comments."""
    chunks = ["id: r1:1\r\nevent: token\r", "\ndata: {\"text\": \"Streams\"}\r\n\r", "\n",
              "id: r1:2\r\nevent: token\r\ndata: {\"text\":\r", "\ndata: \" fail\"}\r\n\r\n",
              ": keep-alive\r", "\n\r\n",
              "id: r1:3\revent: token\rdata: {\"text\": \" in four\"}\r\r",
              "id: r1:4\nevent: token\ndata: {\"text\":\ndata: \" ways.\"}\n\n",
              done(5, chunks=4).replace("\r\n", "\n")]
    path = script.plan("line_endings", Stream(chunks, pause=0.05))
    run = read(page, path)
    assert run["ending"]["type"] == "done", run["ending"]
    assert tokens(run) == ["Streams", " fail", " in four", " ways."]
    assert [name for name, *_ in calls(run, "onEvent")] == ["token"] * 4 + ["done"]


def test_an_error_event_after_tokens(page: Page, script: Script) -> None:
    path = script.plan("inband", Stream([token("Streams", 1), token(" fa", 2),
                                         event("error", {"code": "upstream_unavailable", "request_id": RID,
                                                         "partial": True}, 3)]))
    run = read(page, path)
    assert run["ending"] == {"type": "error", "code": "upstream_unavailable", "status": 200, "partial": True,
                             "retryAfter": None, "requestId": RID, "text": "Streams fa",
                             "message": "The model is overloaded; try again later."}
    assert run["shown"] == "Streams fa"
    assert calls(run, "onEvent")[-1] == ["error", {"code": "upstream_unavailable", "request_id": RID,
                                                   "partial": True}, "r1:3"]
    assert len(script.requests("inband")) == 1


def test_a_callback_that_throws_does_not_stop_the_stream(page: Page, script: Script,
                                                         console: list[ConsoleMessage]) -> None:
    console.clear()
    path = script.plan("throws", Stream([token("Still", 1), token(" here", 2), done(3, chunks=2)]))
    run = read(page, path, throwIn=["onOpen", "onToken", "onEvent"])
    assert run["ending"]["type"] == "done" and run["shown"] == "Still here"
    assert len(calls(run, "onEvent")) == 3 and len(tokens(run)) == 2
    errors = [m.text for m in console if m.type == "error"]
    assert sum("a callback threw" in text for text in errors) == 6, errors


def test_the_declarations_type_check() -> None:
    """client.d.ts declares what client.js exports, and a page's use of every name passes `tsc --strict`."""
    exported = set(re.findall(r"^export function (\w+)", MODULE.read_text(), re.M))
    declared = set(re.findall(r"^export function (\w+)", DECLARATIONS.read_text(), re.M))
    assert exported == declared == {"relayStream", "sseParser"}
    tsc = shutil.which("tsc")
    assert tsc is not None, "tsc is missing: run `bash scripts/ensure-typescript` (Debian's node-typescript)"
    checked = subprocess.run([tsc, "--noEmit", "--strict", "--target", "es2020", "--lib", "es2020,dom",
                           "--module", "es2020", "client_usage.ts"], cwd=HERE, capture_output=True, text=True,
                          timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
