"""One worker of a two-worker service, in a process of its own, for the browser client's tests:
the relay with `RedisBuffer` and a fleet breaker on `RedisStore`, the client at
`/streamscope/client.js`, and a page that reads the relay with it (client_fleet_page.html).

    python client_worker.py <name> <redis url> <simulator base url>

Prints its base URL, then serves until killed:
* `GET /`: the page; `/streamscope/client.js` (and `.d.ts`): the client, as the package ships it;
* `GET|POST /relay/<scenario>`: one call of the real `anthropic` SDK to the simulator's scenario,
  relayed with resume; `?model=` the request's model, `?attempts=` the relay's, `?continue=1` a
  continuation that carries a failed answer on.
Every answer carries `X-Worker: <name>` and `Connection: close` (each request is a connection of
its own, so the test's balancer places each request). CORS lets a page of any origin read the
relay, with the client's headers (`ALLOW_HEADERS`, `EXPOSE_HEADERS`).
"""

from __future__ import annotations

import asyncio
import socket
import sys
from pathlib import Path
from typing import Any

import anthropic
import uvicorn
from opentelemetry.sdk.trace import TracerProvider
from starlette.applications import Starlette
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from streamscope import AnthropicInstrumentor, Breaker
from streamscope.serve import (
    ALLOW_HEADERS,
    EXPOSE_HEADERS,
    RedisBuffer,
    RedisStore,
    client_routes,
    continuation_messages,
    relay,
)

USER: list[Any] = [{"role": "user", "content": "How do streams fail?"}]
PAGE = Path(__file__).with_name("client_fleet_page.html")
GRACE = 30.0
"""Long: a generation stopped sooner than this was stopped by the client's cancel."""


class Marked:
    """`X-Worker` and `Connection: close` on every answer."""

    def __init__(self, app: ASGIApp, name: str) -> None:
        self.app, self.name = app, name.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def marked(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"x-worker", self.name), (b"connection", b"close")]
            await send(message)

        await self.app(scope, receive, marked)


def main() -> None:
    name, redis_url, sim_base = sys.argv[1], sys.argv[2], sys.argv[3]
    AnthropicInstrumentor().instrument(tracer_provider=TracerProvider(),
                                       breaker=Breaker(failures=2, window=60, cool_down=20,
                                                       shared=RedisStore(redis_url)))
    buffer = RedisBuffer(redis_url, grace=GRACE, ttl=60.0)

    async def relayed(request: Request) -> Response:
        q = request.query_params
        client = anthropic.AsyncAnthropic(base_url=sim_base + request.path_params["scenario"], api_key="k",
                                          max_retries=0)
        params: dict[str, Any] = {"model": q.get("model", "claude-sim-1"), "max_tokens": 1024}

        async def carried_on(partial: str) -> Any:
            return await client.messages.create(**params, messages=continuation_messages(USER, partial), stream=True)

        return await relay(request, lambda: client.messages.create(**params, messages=USER, stream=True),
                           resume=buffer, attempts=int(q.get("attempts", "3")),
                           continuation=carried_on if q.get("continue") == "1" else None)

    routes = [Route("/", lambda request: FileResponse(PAGE)), *client_routes(),
              Route("/relay/{scenario}", relayed, methods=["GET", "POST"])]
    app = Marked(CORSMiddleware(Starlette(routes=routes), allow_origins=["*"], allow_methods=["GET", "POST"],
                                allow_headers=[*ALLOW_HEADERS, "Content-Type"], expose_headers=EXPOSE_HEADERS), name)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)  # listening before the URL is out: a connection waits for uvicorn, never refused
    print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(app, http="h11", loop="asyncio", lifespan="off", log_config=None, log_level="warning")
    asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
