"""The demo page: answers relayed to a browser by `streamscope.serve.relay()`, from the simulator.

`streamscope demo` serves it on a port of its own beside `/metrics` (`--page-port`): `GET /` is a
page with a button per kind of answer (demo_page.html: inline CSS and JS, no external assets; it
reads the relay with the browser client, served at `/streamscope/client.js` by `client_routes()`), and
`GET /relay/<kind>` relays one call of the real `anthropic` SDK (streamscope on) to the simulator as
Server-Sent Events: tokens, then one `done` or `error` event, or an HTTP error with a JSON body when
the call failed before its first content. The demo's workload reads the same endpoint over real
HTTP (`browse`), a cycle of reads per 50 requests, so that the relay's metrics have data.

Scripts are written in real seconds, whatever the demo's time scale (a person watches them): each
is divided by the scale before the simulator multiplies it back. Their calls run on the route
`browser`, whose budgets (`BUDGETS`) are real seconds too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

import anthropic
import httpx2
import uvicorn
from anthropic.types import MessageParam, ThinkingConfigParam
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from streamscope.budgets.table import Budgets
from streamscope.core.context import route
from streamscope.serve import client_routes, continuation_messages, relay, text_events
from streamscope.simulator import Scenario, Simulator, Step, TextSpec, ThinkingSpec, error_event, message_stream
from streamscope.simulator.catalog import ANSWER, LONG, OVERLOADED_529, PROSE, PROSE_REST, THOUGHTS, words

from .workload import CHAT, REASONING

ROUTE = "browser"
"""The route of every relayed call (`streamscope.route`): the dashboards can filter them."""
BUDGETS = Budgets(first_token=10.0, idle=5.0, first_content="any")
"""The route's budgets, real seconds: thinking a reader watches counts as content."""
HEARTBEAT = 5.0
"""Seconds the relay holds the status for a first content before it sends a keep-alive."""
ATTEMPTS = 3
"""Attempts per relayed request (the relay retries before the first content only)."""
PROMPT: list[MessageParam] = [{"role": "user", "content": "How do streamed answers fail?"}]
PER_CYCLE = 50
"""Workload requests per cycle of relayed reads."""


@dataclass(frozen=True)
class Kind:
    """One button of the page: its script (`unit`: model seconds per real second) and its call."""

    name: str
    label: str
    script: Callable[[float], list[list[Step]]]
    """The script of each attempt, in order (the last repeats)."""
    model: str = CHAT
    max_tokens: int = 1024
    thinking_budget: int | None = None
    calls: int = 1
    """Provider calls one read makes, the relay's retries and continuations included."""
    continued: bool = False
    """Whether the relay carries an answer that fails mid-prose on from its partial text."""

    @property
    def fresh(self) -> bool:
        """Whether each read needs a scenario of its own (a script per attempt)."""
        return len(self.script(1.0)) > 1


def _answer(unit: float) -> list[Step]:
    return message_stream(blocks=[TextSpec(words(ANSWER), interval=0.06 * unit, first_delay=0.4 * unit)])


def _thinking(unit: float) -> list[list[Step]]:
    thinking = ThinkingSpec(THOUGHTS, first_delay=0.3 * unit, duration=1.6 * unit)
    answer = TextSpec(words(ANSWER), interval=0.06 * unit, first_delay=0.2 * unit)
    return [message_stream(thinking=thinking, blocks=[answer], thinking_tokens=320)]


def _truncated(unit: float) -> list[list[Step]]:
    return [message_stream(blocks=[TextSpec(words(LONG)[:45], interval=0.04 * unit, first_delay=0.3 * unit)],
                           stop_reason="max_tokens", output_tokens=256)]


def _cut(unit: float) -> list[list[Step]]:
    return [message_stream(blocks=[TextSpec(words(ANSWER)[:14], interval=0.06 * unit, first_delay=0.4 * unit)],
                           interrupt=[error_event(delay=0.3 * unit)])]


