"""A browser that stops reading is cut after `send_timeout`; one that reads slowly never is.

A real uvicorn server whose connections have a small kernel send buffer relays a stream of large
deltas from the simulator to a browser on a raw socket with a small receive buffer: a browser that
stops reading holds up the relay's sends within a few dozen events, and one that reads slowly
holds up each send for a moment. The stuck one is cut once a send has waited `send_timeout`
(never before): the provider stream is closed, the call is `cancelled`, the record's outcome
`client_disconnect`, and the connection ends with no terminal event. The slow one gets the whole
answer and `done`, however long the whole takes.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from typing import Any

import h11
import pytest
import test_relay
from relay_app import make_app
from served import SseParser, serving
from test_relay import On, Records, agrees, requests_for

from streamscope.simulator import Scenario, Simulator, TextSpec, message_stream

DELTA = "x" * 1000
FLOOD = 300
"""Deltas of 1,000 characters: about 330 KB relayed, several times what the buffers between hold."""
SEND_TIMEOUT = 2.0
"""The stuck browser's: it is cut no sooner."""
SLOW_SEND_TIMEOUT = 3.0
"""The slow browser's: each of its sends waits about 20 ms, the whole answer takes about twice this."""
LONG_FLOOD = 600
"""The slow browser's answer: about 660 KB, read at about 100 KB a second."""


on = test_relay.on
"""The relay tests' fixture: streamscope on for both SDKs, with spans, metrics and the stream log."""


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        simulator.add(Scenario.single("flood", message_stream(blocks=[TextSpec([DELTA] * FLOOD, interval=0.0)])))
        simulator.add(Scenario.single("long_flood", message_stream(blocks=[
            TextSpec([DELTA] * LONG_FLOOD, interval=0.0)])))
        yield simulator


@pytest.fixture(scope="module")
def port(sim: Simulator) -> Iterator[int]:
    with serving(make_app(sim), send_buffer=4096) as url:
        yield int(url.rsplit(":", 1)[1])


@pytest.fixture
def server_log() -> Iterator[Records]:
    handler = Records()
    handler.setLevel(logging.DEBUG)
    logging.getLogger("uvicorn.error").addHandler(handler)
    yield handler
    logging.getLogger("uvicorn.error").removeHandler(handler)


class Browser:
    """An HTTP/1.1 client on a raw socket with a 4 KiB receive buffer, read as the test says."""

    def __init__(self, port: int, path: str) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(30)
        self.sock.connect(("127.0.0.1", port))
        self.http = h11.Connection(h11.CLIENT)
        self.sock.sendall(self.http.send(h11.Request(method="GET", target=path, headers=[
            ("Host", "127.0.0.1"), ("Accept", "text/event-stream")])) + self.http.send(h11.EndOfMessage()))
        self.status = 0
        self.parser = SseParser()
        self.ended = False
        """Whether the body ended as HTTP says (its last chunk), not by the connection closing."""

    def read(self, size: int = 4096) -> bool:
        """Read once (at most `size` bytes) and parse; False once the connection is closed."""
        data = self.sock.recv(size)
        self.http.receive_data(data)
        while True:
            try:
                got = self.http.next_event()
            except h11.RemoteProtocolError:  # closed in the middle of the body
                return False
            if got is h11.NEED_DATA or got is h11.PAUSED:
                break
            if isinstance(got, h11.Response):
                self.status = got.status_code
            elif isinstance(got, h11.Data):
                self.parser.feed(bytes(got.data).decode())
            elif isinstance(got, h11.EndOfMessage):
                self.ended = True
                return False
            elif isinstance(got, h11.ConnectionClosed):
                return False
        return bool(data)

    def close(self) -> None:
        self.sock.close()


def test_a_browser_that_stops_reading_is_cut_after_the_send_timeout(port: int, sim: Simulator, on: Any,
                                                                    server_log: Records) -> None:
    state: On = on()
    since = len(sim.requests)
    browser = Browser(port, f"/relay/anthropic/create/flood?send_timeout={SEND_TIMEOUT}")
    try:
        started = time.monotonic()
        while browser.status == 0 or not browser.parser.events:
            assert browser.read(), "the connection closed before the first event"
        assert browser.status == 200
        # The browser reads no more: the relay fills the buffers between, then its send waits.
        [record] = state.wait_for_log(timeout=30)
        cut_after = time.monotonic() - started
        assert cut_after >= SEND_TIMEOUT, "the relay was cut before any send had waited send_timeout"
        fields = record.__dict__
        assert fields["outcome"] == "client_disconnect"
        assert fields["chunks"] < FLOOD, "the relay stopped while the provider still had deltas to send"
        # The call is ended as the browser's leaving ends it (the simulator may have written the
        # whole answer into the socket's buffers by then: its outcome says nothing here).
        assert state.spans()[-1].attributes["streamscope.class"] == "cancelled"
        assert len(requests_for(sim, "flood", since)) == 1
        # What was buffered still arrives; then the connection ends with no terminal event.
        while browser.read(65536):
            pass
        assert not browser.ended, "the body ended as if complete"
        assert not [e for e in browser.parser.events if e.event in ("done", "error")]
        # `chunks` counts the event whose send was waiting when the cut came; it never arrives.
        assert len(browser.parser.events) == fields["chunks"] - 1
    finally:
        browser.close()
    # The server logs one line saying the response ended unfinished, not a traceback.
    assert not [r for r in server_log.records if r.exc_info], [r.getMessage() for r in server_log.records]


def test_a_slow_browser_that_keeps_reading_is_never_cut(port: int, sim: Simulator, on: Any) -> None:
    state: On = on()
    browser = Browser(port, f"/relay/anthropic/create/long_flood?send_timeout={SLOW_SEND_TIMEOUT}")
    try:
        started = time.monotonic()
        while browser.read(2048):  # 2 KiB every 20 ms: about 100 KB a second, each send held a moment
            time.sleep(0.02)
        took = time.monotonic() - started
    finally:
        browser.close()
    assert browser.status == 200 and browser.ended
    events = browser.parser.events
    assert [e.event for e in events] == ["token"] * LONG_FLOOD + ["done"]
    fields = agrees(state, _got(browser), "done")
    assert fields["chunks"] == LONG_FLOOD
    assert fields["duration"] > SLOW_SEND_TIMEOUT, "the whole took longer than send_timeout: only a send is bounded"
    assert took >= fields["duration"] - 0.5


def _got(browser: Browser) -> Any:
    from test_relay import Got

    [response_id] = {e.id.split(":")[0] for e in browser.parser.events if e.id}
    return Got(browser.status, {"x-request-id": response_id}, "", browser.parser.events, browser.parser.comments)

