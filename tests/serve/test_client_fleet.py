# ruff: noqa: F811 - the fixture `browser` comes from test_browser
"""The browser client (`client.js`, as the package ships it) in Debian's headless Chromium, against
a service of two uvicorn workers, each a process of its own, sharing a real Redis (resume buffer
and fleet breaker), behind a balancer that places each request on a worker.

A stream cut mid-answer resumes on the other worker; a page reloaded mid-answer follows the same
answer with its stored key; a breaker opened by one worker shows its wait on a page served by the
other; a continuation's seam leaves the page with the answer and no half sentence; `abort()` closes
the provider connection at once although the buffer's grace would keep it open; a worker killed
mid-answer ends the page's stream with one error, the answer so far kept.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
import pytest
from playwright.sync_api import Browser, Page
from test_browser import browser  # noqa: F401 - fixture

from redis_server import RedisServer
from streamscope.simulator import Simulator

CUT_AFTER = 3
"""Token events the balancer lets through on a connection it cuts."""
WORKER = Path(__file__).with_name("client_worker.py")


@dataclass
class Placed:
    """One request as the balancer saw it: its request line, the headers the client sent, the worker."""

    line: str
    headers: dict[str, str]
    worker: int


@dataclass
class Balancer:
    """A TCP balancer in front of the workers, placing each connection (one request each: the
    workers close every connection after its answer): a request whose `Idempotency-Key` came
    before (a reconnect, a reload, a cancel) goes to another worker than its first did, any other
    in turn. The first response to a request with `cut=1` in its URL is cut after `CUT_AFTER`
    token events (what a network change does to a stream)."""

    upstreams: list[str]
    placed: list[Placed] = field(default_factory=list)
    first_worker: dict[str, int] = field(default_factory=dict)
    turn: int = 0

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            data = _recv(client)
            if not data:
                _close(client)
                return
            head += data
        line, *rest = head.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in rest)}
        key = headers.get("idempotency-key")
        with self.lock:
            if key is not None and key in self.first_worker:
                worker, cut = (self.first_worker[key] + 1) % len(self.upstreams), False
            else:
                worker, self.turn = self.turn, (self.turn + 1) % len(self.upstreams)
                cut = "cut=1" in line and key is not None
                if key is not None:
                    self.first_worker[key] = worker
            self.placed.append(Placed(line, headers, worker))
        host, port = self.upstreams[worker].removeprefix("http://").split(":")
        try:
            server = socket.create_connection((host, int(port)))
        except OSError:
            _close(client)
            return
        server.sendall(head)
        threading.Thread(target=self._up, args=(client, server), daemon=True).start()
        self._down(server, client, cut)

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        while data := _recv(client):
            server.sendall(data)
        _close(server)

    def _down(self, server: socket.socket, client: socket.socket, cut: bool) -> None:
        seen = 0
        while data := _recv(server):
            if cut:
                before = seen
                seen += data.count(b"event: token")
                if seen >= CUT_AFTER:
                    client.sendall(_through_nth(data, b"event: token", CUT_AFTER - before))
                    time.sleep(0.2)  # the browser reads the kept bytes before the close, as a rule
                    break
            client.sendall(data)
        _close(client)
        _close(server)

    def for_key(self, key: str) -> list[Placed]:
        with self.lock:
            return [p for p in self.placed if p.headers.get("idempotency-key") == key]

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
    at = -1
    for _ in range(n):
        at = data.index(marker, at + 1)
    return data[: data.index(b"\r\n\r\n", at) + 4]


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with Simulator() as simulator:
        yield simulator


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@dataclass
class Service:
    workers: list[subprocess.Popen[str]]
    urls: list[str]
    balancer: Balancer


@pytest.fixture(scope="module")
def service(sim: Simulator, redis: RedisServer) -> Iterator[Service]:
    workers, urls = [], []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for name in ("a", "b"):
        proc = subprocess.Popen([sys.executable, str(WORKER), name, redis.url, sim.url("")], stdout=subprocess.PIPE,
                                text=True, env=env)
        workers.append(proc)
        assert proc.stdout is not None
        urls.append(proc.stdout.readline().strip())
    balancer = Balancer(urls)
    try:
        yield Service(workers, urls, balancer)
    finally:
        balancer.close()
        for proc in workers:
            proc.kill()
            proc.wait(10)


@pytest.fixture
def page(browser: Browser, service: Service) -> Iterator[Page]:
    context = browser.new_context()
    page = context.new_page()
    page.goto(service.balancer.url + "/")
    page.wait_for_function("typeof window.ask === 'function'")
    yield page
    context.close()


def ask(page: Page, path: str, **options: Any) -> dict[str, Any]:
    run: dict[str, Any] = page.evaluate("([path, options]) => window.ask(path, options)", [path, options])
    return run


def provider_requests(sim: Simulator, scenario: str, since: int) -> list[Any]:
    return [r for r in sim.requests[since:] if r.scenario == scenario]


def tokens(run: dict[str, Any]) -> list[str]:
    return [e["data"]["text"] for e in run["events"] if e["name"] == "token"]


def ids_in_order(run: dict[str, Any]) -> None:
    rid = run["events"][0]["id"].split(":")[0]
    assert [e["id"] for e in run["events"]] == [f"{rid}:{n}" for n in range(1, len(run["events"]) + 1)]


def test_a_cut_stream_resumes_on_the_other_worker(page: Page, service: Service, sim: Simulator) -> None:
    since = len(sim.requests)
    run = ask(page, "/relay/slow_answer?cut=1")
    assert run["ending"]["type"] == "done", run["ending"]
    assert len(tokens(run)) == 30 and run["shown"] == "".join(tokens(run)) == run["ending"]["text"]
    ids_in_order(run)
    assert len(run["reconnects"]) == 1
    first, again = service.balancer.for_key(run["key"])
    assert first.worker != again.worker, "the reconnect reached the other worker"
    assert "last-event-id" not in first.headers and again.headers["last-event-id"].endswith(f":{CUT_AFTER}")
    assert first.line == again.line and again.headers["content-type"] == "application/json"
    assert len(provider_requests(sim, "slow_answer", since)) == 1, "the resume started no provider request"


def test_a_reloaded_page_follows_the_same_answer(page: Page, service: Service, sim: Simulator) -> None:
    since = len(sim.requests)
    page.evaluate("() => { window.ask('/relay/slow_answer', {persist: true}); }")
    page.wait_for_function("window.current && window.current.text.split(' ').length > 3", timeout=20_000)
    key = page.evaluate("window.current.key")
    page.reload()
    run: dict[str, Any] = page.evaluate("window.resumed")
    assert run["key"] == key and run["ending"]["type"] == "done", run["ending"]
    assert len(tokens(run)) == 30 and run["shown"] == "".join(tokens(run)), "the whole answer, from its start"
    ids_in_order(run)
    _, again = service.balancer.for_key(key)
    assert "last-event-id" not in again.headers, "the reloaded page sent its key alone"
    assert len(provider_requests(sim, "slow_answer", since)) == 1, "the reload started no provider request"


def test_an_open_breaker_shows_its_wait(page: Page, service: Service, sim: Simulator) -> None:
    path = "/relay/http_529?attempts=1&model=breaker-model"
    since = len(sim.requests)
    with httpx2.Client(timeout=30) as client:  # two failures on worker a open it for the fleet
        for _ in range(2):
            assert client.get(service.urls[0] + path).status_code == 503
    time.sleep(1.5)  # every worker sees it open within a second
    for _ in range(2):  # one read on each worker
        run = ask(page, path)
        ending = run["ending"]
        assert (ending["type"], ending["status"], ending["code"]) == ("error", 503, "circuit_open"), ending
        assert 1 <= ending["retryAfter"] <= 20 and ending["partial"] is False
        assert f"in {ending['retryAfter']} s" in run["endingShown"], run["endingShown"]
    assert len(provider_requests(sim, "http_529", since)) == 2, "an open breaker sends nothing"


def test_a_continuation_seam_leaves_the_answer_whole(page: Page, sim: Simulator) -> None:
    since = len(sim.requests)
    run = ask(page, "/relay/prose_overloaded?continue=1")
    assert run["ending"]["type"] == "done", run["ending"]
    [seam] = run["seams"]
    assert seam["drop"] > 0 and seam["continuation"] == 1
    shown: list[str] = []
    for event in run["events"]:  # the page's text, as the seam says to make it (in code points)
        if event["name"] == "token":
            shown += list(event["data"]["text"])
        elif event["name"] == "seam":
            shown = shown[: len(shown) - event["data"]["drop"]]
    assert run["shown"] == "".join(shown) and run["shown"].rstrip().endswith(".")
    assert len(provider_requests(sim, "prose_overloaded", since)) == 2


def test_abort_closes_the_provider_connection_at_once(page: Page, service: Service, sim: Simulator) -> None:
    since = len(sim.requests)
    run = ask(page, "/relay/slow_answer", abortAfter=2)
    left = time.monotonic() - (time.time() - run["abortedAt"] / 1000)
    assert run["ending"] == {"type": "aborted", "requestId": run["ending"]["requestId"], "partial": True,
                             "text": run["shown"]}
    [upstream] = provider_requests(sim, "slow_answer", since)
    log = sim.wait_for_outcome(sim.requests.index(upstream), timeout=20)
    assert log.outcome == "disconnected" and log.ended is not None
    assert log.ended - left < 8.0, f"closed {log.ended - left:.1f} s after abort() (the grace is 30 s)"
    cancels = [p for p in service.balancer.for_key(run["key"]) if p.headers.get("streamscope-cancel") == "1"]
    assert len(cancels) == 1


def test_a_page_on_another_origin_reads_headers_and_resumes(browser: Browser, service: Service,
                                                            sim: Simulator) -> None:
    """The page from http://localhost:<port>, the relay at http://127.0.0.1:<port>: with the CORS of
    serving.md (ALLOW_HEADERS, EXPOSE_HEADERS), the client sends its key and Last-Event-ID through
    the preflight, and reads the request id and Retry-After."""
    context = browser.new_context()
    try:
        page = context.new_page()
        page.goto(service.balancer.url.replace("127.0.0.1", "localhost") + "/")
        page.wait_for_function("typeof window.ask === 'function'")
        since = len(sim.requests)
        run = ask(page, service.balancer.url + "/relay/slow_answer?cut=1")
        assert run["ending"]["type"] == "done" and len(tokens(run)) == 30, run["ending"]
        assert len(run["reconnects"]) == 1 and len(provider_requests(sim, "slow_answer", since)) == 1
        assert run["opens"][0]["requestId"] == run["ending"]["requestId"], "X-Request-Id read across origins"
        path = "/relay/http_529?attempts=1&model=cors-model"
        with httpx2.Client(timeout=30) as client:  # a breaker of its own, opened by worker a
            for _ in range(2):
                assert client.get(service.urls[0] + path).status_code == 503
        time.sleep(1.5)
        ending = ask(page, service.balancer.url + path)["ending"]
        assert ending["code"] == "circuit_open" and ending["retryAfter"] is not None, "Retry-After read"
    finally:
        context.close()


def test_a_killed_worker_ends_the_stream_with_one_error(page: Page, service: Service, sim: Simulator) -> None:
    page.evaluate("() => { window.ask('/relay/slow_answer'); }")
    page.wait_for_function("window.current && window.current.text.split(' ').length > 3", timeout=20_000)
    [first] = service.balancer.for_key(page.evaluate("window.current.key"))
    service.workers[first.worker].send_signal(signal.SIGKILL)
    killed = time.monotonic()
    run: dict[str, Any] = page.evaluate("new Promise(resolve => window.current.ended.then(resolve))")
    assert time.monotonic() - killed < 20, "ended within the owner's lease and the client's retries"
    assert run["type"] == "error" and run["code"] == "upstream_unreachable" and run["partial"] is True, run
    assert run["text"] and page.text_content("#answer") == run["text"], "the answer so far is kept"