def _continued(unit: float) -> list[list[Step]]:
    """Overloaded mid-sentence; the continuation's request carries on from the last full sentence."""
    return [message_stream(blocks=[TextSpec(PROSE, interval=0.06 * unit, first_delay=0.4 * unit)],
                           interrupt=[error_event(delay=0.3 * unit)]),
            message_stream(blocks=[TextSpec(PROSE_REST, interval=0.06 * unit, first_delay=0.4 * unit)])]


def _slow(unit: float) -> list[list[Step]]:
    return [message_stream(blocks=[TextSpec(words(LONG)[:80], interval=0.1 * unit, first_delay=0.3 * unit)])]


KINDS: dict[str, Kind] = {kind.name: kind for kind in (
    Kind("answer", "A normal answer", lambda unit: [_answer(unit)]),
    Kind("thinking", "Thinking, then the answer", _thinking, model=REASONING, max_tokens=2048,
         thinking_budget=1024),
    Kind("truncated", "An answer cut at max_tokens", _truncated, max_tokens=256),
    Kind("retried", "Overloaded once, then answered", lambda unit: [[OVERLOADED_529], _answer(unit)], calls=2),
    Kind("overloaded", "Overloaded before the stream", lambda unit: [[OVERLOADED_529]], calls=ATTEMPTS),
    Kind("cut", "Overloaded mid-answer", _cut),
    Kind("continued", "Overloaded mid-answer, carried on", _continued, calls=2, continued=True),
    Kind("slow", "A long, slow answer (Stop leaves it)", _slow),
)}
"""The page's buttons, in order."""

CYCLE: tuple[tuple[str, int | None], ...] = (
    ("answer", None), ("truncated", None), ("retried", None), ("overloaded", None), ("cut", None), ("continued", None),
    ("slow", 3))
"""One cycle of the workload's reads: (kind, tokens after which the reader leaves, or None)."""


