# ruff: noqa: F811 - the fixtures come from test_browser and test_relay
"""A real browser's EventSource resumes a dropped stream: headless Chromium, the connection between
it and the relay cut mid-answer by a proxy (what a network change or a recycling proxy does).

The EventSource reconnects by itself with `Last-Event-ID`; the relay, with a resume buffer,
answers with the rest of the same generation, so the page shows the whole answer and one `done`,
and the provider saw one request.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from relay_app import make_app
from served import serving
from test_browser import PAGE, Tab, browser, context, opened  # noqa: F401 - fixtures
from test_relay import on, requests_for  # noqa: F401 - fixtures

from streamscope.serve import MemoryBuffer
from streamscope.simulator import Scenario, Simulator, TextSpec, message_stream
from streamscope.simulator.catalog import LONG, words

CUT_AFTER = 3
"""Token events the proxy lets through on a connection it cuts."""


class CuttingProxy:
    """A TCP proxy in front of the relay: a response to a request whose URL has `cut=1` and that
    carries no `Last-Event-ID` is cut (both sockets closed) after `CUT_AFTER` token events."""

    def __init__(self, upstream: str) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        self.upstream = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            state = {"cutting": False}
            threading.Thread(target=self._up, args=(client, server, state), daemon=True).start()
            threading.Thread(target=self._down, args=(server, client, state), daemon=True).start()

    def _up(self, client: socket.socket, server: socket.socket, state: dict[str, bool]) -> None:
        while data := _recv(client):
            head = data.lower()
            if b" /relay/" in head:
                state["cutting"] = b"cut=1" in head and b"last-event-id" not in head
            server.sendall(data)
        _close(server)

    def _down(self, server: socket.socket, client: socket.socket, state: dict[str, bool]) -> None:
        seen = 0
        while data := _recv(server):
            if state["cutting"]:
                seen += data.count(b"event: token")
                if seen >= CUT_AFTER:
                    keep = _through_nth(data, b"event: token", CUT_AFTER - (seen - data.count(b"event: token")))
                    client.sendall(keep)
                    time.sleep(0.2)  # the browser reads the kept bytes before the close, as a rule
                    self.cuts += 1
                    break
            client.sendall(data)
        _close(client)
        _close(server)

    def close(self) -> None:
        self.listener.close()


def _recv(sock: socket.socket) -> bytes:
    try:
        return sock.recv(65536)
    except OSError:
        return b""


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _through_nth(data: bytes, marker: bytes, n: int) -> bytes:
    """`data` up to the end of the event holding the n-th `marker` (its blank line included)."""
    at = -1
    for _ in range(n):
        at = data.index(marker, at + 1)
    return data[: data.index(b"\r\n\r\n", at) + 4]


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        # 60 words 0.1 s apart: still generating when EventSource reconnects, about 3 s after the cut.
        simulator.add(Scenario.single("browser_long", message_stream(blocks=[TextSpec(words(LONG)[:60],
                                                                                       interval=0.1)])))
        yield simulator


@pytest.fixture(scope="module")
def base(sim: Simulator) -> Iterator[str]:
    # EventSource waits about 3 s before it reconnects: the grace must be longer (the default is 15 s).
    with serving(make_app(sim, page=str(PAGE), resume=MemoryBuffer(grace=10.0))) as url:
        proxy = CuttingProxy(url)
        yield proxy.url
        proxy.close()


def test_an_eventsource_resumes_a_cut_stream(context: Any, base: str, sim: Simulator, on: Any) -> None:
    tab: Tab = opened(context, base)
    state = on()
    since = len(sim.requests)
    path = "/relay/anthropic/create/browser_long?resume=1&cut=1"
    got = tab.read("eventsource", path, timeoutMs=30_000)
    events = got.run["events"]
    tokens = [e for e in events if e["event"] == "token"]
    assert len(tokens) == 60, f"the whole answer reached the page: {len(tokens)} tokens"
    assert [e["event"] for e in events].count("done") == 1 and events[-1]["event"] == "done"
    rid = events[0]["id"].split(":")[0]
    assert [e["id"] for e in events] == [f"{rid}:{n}" for n in range(1, 62)], "no event twice, none missing"
    assert got.run["opens"] == 2, "the EventSource reconnected once"
    first, again = tab.responses_for(path)
    assert (first.status, again.status) == (200, 200)
    # The browser resumes from the last event it dispatched: the proxy let CUT_AFTER through, but a
    # browser that reads the last bytes together with the close may drop the event they ended.
    [_, before] = got.run["eventsAtOpen"]
    assert 1 <= before <= CUT_AFTER, f"the cut came after {CUT_AFTER} events, the page had {before}"
    assert again.request.all_headers().get("last-event-id") == f"{rid}:{before}"
    assert len(requests_for(sim, "browser_long", since)) == 1, "the resume started no provider request"
    # The page dispatches "done" as it arrives; the resumed connection counts its outcome when its body
    # ends, a moment later on the server.
    deadline = time.monotonic() + 10
    while not state.points("streamscope.relay.resumes") and time.monotonic() < deadline:
        time.sleep(0.05)
    points = {p.attributes["streamscope.resume.outcome"]: p.value for p in state.points("streamscope.relay.resumes")}
    assert points == {"resumed": 1}
    deadline = time.monotonic() + 5
    while not state.logs.records and time.monotonic() < deadline:
        time.sleep(0.05)
    [record] = state.logs.records
    assert record.__dict__["outcome"] == "done" and record.__dict__["resumes"] == 1, "resumed while generated"
    tab.page.close()
