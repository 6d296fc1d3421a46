"""The relay's own SSE response on a real uvicorn server: a server that shuts down gracefully lets
an open stream run to its terminal event, and a `HEAD` gets the headers with no stream (the
provider connection the relay opened is closed, and the stream's one record written)."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import pytest
import uvicorn
from served import SseParser
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from streamscope.serve import relay
from streamscope.simulator import Simulator

USER = [{"role": "user", "content": "How do streams fail?"}]


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        yield simulator


def app(sim: Simulator) -> Starlette:
    async def route(request: Request) -> Response:
        client = anthropic.AsyncAnthropic(base_url=sim.url(request.path_params["scenario"]), api_key="test-key")
        return await relay(request, lambda: client.messages.create(model="claude-sim-1", max_tokens=256,
                                                                   messages=USER, stream=True))
    return Starlette(routes=[Route("/relay/{scenario}", route)])


class Server:
    """uvicorn in a thread, on a free loopback port, with a graceful-shutdown timeout."""

    def __init__(self, asgi: Any, graceful: float) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(asgi, http="h11", ws="none", loop="asyncio", lifespan="off",
                                                    log_config=None, log_level="warning", access_log=False,
                                                    timeout_graceful_shutdown=graceful))
        self.thread = threading.Thread(target=asyncio.run, args=(self.server.serve(sockets=[self.sock]),),
                                       daemon=True)
        self.thread.start()
        started = time.monotonic()
        while not self.server.started:
            assert time.monotonic() - started < 10, "uvicorn did not start"
            time.sleep(0.005)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def test_a_graceful_shutdown_lets_an_open_stream_finish(sim: Simulator) -> None:
    server = Server(app(sim), graceful=30)
    parser = SseParser()
    try:
        with httpx2.Client(timeout=30) as client, client.stream("GET", server.url + "/relay/slow_answer") as response:
            assert response.status_code == 200
            stopping = None
            for text in response.iter_text():
                parser.feed(text)
                if stopping is None and any(e.event == "token" for e in parser.events):
                    stopping = threading.Thread(target=server.stop)  # mid-answer (about 3 s long)
                    stopping.start()
    finally:
        server.stop()
    events = [e.event for e in parser.events]
    assert stopping is not None and events[-1] == "done" and events.count("done") == 1
    assert events.count("token") == 30, "the whole answer went out after the server was told to stop"
    assert not server.thread.is_alive()


def test_a_head_request_gets_the_headers_and_no_stream(sim: Simulator, caplog: pytest.LogCaptureFixture) -> None:
    server = Server(app(sim), graceful=5)
    since = len(sim.requests)
    try:
        with caplog.at_level(logging.INFO, logger="streamscope.streams"):
            response = httpx2.head(server.url + "/relay/slow_answer", timeout=30)
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
            assert response.content == b""
            deadline = time.monotonic() + 20
            while not [r for r in caplog.records if r.name == "streamscope.streams"]:
                assert time.monotonic() < deadline, "the stream's record was never written"
                time.sleep(0.05)
    finally:
        server.stop()
    [record] = [r for r in caplog.records if r.name == "streamscope.streams"]
    assert record.__dict__["outcome"] == "client_disconnect"
    assert [r.scenario for r in sim.requests[since:]] == ["slow_answer"], "one provider request, closed"