def cycles(requests: int) -> int:
    """Cycles of relayed reads in a demo of `requests` requests (one per `PER_CYCLE`, at least one)."""
    return max(1, requests // PER_CYCLE)


def provider_calls(requests: int) -> int:
    """Provider calls a demo of `requests` requests makes: the workload's and its relayed reads'."""
    return requests + cycles(requests) * sum(KINDS[kind].calls for kind, _ in CYCLE)


def page_events(event: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """The answer's text as `token` events (`text_events`), and thinking as `thinking` events."""
    out = text_events(event)
    delta = getattr(event, "delta", None) if getattr(event, "type", None) == "content_block_delta" else None
    if getattr(delta, "type", None) == "thinking_delta" and getattr(delta, "thinking", ""):
        out.append(("thinking", {"text": delta.thinking}))  # type: ignore[union-attr]
    return out


class Page:
    """The page and its relay endpoint on 127.0.0.1:`port` (0: any free port), served by uvicorn
    from a thread of its own; `start()`, then `stop()`."""

    def __init__(self, sim: Simulator, scale: float, port: int = 0) -> None:
        self.sim = sim
        self.unit = 1.0 / scale
        self._bind_port = port
        self._fresh = itertools.count(1)
        self._http: anthropic.DefaultAsyncHttpxClient | None = None
        self._busy = threading.Condition()
        self._in_flight = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port: int | None = None
        kinds = [{"name": k.name, "label": k.label} for k in KINDS.values()]
        page = resources.files("streamscope.tools").joinpath("demo_page.html").read_text(encoding="utf-8")
        self._html = page.replace("__KINDS__", json.dumps(kinds))

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("the demo page is not served")
        return f"http://127.0.0.1:{self.port}/"

    def app(self) -> ASGIApp:
        @contextlib.asynccontextmanager
        async def lifespan(_app: Starlette) -> AsyncIterator[None]:
            self._http = anthropic.DefaultAsyncHttpxClient()  # one pool for every relayed call
            try:
                yield
            finally:
                await self._http.aclose()

        routes = [Route("/", self._page), *client_routes(), Route("/relay/{kind}", self._relay)]
        return _Counted(Starlette(routes=routes, lifespan=lifespan), self)

    async def _page(self, request: Request) -> Response:
        return HTMLResponse(self._html, headers={"Cache-Control": "no-store"})

    def _scenario(self, kind: Kind) -> str:
        """The simulator's scenario for one read of `kind` (a new one for a script per attempt)."""
        name = f"page-{kind.name}-{next(self._fresh)}" if kind.fresh else f"page-{kind.name}"
        if kind.fresh:
            self.sim.add(Scenario(name, kind.script(self.unit)))
        return name

    async def _relay(self, request: Request) -> Response:
        kind = KINDS.get(request.path_params["kind"])
        if kind is None:
            return JSONResponse({"code": "not_found", "kinds": list(KINDS)}, status_code=404)
        client = anthropic.AsyncAnthropic(base_url=self.sim.url(self._scenario(kind)), api_key="demo", max_retries=0,
                                          http_client=self._http)
        thinking: ThinkingConfigParam | anthropic.Omit = anthropic.omit
        if kind.thinking_budget:
            thinking = {"type": "enabled", "budget_tokens": kind.thinking_budget}

        async def opened(messages: list[MessageParam]) -> Any:
            with route(ROUTE):
                return await client.messages.create(model=kind.model, max_tokens=kind.max_tokens, messages=messages,
                                                    thinking=thinking, stream=True)

        async def carried_on(partial: str) -> Any:
            return await opened(continuation_messages(PROMPT, partial))  # type: ignore[arg-type]

        return await relay(request, lambda: opened(PROMPT), heartbeat=HEARTBEAT, attempts=ATTEMPTS,
                           events=page_events, continuation=carried_on if kind.continued else None)

    def start(self) -> Page:
        """Bind the port (OSError if it cannot be), register the scripts, serve until `stop()`."""
        for kind in KINDS.values():
            if not kind.fresh:
                self.sim.add(Scenario(f"page-{kind.name}", kind.script(self.unit)))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", self._bind_port))
        except OSError:
            sock.close()
            raise
        config = uvicorn.Config(self.app(), http="h11", ws="none", loop="asyncio", lifespan="on", log_config=None,
                                log_level="warning", access_log=False, timeout_graceful_shutdown=2)
        server = self._server = uvicorn.Server(config)
        self.port = sock.getsockname()[1]
        self._thread = threading.Thread(target=asyncio.run, args=(server.serve(sockets=[sock]),),
                                        name=f"demo-page:{self.port}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("the demo page's server did not start")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        """Stop serving (streams still open are ended); idempotent."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)
        self._server = self._thread = None
        self.port = None

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Until no request is being answered (a relayed stream ends after its reader leaves)."""
        with self._busy:
            return self._busy.wait_for(lambda: self._in_flight == 0, timeout)


class _Counted:
    """The page's requests in flight, each until its response (a relayed stream: its end) is done."""

    def __init__(self, app: ASGIApp, page: Page) -> None:
        self.app = app
        self.page = page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        with self.page._busy:
            self.page._in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            with self.page._busy:
                self.page._in_flight -= 1
                self.page._busy.notify_all()


# -- The workload's reads: a browser's, over real HTTP ------------------------------------------------


async def read(client: httpx2.AsyncClient, url: str, leave_after: int | None = None) -> tuple[int, list[str]]:
    """Read one relayed stream as a browser does: its status and its events' names. With
    `leave_after`, the reader goes away after that many tokens (the connection is closed)."""
    names: list[str] = []
    async with client.stream("GET", url) as response:
        if not response.headers.get("content-type", "").startswith("text/event-stream"):
            await response.aread()
            return response.status_code, names
        buffer = ""
        async for text in response.aiter_text():
            buffer += text.replace("\r\n", "\n")
            *lines, buffer = buffer.split("\n")
            names += [line[len("event:"):].strip() for line in lines if line.startswith("event:")]
            if leave_after is not None and names.count("token") >= leave_after:
                break
    return response.status_code, names


async def browse(base: str, client: httpx2.AsyncClient) -> int:
    """One cycle of reads of the page's relay endpoint at `base`, at once; the reads that failed
    on the client's side (the relay's own failures are what the cycle is for)."""
    reads = [read(client, f"{base}relay/{kind}", leave_after) for kind, leave_after in CYCLE]
    done = await asyncio.gather(*reads, return_exceptions=True)
    return sum(isinstance(result, BaseException) for result in done)
