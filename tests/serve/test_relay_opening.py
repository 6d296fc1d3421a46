"""Where the relay calls `open_stream`: on the event loop when every SDK client it names is an async
one (the call sends nothing until awaited or entered, and a burst of requests then starts no worker
thread per request), else on a worker thread (a sync call sends its request when called, which
would block the loop). Real uvicorn, the real SDKs, the simulator."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
import openai
import pytest
from served import SseParser, serving
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from streamscope.serve import relay
from streamscope.simulator import Simulator

USER = [{"role": "user", "content": "How do streams fail?"}]
LOOP: list[int] = []
OPENED: list[int] = []


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with Simulator() as sim:
        async def route(request: Request) -> Response:
            LOOP.append(threading.get_ident())
            kind = request.path_params["kind"]
            if kind in ("anthropic-async", "anthropic-sync", "stream-sync"):
                client: Any = (anthropic.AsyncAnthropic if kind == "anthropic-async" else anthropic.Anthropic)(
                    base_url=sim.url("complete"), api_key="test-key")
                if kind == "stream-sync":
                    def open_stream() -> Any:
                        OPENED.append(threading.get_ident())
                        return client.messages.stream(model="claude-sim-1", max_tokens=64, messages=USER)
                    return await relay(request, open_stream)

                def open_stream() -> Any:
                    OPENED.append(threading.get_ident())
                    return client.messages.create(model="claude-sim-1", max_tokens=64, messages=USER, stream=True)
                return await relay(request, open_stream)
            if kind == "openai-async":
                oclient = openai.AsyncOpenAI(base_url=sim.openai_url("chat_complete"), api_key="test-key")
                return await relay(request, lambda: OPENED.append(threading.get_ident()) or
                                   oclient.chat.completions.create(model="gpt-sim", messages=USER, stream=True))
            # Both kinds named: which one it calls shows only once called.
            sync = anthropic.Anthropic(base_url=sim.url("complete"), api_key="test-key")
            asynchronous = anthropic.AsyncAnthropic(base_url=sim.url("complete"), api_key="test-key")

            def either() -> Any:
                OPENED.append(threading.get_ident())
                chosen = asynchronous if request.query_params.get("sync") != "1" else sync
                return chosen.messages.create(model="claude-sim-1", max_tokens=64, messages=USER, stream=True)
            return await relay(request, either)

        with serving(Starlette(routes=[Route("/relay/{kind}", route)])) as url:
            yield url


def answer(base: str, path: str) -> list[str]:
    parser = SseParser()
    with httpx2.Client(timeout=30) as client, client.stream("GET", base + path) as response:
        assert response.status_code == 200
        for text in response.iter_text():
            parser.feed(text)
    return [e.event for e in parser.events]


@pytest.mark.parametrize(("kind", "on_loop"), [
    ("anthropic-async", True), ("openai-async", True),
    ("anthropic-sync", False), ("stream-sync", False), ("both", False), ("both?sync=1", False)])
def test_where_open_stream_is_called(base: str, kind: str, on_loop: bool) -> None:
    del LOOP[:], OPENED[:]
    events = answer(base, f"/relay/{kind}")
    assert events[-1] == "done" and events.count("done") == 1 and "token" in events
    assert len(LOOP) == len(OPENED) == 1
    assert (OPENED[0] == LOOP[0]) is on_loop, "on the loop's thread" if not on_loop else "on a worker thread"
